"""Measured-table families of DeepSeek-V4 (:mod:`.attention.compressed`, :mod:`.hyper_connections`):
the whole compressed-attention module per layer and phase (``compressed_module_decode``,
``compressed_module_prefill``) and the mHC pre + post steps per layer (``mhc``), with the
pure roofline of one of their rows.

Rows (``hardware/measured/<device>/dsv4_attention.csv`` and ``mhc.csv``, extracted from
NVIDIA's aiconfigurator repository by ``calibration/extract_aiconfigurator_v4.py``):

- a module row times ONE layer's ``self_attn`` on one rank: the query, KV, compressor and
  indexer projections, the q/KV norms and RoPE, the window-ring and compressed-cache store,
  the compressor's pooling, the CSA indexer's scores and top-k, the FlashMLA kernel and the
  output projections (TP collectives excluded), for ``batch_size`` sequences, with
  ``num_heads`` rank-local heads of a model of ``n_heads``; decode rows add one token after
  ``kv_len``, prefill rows ``isl`` tokens after none. What the table covers is what
  :func:`module_roofline_s` prices: the compressed kind's split operations (``q_a_kv``,
  ``q_b``, ``indexer_q``, ``attention``, ``indexer``, ``o_a``, ``o_b``) plus the small
  kernels ``configs/realism.toml`` [other_kernels] ``compressed_in_module`` counts;
- an mHC row times one layer's pre and post steps (both sites) over ``num_tokens`` tokens
  (:mod:`inference_factory.kernels.hyper_connections`); the RMSNorms are outside it.

The roofline of a module is the sum of its kernels' pure rooflines (each kernel is bound by
its own FLOPs or bytes; they run one after another), with the same work formulas as the
split operations (:mod:`inference_factory.kernels.compressed_attention`, the GEMM rows'
:func:`.table_rooflines.gemm_roofline_s`).
"""

from __future__ import annotations

import numpy as np

from ..kernels import compressed_attention as kca
from ..kernels import hyper_connections as khc
from ..kernels import ops as kops
from .table_families import Family, register
from .table_rooflines import _peak, gemm_roofline_s

#: the tables' attention math (``mla_dtype`` bfloat16) and indexer scores (FP8 MQA logits)
TABLE_ATTENTION_PRECISION, INDEXER_PRECISION = "bf16", "fp8"


def mhc_roofline_s(hw, tokens, hidden_size, hc_mult, sinkhorn_iters):
    """Pure roofline of one layer's mHC pre and post steps over ``tokens`` tokens (BF16
    peak, HBM bandwidth); the shape (hidden size, streams, iterations) per row or scalar."""
    arrs = np.broadcast_arrays(*[np.atleast_1d(np.asarray(c, dtype=float))
                                 for c in (tokens, hidden_size, hc_mult, sinkhorn_iters)])
    out = np.empty(arrs[0].shape)
    shape = np.stack(arrs[1:], axis=-1)
    for h, n, s in np.unique(shape.reshape(-1, 3), axis=0):
        rows = (shape == (h, n, s)).all(axis=-1)
        t = arrs[0][rows]
        out[rows] = kops.pure_roofline_s(
            flop=khc.mhc_flop(tokens=t, hidden_size=int(h), hc_mult=int(n),
                              sinkhorn_iters=int(s)),
            bytes_moved=khc.mhc_bytes(tokens=t, hidden_size=int(h), hc_mult=int(n)),
            peak_flop_per_s=_peak(hw, "bf16"), peak_bytes_per_s=hw.hbm_bw_bytes_per_s)
    return out if np.ndim(tokens) else float(out.reshape(-1)[0])


def module_roofline_s(hw, *, phase, gemm_dtype, kv_fp8, ratio, indexer, hidden, n_heads,
                      heads, head_dim, rope_head_dim, q_lora, o_lora, o_groups, index_heads,
                      index_dim, topk, window, batch, new_tokens, cached_tokens=0.0,
                      kv_len=0.0, attention_precision=TABLE_ATTENTION_PRECISION,
                      part="all"):
    """Pure roofline of one layer's compressed-attention module on one rank: ``batch``
    sequences of ``new_tokens`` queries, after ``kv_len`` cached tokens (decode) or
    ``cached_tokens`` (prefill); ``heads`` of the model's ``n_heads`` on this rank (and
    ``o_groups x heads / n_heads`` output groups). ``part`` "in" is the projections from the
    hidden state (query latent, KV, compressors, indexer weights; the query and indexer-query
    up-projections), "out" the attention, the indexer scores and the output projections,
    "all" both."""
    T = batch * new_tokens
    r, idx = int(ratio), bool(indexer)
    topk = topk if idx else 0
    inh, ihd = (index_heads, index_dim) if idx else (0, 0)
    entry = kca.kv_entry_bytes(head_dim=head_dim, rope_head_dim=rope_head_dim, fp8=kv_fp8)
    ientry = kca.indexer_entry_bytes(index_head_dim=ihd) if idx else 0.0
    down = kca.down_projection_width(q_lora_rank=q_lora, head_dim=head_dim, ratio=r,
                                     has_indexer=idx, index_n_heads=inh, index_head_dim=ihd)
    t_in = (gemm_roofline_s(hw, gemm_dtype, T, down, hidden)
            + gemm_roofline_s(hw, gemm_dtype, T, heads * head_dim, q_lora)
            + (gemm_roofline_s(hw, gemm_dtype, T, inh * ihd, q_lora) if idx else 0.0))
    if part == "in":
        return t_in
    write = T * entry + (T * (entry + ientry) / r if r else 0.0)
    if phase == "decode":
        read = kca.decode_attended_entries(kv_len_tokens=kv_len, ratio=r, window_tokens=window,
                                           top_k=topk)
        att, kv_bytes = new_tokens * read, batch * read * entry
        entries = kca.compressed_entries(tokens=kv_len, ratio=r)
        scored, idx_bytes = new_tokens * entries, batch * entries * ientry
    else:
        att = kca.prefill_attended_entries(new_tokens=new_tokens, cached_tokens=cached_tokens,
                                           ratio=r, window_tokens=window, top_k=topk)
        scored = kca.prefill_attended_entries(new_tokens=new_tokens, cached_tokens=cached_tokens,
                                              ratio=r, window_tokens=0, top_k=0)
        kv_bytes, idx_bytes = 0.0, 0.0
    bw = hw.hbm_bw_bytes_per_s
    t_att = kops.pure_roofline_s(
        flop=batch * kca.attention_core_flop(attended_entries=att, n_q_heads=heads,
                                             head_dim=head_dim),
        bytes_moved=kv_bytes + write, peak_flop_per_s=_peak(hw, attention_precision),
        peak_bytes_per_s=bw)
    t_idx = kops.pure_roofline_s(
        flop=batch * kca.compressed_indexer_score_flop(query_tokens=1.0, entries=scored,
                                                       index_n_heads=inh, index_head_dim=ihd),
        bytes_moved=idx_bytes, peak_flop_per_s=_peak(hw, INDEXER_PRECISION),
        peak_bytes_per_s=bw) if idx else 0.0
    og = o_groups * heads / n_heads
    t_out = (t_att + t_idx
             + gemm_roofline_s(hw, "bf16", T, og * o_lora, n_heads * head_dim / o_groups)
             + gemm_roofline_s(hw, gemm_dtype, T, hidden, og * o_lora))
    return t_out if part == "out" else t_in + t_out


#: the table's shape columns, in the order :func:`_module_rows` takes them
_DIMS = ("compress_ratio", "indexer", "hidden_size", "n_heads", "num_heads", "head_dim",
         "rope_head_dim", "q_lora_rank", "o_lora_rank", "o_groups", "index_n_heads",
         "index_head_dim", "index_topk", "window")


def _module_rows(phase):
    def roofline(hw, gemm_type, kv_dtype, *cols):
        arrs = np.broadcast_arrays(*[np.atleast_1d(np.asarray(c, dtype=float)) for c in cols])
        dims, batch, length = np.stack(arrs[:-2], axis=1), arrs[-2], arrs[-1]
        out = np.empty(batch.shape)
        for d in np.unique(dims, axis=0):       # one model and ratio at a time
            rows = (dims == d).all(axis=1)
            kw = dict(zip(("ratio", "indexer", "hidden", "n_heads", "heads", "head_dim",
                           "rope_head_dim", "q_lora", "o_lora", "o_groups", "index_heads",
                           "index_dim", "topk", "window"), d))
            kw.update(phase=phase, gemm_dtype=gemm_type, kv_fp8=kv_dtype == "fp8",
                      batch=batch[rows])
            if phase == "decode":
                kw.update(new_tokens=1.0, kv_len=length[rows])
            else:
                kw.update(new_tokens=length[rows])
            out[rows] = module_roofline_s(hw, **kw)
        return out
    return roofline


_EXACT = ("compress_ratio", "gemm_type", "kv_dtype")
_NEAR = ("hidden_size", "num_heads")

register(
    [Family("mhc", ("hc_mult", "sinkhorn_iters"), ("hidden_size",), ("num_tokens",),
            "latency_us", mhc_roofline_s,
            ("num_tokens", "hidden_size", "hc_mult", "sinkhorn_iters"))]
    + [Family(f"compressed_module_{phase}", _EXACT, _NEAR,
              ("batch_size", "kv_len" if phase == "decode" else "isl"), "latency_us",
              _module_rows(phase), ("gemm_type", "kv_dtype") + _DIMS
              + ("batch_size", "kv_len" if phase == "decode" else "isl"))
       for phase in ("decode", "prefill")],
    {"mhc": ("mhc.csv", None),
     **{f"compressed_module_{phase}": ("dsv4_attention.csv", ("phase", phase))
        for phase in ("decode", "prefill")}})
