"""What a session replay reports per concurrency, per turn drawn as :mod:`.metrics` draws
``bench``'s requests (the same poll, queue and stall draws), with each turn's own prompt,
hit and output; and the economics of reuse.

Key names follow AIPerf's export where it has one (``request_throughput``,
``output_token_throughput``, ``time_to_first_token``, ``inter_token_latency``,
``request_latency`` with ``avg``/``p50``/``p90``/``p99`` in ms, flattened to
``<metric>_<stat>_ms``); the rest are this project's (``_per_gpu``, ``prefix_hit_rate_*``,
``e2e_normalized_interactivity_p90``: InferenceX MODELS.md "AgentX Guidelines",
``1 / P90_i(E2EL_i / OSL_i)``)."""

from __future__ import annotations

import numpy as np

from ...errors import SpecError
from ...kernels import serving as ks
from ...units import SECONDS_PER_HOUR


def turn_metrics(st, s, sched, start, scale, restore, hits, decode, prefill, eng, *,
                 pass_max: float, concurrency: int, engine_time: bool, seed: int,
                 ranks: int, transfer=0.0, colocated: bool = True,
                 keep: bool = False) -> dict:
    """Per-turn TTFT, TPOT and E2E drawn at the loop state ``st`` (one concurrency);
    ``transfer``: each turn's KV transfer to the decode pool (P/D), seconds."""
    n = s.n_turns
    rng = np.random.default_rng(seed)
    u_poll, u_busy, u_queue, u_wait, u_first = (rng.random(n) for _ in range(5))
    f = lambda a: float(np.asarray(a).reshape(-1)[0])  # noqa: E731
    td, tau = f(st.decode_step_s), decode.tokens_per_step
    busy = f(st.busy_probability)
    window = 2.0 * f(st.poll_wait_s) / max(busy, 1e-12)
    poll = np.where(u_busy < busy, u_poll * window, 0.0)
    rho = min(max(f(st.prefill_utilization), 1e-12), 0.999)
    queue = np.where(u_queue < rho, -np.log1p(-u_wait) * f(st.queue_wait_s) / rho, 0.0)
    own = f(st.pass_s) * scale
    if eng.prefill_mixes_with_decode(colocated):
        own = (f(st.ttft_s) - f(st.poll_wait_s) - f(st.queue_wait_s) - f(st.cap_wait_s)) * scale
    ttft = poll + queue + np.maximum(own, restore) + f(st.cap_wait_s) + transfer
    # the first wave: lanes that start together on an idle engine, back-to-back passes
    wave = sched.first_turn & (start == 0.0)
    wave_n = concurrency / min(float(ranks), concurrency)
    k1 = min(wave_n, pass_max)
    passes = np.ceil(wave_n / k1)
    t1 = float(prefill.prefill_pass_s(k1))
    ttft_wave = (np.floor(u_first * passes) + 1.0) * t1 * scale + f(st.cap_wait_s) + transfer
    ttft = np.where(wave, np.maximum(ttft_wave, ttft), ttft)
    out = s.output_tokens.astype(float)
    decode_s = (out - 1.0) * f(st.tpot_s)
    stall = rng.poisson(np.maximum(f(st.passes_per_s) * decode_s, 0.0)) * f(st.pass_s)
    tpot = np.where(out > 1, td / tau + stall / np.maximum(out - 1.0, 1.0), np.nan)
    if st.retracted_wait_s is not None and np.any(st.retracted_wait_s > 0):
        back = ks.retracted_wait_s(mean_wait_s=f(st.retracted_wait_s),
                                   retractions_per_request=f(st.retractions_per_request),
                                   draw=rng.random(n))
        tpot = tpot + back / np.maximum(out - 1.0, 1.0)
    e2e = ttft + (out - 1.0) * np.nan_to_num(tpot)
    res: dict = {"sessions_completed": s.n_sessions, "request_count": n}
    for name, a in (("time_to_first_token", ttft), ("inter_token_latency", tpot),
                    ("request_latency", e2e)):
        res[f"{name}_avg_ms"] = float(np.nanmean(a)) * 1e3
        for q in (50, 90, 99):
            res[f"{name}_p{q}_ms"] = float(np.nanpercentile(a, q)) * 1e3
    res["e2e_normalized_interactivity_p90"] = 1.0 / float(np.percentile(e2e / out, 90))
    inp = s.input_tokens.astype(float)
    res["total_input_tokens"] = float(inp.sum())
    res["total_cached_input_tokens"] = float(hits.sum())
    res["total_output_tokens"] = float(out.sum())
    res["prefix_hit_rate"] = float(hits.sum() / inp.sum())
    for t, name in enumerate(("hbm", "dram", "nvme")):
        res[f"prefix_hit_rate_{name}"] = float(hits[t].sum() / inp.sum())
    res["_e2e_sum_s"] = float(e2e.sum())
    if keep:
        res["turns"] = dict(ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, start_s=start,
                            restore_s=np.asarray(restore, float) * np.ones(n),
                            hit_tokens_hbm=hits[0], hit_tokens_dram=hits[1],
                            hit_tokens_nvme=hits[2])
    return res


def economics(points: list[dict], hw, *, cached_input_fraction=None, price=None,
              model=None) -> None:
    """Throughputs per GPU, $ per million tokens and revenue per GPU-hour, in place.

    Revenue bills fresh input at the price's cache-miss rate, cached input at
    ``cached_input_fraction`` of it (configs/agentic.toml [pricing], default 0.10) and output
    at the output rate; cost is the hardware file's rental $/GPU-hour."""
    from ...specs.prices import resolve_price
    from .replay_sim import agentic_constants

    frac = (agentic_constants()["pricing"]["cached_input_fraction"]
            if cached_input_fraction is None else float(cached_input_fraction))
    if not 0.0 <= frac <= 1.0:
        raise SpecError(f"cached_input_fraction = {frac!r} must be in [0, 1]")
    pr = resolve_price(price or "deepseek-v3.1-2025-09")
    gpu_hour = float(hw.price.get("rental_usd_per_gpu_hour", np.nan))
    for p in points:
        dur, g = p["duration"], p["num_gpus"]
        fresh = p["total_input_tokens"] - p["total_cached_input_tokens"]
        p["request_throughput"] = p["request_count"] / dur
        p["output_token_throughput"] = p["total_output_tokens"] / dur
        p["input_tokens_per_s_per_gpu"] = p["total_input_tokens"] / dur / g
        p["cached_input_tokens_per_s_per_gpu"] = p["total_cached_input_tokens"] / dur / g
        p["output_tokens_per_s_per_gpu"] = p["total_output_tokens"] / dur / g
        p["total_tokens_per_s_per_gpu"] = (p["total_input_tokens"] + p["total_output_tokens"]) \
            / dur / g
        rev = (fresh * pr.input_cache_miss_usd_per_mtok
               + p["total_cached_input_tokens"] * frac * pr.input_cache_miss_usd_per_mtok
               + p["total_output_tokens"] * pr.output_usd_per_mtok) / 1e6
        cost = gpu_hour * g * dur / SECONDS_PER_HOUR
        p["revenue_usd_per_gpu_hour"] = rev / (g * dur / SECONDS_PER_HOUR)
        p["cost_usd_per_gpu_hour"] = gpu_hour
        p["cost_usd_per_mtok_output"] = cost / p["total_output_tokens"] * 1e6
        p["cost_usd_per_mtok_total"] = cost / (p["total_input_tokens"]
                                               + p["total_output_tokens"]) * 1e6
        p["cached_input_fraction"] = frac
        p["price_id"] = pr.id
