"""One client shared by threads; the GIL is released while a call waits."""

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


def test_the_gil_is_released_while_a_call_waits(server):
    client = Hf3fsGlobalMetadataClient(server.url)
    server.fault(path="/keys/batch_exists", delay_ms=1000, times=1)
    done = threading.Event()
    took = []

    def call() -> None:
        start = time.monotonic()
        client.batch_key_exists(["k"])
        took.append(time.monotonic() - start)
        done.set()

    thread = threading.Thread(target=call)
    # Pure Python from before the call starts until it returns. Were the GIL held during the call,
    # this thread would stand still for the whole second the call waits (in start() or in the loop).
    iterations, longest_gap, last = 0, 0.0, time.monotonic()
    thread.start()
    while not done.is_set():
        now = time.monotonic()
        longest_gap = max(longest_gap, now - last)
        last = now
        iterations += 1
    longest_gap = max(longest_gap, time.monotonic() - last)
    thread.join()
    assert took and took[0] >= 0.9  # the delayed answer was waited for
    assert longest_gap < 0.5, f"the loop stopped for {longest_gap:.3f} s"
    assert iterations > 1000
