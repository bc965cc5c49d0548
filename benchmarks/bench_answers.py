"""Benchmark: how long the answers users wait for take, end to end, as fresh processes, against
another commit measured interleaved in the same run (issue 19's latency table; the
targets are issue 27's).

    python benchmarks/bench_answers.py [--ref 9885e2f] [--reps 5] [--install]

Workloads (each a fresh ``python -m inference_factory ...`` with PYTHONPATH at that version's
``src``, run from the repository root of that version):

  roofline_warm    one-point ``roofline`` (Llama-3.1-70B, H100-SXM, TP8, batch 64, context
                   4096), caches warm (a run before the timed ones)
  roofline_fresh   the same with empty caches (``NUMBA_CACHE_DIR`` and
                   ``INFERENCE_FACTORY_CACHE_DIR`` pointed at a new empty folder each time:
                   numba then neither reads nor writes ``__pycache__``): the first answer
                   after an install
  plan_2           ``plan -m DeepSeek-V3 -H H200-SXM,B200 --gpus 64 --isl 4096 --osl 1024
                   --tpot 50ms`` (the frozen plan of ``tests/test_frozen_answers.py``)
  plan_4           ``plan -m DeepSeek-V3 -H H100-SXM,H200-SXM,B200,MI355X --gpus 64 --isl 4096
                   --osl 1024 --tpot 50ms``
  bench_9          ``bench -m DeepSeek-R1 -H B200 -p tp=4,ep=4`` at FP4 weights and experts and
                   an FP8 cache, ISL 8192 / OSL 1024, 9 concurrencies 4..1024
  validate         ``validate --cases validation/dev_cases.csv``
  compare          ``compare --config configs/factory.toml`` (the README's main job)

``--install`` adds ``install_compare``: the README's first command on a new virtual
environment (``python3 -m venv``, ``pip install .``, ``inference-factory compare --config
configs/factory.toml``), once per version (pip's own cache of downloaded wheels is used, as
on any machine that has installed packages before).

The table gives, per workload, the minimum wall time over ``--reps`` for each version, their
ratio (tree / ref) and the target. On a shared machine read the ratios of the minima.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKLOADS = {
    "roofline_warm": (["roofline", "-m", "Llama-3.1-70B", "-H", "H100-SXM", "--tp", "8",
                       "--batch-size", "64", "--kv-len", "4096"], False, 0.3),
    "roofline_fresh": (["roofline", "-m", "Llama-3.1-70B", "-H", "H100-SXM", "--tp", "8",
                        "--batch-size", "64", "--kv-len", "4096"], True, 3.0),
    "plan_2": (["plan", "-m", "DeepSeek-V3", "-H", "H200-SXM,B200", "--gpus", "64", "--isl",
                "4096", "--osl", "1024", "--tpot", "50ms"], False, 1.0),
    "plan_4": (["plan", "-m", "DeepSeek-V3", "-H", "H100-SXM,H200-SXM,B200,MI355X", "--gpus",
                "64", "--isl", "4096", "--osl", "1024", "--tpot", "50ms"], False, 1.5),
    "bench_9": (["bench", "-m", "DeepSeek-R1", "-H", "B200", "-p", "tp=4,ep=4",
                 "--weight-precision", "fp4", "--moe-precision", "fp4", "--kv-precision", "fp8",
                 "--isl", "8192", "--osl", "1024", "-c", "4,8,16,32,64,128,256,512,1024"],
                False, 0.6),
    "validate": (["validate", "--cases", "validation/dev_cases.csv"], False, 2.0),
    "compare": (["compare", "--config", "configs/factory.toml"], False, 2.0),
}


def _env(src: Path, fresh: bool) -> tuple[dict[str, str], str | None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERENCE_FACTORY_")
           and k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = str(src)
    tmp = None
    if fresh:
        tmp = tempfile.mkdtemp(prefix="if-fresh-cache-")
        env["NUMBA_CACHE_DIR"] = tmp
        env["INFERENCE_FACTORY_CACHE_DIR"] = tmp
    return env, tmp


def time_once(root: Path, args: list[str], fresh: bool) -> float:
    env, tmp = _env(root / "src", fresh)
    try:
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, "-m", "inference_factory", *args], env=env,
                            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        dt = time.perf_counter() - t0
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return dt if rc == 0 else float("nan")


def install_and_compare(root: Path) -> float:
    """The README's first command on a new venv, from a copy of the version's tree."""
    with tempfile.TemporaryDirectory(prefix="if-install-") as d:
        tree = Path(d) / "tree"
        shutil.copytree(root, tree, ignore=shutil.ignore_patterns(".git", "__pycache__",
                                                                   "*.egg-info", ".venv"))
        cmd = ("python3 -m venv .venv && . .venv/bin/activate && pip install -q . && "
               "inference-factory compare --config configs/factory.toml")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
               and not k.startswith("INFERENCE_FACTORY_")}
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                      if "venv" not in p)
        t0 = time.perf_counter()
        rc = subprocess.run(["bash", "-c", cmd], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL).returncode
        return time.perf_counter() - t0 if rc == 0 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default=None, help="git ref to measure side by side")
    ap.add_argument("--ref-dir", type=Path, default=Path("/tmp/if_answers_ref"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default=None, help="comma-separated workloads")
    ap.add_argument("--install", action="store_true", help="add install_compare (slow)")
    a = ap.parse_args()
    versions = {"tree": REPO}
    if a.ref:
        if not a.ref_dir.exists():
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach",
                            str(a.ref_dir), a.ref], check=True, capture_output=True)
        versions = {"ref": a.ref_dir, "tree": REPO}
    names = a.only.split(",") if a.only else list(WORKLOADS)
    best: dict[str, dict[str, float]] = {n: {} for n in names}
    for name in names:
        args, fresh, _ = WORKLOADS[name]
        for root in versions.values():          # warm-up: caches, page cache
            if not fresh:
                time_once(root, args, False)
        for _ in range(a.reps):
            for v, root in versions.items():
                t = time_once(root, args, fresh)
                best[name][v] = min(best[name].get(v, float("inf")), t)
        if fresh:       # leave warm caches behind for whoever runs next
            for root in versions.values():
                time_once(root, args, False)
    if a.install:
        best["install_compare"] = {v: install_and_compare(root) for v, root in versions.items()}
    targets = {k: w[2] for k, w in WORKLOADS.items()} | {"install_compare": 45.0}
    head = f"{'workload':<18}" + "".join(f"{v + ' [s]':>12}" for v in versions)
    head += f"{'tree/ref':>10}" if a.ref else ""
    print(head + f"{'target [s]':>12}")
    for name, vals in best.items():
        line = f"{name:<18}" + "".join(f"{vals[v]:>12.2f}" for v in versions)
        if a.ref:
            line += f"{vals['tree'] / vals['ref']:>10.2f}"
        print(line + f"{targets[name]:>12.1f}")


if __name__ == "__main__":
    main()
