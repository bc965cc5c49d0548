#!/usr/bin/env python3
"""Extract AMD's measured kernel latencies from AITER's tuned tables.

Maintainer tool (not a runtime dependency of inference_factory).  Reads the tuned
GEMM and fused-MoE CSV tables of AMD's AITER library (``aiter/configs/**/*tuned*.csv``:
one row per shape with the fastest kernel's measured time ``us``) from a git
checkout or bare clone of github ROCm/aiter at one commit, and optionally from an
``amd-aiter`` wheel, and writes compact, deterministic per-device CSV tables in
the schema of ``calibration/extract_aiconfigurator.py``:

    hardware/measured/MI300X/{gemm,moe}.csv     (gfx942, 304 CUs)
    hardware/measured/MI355X/{gemm,moe}.csv     (gfx950, 256 CUs)
    hardware/measured/MI355X/mla_decode.csv     (AITER's measured MLA decode runs, reported in
                                                 aiter/ops/triton/gluon/README.md: AITER has no
                                                 tuned attention or collective table)
    hardware/measured/{MI300X,MI355X}/attention_prefill.csv  (causal BF16 prefill attention
                                                 measured on each, op_tests/cpp/mha/README.md
                                                 FWD TFLOPS, one column per device)
    hardware/measured/MANIFEST-aiter.csv, hardware/measured/LICENSE-aiter.txt

    git clone https://github.com/ROCm/aiter aiter-src       # or any clone; --rev picks the commit
    pip download --no-deps amd-aiter==0.1.7.post2.dev18 -d aiter-wheel   # optional
    python calibration/extract_aiter.py aiter-src [--rev HEAD] \
        [--wheel aiter-wheel/amd_aiter-0.1.7.post2.dev18-py3-none-any.whl] \
        [--out hardware/measured] [--profile compact|full] [--check]

Needs pandas and git.  The data is MIT-licensed, Copyright (c) Advanced Micro
Devices, Inc.  See calibration/README.md ("Measured kernel latencies from AMD
AITER") for the selection rules.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import pandas as pd

LICENCE_LINE = ("MIT License, Copyright (c) Advanced Micro Devices, Inc. (ROCm/aiter); "
                "extracted and reduced by calibration/extract_aiter.py")

FLOAT_FMT = "%.4g"

#: (gfx arch, CU count) of a row -> our hardware/<DEVICE>.toml name.  304 CUs = MI300X
#: (AMD CDNA3 / MI300X data sheet: 304 compute units; AITER aiter/jit/utils/build_targets.py
#: GFX_CU_NUM_MAP 'gfx942': 304 "MI300X (SPX, full GPU)"); 256 CUs on gfx950 = MI350 series
#: (AITER GFX_CU_NUM_MAP 'gfx950': 256 "MI350"; MI355X has 256 CUs, AMD CDNA4 data sheet).
#: 80 CUs on gfx942 is MI308X (AITER chip_info.py MI308_CHIP_IDS) and is not extracted.
DEVICES = {("gfx942", 304): "MI300X", ("gfx950", 256): "MI355X"}

#: AITER's own backfill for tables written before the ``gfx`` column existed
#: (aiter/jit/utils/chip_info.py _LEGACY_CU_NUM_TO_GFX: 256 -> gfx950, 80/304 -> gfx942)
LEGACY_CU_TO_GFX = {256: "gfx950", 80: "gfx942", 304: "gfx942"}

#: AITER's tuner default accuracy tolerance (aiter/utility/base_tuner.py defaults
#: "errRatio": 0.05); rows above it, or with an error marker, are dropped
ERR_RATIO_MAX = 0.05

#: smallest n and k kept (as the NVIDIA extraction): the engine's latency grid is made
#: non-decreasing along n and k, so one slow odd-shaped small GEMM (n = 16..200, a router or
#: a draft head) would otherwise raise every larger shape of its line
GEMM_MIN_NK = 256

#: GEMM m axis in the compact profile: powers of 2 (plus each (dtype, n, k) line's largest m)
GEMM_M_FACTOR = 2

#: MoE partitions each measured per-rank kernel is written for (see moe_forms)
#: why fused-MoE rows are kept whatever their stored err1/err2 (GEMM rows keep ERR_RATIO_MAX)
MOE_ERR_NOTE = ("every shipped row is the kernel AITER dispatches for its shape: its run_config "
                "accepts a row at its stored err + 5%; the stored stage errors of the 1x128 "
                "block-scaled FP8 kernels are 15-25% in every row on every device, so a 5% filter "
                "dropped e.g. all of AITER's DeepSeek-V3 MoE rows on gfx942, tuned on MI325X in "
                "aiter commit 84493f0e5b")
#: devices whose fused-MoE rows keep the err1/err2 <= ERR_RATIO_MAX filter. MI355X only: its
#: tables were adopted (and checked against ATOM serving points) with it; dropping it there adds
#: 115 shapes, among them the wheel's 256-expert DeepSeek TP8 rows from token 16 up (112.9 us),
#: which lift DeepSeek-V3's batch-1 TP8 MoE 1.6x: a change for its own check, not made here
MOE_ERR_FILTERED = ("MI355X",)
MOE_TP = (1, 2, 4, 8)
MOE_EP = (1, 2, 4, 8)

FP8 = ("torch.float8_e4m3fn", "torch.float8_e4m3fnuz")
FP4 = ("torch.float4_e2m1fn_x2",)
BF16 = ("torch.bfloat16",)

#: fused-MoE (activation dtype, weight dtype, quant type) -> table dtype.  The names are the
#: engine's (engine/table_rooflines.DTYPES): fp8 = per-token/per-tensor scales, fp8_block =
#: 1x128 blocks, nvfp4 = FP4 x FP4 on FP4 tensor cores (on AMD: MXFP4, 1x32 E8M0 scales),
#: w4a8_mxfp4_mxfp8 / w4a16_mxfp4 = MXFP4 weights with FP8 / BF16 activations, int4_wo = int4
#: weights (1x32 scales) with BF16 activations.
MOE_DTYPES = {
    **{(a, w, q): "fp8" for a in FP8 for w in FP8 for q in ("QuantType.per_Token",
                                                             "QuantType.per_Tensor")},
    **{(a, w, "QuantType.per_1x128"): "fp8_block" for a in FP8 for w in FP8},
    ("torch.float4_e2m1fn_x2", "torch.float4_e2m1fn_x2", "QuantType.per_1x32"): "nvfp4",
    **{(a, "torch.float4_e2m1fn_x2", "QuantType.per_1x32"): "w4a8_mxfp4_mxfp8" for a in FP8},
    ("torch.bfloat16", "torch.float4_e2m1fn_x2", "QuantType.per_1x32"): "w4a16_mxfp4",
    ("torch.bfloat16", "torch.bfloat16", "QuantType.No"): "bf16",
    # INT4 weight-only (W4A16): BF16 activations, int4 weights with one scale per 32 (AITER
    # model_configs/kimik2_i4_tuned_fmoe.csv, FlyDSL a16wi4 kernels, Kimi-K2's experts; the
    # engine's name of AIConfigurator's W4A16 rows, int4 group 32 as Kimi-K2-Thinking ships)
    ("torch.bfloat16", "torch.int4", "QuantType.per_1x32"): "int4_wo",
}

#: MI300X has no AITER table for FP8 GEMMs with per-token/per-tensor scales (only 1x128
#: block scales); with --fp8-proxy (off by default) its 'fp8' rows are its 'fp8_block' rows,
#: marked in kernel_source. Off because the check rejects it: block-scaled GEMMs top out at
#: ~1000 TFLOPS on MI300X, and with the proxy MLPerf v5.1 Llama-2-70B FP8 offline on MI325X
#: (validation/dev_cases.csv) comes out 0.58x the measured throughput.
FP8_PROXY_DEVICES = ("MI300X",)

GEMM_COLS = ["dtype", "m", "n", "k", "latency_us", "backend", "version", "kernel_source"]
MOE_COLS = ["dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
            "moe_tp", "moe_ep", "distribution", "latency_us", "backend", "version",
            "kernel_source"]
GEMM_KEY = ["dtype", "m", "n", "k"]
MOE_KEY = MOE_COLS[:9]


# ---- reading the sources ---------------------------------------------------------------------

def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout


def repo_tables(repo: str, rev: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(commit, [(version label, path, csv text)]) of every tuned table at ``rev``."""
    commit = _git(repo, "rev-parse", rev).strip()
    names = _git(repo, "ls-tree", "-r", "--name-only", commit, "aiter/configs").split()
    out = []
    for p in sorted(names):
        if _is_tuned(p):
            out.append((commit[:10], p, _git(repo, "show", f"{commit}:{p}")))
    return commit, out


def wheel_tables(wheel: str) -> tuple[str, list[tuple[str, str, str]]]:
    m = re.match(r"amd_aiter-([^-]+)-", os.path.basename(wheel))
    version = m.group(1) if m else os.path.basename(wheel)
    out = []
    with zipfile.ZipFile(wheel) as z:
        for p in sorted(z.namelist()):
            if _is_tuned(p):
                out.append((version, p, z.read(p).decode()))
    return version, out


def _is_tuned(path: str) -> bool:
    b = os.path.basename(path)
    return (path.startswith("aiter/configs/") and b.endswith(".csv") and "tuned" in b
            and "untuned" not in b)


def _kind(path: str) -> str | None:
    """'gemm', 'moe' or None (a table with no family: batched GEMM, GDN, hipBLASLt asm list,
    the fused shared-expert MoE without times)."""
    b = os.path.basename(path)
    if "batched" in b or "gdn" in b or "fhmoe" in b or b.startswith("asm_"):
        return None
    if "fmoe" in b:
        return "moe"
    if "gemm" in b:
        return "gemm"
    return None


def _device_rows(df: pd.DataFrame) -> pd.Series:
    """Our device name per row (None where not extracted)."""
    cu = pd.to_numeric(df["cu_num"], errors="coerce")
    gfx = (df["gfx"].astype(str) if "gfx" in df.columns
           else cu.map(LEGACY_CU_TO_GFX).astype(str))
    return pd.Series([DEVICES.get((g, int(c)) if not math.isnan(c) else None)
                      for g, c in zip(gfx, cu)], index=df.index)


def _finite_positive(s: pd.Series) -> pd.Series:
    v = pd.to_numeric(s, errors="coerce")
    return np.isfinite(v) & (v > 0)


def _err_ok(df: pd.DataFrame, cols) -> pd.Series:
    ok = pd.Series(True, index=df.index)
    for c in cols:
        if c in df.columns:
            txt = df[c].astype(str).str.strip().str.rstrip("%")
            v = pd.to_numeric(txt, errors="coerce")
            scale = np.where(df[c].astype(str).str.contains("%"), 0.01, 1.0)
            ok &= np.isfinite(v) & (v * scale <= ERR_RATIO_MAX)
    return ok


def gemm_dtype_of(path: str, df: pd.DataFrame) -> pd.Series:
    b = os.path.basename(path)
    if "a4w4" in b:
        return pd.Series("nvfp4", index=df.index)
    if "blockscale" in b:
        return pd.Series("fp8_block", index=df.index)
    if "bf16" in b:
        ok = df["dtype"].astype(str).isin(BF16) if "dtype" in df.columns else True
        return pd.Series(np.where(ok, "bf16", ""), index=df.index)
    if "a8w8" in b:
        w = df["q_dtype_w"].astype(str) if "q_dtype_w" in df.columns else None
        if w is None:      # a8w8 tables without q_dtype_w are int8 (older AITER default)
            return pd.Series("", index=df.index)
        return pd.Series(np.where(w.isin(FP8), "fp8", ""), index=df.index)  # int8: no dtype
    return pd.Series("", index=df.index)


def read_gemm(version: str, path: str, text: str) -> pd.DataFrame:
    df = pd.read_csv(io.StringIO(text))
    if not {"cu_num", "M", "N", "K", "us"} <= set(df.columns) or not len(df):
        return pd.DataFrame(columns=GEMM_COLS + ["device", "source"])
    keep = _finite_positive(df["us"]) & _err_ok(df, ("errRatio", "err_ratio"))
    for c in ("bias", "scaleAB"):
        if c in df.columns:
            keep &= df[c].astype(str).str.lower() == "false"
    df = df.assign(device=_device_rows(df), dtype=gemm_dtype_of(path, df))
    keep &= (pd.to_numeric(df["N"], errors="coerce") >= GEMM_MIN_NK) & (
        pd.to_numeric(df["K"], errors="coerce") >= GEMM_MIN_NK)
    df = df[keep & df["device"].notna() & (df["dtype"] != "")]
    kn = df["kernelName"].astype(str) if "kernelName" in df.columns else ""
    return pd.DataFrame({
        "device": df["device"], "dtype": df["dtype"], "m": df["M"].astype(int),
        "n": df["N"].astype(int), "k": df["K"].astype(int),
        "latency_us": df["us"].astype(float), "backend": "aiter", "version": version,
        "kernel_source": kn, "source": path})


def moe_forms(tokens, inter, experts):
    """The (moe_tp, moe_ep) partitions whose busiest-rank work is one measured kernel.

    An AITER row is one rank's fused MoE: ``token`` tokens, each routed to ``topk`` of
    ``expert`` local experts (uniform random ids), experts ``inter_dim`` wide.  That is
    exactly the rank of a TP-t partition of experts ``t * inter_dim`` wide (every rank
    sees every token), and, to the roofline's counting (token-expert pairs per rank
    ``N topk / e`` and distinct experts hit, engine/table_rooflines.moe_roofline_s), the
    rank of an EP-e partition of ``e * expert`` experts with ``N = e * token`` tokens
    entering the EP group.  Pure partitions only (t = 1 or e = 1), as in the NVIDIA
    tables.  Yields (num_tokens, inter_size, num_experts, moe_tp, moe_ep)."""
    for t in MOE_TP:
        yield tokens, inter * t, experts, t, 1
    for e in MOE_EP[1:]:
        yield tokens * e, inter, experts * e, 1, e


def read_moe(version: str, path: str, text: str) -> pd.DataFrame:
    df = pd.read_csv(io.StringIO(text))
    need = {"cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "us",
            "q_dtype_a", "q_dtype_w", "q_type"}
    if not need <= set(df.columns) or not len(df):
        return pd.DataFrame(columns=MOE_COLS + ["device", "source"])
    # err1/err2 <= 5 % only on MOE_ERR_FILTERED devices (MOE_ERR_NOTE): elsewhere the row is
    # the kernel AITER dispatches for the shape whatever its stored err
    keep = _finite_positive(df["us"]) & (_err_ok(df, ("err1", "err2"))
                                         | ~_device_rows(df).isin(MOE_ERR_FILTERED))
    for c in ("us1", "us2"):      # a stage that failed is marked -1 (INVALID_TIME) or inf
        if c in df.columns:
            v = pd.to_numeric(df[c], errors="coerce")
            keep &= np.isfinite(v) & (v >= 0)
    if "use_g1u1" in df.columns:   # gate and up projections (3 expert matrices), as costed
        keep &= pd.to_numeric(df["use_g1u1"], errors="coerce") == 1
    keep &= (pd.to_numeric(df["expert"], errors="coerce") > 0) & (
        pd.to_numeric(df["topk"], errors="coerce") > 0)
    dt = [MOE_DTYPES.get((a, w, q), "") for a, w, q in zip(
        df["q_dtype_a"].astype(str), df["q_dtype_w"].astype(str), df["q_type"].astype(str))]
    df = df.assign(device=_device_rows(df), dtype=dt)
    df = df[keep & df["device"].notna() & (df["dtype"] != "")]
    rows = []
    for r in df.itertuples(index=False):
        ks = "+".join(str(x) for x in (getattr(r, "kernelName1", ""), getattr(r, "kernelName2", ""))
                      if isinstance(x, str) and x and x != "nan")   # 1-stage kernels: no stage 2
        for n, inter, experts, t, e in moe_forms(int(r.token), int(r.inter_dim), int(r.expert)):
            rows.append((r.device, r.dtype, n, int(r.model_dim), inter, int(r.topk), experts,
                         t, e, "uniform", float(r.us), "aiter", version,
                         (f"{ks} [token={int(r.token)} inter_dim={int(r.inter_dim)} "
                         f"expert={int(r.expert)}]"), path))
    return pd.DataFrame(rows, columns=["device"] + MOE_COLS + ["source"])


# ---- fused MoE: AMD's MoE benchmarking run on MI300 (DeepSeek-V3 shapes the tables lack) -------

#: AMD's MoE kernel benchmarking pipeline (op_tests/moe_benchmarking_profiling, commit
#: 6f7d20bc55 "Add MOE kernel benchmarking and profiling", 2026-01-29, reachable from AITER's
#: tag archive/benchmarking, not on main) ran AITER's own fmoe tuner task generators and timing
#: (run_perftest, the tuned tables' ``us``) over every kernel of each shape on an 'mi300' and
#: kept the best ones per stage in this file. It measures DeepSeek-V3's routed experts at TP8
#: and TP4 (7168 x 256 / 512, 256 experts, top-8, 1x128 FP8) for 1-1024 tokens, shapes AITER's
#: shipped gfx942 tables lack (their 304-CU DeepSeek rows are the EP8 rank only).
#: ASSUMPTION: 'mi300' is MI300X (304 CUs): the pipeline's GPU map knows MI300X and MI300A only
#: on gfx942, its roofline analysis defaults to MI300X (analyze_profiling.py DEFAULT_GPU); the
#: file does not record cu_num. Only DeepSeek-V3's own shapes and format are taken: model_dim
#: 7168, 256 routed experts (257 / top-9 with the shared one fused), 1x128 block-scaled FP8
#: (fp8_block), at TP8 (inter_dim 256) and TP4 (512). The rest are AITER's unit-test and other models' shapes,
#: and per-tensor FP8 / BF16 runs of the DeepSeek shapes: MI300X has no other 'fp8' MoE row, so
#: the nearest-shape rule would hand their 256-expert efficiency to an 8-expert model (MLPerf
#: Mixtral-8x7B FP8 offline on MI300X: 9195 -> 15865 tok/s/GPU), a far extrapolation.
MOE_BENCH_COMMIT = "6f7d20bc55b75d2181598838ffb3fdaeee47414e"
MOE_BENCH_PATH = "op_tests/moe_benchmarking_profiling/results/mi300_benchmark_best_kernels.csv"
MOE_BENCH_DEVICE = "MI300X"
MOE_BENCH_HIDDEN = (7168,)
MOE_BENCH_EXPERTS = (256, 257)
MOE_BENCH_DTYPES = ("fp8_block",)


def read_moe_benchmark(version: str, text: str) -> pd.DataFrame:
    """One row per benchmarked shape, in read_moe's form: latency = the faster of the best
    1-stage kernel and the best stage-1 + stage-2 pair of one block_m (the file keeps the best
    kernel of each stage and kind, so both optima are in it); the activation quantisation the
    file times apart (quant_time_us) is left out, as in the tuned tables' us1 + us2."""
    df = pd.read_csv(io.StringIO(text))
    df = df[_finite_positive(df["time_us"]) & (df["error"].astype(str) != "failed")
            & df["model_dim"].isin(MOE_BENCH_HIDDEN) & df["expert"].isin(MOE_BENCH_EXPERTS)
            & (df["use_g1u1"] == 1)]
    rows = []
    for _, g in df.groupby("config_idx", sort=True):
        r = g.iloc[0]
        dtype = MOE_DTYPES.get((str(r.q_dtype_a), str(r.q_dtype_w), str(r.q_type)), "")
        if dtype not in MOE_BENCH_DTYPES:
            continue
        best = [(float(x.time_us), x.kernel_name) for x in g.itertuples()
                if x.stage == "asm_1stage"]
        for bm, h in g.groupby("block_m"):
            s1, s2 = h[h.stage == "stage1"], h[h.stage == "stage2"]
            if len(s1) and len(s2):
                a, b = s1.loc[s1.time_us.idxmin()], s2.loc[s2.time_us.idxmin()]
                best.append((float(a.time_us + b.time_us), f"{a.kernel_name}+{b.kernel_name}"))
        if not best:
            continue
        us, ks = min(best)
        for n, inter, experts, t, e in moe_forms(int(r.token), int(r.inter_dim), int(r.expert)):
            rows.append((MOE_BENCH_DEVICE, dtype, n, int(r.model_dim), inter, int(r.topk),
                         experts, t, e, "uniform", us, "aiter", version,
                         (f"{ks} [token={int(r.token)} inter_dim={int(r.inter_dim)} "
                          f"expert={int(r.expert)}; moe_benchmarking_profiling mi300]"),
                         MOE_BENCH_PATH))
    return pd.DataFrame(rows, columns=["device"] + MOE_COLS + ["source"])


# ---- MLA decode: AMD's own measured latencies in the Gluon kernel README -----------------------

#: AITER reports measured MLA decode (absorbed, DeepSeek dimensions) latencies on gfx950 only in
#: this README (no tuned table exists for attention): per shape, as TFLOPS, TB/s with a
#: wall-clock time, or microseconds directly; every one from ``op_tests/test_mla.py`` runs
MLA_README = "aiter/ops/triton/gluon/README.md"
#: the README's device: "MI350" (gfx950, 256 CUs: AITER GFX_CU_NUM_MAP 'gfx950': 256 "MI350").
#: Written for MI355X, the same silicon (ASSUMPTION: if the runs were on an MI350X, whose peak
#: engine clock is lower, its compute-limited rows bias MI355X slow; memory-bound rows agree)
MLA_README_DEVICE = "MI355X"
#: op_tests/test_mla.py defaults, the dimensions of every README run (kv_lora_rank 512,
#: qk_rope_head_dim 64: qk_head_dim 576, v_head_dim 512; decode_qlen 1; block_size 1;
#: fixed lengths, no --varlen); its TFLOPS is flops / us with
#: flops = decode_qlen * total_kv * nhead * (qk_head_dim + v_head_dim) * 2 (test_mla.py)
MLA_QK_DIM, MLA_V_DIM = 576, 512
MLA_DECODE_COLS = ["num_heads", "batch_size", "kv_len", "kv_dtype", "latency_us", "backend",
                   "version", "kernel_source"]
MLA_DECODE_KEY = ["num_heads", "batch_size", "kv_len", "kv_dtype"]


#: By default the README's MLA decode points are written as reference data the engine does
#: NOT read (``mla_decode_points.csv``): 12 points, and the only 16-head rows (DeepSeek-V3's
#: heads per GPU at TP8) are at batch 1-4. The engine costs a 16-head op from the 16-head
#: group alone (nearest num_heads), so batch 64 at kv_len 2048 would take batch 4's
#: efficiency (ln ratio 1.91 after the monotone envelope): 130 us per layer, and 16 heads at
#: batch 64, kv_len 16384 would cost 776 us where AITER measured 322 us for 64 heads at the
#: same batch and context (more heads, same KV: never faster). ``--mla-decode-table`` writes
#: them as ``mla_decode.csv`` all the same.
MLA_POINTS = "mla_decode_points"
MLA_POINTS_NOTE = ("; written as mla_decode_points.csv, NOT read by the engine (too sparse for "
                   "its nearest-num_heads rule: see MLA_POINTS in calibration/extract_aiter.py)")


def _mla_flop(batch, ctx, heads):
    """test_mla.py's decode FLOP count (decode_qlen = 1, total_kv = batch x ctx)."""
    return batch * ctx * heads * (MLA_QK_DIM + MLA_V_DIM) * 2


def _ctx(text: str) -> int:
    """'16384', '10K', '100K', '10M' -> tokens."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KM]?)", text.strip())
    if not m:
        raise ValueError(f"{MLA_README}: context '{text}' not understood")
    return round(float(m.group(1)) * {"": 1, "K": 1000, "M": 1_000_000}[m.group(2)])


def _table_after(lines: list[str], start: int) -> list[list[str]]:
    """The rows (cells) of the first markdown table after line ``start``, header first."""
    i = start
    while i < len(lines) and not lines[i].lstrip().startswith("|"):
        i += 1
    rows = []
    while i < len(lines) and lines[i].lstrip().startswith("|"):
        cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        if not all(set(c) <= set("-: ") for c in cells):
            rows.append(cells)
        i += 1
    return rows


def _kv_dtype(heading: str) -> str:
    m = re.search(r"bf16 Q \+ (bf16|fp8) KV", heading)
    if not m:
        raise ValueError(f"{MLA_README}: no KV dtype in '{heading}'")
    return m.group(1)


def read_mla_readme(version: str, text: str) -> pd.DataFrame:
    """MLA decode latencies (us) per shape from the README's three kinds of perf blocks.

    ``**`bh64` perf** (MI350, ctx=N, ...)`` tables of ASM / Gluon TFLOPS: latency =
    test_mla.py flops / TFLOPS; ``**`bh16...` perf** (MI350, ctx=N, ...)`` tables of TB/s,
    each followed by a sentence with the measured 'wall-clock X us' (and 'vs ASM Y us'):
    those times as written; ``**`return_lse` perf**`` table: its ``us`` column as written.
    A block whose format changed raises (numbers are never guessed)."""
    lines = text.splitlines()
    rows = []
    heads_re = re.compile(r"^\*\*`(\w+)` perf\*\* \((MI\d+)(?:, ctx=([\dKM.]+))?, (.*)\)")
    for i, line in enumerate(lines):
        m = heads_re.match(line.strip())
        if not m:
            continue
        regime, device, ctx, rest = m.groups()
        if not device.startswith("MI35"):
            raise ValueError(f"{MLA_README}: perf block for {device}, not gfx950")
        kv = _kv_dtype(rest)
        tab = _table_after(lines, i + 1)
        head, body = tab[0], tab[1:]
        col = {h: j for j, h in enumerate(head)}
        if regime == "return_lse":
            for r in body:
                rows.append((int(r[col["batch"]]), _ctx(r[col["ctx_lens"]]), kv,
                             float(r[col["us"]]), f"gluon mla_gluon {regime} (full decode + lse)"))
        elif "ASM TFLOPS" in col:
            c = _ctx(ctx)
            for r in body:
                b, h = int(r[col["batch"]]), int(r[col["nhead"]])
                for k, name in (("ASM TFLOPS", "asm mla_decode_fwd"), ("Gluon TFLOPS",
                                                                        f"gluon mla_gluon {regime}")):
                    v = r[col[k]]
                    if re.fullmatch(r"\d+(\.\d+)?", v):
                        rows.append((b, c, kv, _mla_flop(b, c, h) / (float(v) * 1e12) * 1e6,
                                     name, h))
            continue
        elif "Gluon TB/s" in col:
            c = _ctx(ctx)
            # the sentence after the table gives the measured wall-clock times
            j = i + 1
            while j < len(lines) and "wall-clock" not in lines[j]:
                j += 1
            sent = lines[j].replace("&mu;", "u").replace("µ", "u")
            gl = re.search(r"wall-clock (\d+(?:\.\d+)?) us", sent)
            asm = re.search(r"vs ASM (\d+(?:\.\d+)?) us", sent)
            if gl is None or len(body) != 1:
                raise ValueError(f"{MLA_README}: '{regime}' block has no single wall-clock time")
            b, h = int(body[0][col["batch"]]), int(body[0][col["nhead"]])
            rows.append((b, c, kv, float(gl.group(1)), f"gluon mla_gluon {regime}", h))
            if asm:
                rows.append((b, c, kv, float(asm.group(1)), "asm mla_decode_fwd", h))
            continue
        else:
            raise ValueError(f"{MLA_README}: perf block '{regime}' has an unknown table")
        # return_lse rows: nhead from the command line of the block (-n 16,1)
        cmd = next((x for x in lines[i:i + 8] if "test_mla.py" in x), "")
        n = re.search(r"-n (\d+),1", cmd)
        if n is None:
            raise ValueError(f"{MLA_README}: '{regime}' block has no -n HEADS,1 command")
        rows[-len(body):] = [r + (int(n.group(1)),) for r in rows[-len(body):]]
    if not rows:
        raise ValueError(f"{MLA_README}: no MLA decode perf blocks found")
    df = pd.DataFrame(rows, columns=["batch_size", "kv_len", "kv_dtype", "latency_us",
                                     "kernel_source", "num_heads"])
    return df.assign(device=MLA_README_DEVICE, backend="aiter", version=version,
                     source=MLA_README)[["device"] + MLA_DECODE_COLS + ["source"]]


# ---- FMHA prefill: AMD's measured forward attention in the CK MHA benchmark README ------------

#: AITER's only measured attention times on gfx942: the table under "the asm kernel performance
#: of the attention forwards and attention backwards" ("tested under the conditions of BF16 and
#: BSHD in batch mode"), one TFLOPS column per device and direction; the FWD runs are
#: op_tests/cpp/mha/benchmark_mha_fwd.cpp (ck_tile timer: mean of -repeat launches after
#: -warmup, defaults 10 / 10). No decode (paged / MLA) time exists for gfx942 in AITER.
FMHA_README = "op_tests/cpp/mha/README.md"
#: the README's device columns extracted (our device name = its column name: the README names
#: the SKU, so MI355X needs no gfx950 -> MI355X assumption here). Read by the engine for GQA/MHA
#: prefill with head dim 128 only (family attention_prefill); MLA prefill is its own family
#: (mla_prefill) and runs other kernels on ROCm (docs/MODEL.md, "Measured tables on AMD")
FMHA_DEVICES = ("MI300X", "MI355X")
ATTN_PREFILL_COLS = ["batch_size", "isl", "num_heads", "num_kv_heads", "head_dim", "attn_dtype",
                     "kv_dtype", "latency_us", "backend", "version", "kernel_source"]
ATTN_PREFILL_KEY = ATTN_PREFILL_COLS[:7]


def _fmha_flop(batch, seqlen_q, seqlen_k, heads, hdim_q, hdim_v, causal):
    """benchmark_mha_fwd.cpp's FLOP count: batch x nhead x (2 sq sk hdim_q + 2 sq hdim_v sk),
    halved under any mask (its ``flop /= 2``); TFLOPS = flop / 1e9 / ms."""
    flop = batch * heads * (2 * seqlen_q * seqlen_k * hdim_q + 2 * seqlen_q * hdim_v * seqlen_k)
    return flop / 2 if causal else flop


def read_fmha_readme(version: str, text: str) -> pd.DataFrame:
    """Causal BF16 prefill attention latencies (us) per shape from the README's FWD TFLOPS:
    latency = benchmark flop / TFLOPS. Kept: causal = 1 (the engine's prefill is causal:
    gqa_prefill_roofline_s) with seqlen_q = seqlen_kv (no cached prefix); hdim is both the
    QK and V head dim. A changed table layout raises (numbers are never guessed)."""
    lines = text.splitlines()
    start = next((i for i, x in enumerate(lines) if "FWD(TFLOPS)" in x), None)
    if start is None:
        raise ValueError(f"{FMHA_README}: no FWD(TFLOPS) table")
    tab = _table_after(lines, start)
    head, devs, body = tab[0], tab[1], tab[2:]
    col = {h: j for j, h in enumerate(head)}
    need = ("batch", "q_nheads", "kv_nheads", "seqlen_q", "seqlen_kv", "hdim", "causal")
    fwd = col.get("FWD(TFLOPS)")
    if fwd is None or any(k not in col for k in need) or any(devs[j] for j in range(fwd)):
        raise ValueError(f"{FMHA_README}: FWD table header not understood: {head} / {devs}")
    rows = []
    for dev in FMHA_DEVICES:
        if dev not in devs[fwd:fwd + 2]:
            raise ValueError(f"{FMHA_README}: no {dev} column under FWD(TFLOPS): {devs}")
        j = fwd + devs[fwd:fwd + 2].index(dev)
        for r in body:
            b, hq, hk, sq, sk, d, causal = (int(r[col[k]]) for k in need)
            if causal != 1 or sq != sk or not re.fullmatch(r"\d+(\.\d+)?", r[j]):
                continue
            us = _fmha_flop(b, sq, sk, hq, d, d, True) / (float(r[j]) * 1e12) * 1e6
            rows.append((dev, b, sq, hq, hk, d, "bf16", "bf16", us, "aiter", version,
                         "asm fmha_fwd_v3 (benchmark_mha_fwd, README FWD TFLOPS)", FMHA_README))
    if not rows:
        raise ValueError(f"{FMHA_README}: no causal FWD rows")
    return pd.DataFrame(rows, columns=["device"] + ATTN_PREFILL_COLS + ["source"])


# ---- reduction ---------------------------------------------------------------------------------

def fastest(df: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """The fastest row of every key; ties broken by version, source, kernel (deterministic)."""
    df = df.sort_values(key + ["latency_us", "version", "source", "kernel_source"],
                        kind="mergesort")
    return df.drop_duplicates(key, keep="first").reset_index(drop=True)


def thin_gemm_m(df: pd.DataFrame, factor: int) -> pd.DataFrame:
    """Keep m = factor^i and each (dtype, n, k) line's largest m (compact profile)."""
    logm = np.log(df["m"].to_numpy(dtype=float)) / math.log(factor)
    on_grid = np.isclose(logm, np.round(logm))
    largest = df["m"] == df.groupby(["dtype", "n", "k"])["m"].transform("max")
    return df[on_grid | largest.to_numpy()].reset_index(drop=True)


def fp8_proxy(df: pd.DataFrame) -> pd.DataFrame:
    """'fp8' rows from 'fp8_block' rows where a device has no per-token FP8 GEMM table."""
    blk = df[df["dtype"] == "fp8_block"]
    have = set(df.loc[df["dtype"] == "fp8", ["n", "k"]].itertuples(index=False, name=None))
    if have:
        return df
    prox = blk.assign(dtype="fp8", kernel_source="fp8_block proxy: " + blk["kernel_source"])
    return pd.concat([df, prox], ignore_index=True)


# ---- writing -----------------------------------------------------------------------------------

def _fmt(v):
    if isinstance(v, (float, np.floating)):
        return FLOAT_FMT % v
    return v


def write_table(path, df, cols, header_lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        f.writelines(f"# {line}\n" for line in header_lines)
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        for row in df[cols].itertuples(index=False, name=None):
            w.writerow([_fmt(v) for v in row])


#: how each README-derived family's latency was measured (the tuned tables: AITER `us`)
UNITS = {
    "mla_decode": ("op_tests/test_mla.py run_perftest: mean device time per call, "
                   "aiter/test_common.py, as reported in the README"),
    "attention_prefill": ("benchmark_mha_fwd.cpp's flop / the README's FWD TFLOPS; its "
                          "ck_tile timer: mean of 10 launches after 10 warm-up ones"),
}


def header(device, family, sources, commit, wheel_version, selection, key, note):
    lines = [(f"AITER measured latencies: {family} on {device} "
             f"({'gfx942, 304 CUs' if device == 'MI300X' else 'gfx950, 256 CUs'})"),
             f"Source: github ROCm/aiter commit {commit}"
             + (f" and the amd-aiter {wheel_version} wheel" if wheel_version else "")
             + ("; tuned tables read" if family in ("gemm", "moe") else "; files read")
             + " (version, path, rows kept):"]
    lines += [f"  {v} {p} ({n})" for (v, p), n in sorted(sources.items())]
    lines += [f"Licence: {LICENCE_LINE} (see ../LICENSE-aiter.txt)",
              ("Units: latency_us = microseconds (" + UNITS.get(
                  family, "AITER `us`: mean device time per call of the tuned kernel, torch "
                  "profiler over rotating input copies, aiter/test_common.py perftest")
               + "), written %.4g"),
              f"Selection: {selection}",
              (f"Key: {key} (unique); provenance columns: backend=aiter, version=<commit[:10]> "
              "or <wheel version>, kernel_source=<kernelName>"),
              note]
    return [x for x in lines if x]


def extract(repo, rev, wheel, out, profile, proxy=False, mla_table=False):
    commit, tables = repo_tables(repo, rev)
    wheel_version = None
    if wheel:
        wheel_version, wt = wheel_tables(wheel)
        tables += wt
    gemm, moe = [], []
    for version, path, text in tables:
        kind = _kind(path)
        if kind == "gemm":
            gemm.append(read_gemm(version, path, text))
        elif kind == "moe":
            moe.append(read_moe(version, path, text))
    gemm = pd.concat(gemm, ignore_index=True)
    moe.append(read_moe_benchmark(MOE_BENCH_COMMIT[:10],
                                  _git(repo, "show", f"{MOE_BENCH_COMMIT}:{MOE_BENCH_PATH}")))
    moe = pd.concat(moe, ignore_index=True)
    mla = read_mla_readme(commit[:10], _git(repo, "show", f"{commit}:{MLA_README}"))
    fmha = read_fmha_readme(commit[:10], _git(repo, "show", f"{commit}:{FMHA_README}"))
    manifest = []
    for device in sorted(set(DEVICES.values())):
        folder = os.path.join(out, device)
        os.makedirs(folder, exist_ok=True)
        for f in os.listdir(folder):
            if f in ("gemm.csv", "moe.csv", "mla_decode.csv", f"{MLA_POINTS}.csv",
                     "attention_prefill.csv"):                                  # its own
                os.remove(os.path.join(folder, f))
        g = fastest(gemm[gemm["device"] == device], ["device"] + GEMM_KEY)
        before = len(g)
        if profile == "compact":
            g = thin_gemm_m(g, GEMM_M_FACTOR)
        if proxy and device in FP8_PROXY_DEVICES:
            g = fp8_proxy(g)
        g = g.sort_values(GEMM_KEY, kind="mergesort").reset_index(drop=True)
        m = fastest(moe[moe["device"] == device], ["device"] + MOE_KEY)
        m = m.sort_values(MOE_KEY, kind="mergesort").reset_index(drop=True)
        a = mla[mla["device"] == device]
        a_all = len(a)
        a = fastest(a, ["device"] + MLA_DECODE_KEY)
        a = a.sort_values(MLA_DECODE_KEY, kind="mergesort").reset_index(drop=True)
        p = fmha[fmha["device"] == device].sort_values(ATTN_PREFILL_KEY, kind="mergesort")
        for fam, df, cols, key, sel, note in (
            ("gemm", g, GEMM_COLS, ",".join(GEMM_KEY),
             ("tables *tuned_gemm*.csv except batched; dtype from the table: bf16 (bf16_*, "
             "dtype bfloat16, bias False, scaleAB False), fp8 (a8w8 / a8w8_bpreshuffle with "
             "q_dtype_w float8: per-token activation and per-channel weight scales), fp8_block "
             "(a8w8_blockscale*: 1x128 activation / 128x128 weight blocks), nvfp4 (a4w4_blockscale"
             ": MXFP4 x MXFP4, 1x32 E8M0 scales; named after the engine's FP4 x FP4 dtype); int8 "
             "rows dropped; us finite and > 0, errRatio <= 0.05; the fastest row per key over "
             "all tables; n, k >= 256; compact profile: m in {2^i} plus each (dtype,n,k) line's largest m"),
             f"Note: {before} -> {len(g)} rows" + (
                 "; 'fp8' rows are the fp8_block rows (kernel_source 'fp8_block proxy: ...'): "
                 "AITER has no per-token FP8 GEMM table for this device (ASSUMPTION, biases "
                 "slow)" if proxy and device in FP8_PROXY_DEVICES else "")),
            ("moe", m, MOE_COLS, ",".join(MOE_KEY),
             ("tables *tuned_fmoe*.csv (2-stage fused MoE, use_g1u1 = 1: gate+up then down); "
             "latency_us = AITER `us` = us1 (stage 1: gate/up GEMM + activation) + us2 (stage "
             "2: down GEMM + weighted sum), i.e. the routed-expert grouped GEMM the engine's "
             "moe op costs (in newer tables us1 may also carry the activation quant/sort "
             "kernel, biasing slow by a few us); dtype from (q_dtype_a, q_dtype_w, q_type): "
             "fp8 per_Token/per_Tensor, fp8_block per_1x128, nvfp4 = fp4 x fp4 per_1x32 "
             "(MXFP4), w4a8_mxfp4_mxfp8 = fp8 x fp4, w4a16_mxfp4 = bf16 x fp4, int4_wo = bf16 x "
             "int4 per_1x32 (W4A16), bf16 = No; MXFP8, int8 and other int4 forms dropped; us, us1, us2 finite (us > 0, stages >= 0); err1/err2 "
             "<= 5% on " + "/".join(MOE_ERR_FILTERED) + " only (elsewhere not filtered: " + MOE_ERR_NOTE + "); distribution = uniform (the tuner draws topk ids uniformly at random); "
             "each row written once per partition whose busiest rank runs it "
             "(moe_tp in 1,2,4,8 with inter_size = t x inter_dim; moe_ep in 2,4,8 with "
             "num_experts = e x expert and num_tokens = e x token; kernel_source gives the "
             "original token/inter_dim/expert); rows with expert = E+1 and topk = k+1 are "
             "AITER's fused shared expert and are kept as measured; fastest row per key"
             + (f"; plus AMD's MoE benchmarking run (commit {MOE_BENCH_COMMIT[:10]}, "
                f"{MOE_BENCH_PATH}; ASSUMPTION: its 'mi300' is MI300X, see MOE_BENCH_COMMIT in "
                "calibration/extract_aiter.py), model_dim 7168 with 256/257 experts, fp8_block only: latency = min(best 1-stage "
                "kernel, best stage 1 + best stage 2 of one block_m), quant_time_us left out"
                if device == MOE_BENCH_DEVICE else "")),
             (f"Note: {len(m) // max(len(MOE_TP) + len(MOE_EP) - 1, 1)} measured shapes x "
             f"{len(MOE_TP) + len(MOE_EP) - 1} partitions")),
            ("mla_decode", a, MLA_DECODE_COLS, ",".join(MLA_DECODE_KEY),
             (f"{MLA_README} (no tuned attention table exists): its measured MLA decode runs "
             "of op_tests/test_mla.py on 'MI350' (gfx950, 256 CUs; written for MI355X, the "
             "same silicon: ASSUMPTION, if run on an MI350X its lower clock biases the "
             "compute-limited rows slow), DeepSeek dimensions (kv_lora_rank 512, rope 64), "
             "1 query token, page size 1, every sequence kv_len long, BF16 Q; num_heads = "
             "heads per GPU (nhead of '-n nhead,1'); latency_us = the reported us where "
             "given (return_lse table; 'wall-clock X us' of the bh16 blocks), else test_mla"
             ".py flops / reported TFLOPS with flops = batch x kv_len x heads x (576 + 512) "
             "x 2 (bh64 table); kernel_source = 'asm mla_decode_fwd' (aiter.mla, the ASM "
             "kernel) or 'gluon mla_gluon <regime>' (the Gluon kernel); the FASTEST row per "
             "key (as the NVIDIA tables): Gluon everywhere it was measured, 1.13-1.30x faster "
             "than ASM at the bh64 shapes and 7.7x at batch 1, 10M tokens; ASSUMPTION: a "
             "serving engine that runs the ASM kernel is slower by those factors"),
             (f"Note: {a_all} README measurements -> {len(a)} rows (fastest per key); the README "
              "rounds TFLOPS to 0.1 and us to 0.01")),
            ("attention_prefill", p.reset_index(drop=True), ATTN_PREFILL_COLS,
             ",".join(ATTN_PREFILL_KEY),
             (f"{FMHA_README} (" + ("AITER's only measured attention times on gfx942; no "
              "decode time exists" if device == "MI300X" else "AITER's only measured prefill "
              "attention times on gfx950") + "): its FWD TFLOPS table ('the asm kernel performance of the attention "
              "forwards', BF16, BSHD, batch mode), this device's column; causal rows with "
              "seqlen_q = seqlen_kv only (the engine costs causal prefill without a cached "
              "prefix); isl = seqlen, num_heads = q_nheads, num_kv_heads = kv_nheads (one GPU "
              "runs them all: per-GPU heads), head_dim = hdim (QK and V), attn_dtype = kv_dtype "
              "= bf16; latency_us = flop / TFLOPS with benchmark_mha_fwd.cpp's flop = batch x "
              "q_nheads x 4 x seqlen^2 x hdim / 2 (causal); kernel_source names the kernel the "
              "README section measures (asm fmha_fwd_v3)"),
             (f"Note: {len(p)} rows; the README rounds TFLOPS to 0.01 (a 0.001-0.008 % "
              "latency error); batch 1-8, seqlen 1024-10240, 32/64 query heads: a TP-sliced "
              "model's fewer heads per GPU take the nearest measured heads (labelled "
              "extrapolated)")),
        ):
            if not len(df):
                continue
            sources = df.groupby(["version", "source"]).size().to_dict()
            fname = fam if fam != "mla_decode" or mla_table else MLA_POINTS
            write_table(os.path.join(folder, f"{fname}.csv"), df, cols,
                        header(device, fam, sources, commit, wheel_version, sel, key,
                               note if fname == fam else note + MLA_POINTS_NOTE))
            manifest.append((device, fname, len(df), "aiter",
                             ";".join(sorted(df["version"].unique())),
                             ";".join(sorted(df["source"].unique()))))
    with open(os.path.join(out, "MANIFEST-aiter.csv"), "w", newline="") as f:
        f.write(f"# AITER (github ROCm/aiter {commit}"
                + (f", amd-aiter {wheel_version} wheel" if wheel_version else "")
                + f") extraction manifest; {LICENCE_LINE}\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["device", "family", "rows", "backends", "versions", "source_paths"])
        w.writerows(manifest)
    lic = _git(repo, "show", f"{commit}:LICENSE")
    with open(os.path.join(out, "LICENSE-aiter.txt"), "w") as f:
        f.write("The tables in hardware/measured/MI300X and hardware/measured/MI355X are derived "
                "from the tuned\nconfiguration CSVs of AMD AITER (https://github.com/ROCm/aiter, "
                f"commit {commit}),\nextracted by calibration/extract_aiter.py. AITER's licence "
                "(its LICENSE file at that commit):\n\n")
        f.write(lic)
    return manifest


def check(out):
    """Re-read the written tables: unique keys, finite positive latencies, provenance."""
    for device in sorted(set(DEVICES.values())):
        for fam, key in (("gemm", GEMM_KEY), ("moe", MOE_KEY),
                         ("mla_decode", MLA_DECODE_KEY), (MLA_POINTS, MLA_DECODE_KEY),
                         ("attention_prefill", ATTN_PREFILL_KEY)):
            p = os.path.join(out, device, f"{fam}.csv")
            if not os.path.exists(p):
                continue
            df = pd.read_csv(p, comment="#")
            assert not df.duplicated(key).any(), (p, "duplicate keys")
            dt = "kv_dtype" if fam.startswith(("mla_decode", "attention")) else "dtype"
            v = df["latency_us"].to_numpy(dtype=float)
            assert np.isfinite(v).all() and (v > 0).all(), (p, "latency")
            for c in ("backend", "version", "kernel_source"):
                assert df[c].notna().all(), (p, c)
            print(f"{device} {fam}: {len(df)} rows, dtypes "
                  f"{','.join(sorted(df[dt].unique()))}, latency {v.min():.3g}-"
                  f"{v.max():.4g} us")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", help="git checkout or bare clone of github ROCm/aiter")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--wheel", help="amd-aiter wheel (optional second source)")
    ap.add_argument("--out", default="hardware/measured")
    ap.add_argument("--profile", choices=("compact", "full"), default="compact")
    ap.add_argument("--fp8-proxy", action="store_true",
                    help="write MI300X 'fp8' rows from its fp8_block rows (off: see FP8_PROXY_DEVICES)")
    ap.add_argument("--mla-decode-table", action="store_true",
                    help=f"write MI355X's MLA decode points as the engine-read mla_decode.csv "
                         f"(off: {MLA_POINTS}.csv, reference only; see MLA_POINTS)")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    for row in extract(a.repo, a.rev, a.wheel, a.out, a.profile, proxy=a.fp8_proxy,
                       mla_table=a.mla_decode_table):
        print(*row[:5])
    if a.check:
        check(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
