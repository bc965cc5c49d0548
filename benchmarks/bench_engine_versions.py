"""Benchmark: `inference_factory.evaluate` throughput of the current engine (working tree,
``src/inference_factory/engine/`` package) against an older commit, side by side in one run.

    python benchmarks/bench_engine_versions.py --old-ref 5a4eae7 [--reps 5] [--profile]

The old commit is checked out as a git worktree (``--old-dir``, default /tmp/old_engine; made
if missing). Both versions import as ``inference_factory``, so every measurement is a fresh
subprocess with PYTHONPATH at that version's ``src`` (and INFERENCE_FACTORY_*_DIR unset, so
hardware/models/configs come from that checkout). Each subprocess imports, warms up with one
single-point call of the workload's model/hardware, then times one workload:

  A  Llama-3.1-70B, H100-SXM, tp=8: batch_size 1..256 x kv_len 64 geomspace(128, 32768) = 16,384 pts
  B  DeepSeek-V3, H800-SXM, dp=32, ep=32, overlap=two-batch: as A x draft_depth [0,1,2] = 49,152 pts
  C  Llama-3.1-70B, H100-SXM, tp=8, batch_size=64, kv_len=2048: 200 one-point calls (calls/s)
  D  as B, 100,000 random non-separable points (every axis differs at every point)
  E  as A, 100,000 random non-separable points

Old and new subprocesses alternate (the order flips every round), ``--reps`` rounds each.
Read the table as: rate = points/s (calls/s for C) from the min and the median time over the
reps; ``new/old`` = new rate / old rate (> 1: the new engine is faster); RSS = the largest
peak resident memory (ru_maxrss) of that version's subprocesses for the workload. Absolute
numbers depend on the machine and its load; on a shared machine trust the ratios of min times.
``--profile`` adds cProfile of the new engine on workload B (top 15 by cumulative time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = "ABCDE"
LLAMA = dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8)
DSV3 = dict(model="DeepSeek-V3", hardware="H800-SXM", dp=32, ep=32, overlap="two-batch")


def workload(name: str):
    """(base kwargs, grid kwargs, number of calls) of workload ``name``."""
    import numpy as np
    bs, kv = list(range(1, 257)), [float(x) for x in np.geomspace(128, 32768, 64)]
    if name == "A":
        return LLAMA, dict(batch_size=bs, kv_len=kv), 1
    if name == "B":
        return DSV3, dict(batch_size=bs, kv_len=kv, draft_depth=[0, 1, 2]), 1
    if name in ("D", "E"):       # non-separable: every variable differs at every point
        from bench_speed import nonsep_grid   # the one generator of random points
        return (DSV3, nonsep_grid(100_000, draft=True), 1) if name == "D" else \
            (LLAMA, nonsep_grid(100_000, draft=False), 1)
    return LLAMA, dict(batch_size=64, kv_len=2048), 200


def worker(name: str, profile: bool) -> None:
    import resource
    import time
    import inference_factory as inf
    base, grid, calls = workload(name)
    kw = dict(base)
    model, hw = kw.pop("model"), kw.pop("hardware")
    inf.evaluate(model, hw, batch_size=1, kv_len=128, **kw)  # warm-up: specs, tables, imports
    if profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        inf.evaluate(model, hw, **kw, **grid)
        pr.disable()
        pstats.Stats(pr, stream=sys.stderr).sort_stats("cumulative").print_stats(15)
        return
    t0 = time.perf_counter()
    for _ in range(calls):
        ds = inf.evaluate(model, hw, **kw, **grid)
    dt = time.perf_counter() - t0
    pts = 1
    for d in ("batch_size", "kv_len", "draft_depth", "point"):
        pts *= ds.sizes.get(d, 1)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(dict(file=inf.__file__, t=dt, points=pts * calls, rss=rss)))


def run_one(src: Path, name: str, profile: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERENCE_FACTORY_")}
    env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name]
    if profile:
        cmd.append("--profile")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/tmp")
    if p.returncode:
        raise SystemExit(f"worker {name} ({src}) failed:\n{p.stderr}")
    if profile:
        return {"profile": p.stderr}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert Path(r["file"]).resolve().is_relative_to(src.resolve()), (r["file"], src)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-ref", default="5a4eae7")
    ap.add_argument("--old-dir", type=Path, default=Path("/tmp/old_engine"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--worker")
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.profile)
    if not a.old_dir.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(a.old_dir),
                        a.old_ref], check=True, capture_output=True)
    srcs = {"old": a.old_dir / "src", "new": REPO / "src"}
    res = {(v, w): [] for v in srcs for w in WORKLOADS}
    for rep in range(a.reps):
        for w in WORKLOADS:
            for v in (("old", "new") if rep % 2 == 0 else ("new", "old")):
                res[v, w].append(run_one(srcs[v], w))
        print(f"round {rep + 1}/{a.reps} done", file=sys.stderr)
    unit = {"A": "pts/s", "B": "pts/s", "C": "calls/s", "D": "pts/s", "E": "pts/s"}
    print(f"old = {a.old_ref} ({a.old_dir}), new = working tree ({REPO}); {a.reps} reps each, "
          "interleaved")
    print(f"{'wl':<3}{'points':>8} {'unit':<8}{'old min-t':>11}{'new min-t':>11}{'new/old':>8}"
          f"{'old med-t':>11}{'new med-t':>11}{'new/old':>8}{'RSS old':>9}{'RSS new':>9} MiB")
    for w in WORKLOADS:
        row, rates = {}, {}
        for v in srcs:
            ts = [r["t"] for r in res[v, w]]
            n = res[v, w][0]["points"] if w != "C" else 200
            row[v] = (n, min(ts), statistics.median(ts), max(r["rss"] for r in res[v, w]))
            rates[v] = (n / min(ts), n / statistics.median(ts))
        n = row["new"][0]
        fmt = lambda x: f"{x:>11.4g}"  # noqa: E731
        print(f"{w:<3}{n:>8} {unit[w]:<8}{fmt(rates['old'][0])}{fmt(rates['new'][0])}"
              f"{rates['new'][0] / rates['old'][0]:>8.2f}{fmt(rates['old'][1])}"
              f"{fmt(rates['new'][1])}{rates['new'][1] / rates['old'][1]:>8.2f}"
              f"{row['old'][3]:>9.0f}{row['new'][3]:>9.0f}")
    if a.profile:
        print("\ncProfile, new engine, workload B (top 15 cumulative):")
        print(run_one(srcs["new"], "B", profile=True)["profile"])


if __name__ == "__main__":
    main()
