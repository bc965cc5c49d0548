"""One layer as a list of named operations.

:func:`layer_ops` describes one forward pass of a model (main layers or one MTP module) on
one GPU as operations: each with its FLOPs and HBM bytes per call (vectorized over the grid),
its shape (for the measured tables), the stream it runs on (compute or communication), its
stage in the two-micro-batch pipeline, and how many times a pass calls it (layers). Costing
is :mod:`.cost`; the schedule that combines costs into a step is :mod:`.schedule`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import units
from ..kernels import attention as katt
from ..kernels import moe as kmoe
from ..kernels import ops as kops
from . import grid as G
from . import measured as M
from .geometry import Geom, Layers, compute_precision


@dataclass
class Op:
    """One operation of a pass. ``flop``/``hbm_bytes`` are per call and per micro-batch."""

    name: str
    stream: str                  # "compute" | "comm"
    stage: str                   # pipeline stage: attn0, attn1, shared, mlp, dispatch, combine,
    #                              tp_attn, tp_ffn, head
    count: float                 # calls per pass
    flop: Any = 0.0
    hbm_bytes: Any = 0.0
    precision: str = "bf16"      # tensor-core rate of the roofline
    rate: str = "gemm"           # realism class of the roofline: gemm | attention | moe | other
    m_tokens: Any = 1.0          # GEMM M (small-M tile efficiency of the roofline model)
    family: str = ""             # measured-table family ("" = roofline only)
    keys: dict = field(default_factory=dict)     # exact keys of the family
    nearest: dict = field(default_factory=dict)  # nearest-matched keys
    fixed: dict = field(default_factory=dict)    # axes fixed for this block
    coords: tuple = ()           # varying axes (arrays), in the family's axis order
    pure_fn: Any = None          # pure roofline as a function of ``coords`` (table formula)
    params: dict = field(default_factory=dict)   # what the cost needs beyond the above
    #                                              (link model, kernel count, mean load)
    fallback: tuple = ()         # (family, keys, nearest) tried when ``family`` has no rows
    roof_mode: str = "separable"  # what pure_fn depends on (grid.interpolate_time)
    pure_key: Any = None         # what pure_fn is a function of besides ``coords`` (hashable,
    #                              its first item the hardware spec): its values at a table's
    #                              nodes are then computed once (Curve.time_s)
    source_cap: int = 3          # best source label the op may carry (grid.SOURCES; a
    #                              substitute dtype's rows: extrapolated)


def gemm_dtype(fmt: str, hw=None) -> str:
    """Measured-table dtype of a GEMM whose weights are stored in scaling format ``fmt``
    (``ModelSpec.quant_format``): FP8 per-tensor (``fp8``) or 128-block (``fp8_block``,
    DeepGEMM), NVFP4, and MXFP4 run as MXFP4 x MXFP8 kernels where the device has FP8 tensor
    cores (else MXFP4 x BF16); 16-bit weights read the BF16 tables."""
    if fmt == "mxfp4":
        # with FP4 tensor cores MXFP4 x MXFP8 (Blackwell); without, weight-only MXFP4 x BF16
        return ("w4a8_mxfp4_mxfp8" if hw is None or "fp4" in hw.dense_flop_per_s
                else "w4a16_mxfp4")
    return fmt if fmt in ("fp8", "fp8_block", "nvfp4") else "bf16"


#: Measured dtype tried where a family lacks a format's own rows: the same tensor-core
#: precision in the format the tables hold (the dense GEMM tables have no MXFP4 rows).
#: ASSUMPTION: MXFP4 and NVFP4 GEMMs run at one FP4 tensor-core rate (the same Blackwell
#: FP4 peak for both in NVIDIA's B200 datasheet); NVFP4's finer scales (one per 16 against
#: one per 32) read slightly more bytes, so the substitute is a little pessimistic.
SUBSTITUTE_DTYPE = {"w4a8_mxfp4_mxfp8": "nvfp4"}


def _gemm(g: Geom, name, stage, count, m, n, k, prec):
    dtype = gemm_dtype(g.m.quant_format(prec), g.hw) if prec == g.wprec else gemm_dtype(prec)
    dtype, cap = _table_dtype(g, "gemm", dtype)
    b = units.BYTES_PER_ELEMENT[prec]          # weights read as stored; math at `comp`
    comp = compute_precision(g.hw, prec) or prec
    # HBM traffic is accounted as the weights (the hand roofline's convention: activations
    # of a GEMM are small next to its weights in decode, and prefill is compute-bound); the
    # measured-table reference roofline (pure_fn) also counts activations, see kernels.ops
    return Op(name, "compute", stage, count,
              flop=kops.gemm_flop(m=m, n=n, k=k),
              hbm_bytes=kops.gemm_bytes(m=0.0, n=n, k=k, input_bytes=0.0, weight_bytes=b,
                                        output_bytes=0.0),
              precision=comp, rate="gemm", m_tokens=m, family="gemm", keys={"dtype": dtype},
              fixed={"n": float(n), "k": float(k)}, coords=(m,),
              pure_fn=lambda m_: M.gemm_roofline_s(g.hw, dtype, m_, n, k),
              pure_key=(g.hw, "gemm", dtype, float(n), float(k)), source_cap=cap)


def _table_dtype(g: Geom, family: str, dtype: str) -> tuple[str, int]:
    """The dtype whose rows cost an op of ``family``, and the best source label it may
    carry: ``dtype`` itself, or where the device's table lacks it its
    :data:`SUBSTITUTE_DTYPE` (labelled extrapolated at best)."""
    sub = SUBSTITUTE_DTYPE.get(dtype)
    if sub is None or not g.rl.measured:
        return dtype, G.MEASURED
    tabs = M.tables_for(g.hw)
    if tabs is None or not tabs.has(family) or tabs.curve(family, {"dtype": dtype}, {}) is not None:
        return dtype, G.MEASURED
    return sub, G.EXTRAPOLATED


def _attention_mode(per_point_parameter) -> str:
    """Attention rooflines are linear in the sequences; they depend on the coordinates only
    where their other parameter (draft tokens, the new share of a prompt) is one number."""
    return "separable" if np.ndim(per_point_parameter) == 0 else "linear_first"


def _bmm_fn(hw, dtype, heads, k_dim, n_dim):
    return lambda t_: M.bmm_roofline_s(hw, dtype, t_, heads, k_dim, n_dim)


def _prefill_fn(roofline, head, new_tokens, cached_tokens, **kw):
    """Prefill attention roofline as a function of (prompts, total length S), keeping the
    point's split of S into new and cached tokens."""
    f_new = new_tokens / (new_tokens + cached_tokens)
    return lambda b_, s_: roofline(*head, b_, s_ * f_new, s_ * (1.0 - f_new), **kw)


def _kv_read(seqs, kv_len, kv_bytes_per_token, window):
    """KV bytes one layer reads (``kernels.attention.kv_read_bytes``): a full-attention layer
    (``window`` None) all ``kv_len`` tokens, a window layer at most ``window`` of them."""
    if window is None:
        return katt.kv_read_bytes(sequences=seqs, kv_len_tokens=kv_len,
                                  kv_bytes_per_token_full=kv_bytes_per_token,
                                  kv_bytes_per_token_window=0.0, window_tokens=0.0)
    return katt.kv_read_bytes(sequences=seqs, kv_len_tokens=kv_len, kv_bytes_per_token_full=0.0,
                              kv_bytes_per_token_window=kv_bytes_per_token, window_tokens=window)


def layer_ops(g: Geom, L: Layers, *, seqs, new_tokens, cached_tokens, kv_len,
              logit_tokens_per_seq, phase: str) -> list[Op]:
    """Operations of one pass of ``seqs`` sequences (per attention-DP rank and micro-batch)
    each adding ``new_tokens`` after ``cached_tokens``; decode reads ``kv_len`` tokens of KV."""
    m, hw = g.m, g.hw
    tp = g.tp
    T = seqs * new_tokens                    # tokens per DP rank and micro-batch
    h = m.hidden_size
    wp, hp = g.wprec, g.head_precision
    heads = m.n_q_heads / tp
    n_full = L.n_total - L.n_window
    kv_dtype = "fp8" if g.kvprec in ("fp8", "fp4") else "bf16"
    ops: list[Op] = []
    if phase == "decode" and g.dp > 1 and g.rl.routing:
        # the busiest attention-DP rank holds more KV than the mean: it sets the pace
        f = katt.straggler_kv_factor(context_cv=g.context_cv, sequences_per_rank=seqs,
                                     n_ranks=g.dp)
        kv_len, cached_tokens = kv_len * f, cached_tokens * f

    # ---- attention block ------------------------------------------------------------------
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        # the latent down-projections are replicated on every GPU of a TP group (SGLang,
        # vLLM); without a query latent the query projection is split by heads
        fused_n = (m.q_lora_rank or heads * qk) + m.kv_lora_rank + m.qk_rope_head_dim
        ops.append(_gemm(g, "q_a_kv_a", "attn0", L.n_total, T, fused_n, h, wp))
        if m.q_lora_rank:
            ops.append(_gemm(g, "q_b", "attn0", L.n_total, T, heads * qk, m.q_lora_rank, wp))
        if phase == "decode":
            bdt = "fp8" if wp == "fp8" else "bf16"
            for name, k_dim, n_dim, fam, stage in (
                    ("w_uk", m.qk_nope_head_dim, m.kv_lora_rank, "mla_bmm_pre", "attn0"),
                    ("w_uv", m.kv_lora_rank, m.head_dim_v, "mla_bmm_post", "attn1")):
                wb = units.BYTES_PER_ELEMENT[bdt]
                ops.append(Op(name, "compute", stage, L.n_total,
                              flop=heads * kops.gemm_flop(m=T, n=n_dim, k=k_dim),
                              hbm_bytes=heads * kops.gemm_bytes(m=0.0, n=n_dim, k=k_dim,
                                                                input_bytes=0.0, weight_bytes=wb,
                                                                output_bytes=0.0),
                              precision=bdt, m_tokens=T, family=fam, keys={"dtype": bdt},
                              fixed={"num_heads": heads}, coords=(T,),
                              pure_fn=_bmm_fn(hw, bdt, heads, k_dim, n_dim)))
            pos = katt.causal_attended_positions(new_tokens=new_tokens,
                                                 cached_tokens=cached_tokens)
            flop = seqs * katt.mla_absorbed_core_flop(attended_positions=pos, n_q_heads=heads,
                                                      kv_lora_rank=m.kv_lora_rank,
                                                      qk_rope_head_dim=m.qk_rope_head_dim)
            kvl = m.kv_bytes_per_token_per_layer(g.kvprec)
            kvb = katt.kv_read_bytes(sequences=seqs, kv_len_tokens=kv_len,
                                     kv_bytes_per_token_full=kvl, kv_bytes_per_token_window=0.0,
                                     window_tokens=0.0)
            ops.append(Op("attention", "compute", "attn1", n_full, flop=flop,
                          hbm_bytes=kvb + katt.kv_write_bytes(new_tokens=T,
                                                              kv_bytes_per_token=kvl),
                          precision=g.aprec, rate="attention", family="mla_decode",
                          keys={"kv_dtype": kv_dtype}, nearest={"num_heads": heads},
                          coords=(seqs, kv_len),
                          pure_fn=lambda b_, L_: M.mla_decode_roofline_s(
                              hw, kv_dtype, heads, b_, L_, new_tokens, dims=M.mla_dims(m)),
                          roof_mode=_attention_mode(new_tokens)))
        else:
            prefix = seqs * cached_tokens
            ops.append(_gemm(g, "kv_b", "attn0", L.n_total, T + prefix,
                             heads * (m.qk_nope_head_dim + m.head_dim_v), m.kv_lora_rank, wp))
            pos = katt.causal_attended_positions(new_tokens=new_tokens,
                                                 cached_tokens=cached_tokens)
            flop = seqs * katt.attention_core_flop(attended_positions=pos, n_q_heads=heads,
                                                   head_dim_qk=m.head_dim_qk,
                                                   head_dim_v=m.head_dim_v)
            write = katt.kv_write_bytes(new_tokens=T,
                                        kv_bytes_per_token=m.kv_bytes_per_token_per_layer(g.kvprec))
            ops.append(Op("attention", "compute", "attn1", n_full, flop=flop, hbm_bytes=write,
                          precision=g.aprec, rate="attention", family="mla_prefill",
                          keys={"kv_dtype": kv_dtype}, nearest={"num_heads": heads},
                          coords=(seqs, new_tokens + cached_tokens),
                          pure_fn=_prefill_fn(M.mla_prefill_roofline_s, (hw, kv_dtype, heads),
                                              new_tokens, cached_tokens, dims=M.mla_dims(m)),
                          roof_mode=_attention_mode(new_tokens / (new_tokens + cached_tokens))))
        ops.append(_gemm(g, "o_proj", "attn1", L.n_total, T, h, heads * m.head_dim_v, wp))
    else:
        d = m.head_dim_qk
        kvh = max(m.n_kv_heads / tp, 1.0)
        # KV heads are replicated where TP exceeds their count
        qkv_n = m.n_q_heads * m.head_dim_qk / tp + kvh * (m.head_dim_qk + m.head_dim_v)
        ops.append(_gemm(g, "qkv", "attn0", L.n_total, T, qkv_n, h, wp))
        kvb_layer = m.kv_bytes_per_token_per_layer(g.kvprec) / g.kv_split
        for name, count, window in (("attention", n_full, None),
                                    ("attention_window", L.n_window, m.sliding_window_tokens)):
            if not count:
                continue
            if phase == "decode":
                ctx = kv_len if window is None else np.minimum(kv_len, window)
                pos = (katt.causal_attended_positions(new_tokens=new_tokens,
                                                      cached_tokens=cached_tokens)
                       if window is None else katt.windowed_attended_positions(
                           new_tokens=new_tokens, cached_tokens=cached_tokens,
                           window_tokens=window))
                fam, coords = "attention_decode", (seqs, ctx)
                pure = (lambda b_, L_, nt=new_tokens:
                        M.gqa_decode_roofline_s(hw, kv_dtype, heads, kvh, d, b_, L_, nt))
                mode = _attention_mode(new_tokens)
                nbytes = (_kv_read(seqs, kv_len, kvb_layer, window)
                          + katt.kv_write_bytes(new_tokens=T, kv_bytes_per_token=kvb_layer))
            else:
                ctx = cached_tokens if window is None else np.minimum(cached_tokens, window)
                pos = (katt.causal_attended_positions(new_tokens=new_tokens, cached_tokens=cached_tokens)
                       if window is None else katt.windowed_attended_positions(
                           new_tokens=new_tokens, cached_tokens=cached_tokens,
                           window_tokens=window))
                # efficiency of a causal kernel over the whole prompt: with a cached prefix
                # the same kernel runs fewer queries against the same keys
                fam, coords = "attention_prefill", (seqs, new_tokens + cached_tokens)
                pure = _prefill_fn(M.gqa_prefill_roofline_s, (hw, kv_dtype, heads, kvh, d),
                                   new_tokens, cached_tokens, window=window)
                mode = _attention_mode(new_tokens / (new_tokens + cached_tokens))
                nbytes = (katt.kv_write_bytes(new_tokens=T, kv_bytes_per_token=kvb_layer)
                          + _kv_read(seqs, cached_tokens, kvb_layer, window))
            flop = seqs * katt.attention_core_flop(attended_positions=pos, n_q_heads=heads,
                                                   head_dim_qk=m.head_dim_qk,
                                                   head_dim_v=m.head_dim_v)
            keys = {"kv_dtype": kv_dtype, "head_dim": d}
            if phase == "prefill":     # the prefill tables hold BF16 and FP8 attention math
                keys["attn_dtype"] = "fp8" if g.aprec in ("fp8", "fp4") else "bf16"
            ops.append(Op(name, "compute", "attn1", count, flop=flop, hbm_bytes=nbytes,
                          precision=g.aprec, rate="attention", family=fam, keys=keys,
                          nearest={"num_heads": heads, "num_kv_heads": kvh},
                          coords=coords, pure_fn=pure, roof_mode=mode))
        ops.append(_gemm(g, "o_proj", "attn1", L.n_total, T, h, m.n_q_heads * m.head_dim_v / tp, wp))

    # ---- feed-forward -------------------------------------------------------------------------
    if L.n_dense_ffn:
        i = m.dense_intermediate_size / tp
        ops.append(_gemm(g, "ffn_gate_up", "shared", L.n_dense_ffn, T, 2 * i, h, wp))
        ops.append(_gemm(g, "ffn_down", "shared", L.n_dense_ffn, T, h, i, wp))
    if m.is_moe and L.n_moe:
        ops.append(_gemm(g, "router", "attn1", L.n_moe, T, m.n_routed_experts, h, "bf16"))
        if m.n_shared_experts:
            i = m.n_shared_experts * m.expert_intermediate_size / tp
            ops.append(_gemm(g, "shared_gate_up", "shared", L.n_moe, T, 2 * i, h, wp))
            ops.append(_gemm(g, "shared_down", "shared", L.n_moe, T, h, i, wp))
        ops.append(moe_op(g, L, T, phase))
        # Experts over EP ranks move tokens by all-to-all only where attention is data
        # parallel (each rank holds its own tokens). Under attention TP (dp = 1) every rank
        # already holds every token after the attention all-reduce: it runs its own experts
        # on the tokens routed to them and the TP all-reduce after the layer (allreduce_ffn
        # below) sums the experts' outputs, as SGLang's EP MoE without an all-to-all
        # backend (its default, moe_a2a_backend "none") and TRT-LLM's attention-TP EP do.
        if g.ep > 1 and g.dp > 1:
            local = T / tp                   # sequence-parallel share of this GPU
            for name, b, stage in (("dispatch", g.dispatch_b, "dispatch"),
                                   ("combine", g.combine_b, "combine")):
                ops.append(Op(name, "comm", stage, L.n_moe,
                              family=f"{name}_{'normal' if phase == 'prefill' else 'll'}",
                              nearest={"hidden_size": h, "num_topk": m.experts_per_token,
                                       "num_experts": m.n_routed_experts,
                                       "node_num": max(g.ep / M.DEEPEP_NODE_GPUS, 1.0)},
                              coords=(local,),
                              params={"kind": "alltoall", "tokens": local, "bytes_per_elem": b,
                                    "phase": phase}))
        elif g.dp > 1:
            # expert TP under attention DP (SGLang dp-attention with MoE TP): every GPU runs
            # its slice of every expert on the tokens of all DP ranks, so the tokens are
            # gathered before the experts (SGLang's dp_gather: an all-reduce of the padded
            # global buffer) and the partial outputs all-reduced after them over the
            # instance (then each rank keeps its own rows, dp_scatter)
            msg = T * g.dp * h * 2.0
            n = g.n_gpus
            for name, stage in (("moe_gather", "dispatch"), ("moe_reduce", "combine")):
                ops.append(Op(name, "comm", stage, L.n_moe, family="allreduce",
                              keys={"kernel": "custom"}, nearest={"num_gpus": n},
                              coords=(msg,), params={"kind": "allreduce", "message_bytes": msg,
                                                     "n_ranks": n}))
    if tp > 1:
        msg = T * h * 2.0
        for stage in ("tp_attn", "tp_ffn"):
            ops.append(Op("allreduce_" + stage[3:], "comm", stage, L.n_total, family="allreduce",
                          keys={"kernel": "custom"}, nearest={"num_gpus": tp}, coords=(msg,),
                          params={"kind": "allreduce", "message_bytes": msg, "n_ranks": tp}))

    # ---- embedding, lm_head, and the small kernels between the GEMMs ----------------------------
    if L.logits:
        logit_tokens = seqs * logit_tokens_per_seq
        lm = _gemm(g, "lm_head", "head", 1, logit_tokens, m.vocab_size / tp, h, hp)
        lm.hbm_bytes = lm.hbm_bytes + T * h * units.BYTES_PER_ELEMENT[hp] / tp   # embedding rows
        ops.append(lm)
    # norm weights are read once per layer (plus the final norm); the activation traffic of
    # the elementwise kernels is costed with their floors in measured mode (cost._other)
    norm_bytes = (m.n_norm_params_per_layer + m.hidden_size / max(L.n_total, 1)) * 2.0
    ops.append(Op("other_kernels", "compute", "attn0", L.n_total, rate="other",
                  hbm_bytes=norm_bytes * (1.0 if L.logits else 0.0),
                  params={"kernels": other_kernel_count(g, L),
                        "elementwise_bytes": kops.elementwise_bytes(
                            tokens=T, width=h, passes=g.rl.other_kernels["elementwise_passes"],
                            bytes_per_elem=2.0)}))
    return ops


def moe_op(g: Geom, L: Layers, T, phase: str) -> Op:
    """The routed-expert grouped GEMM of the busiest EP rank."""
    m = g.m
    dtype = gemm_dtype(m.quant_format(g.eprec, experts=True), g.hw)
    tokens = T * g.dp                         # unique tokens entering the EP group
    eb = units.BYTES_PER_ELEMENT[g.eprec]
    kw = dict(hidden_size=m.hidden_size, inter_size=m.expert_intermediate_size,
              topk=m.experts_per_token, num_experts=m.n_routed_experts)
    # wide EP: DeepEP's grouped GEMM (SGLang tables, DeepSeek shapes); else, and where those
    # lack the dtype (NVFP4 on Blackwell), the fused MoE kernel of one rank at this EP x TP.
    fused = ("moe", {"dtype": dtype}, dict(kw, moe_tp=g.moe_tp, moe_ep=g.ep))
    # DeepEP's kernels come with its all-to-all, i.e. with attention DP (see the dispatch
    # below); under attention TP, EP runs the fused MoE kernel on every token of the rank
    if g.ep > 1 and g.dp > 1:
        fam, keys = "moe_wideep", {"phase": phase, "dtype": dtype}
        near = dict(kw, moe_ep=g.ep)
    else:
        fam, keys, near = fused
        fused = ()
    mean_routed = tokens * m.experts_per_token / g.ep      # token-expert pairs per rank
    routed = mean_routed * g.placement_imbalance            # on the busiest rank
    # weights read: the experts of one rank that receive at least one token
    distinct = kmoe.expected_distinct_experts_popular(expert_hit_prob=g.bins,
                                                      tokens=tokens) / g.ep
    inter = m.expert_intermediate_size / g.moe_tp

    def pure(n_):
        return M.moe_roofline_s(g.hw, dtype, n_, m.hidden_size, m.expert_intermediate_size,
                              m.experts_per_token, m.n_routed_experts, g.moe_tp, g.ep,
                              load_factor=g.placement_imbalance)
    return Op("moe", "compute", "mlp", L.n_moe,
              flop=kops.grouped_expert_flop(routed_tokens=routed, hidden_size=m.hidden_size,
                                            intermediate_size=inter),
              hbm_bytes=kops.grouped_expert_bytes(distinct_experts=distinct, routed_tokens=0.0,
                                                  hidden_size=m.hidden_size,
                                                  intermediate_size=inter, weight_bytes=eb,
                                                  act_bytes=0.0),
              precision=compute_precision(g.hw, g.eprec) or g.eprec, rate="moe",
              m_tokens=routed / np.maximum(distinct, 1e-9),
              family=fam, keys=keys, nearest=near, coords=(tokens,), pure_fn=pure,
              fallback=fused, params={"mean_routed": mean_routed})


def other_kernel_count(g: Geom, L: Layers) -> float:
    """Small kernels per layer between the GEMMs (norms, RoPE, KV write, activation,
    activation quantisation, router top-k), from ``configs/realism.toml`` [other_kernels]."""
    ok = g.rl.other_kernels
    per_layer = ok["mla"] if g.m.is_mla else ok["gqa"]
    quant = 1.0 if g.wprec in ("fp8", "fp4") else 0.0
    n = per_layer + quant * ok["per_quantized_gemm_group"] * 2
    moe = ok["moe"] + (ok["shared_expert"] if g.m.n_shared_experts else 0.0)
    ffn = (L.n_dense_ffn * (ok["ffn"] + quant * ok["per_quantized_gemm_group"])
           + L.n_moe * (moe + quant * ok["per_quantized_gemm_group"]))
    return n + ffn / max(L.n_total, 1)
