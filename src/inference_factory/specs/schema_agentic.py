"""Schema of the session replay's method constants (``configs/agentic.toml``): the replay
harness's idle-gap cap, InferenceX's DRAM offload rule, a hybrid model's snapshot
granularity and the pricing of cached input. Read by
:func:`inference_factory.analysis.bench.replay_sim.agentic_constants`.

Re-exported by :mod:`.schema`."""

from __future__ import annotations

from .schema_base import MAX_TOKENS, _Schema, count, num


class AgenticReplay(_Schema):
    idle_gap_cap_s: num(0.0, 86_400.0, "per-trajectory cap of a think / end-to-start gap, "
                                       "seconds (AIPerf's trace idle-gap cap)")


class AgenticDramOffload(_Schema):
    server_cap_bytes: num(0.0, 1e15, "CPU DRAM a server may give the KV offload tier at "
                                     "most, bytes (decimal)")
    utilization: num(0.0, 1.0, "share of that DRAM the tier uses", lo_open=True)


class AgenticHybridSnapshot(_Schema):
    track_interval_tokens: count(1, MAX_TOKENS, "tokens between a hybrid model's recurrent-"
                                                "state snapshots inside a prompt")
    states_per_path: count(1, 1_024, "state snapshots kept per radix path")


class AgenticPricing(_Schema):
    cached_input_fraction: num(0.0, 1.0, "price of a cached input token over a fresh one")


class AgenticFile(_Schema):
    replay: AgenticReplay
    dram_offload: AgenticDramOffload
    hybrid_snapshot: AgenticHybridSnapshot
    pricing: AgenticPricing
