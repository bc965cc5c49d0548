"""Benchmark: the speed targets of issue 11, in one run, as ratios (to the targets and, with
``--ref``, to another commit measured interleaved in the same run).

    python benchmarks/bench_speed.py [--reps 3] [--points 1000000] [--ref main]
                                     [--llm-analysis-python PATH] [--skip rss,compare]
    python benchmarks/bench_speed.py --profile nonsep_dsv3      # where one tile's time goes

Every measurement is a fresh subprocess (PYTHONPATH at that version's ``src``, BLAS at one
thread, ``INFERENCE_FACTORY_*_DIR`` unset) that imports, warms up (a smaller call of the same
kind: specs, tables, compiled code from the on-disk caches; 2^19 points for the point lists,
so their program's kernel is compiled or loaded, as in any later run) and times one workload:

  nonsep_dsv3   DeepSeek-V3, H800-SXM, dp=32, ep=32, two-batch overlap: ``--points`` random
                non-separable points (batch, context, prompt, prefill batch, acceptance, cache
                hit and draft depth all differ at every point)                       [points/s]
  nonsep_llama  Llama-3.1-70B, H100-SXM, tp=8: the same without draft depth          [points/s]
  loop_dsv3     nonsep_dsv3 as a Monte Carlo loop: 4 batches of ``--points`` new random points
                after a warm-up batch of as many, each result dropped before the next call
                (output memory reused)                                              [points/s]
  loop_llama    the same for nonsep_llama                                            [points/s]
  outer         DeepSeek-V3 as above over an outer product: batch 256 x context 64 x draft
                depth 3 x prompt 64 x cache hit 8 = 25,165,824 points                 [points/s]
  single        Llama-3.1-70B TP8, batch 64, context 2048: 200 one-point calls       [calls/s]
  rss           nonsep_llama at 10^7 points: peak resident memory of the process        [MiB]
  rss_selected  the same, keeping four output variables (``variables=[...]``: TPOT, TTFT,
                decode tokens/s per GPU, fits), as a Monte Carlo study would            [MiB]
  compare       the factory's ``compare`` without attribution on a 10^6-request trace
                (trace generation + baseline + factory), configs/factory.toml     [requests/s]
  llm_analysis  llm-analysis 0.2.2 ``LLMAnalysis.inference`` on the same Llama-3.1-70B TP8
                H100 configurations (batch, context) as nonsep_llama, one call each [configs/s]

llm-analysis pins old transformers, so it lives beside the project in its own venv::

    python3 -m venv ~/.venvs/llm-analysis && ~/.venvs/llm-analysis/bin/pip install llm-analysis==0.2.2
    python benchmarks/bench_speed.py --llm-analysis-python ~/.venvs/llm-analysis/bin/python

Without it (not importable by that interpreter) the row is skipped with that hint.

``--ref COMMIT`` checks the commit out as a detached worktree (``--ref-dir``, default
/tmp/if_speed_ref) and runs every workload there too, alternating versions each round; the
table then gives ref and working tree side by side and their ratio. Rates use the minimum
time over the reps (the machine is shared: the minimum is the least disturbed run); RSS is
the largest peak over the reps. Absolute numbers depend on the machine; trust the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LLAMA = dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8)
DSV3 = dict(model="DeepSeek-V3", hardware="H800-SXM", dp=32, ep=32, overlap="two-batch")

#: The outputs kept by ``rss_selected``.
SELECTED = ["tpot_s", "ttft_s", "decode_tokens_per_s_per_gpu", "fits"]

#: workload -> (unit, target, "higher is better")
TARGETS = {
    "nonsep_dsv3": ("points/s", 1e7, True),
    "nonsep_llama": ("points/s", 1e7, True),
    "loop_dsv3": ("points/s", 1e7, True),
    "loop_llama": ("points/s", 1e7, True),
    "outer": ("points/s", 2.6e8, True),
    "single": ("calls/s", 2e3, True),
    "rss": ("MiB", 1024.0, False),
    "rss_selected": ("MiB", 1024.0, False),
    "compare": ("requests/s", 5e5, True),
    "llm_analysis": ("configs/s", None, True),
}


def nonsep_grid(n: int, draft: bool, seed: int = 0) -> dict:
    """Random non-separable points: every numeric axis differs at every point."""
    import numpy as np
    import xarray as xr
    rng = np.random.default_rng(seed)

    def da(v):
        return xr.DataArray(v, dims="point")
    grid = dict(batch_size=da(rng.integers(1, 513, n).astype(float)),
                kv_len=da(rng.integers(128, 32769, n).astype(float)),
                prompt_len=da(rng.integers(128, 32769, n).astype(float)),
                prefill_batch_size=da(rng.integers(1, 9, n).astype(float)),
                acceptance_rate=da(rng.uniform(0.5, 0.95, n)),
                cache_hit_rate=da(rng.uniform(0.0, 0.9, n)))
    if draft:
        grid["draft_depth"] = da(rng.integers(0, 4, n).astype(float))
    return grid


def _release_freed_memory() -> None:
    """Give the warm-up's freed arrays back to the OS (glibc keeps freed blocks in its heap):
    peak RSS then measures the timed call, not the warm-up's leftovers. Only for the memory
    workloads: the rate workloads time a call that reuses that memory, as a repeated call
    (a Monte Carlo loop) does; fresh pages cost more on first touch."""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _evaluate_worker(name: str, n: int) -> dict:
    import numpy as np
    import inference_factory as inf
    extra = {}
    grids = None
    if name in ("loop_dsv3", "loop_llama"):
        draft = name == "loop_dsv3"
        base = DSV3 if draft else LLAMA
        grids = [nonsep_grid(n, draft=draft, seed=10 + k) for k in range(4)]
        warm = nonsep_grid(n, draft=draft, seed=1)     # a batch before: the loop's state
        calls, points = 4, 4 * n
    elif name in ("nonsep_dsv3", "nonsep_llama", "rss", "rss_selected"):
        base = DSV3 if name == "nonsep_dsv3" else LLAMA
        n = 10_000_000 if name.startswith("rss") else n
        grid = nonsep_grid(n, draft=name == "nonsep_dsv3")
        # warm-up on enough points to take the same path: the fused pass, with the program's
        # kernel compiled (or loaded from the on-disk cache, as any later run does) and
        # numba's interpreter loaded from its cache
        warm = nonsep_grid(1 << 19, draft=name == "nonsep_dsv3", seed=1)
        extra = dict(variables=SELECTED) if name == "rss_selected" else {}
        calls, points = 1, n
    elif name == "outer":
        base = DSV3
        grid = dict(batch_size=list(range(1, 257)),
                    kv_len=[float(x) for x in np.geomspace(128, 32768, 64)],
                    draft_depth=[0, 1, 2], prompt_len=[float(x) for x in np.geomspace(128, 32768, 64)],
                    cache_hit_rate=[float(x) for x in np.linspace(0.0, 0.875, 8)])
        warm = dict(batch_size=[1, 2], kv_len=[128.0, 256.0], draft_depth=[0, 1],
                    prompt_len=[128.0, 256.0], cache_hit_rate=[0.0, 0.5])
        calls, points = 1, 256 * 64 * 3 * 64 * 8
    else:    # single
        base, grid, warm = LLAMA, dict(batch_size=64, kv_len=2048), dict(batch_size=1, kv_len=128)
        calls, points = 200, 200
    kw = dict(base)
    model, hw = kw.pop("model"), kw.pop("hardware")
    inf.evaluate(model, hw, **kw, **warm, **extra)
    del warm
    if name.startswith("rss"):
        _release_freed_memory()
    t0 = time.perf_counter()
    for k in range(calls):
        inf.evaluate(model, hw, **kw, **(grids[k] if grids else grid), **extra)
    return dict(t=time.perf_counter() - t0, count=points, file=inf.__file__)


def _compare_worker(n: int) -> dict:
    import dataclasses
    import inference_factory
    from inference_factory.factory import compare as fcompare
    from inference_factory.factory.config import load_config
    from inference_factory.factory.workload import generate_trace
    cfg = load_config(REPO / "configs" / "factory.toml")
    small = dataclasses.replace(cfg.workload, n_requests=2000)
    fcompare.compare(dataclasses.replace(cfg, workload=small), attribution=False,
                     trace=generate_trace(small))                       # warm-up
    wl = dataclasses.replace(cfg.workload, n_requests=n)
    cfg = dataclasses.replace(cfg, workload=wl,
                              baseline=dataclasses.replace(cfg.baseline, workload=wl))
    t0 = time.perf_counter()
    fcompare.compare(cfg, attribution=False, trace=generate_trace(cfg.workload))
    return dict(t=time.perf_counter() - t0, count=n, file=inference_factory.__file__)


def _llm_analysis_worker(n: int) -> dict:
    """llm-analysis on Llama-3.1-70B (dimensions read from models/Llama-3.1-70B.toml), H100
    SXM 80 GB (its bundled GPU file), TP 8, BF16, one prefill + one generated token."""
    import logging
    import tomllib
    from llm_analysis.analysis import LLMAnalysis
    from llm_analysis.config import (ModelConfig, ParallelismConfig, get_dtype_config_by_name,
                                     get_gpu_config_by_name)
    from llm_analysis.logger import logger
    logger.setLevel(logging.ERROR)
    spec = tomllib.loads((REPO / "models" / "Llama-3.1-70B.toml").read_text())
    a, att, ffn = spec["architecture"], spec["attention"], spec["ffn"]
    model = ModelConfig(name="Llama-3.1-70B", num_layers=a["n_layers"], n_head=att["n_q_heads"],
                        hidden_dim=a["hidden_size"], vocab_size=a["vocab_size"],
                        max_seq_len=a["max_position_embeddings"],
                        num_key_value_heads=att["n_kv_heads"],
                        ffn_embed_dim=ffn["dense_intermediate_size"],
                        # given with the width: llm-analysis asserts an integer ratio otherwise
                        expansion_ratio=ffn["dense_intermediate_size"] / a["hidden_size"],
                        model_type="llama")
    la = LLMAnalysis(model, get_gpu_config_by_name("h100-sxm-80gb"),
                     get_dtype_config_by_name("w16a16e16"), ParallelismConfig(tp_size=8))
    import numpy as np
    rng = np.random.default_rng(0)                     # the first draws of nonsep_grid
    bs = rng.integers(1, 513, n)
    kv = rng.integers(128, 32769, n)
    la.inference(batch_size_per_gpu=1, seq_len=128, num_tokens_to_generate=1)
    fits = []
    for b, s in zip(bs.tolist(), kv.tolist()):     # keep what llm-analysis accepts (untimed)
        try:
            la.inference(batch_size_per_gpu=b, seq_len=s, num_tokens_to_generate=1)
            fits.append((b, s))
        except AssertionError:                     # it refuses what does not fit in memory
            pass
    t0 = time.perf_counter()
    for b, s in fits:
        la.inference(batch_size_per_gpu=b, seq_len=s, num_tokens_to_generate=1)
    return dict(t=time.perf_counter() - t0, count=len(fits), refused=n - len(fits),
                file="llm_analysis")


def worker(name: str, n: int) -> None:
    import resource
    if name == "compare":
        r = _compare_worker(n)
    elif name == "llm_analysis":
        r = _llm_analysis_worker(n)
    else:
        r = _evaluate_worker(name, n)
    r["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(r))


def profile(name: str, n: int) -> None:
    import cProfile
    import pstats
    import inference_factory as inf
    base = dict(LLAMA if name != "nonsep_dsv3" else DSV3)
    model, hw = base.pop("model"), base.pop("hardware")
    if name == "single":
        grid, warm, calls = dict(batch_size=64, kv_len=2048), dict(batch_size=1, kv_len=128), 200
    else:
        grid = nonsep_grid(n, draft=name == "nonsep_dsv3")
        warm, calls = nonsep_grid(5000, draft=name == "nonsep_dsv3", seed=1), 1
    inf.evaluate(model, hw, **base, **warm)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        inf.evaluate(model, hw, **base, **grid)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(30)


def run_one(python: str, src: Path | None, name: str, n: int) -> dict | str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERENCE_FACTORY_")}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [python, str(Path(__file__).resolve()), "--worker", name, "--points", str(n)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/tmp")
    if p.returncode:
        return p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if src is not None:
        assert Path(r["file"]).resolve().is_relative_to(src.resolve()), (r["file"], src)
    return r


def _rate(rs: list[dict], name: str) -> float:
    if name.startswith("rss"):
        return max(r["rss"] for r in rs)
    return max(r["count"] / r["t"] for r in rs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--points", type=int, default=1_000_000,
                    help="points of the non-separable workloads (requests of compare: 10^6)")
    ap.add_argument("--ref", help="a commit to measure side by side (interleaved)")
    ap.add_argument("--ref-dir", type=Path, default=Path("/tmp/if_speed_ref"))
    ap.add_argument("--llm-analysis-python", default=sys.executable)
    ap.add_argument("--llm-analysis-configs", type=int, default=2000)
    ap.add_argument("--skip", default="", help="comma-separated workloads to leave out")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--profile", choices=["nonsep_dsv3", "nonsep_llama", "single"],
                    help="instead: cProfile (top 30 by own time) of one call of that workload "
                         "in this process (``--points``, default here 65,536: one tile)")
    ap.add_argument("--worker")
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.points)
    if a.profile:
        return profile(a.profile, a.points if a.points != 1_000_000 else 65_536)
    skip = set(filter(None, a.skip.split(",")))
    versions = {"tree": REPO / "src"}
    if a.ref:
        if not a.ref_dir.exists():
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(a.ref_dir),
                            a.ref], check=True, capture_output=True)
        versions = {"ref": a.ref_dir / "src", "tree": REPO / "src"}
    names = [w for w in TARGETS if w not in skip and w != "llm_analysis"]
    res: dict = {(v, w): [] for v in versions for w in names}
    errors: dict = {}
    for rep in range(a.reps):
        for w in names:
            n = 1_000_000 if w == "compare" else a.points
            order = list(versions) if rep % 2 == 0 else list(versions)[::-1]
            for v in order:
                r = run_one(sys.executable, versions[v], w, n)
                if isinstance(r, str):
                    errors[v, w] = r
                else:
                    res[v, w].append(r)
        print(f"round {rep + 1}/{a.reps} done", file=sys.stderr)
    llm = None
    if "llm_analysis" not in skip:
        r = run_one(a.llm_analysis_python, None, "llm_analysis", a.llm_analysis_configs)
        llm = r if isinstance(r, dict) else None
        if llm is None:
            errors["-", "llm_analysis"] = (
                f"skipped ({r}); install it beside the project: python3 -m venv "
                "~/.venvs/llm-analysis && ~/.venvs/llm-analysis/bin/pip install "
                "llm-analysis==0.2.2, then pass --llm-analysis-python "
                "~/.venvs/llm-analysis/bin/python")

    out = {}
    cols = list(versions)
    print(f"bench_speed: {a.reps} reps, non-separable points {a.points:,}; versions: "
          + ", ".join(f"{v}={p}" for v, p in versions.items()))
    head = f"{'workload':<14}{'unit':<12}" + "".join(f"{c:>12}" for c in cols)
    head += f"{'tree/ref':>10}" if a.ref else ""
    print(head + f"{'target':>10}{'tree/target':>12}")
    for w in names:
        unit, target, _ = TARGETS[w]
        vals = {v: _rate(res[v, w], w) if res[v, w] else float("nan") for v in cols}
        out[w] = vals
        line = f"{w:<14}{unit:<12}" + "".join(f"{vals[v]:>12.4g}" for v in cols)
        if a.ref:
            line += f"{vals['tree'] / vals['ref']:>10.2f}"
        line += f"{target:>10.3g}{vals['tree'] / target:>12.2f}"
        print(line)
    if llm is not None:
        rate = llm["count"] / llm["t"]
        out["llm_analysis"] = {"rate": rate}
        print(f"{'llm_analysis':<14}{'configs/s':<12}{rate:>12.4g}   (one process, "
              f"{llm['count']} configurations, {llm['refused']} refused as not fitting)")
        for w in ("nonsep_llama", "single"):
            if w in out:
                print(f"  {w} / llm-analysis: " + ", ".join(
                    f"{v} {out[w][v] / rate:.3g}x" for v in cols)
                      + ("  (target 1000x)" if w == "nonsep_llama" else ""))
    for (v, w), e in errors.items():
        print(f"{w} ({v}): {e}")
    if a.json:
        a.json.write_text(json.dumps({"results": out, "errors": {f"{v}/{w}": e for (v, w), e
                                                                  in errors.items()}}, indent=1))


if __name__ == "__main__":
    main()
