"""The SDK's guards, from Python: tokens that cannot be sent are refused before anything is sent,
durations too long for the clock are refused, the drop-in makes max_retries + 1 attempts for every
failure (a refused connection included), a 401 names the token, and the server says "listening on"
once."""

import socket

import pytest

from conftest import Server
from hf3fs_meta import Client, Hf3fsGlobalMetadataClient, InvalidArgumentError, MetadataError


@pytest.fixture
def refusing_url():
    """A loopback port where nothing listens for as long as the test runs: bound, never listening,
    so a connect is refused and no other test can take the port meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def sent_requests(server) -> int:
    """Requests any route answered, from /metrics (its own GET counted once it is answered)."""
    _, _, data = server.request("GET", "/metrics")
    total = 0
    for line in data.decode().splitlines():
        if line.startswith("hf3fs_meta_requests_total{") and 'route="/metrics"' not in line:
            total += int(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("token", ["t\r\nX-Injected: yes", "with space", "t\x00", "caf\u00e9", "tab\t"])
def test_a_token_that_cannot_be_sent_is_refused_naming_token_argument(server, token):
    with pytest.raises(InvalidArgumentError) as caught:
        Client(server.url, token=token)
    assert caught.value.code == "invalid_argument"
    assert caught.value.detail.startswith("token=: byte 0x")
    assert "is not visible ASCII (0x21-0x7E)" in caught.value.detail
    assert sent_requests(server) == 0


def test_a_token_from_the_environment_is_refused_naming_the_variable(server, monkeypatch):
    monkeypatch.setenv("HF3FS_META_TOKEN", "t\r\nX-Injected: yes")
    for make in (lambda: Client(server.url), lambda: Hf3fsGlobalMetadataClient(server.url)):
        with pytest.raises(InvalidArgumentError) as caught:
            make()
        assert caught.value.detail.startswith("$HF3FS_META_TOKEN: byte 0x0D at offset 1 ")
    # A token given wins over the environment, and is sent.
    assert Client(server.url, token="fine-token").batch_exists(["k"]) == [False]
    assert sent_requests(server) == 1


@pytest.mark.parametrize("field", ["deadline", "timeout"])
def test_durations_too_long_for_the_clock_are_refused_not_overflowed(server, field):
    with pytest.raises(ValueError) as caught:
        Client(server.url, **{field: 1e30})
    assert str(caught.value) == (f"{field}: at most 3153600000 seconds (100 years, the longest the client "
                                 "measures), got 1e+30")
    with pytest.raises(ValueError, match=f"{field}: must be a positive number of seconds, got inf"):
        Client(server.url, **{field: float("inf")})
    # Just below the limit: a working client (before, 1e30 failed at once with "deadline of -9... s reached").
    assert Client(server.url, **{field: 3.1e9}).batch_exists(["k"]) == [False]


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_the_drop_in_makes_max_retries_plus_one_attempts_against_a_refused_port(refusing_url, max_retries):
    client = Hf3fsGlobalMetadataClient(refusing_url, max_retries=max_retries)
    for call in (lambda: client.batch_key_exists(["k"]), lambda: client.allocate_pages_for_keys(0, ["k"])):
        with pytest.raises(MetadataError) as caught:
            call()
        error = caught.value
        assert error.code == "connection_failed"
        assert error.sent is False
        assert error.attempts == max_retries + 1
        assert error.stop_reason.startswith(f"retry policy exhausted after {max_retries + 1} attempt")


def test_the_client_still_rides_out_a_refused_port_until_its_deadline(refusing_url):
    with pytest.raises(MetadataError) as caught:
        Client(refusing_url, deadline=2.0).batch_exists(["k"])
    assert caught.value.code == "connection_failed"
    # The first four backoffs are at most 50 + 100 + 200 + 400 ms: a fifth attempt fits in 2 s.
    assert caught.value.attempts > 4
    assert "deadline of 2 s" in caught.value.stop_reason


def test_a_401_names_the_token_and_where_to_set_it(server_binary, tmp_path, monkeypatch):
    monkeypatch.delenv("HF3FS_META_TOKEN", raising=False)
    token_file = tmp_path / "token"
    token_file.write_text("py-token\n")
    guarded = Server(server_binary, "--auth-token-file", str(token_file))
    try:
        with pytest.raises(MetadataError) as caught:
            Client(guarded.url).batch_exists(["k"])
    finally:
        guarded.stop()
    message = str(caught.value)
    assert caught.value.status == 401
    for where in ("--token-file", "$HF3FS_META_TOKEN", "token=", "ClientOptions::auth_token"):
        assert where in message
    assert "base URL" not in message


def test_the_server_says_listening_on_once_in_a_shared_log(server):
    # conftest's Server sends stdout and stderr to one log.
    server.log.seek(0)
    log = server.log.read()
    assert log.count("listening on") == 1, log
    assert "hf3fs-meta-server: ready (" in log
