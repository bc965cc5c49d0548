"""One layer as a list of named operations.

:func:`layer_ops` describes one forward pass of a model (main layers or one MTP module) on
one GPU as operations: each with its FLOPs and HBM bytes per call (vectorized over the grid),
its shape (for the measured tables), the stream it runs on (compute or communication), its
stage in the two-micro-batch pipeline, and how many times a pass calls it (layers). Costing
is :mod:`.cost`; the schedule that combines costs into a step is :mod:`.schedule`.
"""

from __future__ import annotations

import numpy as np

from .. import units
from ..kernels import attention as katt
from ..kernels import comm as kcomm
from ..kernels import moe as kmoe
from ..kernels import ops as kops
from . import measured as M
from .layer_mix import architecture
from .attention import Pass, attention_ops
from .geometry import Geom, Layers
from .hyper_connections import mhc_ops
from .op import Op, gemm, gemm_dtype, quantization_kernels, roofline_key
from .precision import compute_precision

__all__ = ["Op", "layer_ops", "moe_op", "other_kernel_count"]


def layer_ops(g: Geom, L: Layers, *, seqs, new_tokens, cached_tokens, kv_len,
              logit_tokens_per_seq, phase: str) -> list[Op]:
    """Operations of one pass of ``seqs`` sequences (per attention-DP rank and micro-batch)
    each adding ``new_tokens`` after ``cached_tokens``; decode reads ``kv_len`` tokens of KV."""
    m = g.m
    tp = g.tp
    T = seqs * new_tokens                    # tokens per DP rank and micro-batch
    h = m.hidden_size
    wp, hp = g.wprec, g.head_precision
    ops: list[Op] = []
    if phase == "decode" and g.dp > 1 and g.rl.routing:
        # the busiest attention-DP rank holds more KV than the mean: it sets the pace
        f = katt.straggler_kv_factor(context_cv=g.context_cv, sequences_per_rank=seqs,
                                     n_ranks=g.dp)
        kv_len, cached_tokens = kv_len * f, cached_tokens * f

    # ---- attention blocks: each kind of the layer mix gives its own (engine/attention) ------
    ops += attention_ops(g, L.attention, Pass(seqs=seqs, new_tokens=new_tokens,
                                              cached_tokens=cached_tokens, kv_len=kv_len,
                                              tokens=T, phase=phase))

    ops += mhc_ops(g, L.n_total, T)      # DeepSeek-V4's residual streams (none elsewhere)

    # ---- feed-forward -------------------------------------------------------------------------
    if L.n_dense_ffn:
        i = m.dense_intermediate_size / tp
        ops.append(gemm(g, "ffn_gate_up", "shared", L.n_dense_ffn, T, 2 * i, h, wp))
        ops.append(gemm(g, "ffn_down", "shared", L.n_dense_ffn, T, h, i, wp))
    if m.is_moe and L.n_moe:
        ops.append(gemm(g, "router", "attn1", L.n_moe, T, m.n_routed_experts, h, "bf16"))
        if m.latent_hidden_size:
            # a latent MoE projects every token down to the experts' width before the
            # dispatch and back up after the combine, whole on every TP rank (aiconfigurator
            # sdk/models/kimi_k3.py _ffn_ops: latent_down_gemm / latent_up_gemm, unsharded)
            r = m.latent_hidden_size
            ops.append(gemm(g, "latent_down", "attn1", L.n_moe, T, r, h, wp))
            ops.append(gemm(g, "latent_up", "shared", L.n_moe, T, h, r, wp))
        if m.n_shared_experts:
            i = m.n_shared_experts * m.expert_intermediate_size / tp
            ops.append(gemm(g, "shared_gate_up", "shared", L.n_moe, T, 2 * i, h, wp))
            ops.append(gemm(g, "shared_down", "shared", L.n_moe, T, h, i, wp))
        ops.append(moe_op(g, L, T, phase))
        # Experts over EP ranks move tokens by all-to-all only where attention is data
        # parallel (each rank holds its own tokens). Under attention TP (dp = 1) every rank
        # already holds every token after the attention all-reduce: it runs its own experts
        # on the tokens routed to them and the TP all-reduce after the layer (allreduce_ffn
        # below) sums the experts' outputs, as SGLang's EP MoE without an all-to-all
        # backend (its default, moe_a2a_backend "none") and TRT-LLM's attention-TP EP do.
        if g.ep > 1 and g.dp > 1 and g.rl.all_to_all == "allgather_reducescatter":
            ops += gather_scatter_ops(g, L, T)
        elif g.ep > 1 and g.dp > 1:
            local = T / tp                   # sequence-parallel share of this GPU
            for name, b, stage in (("dispatch", g.dispatch_b, "dispatch"),
                                   ("combine", g.combine_b, "combine")):
                ops.append(Op(name, "comm", stage, L.n_moe,
                              family=f"{name}_{'normal' if phase == 'prefill' else 'll'}",
                              # the payload is the experts' input: a latent MoE's latent
                              nearest={"hidden_size": m.expert_hidden_size,
                                       "num_topk": m.experts_per_token,
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
                              fallback=_library_allreduce(n),
                              coords=(msg,), params={"kind": "allreduce", "message_bytes": msg,
                                                     "n_ranks": n}))
    if tp > 1:
        msg = T * h * 2.0
        for stage in ("tp_attn", "tp_ffn"):
            ops.append(Op("allreduce_" + stage[3:], "comm", stage, L.n_total, family="allreduce",
                          keys={"kernel": "custom"}, nearest={"num_gpus": tp}, coords=(msg,),
                          fallback=_library_allreduce(tp),
                          params={"kind": "allreduce", "message_bytes": msg, "n_ranks": tp}))

    # ---- embedding, lm_head, and the small kernels between the GEMMs ----------------------------
    if L.logits:
        logit_tokens = seqs * logit_tokens_per_seq
        lm = gemm(g, "lm_head", "head", 1, logit_tokens, m.vocab_size / tp, h, hp)
        lm.hbm_bytes = lm.hbm_bytes + T * h * units.BYTES_PER_ELEMENT[hp] / tp   # embedding rows
        ops.append(lm)
    # norm weights are read once per layer (plus the final norm); the activation traffic of
    # the elementwise kernels is costed with their floors in measured mode (cost._other)
    norm_bytes = (m.n_norm_params_per_layer + m.hidden_size / max(L.n_total, 1)) * 2.0
    # kernels an op measured as a whole module already times (per layer)
    covered = sum(op.covers_kernels * op.count for op in ops) / max(L.n_total, 1)
    ops.append(Op("other_kernels", "compute", "attn0", L.n_total, rate="other",
                  hbm_bytes=norm_bytes * (1.0 if L.logits else 0.0),
                  params={"kernels": other_kernel_count(g, L, T) - covered,
                        "elementwise_bytes": kops.elementwise_bytes(
                            tokens=T, width=h, passes=g.rl.other_kernels["elementwise_passes"],
                            bytes_per_elem=2.0)}))
    return ops


def gather_scatter_ops(g: Geom, L: Layers, T) -> list[Op]:
    """EP dispatch / combine without an all-to-all kernel (the engine's ``all_to_all`` is
    ``allgather_reducescatter``: vLLM's default, TensorRT-LLM off NVL72): an NCCL all-gather
    of every attention-DP rank's ``T`` tokens in the dispatch format over the MoE group, and a
    reduce-scatter of the experts' BF16 outputs back (kernels.comm.ep_gather_scatter_bytes)."""
    n = g.moe_tp * g.ep
    out = []
    for name, fam, b in (("dispatch", "allgather", g.dispatch_b),
                         ("combine", "reducescatter", g.combine_b)):
        msg = kcomm.ep_gather_scatter_bytes(tokens_per_rank=T, dp_ranks=g.dp,
                                            hidden_size=g.m.expert_hidden_size, bytes_per_elem=b)
        out.append(Op(name, "comm", name, L.n_moe, family=fam, nearest={"num_gpus": n},
                      coords=(msg,), params={"kind": "allgather", "message_bytes": msg,
                                             "n_ranks": n}))
    return out


def _library_allreduce(n):
    """The collective library's all-reduce rows (NCCL / RCCL: kernel "nccl"), read where a
    device's table has no custom all-reduce rows (MI300X: AMD's rccl-tests run only)."""
    return ("allreduce", {"kernel": "nccl"}, {"num_gpus": n})


def moe_op(g: Geom, L: Layers, T, phase: str) -> Op:
    """The routed-expert grouped GEMM of the busiest EP rank."""
    m = g.m
    dtype = gemm_dtype(m.quant_format(g.eprec, experts=True), g.hw)
    tokens = T * g.dp                         # unique tokens entering the EP group
    eb = units.BYTES_PER_ELEMENT[g.eprec]
    h = m.expert_hidden_size                  # a latent MoE's experts run at the latent width
    kw = dict(hidden_size=h, inter_size=m.expert_intermediate_size,
              topk=m.experts_per_token, num_experts=m.n_routed_experts)
    # wide EP: DeepEP's grouped GEMM (SGLang tables, DeepSeek shapes); else, and where those
    # lack the dtype (NVFP4 on Blackwell), the fused MoE kernel of one rank at this EP x TP.
    fused = ("moe", {"dtype": dtype}, dict(kw, moe_tp=g.moe_tp, moe_ep=g.ep))
    # DeepEP's kernels come with its all-to-all, i.e. with attention DP (see the dispatch
    # below); under attention TP, or where the engine gathers every token to every rank
    # (allgather_reducescatter), EP runs the fused MoE kernel on every token of the rank
    if g.ep > 1 and g.dp > 1 and g.rl.all_to_all != "allgather_reducescatter":
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

    # the balanced kernel; the busiest rank's pairs beyond the mean are added by the cost
    # (kernels.moe.busiest_rank_excess_s)
    def pure(n_):
        return M.moe_roofline_s(g.hw, dtype, n_, h, m.expert_intermediate_size,
                              m.experts_per_token, m.n_routed_experts, g.moe_tp, g.ep)
    return Op("moe", "compute", "mlp", L.n_moe,
              flop=kops.grouped_expert_flop(routed_tokens=routed, hidden_size=h,
                                            intermediate_size=inter),
              hbm_bytes=kops.grouped_expert_bytes(distinct_experts=distinct, routed_tokens=0.0,
                                                  hidden_size=h,
                                                  intermediate_size=inter, weight_bytes=eb,
                                                  act_bytes=0.0),
              precision=compute_precision(g.hw, g.eprec) or g.eprec, rate="moe",
              m_tokens=routed / np.maximum(distinct, 1e-9),
              family=fam, keys=keys, nearest=near, coords=(tokens,), pure_fn=pure,
              pure_key=roofline_key(g.hw, "moe", dtype, h,
                                    m.expert_intermediate_size, m.experts_per_token,
                                    m.n_routed_experts, g.moe_tp, g.ep),
              fallback=fused, params={"mean_routed": mean_routed,
                                      "pairs_per_token": m.experts_per_token / g.ep,
                                      "load_factor": g.placement_imbalance})


def other_kernel_count(g: Geom, L: Layers, tokens=None) -> float:
    """Small kernels per layer between the GEMMs (norms, RoPE, KV write, activation,
    activation quantisation, router top-k), from ``configs/realism.toml`` [other_kernels]:
    no quantisation kernels where the device's measured GEMMs time them, and the two
    RMSNorms inside the fused TP all-reduce where a pass of ``tokens`` per rank takes it
    (where the engine fuses: realism ``fused_allreduce_norm``, from its profile, else where
    the device's all-reduce table holds a fusing engine's kernel)."""
    ok = g.rl.other_kernels
    per_layer = architecture(g.m).other_kernels_per_layer(ok, L.attention)
    tabs = M.tables_for(g.hw) if g.rl.measured else None
    # the serving engine's profile where a command names one, else the device's table
    fusing = g.rl.fused_allreduce_norm if g.rl.fused_allreduce_norm is not None else (
        tabs is not None and bool(tabs.backends("allreduce") & set(g.rl.fused_allreduce_backends)))
    if fusing and tokens is not None and g.tp > 1 and g.dp == 1:
        fused = min(ok["norms_fused_into_allreduce"], per_layer)
        per_layer = np.where(tokens <= ok["fused_allreduce_max_tokens"], per_layer - fused,
                             per_layer)
    n = per_layer + quantization_kernels(g, 2)           # attention in, attention out
    moe = ok["moe"] + (ok["shared_expert"] if g.m.n_shared_experts else 0.0)
    ffn = (L.n_dense_ffn * (ok["ffn"] + quantization_kernels(g, 1))
           + L.n_moe * (moe + quantization_kernels(g, 1)))
    return n + ffn / max(L.n_total, 1)
