#!/usr/bin/python3
"""vLLM's own client, as its HF3FS connector makes it (a requests.Session mounted with urllib3's
Retry(total=3, backoff_factor=0.3, status_forcelist=[500, 502, 503, 504], allowed_methods=["GET",
"POST"]), no timeout, raise_for_status), saving and loading through hf3fs-meta-proxy while:
  - a durable server (--fsync always) is killed with SIGKILL and restarted: no exception in the
    client, and every key it saw confirmed exists afterwards at the page it confirmed;
  - a memory-only server restarts: the proxy initializes the rank again and repeats the call, so
    the client carries on without an exception;
  - the server stays down past the proxy's --deadline-ms: a 503 saying so, after the deadline, not a hang.

    vllm_client_test.py SERVER_BINARY PROXY_BINARY

Every process is started on a free 127.0.0.1 port, bounded in time, and stopped by its PID.
"""

import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
from loopback_cluster import metric  # noqa: E402
from vllm_like import VllmLikeClient, save  # noqa: E402  (vLLM's client, shared with scripts/demo)

SERVER, PROXY = sys.argv[1], sys.argv[2]
STARTED = []  # every process started, stopped at the end whatever happens


def start(args, timeout=20.0):
    """Starts a binary that prints `listening on http://HOST:PORT`; returns (process, url)."""
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log)
    process.log = log
    STARTED.append(process)
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline().decode() if ready else ""
    found = re.match(r"listening on (http://127\.0\.0\.1:(\d+))$", line.strip())
    if not found:
        stop(process)
        raise RuntimeError(f"{args[0]} did not start: {line!r}")
    return process, found.group(1)


def stop(process, sig=signal.SIGTERM):
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def wait_for(condition, what, timeout=20.0):
    """Waits for an event the test can see (a count, a metric), bounded by timeout; never a pause of
    fixed length standing in for one."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.01)


def retries(proxy_url):
    """The upstream attempts the proxy repeated: one more means it met the upstream down."""
    return metric(proxy_url, "hf3fs_meta_proxy_retries_total") or 0


def start_server(port, *flags):
    # The port was ours a moment ago; binding it again can race with the kernel releasing it.
    deadline = time.monotonic() + 10
    while True:
        try:
            return start([SERVER, "--host", "127.0.0.1", "--port", str(port), "--threads", "1", *flags])
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def durable_server_killed_and_restarted():
    with tempfile.TemporaryDirectory() as data_dir:
        server, server_url = start_server(0, "--data-dir", data_dir, "--fsync", "always")
        port = int(server_url.rsplit(":", 1)[1])
        proxy, proxy_url = start([PROXY, "--listen", "127.0.0.1:0", "--upstream", server_url,
                                  "--deadline-ms", "20000"])
        client = VllmLikeClient(proxy_url)
        client.initialize(0, 4096)
        confirmed = {}  # key -> page, every save the client saw succeed
        errors = []
        done = threading.Event()

        def worker():
            try:
                i = 0
                while not done.is_set():
                    key = f"durable-{i}"
                    page = save(client, 0, key)
                    assert page is not None, "rank 0 ran out of pages"
                    confirmed[key] = page
                    if i % 10 == 0:
                        keys = list(confirmed)
                        assert all(client.batch_key_exists(keys)), "a confirmed key was lost"
                    i += 1
            except Exception as e:  # the point of the test: vLLM would see this
                errors.append(repr(e))

        thread = threading.Thread(target=worker)
        thread.start()
        def saves_go_on():
            mark = len(confirmed)
            wait_for(lambda: len(confirmed) >= mark + 20 or errors, "20 more saves")

        for _ in range(3):
            saves_go_on()
            stop(server, signal.SIGKILL)
            seen = retries(proxy_url)
            # Down until the proxy has met it so (and rides it out): then restarted.
            wait_for(lambda: retries(proxy_url) > seen or errors, "attempt on the stopped server")
            server, _ = start_server(port, "--data-dir", data_dir, "--fsync", "always")
        saves_go_on()
        done.set()
        thread.join(timeout=60)
        assert not thread.is_alive(), "the client hung"
        assert not errors, f"the client raised: {errors}"
        keys = list(confirmed)
        assert all(client.batch_key_exists(keys)), "a key confirmed before a SIGKILL was lost"
        assert client.get_key_locations(0, keys) == [confirmed[k] for k in keys]
        print(f"durable: {len(confirmed)} keys saved across 3 SIGKILLs, none lost")
        stop(proxy)
        stop(server)


def memory_server_restarted():
    server, server_url = start_server(0)
    port = int(server_url.rsplit(":", 1)[1])
    proxy, proxy_url = start([PROXY, "--listen", "127.0.0.1:0", "--upstream", server_url, "--deadline-ms", "20000"])
    client = VllmLikeClient(proxy_url)
    client.initialize(0, 64)
    before = [save(client, 0, f"memory-{i}") for i in range(5)]
    assert before == [0, 1, 2, 3, 4], before
    for restart in range(2):
        stop(server, signal.SIGKILL)
        result = {}
        # The next save starts while the server is down, and goes on once it is back with no rank 0.
        seen = retries(proxy_url)
        thread = threading.Thread(target=lambda: result.update(page=save(client, 0, f"after-{restart}")))
        thread.start()
        wait_for(lambda: retries(proxy_url) > seen, "attempt on the stopped server")
        server, _ = start_server(port)
        thread.join(timeout=60)
        assert not thread.is_alive(), "the client hung"
        assert result.get("page") == 0, result  # a fresh rank 0, initialized again by the proxy
        assert client.batch_key_exists([f"after-{restart}", "memory-0"]) == [True, False]
    assert metric(proxy_url, "hf3fs_meta_proxy_reinitializations_total") == 2
    print("memory only: 2 restarts, rank 0 initialized again by the proxy each time, no exception")
    stop(proxy)
    stop(server)


def upstream_down_past_the_deadline():
    server, server_url = start_server(0)
    proxy, proxy_url = start([PROXY, "--listen", "127.0.0.1:0", "--upstream", server_url, "--deadline-ms", "1500"])
    client = VllmLikeClient(proxy_url)
    client.initialize(0, 8)
    stop(server, signal.SIGKILL)
    began = time.monotonic()
    answer = requests.post(f"{proxy_url}/keys/batch_exists", json={"keys": ["k"]}, timeout=30)
    took = time.monotonic() - began
    assert answer.status_code == 503, answer.status_code
    detail = answer.json()["detail"]
    # No answer (nothing accepts the connection), ridden out until the next attempt could not fit.
    assert detail.startswith("hf3fs-meta-proxy: no answer from the upstream"), detail
    assert " ms into a deadline of 1500 ms: could not connect to the metadata server" in detail, detail
    assert took < 1.5 + 2.0, took  # bounded by the deadline (the SDK stops when the next attempt cannot fit)
    # vLLM's client: its three retries of the 503, then an exception, in bounded time.
    began = time.monotonic()
    try:
        client.batch_key_exists(["k"])
        raise AssertionError("no exception with the upstream down")
    except requests.exceptions.RetryError:
        pass
    took = time.monotonic() - began
    assert took < 4 * 3.5 + 2.0, took
    print(f"down past the deadline: 503 in {took / 4:.2f} s per attempt, then vLLM's client gives up")
    stop(proxy)


def main():
    try:
        durable_server_killed_and_restarted()
        memory_server_restarted()
        upstream_down_past_the_deadline()
    except BaseException:
        for process in STARTED:  # what each process said, for the failure's story
            process.log.seek(0)
            sys.stderr.write(f"--- {process.args[0]} (pid {process.pid}):\n{process.log.read().decode(errors='replace')}")
        raise
    finally:
        for process in STARTED:
            stop(process, signal.SIGKILL)
    # Every proxy stopped by SIGTERM exited 0 (under the sanitizers: no leak, no error).
    proxies = [p for p in STARTED if p.args[0] == PROXY]
    assert proxies and all(p.returncode == 0 for p in proxies), [p.returncode for p in proxies]
    return 0


if __name__ == "__main__":
    sys.exit(main())
