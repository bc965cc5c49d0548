"""The pure roofline of a measured table's row, with the same work formulas as the op graph
(:mod:`inference_factory.kernels`): what each measured latency is divided by to give the
efficiency the curves interpolate (:mod:`.measured`)."""

from __future__ import annotations


import numpy as np

from .. import units
from ..kernels import attention as katt
from ..kernels import comm as kcomm
from ..kernels import moe as kmoe
from ..kernels import ops as kops
from ..kernels import params as kparams
from ..specs import HardwareSpec, load_model
from .table_files import Rows, read_table  # noqa: F401 (re-exported)

#: dtype names of the tables -> (our precision for the peak, bytes per element)
DTYPES = {"bf16": ("bf16", 2.0), "fp8": ("fp8", 1.0), "fp8_block": ("fp8", 1.0),
          "nvfp4": ("fp4", units.BYTES_PER_ELEMENT["fp4"]),
          # MXFP4 weights with MXFP8 activations (FP8 tensor cores) or BF16 activations
          "w4a8_mxfp4_mxfp8": ("fp8", units.BYTES_PER_ELEMENT["fp4"]),
          "w4a16_mxfp4": ("bf16", units.BYTES_PER_ELEMENT["fp4"]),
          "int4_wo": ("bf16", units.BYTES_PER_ELEMENT["int4"])}     # W4A16

#: The model AIConfigurator's MLA tables were collected at (their rows carry no dimensions);
#: its MLA dimensions, read from models/DeepSeek-V3.toml, are those of every table row.
MLA_TABLE_MODEL = "DeepSeek-V3"


def mla_dims(model=None) -> tuple[int, int, int, int]:
    """(d_nope, d_rope, kv_lora_rank, d_v) of ``model`` (default: the tables' model)."""
    m = model if model is not None else load_model(MLA_TABLE_MODEL)
    return m.qk_nope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank, m.head_dim_v


def _peak(hw: HardwareSpec, prec: str) -> float:
    return hw.dense_flop_per_s.get(prec) or hw.dense_flop_per_s.get("bf16")


# ---- pure roofline of a table row (same formulas as the op graph) ---------------------------

def gemm_roofline_s(hw, dtype, m, n, k):
    prec, b = DTYPES.get(dtype, ("bf16", 2.0))
    return kops.pure_roofline_s(
        flop=kops.gemm_flop(m=m, n=n, k=k),
        bytes_moved=kops.gemm_bytes(m=m, n=n, k=k, input_bytes=b, weight_bytes=b, output_bytes=2.0),
        peak_flop_per_s=_peak(hw, prec), peak_bytes_per_s=hw.hbm_bw_bytes_per_s)


def bmm_roofline_s(hw, dtype, tokens, heads, k, n):
    """One absorbed MLA batched GEMM: per head [tokens x k] x [k x n]."""
    prec, b = DTYPES.get(dtype, ("bf16", 2.0))
    return kops.pure_roofline_s(
        flop=heads * kops.gemm_flop(m=tokens, n=n, k=k),
        bytes_moved=heads * kops.gemm_bytes(m=tokens, n=n, k=k, input_bytes=2.0, weight_bytes=b,
                                            output_bytes=2.0),
        peak_flop_per_s=_peak(hw, prec), peak_bytes_per_s=hw.hbm_bw_bytes_per_s)


def _kv_read(batch, kv_len, kv_bytes_per_token):
    """KV bytes of one attention layer reading ``kv_len`` tokens of each of ``batch``
    sequences (``kernels.attention.kv_read_bytes``, full attention)."""
    return katt.kv_read_bytes(sequences=batch, kv_len_tokens=kv_len,
                              kv_bytes_per_token_full=kv_bytes_per_token,
                              kv_bytes_per_token_window=0.0, window_tokens=0.0)


def _gqa_kv_tok(kv_heads, head_dim, b):
    return kparams.gqa_kv_bytes_per_token_per_layer(n_kv_heads=kv_heads, head_dim_k=head_dim,
                                                    head_dim_v=head_dim, kv_bytes_per_elem=b)


def attention_roofline_s(hw, *, flop, kv_bytes, io_bytes):
    """Attention kernel: score and value FLOPs at the BF16 peak; KV read plus Q/O traffic."""
    return kops.pure_roofline_s(flop=flop, bytes_moved=kv_bytes + io_bytes,
                                peak_flop_per_s=_peak(hw, "bf16"),
                                peak_bytes_per_s=hw.hbm_bw_bytes_per_s)


def mla_decode_roofline_s(hw, kv_dtype, heads, batch, kv_len, q_tokens=1.0, dims=None):
    """Absorbed MLA decode kernel; ``dims`` = :func:`mla_dims` of the model (default: the
    tables' model)."""
    _, rope, latent, _ = dims or mla_dims()
    b = units.BYTES_PER_ELEMENT["fp8" if kv_dtype == "fp8" else "bf16"]
    # the tables' rows carry no FP8 scales: the latent and the BF16 (or wider) RoPE key
    kv_tok = kparams.mla_kv_bytes_per_token_per_layer(
        kv_lora_rank=latent, qk_rope_head_dim=rope, latent_bytes_per_elem=b,
        rope_bytes_per_elem=max(b, 2.0))
    pos = katt.causal_attended_positions(new_tokens=q_tokens, cached_tokens=kv_len - q_tokens)
    flop = batch * katt.mla_absorbed_core_flop(attended_positions=pos, n_q_heads=heads,
                                               kv_lora_rank=latent, qk_rope_head_dim=rope)
    io = batch * q_tokens * heads * (2 * latent + rope) * 2.0
    return attention_roofline_s(hw, flop=flop, kv_bytes=_kv_read(batch, kv_len, kv_tok),
                                io_bytes=io)


def mla_prefill_roofline_s(hw, kv_dtype, heads, batch, isl, cached=0.0, dims=None):
    """Non-absorbed MLA prefill kernel (per-head Q, K, V, O traffic in BF16)."""
    nope, rope, _, v = dims or mla_dims()
    pos = katt.causal_attended_positions(new_tokens=isl, cached_tokens=cached)
    flop = batch * katt.attention_core_flop(attended_positions=pos, n_q_heads=heads,
                                            head_dim_qk=nope + rope, head_dim_v=v)
    io = batch * (2.0 * isl + cached) * heads * 2.0 * (nope + rope + v)
    return attention_roofline_s(hw, flop=flop, kv_bytes=0.0, io_bytes=io)


def gqa_decode_roofline_s(hw, kv_dtype, heads, kv_heads, head_dim, batch, kv_len, q_tokens=1.0):
    b = units.BYTES_PER_ELEMENT["fp8" if kv_dtype == "fp8" else "bf16"]
    pos = katt.causal_attended_positions(new_tokens=q_tokens, cached_tokens=kv_len - q_tokens)
    flop = batch * katt.attention_core_flop(attended_positions=pos, n_q_heads=heads,
                                            head_dim_qk=head_dim, head_dim_v=head_dim)
    kv = _kv_read(batch, kv_len, _gqa_kv_tok(kv_heads, head_dim, b))
    io = batch * q_tokens * 2.0 * heads * head_dim * 2.0
    return attention_roofline_s(hw, flop=flop, kv_bytes=kv, io_bytes=io)


def gqa_prefill_roofline_s(hw, kv_dtype, heads, kv_heads, head_dim, batch, isl, cached=0.0,
                           window=None):
    """Causal prefill of ``isl`` new tokens after ``cached`` ones; with ``window`` each query
    sees at most that many positions (sliding-window layers)."""
    b = units.BYTES_PER_ELEMENT["fp8" if kv_dtype == "fp8" else "bf16"]
    if window is None:
        pos = katt.causal_attended_positions(new_tokens=isl, cached_tokens=cached)
    else:
        pos = katt.windowed_attended_positions(new_tokens=isl, cached_tokens=cached,
                                               window_tokens=window)
        cached = np.minimum(cached, window)
    flop = batch * katt.attention_core_flop(attended_positions=pos, n_q_heads=heads,
                                            head_dim_qk=head_dim, head_dim_v=head_dim)
    kv = _kv_read(batch, isl + cached, _gqa_kv_tok(kv_heads, head_dim, b))
    io = batch * isl * 2.0 * heads * head_dim * 2.0
    return attention_roofline_s(hw, flop=flop, kv_bytes=kv, io_bytes=io)


def moe_roofline_s(hw, dtype, tokens, hidden, inter, topk, experts, moe_tp, moe_ep,
                   load_factor=1.0):
    """Grouped expert GEMM of one EP rank: ``tokens`` enter the EP group; the rank computes
    its mean share of the token-expert pairs (times ``load_factor`` for the busiest rank)
    and reads the weights of its distinct experts hit."""
    prec, b = DTYPES.get(dtype, ("bf16", 2.0))
    routed = tokens * topk / moe_ep * load_factor
    distinct = kmoe.expected_distinct_experts(n_experts=experts, experts_per_token=topk,
                                              tokens=tokens) / moe_ep
    inter_shard = inter / moe_tp
    return kops.pure_roofline_s(
        flop=kops.grouped_expert_flop(routed_tokens=routed, hidden_size=hidden,
                                      intermediate_size=inter_shard),
        bytes_moved=kops.grouped_expert_bytes(distinct_experts=distinct, routed_tokens=routed,
                                              hidden_size=hidden, intermediate_size=inter_shard,
                                              weight_bytes=b, act_bytes=2.0),
        peak_flop_per_s=_peak(hw, prec), peak_bytes_per_s=hw.hbm_bw_bytes_per_s)


def a2a_roofline_s(hw, tokens_per_rank, hidden, topk, ep, bytes_per_elem, *, phase,
                   domain_gpus=None):
    """EP dispatch or combine of one rank at the link peaks: copies of each token to the
    ranks of its top-k experts over NVLink inside the ``domain_gpus`` domain and over the NIC
    beyond it (prefill's normal kernels: one copy per destination rank in the domain and per
    remote node; decode's low-latency kernels: one per remote expert), the two levels
    concurrent (kernels.comm)."""
    dom = hw.scale_up_domain_gpus if domain_gpus is None else domain_gpus
    return kcomm.ep_alltoall_s(
        tokens_per_rank=tokens_per_rank, hidden_size=hidden, bytes_per_elem=bytes_per_elem,
        experts_per_token=topk, n_ranks=ep, domain_gpus=dom,
        scale_up_bytes_per_s=hw.scale_up_bw_bytes_per_s,
        scale_out_bytes_per_s=hw.scale_out_bw_bytes_per_s, latency_s=0.0,
        kernels=a2a_kernels(phase))


def a2a_kernels(phase: str) -> str:
    """DeepEP's kernel family of a phase: normal in prefill, low-latency in decode."""
    return "normal" if phase == "prefill" else "low_latency"


def nvlink_a2a_roofline_s(hw, op, dtype, tokens_per_rank, hidden, topk, ep):
    """TRT-LLM's NVLink all-to-all (GB200 NVL72) of one rank, every peer on NVLink: the
    dispatch payload in ``dtype``, the combine payload in BF16 (routing ``prepare`` moves no
    activations; its ratio then carries its whole cost)."""
    b = 2.0 if str(op).startswith("combine") else DTYPES.get(str(dtype), ("bf16", 2.0))[1]
    return a2a_roofline_s(hw, tokens_per_rank, hidden, topk, ep, b, phase="decode",
                          domain_gpus=ep)


def allreduce_roofline_s(hw, message_bytes, n_gpus):
    """Ring all-reduce bandwidth term at the scale-up peak: 2 (n-1)/n M / W
    (``kernels.comm.ring_allreduce_s`` without its latency)."""
    return kcomm.ring_allreduce_s(message_bytes=message_bytes, n_ranks=n_gpus,
                                  link_bytes_per_s=hw.scale_up_bw_bytes_per_s, latency_s=0.0)


def allgather_roofline_s(hw, message_bytes, n_gpus):
    """Ring all-gather / reduce-scatter bandwidth term at the scale-up peak: (n-1)/n M / W,
    M the whole buffer (``kernels.comm.ring_allgather_s`` without its latency)."""
    return kcomm.ring_allgather_s(message_bytes=message_bytes, n_ranks=n_gpus,
                                  link_bytes_per_s=hw.scale_up_bw_bytes_per_s, latency_s=0.0)
