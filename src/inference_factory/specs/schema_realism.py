"""Schema of the realism constants (``configs/realism.toml``): one table per realism term, each
with its ``enabled`` switch and its constants. Every key is required (the file is the only
place the constants live); the loader is :func:`inference_factory.specs.realism.load_realism`.

Re-exported by :mod:`.schema`."""

from __future__ import annotations

from ..axes import STRUCT_NUMBERS
from ..bounds import MAX_FIXED_LATENCY_US, MAX_KERNELS_PER_BLOCK, MAX_TILE_M_TOKENS, MAX_TOKENS
from .schema_base import _Schema, flag, names, num


def _frac(doc: str):
    """A fraction of a peak or a line rate: (0, 1]."""
    return num(0.0, 1.0, doc, lo_open=True)


class RealismGemm(_Schema):
    enabled: flag("large-GEMM efficiency term on")
    default_large_gemm_frac: _frac("achievable fraction of dense peak where a device has no "
                                   "measured matmul rate")
    use_measured_matmul: flag("use the device's measured matmul rate where it has one")
    small_m: flag("small-M tile padding term on")
    tile_m_tokens: num(0, MAX_TILE_M_TOKENS, "rows of one tensor-core tile, tokens")


class RealismAttention(_Schema):
    enabled: flag("attention-kernel efficiency term on")
    compute_frac: _frac("attention-kernel fraction of the BF16 peak")
    fp8_kv_compute_frac: _frac("attention-kernel fraction of the BF16 peak with an FP8 KV cache")
    hbm_frac: _frac("achieved fraction of HBM bandwidth in attention")


class RealismHbm(_Schema):
    enabled: flag("weight-streaming bandwidth term on")
    gemm_frac: _frac("achieved fraction of HBM bandwidth in decode-sized GEMMs")


class RealismLinks(_Schema):
    enabled: flag("link bandwidth term on")
    scale_up_frac: _frac("achieved fraction of the scale-up line rate")
    scale_out_frac: _frac("achieved fraction of the scale-out line rate")
    latency: flag("per-collective latency term on")
    scale_up_latency_us: num(0, MAX_FIXED_LATENCY_US,
                             "latency of one collective over the scale-up links, us")
    scale_out_latency_us: num(0, MAX_FIXED_LATENCY_US, "latency of one collective over the NIC, us")


class RealismOverhead(_Schema):
    enabled: flag("per-layer overhead term on")
    per_layer_us: num(0, MAX_FIXED_LATENCY_US, "fixed launch/synchronisation cost per layer, us")


class RealismOverlap(_Schema):
    enabled: flag("overlap SM-share term on")
    comm_sm_frac: num(0.0, 1.0, "share of SMs the communication kernels occupy", hi_open=True)


class RealismSwitch(_Schema):
    enabled: flag("term on")


class RealismMemory(_Schema):
    enabled: flag("runtime memory reserve term on")
    runtime_reserve_frac: num(0.0, 1.0, "share of HBM the serving engine keeps back",
                              hi_open=True)


def _kernels(doc: str):
    return num(0, MAX_KERNELS_PER_BLOCK, doc)


class RealismOtherKernels(_Schema):
    mla: _kernels("small kernels per MLA block")
    gqa: _kernels("small kernels per GQA block")
    linear: _kernels("small kernels per linear-attention (GDN / KDA) block")
    compressed: _kernels("small kernels per compressed-attention block (DeepSeek-V4)")
    dsa: _kernels("small kernels per DSA block (MLA's and the indexer's)")
    block_sparse: _kernels("small kernels per block-sparse (MSA) block")
    compressed_in_module: _kernels("of those, the ones a measured V4 attention module times")
    ffn: _kernels("small kernels per dense FFN")
    moe: _kernels("small kernels per MoE layer")
    shared_expert: _kernels("small kernels per shared expert")
    per_quantized_gemm_group: _kernels("activation quantisation kernels per quantised GEMM group")
    elementwise_passes: _kernels("read+write passes over each token's hidden vector per layer")
    quantization_timed_with_gemm: names("GEMM-table backends whose rows time the activation "
                                        "quantisation with the GEMM")
    kv_write: _kernels("KV-cache write kernels per attention block")
    kv_write_timed_in: names("measured attention families whose collectors time the "
                             "KV-cache write with the attention")
    kv_write_timed_by: names("attention-table backends whose collectors time the KV-cache "
                             "write with the attention")
    fused_allreduce_backends: names("all-reduce-table backends whose engines fuse the TP "
                                    "all-reduce with the residual add and RMSNorm")
    norms_fused_into_allreduce: _kernels("RMSNorm kernels per layer run inside the fused TP "
                                         "all-reduce")
    fused_allreduce_max_tokens: num(0, MAX_TOKENS, "most tokens per pass the fused all-reduce takes")


class RealismExperts(_Schema):
    default_skew: num(*STRUCT_NUMBERS["expert_skew"],
                      "Zipf exponent of routed-expert popularity where none is given")


class RealismSpeculative(_Schema):
    acceptance_decay_per_position: num(0.0, 1.0, "acceptance of draft position i+1 relative "
                                                 "to position i")


class RealismDpAttention(_Schema):
    default_context_cv: num(*STRUCT_NUMBERS["context_cv"],
                            "coefficient of variation of context length across attention-DP "
                            "ranks where none is given")


class RealismFile(_Schema):
    """The realism constants (``configs/realism.toml``)."""

    gemm: RealismGemm
    attention: RealismAttention
    hbm: RealismHbm
    links: RealismLinks
    overhead: RealismOverhead
    overlap: RealismOverlap
    routing: RealismSwitch
    memory: RealismMemory
    measured: RealismSwitch
    other_kernels: RealismOtherKernels
    experts: RealismExperts
    speculative: RealismSpeculative
    dp_attention: RealismDpAttention
