#!/usr/bin/python3
"""The round trip of a 1-key batch_key_exists from Python, beside the C++ SDK's, on one server.

    bench/python_roundtrip.py [--rounds 3] [--seconds 3]

Builds (Release, in $BUILD_DIR, default build/bench) the server, bench_roundtrip and the Python
module, starts one hf3fs-meta-server (2 threads) on a free loopback port, then for each round, one
after another against that server:
  sdk       bench_roundtrip's BM_SdkExists1: Client::batch_exists of one key (C++, Google Benchmark)
  drop-in   hf3fs_meta.Hf3fsGlobalMetadataClient.batch_key_exists([key]) (timeit)
  requests  the same POST through a requests.Session with urllib3 Retry, as vLLM's client makes it
            (raise_for_status, then the JSON decoded) (timeit)
and prints the mean time per call of each, the median over rounds, and the ratios. Never run by
tests or CI: the machine is shared, so read the ratios, measured side by side.
Needs python3-requests (scripts/bootstrap installs it).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEY = "9e107d9d372bb6826bd81d3542a419d6"


def build(build_dir: Path) -> None:
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                    f"-DPython3_EXECUTABLE={sys.executable}", "-DHF3FS_META_BUILD_TESTS=OFF",
                    "-DHF3FS_META_BUILD_EXAMPLES=OFF", "-DHF3FS_META_BUILD_CLI=OFF",
                    "-DHF3FS_META_BUILD_BENCHMARKS=ON"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 1), "--target",
                    "hf3fs-meta-server", "bench_roundtrip", "hf3fs_meta_python"], check=True, stdout=subprocess.DEVNULL)


def start_server(binary: Path, log):
    process = subprocess.Popen([str(binary), "--host", "127.0.0.1", "--port", "0", "--threads", "2"],
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        log.seek(0)
        found = re.search(r"^listening on (http://\S+)$", log.read(), re.MULTILINE)
        if found:
            return process, found.group(1)
        time.sleep(0.02)
    process.kill()
    raise SystemExit("the server did not start")


def sdk_mean_us(bench: Path, url: str) -> float:
    """One run of BM_SdkExists1 (3 s: the benchmark sets its own MinTime, reflected in its name)."""
    out = subprocess.run([str(bench), "--benchmark_filter=^BM_SdkExists1/", "--benchmark_format=json"],
                         env={**os.environ, "HF3FS_META_URL": url},
                         check=True, capture_output=True, text=True).stdout
    [run] = json.loads(out)["benchmarks"]
    if run.get("error_occurred"):
        raise SystemExit(f"bench_roundtrip: {run.get('error_message')}")
    assert run["time_unit"] == "ns"
    return run["real_time"] / 1000.0


def timeit_mean_us(call, seconds: float) -> float:
    timer = timeit.Timer(call)
    number, took = timer.autorange()  # at least 0.2 s, also a warm-up
    number = max(1, int(number * seconds / took))
    return timer.timeit(number) / number * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="per Python measurement")
    args = parser.parse_args()
    build_dir = Path(os.environ.get("BUILD_DIR", ROOT / "build" / "bench"))
    build(build_dir)
    sys.path.insert(0, str(build_dir / "python"))
    import hf3fs_meta
    sys.path.insert(0, str(ROOT / "examples" / "python"))
    from vllm_like import VllmLikeClient  # vLLM's client, as the proxy's tests drive it

    with tempfile.TemporaryFile(mode="w+") as log:
        server, url = start_server(build_dir / "mock_server" / "hf3fs-meta-server", log)
        try:
            dropin = hf3fs_meta.Hf3fsGlobalMetadataClient(url)
            vllm_client = VllmLikeClient(url)

            def vllm_style() -> list:
                return vllm_client.batch_key_exists([KEY])

            assert dropin.batch_key_exists([KEY]) == vllm_style() == [False]
            results = {"sdk": [], "drop-in": [], "requests": []}
            for r in range(args.rounds):
                results["sdk"].append(sdk_mean_us(build_dir / "bench" / "bench_roundtrip", url))
                results["drop-in"].append(timeit_mean_us(lambda: dropin.batch_key_exists([KEY]), args.seconds))
                results["requests"].append(timeit_mean_us(vllm_style, args.seconds))
                print(f"round {r + 1}: " + ", ".join(f"{name} {v[-1]:.1f} us" for name, v in results.items()))
        finally:
            server.terminate()
            server.wait()

    median = {name: statistics.median(v) for name, v in results.items()}
    print(f"median over {args.rounds} rounds, mean per call: " +
          ", ".join(f"{name} {v:.1f} us" for name, v in median.items()))
    print(f"drop-in / sdk = {median['drop-in'] / median['sdk']:.2f}x (goal <= 1.3x); "
          f"requests / drop-in = {median['requests'] / median['drop-in']:.1f}x (goal >= 10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
