#!/usr/bin/python3
"""vLLM's own client (examples/python/vllm_like.py) saving and loading through hf3fs-meta-proxy, a
proxy per vLLM node and namespace, while the HA leader is killed with SIGKILL (and started again)
three times, on the loopback cluster of scripts/cluster (a 3-member etcd, 3 HA members, tenants):

  - no exception in either worker, and each carries on after every failover;
  - every load finds its block at the page it was saved at, and afterwards every acknowledged save
    is still there (nothing acknowledged lost);
  - the proxies rode every failover out themselves: each forwarded every call once and it succeeded
    (no 503 for vLLM's client to repeat), and they did fail over;
  - each namespace sees its own keys only.

    scripts/cluster --server BIN --proxy BIN -- ha_failover_test.py

scripts/cluster bounds the processes' start and stops them all by PID; every wait here is bounded.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
from loopback_cluster import LoopbackCluster, metrics  # noqa: E402
from vllm_like import SaveLoadWorker  # noqa: E402

KILLS = 3
PROGRESS = 5  # saves each worker makes between failovers, to show it carries on


def wait_for_saves(workers, at_least, timeout=30.0):
    deadline = time.monotonic() + timeout
    while any(w.saves < n for w, n in zip(workers, at_least)):
        failed = [f"{w.name}: {w.error!r}" for w in workers if w.error]
        assert not failed, f"a worker raised: {failed}"
        assert time.monotonic() < deadline, (
            f"no progress within {timeout} s: saves {[w.saves for w in workers]}, wanted {at_least}")
        time.sleep(0.05)


def forwarded(proxy):
    """The proxy's forwarded calls: {(route, outcome): count}."""
    out = {}
    for name, value in metrics(proxy).items():
        if name.startswith("hf3fs_meta_proxy_forwarded_total{"):
            labels = dict(part.split("=", 1) for part in name[name.index("{") + 1:-1].split(","))
            out[(labels["route"].strip('"'), labels["outcome"].strip('"'))] = value
    return out


def main():
    cluster = LoopbackCluster.from_env()
    assert len(cluster.proxies) == 2 and len(set(cluster.models)) == 2, (cluster.proxies, cluster.models)
    workers = [SaveLoadWorker(f"node-{i}", url) for i, url in enumerate(cluster.proxies)]
    for w in workers:
        w.start()
    wait_for_saves(workers, [PROGRESS] * 2)
    leaders = []
    for kill in range(KILLS):
        f = cluster.fail_over()
        leaders.append(f)
        print(f"kill {kill + 1}: {f}", flush=True)
        wait_for_saves(workers, [w.saves + PROGRESS for w in workers])
    for w in workers:
        w.stop()
    for w in workers:
        w.join(timeout=60)
        assert not w.is_alive(), f"{w.name} hung in a call"
        assert w.error is None, f"{w.name} raised {w.error!r}"
        assert w.loads == w.saves, (w.name, w.saves, w.loads)
        lost = w.lost()
        assert not lost, f"{w.name}: {len(lost)} of {len(w.saved)} acknowledged saves lost: {lost[:5]}"
        print(f"{w.name}: {w.saves} saves, {w.loads} loads, longest call {w.longest:.1f} s, none lost", flush=True)

    # Each namespace holds its own worker's keys only.
    for w, other in ((workers[0], workers[1]), (workers[1], workers[0])):
        theirs = other.keys[:50]
        assert other.client.batch_key_exists(theirs) == [True] * len(theirs)
        assert w.client.batch_key_exists(theirs) == [False] * len(theirs), f"{w.name} sees {other.name}'s keys"

    # vLLM's client never had to repeat a call: each proxy answered every call it forwarded with
    # the upstream's success (its own retries and failovers absorbed the kills), as many as the
    # worker made: a save is an allocate and a confirm, a load an exists and a locations, and w.lost()
    # and the namespace check above one exists (and one locations) more each.
    for i, (proxy, w) in enumerate(zip(cluster.proxies, workers)):
        calls = forwarded(proxy)
        not_ok = {k: v for k, v in calls.items() if k[1] != "ok" and v}
        assert not not_ok, f"proxy {i} forwarded calls that did not succeed: {not_ok}"
        chunks = (len(w.saved) + 499) // 500
        expected = {("/rank/{rank}/initialize", "ok"): 1, ("/keys/batch_allocate", "ok"): w.saves,
                    ("/keys/confirm_write", "ok"): w.saves, ("/keys/batch_exists", "ok"): w.loads + chunks + 2,
                    ("/keys/get_locations", "ok"): w.loads + chunks}
        assert calls == expected, f"proxy {i}: forwarded {calls}, the worker made {expected}"
        failovers = metrics(proxy).get("hf3fs_meta_proxy_failovers_total", 0)
        assert failovers >= 1, f"proxy {i} never failed over across {KILLS} kills of the leader"
    print(f"ha_failover_test: {KILLS} kills of the leader, neither worker noticed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
