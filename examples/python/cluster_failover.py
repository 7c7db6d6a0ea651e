#!/usr/bin/env python3
"""Two vLLM-like workers, one per node of the loopback cluster, each saving and loading blocks with
vLLM's own client through its node's hf3fs-meta-proxy, while the HA leader is killed with SIGKILL
(and started again by scripts/cluster) KILLS times. Neither should notice: no exception, every load
finds its block where it was saved, and afterwards every acknowledged save is still there.

    scripts/cluster -- python3 examples/python/cluster_failover.py [KILLS]

Exits 1 (saying why) when a worker saw an exception or an acknowledged save was lost.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopback_cluster import LoopbackCluster  # noqa: E402
from vllm_like import SaveLoadWorker  # noqa: E402


def main():
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    cluster = LoopbackCluster.from_env()
    workers = [SaveLoadWorker(f"node {i} ({model})", url) for i, (url, model) in
               enumerate(zip(cluster.proxies, cluster.models))]
    for w in workers:
        print(f"{w.name}: vLLM's client, saving and loading through {w.client.url}")
        w.start()
    time.sleep(1.5)
    for _ in range(kills):
        before = [w.saves for w in workers]
        f = cluster.fail_over()
        again = " again, started anew" if f["leader"] == f["killed"] else ""
        print(f"kill -9 the leader m{f['killed']} (pid {f['pid']}): m{f['leader']} leads{again} {f['failover_s']:.1f} s "
              f"later; m{f['killed']} back (pid {f['new_pid']}) after {f['back_s']:.1f} s; saves meanwhile: "
              f"{', '.join(str(w.saves - b) for w, b in zip(workers, before))}")
        time.sleep(1.0)
    for w in workers:
        w.stop()
    for w in workers:
        w.join(timeout=60)

    failed = False
    for w in workers:
        if w.is_alive():
            print(f"{w.name}: FAILED: still in a call 60 s after it was asked to stop")
            failed = True
            continue
        print(f"{w.name}: {w.saves} saves, {w.loads} loads, longest call {w.longest:.1f} s, "
              f"{'exception: ' + repr(w.error) if w.error else 'no exception'}")
        failed |= w.error is not None
    for w in workers:
        if w.is_alive():
            continue
        lost = w.lost()
        print(f"{w.name}: {len(w.saved) - len(lost)} of the {len(w.saved)} acknowledged saves found at their page"
              + (f"; lost: {lost[:5]}" if lost else ""))
        failed |= bool(lost) or not w.saved
    print("neither worker noticed the failovers" if not failed else "FAILED: a worker noticed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
