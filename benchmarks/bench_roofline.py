"""Benchmark: grid points per second of a full prefill + decode evaluation (realism on).

Worst case first: every point is a distinct random configuration (batch size, KV length,
prompt length, prefill batch, draft depth, acceptance, cache-hit rate) along one ``point``
dimension, so nothing is separable and every variable is computed at every point. Then the
usual sweep: an outer-product grid of the same seven axes, where decode and prefill
variables are computed on their own sub-grids and broadcast. The grid is evaluated in
chunks so peak memory stays bounded; a plain Python loop over scalar points in the same run
gives the speed ratio.

    python benchmarks/bench_roofline.py [--points 10000000] [--chunk 1000000] [--loop 200] [--threads N]

Figures are machine- and load-dependent: compare the ratio, not the absolute rate.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import xarray as xr

import inference_factory as inf

CASES = {
    "DeepSeek-V3/H800 (MLA, MoE, DP+EP over nodes, MTP, two-batch)":
        ("DeepSeek-V3", "H800-SXM", dict(dp=32, ep=32, redundant_experts=32, expert_skew=0.8,
                                         overlap="two-batch", kv_precision="fp8"), True),
    "Llama-3.1-70B/H100 TP8 (dense GQA)": ("Llama-3.1-70B", "H100-SXM", dict(tp=8), False),
}


def _random_axes(rng, n, mtp):
    def da(values):
        return xr.DataArray(values, dims="point")
    return dict(
        batch_size=da(rng.integers(1, 513, n).astype(float)),
        kv_len=da(rng.integers(128, 32769, n).astype(float)),
        prompt_len=da(rng.integers(128, 32769, n).astype(float)),
        prefill_batch_size=da(rng.integers(1, 9, n).astype(float)),
        draft_depth=da(rng.integers(0, 4 if mtp else 1, n).astype(float)),
        acceptance_rate=da(rng.uniform(0.5, 0.95, n)),
        cache_hit_rate=da(rng.uniform(0.0, 0.9, n)),
    )


def _summary(ds):
    # a reduction that touches the outputs, as a sweep writing results would
    return (float(ds.decode_tokens_per_s_per_gpu.max()) + float(ds.ttft_s.min())
            + int((ds.decode_binding_resource == "memory").sum()))


def run_grid(points_target: int) -> None:
    """An outer-product grid of named axes (the usual sweep): decode variables depend on the
    decode axes only and prefill variables on the prefill axes, so the work grows with the
    sum of the sub-grids while the Dataset describes every point of the product."""
    n = max(int(round(points_target ** (1 / 7))), 2)
    axes = dict(batch_size=np.geomspace(1, 512, n).round(), kv_len=np.geomspace(256, 32768, n).round(),
                draft_depth=np.arange(n) % 4, acceptance_rate=np.linspace(0.5, 0.95, n),
                prompt_len=np.geomspace(128, 32768, n).round(), prefill_batch_size=np.arange(1, n + 1),
                cache_hit_rate=np.linspace(0, 0.9, n))
    axes["draft_depth"] = np.unique(axes["draft_depth"])
    total = int(np.prod([len(v) for v in axes.values()]))
    t0 = time.perf_counter()
    ds = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=32, ep=32, redundant_experts=32,
                      overlap="two-batch", kv_precision="fp8", **{k: list(v) for k, v in axes.items()})
    _summary(ds)
    dt = time.perf_counter() - t0
    print(f"outer-product grid, DeepSeek-V3/H800: {total:,} points ({dict((k, len(v)) for k, v in axes.items())})"
          f" in {dt:.2f} s = {total / dt:,.0f} points/s")


def run(points: int, chunk: int, loop_points: int, seed: int = 0, threads: int = 1) -> None:
    rng = np.random.default_rng(seed)
    print(f"points {points:,}, chunk {chunk:,}, threads {threads}, python-loop sample {loop_points}")
    for label, (model, hw, kw, mtp) in CASES.items():
        inf.evaluate(model, hw, **kw)  # warm the spec cache
        blocks = [(i, min(chunk, points - i)) for i in range(0, points, chunk)]

        def one(block):
            # each block draws its own points (seeded by its offset): memory stays bounded
            start, n = block
            axes = _random_axes(np.random.default_rng((seed, start)), n, mtp)
            return _summary(inf.evaluate(model, hw, **kw, **axes))

        t0 = time.perf_counter()
        if threads > 1:   # numpy releases the GIL inside ufuncs: blocks run side by side
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(one, blocks))
        else:
            for axes in blocks:
                one(axes)
        vec_s = time.perf_counter() - t0
        axes = _random_axes(rng, loop_points, mtp)
        t0 = time.perf_counter()
        for i in range(loop_points):
            point = {k: float(v.values[i]) for k, v in axes.items()}
            inf.evaluate(model, hw, **kw, **point)
        loop_s = time.perf_counter() - t0
        vec_rate, loop_rate = points / vec_s, loop_points / loop_s
        print(f"{label}\n  vectorized {vec_rate:,.0f} points/s ({vec_s:.2f} s)   "
              f"python loop {loop_rate:,.1f} points/s   ratio {vec_rate / loop_rate:,.0f}x")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=10_000_000)
    ap.add_argument("--chunk", type=int, default=1_000_000)
    ap.add_argument("--loop", type=int, default=200)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="blocks evaluated side by side (default: all cores)")
    a = ap.parse_args()
    run(a.points, a.chunk, a.loop, threads=a.threads)
    run_grid(a.points)
