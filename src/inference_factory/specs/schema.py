"""One schema per input file kind: the shape, types and ranges every loader checks first.

Each kind of file a user can hand the package has one pydantic model here:

=================  ==========================================  ================================
kind               files                                       loader
=================  ==========================================  ================================
hardware spec      ``hardware/*.toml``                         :func:`specs.load_hardware`
model spec         ``models/*.toml``                           :func:`specs.load_model`
factory config     ``configs/factory.toml`` and friends        :func:`factory.config.load_config`
sweep file         ``configs/sweeps/*.toml``                   :func:`sweep.load_sweep_file`
case file row      ``validation/*.csv`` (one row)              :func:`validation.load_cases`
trace row          ``*.jsonl`` (Mooncake) / ``*.csv`` (one row)  :func:`factory.workload.load_trace`
=================  ==========================================  ================================

A loader validates the raw file content against its schema with :func:`check` before it
builds anything; the first violation becomes a one-line :class:`SpecError` naming the file,
the key path, the value and what is allowed. Cross-field rules (tp divides the heads, ep
divides the instance, replicas <= experts, shares sum to 1...) stay in the loaders and the
engine, which see the resolved values. Every number is finite and bounded above as well as
below: the upper bounds (``MAX_*`` below) keep memory and run time sane, far above any real
deployment. The JSON Schema of each model is published under ``docs/schema/``
(``python docs/schema/generate.py`` regenerates it; a test keeps it current),
so editors with a TOML/JSON schema plugin validate files as they are typed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, get_args, get_origin

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError,
                      WithJsonSchema)
from pydantic.version import VERSION as PYDANTIC_VERSION

from ..errors import SpecError
from ..units import PRECISIONS

# --------------------------------------------------------------------------------------------
# documented bounds (docs/schema/README.md): defined in bounds.py, importable without pydantic
# --------------------------------------------------------------------------------------------

from ..bounds import (MAX_BATCH, MAX_BATCH_PER_GPU, MAX_GPUS, MAX_RATE_PER_S,  # noqa: E402,F401
                     MAX_REQUESTS, MAX_SWEEP_POINTS, MAX_SYSTEM_PROMPTS, MAX_TOKENS,
                     MAX_TOKENS_PER_DAY, MAX_TRACE_MS, MAX_TURNS_MEAN, MAX_USD)


# --------------------------------------------------------------------------------------------
# field types
# --------------------------------------------------------------------------------------------


def _bounds(lo, hi, lo_open, hi_open) -> str:
    fmt = lambda x: f"{x:,}" if isinstance(x, int) else f"{x:g}"  # noqa: E731
    return f"{'(' if lo_open else '['}{fmt(lo)}, {fmt(hi)}{')' if hi_open else ']'}"


def num(lo: float, hi: float, doc: str, *, lo_open: bool = False, hi_open: bool = False):
    """A finite number in a documented range; ``doc`` states the unit and meaning."""
    rng = dict(gt=lo) if lo_open else dict(ge=lo)
    rng.update(lt=hi) if hi_open else rng.update(le=hi)
    return Annotated[float, Field(allow_inf_nan=False, description=(
        f"{doc}; a finite number in {_bounds(lo, hi, lo_open, hi_open)}"), **rng)]


def count(lo: int, hi: int, doc: str):
    """A whole number in a documented range."""
    return Annotated[int, Field(ge=lo, le=hi, description=f"{doc}; an integer in "
                                                          f"{_bounds(lo, hi, False, False)}")]


def text(doc: str):
    return Annotated[str, Field(description=doc)]


def nonempty(doc: str):
    return Annotated[str, Field(min_length=1, description=f"{doc}; a non-empty string")]


def flag(doc: str):
    return Annotated[bool, Field(description=f"{doc}; true or false")]


Precision = Literal[tuple(PRECISIONS)]  # type: ignore[valid-type]


def _one_or_many(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


def names(doc: str):
    """A name or a non-empty list of names (a list adds a dimension)."""
    return Annotated[list[Annotated[str, Field(min_length=1)]],
                     BeforeValidator(_one_or_many),
                     WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1},
                                               {"type": "array", "minItems": 1,
                                                "items": {"type": "string", "minLength": 1}}],
                                     "description": f"{doc}; a name or a non-empty list"}),
                     Field(min_length=1, description=f"{doc}; a name or a non-empty list")]


class _Schema(BaseModel):
    """Strict: an unknown key, a string for a number or a bool for an integer is an error."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Sources = Annotated[dict[str, str], Field(description="free-form table of strings")]


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


class HardwareMeasured(_Schema):
    fp32_matmul_tflops: Optional[_TFLOPS("measured fp32 matmul")] = None
    bf16_matmul_tflops: Optional[_TFLOPS("measured bf16 matmul")] = None
    fp16_matmul_tflops: Optional[_TFLOPS("measured fp16 matmul")] = None
    fp8_matmul_tflops: Optional[_TFLOPS("measured fp8 matmul")] = None
    fp4_matmul_tflops: Optional[_TFLOPS("measured fp4 matmul")] = None
    kernel_tables: Optional[text("folder of hardware/measured whose kernel tables apply")] = None


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


class ModelAttention(_Schema):
    kind: Literal["mha", "gqa", "mla"] = Field(description="attention kind")
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


class ModelFfn(_Schema):
    dense_layers: count(0, 10_000, "layers with a dense FFN")
    dense_intermediate_size: Optional[count(0, 10_000_000, "dense FFN width")] = None


class ModelMoe(_Schema):
    n_routed_experts: count(1, MAX_GPUS, "routed experts per MoE layer")
    experts_per_token: count(1, MAX_GPUS, "routed experts each token visits (top-k)")
    n_shared_experts: count(0, 1024, "shared experts per MoE layer")
    expert_intermediate_size: count(1, 10_000_000, "expert FFN width")
    expert_bias: Optional[flag("experts carry biases")] = None


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
    architecture: ModelArchitecture
    attention: ModelAttention
    ffn: ModelFfn
    moe: Optional[ModelMoe] = None
    mtp: Optional[ModelMtp] = None


# --------------------------------------------------------------------------------------------
# factory config (every key optional in the schema: ``extends`` inherits unset keys; the
# loader reports a key missing from the whole chain)
# --------------------------------------------------------------------------------------------


def _frac(doc: str, *, hi_open: bool = False, lo_open: bool = False):
    return num(0.0, 1.0, doc, hi_open=hi_open, lo_open=lo_open)


class ConfigModel(_Schema):
    name: Optional[nonempty("model spec name or alias")] = None
    price: Optional[nonempty("price id of configs/prices.toml")] = None


class ConfigClass(_Schema):
    name: nonempty("class name")
    share: _frac("fraction of requests in the class", lo_open=True)
    prompt_tokens_median: num(0.0, MAX_TOKENS, "median new prompt tokens per turn",
                              lo_open=True)
    prompt_tokens_sigma: num(0.0, 10.0, "lognormal sigma of prompt tokens")
    output_tokens_median: num(0.0, MAX_TOKENS, "median output tokens", lo_open=True)
    output_tokens_sigma: num(0.0, 10.0, "lognormal sigma of output tokens")
    max_prompt_tokens: count(1, MAX_TOKENS, "cap on new prompt tokens per turn")
    max_output_tokens: count(1, MAX_TOKENS, "cap on output tokens")
    system_prompt_tokens: count(0, MAX_TOKENS, "tokens of each shared system prompt")
    n_system_prompts: count(1, MAX_SYSTEM_PROMPTS, "distinct system prompts")
    system_prompt_zipf: num(0.0, 100.0, "Zipf exponent of system-prompt popularity")
    turns_mean: num(1.0, MAX_TURNS_MEAN, "mean turns per conversation")
    acceptance_rate: _frac("per-position speculative acceptance")
    expert_skew: Optional[num(0.0, 4.0, "Zipf exponent of expert popularity (default: "
                                        "configs/realism.toml [experts])")] = None


class ConfigWorkload(_Schema):
    n_requests: Optional[count(1, MAX_REQUESTS, "requests in the synthetic trace")] = None
    arrival_rate_per_s: Optional[num(0.0, MAX_RATE_PER_S, "mean request rate, 1/s",
                                     lo_open=True)] = None
    diurnal_amplitude: Optional[_frac("amplitude of the daily rate swing", hi_open=True)] = None
    seed: Optional[count(0, 2**63 - 1, "random seed")] = None
    output_tokens_per_day: Optional[num(0.0, MAX_TOKENS_PER_DAY, "daily output tokens that "
                                        "set the mean request rate (0 = unset)")] = None
    trace: Optional[text("trace file (.jsonl or .csv), relative to the config")] = None
    class_: Optional[Annotated[list[ConfigClass], Field(min_length=1)]] = Field(
        None, alias="class", description="workload classes (array of tables)")

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class _Pool(_Schema):
    hardware: Optional[nonempty("hardware spec name, alias or path")] = None
    tp: Optional[count(1, MAX_GPUS, "tensor-parallel GPUs")] = None
    dp: Optional[count(1, MAX_GPUS, "data-parallel (attention) ranks")] = None
    ep: Optional[count(1, MAX_GPUS, "expert-parallel ranks; divides tp x dp")] = None
    unit_gpus: Optional[count(1, MAX_GPUS, "GPUs of one deployment unit")] = None


class ConfigPrefill(_Pool):
    tokens_per_gpu: Optional[count(1, MAX_TOKENS, "prefill tokens per GPU per pass")] = None


class ConfigDecode(_Pool):
    max_batch_per_gpu: Optional[count(1, MAX_BATCH_PER_GPU,
                                      "continuous-batching cap, sequences per GPU")] = None
    static_batch_per_gpu: Optional[count(0, MAX_BATCH_PER_GPU,
                                         "cap on the static batch (0 = none)")] = None
    max_draft_depth: Optional[count(0, 16, "deepest speculative draft")] = None


class ConfigLevers(_Schema):
    continuous_batching: Optional[flag("lever")] = None
    pd_split: Optional[flag("lever")] = None
    prefix_cache: Optional[flag("lever")] = None
    speculative: Optional[flag("lever")] = None
    expert_balancing: Optional[flag("lever")] = None
    low_precision: Optional[flag("lever")] = None
    overlap: Optional[flag("lever")] = None
    redundant_experts: Optional[count(0, MAX_GPUS, "redundant expert replicas; at most the "
                                                   "model's routed experts")] = None
    cache_tiers: Optional[Annotated[list[Literal["hbm", "dram", "nvme"]],
                                    Field(min_length=1)]] = Field(
        None, description="prefix-cache tiers, a non-empty subset of hbm, dram, nvme")
    hbm_cache_frac: Optional[_frac("share of free prefill HBM kept for prefix KV")] = None
    cache_hit_rate: Optional[_frac("scenario-fixed prefix-cache hit rate of input tokens "
                                   "(unset = simulated)", hi_open=True)] = None


class ConfigSlo(_Schema):
    ttft_s: Optional[num(0.0, 86_400.0, "time-to-first-token target, s", lo_open=True)] = None
    tpot_s: Optional[num(0.0, 3_600.0, "time-per-output-token target, s", lo_open=True)] = None


class ConfigFleet(_Schema):
    target_utilization: Optional[_frac("busy share the fleet is sized for", lo_open=True)] = None


class ConfigEconomics(_Schema):
    cost_basis: Optional[Literal["capex", "rental"]] = Field(None, description="GPU charging")
    capex_usd_per_gpu: Optional[num(0.0, 1e7, "purchase price, USD per GPU")] = None
    depreciation_years: Optional[num(0.0, 100.0, "depreciation period, years",
                                     lo_open=True)] = None
    residual_frac: Optional[_frac("residual value fraction", hi_open=True)] = None
    rental_usd_per_gpu_hour: Optional[num(0.0, 1e4, "rental price, USD per GPU-hour")] = None
    pue: Optional[num(1.0, 10.0, "power usage effectiveness")] = None
    usd_per_kwh: Optional[num(0.0, 100.0, "electricity price, USD per kWh")] = None
    idle_frac_of_tdp: Optional[_frac("idle power, fraction of TDP")] = None
    prefill_frac_of_tdp: Optional[_frac("prefill power, fraction of TDP")] = None
    decode_frac_of_tdp: Optional[_frac("decode power, fraction of TDP")] = None


class FactoryConfigFile(_Schema):
    """A factory scenario config (``configs/factory.toml``; every key in docs/CONFIG.md)."""

    extends: Optional[text("config file this one inherits unset keys from (a file, relative "
                           "to this one; no cycles)")] = None
    baseline: Optional[text("config file compare runs against")] = None
    name: Optional[nonempty("scenario name")] = None
    description: Optional[text("one-line description")] = None
    model: Optional[ConfigModel] = None
    workload: Optional[ConfigWorkload] = None
    prefill: Optional[ConfigPrefill] = None
    decode: Optional[ConfigDecode] = None
    levers: Optional[ConfigLevers] = None
    slo: Optional[ConfigSlo] = None
    fleet: Optional[ConfigFleet] = None
    economics: Optional[ConfigEconomics] = None


# --------------------------------------------------------------------------------------------
# sweep file
# --------------------------------------------------------------------------------------------

_AXIS_DOC = ("a specification string (\"1,2,4,...,1024\", \"0:0.9:10\", \"geom:1:1024:11\", "
             "\"0..4\"), a list of values or one value; names and ranges: the engine's axes")


class SweepHeader(_Schema):
    name: Optional[text("sweep name (default: the file name)")] = None
    description: Optional[text("one-line description")] = None
    model: Optional[names("model(s)")] = None
    hardware: Optional[names("hardware")] = None
    ideal: Optional[flag("pure roofline, realism terms off")] = None
    draft_model: Optional[nonempty("separate draft model")] = None


class SweepEconomics(_Schema):
    price: Optional[nonempty("price id of configs/prices.toml")] = None
    cost_basis: Optional[Literal["capex", "rental", "tco"]] = None
    rental_usd_per_gpu_hour: Optional[num(0.0, 1e4, "rental price, USD per GPU-hour")] = None
    capex_usd_per_gpu: Optional[num(0.0, 1e7, "purchase price, USD per GPU")] = None
    depreciation_years: Optional[num(0.0, 100.0, "years", lo_open=True)] = None
    residual_frac: Optional[_frac("residual value fraction", hi_open=True)] = None
    pue: Optional[num(1.0, 10.0, "power usage effectiveness")] = None
    usd_per_kwh: Optional[num(0.0, 100.0, "electricity price, USD per kWh")] = None
    utilization: Optional[_frac("busy share of the GPU-hour", lo_open=True)] = None


_AxisValue = Annotated[Any, WithJsonSchema({
    "anyOf": [{"type": "string"}, {"type": "number"},
              {"type": "array", "minItems": 1, "items": {"type": ["string", "number"]}}],
    "description": _AXIS_DOC})]
_FixedValue = Annotated[Any, WithJsonSchema({"type": ["string", "number"],
                                             "description": "one value of an engine axis"})]


class SweepFile(_Schema):
    """A sweep file (``configs/sweeps/*.toml``)."""

    sweep: SweepHeader
    axes: dict[str, _AxisValue] = Field(default_factory=dict,
                                        description="each entry is a dimension")
    fixed: dict[str, _FixedValue] = Field(default_factory=dict,
                                          description="axes held at one value")
    economics: Optional[SweepEconomics] = None


# --------------------------------------------------------------------------------------------
# case file row (CSV: cells are strings; a blank cell is absent and takes its default)
# --------------------------------------------------------------------------------------------


def _whole(v: Any) -> Any:
    """A whole number given as text or as a float (``"4"``, ``"4.0"``, ``4.0``) -> int;
    anything else passes on unchanged for the strict check to reject."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            x = float(v.strip())
        except ValueError:
            return v
        v = x
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    return v


def _number(v: Any) -> Any:
    """A number given as text -> float (``"1e400"`` -> inf, rejected as not finite)."""
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return v
    if isinstance(v, int) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:          # an integer beyond float range: not finite
            return math.inf
    return v


def cell_count(lo: int, hi: int, doc: str):
    """A whole number in a CSV cell or JSON field (text or a whole float is converted)."""
    return Annotated[int, BeforeValidator(_whole),
                     WithJsonSchema({"type": "integer", "minimum": lo, "maximum": hi,
                                     "description": f"{doc}; an integer in [{lo:,}, {hi:,}]"}),
                     Field(ge=lo, le=hi, description=f"{doc}; an integer in [{lo:,}, {hi:,}]")]


def cell_num(lo: float, hi: float, doc: str, *, lo_open: bool = False, hi_open: bool = False):
    rng = dict(gt=lo) if lo_open else dict(ge=lo)
    rng.update(lt=hi) if hi_open else rng.update(le=hi)
    desc = f"{doc}; a finite number in {_bounds(lo, hi, lo_open, hi_open)}"
    return Annotated[float, BeforeValidator(_number), Field(allow_inf_nan=False,
                                                            description=desc, **rng)]


class CaseRow(_Schema):
    """One row of a case file (``docs/VALIDATION.md``: the CSV contract). Blank cells are
    absent here; the defaults and cross-column rules are in :func:`validation.load_cases`."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    case_id: nonempty("unique case id")
    model: nonempty("model spec name or alias")
    hardware: nonempty("hardware spec name or alias")
    phase: Literal["prefill", "decode"]
    n_gpus: Optional[cell_count(1, MAX_GPUS, "GPUs of the instance (tp x dp)")] = None
    tp: Optional[cell_count(1, MAX_GPUS, "tensor-parallel GPUs")] = None
    dp: Optional[cell_count(1, MAX_GPUS, "data-parallel ranks")] = None
    ep: Optional[cell_count(1, MAX_GPUS, "expert-parallel ranks")] = None
    redundant_experts: Optional[cell_count(0, MAX_GPUS, "redundant expert replicas")] = None
    batch_per_gpu: Optional[cell_num(0.0, MAX_BATCH_PER_GPU, "sequences per GPU, or 'max' (blank): "
                                     "the largest batch that fits",
                                     lo_open=True)] = None
    tokens_per_gpu: Optional[cell_num(0.0, MAX_TOKENS, "prefill tokens per GPU per pass",
                                      lo_open=True)] = None
    input_len: Optional[cell_num(1.0, MAX_TOKENS, "prompt tokens")] = None
    output_len: Optional[cell_num(1.0, MAX_TOKENS, "output tokens")] = None
    kv_len: Optional[cell_num(1.0, MAX_TOKENS, "decode context, tokens")] = None
    cache_hit_rate: Optional[cell_num(0.0, 1.0, "prefix-cache hit rate", hi_open=True)] = None
    draft_depth: Optional[cell_count(0, 64, "draft tokens per step")] = None
    acceptance_rate: Optional[cell_num(0.0, 1.0, "per-position acceptance")] = None
    weight_precision: Optional[Precision] = None
    moe_precision: Optional[Precision] = None
    attention_precision: Optional[Precision] = None
    kv_precision: Optional[Precision] = None
    overlap: Optional[Literal["none", "two-batch"]] = None
    expert_skew: Optional[cell_num(0.0, 4.0, "Zipf exponent of expert popularity")] = None
    min_user_tokens_per_s: Optional[cell_num(0.0, 1e6, "SLO: tokens/s per user",
                                             lo_open=True)] = None
    max_ttft_s: Optional[cell_num(0.0, 86_400.0, "SLO: time to first token, s",
                                  lo_open=True)] = None
    metric: str = Field(description="published metric (validation.METRICS)")
    published: cell_num(0.0, 1e12, "the published figure", lo_open=True)
    unit: Optional[str] = None
    source: nonempty("source id and quote")


# --------------------------------------------------------------------------------------------
# trace row
# --------------------------------------------------------------------------------------------


def _class_name(v: Any) -> Any:
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


class TraceRow(_Schema):
    """One request of a Mooncake JSONL trace (timestamp in ms); other keys of the object are
    ignored. A CSV trace row (``arrival_s`` [s], ``input_tokens``, ``output_tokens``,
    ``class``, space-separated ``hash_ids``) is held to the same bounds by the loader."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    timestamp: cell_num(0.0, MAX_TRACE_MS, "arrival, ms from the trace start")
    input_length: cell_count(1, MAX_TOKENS, "prompt tokens")
    output_length: cell_count(0, MAX_TOKENS, "output tokens")
    hash_ids: list[Annotated[int, Field(ge=-2**63, le=2**63 - 1)]] = Field(
        default_factory=list, description="KV block ids of the prompt (64-bit integers)")
    class_: Annotated[str, BeforeValidator(_class_name), Field(min_length=1)] = Field(
        "default", alias="class", description="workload class name")

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True, populate_by_name=True)


SCHEMAS: dict[str, type[BaseModel]] = {
    "hardware": HardwareFile, "model": ModelFile, "factory_config": FactoryConfigFile,
    "sweep": SweepFile, "case_row": CaseRow, "trace_row": TraceRow,
}


# --------------------------------------------------------------------------------------------
# validation with one-line messages
# --------------------------------------------------------------------------------------------


def show(value: Any, limit: int = 60) -> str:
    """``repr`` of a value, shortened to one line of at most ``limit`` characters (an
    integer too long for ``repr`` is described by its digit count)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    try:
        s = repr(value)
    except ValueError:
        s = f"<{type(value).__name__}>"
    s = s.replace("\n", " ")
    return s if len(s) <= limit else s[:limit - 3] + "..."


def _unwrap(tp: Any) -> Any:
    """The model class inside Optional[...] / list[...] / Annotated[...], if any."""
    for _ in range(6):
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return tp
        args = [a for a in get_args(tp) if a is not type(None)]
        if not args:
            return None
        tp = args[0]
    return None


def _field_at(root: type[BaseModel], loc: tuple) -> tuple[Any, type[BaseModel] | None, str]:
    """(FieldInfo of the last key or None, model holding it, dotted key path) of an error
    location; list indices are written ``key[i]``, union tags are dropped."""
    model: type[BaseModel] | None = root
    holder, info, path = root, None, ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
            continue
        if model is not None:
            fields = {(f.alias or k): f for k, f in model.model_fields.items()}
            path += ("." if path else "") + str(item)
            holder = model
            if item not in fields:          # an unknown key of a table
                return None, holder, path
            info = fields[item]
            model = _unwrap(info.annotation)
            continue
        if info is not None and get_origin(_strip(info.annotation)) is dict:
            path += ("." if path else "") + str(item)     # a key of a free-form table
    return info, holder, path


def _strip(tp: Any) -> Any:
    """``dict[...]`` or the type inside Optional[...] / Annotated[...]."""
    for _ in range(6):
        args = get_args(tp)
        if get_origin(tp) is dict or not args:
            return tp
        if get_origin(tp) is Annotated or type(None) in args:
            tp = [a for a in args if a is not type(None)][0]
        else:
            return tp
    return tp


def _doc(info: Any) -> str | None:
    """The description of a field, or of the constrained type inside its annotation."""
    if info is None:
        return None
    if getattr(info, "description", None):
        return info.description
    todo = [info.annotation]
    while todo:
        tp = todo.pop(0)
        for meta in getattr(tp, "__metadata__", ()):
            if getattr(meta, "description", None):
                return meta.description
        todo.extend(a for a in get_args(tp) if a is not type(None))
    return None


def _requirement(err: dict, info: Any, holder: type[BaseModel] | None) -> str:
    kind = err["type"]
    if kind == "missing":
        return "is missing (required)"
    if kind == "extra_forbidden":
        allowed = sorted((f.alias or k) for k, f in holder.model_fields.items()) if holder else []
        return f"is not a known key; allowed: {allowed}"
    if kind == "literal_error":
        expected = str(err.get("ctx", {}).get("expected", "")).replace(" or ", ", ")
        return f"is not one of [{expected}]"
    desc = _doc(info)
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a table"
    if kind in ("list_type", "tuple_type"):
        return "must be a list" + (f" ({desc})" if desc else "")
    if kind == "bool_type":
        return "must be true or false"
    if kind in ("string_type", "string_too_short"):
        return "must be a non-empty string" if kind == "string_too_short" else "must be a string"
    if kind == "too_short":
        return "must not be empty" + (f" ({desc})" if desc else "")
    if desc and ";" in desc:
        return "must be " + desc.rsplit("; ", 1)[1] + f" ({desc.rsplit('; ', 1)[0]})"
    if desc:
        return f"is not allowed: {err['msg'][0].lower()}{err['msg'][1:]} ({desc})"
    return err["msg"][0].lower() + err["msg"][1:]


def describe(root: type[BaseModel], exc: ValidationError) -> tuple[str, Any, str]:
    """(key path, offending value, what is allowed) of the first error."""
    errors = exc.errors(include_url=False)
    # prefer an error whose location names a key over a union's alternative-type noise
    err = errors[0]
    info, holder, path = _field_at(root, tuple(err["loc"]))
    return path, err.get("input"), _requirement(err, info, holder)


def parse(root: type[BaseModel], raw: Any) -> tuple[BaseModel | None, tuple[str, Any, str] | None]:
    """(validated model, None), or (None, (key path, value, what is allowed)) of the first
    violation of ``root``: one validation pass for loaders that format their own message."""
    try:
        return root.model_validate(raw), None
    except ValidationError as exc:
        return None, describe(root, exc)


def violation(root: type[BaseModel], raw: Any) -> tuple[str, Any, str] | None:
    """(key path, value, what is allowed) of the first violation of ``root``, or None."""
    return parse(root, raw)[1]


def check(root: type[BaseModel], raw: Any, where: str, *, prefix: str = "") -> BaseModel:
    """Validate ``raw`` against ``root``; a violation is a one-line :class:`SpecError`:
    ``"{where}: {prefix}{key path} = {value} {what is allowed}"``."""
    try:
        return root.model_validate(raw)
    except ValidationError as exc:
        path, value, need = describe(root, exc)
        key = f"{prefix}{path}" if path else prefix.rstrip(".") or "file"
        if need.startswith("is missing"):
            raise SpecError(f"{where}: {key} {need}") from None
        raise SpecError(f"{where}: {key} = {show(value)} {need}") from None


# --------------------------------------------------------------------------------------------
# JSON Schema export
# --------------------------------------------------------------------------------------------


def json_schemas() -> dict[str, str]:
    """File name -> JSON Schema text of every input kind (as committed under docs/schema)."""
    out = {}
    for kind, model in SCHEMAS.items():
        schema = model.model_json_schema(by_alias=True)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://inference-factory/schema/{kind}.schema.json"
        schema["$comment"] = (f"generated by docs/schema/generate.py from "
                              f"inference_factory.schema with pydantic {PYDANTIC_VERSION}")
        out[f"{kind}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def write_json_schemas(folder: str | Path) -> list[Path]:
    """Write :func:`json_schemas` into ``folder`` (created if missing)."""
    from ..output.files import write_text_atomic

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for fname, text_ in json_schemas().items():
        write_text_atomic(folder / fname, text_)
        paths.append(folder / fname)
    return paths

