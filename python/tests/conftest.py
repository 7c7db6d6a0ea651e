"""Fixtures: a real hf3fs-meta-server process per test (ctest passes its path in HF3FS_META_SERVER),
spoken to with raw HTTP beside the clients under test."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, Dict, Iterator, Optional, Tuple

import pytest


class Server:
    """hf3fs-meta-server on an ephemeral loopback port, with fault injection. kill() and restart()
    model a crash and a restart on the same port (all state lost)."""

    def __init__(self, binary: str, *args: str) -> None:
        self.binary = binary
        self.args = ["--host", "127.0.0.1", "--enable-fault-injection", *args]
        self.port = 0
        self.scheme = "https" if "--tls-cert" in args else "http"
        self.process: Optional[subprocess.Popen] = None
        self.log = tempfile.TemporaryFile(mode="w+")
        self._start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def _start(self) -> None:
        self.log.seek(0)
        self.log.truncate()
        self.process = subprocess.Popen([self.binary, "--port", str(self.port), *self.args],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self.log.seek(0)
            found = re.search(r"^listening on https?://[^:]+:(\d+)$", self.log.read(), re.MULTILINE)
            if found:
                self.port = int(found.group(1))
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        self.log.seek(0)
        raise RuntimeError(f"hf3fs-meta-server did not start: {self.log.read()}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        self.process = None

    def restart(self) -> None:
        """A crash and a restart on the same port: the server forgets every rank and key. The port
        was ours a moment ago, but another process may have taken it meanwhile: a start refused for
        that is tried again, for up to 10 s (as the C++ ServerProcess::restart)."""
        if self.process is not None:
            self.kill()
        deadline = time.monotonic() + 10
        while True:
            try:
                self._start()
                return
            except RuntimeError as e:
                if "Address already in use" not in str(e) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.1)

    def request(self, method: str, path: str, body: Any = None) -> Tuple[int, Dict[str, str], bytes]:
        """One raw HTTP request on a fresh connection, as vLLM's client makes them (JSON body)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            data = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
            headers = {"Content-Type": "application/json"} if data is not None else {}
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def post(self, path: str, body: Any) -> Tuple[int, Any]:
        """POST a JSON body; the status and the decoded answer ({} for an empty one, as vLLM's client)."""
        status, _, data = self.request("POST", path, body)
        return status, (json.loads(data) if data else {})

    def fault(self, **rule: Any) -> None:
        status, _, data = self.request("POST", "/_faults", rule)
        assert status == 200, data

    def requests_answered(self, route: str, status: int) -> int:
        """hf3fs_meta_requests_total{route="/keys/...", status} from /metrics: what reached the server."""
        _, _, data = self.request("GET", "/metrics")
        pattern = rf'^hf3fs_meta_requests_total{{route="{re.escape(route)}",status="{status}"}} (\d+)$'
        found = re.search(pattern, data.decode(), re.MULTILINE)
        return int(found.group(1)) if found else 0


@pytest.fixture
def server_binary() -> str:
    binary = os.environ.get("HF3FS_META_SERVER")
    if not binary:
        pytest.fail("HF3FS_META_SERVER is not set: run these tests through ctest (python_tests)")
    return binary


@pytest.fixture
def server(server_binary: str):
    s = Server(server_binary)
    yield s
    s.stop()


@pytest.fixture
def other_server(server_binary: str):
    s = Server(server_binary)
    yield s
    s.stop()


@pytest.fixture
def closed_port_url() -> Iterator[str]:
    """A loopback URL where nothing listens, for as long as the test runs: the port is bound and never
    listened on, so a connect is refused and no other test can take the port meanwhile (as the C++
    RefusingPort)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"
