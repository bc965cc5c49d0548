#!/usr/bin/env python3
"""Extract NVIDIA's measured DSA (DeepSeek Sparse Attention) module tables from aiconfigurator.

Maintainer tool, the DSA companion of ``extract_aiconfigurator.py`` (same selection rule,
same CSV layout, its helpers imported). The 0.12.0 wheel the other families come from has no
``sparse_attention`` tables, so these are read from a git checkout of ai-dynamo/aiconfigurator
(a bare mirror is enough: the parquet files are read with ``git cat-file``), at a stated commit:

    python calibration/extract_aiconfigurator_dsa.py /path/to/aiconfigurator.git \
        [--commit 095f58a5] [--out hardware/measured]

It writes ``<DEVICE>/dsa_decode.csv`` and ``<DEVICE>/dsa_prefill.csv`` for the devices of
``extract_aiconfigurator.SYSTEMS`` that have DSA tables, and replaces those two families' lines
of ``MANIFEST.csv``; no other file is touched.

What a row measures (aiconfigurator ``collector/sglang/collect_mla_module.py``, the vLLM and
TRT-LLM collectors of the same name; ``aic-core/.../sdk/operations/dsa.py``): one call of the
whole DSA attention module, ``self_attn.forward`` of one layer: the fused q_a/kv_a projection
(with the indexer's key projection), q_b, the indexer (wq_b, weights_proj, FP8 MQA logits over
the cached index keys, top-k), the sparse MLA kernel over the top-k latents, the absorbed
W_UK/W_UV batched GEMMs and o_proj, at ``num_heads`` query heads per GPU. Generation rows: one
new token per sequence after ``step`` cached tokens (``kv_len = isl + step``, isl = 1).
Context rows: ``isl`` new tokens per sequence; only rows without a cached prefix (step 0) are
kept. Rows of GLM-5.2's reuse layers (``op_name`` ``*_skip_indexer``) are dropped (the engine
costs those layers' sparse core through the full rows; see engine/table_families_dsa.py).

Size (about 0.5 MB per device): batch sizes and lengths on a log grid (:data:`THIN`), head
counts per GPU >= 8, both model architectures, BF16 and FP8 KV, BF16 and block-FP8 GEMMs.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import subprocess
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extract_aiconfigurator as X  # noqa: E402

ROOT = "aic-core/src/aiconfigurator_core/systems/data/"
FAMILIES = ("dsa_decode", "dsa_prefill")
#: size axes kept on a log grid: (factor, tolerance): the measured value nearest each power of
#: ``factor`` (from 1) within the tolerance ratio (decode lengths are 2^j + 1 in SGLang's tables,
#: 2^j + 2 in TRT-LLM's, so an exact power rule would drop them)
THIN = {"dsa_decode": {"batch_size": (2, 1.0), "kv_len": (4, 1.25)},
        "dsa_prefill": {"batch_size": (4, 1.0), "isl": (2, 1.0)}}
#: fewest query heads per GPU kept (128 or 64 native heads over TP <= 16 or 8)
MIN_HEADS = 8
#: GEMM dtypes: the checkpoints' (block FP8) and BF16; the NVFP4 checkpoints keep attention in
#: BF16 (aiconfigurator collect_mla_module.py), so the nvfp4 rows describe no shipped model
GEMM_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8_block"}
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8"}


class GitTree:
    """The parquet tables of an aiconfigurator git repository at one commit, with the
    interface of ``extract_aiconfigurator.Wheel`` (``find``, ``read``)."""

    def __init__(self, repo: str, commit: str):
        self.repo = repo
        self.commit = subprocess.run(["git", "-C", repo, "rev-parse", commit], check=True,
                                     capture_output=True, text=True).stdout.strip()
        names = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", self.commit,
                                ROOT], check=True, capture_output=True, text=True).stdout.split()
        self.index = []
        for name in sorted(names):
            parts = name[len(ROOT):].split("/")
            if len(parts) == 5 and parts[4].endswith(".parquet"):
                self.index.append((*parts, name))

    def find(self, system, op, fname, backends=None):
        out = [(be, ver, name) for (sy, o, be, ver, fn, name) in self.index
               if sy == system and o == op and fn == fname and (backends is None or be in backends)]
        return sorted(out, key=lambda t: (t[0], X.vkey(t[1])))

    def read(self, name: str) -> pd.DataFrame:
        blob = subprocess.run(["git", "-C", self.repo, "cat-file", "-p", f"{self.commit}:{name}"],
                              check=True, capture_output=True).stdout
        return pd.read_parquet(io.BytesIO(blob))


def _common(df: pd.DataFrame) -> pd.DataFrame:
    df = df[~df["op_name"].str.endswith("_skip_indexer")].copy()
    df["kv_dtype"] = df["kv_cache_dtype"].map(KV_DTYPES)
    df["gemm_dtype"] = df["gemm_type"].map(GEMM_DTYPES)
    df = df[df["kv_dtype"].notna() & df["gemm_dtype"].notna()].copy()
    df["latency_us"] = df["latency"] * 1000.0
    if "kernel_source" not in df:
        df["kernel_source"] = "default"
    return df


WHAT = ("whole DSA attention module (self_attn.forward: q_a/kv_a + indexer key projection, q_b, "
        "indexer wq_b/weights_proj/FP8 MQA logits/top-k, sparse MLA, W_UK/W_UV BMMs, o_proj) of one "
        "layer; architecture = the model whose dimensions the row was measured at; num_heads = query "
        "heads per GPU; GLM-5.2 skip-indexer rows dropped; ")


def fam_dsa_decode(src, system):
    df = X.load_all(src, system, "sparse_attention", "dsa_generation_module_perf.parquet")
    if df is None:
        return None
    paths = set(df["_src"])
    assert set(df["isl"]) == {1}, sorted(set(df["isl"]))
    df = _common(df[df["num_heads"] >= MIN_HEADS])
    df["kv_len"] = df["isl"] + df["step"]
    key = ["architecture", "kv_dtype", "gemm_dtype", "num_heads", "batch_size", "kv_len"]
    df = X.select(df, key)
    return X.finish("dsa_decode", df, key, ["latency_us"], paths, X.UNITS_MS,
                    WHAT + "decode: 1 new token per sequence, kv_len = isl + step (isl == 1); "
                    + X.RULE_FASTEST, int_cols=("num_heads", "batch_size", "kv_len"))


def fam_dsa_prefill(src, system):
    df = X.load_all(src, system, "sparse_attention", "dsa_context_module_perf.parquet")
    if df is None:
        return None
    paths = set(df["_src"])
    df = _common(df[(df["step"] == 0) & (df["num_heads"] >= MIN_HEADS)])
    key = ["architecture", "kv_dtype", "gemm_dtype", "num_heads", "batch_size", "isl"]
    df = X.select(df, key)
    return X.finish("dsa_prefill", df, key, ["latency_us"], paths, X.UNITS_MS,
                    WHAT + "prefill of isl new tokens per sequence without a cached prefix "
                    "(step == 0 rows only); " + X.RULE_FASTEST,
                    int_cols=("num_heads", "batch_size", "isl"))


def thin(t, spec) -> None:
    """Keep, per size axis, the measured values nearest each power of its factor (within its
    tolerance ratio) and the largest; note the rule in the table's header."""
    n0, parts = len(t.df), []
    for col, (factor, tol) in spec.items():
        vals = np.array(sorted(t.df[col].unique()), dtype=float)
        keep = {int(vals[-1])}
        p = 1.0
        while p <= vals[-1] * factor:
            i = int(np.argmin(np.abs(np.log(vals / p))))
            if max(vals[i] / p, p / vals[i]) <= tol:
                keep.add(int(vals[i]))
            p *= factor
        t.df = t.df[t.df[col].isin(keep)].reset_index(drop=True)
        parts.append(f"{col} in {{{','.join(str(v) for v in sorted(keep))}}}")
    t.rule += ("; 'compact' profile: size axes thinned to a log grid (the value nearest each "
               "power of a factor; the engine interpolates log latency): " + "; ".join(parts))
    t.notes.append(f"'compact' profile thinning: {n0} -> {len(t.df)} rows")


def extract(argv, doc: str, builders, thin_rules, families) -> None:
    """Write the tables ``builders`` make from the aiconfigurator git tree (one CSV per family
    and device, thinned by ``thin_rules``), replace ``families``' rows of MANIFEST.csv, and
    check the written tables: the DSA and MSA extractions share it."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", help="git directory of ai-dynamo/aiconfigurator")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--out", default="hardware/measured")
    args = ap.parse_args(argv)
    src = GitTree(args.repo, args.commit)
    # the CSV header names the commit instead of the wheel
    X.WHEEL_VERSION = f"(git {src.commit[:12]})"
    X.DATA_ROOT = ROOT
    manifest = []
    for system, device in X.SYSTEMS.items():
        for fam in builders:
            t = fam(src, system)
            if t is None or len(t.df) == 0:
                continue
            thin(t, thin_rules[t.family])
            path, contributing = X.write_table(t, args.out, device, system)
            with open(path) as f:
                text = f.read().replace(
                    f"aiconfigurator-core {X.WHEEL_VERSION} wheel (pip download --no-deps "
                    f"aiconfigurator-core=={X.WHEEL_VERSION}); parquet files read (path inside "
                    "the wheel, rows kept)",
                    f"ai-dynamo/aiconfigurator git commit {src.commit} (github.com/ai-dynamo/"
                    "aiconfigurator); parquet files read (path in the repository, rows kept)")
            with open(path, "w") as f:
                f.write(text)
            manifest.append([device, t.family, len(t.df), ";".join(sorted(set(t.df["backend"]))),
                             ";".join(sorted(set(t.df["backend"] + "/" + t.df["version"]))),
                             ";".join(contributing)])
            print(f"{device:10s} {t.family:12s} {len(t.df):6d} rows "
                  f"{os.path.getsize(path) / 1024:7.0f} KiB")
    mpath = os.path.join(args.out, "MANIFEST.csv")
    with open(mpath) as f:
        lines = f.read().splitlines()
    keep = [ln for ln in lines if ln.split(",")[1:2] not in ([fam] for fam in families)]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(manifest)
    with open(mpath, "w") as f:
        f.write("\n".join(keep) + "\n" + buf.getvalue())
    # sanity: unique keys, finite positive latencies
    for device, family, *_ in manifest:
        d = pd.read_csv(os.path.join(args.out, device, family + ".csv"), comment="#")
        key = [c for c in d.columns if c not in ("latency_us", "backend", "version", "kernel_source")]
        assert not d.duplicated(key).any() and np.isfinite(d["latency_us"]).all()
        assert (d["latency_us"] > 0).all()


def main(argv=None):
    extract(argv, __doc__, (fam_dsa_decode, fam_dsa_prefill), THIN, FAMILIES)


if __name__ == "__main__":
    sys.exit(main())
