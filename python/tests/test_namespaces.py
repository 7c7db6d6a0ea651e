"""namespace= and $HF3FS_META_NAMESPACE: the Python clients send X-Hf3fs-Namespace on
every request, refuse a bad name before anything is sent, and refuse the answers of a server that
ignores the header. A recording HTTP server in this process stands for the server, so what was sent
(and that nothing was) can be read back."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, List, Optional

import pytest

from hf3fs_meta import Client, Hf3fsGlobalMetadataClient, InvalidArgumentError, MetadataError

HEADER = "X-Hf3fs-Namespace"
IGNORED = ("the server ignored X-Hf3fs-Namespace (vLLM's server has no namespaces): its answers come from the "
           "shared space")


class Recorder:
    """Answers initialize, batch_allocate and batch_exists as the reference server does for a fresh
    state; keeps the namespace header of each request (None: absent); echoes it unless told not to."""

    def __init__(self) -> None:
        self.seen: List[Optional[str]] = []
        self.echo = True
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                ns = self.headers.get(HEADER)
                recorder.seen.append(ns)
                if self.path.endswith("/initialize"):
                    answer = {"message": "initialized"}
                elif self.path == "/keys/batch_allocate":
                    keys = [k[0] if isinstance(k, list) else k for k in body["keys"]]  # [key, prefix_key]
                    answer = {"rank": body["rank"], "results": [[k, i] for i, k in enumerate(keys)]}
                else:
                    answer = {"exists": [False for _ in body["keys"]]}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if ns is not None and recorder.echo:
                    self.send_header(HEADER, ns)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def recorder(monkeypatch) -> Iterator[Recorder]:
    monkeypatch.delenv("HF3FS_META_NAMESPACE", raising=False)
    r = Recorder()
    yield r
    r.close()


def test_the_client_sends_the_namespace_it_is_given_on_every_call(recorder):
    client = Client(recorder.url, namespace="team-a.1")
    client.ensure_initialized(0, 8)
    assert client.allocate(0, ["k"]) == [0]
    assert client.batch_exists(["k"]) == [False]
    assert recorder.seen == ["team-a.1"] * 3


def test_without_a_namespace_no_header_is_sent(recorder):
    client = Client(recorder.url)
    client.ensure_initialized(0, 8)
    assert client.batch_exists(["k"]) == [False]
    Client(recorder.url, namespace="").batch_exists(["k"])  # empty: the default namespace
    assert recorder.seen == [None, None, None]


def test_the_environment_names_the_namespace_and_the_argument_wins(recorder, monkeypatch):
    monkeypatch.setenv("HF3FS_META_NAMESPACE", "from-env")
    Client(recorder.url).batch_exists(["k"])
    Client(recorder.url, namespace="given").batch_exists(["k"])
    Client(recorder.url, namespace="").batch_exists(["k"])  # an explicit empty one: the default
    assert recorder.seen == ["from-env", "given", None]


def test_an_unmodified_vllm_gets_its_namespace_from_the_environment(recorder, monkeypatch):
    monkeypatch.setenv("HF3FS_META_NAMESPACE", "vllm-1")
    client = Hf3fsGlobalMetadataClient(recorder.url, 3)  # as vLLM constructs it
    client.initialize(0, 8)
    assert client.allocate_pages_for_keys(0, ["k"]) == [["k", 0]]
    assert client.batch_key_exists(["k"]) == [False]
    Hf3fsGlobalMetadataClient(recorder.url, 3, namespace="given").batch_key_exists(["k"])
    assert recorder.seen == ["vllm-1"] * 3 + ["given"]


@pytest.mark.parametrize("name, why", [
    ("a b", "has byte 0x20 at offset 1"),
    ("m1\r\nX-Injected: yes", "has byte 0x0D at offset 2"),
    ("caf\u00e9", "has byte 0xC3 at offset 3"),
    ("n" * 65, "is 65 bytes"),
])
def test_a_bad_name_is_refused_before_anything_is_sent(recorder, monkeypatch, name, why):
    rule = ": a namespace name is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"
    with pytest.raises(InvalidArgumentError) as caught:
        Client(recorder.url, namespace=name)
    assert caught.value.detail == "namespace= " + why + rule
    assert caught.value.code == "invalid_argument"
    assert "Injected" not in str(caught.value)  # the bad byte is located, never echoed
    with pytest.raises(InvalidArgumentError) as caught:
        Hf3fsGlobalMetadataClient(recorder.url, namespace=name)
    assert caught.value.detail == "namespace= " + why + rule
    monkeypatch.setenv("HF3FS_META_NAMESPACE", name)
    with pytest.raises(InvalidArgumentError) as caught:
        Client(recorder.url)
    assert caught.value.detail == "$HF3FS_META_NAMESPACE " + why + rule
    with pytest.raises(InvalidArgumentError) as caught:
        Hf3fsGlobalMetadataClient(recorder.url)
    assert caught.value.detail == "$HF3FS_META_NAMESPACE " + why + rule
    assert isinstance(caught.value, ValueError)
    assert recorder.seen == []


def test_a_server_that_ignores_the_header_fails_every_call(recorder):
    recorder.echo = False  # vLLM's server: no namespaces, one shared space
    client = Client(recorder.url, namespace="m1")
    with pytest.raises(MetadataError) as caught:
        client.batch_exists(["k"])
    assert caught.value.code == "protocol_error"
    assert caught.value.detail == IGNORED
    with pytest.raises(MetadataError) as caught:
        Hf3fsGlobalMetadataClient(recorder.url, namespace="m1").batch_key_exists(["k"])
    assert caught.value.code == "protocol_error"
    # Without a namespace the same server serves as ever.
    assert Client(recorder.url).batch_exists(["k"]) == [False]


# ---- namespaces(), drop_namespace(), key_status() against the reference server ----


def test_namespaces_lists_the_default_one_with_its_ranks_pages_and_keys(server):
    client = Client(server.url)
    client.ensure_initialized(0, 8)
    client.ensure_initialized(1, 4)
    pages = client.allocate(0, ["k"])
    client.confirm_write(0, [("k", pages[0])])
    assert client.namespaces() == [{"name": "default", "ranks": [0, 1], "pages": 12, "keys": 1}]


def test_key_status_says_which_ranks_confirmed_a_key_and_how_many_it_needs(server):
    client = Client(server.url)
    client.ensure_initialized(0, 8)
    client.ensure_initialized(1, 8)
    client.confirm_write(0, [("k1", client.allocate(0, ["k1"])[0])])
    assert client.batch_exists(["k1", "k2"]) == [False, False]
    assert client.key_status(["k1", "k2"]) == {
        "ranks_initialized": 2,
        "status": [{"ranks": [0], "tp_world_size": 2, "complete": False}, None],
    }
    with pytest.raises(InvalidArgumentError):
        client.key_status(["k1", ""])
    with pytest.raises(TypeError):
        client.key_status("k1")


def test_drop_namespace_checks_the_name_and_reports_what_went(server):
    client = Client(server.url)
    assert client.drop_namespace("nowhere") == {"namespace": "nowhere", "dropped": False, "ranks": 0, "pages": 0,
                                                "keys_removed": 0}
    with pytest.raises(InvalidArgumentError) as caught:
        client.drop_namespace("a/b")
    assert caught.value.detail.startswith("name has byte 0x2F at offset 1")
    assert caught.value.operation == "drop_namespace"
    with pytest.raises(MetadataError) as caught:
        client.drop_namespace("default")
    assert caught.value.status == 400
    assert "POST /clear" in caught.value.detail
