#!/usr/bin/env python3
"""Extract aiconfigurator's measured linear-attention tables (Gated DeltaNet, Kimi Delta
Attention) into ``hardware/measured/<DEVICE>/gdn.csv`` and ``kda.csv``.

The aiconfigurator-core 0.12.0 wheel that ``extract_aiconfigurator.py`` reads predates these
tables; they are in NVIDIA's repository (ai-dynamo/aiconfigurator, commit 095f58a5,
``aic-core/src/aiconfigurator_core/systems/data/<system>/linear_attention/<engine>/<ver>/
gdn_perf.parquet`` and ``.../kda/<engine>/<ver>/kda_perf.parquet``). This script reads them
from a git checkout or bare mirror of that repository (``git show``), with the same
selection rule as ``extract_aiconfigurator.py`` (its ``select``, ``finish`` and
``write_table``), writing only these two files per device and leaving every other table as
it is:

    python calibration/extract_aiconfigurator_linear.py /path/to/aiconfigurator.git \
        [--out hardware/measured]

What a row is: the latency of ONE layer's two kernels of a phase, summed, as one engine
(backend, version folder) measured both at the same shape: context = the causal conv1d
(``causal_conv1d_fn`` / ``causal_conv1d_fn_qkv3``) + the chunked delta rule
(``chunk_gated_delta_rule`` / ``chunk_kda``); generation = ``causal_conv1d_update`` + the
fused recurrent step (``fused_recurrent_gated_delta_rule_packed_decode`` /
``fused_recurrent_kda_packed_decode``; other single-kernel fused decode paths are kept as
alternatives, the fastest wins). Head counts are per TP shard. ``d_model`` (the model's
width) does not enter these kernels and is dropped; KDA's speculative ``verify`` rows are
not extracted (the engine prices verify on the decode rows). Latency ms -> us, %.4g.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extract_aiconfigurator as X  # noqa: E402

COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
ROOT = "aic-core/src/aiconfigurator_core/systems/data/"

#: kernel sources that make up a phase: (conv kernels, recurrence kernels, fused whole-step)
KERNELS = {
    "gdn": {"context": (("causal_conv1d_fn",), ("chunk_gated_delta_rule",), ()),
            "generation": (("causal_conv1d_update",),
                           ("fused_recurrent_gated_delta_rule_packed_decode",
                            "fused_sigmoid_gating_delta_rule_update"), ())},
    "kda": {"context": (("causal_conv1d_fn_qkv3",), ("chunk_kda", "flashkda_fwd"), ()),
            "generation": (("causal_conv1d_update",), ("fused_recurrent_kda_packed_decode",),
                           ("kda_fused_decode",))},
}
OPS = {"gdn": ("linear_attention", "gdn_perf.parquet"), "kda": ("kda", "kda_perf.parquet")}
SHAPE = ["num_k_heads", "head_k_dim", "num_v_heads", "head_v_dim", "d_conv"]


class Mirror:
    """The parquet tables of a git repository at :data:`COMMIT`, by the wheel's path
    convention (system/op/backend/version/file)."""

    def __init__(self, repo: str):
        self.repo = repo
        names = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", COMMIT, ROOT],
                               check=True, capture_output=True, text=True).stdout.split()
        self.index = [tuple(n[len(ROOT):].split("/")) + (n,) for n in names
                      if n.endswith(".parquet") and n[len(ROOT):].count("/") == 4]

    def find(self, system, op, fname):
        out = [(be, ver, name) for (sy, o, be, ver, fn, name) in self.index
               if sy == system and o == op and fn == fname]
        return sorted(out, key=lambda t: (t[0], X.vkey(t[1])))

    def read(self, name):
        blob = subprocess.run(["git", "-C", self.repo, "show", f"{COMMIT}:{name}"],
                              check=True, capture_output=True).stdout
        return pd.read_parquet(io.BytesIO(blob))

    def load(self, system, op, fname):
        """Every backend/version's ``fname`` of ``op`` on ``system`` as one frame with its
        provenance (backend, version, _src; the source's own columns kept as _orig_*), rows
        with a positive latency only, and the files read; (None, []) where there are none."""
        frames, paths = [], []
        for be, ver, name in self.find(system, op, fname):
            df = self.read(name)
            df = df.rename(columns={"backend": "_orig_backend", "version": "_orig_version"})
            df["backend"], df["version"], df["_src"] = be, ver, name
            frames.append(df)
            paths.append(name)
        if not frames:
            return None, []
        df = pd.concat(frames, ignore_index=True)
        return df[df["latency"].notna() & (df["latency"] > 0)], paths


def family(mirror: Mirror, system: str, kind: str):
    op, fname = OPS[kind]
    df, paths = mirror.load(system, op, fname)
    if df is None:
        return None
    key = SHAPE + ["batch_size", "seq_len"]
    rows = []
    for phase, (conv, core, fused) in KERNELS[kind].items():
        d = df[df["phase"] == phase]
        lane = ["backend", "version"] + key
        # fastest row of each kernel at a shape and lane (several d_model / models share it)
        best = d.groupby(lane + ["kernel_source"], as_index=False).agg(
            latency=("latency", "min"), _src=("_src", "first"))
        c = best[best["kernel_source"].isin(conv)].groupby(lane, as_index=False).agg(
            conv=("latency", "min"), conv_k=("kernel_source", "first"), _src=("_src", "first"))
        r = best[best["kernel_source"].isin(core)].groupby(lane, as_index=False).agg(
            core=("latency", "min"), core_k=("kernel_source", "first"))
        both = c.merge(r, on=lane)
        both["latency"] = both["conv"] + both["core"]
        both["kernel_source"] = both["conv_k"] + "+" + both["core_k"]
        parts = [both[lane + ["latency", "kernel_source", "_src"]]]
        f = best[best["kernel_source"].isin(fused)]
        if len(f):
            parts.append(f[lane + ["latency", "kernel_source", "_src"]])
        out = pd.concat(parts, ignore_index=True)
        out["phase"] = "prefill" if phase == "context" else "decode"
        rows.append(out)
    df = pd.concat(rows, ignore_index=True)
    df["latency_us"] = df["latency"] * 1000.0
    df["_lane"] = df["backend"]
    key = ["phase"] + key
    df = X.select(df, key)
    t = X.finish(kind, df, key, ["latency_us"], paths, X.UNITS_MS,
                 "one layer's conv + recurrence latency of a phase (summed within one backend and "
                 "version folder); " + X.RULE_FASTEST,
                 int_cols=tuple(SHAPE) + ("batch_size", "seq_len"),
                 notes=[f"read from git {COMMIT} of ai-dynamo/aiconfigurator, not the 0.12.0 wheel "
                        "(which has no linear-attention tables); head counts per TP shard; "
                        "d_model dropped; KDA verify rows not extracted"])
    return t


def write_from_mirror(t, out: str, device: str, system: str, commit: str = COMMIT) -> str:
    """``extract_aiconfigurator.write_table``, with the header naming the repository commit
    the rows were read at instead of the wheel (the linear and V4 extractions share it)."""
    path, _ = X.write_table(t, out, device, system)
    text = open(path).read().replace(
        f"aiconfigurator-core {X.WHEEL_VERSION} wheel (pip download --no-deps "
        f"aiconfigurator-core=={X.WHEEL_VERSION})",
        f"ai-dynamo/aiconfigurator git {commit[:8]}").replace(
        f"aiconfigurator-core {X.WHEEL_VERSION} measured", "aiconfigurator measured")
    with open(path, "w", newline="") as fh:
        fh.write(text)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", help="git checkout or bare mirror of ai-dynamo/aiconfigurator")
    ap.add_argument("--out", default="hardware/measured")
    args = ap.parse_args(argv)
    mirror = Mirror(args.repo)
    for system, device in X.SYSTEMS.items():
        for kind in OPS:
            t = family(mirror, system, kind)
            if t is None or not len(t.df):
                continue
            path = write_from_mirror(t, args.out, device, system)
            print(f"{device:14s} {kind}: {len(t.df)} rows, {os.path.getsize(path) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
