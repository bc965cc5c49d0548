"""Benchmark: a chunked sweep of 10^6 and 10^7 grid points, written to Zarr and to Parquet,
with wall time, points per second and peak resident memory.

The grid is batch_size x kv_len x draft_depth x acceptance_rate x cache_hit_rate for
DeepSeek-V3 on H800 at DeepSeek's decode deployment shape (realism on). Each run is a fresh
Python process, so its peak memory (``ru_maxrss``) is its own: with chunked evaluation the
peak stays about the same from 10^6 to 10^7 points, because only a few blocks of
``--chunk`` points are in memory at once. ``--contrast`` adds the same sweep evaluated in
memory (one ``evaluate`` call, one ``to_dataframe``), whose peak grows with the grid.

    python benchmarks/bench_sweep.py [--sizes 1e6 1e7] [--chunk 1000000] [--formats zarr parquet]
                                     [--contrast]

The Zarr store holds the Dataset (variables keep only the dimensions they depend on); the
Parquet file holds the tidy frame, one row per grid point (10^7 rows, ~45 columns). Figures
depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

FIXED = {"dp": 32, "ep": 32, "redundant_experts": 32, "overlap": "two-batch",
         "kv_precision": "fp8", "prompt_len": 4096.0}

#: grid shapes. mixed: (batch_size, kv_len, draft_depth, acceptance_rate, cache_hit_rate);
#: the engine's variables depend on some axes only (decode ones not on cache_hit_rate, most
#: not on acceptance_rate), so the Dataset is far smaller than the grid, the tidy frame not.
#: dense: (batch_size, kv_len, draft_depth): every decode variable spans the whole grid.
SHAPES = {
    "mixed": {10 ** 5: (25, 20, 4, 5, 10), 10 ** 6: (50, 50, 4, 10, 10),
              10 ** 7: (125, 100, 4, 20, 10), 10 ** 8: (250, 250, 4, 40, 10)},
    "dense": {10 ** 5: (50, 200, 10), 10 ** 6: (200, 500, 10), 10 ** 7: (1000, 1000, 10),
              10 ** 8: (2500, 4000, 10)},
}


def _spec(grid: str, points: int):
    import numpy as np

    from inference_factory.analysis.sweep import SweepSpec

    shape = SHAPES[grid][points]
    axes = {"batch_size": tuple(float(v) for v in np.linspace(1, 1024, shape[0])),
            "kv_len": tuple(float(v) for v in np.linspace(512, 131072, shape[1]).round()),
            "draft_depth": tuple(float(v) for v in range(shape[2]))}
    if grid == "mixed":
        axes["acceptance_rate"] = tuple(float(v) for v in np.linspace(0.5, 0.95, shape[3]))
        axes["cache_hit_rate"] = tuple(float(v) for v in np.linspace(0.0, 0.9, shape[4]))
    for k, v in axes.items():
        assert len(set(v)) == len(v), k
    spec = SweepSpec(models=("DeepSeek-V3",), hardware=("H800-SXM",), axes=axes, fixed=FIXED)
    assert spec.n_points == points, (spec.n_points, points)
    return spec


def child(grid: str, points: int, chunk: int, fmt: str, in_memory: bool) -> dict:
    """One measurement in this (fresh) process."""
    import inference_factory as inf
    from inference_factory.analysis.sweep import run_sweep, write_result

    spec = _spec(grid, points)
    inf.evaluate("DeepSeek-V3", "H800-SXM", **FIXED)          # warm the spec cache
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        path = os.path.join(tmp, f"grid.{fmt}")
        t0 = time.perf_counter()
        ds = run_sweep(spec, chunks=None if in_memory else chunk, lazy=True)
        write_result(ds, path)
        wall = time.perf_counter() - t0
        if os.path.isdir(path):
            size = sum(os.path.getsize(os.path.join(r, f))
                       for r, _, fs in os.walk(path) for f in fs)
        else:
            size = os.path.getsize(path)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mode = "in memory" if in_memory else f"chunked {chunk:.0e}"
    return {"grid": grid, "points": points, "mode": mode, "format": fmt, "wall_s": wall, "points_per_s": points / wall,
            "peak_rss_mib": peak, "baseline_rss_mib": base, "output_mib": size / 2 ** 20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    ap.add_argument("--chunk", type=int, default=1_000_000, help="points per block")
    ap.add_argument("--formats", nargs="+", default=["zarr", "parquet"],
                    choices=["zarr", "nc", "parquet", "csv"])
    ap.add_argument("--grids", nargs="+", default=["mixed", "dense"], choices=list(SHAPES))
    ap.add_argument("--contrast", action="store_true", help="also run each size in memory")
    ap.add_argument("--child", nargs=5, metavar=("GRID", "POINTS", "CHUNK", "FORMAT", "IN_MEMORY"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        g, p, c, f, m = args.child
        print(json.dumps(child(g, int(p), int(c), f, m == "1")))
        return

    sizes = [int(s) for s in args.sizes]
    for s in sizes:
        if s not in SHAPES["mixed"]:
            ap.error(f"--sizes: {s:.0e} not in {[f'{k:.0e}' for k in SHAPES['mixed']]}")
    print(f"DeepSeek-V3 on H800-SXM (DP32 EP32, two-batch overlap, FP8 KV), realism on; "
          f"blocks of {args.chunk:,} points; {os.cpu_count()} CPUs")
    print("grid mixed: batch_size x kv_len x draft_depth x acceptance_rate x cache_hit_rate; "
          "dense: batch_size x kv_len x draft_depth")
    head = (f"{'grid':<6}{'points':>12}  {'mode':<14}{'format':<9}{'time s':>8}  "
            f"{'points/s':>12}  {'peak RSS MiB':>12}  {'of which base':>13}  {'output MiB':>10}")
    print(head)
    print("-" * len(head))
    modes = [False] + ([True] if args.contrast else [])
    for grid in args.grids:
        for fmt in args.formats:
            for in_memory in modes:
                for s in sizes:
                    cmd = [sys.executable, __file__, "--child", grid, str(s), str(args.chunk),
                           fmt, "1" if in_memory else "0"]
                    out = subprocess.run(cmd, capture_output=True, text=True)
                    mode = "in memory" if in_memory else "chunked"
                    if out.returncode:
                        print(f"{grid:<6}{s:>12,}  {mode:<14}{fmt:<9}failed: "
                              f"{out.stderr.strip().splitlines()[-1:]}")
                        continue
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    print(f"{grid:<6}{r['points']:>12,}  {r['mode']:<14}{r['format']:<9}"
                          f"{r['wall_s']:>8.1f}  {r['points_per_s']:>12,.0f}  "
                          f"{r['peak_rss_mib']:>12,.0f}  {r['baseline_rss_mib']:>13,.0f}  "
                          f"{r['output_mib']:>10,.1f}")
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
