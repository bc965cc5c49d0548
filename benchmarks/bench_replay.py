"""Speed of ``bench --trace``: replaying 10^5 agent turns at one concurrency, against the
10 s target of the agentic-serving issue (generation of the trace timed apart).

    python benchmarks/bench_replay.py [--turns 100000] [--concurrency 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

TARGET_S = 10.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from inference_factory.analysis.bench.replay import bench_trace
    from inference_factory.factory.sessions import generate_sessions, load_shape
    from inference_factory.specs import data_dir

    shape = load_shape(data_dir("configs") / "traces" / "agentic_coding.toml")
    per_session = 25812 / 2000            # turns per session of the bundled shape
    shape = dataclasses.replace(shape, sessions=int(args.turns / per_session))
    t = time.perf_counter()
    s = generate_sessions(shape)
    print(f"generate {s.n_turns:,} turns ({s.n_sessions:,} sessions): "
          f"{time.perf_counter() - t:.2f} s")
    kw = dict(model="DeepSeek-V3", hardware="B200", tp=8, kv_precision="fp8", trace=s,
              concurrency=[args.concurrency], kv_offload="dram")
    t = time.perf_counter()
    bench_trace(**kw)
    print(f"first replay (tables, numba from its disk cache): {time.perf_counter() - t:.2f} s")
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        bench_trace(**kw)
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(f"replay of {s.n_turns:,} turns at concurrency {args.concurrency}: {med:.2f} s "
          f"(median of {args.repeat}; target {TARGET_S:g} s, ratio {med / TARGET_S:.2f})")


if __name__ == "__main__":
    main()
