"""The Python clients send the bearer token: given, or from $HF3FS_META_TOKEN."""

import pytest

from conftest import Server
from hf3fs_meta import Client, Hf3fsGlobalMetadataClient, MetadataError


@pytest.fixture
def guarded(server_binary, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("py-token\n")
    s = Server(server_binary, "--auth-token-file", str(token_file))
    yield s
    s.stop()


def refused(call) -> MetadataError:
    with pytest.raises(MetadataError) as caught:
        call()
    assert caught.value.status == 401
    return caught.value


def test_the_drop_in_takes_the_token_from_the_environment(guarded, monkeypatch):
    monkeypatch.delenv("HF3FS_META_TOKEN", raising=False)
    assert refused(lambda: Hf3fsGlobalMetadataClient(guarded.url).batch_key_exists(["k"])).detail == "Not authenticated"
    monkeypatch.setenv("HF3FS_META_TOKEN", "other-token")
    refused(lambda: Hf3fsGlobalMetadataClient(guarded.url).batch_key_exists(["k"]))
    monkeypatch.setenv("HF3FS_META_TOKEN", "py-token")
    client = Hf3fsGlobalMetadataClient(guarded.url)
    client.initialize(0, 8)
    assert client.allocate_pages_for_keys(0, ["k"]) == [["k", 0]]


def test_the_client_takes_a_token_or_the_environment(guarded, monkeypatch):
    monkeypatch.delenv("HF3FS_META_TOKEN", raising=False)
    assert Client(guarded.url, token="py-token").batch_exists(["k"]) == [False]
    refused(lambda: Client(guarded.url).batch_exists(["k"]))
    monkeypatch.setenv("HF3FS_META_TOKEN", "py-token")
    assert Client(guarded.url).batch_exists(["k"]) == [False]
    refused(lambda: Client(guarded.url, token="").batch_exists(["k"]))  # an explicit token wins
