"""Benchmark: simulated requests per second of `compare` (baseline + factory on one trace).

    python benchmarks/bench_factory.py [--requests 1000000] [--attribution]

Reports the time of each stage (trace generation, the two sides, the attribution runs) and
requests/s for the whole compare. Target: >= 2e5 requests/s, i.e. a 1e6-request compare in
under 10 s on the 2-core reference machine. Machine-dependent: compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time
from pathlib import Path

from inference_factory.factory import compare as fcompare
from inference_factory.factory.config import load_config
from inference_factory.factory.simulate import simulate
from inference_factory.factory.workload import generate_trace

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "factory.toml"


def run(n: int, attribution: bool) -> None:
    cfg = load_config(CONFIG)
    wl = dataclasses.replace(cfg.workload, n_requests=n)
    cfg = dataclasses.replace(cfg, workload=wl, baseline=dataclasses.replace(cfg.baseline, workload=wl))
    t0 = time.perf_counter()
    trace = generate_trace(cfg.workload)
    t_trace = time.perf_counter() - t0
    t1 = time.perf_counter()
    simulate(cfg.baseline, trace)
    t_base = time.perf_counter() - t1
    t2 = time.perf_counter()
    simulate(cfg, trace)
    t_fact = time.perf_counter() - t2
    t3 = time.perf_counter()
    fcompare.compare(cfg, attribution=attribution, trace=trace)
    t_cmp = time.perf_counter() - t3
    total = t_trace + t_cmp
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"requests {n:,}: trace {t_trace:.2f} s, baseline side {t_base:.2f} s, factory side "
          f"{t_fact:.2f} s (incl. exact cache simulation)")
    print(f"compare{' with attribution' if attribution else ''}: {t_cmp:.2f} s; trace + compare "
          f"{total:.2f} s = {n / total:,.0f} requests/s; peak memory {peak:,.0f} MiB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--attribution", action="store_true")
    a = ap.parse_args()
    run(a.requests, a.attribution)
