"""A client of several endpoints, as a list or one "URL,URL" str (the drop-in's way). A
member that is not the leader (here a small stand-in on loopback, answering as a standby does) sends
the call to the leader it names; a member that does not answer, to the next URL."""

from __future__ import annotations

import http.server
import threading
from typing import Iterator, List, Optional

import pytest

from hf3fs_meta import Client, Hf3fsGlobalMetadataClient, InvalidArgumentError, MetadataError


class Standby:
    """A member that is not the leader: every route answers 503 "not the leader", naming `leader`
    when it is set. Counts what it was asked."""

    def __init__(self, leader: Optional[str]) -> None:
        standby = self
        self.leader = leader
        self.asked: List[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                standby.asked.append(self.path)
                body = b'{"detail":"not the leader: nothing applied"}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if standby.leader:
                    self.send_header("X-Hf3fs-Leader", standby.leader)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def standby(server) -> Iterator[Standby]:
    s = Standby(server.url)
    yield s
    s.stop()


@pytest.fixture
def lost_standby() -> Iterator[Standby]:
    s = Standby(None)
    yield s
    s.stop()


def test_a_list_reaches_the_leader_a_standby_names(server, standby):
    client = Client([standby.url, "http://127.0.0.1:1"], deadline=5)
    assert client.ensure_initialized(0, 4) == "Rank 0 initialized with 4 pages"
    assert client.allocate(0, ["k"]) == [0]  # never safe to repeat but for this: the standby applied nothing
    assert standby.asked == ["/rank/0/initialize"]  # the calls after the first go to the leader at once
    assert server.post("/keys/batch_exists", {"keys": ["k"]}) == (200, {"exists": [False]})


def test_a_comma_separated_str_is_a_list_for_the_drop_in_and_the_client(server, standby):
    dropin = Hf3fsGlobalMetadataClient(f"{standby.url}, {server.url}")
    dropin.initialize(0, 4)
    assert dropin.allocate_pages_for_keys(0, ["k"]) == [["k", 0]]
    assert Client(f"{standby.url},{server.url}").batch_exists(["k"]) == [False]


def test_without_a_name_or_an_answer_the_call_goes_to_the_next_url(server, lost_standby, closed_port_url):
    client = Client([closed_port_url, lost_standby.url, server.url], deadline=5)
    assert client.batch_exists(["k"]) == [False]
    assert lost_standby.asked == ["/keys/batch_exists"]


def test_no_leader_ends_at_the_deadline_saying_where_the_call_went(lost_standby, closed_port_url):
    client = Client([lost_standby.url, closed_port_url], deadline=0.5)
    with pytest.raises(MetadataError) as caught:
        client.batch_exists(["k"])
    error = caught.value
    assert error.code in ("unavailable", "connection_failed")
    assert f"no endpoint answered as the leader: {lost_standby.url} (503 not the leader), " \
           f"{closed_port_url} (nothing accepted the connection)" in str(error)


@pytest.mark.parametrize("url, message", [
    ([], "url: no endpoint: give at least one URL"),
    ("http://127.0.0.1:1,", "url[1]: empty"),
    (["http://127.0.0.1:1", "127.0.0.1:2"], "url[1]: '127.0.0.1:2' is not an http:// or https:// URL"),
    ("http://127.0.0.1:99999", "url: 'http://127.0.0.1:99999' has port '99999'"),
])
def test_an_entry_that_is_not_a_url_is_refused_naming_it(url, message):
    with pytest.raises(InvalidArgumentError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Client(url)


def test_the_drop_in_names_its_own_argument():
    with pytest.raises(InvalidArgumentError, match=r"base_url\[0\]: empty"):
        Hf3fsGlobalMetadataClient(",http://127.0.0.1:1")


def test_a_list_of_something_else_is_a_type_error():
    with pytest.raises(TypeError, match=r"url\[1\]: expected a str, got int"):
        Client(["http://127.0.0.1:1", 2])
    with pytest.raises(TypeError, match="url: expected a list or tuple of str, got int"):
        Client(5)
