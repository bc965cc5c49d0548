"""Schemas of the spec files: hardware (``hardware/*.toml``) and model (``models/*.toml``).

Re-exported by :mod:`.schema`."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from .schema_base import (MAX_GPUS, Precision,
                          Sources, _Schema, count, flag, nonempty, num, text)


# --------------------------------------------------------------------------------------------
# hardware spec
# --------------------------------------------------------------------------------------------

_TFLOPS = lambda p: num(0.0, 1e6, f"dense {p} tensor-core peak, TFLOPS", lo_open=True)  # noqa: E731


class HardwareCompute(_Schema):
    fp32_tflops: Optional[_TFLOPS("fp32")] = None
    bf16_tflops: Optional[_TFLOPS("bf16")] = None
    fp16_tflops: Optional[_TFLOPS("fp16")] = None
    fp8_tflops: Optional[_TFLOPS("fp8")] = None
    fp4_tflops: Optional[_TFLOPS("fp4")] = None
    int4_tflops: Optional[_TFLOPS("int4")] = None


class HardwareMeasured(_Schema):
    fp32_matmul_tflops: Optional[_TFLOPS("measured fp32 matmul")] = None
    bf16_matmul_tflops: Optional[_TFLOPS("measured bf16 matmul")] = None
    fp16_matmul_tflops: Optional[_TFLOPS("measured fp16 matmul")] = None
    fp8_matmul_tflops: Optional[_TFLOPS("measured fp8 matmul")] = None
    fp4_matmul_tflops: Optional[_TFLOPS("measured fp4 matmul")] = None
    int4_matmul_tflops: Optional[_TFLOPS("measured int4 matmul")] = None
    kernel_tables: Optional[text("folder of hardware/measured whose kernel tables apply")] = None
    decode_attention_compute_frac: Optional[num(
        0.0, 1.0, "decode-attention kernel fraction of the BF16 peak fitted to this device's "
        "measured decode-attention latencies (replaces realism [attention] compute_frac for "
        "its roofline-costed decode attention)", lo_open=True)] = None
    decode_attention_hbm_frac: Optional[num(
        0.0, 1.0, "decode-attention kernel fraction of the HBM bandwidth fitted to this "
        "device's measured decode-attention latencies (replaces realism [attention] hbm_frac "
        "for its roofline-costed decode attention)", lo_open=True)] = None


class HardwareMemory(_Schema):
    hbm_capacity_gb: num(0.0, 1e5, "HBM capacity, GB (1e9 bytes)", lo_open=True)
    hbm_bandwidth_gb_per_s: num(0.0, 1e6, "HBM bandwidth, GB/s", lo_open=True)


class HardwareScaleUp(_Schema):
    bandwidth_gb_per_s: num(0.0, 1e6, "scale-up bandwidth per GPU, one direction, GB/s",
                            lo_open=True)
    domain_gpus: count(1, MAX_GPUS, "GPUs in one scale-up (NVLink / Infinity Fabric) domain")


class HardwareScaleOut(_Schema):
    bandwidth_gbit_per_s: num(0.0, 1e6, "scale-out bandwidth per GPU, Gbit/s", lo_open=True)


class HardwarePower(_Schema):
    tdp_w: num(0.0, 1e5, "board power, W", lo_open=True)


class HardwareNode(_Schema):
    gpus_per_node: count(1, 1024, "GPUs per node")
    host_dram_capacity_gb: num(0.0, 1e7, "host DRAM per node, GB", lo_open=True)
    host_dram_bandwidth_gb_per_s: num(0.0, 1e6, "host DRAM bandwidth per node, GB/s",
                                      lo_open=True)
    nvme_capacity_tb: num(0.0, 1e5, "NVMe capacity per node, TB", lo_open=True)
    nvme_bandwidth_gb_per_s: num(0.0, 1e5, "NVMe bandwidth per node, GB/s", lo_open=True)
    assumed: flag("node values are assumptions rather than a vendor figure")


class HardwarePrice(_Schema):
    rental_usd_per_gpu_hour: Optional[num(0.0, 1e4, "rental price, USD per GPU-hour",
                                          lo_open=True)] = None
    rental_date: Optional[text("date of the rental price")] = None
    capex_usd_per_gpu: Optional[num(0.0, 1e7, "purchase price, USD per GPU",
                                    lo_open=True)] = None
    capex_date: Optional[text("date (and confidence) of the purchase price")] = None
    tco_usd_per_gpu_hour: Optional[num(0.0, 1e4, "all-in cost of ownership, USD per GPU-hour",
                                       lo_open=True)] = None
    tco_date: Optional[text("date of the TCO figure")] = None


class HardwareFile(_Schema):
    """A hardware spec file (``hardware/*.toml``)."""

    name: nonempty("canonical device name")
    aliases: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="other names the device is looked up by")
    vendor: text("vendor")
    description: text("one-line description")
    compute: HardwareCompute
    measured: Optional[HardwareMeasured] = None
    memory: HardwareMemory
    scale_up: HardwareScaleUp
    scale_out: HardwareScaleOut
    power: HardwarePower
    node: HardwareNode
    price: Optional[HardwarePrice] = None
    sources: Annotated[dict[str, str], Field(min_length=1, description=(
        "where each value comes from (source id and quote); required, non-empty"))]
    notes: Sources = Field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# model spec
# --------------------------------------------------------------------------------------------


class ModelArchitecture(_Schema):
    n_layers: count(1, 10_000, "transformer layers")
    hidden_size: count(1, 1_000_000, "model width")
    vocab_size: count(1, 100_000_000, "vocabulary size")
    tied_embeddings: flag("input embedding and lm_head share weights")
    max_position_embeddings: count(1, 1_000_000_000, "longest context, tokens")
    hyper_connections: Optional[count(0, 64, "residual streams of hyper-connections (mHC "
                                      "hc_mult; 0 = a plain residual)")] = None
    hyper_connection_sinkhorn_iters: Optional[count(0, 1000, "Sinkhorn iterations of mHC")] = None


#: an attention kind's own parameters: names to scalars (its module checks them)
KindParams = dict[str, Union[StrictBool, StrictInt, StrictFloat, StrictStr]]


class ModelAttention(_Schema):
    kind: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", description=(
        "attention kind: a module of engine/attention (mha, gqa, mla, ...)"))]
    n_q_heads: count(1, MAX_GPUS, "query heads")
    n_kv_heads: count(1, MAX_GPUS, "key/value heads")
    head_dim_qk: count(1, 65_536, "query/key head dimension")
    head_dim_v: count(1, 65_536, "value head dimension")
    q_lora_rank: Optional[count(0, 1_000_000, "MLA query low-rank dimension (0 = none)")] = None
    kv_lora_rank: Optional[count(0, 1_000_000, "MLA KV latent dimension")] = None
    qk_nope_head_dim: Optional[count(0, 65_536, "MLA non-rotary head dimension")] = None
    qk_rope_head_dim: Optional[count(0, 65_536, "MLA rotary head dimension")] = None
    bias: Optional[flag("q/k/v projections carry a bias")] = None
    sliding_window: Optional[count(0, 1_000_000_000, "sliding window, tokens (0 = none)")] = None
    sliding_window_layers: Optional[count(0, 10_000, "layers with a sliding window")] = None
    params: KindParams = Field(default_factory=dict, description=(
        "parameters of the kind beyond the shared keys ([attention.params]); each kind "
        "module of engine/attention states and checks its own"))


class ModelLayerGroup(_Schema):
    count: count(1, 10_000, "layers of this group")
    attention: Optional[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]] = Field(
        None, description="attention kind of these layers (default: attention.kind)")
    window: Optional[count(0, 1_000_000_000, "sliding window, tokens (0 = full context)")] = None
    mlp: Optional[Literal["dense", "moe"]] = Field(None, description="feed-forward kind")
    params: KindParams = Field(default_factory=dict, description=(
        "the attention kind's parameters for these layers, over [attention.params] (a "
        "hybrid model's second kind states its own heads and dimensions here)"))


class ModelFfn(_Schema):
    dense_layers: count(0, 10_000, "layers with a dense FFN")
    dense_intermediate_size: Optional[count(0, 10_000_000, "dense FFN width")] = None


class ModelMoe(_Schema):
    n_routed_experts: count(1, MAX_GPUS, "routed experts per MoE layer")
    experts_per_token: count(1, MAX_GPUS, "routed experts each token visits (top-k)")
    n_shared_experts: count(0, 1024, "shared experts per MoE layer")
    expert_intermediate_size: count(1, 10_000_000, "expert FFN width")
    expert_bias: Optional[flag("experts carry biases")] = None
    latent_hidden_size: Optional[count(1, 10_000_000, (
        "width of the latent the routed experts run in (a latent MoE, config "
        "routed_expert_hidden_size): projected down from and back up to hidden_size around "
        "them; default: the routed experts run at hidden_size"))] = None


class ModelMtp(_Schema):
    modules: Optional[count(0, 64, "multi-token-prediction modules")] = None


class ModelFile(_Schema):
    """A model spec file (``models/*.toml``)."""

    name: nonempty("canonical model name")
    aliases: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    hf_repo: text("Hugging Face repository the architecture is read from")
    source: text("source of the architecture values")
    weight_precision: Precision = Field(description="stored weight precision")
    expert_precision: Optional[Precision] = Field(None, description="routed-expert precision")
    weight_format: Optional[Literal["fp8", "fp8_block", "nvfp4", "mxfp4"]] = Field(
        None, description="scaling format of the stored quantised weights (default: fp8 "
        "per-tensor, nvfp4)")
    expert_format: Optional[Literal["fp8", "fp8_block", "nvfp4", "mxfp4"]] = Field(
        None, description="scaling format of the stored routed-expert weights (default: "
        "weight_format where the precisions agree, else fp8 per-tensor, nvfp4)")
    architecture: ModelArchitecture
    attention: ModelAttention
    ffn: ModelFfn
    moe: Optional[ModelMoe] = None
    mtp: Optional[ModelMtp] = None
    layers: Optional[list[ModelLayerGroup]] = Field(None, description=(
        "the layer mix ([[layers]]): groups of layers by attention kind, window and "
        "feed-forward kind, in order; default: derived from attention.sliding_window_layers "
        "and ffn.dense_layers"))
