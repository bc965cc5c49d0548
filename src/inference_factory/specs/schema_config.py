"""Schemas of the factory config (``configs/factory.toml`` and friends), of sweep files
(``configs/sweeps/*.toml``) and of the price list (``configs/prices.toml``).

Re-exported by :mod:`.schema`."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import ConfigDict, Field, WithJsonSchema

from .schema_base import (MAX_BATCH_PER_GPU, MAX_GPUS, MAX_RATE_PER_S, MAX_REQUESTS,
                          MAX_SYSTEM_PROMPTS, MAX_TOKENS, MAX_TOKENS_PER_DAY,
                          MAX_TURNS_MEAN, MAX_USD, _Schema, count, flag, names,
                          nonempty, num, text)


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
    price_basis: Optional[nonempty("price basis of a rental (configs/price_bases.toml name, "
                                   "'hardware-file', a table file, or NAME,FALLBACK); used "
                                   "when rental_usd_per_gpu_hour is unset")] = None
    power_basis: Optional[Literal["gpu-tdp-pue", "all-in-provisioned"]] = Field(
        None, description="power counted in tokens/s per MW")
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


class ConfigPublished(_Schema):
    """What the operator the scenario describes published about the same day (system-level
    figures: printed beside simulate's prediction as a check, never read by the model); each
    key is the simulate metric of the same name. Not inherited through ``extends``."""

    source: Optional[nonempty("source tag of docs/REFERENCES.md the figures are from "
                              "(required with any figure)")] = None
    input_tokens_per_day: Optional[num(0.0, MAX_TOKENS_PER_DAY, "input tokens per day")] = None
    output_tokens_per_day: Optional[num(0.0, MAX_TOKENS_PER_DAY, "output tokens per day")] = None
    kv_tokens_per_output_token: Optional[num(0.0, 1e8, "KV tokens read per output token")] = None
    decode_tokens_per_s_per_gpu: Optional[num(0.0, 1e9, "output tokens/s per decoding GPU")] = None
    prefill_tokens_per_s_per_gpu: Optional[num(0.0, 1e9, "input tokens/s per prefilling GPU "
                                                        "(cache hits included)")] = None
    gpus_avg: Optional[num(0.0, MAX_GPUS, "GPUs, average over the day")] = None
    gpus_peak: Optional[num(0.0, MAX_GPUS, "GPUs, peak")] = None
    nodes_avg: Optional[num(0.0, MAX_GPUS, "nodes, average over the day")] = None
    nodes_peak: Optional[num(0.0, MAX_GPUS, "nodes, peak")] = None
    revenue_usd_per_day: Optional[num(0.0, MAX_USD, "revenue, USD per day")] = None
    cost_usd_per_day: Optional[num(0.0, MAX_USD, "cost, USD per day")] = None
    cost_profit_margin: Optional[num(-1.0, 1e6, "(revenue - cost) / cost")] = None


class FactoryConfigFile(_Schema):
    """A factory scenario config (``configs/factory.toml``; every key in docs/CONFIG.md)."""

    extends: Optional[text("config file this one inherits unset keys from (a file, relative "
                           "to this one; no cycles)")] = None
    baseline: Optional[text("config file compare runs against")] = None
    name: Optional[nonempty("scenario name")] = None
    description: Optional[text("one-line description")] = None
    engine: Optional[nonempty("serving-engine profile of configs/serving_engines.toml "
                              "(default: its default profile)")] = None
    model: Optional[ConfigModel] = None
    workload: Optional[ConfigWorkload] = None
    prefill: Optional[ConfigPrefill] = None
    decode: Optional[ConfigDecode] = None
    levers: Optional[ConfigLevers] = None
    slo: Optional[ConfigSlo] = None
    fleet: Optional[ConfigFleet] = None
    economics: Optional[ConfigEconomics] = None
    published: Optional[ConfigPublished] = None


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
    engine: Optional[nonempty("serving-engine profile of configs/serving_engines.toml, named "
                              "in the result (the per-step engine uses none of its "
                              "settings)")] = None


class SweepEconomics(_Schema):
    price: Optional[nonempty("price id of configs/prices.toml")] = None
    cost_basis: Optional[Literal["capex", "rental", "tco"]] = None
    price_basis: Optional[nonempty("price basis (configs/price_bases.toml name, "
                                   "'hardware-file', a table file, or NAME,FALLBACK)")] = None
    power_basis: Optional[Literal["gpu-tdp-pue", "all-in-provisioned"]] = Field(
        None, description="power counted in tokens/s per MW")
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
# price list (configs/prices.toml)
# --------------------------------------------------------------------------------------------

_USD_PER_MTOK = lambda doc: num(0.0, MAX_USD, f"{doc}, USD per million tokens")  # noqa: E731


class PriceRow(_Schema):
    id: text("price id (what a factory config's price and --price name)")
    model: text("model spec the price applies to")
    provider: Optional[text("who lists the price")] = None
    date: text("when the price was listed")
    input_cache_hit_usd_per_mtok: _USD_PER_MTOK("input price on a prefix-cache hit")
    input_cache_miss_usd_per_mtok: _USD_PER_MTOK("input price on a cache miss")
    output_usd_per_mtok: _USD_PER_MTOK("output price")
    source: text("where the price comes from")


class PricesFile(_Schema):
    price: list[PriceRow] = Field(default_factory=list, description="dated API list prices")


_BASIS_NAME = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                                   description="basis name (letters, digits, - _ .)")]


class PriceBasisTable(_Schema):
    name: _BASIS_NAME
    description: text("what the figures are (rental, ownership...), and what they include")
    date: text("when the figures were published")
    source: text("source id and where the figures come from")
    usd_per_gpu_hour: Annotated[dict[str, num(0.0, 1e4, "all-in USD per GPU-hour",
                                              lo_open=True)], Field(
        min_length=1, description="hardware spec name -> all-in USD per GPU-hour")]


class PowerBasisTable(_Schema):
    name: _BASIS_NAME
    description: text("what the power figure counts")
    date: text("when the figures were published")
    source: text("source id and where the figures come from")
    kw_per_gpu: Annotated[dict[str, num(0.0, 1e3, "facility kW per GPU", lo_open=True)], Field(
        min_length=1, description="hardware spec name -> provisioned facility kW per GPU")]


class PriceBasesFile(_Schema):
    """``configs/price_bases.toml`` or a user's table: price bases (all-in USD per GPU-hour
    per device, one source and date each) and power bases (facility kW per GPU)."""

    price_basis: list[PriceBasisTable] = Field(default_factory=list,
                                               description="price bases")
    power_basis: list[PowerBasisTable] = Field(default_factory=list,
                                               description="power bases")
