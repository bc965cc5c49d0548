"""Benchmark: command-line start time (``--help``, ``--version``, TAB completion,
``hardware list``) as a ratio to a bare ``python -c pass``, optionally against an older commit.

    python benchmarks/bench_cli_start.py [--old-ref 41d6bba] [--reps 9]

Every measurement is a fresh subprocess (``python -m inference_factory ...``) with PYTHONPATH at
that version's ``src``; the old commit is checked out as a git worktree in ``--old-dir``
(default /tmp/old_cli; made if missing). Versions alternate within each round. The table gives
the min and median wall time over ``--reps`` and the min as a multiple of ``python -c pass``
(the interpreter's own start, the floor). Absolute times depend on the machine and its load;
on a shared machine read the ratios of the min times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CASES = {
    "python -c pass": (["-c", "pass"], {}),
    "--help": (["-m", "inference_factory", "--help"], {}),
    "--version": (["-m", "inference_factory", "--version"], {}),
    "plan --help": (["-m", "inference_factory", "plan", "--help"], {}),
    "TAB completion": (["-m", "inference_factory"],
                       {"_INFERENCE_FACTORY_COMPLETE": "bash_complete",
                        "COMP_WORDS": "inference-factory ro", "COMP_CWORD": "1"}),
    "hardware list": (["-m", "inference_factory", "hardware", "list"], {}),
}


def _time(src: Path | None, args: list[str], env_extra: dict[str, str]) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERENCE_FACTORY_")}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    env.update(env_extra)
    t0 = time.perf_counter()
    rc = subprocess.run([sys.executable, *args], env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, cwd="/").returncode
    return time.perf_counter() - t0 if rc == 0 else float("nan")   # nan: the version lacks it


def _worktree(ref: str, path: Path) -> Path:
    if not path.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), ref],
                       check=True, stdout=subprocess.DEVNULL)
    return path / "src"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-ref", default=None, help="git ref of the version to compare with")
    ap.add_argument("--old-dir", default="/tmp/old_cli")
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    versions = {"new": REPO / "src"}
    if a.old_ref:
        versions["old"] = _worktree(a.old_ref, Path(a.old_dir))
    times: dict[tuple[str, str], list[float]] = {}
    for rep in range(a.reps):
        order = list(versions.items())
        if rep % 2:
            order.reverse()
        for case, (args, env) in CASES.items():
            for name, src in order:
                times.setdefault((name, case), []).append(_time(src, args, env))
    floor = min(min(times[(n, "python -c pass")]) for n in versions)
    print(f"{'case':<16}" + "".join(f"{n + ' min':>11}{n + ' median':>13}{n + ' x pass':>11}"
                                    for n in versions))
    for case in CASES:
        row = f"{case:<16}"
        for n in versions:
            t = times[(n, case)]
            if any(x != x for x in t):
                row += f"{'n/a':>11}{'n/a':>13}{'n/a':>11}"
                continue
            row += f"{min(t):>10.3f}s{statistics.median(t):>12.3f}s{min(t) / floor:>10.1f}x"
        print(row)


if __name__ == "__main__":
    main()
