"""Schema of the serving-engine profiles (``configs/serving_engines.toml``): how an engine
schedules a closed-loop benchmark (prefill policy, token budget per pass, request cap, poll
and stream intervals, host time). The loader is
:func:`inference_factory.specs.engines.load_serving_engine`.

Re-exported by :mod:`.schema`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..bounds import MAX_BATCH, MAX_TOKENS
from .schema_base import _Schema, count, flag, num, text

#: Host seconds per step or pass: a second is 10^4 x any published scheduler step.
MAX_HOST_S = 1.0


class ServingEngineEntry(_Schema):
    description: text("what the profile stands for (engine, version, flags)")
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


class ServingEnginesFile(_Schema):
    default: text("the profile used when none is named")
    engines: dict[str, ServingEngineEntry] = Field(description="profiles by name")
