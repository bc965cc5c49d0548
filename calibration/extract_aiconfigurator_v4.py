#!/usr/bin/env python3
"""Extract aiconfigurator's measured DeepSeek-V4 tables (the compressed-attention modules and
the mHC hyper-connections) into ``hardware/measured/<DEVICE>/dsv4_attention.csv`` and
``mhc.csv``.

Read from NVIDIA's repository (ai-dynamo/aiconfigurator, commit 095f58a5; the 0.12.0 wheel
has none of these tables) by ``git show``, with the selection rule of
``extract_aiconfigurator.py`` (its ``select``, ``finish``, ``write_table``):

    python calibration/extract_aiconfigurator_v4.py /path/to/aiconfigurator.git \
        [--out hardware/measured]

What a row is:

- ``dsv4_attention.csv``: ONE layer's attention module as the collector times it, a CUDA
  graph replay of ``layer.self_attn(...)`` on one rank (``collector/sglang/
  collect_dsv4_attn.py`` l. 8-11: "Q/KV proj + norm/rope + cache store + compressor + C4
  indexer/topk for CSA + final FlashMLA"; the output projections are in ``self_attn``; TP
  collectives are short-circuited, l. 554-590), from the ``sparse_attention/<engine>/<ver>/
  dsv4_{csa,hca}_{generation,context}_module_perf.parquet`` tables. ``num_heads`` is the
  rank-local head count (native = num_heads x tp_size, perf_database/dsv4.rs l. 1390-1410);
  the model's attention dimensions are added from its config in ``model_configs/`` (the
  roofline of a row needs them: V4-Pro and V4-Flash rows differ). Generation rows: one query
  token per sequence after ``step`` cached tokens (``kv_len`` = step, dsv4.rs l. 1269);
  context rows: ``isl`` new tokens, kept at ``step`` = 0 only (no cached prefix; the engine
  carries a prefix by the roofline, as aiconfigurator does for its older tables).
  **CSA top-k correction**: the collector ran the top-k selector on degenerate scores (dummy
  weights: near-constant logits take the O(n^2) tie-break), which inflates CSA rows by up to
  ~65 us; NVIDIA's own calibration table (``dsv4_csa_topk_calib_perf.parquet``, same folder)
  measures the selector with flat and realistic (``top_last``) scores, and aiconfigurator
  subtracts max(0, flat - top_last) from every CSA module latency (dsv4.rs l. 640-720,
  v1 selector in context, v2 in generation, matched on native heads, step, isl, batch). The
  same subtraction is applied here to the SGLang rows of a device whose folder has the
  calibration (exact shape, else linear in step within (isl, batch), else none); trtllm and
  vllm rows are left as measured.
- ``mhc.csv``: one layer's mHC ``pre`` + ``post`` latency, both sites (attention and FFN)
  folded into each op (``collector/sglang/collect_mhc_module.py`` ``_mhc_call_args``), summed
  within one backend and version folder, at ``num_tokens`` tokens. aiconfigurator prices the
  attention and FFN RMSNorms as separate ElementWise ops beside its measured mHC op
  (``sdk/models/deepseek_v4.py`` l. 238, 251), so the norms are taken as outside the table.

Not extracted: ``dsv4_paged_mqa_logits`` (the indexer logits kernel alone, V4-Flash tp 1;
every device that has it has the whole modules, which include it), ``dsv4_hca_attn`` (a
windowed sidecar of older versions), ``dsv4_megamoe`` (MoE). Context rows are kept at
step = 0 (see below). Latency ms -> us, %.4g.

Subsampling (size): FP8 block-scaled projections only (the checkpoints' format; the tables'
BF16-projection rows are dropped), and batch, isl and step on powers of two (plus 0 and the
largest measured value) - about half the rows, the grid the engine interpolates in ln.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extract_aiconfigurator as X  # noqa: E402
import extract_aiconfigurator_linear as XL  # noqa: E402

COMMIT = XL.COMMIT
CONFIGS = "aic-core/src/aiconfigurator_core/model_configs/"
#: model config key -> CSV column (the dimensions the module's roofline reads)
DIMS = {"hidden_size": "hidden_size", "num_attention_heads": "n_heads", "head_dim": "head_dim",
        "qk_rope_head_dim": "rope_head_dim", "q_lora_rank": "q_lora_rank",
        "o_lora_rank": "o_lora_rank", "o_groups": "o_groups", "index_n_heads": "index_n_heads",
        "index_head_dim": "index_head_dim", "index_topk": "index_topk",
        "sliding_window": "window"}
MODULES = {(kind, phase): f"dsv4_{kind}_{phase}_module_perf.parquet"
           for kind in ("csa", "hca") for phase in ("generation", "context")}
RATIO = {"csa": 4, "hca": 128}
GEMM = {"bfloat16": "bf16", "fp8_block": "fp8_block"}
KV = {"fp8_e4m3": "fp8", "fp8": "fp8", "bfloat16": "bf16"}


def _config(mirror, model: str) -> dict:
    name = f"{CONFIGS}{model.replace('/', '--')}_config.json"
    blob = subprocess.run(["git", "-C", mirror.repo, "show", f"{COMMIT}:{name}"], check=True,
                          capture_output=True).stdout
    cfg = json.loads(blob)
    return {col: int(cfg[key]) for key, col in DIMS.items()}


def _topk_delta(calib: pd.DataFrame, native, phase, step, isl, bs, memo: dict) -> float:
    """aiconfigurator's CSA top-k DELTA (ms) at one shape: flat - top_last of the phase's
    selector (v1 context, v2 generation), exact, else linear in step within (isl, bs)
    (nearest value beyond the measured steps); 0 where the calibration lacks the shape."""
    v = "v1" if phase == "context" else "v2"
    d = memo.get((native, v, isl, bs))
    if d is None:
        c = calib[(calib["num_heads"] == native) & (calib["isl"] == isl)
                  & (calib["batch_size"] == bs)]
        flat = c[c["score_mode"] == f"{v}_flat"].groupby("step")["latency"].first()
        top = c[c["score_mode"] == f"{v}_top_last"].groupby("step")["latency"].first()
        d = memo[(native, v, isl, bs)] = (flat - top).dropna().clip(lower=0.0)
    if not len(d):
        return 0.0
    if step in d.index:
        return float(d[step])
    return float(np.interp(step, d.index.to_numpy(float), d.to_numpy()))


def _pow2(s: pd.Series) -> pd.Series:
    """Values that are 0 or a power of two, or the largest of the column."""
    v = s.to_numpy()
    return pd.Series((v == 0) | ((v & (v - 1)) == 0) | (v == v.max()), index=s.index)


def attention(mirror, system: str):
    frames, paths = [], []
    for (kind, phase), fname in MODULES.items():
        calib = None
        for be, ver, name in mirror.find(system, "sparse_attention", fname):
            df = mirror.read(name)
            if be == "sglang" and calib is None:
                hit = mirror.find(system, "sparse_attention", "dsv4_csa_topk_calib_perf.parquet")
                calib = mirror.read(hit[-1][2]) if hit else pd.DataFrame()
            if phase == "context":
                df = df[df["step"] == 0]
            # the checkpoint's format only; sizes on powers of two (and the largest)
            df = df[(df["gemm_type"] == "fp8_block") & _pow2(df["batch_size"])
                    & _pow2(df["isl"]) & _pow2(df["step"])]
            if kind == "csa" and be == "sglang" and len(calib):
                native = df["num_heads"] * df["tp_size"]
                memo: dict = {}
                delta = [_topk_delta(calib, n, phase, s, i, b, memo) for n, s, i, b in
                         zip(native, df["step"], df["isl"], df["batch_size"])]
                df = df.assign(latency=np.maximum(df["latency"].to_numpy() - delta, 0.0))
            df = df.rename(columns={"backend": "_orig_backend", "version": "_orig_version"})
            df["backend"], df["version"], df["_src"] = be, ver, name
            df["compress_ratio"], df["indexer"] = RATIO[kind], int(kind == "csa")
            df["phase"] = "decode" if phase == "generation" else "prefill"
            frames.append(df)
            paths.append(name)
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True)
    df = df[df["gemm_type"].isin(GEMM) & df["kv_cache_dtype"].isin(KV)]
    dims = {m: _config(mirror, m) for m in df["model"].unique()}
    for col in DIMS.values():
        df[col] = df["model"].map(lambda m, c=col: dims[m][c])
    df["gemm_type"] = df["gemm_type"].map(GEMM)
    df["kv_dtype"] = df["kv_cache_dtype"].map(KV)
    # decode: kv_len = cached tokens (step); prefill: isl new tokens after none
    df["kv_len"] = np.where(df["phase"] == "decode", df["step"], 0)
    df["isl"] = np.where(df["phase"] == "decode", 1, df["isl"])
    df["latency_us"] = df["latency"] * 1000.0
    df["_lane"] = df["backend"]
    shape = ["hidden_size", "n_heads", "num_heads"] + list(DIMS.values())[2:]
    key = ["phase", "compress_ratio", "indexer", "gemm_type", "kv_dtype"] + shape + [
        "batch_size", "isl", "kv_len"]
    key = list(dict.fromkeys(key))
    df = X.select(df, key)
    return X.finish(
        "dsv4_attention", df, key, ["latency_us"], paths, X.UNITS_MS,
        "one layer's DeepSeek-V4 attention module (self_attn: projections, norms, RoPE, cache "
        "store, compressor, CSA indexer + top-k, FlashMLA, output projections) on one rank; "
        + X.RULE_FASTEST,
        int_cols=tuple(c for c in key if c not in ("phase", "gemm_type", "kv_dtype")),
        notes=[f"read from git {COMMIT} of ai-dynamo/aiconfigurator, not the 0.12.0 wheel; "
               "num_heads rank-local (n_heads native); model dimensions from model_configs/; "
               "CSA SGLang rows less NVIDIA's top-k calibration DELTA (flat - top_last); "
               "context rows at step 0 only"])


def mhc(mirror, system: str):
    df, paths = mirror.load(system, "mhc", "mhc_module_perf.parquet")
    if df is None:
        return None
    shape = ["hidden_size", "hc_mult", "sinkhorn_iters", "num_tokens"]
    lane = ["backend", "version"] + shape
    best = df.groupby(lane + ["op_name"], as_index=False).agg(
        latency=("latency", "min"), kernel_source=("kernel_source", "first"),
        _src=("_src", "first"))
    pre = best[best["op_name"] == "pre"].drop(columns="op_name")
    post = best[best["op_name"] == "post"].drop(columns=["op_name", "_src"])
    both = pre.merge(post, on=lane, suffixes=("_pre", "_post"))
    both["latency_us"] = (both["latency_pre"] + both["latency_post"]) * 1000.0
    both["kernel_source"] = both["kernel_source_pre"] + "+" + both["kernel_source_post"]
    both["_lane"] = both["backend"]
    both = X.select(both, shape)
    return X.finish("mhc", both, shape, ["latency_us"], paths, X.UNITS_MS,
                    "one layer's mHC pre + post latency (both sites folded in each op; summed "
                    "within one backend and version folder); " + X.RULE_FASTEST,
                    int_cols=tuple(shape),
                    notes=[f"read from git {COMMIT} of ai-dynamo/aiconfigurator, not the "
                           "0.12.0 wheel; the attention and FFN RMSNorms are outside the table"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", help="git checkout or bare mirror of ai-dynamo/aiconfigurator")
    ap.add_argument("--out", default="hardware/measured")
    args = ap.parse_args(argv)
    mirror = XL.Mirror(args.repo)
    for system, device in X.SYSTEMS.items():
        for build in (attention, mhc):
            t = build(mirror, system)
            if t is None or not len(t.df):
                continue
            path = XL.write_from_mirror(t, args.out, device, system, COMMIT)
            print(f"{device:14s} {t.family}: {len(t.df)} rows, "
                  f"{os.path.getsize(path) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
