"""Measured DSA tables (``dsa_decode``, ``dsa_prefill``) and the work of a DSA layer's parts.

Each row of NVIDIA's aiconfigurator DSA tables (``calibration/extract_aiconfigurator_dsa.py``)
is one call of the whole attention module of one layer: the projections (q_a/kv_a with the
indexer's key and weight projections, q_b, the indexer's query projection, o_proj), the
absorbed W_UK/W_UV batched GEMMs, the indexer's FP8 scores over every cached token, the top-k
selection and the sparse MLA core over the selected tokens, at the dimensions of the model it
was measured at (``architecture``: DeepSeek-V3.2 or GLM-5) and ``num_heads`` query heads per
GPU. Its pure roofline (:func:`dsa_module_roofline_s`) is the sum of the rooflines of those
parts, with the work formulas the op graph uses (:func:`dsa_core_work`,
:mod:`inference_factory.kernels.sparse_attention`).

How the engine uses a row's ratio (``engine/attention/dsa.py``): the projections stay GEMMs
costed through the GEMM tables (as every MLA model's are); the DSA-specific operations
(``indexer``, ``topk``, ``attention``) each take their own pure roofline times the module's
measured-over-roofline ratio at the shape. Where the module's time is dominated by its
projections (short contexts, small batches) the ratio is the projections' efficiency; where
it is dominated by the indexer (long contexts) it is the indexer's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..kernels import attention as katt
from ..kernels import ops as kops
from ..kernels import params as kparams
from ..kernels import sparse_attention as ksa
from ..specs import load_model
from .table_families import Family, register
from .table_rooflines import DTYPES, _peak, bmm_roofline_s, gemm_roofline_s

#: architecture of the tables' rows -> the model file holding its dimensions
TABLE_MODELS = {"DeepseekV32ForCausalLM": "DeepSeek-V3.2", "GlmMoeDsaForCausalLM": "GLM-5"}

#: the indexer's key cache and score precision: FP8 in SGLang, vLLM and TRT-LLM whatever
#: the latent cache's (aiconfigurator dsa.rs ``indexer_fp8`` FLOPs, FP8 index-K entries)
INDEXER_PRECISION = "fp8"


@dataclass(frozen=True)
class DsaDims:
    """What a DSA layer's work depends on (config.json fields)."""

    hidden: int
    q_lora: int
    kv_lora: int
    nope: int
    rope: int
    v: int
    index_heads: int
    index_dim: int
    topk: int
    indexer: bool = True          # False: an IndexShare layer reusing another's top-k


def dsa_dims(m, params: dict) -> DsaDims:
    """The :class:`DsaDims` of model ``m`` with DSA parameters ``params``."""
    return DsaDims(m.hidden_size, m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim,
                   m.qk_rope_head_dim, m.head_dim_v, int(params["index_n_heads"]),
                   int(params["index_head_dim"]), int(params["index_topk"]),
                   bool(params.get("indexer", True)))


@functools.lru_cache(maxsize=None)
def table_dims(architecture: str) -> DsaDims:
    """The :class:`DsaDims` of the model a table row of ``architecture`` was measured at."""
    m = load_model(TABLE_MODELS[str(architecture)])
    return dsa_dims(m, dict(m.attention_params))


def dsa_core_work(d: DsaDims, *, seqs, new_tokens, cached_tokens, heads, latent_bytes_per_token,
                  kv_len=None, absorbed=True):
    """FLOPs and HBM bytes of the DSA-specific parts of one layer for ``seqs`` sequences each
    adding ``new_tokens`` after ``cached_tokens``, reading the index keys of ``kv_len``
    tokens (default all of them): {part: (flop, bytes, precision)} for
    ``indexer`` (scores of every query against every cached index key: the keys read once
    per sequence, the FP32 logits written), ``topk`` (the logits read once) and
    ``attention`` (the sparse absorbed MLA core over min(position, k) tokens per query, each
    query gathering its selected latents; the new tokens' latent and index key written).
    A layer without its own indexer (IndexShare) has no ``indexer`` or ``topk`` part and
    writes no index key. ``absorbed`` False: the core in MHA form (prefill: per-head keys and
    values expanded from the latents by ``kv_b``, as MLA's prefill; its traffic the latent
    write only, as there)."""
    kv_len = new_tokens + cached_tokens if kv_len is None else kv_len
    ik = ksa.indexer_k_bytes_per_token(index_head_dim=d.index_dim)
    out = {}
    if d.indexer:
        pairs = seqs * katt.causal_attended_positions(new_tokens=new_tokens,
                                                      cached_tokens=cached_tokens)
        logits = ksa.indexer_logit_bytes(scored_pairs=pairs)
        out["indexer"] = (ksa.indexer_score_flop(scored_pairs=pairs, index_n_heads=d.index_heads,
                                                 index_head_dim=d.index_dim),
                          seqs * kv_len * ik + logits + seqs * new_tokens * ik,
                          INDEXER_PRECISION)
        out["topk"] = (0.0, logits, INDEXER_PRECISION)
    # each query attends min(position, k) tokens: the sliding-window sum with w = k
    sparse = seqs * katt.windowed_attended_positions(new_tokens=new_tokens,
                                                     cached_tokens=cached_tokens,
                                                     window_tokens=d.topk)
    write = katt.kv_write_bytes(new_tokens=seqs * new_tokens,
                                kv_bytes_per_token=latent_bytes_per_token)
    if absorbed:
        out["attention"] = (katt.mla_absorbed_core_flop(attended_positions=sparse,
                                                        n_q_heads=heads, kv_lora_rank=d.kv_lora,
                                                        qk_rope_head_dim=d.rope),
                            ksa.sparse_gather_bytes(attended_positions=sparse,
                                                    kv_bytes_per_token=latent_bytes_per_token)
                            + write, "bf16")
    else:
        out["attention"] = (katt.attention_core_flop(attended_positions=sparse, n_q_heads=heads,
                                                     head_dim_qk=d.nope + d.rope,
                                                     head_dim_v=d.v), write, "bf16")
    return out


def part_roofline_s(hw, work) -> float:
    """Pure roofline of one part ((flop, bytes, precision) of :func:`dsa_core_work`)."""
    flop, nbytes, prec = work
    return kops.pure_roofline_s(flop=flop, bytes_moved=nbytes, peak_flop_per_s=_peak(hw, prec),
                                peak_bytes_per_s=hw.hbm_bw_bytes_per_s)


def table_latent_bytes(kv_dtype: str, d: DsaDims) -> float:
    """Latent bytes per token of a table row: FP8 latent with its four FP32 scales and a
    BF16 RoPE key (vLLM ``fp8_ds_mla``, 656 B at 512 + 64), or all BF16."""
    fp8 = str(kv_dtype) == "fp8"
    return kparams.mla_kv_bytes_per_token_per_layer(
        kv_lora_rank=d.kv_lora, qk_rope_head_dim=d.rope, latent_bytes_per_elem=1.0 if fp8 else 2.0,
        rope_bytes_per_elem=2.0, scale_bytes_per_token=4.0 * d.kv_lora / 128.0 if fp8 else 0.0)


def dsa_module_roofline_s(hw, architecture, kv_dtype, gemm_dtype, heads, batch, new_tokens,
                          cached_tokens, dims: DsaDims | None = None, absorbed: bool = True):
    """Pure roofline of one DSA attention module call: the sum of its parts' rooflines
    (projection GEMMs and the absorbed BMMs, or in MHA form the ``kv_b`` expansion, as
    :mod:`.table_rooflines` prices table rows; the DSA parts by :func:`dsa_core_work`)."""
    d = dims or table_dims(str(architecture))
    gd = str(gemm_dtype)
    bmm = "fp8" if DTYPES.get(gd, ("bf16",))[0] == "fp8" else "bf16"
    T = batch * new_tokens
    qk = d.nope + d.rope
    t = (gemm_roofline_s(hw, gd, T, d.q_lora + d.kv_lora + d.rope + d.index_dim + d.index_heads,
                         d.hidden)
         + gemm_roofline_s(hw, gd, T, heads * qk, d.q_lora)
         + gemm_roofline_s(hw, gd, T, heads * d.v, d.hidden))
    if absorbed:
        t = t + (bmm_roofline_s(hw, bmm, T, heads, d.nope, d.kv_lora)
                 + bmm_roofline_s(hw, bmm, T, heads, d.kv_lora, d.v))
    else:
        t = t + gemm_roofline_s(hw, gd, batch * (new_tokens + cached_tokens),
                                heads * (d.nope + d.v), d.kv_lora)
    if d.indexer:
        t = t + gemm_roofline_s(hw, gd, T, d.index_heads * d.index_dim, d.q_lora)
    work = dsa_core_work(d, seqs=batch, new_tokens=new_tokens, cached_tokens=cached_tokens,
                         heads=heads, latent_bytes_per_token=table_latent_bytes(kv_dtype, d),
                         absorbed=absorbed)
    for part in work.values():
        t = t + part_roofline_s(hw, part)
    return t


def _decode_row(hw, arch, kv_dtype, gemm_dtype, heads, batch, kv_len):
    return dsa_module_roofline_s(hw, arch, kv_dtype, gemm_dtype, heads, batch, 1.0,
                                 kv_len - 1.0)


def _prefill_row(hw, arch, kv_dtype, gemm_dtype, heads, batch, isl):
    return dsa_module_roofline_s(hw, arch, kv_dtype, gemm_dtype, heads, batch, isl, 0.0,
                                 absorbed=False)


_KEYS = ("architecture", "kv_dtype", "gemm_dtype")
register(
    (Family("dsa_decode", _KEYS, ("num_heads",), ("batch_size", "kv_len"), "latency_us",
            _decode_row, _KEYS + ("num_heads", "batch_size", "kv_len")),
     Family("dsa_prefill", _KEYS, ("num_heads",), ("batch_size", "isl"), "latency_us",
            _prefill_row, _KEYS + ("num_heads", "batch_size", "isl"))),
    {"dsa_decode": ("dsa_decode.csv", None), "dsa_prefill": ("dsa_prefill.csv", None)})
