"""One client shared by threads; the GIL is released while a call waits."""

import re
import threading
import time

from hf3fs_meta import Hf3fsGlobalMetadataClient

THREADS = 8
CALLS = 1000


def test_eight_threads_share_one_client(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    client.initialize(0, THREADS * CALLS)
    pages = [[] for _ in range(THREADS)]
    errors = []

    def work(t: int) -> None:
        try:
            for i in range(CALLS):
                [[key, page]] = client.allocate_pages_for_keys(0, [f"t{t}-{i}"])
                assert key == f"t{t}-{i}"
                pages[t].append(page)
        except Exception as e:  # reported below, with the thread's number
            errors.append((t, e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    every = [p for ps in pages for p in ps]
    assert len(every) == THREADS * CALLS
    assert sorted(every) == list(range(THREADS * CALLS))  # all distinct, none -1


def _held_unanswered(server) -> bool:
    """From one reading of /metrics: a request body is held by the server (read, not answered) and
    no batch_exists has been answered yet."""
    _, _, data = server.request("GET", "/metrics")
    text = data.decode()
    held = re.search(r"^hf3fs_meta_body_bytes_in_flight (\d+)$", text, re.MULTILINE)
    assert held, "no hf3fs_meta_body_bytes_in_flight in /metrics"
    answered = re.search(r'^hf3fs_meta_requests_total\{route="/keys/batch_exists",status="200"\} (\d+)$', text,
                         re.MULTILINE)
    return int(held.group(1)) > 0 and (int(answered.group(1)) if answered else 0) == 0


def test_the_gil_is_released_while_a_call_waits(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    server.fault(path="/keys/batch_exists", delay_ms=3000, times=1)
    done = threading.Event()
    took = []

    def call() -> None:
        start = time.monotonic()
        client.batch_key_exists(["k"])
        took.append(time.monotonic() - start)
        done.set()

    # Python, in this thread, sees the server holding the call's request unanswered: the call was
    # under way and this thread ran meanwhile. Were the GIL held during the call, this thread could
    # only run once the call returned, after its answer. Ordered by that event, not by time: only
    # the 3 s the server holds the request bound how slow this thread may be.
    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 20
    seen_waiting = False
    while not done.is_set() and time.monotonic() < deadline:
        if _held_unanswered(server):
            seen_waiting = True
            break
        time.sleep(0.01)
    thread.join()
    assert seen_waiting, "this thread never ran while the call waited for its answer"
    assert took and took[0] >= 2.9  # the delayed answer was waited for
