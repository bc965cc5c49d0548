"""Schema of the serving-engine profiles (``configs/serving_engines.toml``): how an engine
schedules a closed-loop benchmark (prefill policy, token budget per pass, request cap, poll
and stream intervals, host time), on which devices it runs with which settings, what it
supports there (attention DP, expert parallelism and its all-to-all, P/D and its KV
connector, MTP, weight and KV formats, instance size, CUDA-graph batch limit), which kernel
tables it runs on, and how it is launched. The loader is
:func:`inference_factory.specs.engines.load_serving_engine`.

Re-exported by :mod:`.schema`."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field

from ..bounds import MAX_BATCH, MAX_TOKENS
from .schema_base import Precision, _Schema, count, flag, nonempty, num, text

#: Host seconds per step or pass: a second is 10^4 x any published scheduler step.
MAX_HOST_S = 1.0

Mode = Literal["aggregated", "disaggregated"]
#: the expert-parallel dispatch / combine backends the costing knows (engine/ops.py, cost.py):
#: DeepEP's kernels (SGLang), AMD's MoRI-EP (costed as DeepEP), NCCL all-gather +
#: reduce-scatter (vLLM's default; TensorRT-LLM off NVL72), TensorRT-LLM's NVLink all-to-all
AllToAll = Literal["DeepEP", "MoRI-EP", "allgather_reducescatter", "NVLinkTwoSided"]


class SupportsEntry(_Schema):
    """What the engine runs on a device (each value read from a public recipe or the engine's
    own code, cited beside it). Every field is optional in a device table: a device takes
    the profile's ``[supports]`` and replaces the fields it names."""

    modes: Optional[list[Mode]] = Field(None, description="aggregated and/or disaggregated "
                                        "(prefill/decode pools with a KV transfer)")
    attention_dp: Optional[bool] = Field(None, description="attention data parallelism (dp > 1)")
    expert_parallel: Optional[bool] = Field(None, description="experts sharded over GPUs (ep > 1)")
    all_to_all: Optional[AllToAll] = Field(None, description="the expert-parallel "
                                           "dispatch/combine backend, as the engine names it")
    expert_parallel_spans_instance: Optional[bool] = Field(
        None, description="with expert parallelism the experts span every GPU of the "
        "instance (ep = tp x dp; vLLM), no separate EP size")
    kv_connector: Optional[str] = Field(None, description="the P/D KV-transfer backend")
    speculative: Optional[list[Literal["mtp", "draft-model"]]] = Field(
        None, description="speculative decoding it runs (mtp: the model's own MTP/EAGLE head)")
    two_batch_overlap: Optional[bool] = Field(None, description="two micro-batches overlap "
                                              "compute and communication (overlap = two-batch)")
    weight_formats: Optional[list[Precision]] = Field(None, description="weight formats it "
                                                      "runs on this device")
    kv_formats: Optional[list[Precision]] = Field(None, description="KV-cache formats")
    max_instance_gpus: Optional[int] = Field(None, ge=1, le=4096, description="GPUs of the "
                                             "largest instance (or P/D pool) it runs")
    cuda_graph_max_batch: Optional[int] = Field(None, ge=0, le=int(MAX_BATCH), description=(
        "largest decode batch captured in a CUDA/HIP graph (0: none); larger batches run eager"))
    kernel_tables: Optional[str] = Field(None, description="which measured kernel tables stand "
                                         "for its kernels")


class KvPoolEntry(_Schema):
    """What the engine does when its KV pool is full (``factory/kv_pool.py``): how it admits
    a waiting request, which running request it retracts (preempts) when a decode step finds
    no free tokens, and where that request waits. Every field is optional in a device
    table: a device replaces the fields it names."""

    admission: Optional[Literal["guaranteed", "ratio", "exact", "prompt"]] = Field(
        None, description="guaranteed: a request's prompt and whole output reserved (never "
        "full); ratio: SGLang's new-token ratio estimate; exact: SGLang's lockstep check of "
        "ignore-eos requests without a radix cache; prompt: vLLM V1, the prompt's blocks only")
    retract: Optional[Literal["fewest-output", "newest"]] = Field(
        None, description="the request retracted first: fewest generated tokens (longest "
        "prompt first), or the one admitted last")
    retract_speculative: Optional[Literal["fewest-output", "newest"]] = Field(
        None, description="the same with a draft (speculative decoding)")
    requeue: Optional[Literal["back", "front"]] = Field(
        None, description="where a retracted request waits in the queue")
    new_token_ratio_init: Optional[float] = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    new_token_ratio_min_factor: Optional[float] = Field(None, ge=0.0, le=1.0,
                                                        allow_inf_nan=False)
    new_token_ratio_decay_steps: Optional[int] = Field(None, ge=1, le=10_000_000)
    retract_decode_steps: Optional[int] = Field(None, ge=0, le=100_000)
    clip_max_new_tokens: Optional[int] = Field(None, ge=1, le=int(MAX_TOKENS))
    schedule_conservativeness: Optional[float] = Field(None, ge=0.0, le=100.0,
                                                       allow_inf_nan=False)
    conservativeness_dp_attention_factor: Optional[float] = Field(
        None, ge=0.0, le=100.0, allow_inf_nan=False)
    reserve_tokens_per_request: Optional[float] = Field(None, ge=0.0, le=1e6,
                                                        allow_inf_nan=False)
    no_admission_after_retract: Optional[bool] = Field(
        None, description="no request is admitted in an iteration that retracted (vLLM V1)")
    page_tokens: Optional[int] = Field(
        None, ge=1, le=4096, description="tokens a KV page (block) holds: a request holds whole "
        "pages (the attention backend's page size)")
    decode_check: Optional[Literal["boundary", "cover"]] = Field(
        None, description="free pages a decode step asks for: boundary (SGLang: the draft "
        "buffer's pages where a request's next tokens reach a page boundary), cover (vLLM: "
        "the pages that cover its next tokens and lookahead slots)")
    draft_in_pool: Optional[bool] = Field(
        None, description="whether the draft's weights and KV come out of the engine's "
        "kv_memory_fraction (false: SGLang sizes the target's pool first and loads the draft "
        "from the rest)")
    memory_fraction_factor: Optional[float] = Field(
        None, gt=0.0, le=1.0, allow_inf_nan=False, description="factor on kv_memory_fraction "
        "where the engine's context length (the model's, no --context-length) is above "
        "memory_fraction_factor_above_context (SGLang's aiter attention backend: 0.85 above "
        "8192); 1: none")
    memory_fraction_factor_above_context: Optional[int] = Field(
        None, ge=0, le=int(MAX_TOKENS), description="context length, tokens, above which "
        "memory_fraction_factor applies")


class _Scheduling(_Schema):
    kv_pool: Optional[KvPoolEntry] = Field(None, description="what the engine does when its "
                                           "KV pool is full")
    kv_memory_fraction: Optional[float] = Field(
        None, gt=0.0, le=1.0, allow_inf_nan=False, description="share of a GPU's memory the "
        "engine gives its weights and KV pool together (SGLang --mem-fraction-static: the pool "
        "is that share less the weights); unset: the engine's memory model (configs/realism.toml "
        "reserve)")
    prefill_tokens_per_pass: Optional[int] = Field(None, ge=1, le=int(MAX_TOKENS))
    prefill_tokens_per_pass_dp_attention: Optional[int] = Field(None, ge=1, le=int(MAX_TOKENS))
    max_running_requests: Optional[int] = Field(None, ge=1, le=int(MAX_BATCH))
    max_running_requests_speculative: Optional[int] = Field(None, ge=1, le=int(MAX_BATCH))
    recv_interval_steps: Optional[int] = Field(None, ge=1, le=10_000)
    recv_interval_steps_high: Optional[int] = Field(None, ge=1, le=10_000)
    recv_interval_high_from_concurrency: Optional[int] = Field(None, ge=1, le=int(MAX_BATCH))
    recv_interval_steps_dp_attention: Optional[int] = Field(None, ge=1, le=10_000)
    stream_interval_tokens: Optional[int] = Field(None, ge=1, le=10_000)
    host_s_per_decode_step: Optional[float] = Field(None, ge=0.0, le=MAX_HOST_S,
                                                    allow_inf_nan=False)
    host_s_per_prefill_pass: Optional[float] = Field(None, ge=0.0, le=MAX_HOST_S,
                                                     allow_inf_nan=False)


class DeviceEntry(_Scheduling):
    """One device the profile runs on: its source, the scheduling values its recipe sets
    differently from the profile's, what the engine supports there, extra launch flags.
    ``like = "B200"``: no recipe for this device; it takes that device's settings and every
    output says so."""

    source: nonempty("the recipe or code the device's values come from")
    like: Optional[str] = Field(None, min_length=1, description="a listed device whose settings "
                                "this one takes (no recipe of its own; labelled)")
    supports: Optional[SupportsEntry] = None
    flags: Optional[str] = Field(None, description="launch flags the device's recipe adds")


class LaunchEntry(_Schema):
    """The engine's own launch command, as text with ``{name}`` fields (model, tp, dp, ep,
    draft_depth, draft_tokens, max_running_requests, prefill_tokens, stream_interval,
    kv_connector) joined from the parts a deployment uses."""

    base: nonempty("the command and the flags every deployment takes")
    dp_attention: text("added with attention DP (dp > 1)") = ""
    expert_parallel: text("added with ep > 1") = ""
    speculative: text("added with a draft depth > 0") = ""
    kv_fp8: text("added with an FP8 KV cache") = ""
    two_batch_overlap: text("added with overlap = two-batch") = ""
    prefill: text("added to the prefill pool's command of a P/D deployment") = ""
    decode: text("added to the decode pool's command of a P/D deployment") = ""


class ServingEngineEntry(_Scheduling):
    description: text("what the profile stands for (engine, version, flags)")
    engine: nonempty("the engine family --engine NAME selects (sglang, vllm, trtllm, atom...)")
    version: nonempty("the engine version the settings are read from (--engine NAME@VERSION)")
    policy: Literal["prefill-first", "mixed"] = Field(
        description="prefill-first: a prefill pass runs on its own and decoding waits "
                    "(SGLang); mixed: prompt chunks fill each decode step's token budget (vLLM V1)")
    prefill_tokens_per_pass: count(1, int(MAX_TOKENS), "prompt tokens per prefill pass (or per "
                                   "mixed step), one DP rank")
    prefill_tokens_per_pass_dp_attention: count(1, int(MAX_TOKENS), "the same with DP attention")
    max_running_requests: count(1, int(MAX_BATCH), "requests in service per DP rank at most")
    recv_interval_steps: count(1, 10_000, "decode steps between polls for new requests")
    recv_interval_steps_high: count(1, 10_000, "the same from `recv_interval_high_from_concurrency`")
    recv_interval_high_from_concurrency: count(1, int(MAX_BATCH), "concurrency from which the "
                                               "high interval applies")
    recv_interval_steps_dp_attention: count(1, 10_000, "poll interval with DP attention")
    stream_interval_tokens: count(1, 10_000, "decode tokens per streamed chunk")
    host_s_per_decode_step: num(0.0, MAX_HOST_S, "host time a decode step adds to its GPU time, s")
    host_s_per_prefill_pass: num(0.0, MAX_HOST_S, "host time a prefill pass adds, s")
    dp_attention_divides_limits: flag("under DP attention the pass budget and the request "
                                      "cap are the instance's, divided among its DP ranks")
    search_by_default: bool = Field(True, description="plan searches it when no --engine is "
                                    "given")
    supports: SupportsEntry = Field(description="what it runs, unless a device says otherwise")
    fused_allreduce_norm: Optional[dict[str, bool]] = Field(
        None, description="whether it runs the TP all-reduce fused with the residual add and "
        "RMSNorm, by device name ('default': any other device; a `like` device takes its "
        "device's value); unset: as the device's all-reduce table says")
    devices: dict[str, DeviceEntry] = Field(min_length=1, description="the devices it runs on "
                                            "by hardware name ('*': any device)")
    launch: Optional[LaunchEntry] = None
    models: Optional[dict[str, list[Annotated[str, Field(min_length=1)]]]] = Field(
        None, description="model family ([model_families]) -> the devices it runs that "
        "family on ('*': every device; a `like` device takes its device's); a family of "
        "[model_families] not named here is refused; unset: no family restricted")
    model_supports: Optional[dict[str, SupportsEntry]] = Field(
        None, description="model family -> what the engine runs for that family, replacing "
        "the device's fields it names (e.g. no attention DP for a family its recipes run "
        "with tensor parallelism only)")


class ServingEnginesFile(_Schema):
    default: text("the engine (family or profile) used when none is named")
    model_families: Optional[dict[str, list[Annotated[str, Field(min_length=1)]]]] = Field(
        None, description="family -> the model names (or aliases) in it: the families a "
        "recipe or an engine's code names per device; a model in none is not restricted")
    engines: dict[str, ServingEngineEntry] = Field(description="profiles by name")
