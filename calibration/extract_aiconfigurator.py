#!/usr/bin/env python3
"""Extract NVIDIA's measured kernel-latency tables from the aiconfigurator-core wheel.

Maintainer tool (not a runtime dependency of inference_factory).  Reads the
parquet tables shipped in the ``aiconfigurator-core`` 0.12.0 wheel straight out
of the zip and writes compact, deterministic per-device CSV tables to
``hardware/measured/<DEVICE>/<family>.csv`` plus ``MANIFEST.csv`` and
``LICENSE-aiconfigurator.txt``.

    pip download --no-deps aiconfigurator-core==0.12.0 -d aic-wheel
    python calibration/extract_aiconfigurator.py \
        aic-wheel/aiconfigurator_core-0.12.0-*.whl [--out hardware/measured] [--profile compact|full] [--check]

Needs pandas + pyarrow (+ packaging) in the environment running it.  The data
is Apache-2.0, Copyright NVIDIA CORPORATION & AFFILIATES.  See
calibration/README.md for the selection rules.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import sys
import zipfile
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from packaging.version import Version

WHEEL_VERSION = "0.12.0"
DATA_ROOT = "aiconfigurator_core/systems/data/"

# aiconfigurator system name -> our hardware/<DEVICE>.toml name
SYSTEMS = {
    "h100_sxm": "H100-SXM",
    "h200_sxm": "H200-SXM",
    "b200_sxm": "B200",
    "gb200": "GB200",
    "b300_sxm": "B300",
    "gb300": "GB300",
    "a100_sxm": "A100-80GB-SXM",
}

LICENCE_LINE = (
    "Apache License 2.0, Copyright NVIDIA CORPORATION & AFFILIATES; "
    "extracted and reduced by calibration/extract_aiconfigurator.py"
)

FLOAT_FMT = "%.4g"

DTYPE_MAP = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
}

# GEMM reduction --------------------------------------------------------------
GEMM_DTYPES = ["bf16", "fp8", "fp8_block", "nvfp4", "int8_wo", "int4_wo"]  # drop: sq (SmoothQuant)
GEMM_MIN_NK = 256
GEMM_M = sorted({2**i for i in range(16)} | {3 * 2**j for j in range(14)})  # 1..32768, 3..24576

# MoE reduction ---------------------------------------------------------------
# The fused-MoE tables are ~200k rows per device (full cross of moe_tp x moe_ep).
# Mixed TP x EP partitions (moe_tp > 1 and moe_ep > 1) are dropped in every
# profile; pure EP (moe_tp == 1) and pure TP (moe_ep == 1) are kept.
MOE_DROP_MIXED_TP_EP = True
# TRT-LLM's min-latency MoE kernel (kernel_source moe_torch_flow_min_latency, NVFP4 gated
# experts) is what the engine runs only at small token counts: aiconfigurator probes those
# rows only where the MoE group's tokens (per-rank tokens x attention DP) are <= 128 and
# reads the default (CUTLASS) rows above that (aic-core/rust/aiconfigurator-core/src/
# operators/moe.rs lines 362-373 and 441-460 at git 095f58a51c4c, "Mirrors Python's
# MoE._query_moe_table TRT-LLM gate: for nvfp4 gated MoE at num_tokens <= 128, probe the
# moe_torch_flow_min_latency grid first"). The collector times the kernel at every token
# count, so keeping its rows above 128 tokens let the fastest-row rule pick a kernel no
# engine runs there (B200, DeepSeek shape, EP 8, 1024 tokens: 232.8 us against CUTLASS 289).
MOE_MIN_LATENCY_SOURCE = "moe_torch_flow_min_latency"
MOE_MIN_LATENCY_MAX_TOKENS = 128

# Size profiles ----------------------------------------------------------------
# "full":    only the base rules above (~90 MiB for the 7 devices).
# "compact": additionally thins the continuous size axes of the big tables to a
#            x4 log grid (values v with v/min an exact power of 4, plus the
#            largest measured value); discrete model axes (n, k, heads, head_dim,
#            hidden, inter, experts, tp, ep, dtype, distribution) are untouched.
#            The engine interpolates log(latency) along these axes.
THIN = {
    "compact": {
        "gemm": {"m": 4},
        "attention_decode": {"batch_size": 4, "kv_len": 4},
        "attention_prefill": {"batch_size": 4, "isl": 2},  # isl x4 fails the engine's leave-one-out bound
        "moe": {"num_tokens": 4},
        "moe_wideep": {"num_tokens": 2},
    },
    "full": {},
}
# per-device overrides: A100's MoE curves (sglang triton / trtllm 1.0) are rougher; x4 fails the
# engine's leave-one-out bound there (tests/engine/test_measured.py), x2 passes
THIN_OVERRIDE = {
    ("compact", "A100-80GB-SXM", "moe"): {"num_tokens": 2},
}


def log_grid(values, factor: int) -> set:
    """Values v (ints) with v / min(values) an exact power of `factor`, plus max(values)."""
    vals = sorted(set(int(v) for v in values))
    lo, keep = vals[0], {vals[-1]}
    for v in vals:
        if v % lo == 0:
            r = v // lo
            while r % factor == 0:
                r //= factor
            if r == 1:
                keep.add(v)
    return keep


def vkey(v: str) -> Version:
    return Version(v)


def norm_dtype(x: str) -> str:
    return DTYPE_MAP.get(x, x)


def norm_dist(x: str) -> str:
    if x in ("balanced", "uniform"):
        return "uniform"
    return x


# --------------------------------------------------------------------------
# wheel access
# --------------------------------------------------------------------------
_PATH_RE = re.compile(r"^" + re.escape(DATA_ROOT) + r"([^/]+)/([^/]+)/([^/]+)/([^/]+)/([^/]+\.parquet)$")


class Wheel:
    def __init__(self, path: str):
        self.path = path
        self.zf = zipfile.ZipFile(path)
        self.index: list[tuple[str, str, str, str, str, str]] = []
        for name in sorted(self.zf.namelist()):
            m = _PATH_RE.match(name)
            if m:
                self.index.append((*m.groups(), name))

    def find(self, system: str, op: str, fname: str, backends=None) -> list[tuple[str, str, str]]:
        """[(backend, version, wheel_path)] sorted by backend, version."""
        out = [
            (be, ver, name)
            for (sy, o, be, ver, fn, name) in self.index
            if sy == system and o == op and fn == fname and (backends is None or be in backends)
        ]
        return sorted(out, key=lambda t: (t[0], vkey(t[1])))

    def read(self, name: str) -> pd.DataFrame:
        return pd.read_parquet(io.BytesIO(self.zf.read(name)))


def load_all(wh: Wheel, system: str, op: str, fname: str, backends=None) -> pd.DataFrame | None:
    frames = []
    for be, ver, name in wh.find(system, op, fname, backends):
        df = wh.read(name)
        df = df.rename(columns={"backend": "_orig_backend", "version": "_orig_version"})
        df["backend"] = be
        df["version"] = ver  # folder version (the parquet `version` column is not always consistent)
        df["_src"] = name
        df["_lane"] = f"{be}:{fname}"  # one measurement lane = one backend's table, re-collected across versions
        frames.append(df)
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True, sort=False)


# --------------------------------------------------------------------------
# selection
# --------------------------------------------------------------------------
def select(df: pd.DataFrame, key: list[str], value: str = "latency_us") -> pd.DataFrame:
    """Newest version per (lane, key); then fastest row per key.

    A lane is one backend's table (e.g. trtllm:moe_a2a_perf.parquet); newer version folders of the same
    lane are (often partial) re-collections and supersede older ones key by key.

    Drops non-finite / non-positive values.  Deterministic: ties broken by
    backend, version, kernel_source.
    """
    df = df[np.isfinite(df[value]) & (df[value] > 0)].copy()
    allv = sorted(set(df["version"]), key=vkey)
    rank = {v: i for i, v in enumerate(allv)}
    df["_vrank"] = df["version"].map(rank)
    newest = df.groupby(["_lane"] + key, dropna=False)["_vrank"].transform("max")
    df = df[df["_vrank"] == newest]
    df = df.sort_values(key + [value, "backend", "version", "kernel_source"], kind="mergesort")
    df = df.drop_duplicates(key, keep="first")
    return df.reset_index(drop=True)


@dataclass
class Table:
    family: str
    df: pd.DataFrame  # final columns + _src
    columns: list[str]
    key: list[str]
    read_paths: list[str]
    units: str
    rule: str
    notes: list[str] = field(default_factory=list)


PROV = ["backend", "version", "kernel_source"]


def finish(family, df, key, values, read_paths, units, rule, int_cols=(), notes=()):
    cols = key + values + PROV
    df = df.copy()
    for c in int_cols:
        df[c] = df[c].astype("int64")
    df = df.sort_values(key, kind="mergesort").reset_index(drop=True)
    return Table(family, df[cols + ["_src"]], cols, key, sorted(read_paths), units, rule, list(notes))


RULE_FASTEST = (
    "per backend table, newest version (folder) that measures each key (newer tables are partial re-collections "
    "and supersede older ones key by key); then, where several backends/kernels measure the same key, "
    "the FASTEST (min latency) row is kept and its backend/version/kernel_source recorded "
    "(a serving engine runs the fastest kernel it has)"
)
UNITS_MS = "latency_us = microseconds (parquet `latency` is milliseconds, x1000), written %.4g"


# --------------------------------------------------------------------------
# families
# --------------------------------------------------------------------------
def fam_gemm(wh, system):
    df = load_all(wh, system, "gemm", "gemm_perf.parquet")
    if df is None:
        return None
    paths = set(df["_src"])
    df["dtype"] = df["gemm_dtype"].map(norm_dtype)
    df = df[df["dtype"].isin(GEMM_DTYPES)]
    df = df[(df["n"] >= GEMM_MIN_NK) & (df["k"] >= GEMM_MIN_NK) & df["m"].isin(GEMM_M)]
    df["latency_us"] = df["latency"] * 1000.0
    key = ["dtype", "m", "n", "k"]
    df = select(df, key)
    return finish(
        "gemm", df, key, ["latency_us"], paths, UNITS_MS,
        f"dtypes kept: {','.join(GEMM_DTYPES)} (bfloat16->bf16; int8_wo/int4_wo = weight-only W8A16/W4A16; "
        f"SmoothQuant 'sq' dropped); n,k >= {GEMM_MIN_NK}; m in {{2^i}} U {{3*2^j}} (1..32768) where present; "
        + RULE_FASTEST,
        int_cols=("m", "n", "k"),
    )


def fam_mla_bmm(wh, system):
    df = load_all(wh, system, "mla_bmm", "mla_bmm_perf.parquet")
    if df is None:
        return None
    paths = set(df["_src"])
    df["op"] = df["op_name"].map({"mla_gen_pre": "pre", "mla_gen_post": "post"})
    assert df["op"].notna().all(), df["op_name"].unique()
    df["dtype"] = df["bmm_dtype"].map(norm_dtype)
    df["latency_us"] = df["latency"] * 1000.0
    key = ["op", "dtype", "num_tokens", "num_heads"]
    df = select(df, key)
    return finish(
        "mla_bmm", df, key, ["latency_us"], paths, UNITS_MS,
        "op: pre = mla_gen_pre (W_UK absorbed into q), post = mla_gen_post (W_UV); num_heads = heads per GPU; "
        + RULE_FASTEST,
        int_cols=("num_tokens", "num_heads"),
    )


def _mla_heads_check(df, notes):
    # num_heads is already the per-GPU head count: tp_size is just (64 or 128)/num_heads.  Where the same
    # num_heads was measured under two tp_size labels (a100 trtllm 1.0.0: 64/tp and 128/tp) the latencies
    # agree (median ratio 1.00), i.e. tp_size is only a label; the min rule then picks one row per key.
    prod = sorted(set((df["num_heads"] * df["tp_size"]).unique().tolist()))
    k = [c for c in ("backend", "version", "num_heads", "batch_size", "isl", "step", "kv_cache_dtype") if c in df]
    g = df.groupby(k + ["tp_size"])["latency"].min().unstack("tp_size")
    ratios = []
    for _, row in g.iterrows():
        v = row.dropna().to_numpy()
        if len(v) > 1:
            ratios.append(v.max() / v.min())
    msg = f"num_heads x tp_size in source = {prod}: num_heads is already heads per GPU; tp_size dropped"
    if ratios:
        med = float(np.median(ratios))
        assert med < 1.05, f"same num_heads under different tp_size disagree (median max/min {med:.3f})"
        msg += (f"; {len(ratios)} keys measured under two tp_size labels (median max/min latency {med:.3f}), "
                "fastest kept")
    notes.append(msg)


def fam_mla_decode(wh, system):
    df = load_all(wh, system, "mla", "generation_mla_perf.parquet")
    if df is None:
        return None
    paths = set(df["_src"])
    notes = []
    isl = sorted(df["isl"].unique().tolist())
    assert isl == [1], f"unexpected isl {isl}"
    _mla_heads_check(df, notes)
    df["kv_len"] = df["isl"] + df["step"]
    df["kv_dtype"] = df["kv_cache_dtype"].map(norm_dtype)
    assert set(df["mla_dtype"]) == {"bfloat16"}
    df["latency_us"] = df["latency"] * 1000.0
    key = ["num_heads", "batch_size", "kv_len", "kv_dtype"]
    df = select(df, key)
    return finish(
        "mla_decode", df, key, ["latency_us"], paths, UNITS_MS,
        "MLA decode attention kernel only (generation_mla_perf, 1 query token/seq, bf16 compute); "
        "kv_len = isl + step (isl == 1 in every source table, step = 2^j-1, so kv_len = step + 1 = 2^j); "
        "all tp_size rows kept, num_heads = heads per GPU; " + RULE_FASTEST,
        int_cols=("num_heads", "batch_size", "kv_len"), notes=notes,
    )


def fam_mla_prefill(wh, system):
    df = load_all(wh, system, "mla", "context_mla_perf.parquet")
    if df is None:
        return None
    paths = set(df["_src"])
    notes = []
    assert set(df["step"]) == {0}
    _mla_heads_check(df, notes)
    df["kv_dtype"] = df["kv_cache_dtype"].map(norm_dtype)
    df["latency_us"] = df["latency"] * 1000.0
    key = ["num_heads", "batch_size", "isl", "kv_dtype"]
    df = select(df, key)
    return finish(
        "mla_prefill", df, key, ["latency_us"], paths, UNITS_MS,
        "MLA causal prefill attention kernel (context_mla_perf, no cached prefix: step == 0); isl = prompt "
        "tokens per sequence; num_heads = heads per GPU; " + RULE_FASTEST,
        int_cols=("num_heads", "batch_size", "isl"), notes=notes,
    )


def _fam_mla_module(wh, system, fname, family, decode):
    df = load_all(wh, system, "mla", fname, backends=["sglang"])
    if df is None:
        return None
    paths = set(df["_src"])
    assert set(df["step"]) == {0} and set(df["tp_size"]) == {1}
    df["kv_dtype"] = df["kv_cache_dtype"].map(norm_dtype)
    gt = df["gemm_type"] if "gemm_type" in df else df["mla_dtype"]
    df["gemm_dtype"] = gt.fillna(df["mla_dtype"]).map(norm_dtype)
    df["latency_us"] = df["latency"] * 1000.0
    if decode:
        df["kv_len"] = df["isl"]
        key = ["num_heads", "batch_size", "kv_len", "kv_dtype", "gemm_dtype"]
        what = ("SGLang wide-EP MLA attention module, decode (1 new token/seq), everything but the fused "
                "q_a/kv_a projection; kv_len = source `isl` column (cached tokens; step == 0)")
    else:
        key = ["num_heads", "batch_size", "isl", "kv_dtype", "gemm_dtype"]
        what = ("SGLang wide-EP MLA attention module, prefill (no cached prefix), everything but the fused "
                "q_a/kv_a projection; isl = prompt tokens per sequence")
    df = select(df, key)
    return finish(
        family, df, key, ["latency_us"], paths, UNITS_MS,
        what + "; num_heads = heads per GPU (attention DP, tp_size 1); measured for DeepSeek-V3 shapes; "
        + RULE_FASTEST,
        int_cols=[k for k in key if k not in ("kv_dtype", "gemm_dtype")],
    )


def fam_mla_module_decode(wh, system):
    return _fam_mla_module(wh, system, "wideep_generation_mla_perf.parquet", "mla_module_decode", True)


def fam_mla_module_prefill(wh, system):
    return _fam_mla_module(wh, system, "wideep_context_mla_perf.parquet", "mla_module_prefill", False)


def _attn_common(df):
    if "window_size" not in df:
        df["window_size"] = 0
    df["window_size"] = df["window_size"].fillna(0)
    df = df[(df["window_size"] == 0) & (df["beam_width"] == 1)].copy()
    df["num_kv_heads"] = df["num_key_value_heads"]
    df["kv_dtype"] = df["kv_cache_dtype"].map(norm_dtype)
    df["attn_dtype"] = df["attn_dtype"].map(norm_dtype)
    df["latency_us"] = df["latency"] * 1000.0
    return df


def fam_attention_decode(wh, system):
    df = load_all(wh, system, "attention", "generation_attention_perf.parquet")
    if df is None:
        return None
    paths = set(df["_src"])
    df = _attn_common(df)
    assert sorted(df["isl"].unique().tolist()) == [1]
    df = df[df["attn_dtype"] == "bf16"]
    df["kv_len"] = df["isl"] + df["step"]
    key = ["batch_size", "kv_len", "num_heads", "num_kv_heads", "head_dim", "kv_dtype"]
    df = select(df, key)
    return finish(
        "attention_decode", df, key, ["latency_us"], paths, UNITS_MS,
        "GQA/MHA decode attention kernel (generation_attention_perf), full attention only (window_size == 0), "
        "beam 1, bf16 compute; kv_len = isl + step (isl == 1 everywhere, step = 2^j-1, so kv_len = step + 1 = 2^j); "
        "num_heads / num_kv_heads per GPU; " + RULE_FASTEST,
        int_cols=("batch_size", "kv_len", "num_heads", "num_kv_heads", "head_dim"),
    )


def fam_attention_prefill(wh, system):
    df = load_all(wh, system, "attention", "context_attention_perf.parquet")
    if df is None:
        return None
    paths = set(df["_src"])
    df = _attn_common(df)
    assert set(df["step"]) == {0}
    key = ["batch_size", "isl", "num_heads", "num_kv_heads", "head_dim", "attn_dtype", "kv_dtype"]
    df = select(df, key)
    return finish(
        "attention_prefill", df, key, ["latency_us"], paths, UNITS_MS,
        "GQA/MHA causal prefill attention kernel (context_attention_perf), full attention only (window_size == 0), "
        "no cached prefix (step == 0), beam 1; attn_dtype = compute dtype (fp8 = FP8 FMHA); num_heads / "
        "num_kv_heads per GPU; " + RULE_FASTEST,
        int_cols=("batch_size", "isl", "num_heads", "num_kv_heads", "head_dim"),
    )


def fam_moe(wh, system):
    df = load_all(wh, system, "moe", "moe_perf.parquet", backends=["sglang", "trtllm"])
    if df is None:
        return None
    paths = set(df["_src"])
    notes = []
    df["dtype"] = df["moe_dtype"].map(norm_dtype)
    df["distribution"] = df["distribution"].map(norm_dist)
    df["moe_tp"] = df["moe_tp_size"]
    df["moe_ep"] = df["moe_ep_size"]
    df["latency_us"] = df["latency"] * 1000.0
    # the engine reads uniform routing only (skew is modelled by its placement; the measured
    # cost of skew is kept in moe_wideep.csv), and costs SwiGLU experts: non-gated kernels out
    df = df[(df["distribution"] == "uniform")
            & ~df["kernel_source"].astype(str).str.contains("nongated")]
    # TRT-LLM's min-latency kernel only where the engine runs it (MOE_MIN_LATENCY_MAX_TOKENS)
    df = df[~((df["kernel_source"].astype(str) == MOE_MIN_LATENCY_SOURCE)
              & (df["num_tokens"] > MOE_MIN_LATENCY_MAX_TOKENS))]
    key = ["dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp", "moe_ep",
           "distribution"]
    df = select(df, key)
    n_all = len(df)
    rule = ("fused MoE (routing + grouped GEMMs, no communication) on one rank; num_tokens = total tokens entering "
            "the MoE group (per-GPU tokens x EP); distribution: balanced/uniform -> uniform only (power_law rows "
            "dropped: the engine reads uniform rows; moe_wideep.csv keeps the skewed ones); non-gated "
            "(kernel_source *nongated*) rows dropped; TRT-LLM min-latency kernel (moe_torch_flow_min_latency) rows "
            f"kept only at num_tokens <= {MOE_MIN_LATENCY_MAX_TOKENS} (aiconfigurator moe.rs: the engine runs it "
            "only there); backends sglang + trtllm; ")
    if MOE_DROP_MIXED_TP_EP:
        mixed = (df["moe_tp"] > 1) & (df["moe_ep"] > 1)
        df = df[~mixed]
        rule += "REDUCED: mixed partitions (moe_tp > 1 and moe_ep > 1) dropped, pure EP / pure TP kept; "
    notes.append(f"rows before dropping mixed TP x EP {n_all}, after {len(df)}")
    return finish(
        "moe", df, key, ["latency_us"], paths, UNITS_MS, rule + RULE_FASTEST,
        int_cols=("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp", "moe_ep"),
        notes=notes,
    )


def fam_moe_wideep(wh, system):
    frames = []
    for fname, phase in (("wideep_generation_moe_perf.parquet", "decode"),
                         ("wideep_context_moe_perf.parquet", "prefill")):
        d = load_all(wh, system, "moe", fname, backends=["sglang"])
        if d is not None:
            d["phase"] = phase
            d["num_slots"] = d["num_experts"]
            frames.append(d)
    d = load_all(wh, system, "moe", "wideep_moe_perf.parquet", backends=["trtllm"])
    if d is not None:
        d["phase"] = "any"  # the trtllm table has no phase
        frames.append(d)
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True, sort=False)
    paths = set(df["_src"])
    assert set(df["moe_tp_size"]) == {1}
    df["dtype"] = df["moe_dtype"].map(norm_dtype)
    df["distribution"] = df["distribution"].map(norm_dist)
    df["moe_ep"] = df["moe_ep_size"]
    df["latency_us"] = df["latency"] * 1000.0
    key = ["phase", "dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "num_slots", "moe_ep",
           "distribution"]
    df = select(df, key)
    return finish(
        "moe_wideep", df, key, ["latency_us"], paths, UNITS_MS,
        "wide-EP grouped-GEMM MoE compute on one rank (no dispatch/combine): sglang DeepEP MoE "
        "(wideep_generation_moe -> phase=decode, wideep_context_moe -> phase=prefill) and, where present, "
        "trtllm wideep_moe_perf (phase=any; cutlass; num_slots > num_experts = EPLB redundant slots, "
        "distribution *_eplb = with EPLB); num_tokens as in source (trtllm: total over the EP group, "
        "dp_num_tokens = per rank); sglang num_slots = num_experts; distribution balanced/uniform -> uniform; "
        + RULE_FASTEST,
        int_cols=("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "num_slots", "moe_ep"),
    )


def fam_deepep_ll(wh, system):
    df = load_all(wh, system, "comm", "wideep_deepep_ll_perf.parquet", backends=["sglang"])
    if df is None:
        return None
    paths = set(df["_src"])
    df["dispatch_us"] = df["dispatch_avg_t_us"]
    df["combine_us"] = df["combine_avg_t_us"]
    df["_tot"] = df["dispatch_us"] + df["combine_us"]
    df = df[np.isfinite(df["dispatch_us"]) & np.isfinite(df["combine_us"])
            & (df["dispatch_us"] > 0) & (df["combine_us"] > 0)]
    key = ["node_num", "hidden_size", "num_token", "num_topk", "num_experts"]
    df = select(df, key, value="_tot")
    return finish(
        "deepep_ll", df, key, ["dispatch_us", "combine_us"], paths,
        "dispatch_us / combine_us = microseconds (source *_avg_t_us columns, already us), written %.4g",
        "DeepEP low-latency dispatch / combine (sglang wide-EP); num_token = tokens per rank; node_num = nodes "
        "(8 GPUs each); num_experts may include EPLB redundant slots (288); per backend newest version "
        "measuring each key (node_num > 1 rows exist only in the older 0.5.6.post2 tables); fastest "
        "dispatch+combine kept",
        int_cols=("node_num", "hidden_size", "num_token", "num_topk", "num_experts"),
    )


def fam_deepep_normal(wh, system):
    df = load_all(wh, system, "comm", "wideep_deepep_normal_perf.parquet", backends=["sglang"])
    if df is None:
        return None
    paths = set(df["_src"])
    assert (df["dispatch_sms"] == df["combine_sms"]).all()
    df["sms"] = df["dispatch_sms"]
    df["dispatch_us"] = df["dispatch_transmit_us"] + df["dispatch_notify_us"].fillna(0)
    df["combine_us"] = df["combine_transmit_us"] + df["combine_notify_us"].fillna(0)
    df = df[np.isfinite(df["dispatch_us"]) & np.isfinite(df["combine_us"])
            & (df["dispatch_us"] > 0) & (df["combine_us"] > 0)]
    df["_tot"] = df["dispatch_us"] + df["combine_us"]
    key = ["node_num", "hidden_size", "num_token", "num_topk", "num_experts"]
    df = select(df, key, value="_tot")
    return finish(
        "deepep_normal", df, key, ["sms", "dispatch_us", "combine_us"], paths,
        "dispatch_us / combine_us = microseconds (source transmit_us + notify_us, already us), written %.4g",
        "DeepEP normal (high-throughput) dispatch / combine (sglang wide-EP); num_token = tokens per rank; "
        "for each key the SM count (dispatch_sms == combine_sms in source) with the fastest dispatch+combine is "
        "kept and recorded in `sms`; per backend newest version measuring each key (node_num > 1 rows exist "
        "only in the older 0.5.6.post2 tables, which also report non-zero notify_us)",
        int_cols=("node_num", "hidden_size", "num_token", "num_topk", "num_experts", "sms"),
    )


_ELEM_BYTES = {"bf16": 2, "fp16": 2, "int8": 1, "fp8": 1}


def fam_allreduce(wh, system):
    frames = []
    d = load_all(wh, system, "comm", "custom_allreduce_perf.parquet", backends=["sglang", "trtllm"])
    if d is not None:
        # sglang: CUDA-graph rows only (backend column 'sglang_graph'); sglang/0.5.6.post2 holds a copy
        # of a trtllm table (kernel_source TRTLLM) and is excluded by this filter.
        is_sg = d["backend"] == "sglang"
        sg_ok = is_sg & d["kernel_source"].astype(str).str.endswith("_graph")
        tr_ok = (~is_sg) & d["kernel_source"].astype(str).str.startswith("TRTLLM")
        d = d[sg_ok | tr_ok].copy()
        d["kernel"] = "custom"
        d["dtype"] = d["allreduce_dtype"].map(norm_dtype)
        frames.append(d)
    n = load_all(wh, system, "comm", "nccl_perf.parquet", backends=["nccl"])
    if n is not None:
        # all_reduce only; nccl-tests dtype half -> fp16 (same cost as bf16).  int8 all-reduce rows are dropped
        # (not used for LLM activations; they would share (kernel, num_gpus, message_bytes) with fp16 rows)
        n = n[(n["op_name"] == "all_reduce") & (n["nccl_dtype"] == "half")].copy()
        n["kernel"] = "nccl"
        n["dtype"] = "fp16"
        frames.append(n)
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True, sort=False)
    paths = set(df["_src"])
    df["message_bytes"] = df["message_size"] * df["dtype"].map(_ELEM_BYTES)
    df["latency_us"] = df["latency"] * 1000.0
    key = ["kernel", "num_gpus", "message_bytes", "dtype"]
    df = select(df, key)
    return finish(
        "allreduce", df, key, ["latency_us"], paths, UNITS_MS,
        "all-reduce on num_gpus GPUs; message_bytes = source message_size (an ELEMENT count, checked: NCCL fp16 "
        "and custom bf16 agree at equal element counts) x element size; kernel=custom: sglang custom all-reduce "
        "(CUDA-graph rows only) and trtllm custom all-reduce (incl. MNNVL one/two-shot where present), fastest "
        "kept; kernel=nccl: NCCL all_reduce from comm/nccl (nccl-tests dtype half -> fp16, same cost as bf16; "
        "int8 rows dropped); version = folder version; " + RULE_FASTEST,
        int_cols=("num_gpus", "message_bytes"),
    )


def fam_alltoall(wh, system):
    frames = []
    d = load_all(wh, system, "comm", "trtllm_alltoall_perf.parquet", backends=["trtllm"])
    if d is not None:
        d["op"] = d["op_name"].str.replace("alltoall_", "", regex=False)
        d["moe_dtype"] = d["moe_dtype"].map(norm_dtype)
        d["moe_ep"] = d["moe_ep_size"]
        d["latency_us"] = d["latency"] * 1000.0  # ms
        frames.append(d)
    a = load_all(wh, system, "comm", "moe_a2a_perf.parquet", backends=["trtllm"])
    if a is not None:
        assert set(a["node_num"]) == {1}
        # NB: in moe_a2a_perf the `latency` column is already MICROseconds (== transmit_us + notify_us)
        assert np.allclose(a["latency"], a["transmit_us"] + a["notify_us"])
        a["op"] = a["phase"]
        a["moe_dtype"] = a["comm_dtype"].map(norm_dtype)
        a["moe_ep"] = a["ep_size"]
        a["kernel_source"] = a["comm_backend"]
        a["latency_us"] = a["latency"]
        frames.append(a)
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True, sort=False)
    paths = set(df["_src"])
    key = ["op", "moe_dtype", "moe_ep", "num_tokens", "hidden_size", "topk", "num_experts"]
    df = select(df, key)
    return finish(
        "alltoall", df, key, ["latency_us"], paths,
        "latency_us = microseconds (trtllm_alltoall_perf `latency` is ms x1000; moe_a2a_perf `latency` is "
        "already us), written %.4g",
        "TRT-LLM MoE all-to-all on one node: trtllm_alltoall_perf (NVLinkOneSided/TwoSided; op prepare/dispatch/"
        "combine/combine_low_precision; distribution balanced) and moe_a2a_perf (trtllm DeepEP HT/LL, "
        "kernel_source = comm_backend; op dispatch/combine); num_tokens = tokens per rank; moe_dtype = "
        "communicated dtype; " + RULE_FASTEST,
        int_cols=("moe_ep", "num_tokens", "hidden_size", "topk", "num_experts"),
    )


def fam_nccl(wh, system):
    """NCCL all-gather and reduce-scatter (nccl-tests) on one node: the collectives
    aiconfigurator costs TensorRT-LLM's attention-DP MoE dispatch / combine with off NVL72
    (aic-core/rust/aiconfigurator-core/src/operators/moe_dispatch.rs, TrtllmAlltoall branch:
    NcclOp all_gather / reduce_scatter, dtype half) and vLLM's allgather_reducescatter uses."""
    n = load_all(wh, system, "comm", "nccl_perf.parquet", backends=["nccl"])
    if n is None:
        return None
    n = n[n["op_name"].isin(["all_gather", "reduce_scatter"]) & (n["nccl_dtype"] == "half")].copy()
    if n.empty:
        return None
    n["op"] = n["op_name"]
    n["dtype"] = "fp16"
    paths = set(n["_src"])
    n["message_bytes"] = n["message_size"] * 2
    n["latency_us"] = n["latency"] * 1000.0
    key = ["op", "num_gpus", "message_bytes", "dtype"]
    df = select(n, key)
    return finish(
        "nccl", df, key, ["latency_us"], paths, UNITS_MS,
        "NCCL all_gather / reduce_scatter from comm/nccl on num_gpus GPUs of one node (nccl-tests dtype half; "
        "int8 rows dropped); message_bytes = source message_size (an ELEMENT count: the whole gathered output "
        "of all_gather, the whole input of reduce_scatter, as aiconfigurator's NcclOp sizes it) x 2 bytes; "
        "version = folder version; " + RULE_FASTEST,
        int_cols=("num_gpus", "message_bytes"),
    )


FAMILIES = [
    fam_gemm, fam_mla_bmm, fam_mla_decode, fam_mla_prefill, fam_mla_module_decode, fam_mla_module_prefill,
    fam_attention_decode, fam_attention_prefill, fam_moe, fam_moe_wideep, fam_deepep_ll, fam_deepep_normal,
    fam_allreduce, fam_alltoall, fam_nccl,
]


# --------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------
def write_table(t: Table, out_dir: str, device: str, system: str) -> tuple[str, list[str]]:
    used = t.df["_src"].value_counts().to_dict()
    lines = [
        f"aiconfigurator-core {WHEEL_VERSION} measured latencies: {t.family} on {device} "
        f"(aiconfigurator system '{system}')",
        f"Source: aiconfigurator-core {WHEEL_VERSION} wheel (pip download --no-deps "
        f"aiconfigurator-core=={WHEEL_VERSION}); parquet files read (path inside the wheel, rows kept):",
    ]
    for p in t.read_paths:
        lines.append(f"  {p} ({used.get(p, 0)})")
    lines += [
        f"Licence: {LICENCE_LINE} (see ../LICENSE-aiconfigurator.txt)",
        f"Units: {t.units}; integer shape columns are integers",
        f"Selection: {t.rule}; rows with non-finite or non-positive latency dropped",
        f"Key: {','.join(t.key)} (unique); provenance columns: backend,version,kernel_source "
        "(version = version folder in the wheel path)",
    ]
    lines += [f"Note: {n}" for n in t.notes]
    path = os.path.join(out_dir, device, f"{t.family}.csv")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buf = io.StringIO()
    for ln in lines:
        buf.write("# " + ln + "\n")
    t.df[t.columns].to_csv(buf, index=False, float_format=FLOAT_FMT, lineterminator="\n")
    with open(path, "w", newline="") as f:
        f.write(buf.getvalue())
    contributing = sorted(p for p in t.read_paths if used.get(p, 0) > 0)
    return path, contributing


LICENSE_TEXT = f"""\
Files under hardware/measured/ (every <DEVICE>/*.csv and MANIFEST.csv) are derived from the
performance-database tables shipped in the aiconfigurator-core {WHEEL_VERSION} wheel
(aiconfigurator_core/systems/data/...), published by NVIDIA on PyPI.

Copyright NVIDIA CORPORATION & AFFILIATES. All rights reserved.
SPDX-License-Identifier: Apache-2.0

Licensed under the Apache License, Version 2.0 (the "License"); you may not use these files
except in compliance with the License. You may obtain a copy of the License at

    https://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software distributed under the
License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND,
either express or implied. See the License for the specific language governing permissions
and limitations under the License.

Modification notice (Apache-2.0 section 4(b)): the original parquet tables were extracted,
filtered, reduced (fastest kernel per shape, subset of shapes), converted to microseconds and
rounded to 4 significant digits by calibration/extract_aiconfigurator.py. Each CSV header lists
the exact source files and the selection rule applied.
"""


def apply_thin(t: Table, spec: dict, profile: str) -> None:
    if not spec:
        return
    n0 = len(t.df)
    parts = []
    for col, factor in spec.items():
        keep = log_grid(t.df[col].unique(), factor)
        t.df = t.df[t.df[col].isin(keep)].reset_index(drop=True)
        parts.append(f"{col} in {{{','.join(str(v) for v in sorted(keep))}}}")
    t.rule += (f"; '{profile}' profile: size axes thinned to a log grid (engine interpolates log latency): "
               + "; ".join(parts))
    t.notes.append(f"'{profile}' profile thinning: {n0} -> {len(t.df)} rows")


def gemm_grid_report(t: Table) -> list[str]:
    out = []
    for dt, g in t.df.groupby("dtype", sort=True):
        ms, ns, ks = sorted(g["m"].unique()), sorted(g["n"].unique()), sorted(g["k"].unique())
        full = len(ms) * len(ns) * len(ks)
        out.append(f"{dt}: {len(g)} rows, grid {len(ms)}m x {len(ns)}n x {len(ks)}k = {full}, missing {full - len(g)}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel", help="path to aiconfigurator_core-0.12.0-*.whl")
    ap.add_argument("--out", default="hardware/measured")
    ap.add_argument("--profile", choices=sorted(THIN), default="compact",
                    help="size profile (default compact; 'full' keeps every grid point of the base rules)")
    ap.add_argument("--check", action="store_true", help="re-read the CSVs and run sanity checks")
    args = ap.parse_args(argv)

    wh = Wheel(args.wheel)
    out = args.out
    os.makedirs(out, exist_ok=True)
    for device in SYSTEMS.values():  # remove stale tables of a previous run (only *.csv in our device folders)
        ddir = os.path.join(out, device)
        if os.path.isdir(ddir):
            for fn in sorted(os.listdir(ddir)):
                if fn.endswith(".csv"):
                    os.remove(os.path.join(ddir, fn))
    manifest = []
    summary = []
    grid_lines = []
    for system, device in SYSTEMS.items():
        for fam in FAMILIES:
            t = fam(wh, system)
            if t is None or len(t.df) == 0:
                continue
            spec = THIN_OVERRIDE.get((args.profile, device, t.family), THIN[args.profile].get(t.family))
            apply_thin(t, spec, args.profile)
            path, contributing = write_table(t, out, device, system)
            size = os.path.getsize(path)
            backends = sorted(set(t.df["backend"]))
            versions = sorted(set(t.df["backend"] + "/" + t.df["version"]))
            manifest.append([device, t.family, len(t.df), ";".join(backends), ";".join(versions),
                             ";".join(contributing)])
            summary.append((device, t.family, len(t.df), size))
            if t.family == "gemm":
                grid_lines += [f"{device} gemm {ln}" for ln in gemm_grid_report(t)]
            for n in t.notes:
                grid_lines.append(f"{device} {t.family}: {n}")

    with open(os.path.join(out, "MANIFEST.csv"), "w", newline="") as f:
        f.write(f"# aiconfigurator-core {WHEEL_VERSION} extraction manifest; {LICENCE_LINE}\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["device", "family", "rows", "backends", "versions", "wheel_paths"])
        w.writerows(manifest)
    with open(os.path.join(out, "LICENSE-aiconfigurator.txt"), "w") as f:
        f.write(LICENSE_TEXT)

    # summary
    fams = [f.__name__[4:] for f in FAMILIES]
    print(f"{'device':14s} " + " ".join(f"{fam[:14]:>16s}" for fam in fams) + f" {'total KB':>9s}")
    total = 0
    for device in SYSTEMS.values():
        cells, tot = [], 0
        for fam in fams:
            hit = [s for s in summary if s[0] == device and s[1] == fam]
            if hit:
                cells.append(f"{hit[0][2]:>8d}/{hit[0][3] / 1024:>6.0f}K")
                tot += hit[0][3]
            else:
                cells.append(f"{'-':>16s}")
        total += tot
        print(f"{device:14s} " + " ".join(cells) + f" {tot / 1024:>9.0f}")
    all_bytes = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns)
    print(f"CSV total {total / 1024 / 1024:.2f} MiB; {out} total {all_bytes / 1024 / 1024:.2f} MiB")
    for ln in grid_lines:
        print(ln)

    if args.check:
        check(wh, out)


# --------------------------------------------------------------------------
# sanity check
# --------------------------------------------------------------------------
KEYS = {
    "gemm": ["dtype", "m", "n", "k"],
    "mla_bmm": ["op", "dtype", "num_tokens", "num_heads"],
    "mla_decode": ["num_heads", "batch_size", "kv_len", "kv_dtype"],
    "mla_prefill": ["num_heads", "batch_size", "isl", "kv_dtype"],
    "mla_module_decode": ["num_heads", "batch_size", "kv_len", "kv_dtype", "gemm_dtype"],
    "mla_module_prefill": ["num_heads", "batch_size", "isl", "kv_dtype", "gemm_dtype"],
    "attention_decode": ["batch_size", "kv_len", "num_heads", "num_kv_heads", "head_dim", "kv_dtype"],
    "attention_prefill": ["batch_size", "isl", "num_heads", "num_kv_heads", "head_dim", "attn_dtype", "kv_dtype"],
    "moe": ["dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp", "moe_ep",
            "distribution"],
    "moe_wideep": ["phase", "dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "num_slots",
                   "moe_ep", "distribution"],
    "deepep_ll": ["node_num", "hidden_size", "num_token", "num_topk", "num_experts"],
    "deepep_normal": ["node_num", "hidden_size", "num_token", "num_topk", "num_experts"],
    "allreduce": ["kernel", "num_gpus", "message_bytes", "dtype"],
    "alltoall": ["op", "moe_dtype", "moe_ep", "num_tokens", "hidden_size", "topk", "num_experts"],
    "nccl": ["op", "num_gpus", "message_bytes", "dtype"],
}
VALUE_COLS = ("latency_us", "dispatch_us", "combine_us")


def check(wh: Wheel, out: str):
    print("\n== check")
    nfiles = 0
    for device in SYSTEMS.values():
        ddir = os.path.join(out, device)
        if not os.path.isdir(ddir):
            continue
        for fn in sorted(os.listdir(ddir)):
            fam = fn[:-4]
            df = pd.read_csv(os.path.join(ddir, fn), comment="#")
            key = KEYS[fam]
            dup = df.duplicated(key).sum()
            assert dup == 0, f"{device}/{fn}: {dup} duplicate keys"
            for c in VALUE_COLS:
                if c in df:
                    assert (df[c] > 0).all() and np.isfinite(df[c]).all(), f"{device}/{fn}: bad {c}"
            for c in ("backend", "version", "kernel_source"):
                assert c in df and df[c].notna().all(), f"{device}/{fn}: provenance {c}"
            nfiles += 1
    print(f"{nfiles} CSVs: keys unique, values finite and > 0, provenance present")

    def orig(system, op, fname, q, conv, cols):
        rows = []
        for be, ver, name in wh.find(system, op, fname):
            d = wh.read(name)
            m = np.ones(len(d), bool)
            for c, v in q.items():
                m &= (d[c] == v).to_numpy()
            for _, r in d[m].iterrows():
                rows.append(f"    {be}/{ver} {r.get('kernel_source', '')}: "
                            + ", ".join(f"{c}={conv(r[c]):.4g}" for c in cols))
        return rows

    def ours(device, fam, q):
        df = pd.read_csv(os.path.join(out, device, fam + ".csv"), comment="#")
        m = np.ones(len(df), bool)
        for c, v in q.items():
            m &= (df[c] == v).to_numpy()
        return df[m].to_string(index=False)

    print("\nspot 1: H200 gemm fp8_block m=64 n=7168 k=16384")
    print(ours("H200-SXM", "gemm", {"dtype": "fp8_block", "m": 64, "n": 7168, "k": 16384}))
    print("  parquet originals (latency ms -> us):")
    print("\n".join(orig("h200_sxm", "gemm", "gemm_perf.parquet",
                         {"gemm_dtype": "fp8_block", "m": 64, "n": 7168, "k": 16384},
                         lambda x: x * 1000, ["latency"])))

    print("\nspot 2: H200 deepep_ll node_num=1 hidden=7168 num_token=128 topk=8 experts=256")
    q = {"node_num": 1, "hidden_size": 7168, "num_token": 128, "num_topk": 8, "num_experts": 256}
    print(ours("H200-SXM", "deepep_ll", q))
    print("  parquet originals (us):")
    print("\n".join(orig("h200_sxm", "comm", "wideep_deepep_ll_perf.parquet", q, float,
                         ["dispatch_avg_t_us", "combine_avg_t_us"])))

    print("\nspot 3: H200 moe_wideep decode num_tokens=1024 ep=8 uniform")
    print(ours("H200-SXM", "moe_wideep", {"phase": "decode", "num_tokens": 1024, "moe_ep": 8,
                                           "distribution": "uniform"}))
    print("  parquet originals (latency ms -> us):")
    print("\n".join(orig("h200_sxm", "moe", "wideep_generation_moe_perf.parquet",
                         {"num_tokens": 1024, "moe_ep_size": 8, "distribution": "uniform"},
                         lambda x: x * 1000, ["latency"])))

    # diagnostics: non-monotone latency along the main axis (drop > 20% when the axis grows)
    print("\nnon-monotone diagnostics (fraction of adjacent steps where latency drops > 20% as the axis grows):")
    axes = {"gemm": "m", "attention_decode": "kv_len", "attention_prefill": "isl", "mla_decode": "kv_len",
            "mla_prefill": "isl", "moe": "num_tokens", "moe_wideep": "num_tokens", "mla_module_decode": "kv_len",
            "mla_module_prefill": "isl", "allreduce": "message_bytes", "mla_bmm": "num_tokens",
            "nccl": "message_bytes"}
    for device in SYSTEMS.values():
        parts = []
        for fam, ax in axes.items():
            p = os.path.join(out, device, fam + ".csv")
            if not os.path.exists(p):
                continue
            df = pd.read_csv(p, comment="#")
            grp = [k for k in KEYS[fam] if k != ax]
            df = df.sort_values(grp + [ax])
            prev = df.groupby(grp)["latency_us"].shift(1)
            steps = prev.notna().sum()
            bad = ((df["latency_us"] < 0.8 * prev) & prev.notna()).sum()
            parts.append(f"{fam}={bad}/{steps}")
        print(f"  {device}: " + " ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
