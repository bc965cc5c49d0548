#!/usr/bin/env python3
"""Extract NVIDIA's measured MSA (MiniMax-M3 block-sparse attention) module tables from
aiconfigurator.

Maintainer tool, the block-sparse companion of ``extract_aiconfigurator_dsa.py`` (its git
reader and log-grid thinning imported, ``extract_aiconfigurator.py``'s selection and CSV
layout): read from a git checkout or bare mirror of ai-dynamo/aiconfigurator at a stated
commit,

    python calibration/extract_aiconfigurator_msa.py /path/to/aiconfigurator.git \
        [--commit 095f58a5] [--out hardware/measured]

It writes ``<DEVICE>/msa_decode.csv`` and ``<DEVICE>/msa_prefill.csv`` for the devices of
``extract_aiconfigurator.SYSTEMS`` that have MSA tables (B200, B300, GB200, GB300, H100,
H200) and replaces those two families' lines of ``MANIFEST.csv``; no other file is touched.

What a row measures (aiconfigurator ``collector/vllm/collect_msa_module.py`` at vLLM 0.24.0):
one CUDA-graph-captured call of vLLM's own ``MiniMaxM3SparseAttention.forward`` for one layer
with dummy weights: the fused QKV + index projection (``MinimaxM3QKVParallelLinearWith
Indexer``), the fused per-head QK norm + partial RoPE + paged KV / index-key insert, the
indexer's block scores and top-k block selection, the block-sparse GQA attend over the
selected blocks and ``o_proj``. ``num_heads`` query heads per GPU (the TP shard emulated in
the config), ``max(1, num_heads / 16)`` KV heads and as many index query heads, one BF16
index key head. Generation rows: one new token per sequence after ``step`` cached tokens
(``kv_len = isl + step``, isl = 1; the 2026-08-13 re-key makes that the measured total).
Context rows: ``isl`` new tokens per sequence; only rows without a cached prefix (step 0).

Which engine (the ``collection_meta.yaml`` notes beside each table, commit 095f58a5): vLLM
0.24.0 on every device. Its tables are complete with zero failures, CUDA-graph captured, with
the framework's own kernel dispatch (``MiniMaxM3SparseMSAImpl``, the fmha_sm100 sparse
kernel, on the SM100 family; ``MiniMaxM3SparseTritonImpl`` on SM90, vLLM's serving path
there), and it is the fastest of the three engines at 92-100 % of the shapes it shares
with SGLang's tables (median ln(vLLM / SGLang) -0.13 to -0.24 in generation, -0.5 to -1.3
in context). Left out: TRT-LLM 1.3.0rc23 (its notes: generation rows include a copy of the
whole index-key pool per forward, 92 % of the b=256 kv=65536 point and scaling with the
collector's pool allocation; context rows are eager, host-bound and inflated by CPU
contention, ~2x solo reruns); SGLang 0.5.16 (on B200/B300/GB200/GB300 the image lacks the
fmha_sm100 wheel, so its rows are the Triton fallback, ~5.7 % of BF16 peak in prefill; on
H100/H200 its Triton path is slower than vLLM's at 96-100 % of shared shapes). Mixing
engines' rows would also put two kernels' curves in one interpolation grid.

Size (about 0.1 MB per device): query heads per GPU 4..64 (MiniMax-M3's 64 over TP 1..16;
the 1-2 head rows reach no TP of the model and the 128-head rows exceed its head count),
BF16 and block-FP8 GEMMs (the checkpoint ships BF16; the NVFP4 rows of the SM100 devices
are not extracted, as for DSA), BF16 and FP8 KV, and the size axes on a log grid
(:data:`THIN`).
"""

from __future__ import annotations

import os
import sys

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extract_aiconfigurator as X  # noqa: E402
import extract_aiconfigurator_dsa as D  # noqa: E402

FAMILIES = ("msa_decode", "msa_prefill")
#: the one engine whose rows are kept (see the docstring)
BACKENDS = ("vllm",)
#: size axes on a log grid (factor, tolerance ratio), as extract_aiconfigurator_dsa.THIN
THIN = {"msa_decode": {"batch_size": (2, 1.0), "kv_len": (2, 1.0)},
        "msa_prefill": {"batch_size": (4, 1.0), "isl": (2, 1.0)}}
HEADS = (4, 64)
GEMM_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8_block"}
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}

WHAT = ("whole MSA attention module of one MiniMax-M3 sparse layer (vLLM 0.24.0 "
        "MiniMaxM3SparseAttention.forward, CUDA graph: fused QKV + index projection, fused QK "
        "norm + RoPE + KV/index-key insert, indexer block scores + top-k, block-sparse GQA "
        "attend, o_proj); num_heads = query heads per GPU (KV and index heads "
        "max(1, num_heads / 16)); ")


def _common(df: pd.DataFrame) -> pd.DataFrame:
    df = df[(df["num_heads"] >= HEADS[0]) & (df["num_heads"] <= HEADS[1])].copy()
    df["kv_dtype"] = df["kv_cache_dtype"].map(KV_DTYPES)
    df["gemm_dtype"] = df["gemm_type"].map(GEMM_DTYPES)
    df = df[df["kv_dtype"].notna() & df["gemm_dtype"].notna()].copy()
    df["latency_us"] = df["latency"] * 1000.0
    return df


def fam_msa_decode(src, system):
    df = X.load_all(src, system, "msa", "msa_generation_module_perf.parquet", BACKENDS)
    if df is None:
        return None
    paths = set(df["_src"])
    assert set(df["isl"]) == {1}, sorted(set(df["isl"]))
    df = _common(df)
    df["kv_len"] = df["isl"] + df["step"]
    key = ["architecture", "kv_dtype", "gemm_dtype", "num_heads", "batch_size", "kv_len"]
    df = X.select(df, key)
    return X.finish("msa_decode", df, key, ["latency_us"], paths, X.UNITS_MS,
                    WHAT + "decode: 1 new token per sequence, kv_len = isl + step (isl == 1); "
                    "vLLM 0.24.0 rows only (extract_aiconfigurator_msa.py says why)",
                    int_cols=("num_heads", "batch_size", "kv_len"))


def fam_msa_prefill(src, system):
    df = X.load_all(src, system, "msa", "msa_context_module_perf.parquet", BACKENDS)
    if df is None:
        return None
    paths = set(df["_src"])
    df = _common(df[df["step"] == 0])
    key = ["architecture", "kv_dtype", "gemm_dtype", "num_heads", "batch_size", "isl"]
    df = X.select(df, key)
    return X.finish("msa_prefill", df, key, ["latency_us"], paths, X.UNITS_MS,
                    WHAT + "prefill of isl new tokens per sequence without a cached prefix "
                    "(step == 0 rows only); vLLM 0.24.0 rows only (extract_aiconfigurator_msa.py "
                    "says why)", int_cols=("num_heads", "batch_size", "isl"))


def main(argv=None):
    D.extract(argv, __doc__, (fam_msa_decode, fam_msa_prefill), THIN, FAMILIES)


if __name__ == "__main__":
    sys.exit(main())
