"""Measured MSA tables (``msa_decode``, ``msa_prefill``) and the work of a block-sparse
layer's own parts (:mod:`.attention.block_sparse`).

Each row of NVIDIA's aiconfigurator MSA tables (``calibration/extract_aiconfigurator_msa.py``,
vLLM 0.24.0 rows) is one CUDA-graph call of the whole attention module of one MiniMax-M3
sparse layer: the fused QKV + index projection, the fused QK norm + RoPE + cache insert, the
indexer's scores and top-k block selection, the block-sparse GQA attend and ``o_proj``, at
``num_heads`` query heads per GPU (KV and index query heads ``max(1, num_heads / 16)``, one
BF16 index key head). Its pure roofline (:func:`msa_module_roofline_s`) is the sum of the
rooflines of those parts, with the work formulas the op graph uses (:func:`msa_core_work`,
:mod:`inference_factory.kernels.block_sparse`); the small kernels (norm, RoPE, insert, top-k)
have no roofline term, as in the other module tables.

How the engine uses a row's ratio (as the DSA tables, :mod:`.table_families_dsa`): the
projections stay GEMMs costed through the GEMM tables; the block-sparse operations
(``indexer``, ``attention``) each take their own pure roofline times the module's
measured-over-roofline ratio at the shape. Where the module is dominated by its projections
and small kernels (short contexts, small batches) the ratio is theirs; where it is dominated
by the indexer's read of every cached index key (long contexts) it is the indexer's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import units
from ..kernels import attention as katt
from ..kernels import block_sparse as kbs
from ..kernels import ops as kops
from ..kernels import params as kparams
from ..specs import load_model
from .table_families import Family, register
from .table_rooflines import _peak, gemm_roofline_s

#: architecture of the tables' rows -> the model file holding its dimensions
TABLE_MODELS = {"MiniMaxM3ForCausalLM": "MiniMax-M3"}


@dataclass(frozen=True)
class MsaDims:
    """What a block-sparse layer's work depends on (config.json fields)."""

    hidden: int
    q_heads: int
    kv_heads: int
    head_dim_qk: int
    head_dim_v: int
    index_heads: int
    index_k_heads: int
    index_dim: int
    topk_tokens: float            # selected blocks x tokens per block
    index_bytes_per_elem: float


def msa_dims(m, params: dict) -> MsaDims:
    """The :class:`MsaDims` of model ``m`` with block-sparse parameters ``params``."""
    return MsaDims(m.hidden_size, m.n_q_heads, m.n_kv_heads, m.head_dim_qk, m.head_dim_v,
                   int(params["index_heads"]), int(params["index_k_heads"]),
                   int(params["index_head_dim"]),
                   float(params["topk_blocks"] * params["block_tokens"]),
                   params["index_cache_bits"] / 8.0)


@functools.lru_cache(maxsize=None)
def table_dims(architecture: str) -> MsaDims:
    """The :class:`MsaDims` of the model a table row of ``architecture`` was measured at."""
    m = load_model(TABLE_MODELS[str(architecture)])
    return msa_dims(m, dict(m.attention_params))


def shard_heads(d: MsaDims, heads):
    """(KV heads, index query heads) on a GPU holding ``heads`` query heads: each split like
    the KV heads, one at least (replicated beyond n_kv GPUs; vLLM
    ``MinimaxM3QKVParallelLinearWithIndexer``)."""
    return (np.maximum(heads * d.kv_heads / d.q_heads, 1.0),
            np.maximum(heads * d.index_heads / d.q_heads, 1.0))


def index_bytes_per_token(d: MsaDims) -> float:
    """Cached index-key bytes per token and layer (replicated on every GPU)."""
    return kbs.block_sparse_index_bytes_per_token_per_layer(
        index_k_heads=d.index_k_heads, index_head_dim=d.index_dim,
        index_bytes_per_elem=d.index_bytes_per_elem)


def msa_core_work(d: MsaDims, *, seqs, new_tokens, cached_tokens, read_tokens, heads,
                  kv_bytes_per_token):
    """FLOPs and HBM bytes of the block-sparse parts of one layer on one GPU for ``seqs``
    sequences each adding ``new_tokens`` after ``cached_tokens`` and reading ``read_tokens``
    cached tokens (decode: the whole context; prefill: the cached prefix), at ``heads`` query
    heads and ``kv_bytes_per_token`` K and V bytes per token on the GPU:
    {part: (flop, bytes, precision)} for ``indexer`` (index query heads against every cached
    index key, causally: the keys read once per sequence, the new keys written) and
    ``attention`` (GQA over min(position, n b) tokens per query, reading the selected K and V,
    the new tokens' written)."""
    _, idx_heads = shard_heads(d, heads)
    idxb = index_bytes_per_token(d)
    tokens = seqs * new_tokens
    scored = katt.causal_attended_positions(new_tokens=new_tokens, cached_tokens=cached_tokens)
    attended = katt.windowed_attended_positions(new_tokens=new_tokens,
                                                cached_tokens=cached_tokens,
                                                window_tokens=d.topk_tokens)
    read_idx = katt.kv_read_bytes(sequences=seqs, kv_len_tokens=read_tokens,
                                  kv_bytes_per_token_full=idxb, kv_bytes_per_token_window=0.0,
                                  window_tokens=0.0)
    read_kv = katt.kv_read_bytes(sequences=seqs, kv_len_tokens=read_tokens,
                                 kv_bytes_per_token_full=0.0,
                                 kv_bytes_per_token_window=kv_bytes_per_token,
                                 window_tokens=d.topk_tokens)
    return {
        "indexer": (seqs * kbs.block_sparse_index_flop(scored_positions=scored,
                                                       n_index_heads=idx_heads,
                                                       index_head_dim=d.index_dim),
                    read_idx + katt.kv_write_bytes(new_tokens=tokens, kv_bytes_per_token=idxb),
                    "bf16"),
        "attention": (seqs * katt.attention_core_flop(attended_positions=attended,
                                                      n_q_heads=heads, head_dim_qk=d.head_dim_qk,
                                                      head_dim_v=d.head_dim_v),
                      read_kv + katt.kv_write_bytes(new_tokens=tokens,
                                                    kv_bytes_per_token=kv_bytes_per_token),
                      "bf16"),
    }


def qkv_width(d: MsaDims, heads) -> float:
    """Output width of the fused QKV + index projection on a GPU with ``heads`` query heads:
    Q, the GPU's K and V heads, its index query heads and the replicated index key heads."""
    kvh, idx_heads = shard_heads(d, heads)
    return heads * d.head_dim_qk + kvh * (d.head_dim_qk + d.head_dim_v) \
        + (idx_heads + d.index_k_heads) * d.index_dim


def part_roofline_s(hw, work) -> float:
    """Pure roofline of one part ((flop, bytes, precision) of :func:`msa_core_work`)."""
    flop, nbytes, prec = work
    return kops.pure_roofline_s(flop=flop, bytes_moved=nbytes, peak_flop_per_s=_peak(hw, prec),
                                peak_bytes_per_s=hw.hbm_bw_bytes_per_s)


def table_kv_bytes(d: MsaDims, kv_dtype: str, heads) -> float:
    """K and V bytes per token of a table row's GPU (its KV heads at the row's KV dtype)."""
    kvh, _ = shard_heads(d, heads)
    return kparams.gqa_kv_bytes_per_token_per_layer(
        n_kv_heads=kvh, head_dim_k=d.head_dim_qk, head_dim_v=d.head_dim_v,
        kv_bytes_per_elem=units.BYTES_PER_ELEMENT["fp8" if str(kv_dtype) == "fp8" else "bf16"])


def msa_module_roofline_s(hw, architecture, kv_dtype, gemm_dtype, heads, batch, new_tokens,
                          cached_tokens, read_tokens):
    """Pure roofline of one MSA module call: the fused QKV + index projection and ``o_proj``
    (as :mod:`.table_rooflines` prices GEMM rows) plus :func:`msa_core_work`'s parts."""
    d = table_dims(str(architecture))
    gd = str(gemm_dtype)
    T = batch * new_tokens
    t = (gemm_roofline_s(hw, gd, T, qkv_width(d, heads), d.hidden)
         + gemm_roofline_s(hw, gd, T, d.hidden, heads * d.head_dim_v))
    work = msa_core_work(d, seqs=batch, new_tokens=new_tokens, cached_tokens=cached_tokens,
                         read_tokens=read_tokens, heads=heads,
                         kv_bytes_per_token=table_kv_bytes(d, kv_dtype, heads))
    for part in work.values():
        t = t + part_roofline_s(hw, part)
    return t


def _decode_row(hw, arch, kv_dtype, gemm_dtype, heads, batch, kv_len):
    return msa_module_roofline_s(hw, arch, kv_dtype, gemm_dtype, heads, batch, 1.0,
                                 kv_len - 1.0, kv_len)


def _prefill_row(hw, arch, kv_dtype, gemm_dtype, heads, batch, isl):
    return msa_module_roofline_s(hw, arch, kv_dtype, gemm_dtype, heads, batch, isl, 0.0, 0.0)


_KEYS = ("architecture", "kv_dtype", "gemm_dtype")
register(
    (Family("msa_decode", _KEYS, ("num_heads",), ("batch_size", "kv_len"), "latency_us",
            _decode_row, _KEYS + ("num_heads", "batch_size", "kv_len")),
     Family("msa_prefill", _KEYS, ("num_heads",), ("batch_size", "isl"), "latency_us",
            _prefill_row, _KEYS + ("num_heads", "batch_size", "isl"))),
    {"msa_decode": ("msa_decode.csv", None), "msa_prefill": ("msa_prefill.csv", None)})
