"""Speed of ``bench``: a 9-point concurrency sweep of one deployment, warm (tables parsed,
numba compiled), against the 1 s target of the bench issue; and the cold first call.

    python benchmarks/bench_closed_loop.py [--repeat 5]

Reports the median of the repeats per case and its ratio to the target (the machine is
shared: ratios in one run are what to compare).
"""

from __future__ import annotations

import argparse
import statistics
import time

CASES = {
    "DeepSeek-R1 B200 tp4 ep4 fp4, 8k/1k r0.8": dict(
        model="DeepSeek-R1", hardware="B200", tp=4, ep=4, weight_precision="fp4",
        moe_precision="fp4", kv_precision="fp8", isl=8192, osl=1024, range_ratio=0.8),
    "Llama-3.1-70B H100 tp8 fp8, 1k/1k": dict(
        model="Llama-3.1-70B", hardware="H100-SXM", tp=8, weight_precision="fp8",
        isl=1024, osl=1024),
    "Llama-3.1-70B H100 2p:tp8 + 1d:tp8, 8k/1k": dict(
        model="Llama-3.1-70B", hardware="H100-SXM", weight_precision="fp8", isl=8192,
        osl=1024, prefill_pool={"instances": 2, "tp": 8}, decode_pool={"tp": 8}),
}
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TARGET_S = 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    t0 = time.perf_counter()
    from inference_factory.analysis.bench import bench
    print(f"import: {time.perf_counter() - t0:.2f} s")
    for name, kw in CASES.items():
        t = time.perf_counter()
        bench(**kw, concurrency=CONCURRENCY)
        cold = time.perf_counter() - t
        warm = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            bench(**kw, concurrency=CONCURRENCY)
            warm.append(time.perf_counter() - t)
        w = statistics.median(warm)
        print(f"{name:45s} first {cold:6.2f} s   warm {w:6.3f} s   warm / target {w / TARGET_S:.2f}")


if __name__ == "__main__":
    main()
