"""Run one request trace through one serving configuration ("side"): baseline or factory.

Every throughput figure comes from the roofline engine (:func:`inference_factory.evaluate`,
on arrays: :func:`inference_factory.engine.evaluate_arrays`);
this module adds no physics of its own. It decides *operating points* (decode batch, draft
depth per class, prefill chunk) from engine grids, sizes the fleet with Little's law and the
diurnal load, turns the trace's prefix reuse into cache hits (exact LRU simulation over the
HBM/DRAM/NVMe tiers), and prices the result. The decode operating point is chosen in
:mod:`.operating_point`; what a side takes from its config and trace is in :mod:`.side_inputs`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine import evaluate_arrays
from ..engine import architecture
from ..errors import SpecError
from ..kernels import cache as kcache
from ..kernels import economics as kecon
from ..kernels import moe as kmoe
from ..kernels import queueing as kq
from ..kernels import serving as kserv
# the serving formulas live in kernels/serving.py; these names stay importable from here
from ..kernels.serving import prefill_busy_share, prompt_queue_wait_s, static_fill_time_s
from ..specs import load_hardware, load_model
from ..specs.prices import allin_kw_per_gpu
from ..units import SECONDS_PER_DAY, SECONDS_PER_HOUR
from .config import FactoryConfig
from .kvcache import simulate_prefix_cache
# the decode operating point and the side's inputs live next door; importable from here too
from .operating_point import (DecodeGrid, DecodePoint, _on_grid,  # noqa: F401
                              array_key, decode_grid, decode_point, memoised,
                              prefill_arrays, static_batch_index)
from .side_inputs import (tier_capacity_tokens, arrival_rate_per_s,  # noqa: F401
                          arrival_rate_source, config_trace, expert_popularity,
                          lever_precisions, static_batch_efficiency, with_config_class_params,
                          _engine_realism, _serving_engine)
from .workload import Trace


@dataclass
class SideResult:
    """Metrics of one side (ordered, JSON-ready) plus per-request arrays for percentiles."""

    name: str
    metrics: dict[str, Any]
    per_request: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    cache: Any = field(default=None, repr=False)
    decode_grid: Any = field(default=None, repr=False)
    context: dict = field(default_factory=dict, repr=False)   # what lever studies re-evaluate


def _diurnal_factors(amplitude: float) -> np.ndarray:
    """Hourly load relative to the mean over one day, at each hour's midpoint."""
    return kserv.diurnal_load_factor(hour_of_day=np.arange(24) + 0.5, amplitude=amplitude)


def _weighted_percentiles(values: np.ndarray, weights: np.ndarray, q) -> tuple[float, ...]:
    """Percentiles of a weighted sample (lower value at each cumulative-weight threshold)."""
    order = np.argsort(values, kind="stable")
    v, cw = values[order], np.cumsum(weights[order])
    return tuple(float(v[min(np.searchsorted(cw, p / 100.0 * cw[-1]), v.size - 1)]) for p in q)


def simulate(cfg: FactoryConfig, trace: Trace | None = None, *, name: str | None = None,
             cache_memo: dict | None = None, cache_result=None, realism=None) -> SideResult:
    """Serve ``trace`` (default: the config's synthetic or loaded trace) with ``cfg``.

    ``cache_result`` reuses the prefix-cache simulation of another side on the same trace
    (the attribution holds cache capacity fixed while it switches a non-cache lever).
    ``realism`` replaces the engine's realism constants in every engine call (the bands of
    :func:`inference_factory.factory.bands.simulate_bands` pass a perturbed one)."""
    m = load_model(cfg.model)
    lv = cfg.levers
    eng = _serving_engine(cfg)
    if trace is None:
        trace = config_trace(cfg)
    trace = with_config_class_params(trace, cfg)
    dpool = cfg.decode
    ppool = cfg.prefill if lv.pd_split else dataclasses.replace(
        cfg.decode, tokens_per_gpu=cfg.prefill.tokens_per_gpu)
    hw_d, hw_p = load_hardware(dpool.hardware), load_hardware(ppool.hardware)
    prec_d, prec_p = lever_precisions(m, hw_d, lv), lever_precisions(m, hw_p, lv)
    overlap = "two-batch" if lv.overlap else "none"
    # redundant experts rebalance expert-parallel ranks; without EP they only take HBM
    redundant_d, redundant_p = (lv.redundant_experts if (lv.expert_balancing and m.is_moe
                                                          and pool.ep > 1) else 0
                                for pool in (dpool, ppool))
    n_cls = len(trace.class_names)
    # one class: its Zipf popularity in the engine's own placement order (the one
    # realism.toml's default skew is fitted in), as evaluate and plan use it; several: each
    # class's hot set on its own seeded permutation, mixed
    pop = (kmoe.zipf_popularity(n_experts=m.n_routed_experts, skew=float(trace.expert_skew[0]))
           if m.is_moe and n_cls == 1 else memoised(
               cache_memo, ("expert_popularity", id(m), id(trace), cfg.workload.seed), (m, trace),
               lambda: expert_popularity(m, trace, cfg.workload.seed)))

    inp = trace.input_tokens.astype(float)
    out = trace.output_tokens.astype(float)
    out_share = np.bincount(trace.class_id, weights=out, minlength=n_cls) / out.sum()
    kv_len = float(kserv.token_weighted_decode_context_tokens(input_tokens=inp, output_tokens=out))

    # ---- decode grid (operating point chosen below, once the arrival rate is known)
    # the engine's kernel choices on each pool's device (its all-to-all, its fusions), as plan
    # and bench take them
    rl_d, rl_p = (_engine_realism(cfg, h, realism) for h in (hw_d, hw_p))
    kw_d = dict(overlap=overlap, redundant_experts=redundant_d,
                **({} if rl_d is None else {"realism": rl_d}))
    rl_kw = {} if rl_p is None else {"realism": rl_p}
    dgrid = decode_grid(cfg, m, dpool, prec_d, kw_d, trace, kv_len, out_share, lv, pop,
                        memo=cache_memo)
    rate_mean = arrival_rate_per_s(cfg, trace)

    # ---- prefill: first pass sized without cache hits, to size the cache tiers
    p_bar = float(kserv.token_weighted_prompt_tokens(input_tokens=inp))
    rho = min(cfg.target_utilization, 0.99)

    def prefill_rate(hit: float, rho: float = rho):
        """Prefill operating point: the largest chunk (tokens per GPU per pass, up to the
        pool's tokens_per_gpu) whose p99 TTFT (waiting for the next pass, one pass, and the
        p99 of the M/G/1 prompt queue's wait that the draws below follow) meets the SLO."""
        chunks = np.unique(np.geomspace(512, max(ppool.tokens_per_gpu, 512), 12).round())
        per_prompt = max((1.0 - hit) * p_bar, 1.0)
        b = np.maximum(chunks * ppool.tp / per_prompt, 1.0)
        pbs = np.unique(b)
        key = ("prefill", id(m), ppool, tuple(sorted(prec_p.items())), overlap, redundant_p,
               p_bar, array_key(pbs), min(hit, 0.999), array_key(pop), id(rl_p))
        t, r, w_bytes = memoised(cache_memo, key, (m, rl_p), lambda: prefill_arrays(
            m, ppool, prec_p, overlap, redundant_p, p_bar, pbs, min(hit, 0.999), pop, rl_kw))
        # the wait scales with the mean service (1 - hit) I / R at a fixed rho: one law
        w99 = kq.mg1_wait_quantile_s(quantile=0.99, utilization=rho, service_s=inp / inp.mean())
        ok = w99 * (1.0 - hit) * inp.mean() / (r * ppool.unit_gpus) + 2.0 * t <= cfg.ttft_slo_s
        i = int(np.flatnonzero(ok)[-1]) if ok.any() else 0
        bb = float(pbs[i])
        return float(r[i]), float(t[i]), w_bytes, bb * per_prompt

    rate0, t_pass0, w_bytes_p, _ = prefill_rate(0.0)

    static_eff_by_batch: dict[int, float] = {}

    def choose_decode(tpot_budget_s: float):
        """Decode operating point and its throughput (static batching's efficiency applied)
        for a TPOT budget (the SLO, over the colocated interference factor)."""
        if lv.continuous_batching:
            pt = decode_point(dgrid, tpot_budget_s)
            return pt, 1.0, pt.tput_per_gpu
        idx = static_batch_index(dgrid, dpool, rate_mean, cfg.ttft_slo_s - t_pass0, tpot_budget_s)
        pt = decode_point(dgrid, tpot_budget_s, batch_index=idx)
        n = int(pt.batch * dpool.dp)           # the colocated search asks the same few again
        eff = static_eff_by_batch.get(n)
        if eff is None:
            eff = static_eff_by_batch[n] = static_batch_efficiency(trace.output_tokens, n)
        return pt, eff, pt.tput_per_gpu * eff

    dp_, static_eff, decode_tput = choose_decode(cfg.tpot_slo_s)
    gpus_p0 = kserv.provisioned_gpus(busy_gpus=rate_mean * inp.mean() / rate0,
                                     target_utilization=cfg.target_utilization,
                                     unit_gpus=ppool.unit_gpus)
    caps = tier_capacity_tokens(m, ppool, lv, prec_p["kv_precision"], w_bytes_p, float(gpus_p0))
    # a model with per-sequence state keeps a snapshot with each cached item (0 for KV only)
    snapshot_tokens = (math.ceil(architecture(m).snapshot_tokens(prec_p["kv_precision"]))
                       if lv.prefix_cache else 0)
    res = None
    fixed_hit = lv.cache_hit_rate if lv.prefix_cache else None
    if fixed_hit is not None:
        # scenario-fixed hit rate: every request hits the same share of its prompt, served
        # from the slowest configured tier (DeepSeek's on-disk cache)
        hit_tok = np.floor(inp * fixed_hit)
        slowest = [t for t in ("hbm", "dram", "nvme") if t in lv.cache_tiers][-1]
        tier_tok = {t: hit_tok if t == slowest else np.zeros_like(inp) for t in ("hbm", "dram", "nvme")}
    elif lv.prefix_cache:
        key = (id(trace), tuple(round(c, -3) for c in caps), snapshot_tokens)
        res = cache_result
        if res is None and cache_memo is not None:
            res = cache_memo.get(key)
        if res is None:
            res = simulate_prefix_cache(trace, capacity_tokens=caps,
                                        snapshot_tokens=snapshot_tokens)
            if cache_memo is not None:
                cache_memo[key] = res
        hit_tok = res.hit_tokens.astype(float)
        tier_tok = {"hbm": res.hit_tokens_hbm, "dram": res.hit_tokens_dram,
                    "nvme": res.hit_tokens_nvme}
    else:
        hit_tok = np.zeros_like(inp)
        tier_tok = {t: np.zeros_like(inp) for t in ("hbm", "dram", "nvme")}
    hit_rate = float(hit_tok.sum() / inp.sum())
    computed = inp - hit_tok
    rho_p = rho
    if not lv.pd_split:
        # colocated, prefill-first scheduling (vLLM / SGLang default): a prompt queues only
        # behind other prompts, so its server is busy the prefill share of the busy time
        rate_c, *_ = prefill_rate(hit_rate)
        rho_p = rho * prefill_busy_share(prefill_s_per_request=computed.mean() / rate_c,
                                         decode_s_per_request=out.mean() / decode_tput)
    rate_p, t_pass, _, chunk_tokens = prefill_rate(hit_rate, rho_p)
    interference = 1.0
    if not lv.pd_split:
        # colocated: prefill passes interleave with decode steps and stretch every TPOT by
        # f = 1 / (1 - prefill share), and the share grows with the decode rate. The decode
        # point is the fastest one that holds the SLO at its own f: for each candidate f the
        # point chosen for the budget SLO / f is feasible when its own f' <= f.
        best = None
        g_p, out_mean = float(computed.mean()) / rate_p, float(out.mean())
        for f_try in np.geomspace(1.0, 50.0, 200):   # steps of 2 %
            pt, eff, tput = choose_decode(cfg.tpot_slo_s / f_try)
            f_own = kserv.colocated_tpot_stretch(prefill_share=prefill_busy_share(
                prefill_s_per_request=g_p, decode_s_per_request=out_mean / tput))
            if pt.meets_slo and f_own <= f_try and (best is None or tput > best[2]):
                best = (pt, eff, tput)
        if best is not None:
            dp_, static_eff, decode_tput = best
        else:   # nothing holds the SLO: the smallest step (reported as missing it)
            dp_, static_eff, decode_tput = choose_decode(0.0)

    # ---- GPU time per request (busy), colocation, fleet
    gs_prefill = computed / rate_p                  # GPU-seconds per request
    gs_decode = out / decode_tput
    util = cfg.target_utilization
    f = _diurnal_factors(cfg.workload.diurnal_amplitude)
    load_p = kserv.busy_gpus(arrival_rate_per_s=rate_mean, gpu_s_per_request=gs_prefill.mean(),
                             load_factor=f)          # busy GPUs needed per hour
    load_d = kserv.busy_gpus(arrival_rate_per_s=rate_mean, gpu_s_per_request=gs_decode.mean(),
                             load_factor=f)
    if lv.pd_split:
        gpus_p = kserv.provisioned_gpus(busy_gpus=load_p, target_utilization=util,
                                        unit_gpus=ppool.unit_gpus)
        gpus_d = kserv.provisioned_gpus(busy_gpus=load_d, target_utilization=util,
                                        unit_gpus=dpool.unit_gpus)
    else:
        gpus_p = np.zeros(24)
        gpus_d = kserv.provisioned_gpus(busy_gpus=load_p + load_d, target_utilization=util,
                                        unit_gpus=dpool.unit_gpus)
        interference = float(kserv.colocated_tpot_stretch(prefill_share=prefill_busy_share(
            prefill_s_per_request=gs_prefill.mean(), decode_s_per_request=gs_decode.mean())))
    gpus = gpus_p + gpus_d
    busy_d = load_d / gpus_d if lv.pd_split else (load_p + load_d) / gpus_d
    busy_p = load_p / np.maximum(gpus_p, 1e-12)

    # ---- latency per request
    hour = trace.hour_of_day
    occ_h = kserv.decode_occupancy_sequences(operating_batch=dp_.batch, busy_frac=busy_d,
                                             target_utilization=util)     # batch per DP rank
    step_ch = np.array([np.interp(occ_h, dp_.grid_batch, dp_.grid_step_by_class[c])
                        for c in range(n_cls)])                            # (class, hour)
    w = out_share[:, None]
    step_h = (w * step_ch).sum(axis=0)
    tpot = step_h[hour] / dp_.tokens_per_step[trace.class_id] * interference
    static_wait = 0.0
    if not lv.continuous_batching:
        # a request waits for its static batch to fill: uniformly up to the fill time of
        # batch x dp sequences at the fleet's arrival rate (requests go to the filling one)
        fill = static_fill_time_s(batch_sequences=dp_.batch * dpool.dp, arrival_rate_per_s=rate_mean)
        static_wait = np.random.default_rng(cfg.workload.seed + 2).random(trace.n_requests) * fill
    # queueing delay: the FCFS M/G/1 wait of a deployment unit's prompt queue, each prompt
    # costing its computed tokens over the unit's tokens/s, plus the wait for the next pass
    # to start (uniform over one pass), drawn from the trace seed
    rng = np.random.default_rng(cfg.workload.seed + 1)
    wait = kq.mg1_wait_draws_s(uniforms=rng.random(trace.n_requests), utilization=rho_p,
                               service_s=computed / (rate_p * ppool.unit_gpus))
    wait = wait + rng.random(trace.n_requests) * t_pass
    passes = np.maximum(np.ceil(computed / max(chunk_tokens, 1.0)), 1.0)
    kv_tok = architecture(m).kv_bytes_per_token(prec_p["kv_precision"])
    tier_bw = {"hbm": hw_p.hbm_bw_bytes_per_s, "dram": hw_p.host_dram_bw_bytes_per_s,
               "nvme": hw_p.nvme_bw_bytes_per_s / hw_p.gpus_per_node}
    # a hit restores its KV and, for a model with per-sequence state, one state snapshot:
    # the one at the end of the hit, in the slowest tier that holds part of it
    last = {t: tier_tok[t] > 0 for t in ("hbm", "dram", "nvme")}
    last["hbm"] = last["hbm"] & ~last["dram"] & ~last["nvme"]
    last["dram"] = last["dram"] & ~last["nvme"]
    restore = sum(kcache.kv_restore_s(restored_tokens=tier_tok[t].astype(float)
                                      + snapshot_tokens * last[t],
                                      kv_bytes_per_token=kv_tok, tier_bytes_per_s=tier_bw[t])
                  for t in ("dram", "nvme"))
    ttft = wait + static_wait + np.maximum(passes * t_pass, restore)
    # over the whole day: a trace covers part of it, so each request's class is served at
    # every hour's occupancy, weighted by that hour's load (TTFT does not depend on the hour)
    tpot_ch = step_h[None, :] / dp_.tokens_per_step[:, None] * interference   # (class, hour)
    n_c = np.bincount(trace.class_id, minlength=n_cls).astype(float)
    ttft_q = np.percentile(ttft, [50, 99])      # one partition for both
    tpot_p50, tpot_p99 = _weighted_percentiles(tpot_ch.ravel(), (n_c[:, None] * f[None, :]).ravel(),
                                               (50, 99))
    ttft_ok_tokens = np.bincount(trace.class_id, weights=out * (ttft <= cfg.ttft_slo_s),
                                 minlength=n_cls)
    goodput = float((ttft_ok_tokens[:, None] * (tpot_ch <= cfg.tpot_slo_s) * f[None, :]).sum()
                    / (out.sum() * f.sum()))

    # ---- economics per day at the mean arrival rate
    ec = cfg.economics
    req_per_day = rate_mean * SECONDS_PER_DAY
    scale = req_per_day / trace.n_requests
    p = cfg.price
    revenue = scale * kecon.revenue_usd(
        input_hit_tokens=hit_tok.sum(), input_miss_tokens=computed.sum(), output_tokens=out.sum(),
        usd_per_mtok_input_hit=p.input_cache_hit_usd_per_mtok,
        usd_per_mtok_input_miss=p.input_cache_miss_usd_per_mtok,
        usd_per_mtok_output=p.output_usd_per_mtok)
    power_p = kecon.gpu_power_w(tdp_w=hw_p.tdp_w, busy_frac=busy_p, idle_frac_of_tdp=ec.idle_frac_of_tdp,
                                busy_frac_of_tdp=ec.prefill_frac_of_tdp) * gpus_p
    if lv.pd_split:
        power_d = kecon.gpu_power_w(tdp_w=hw_d.tdp_w, busy_frac=busy_d,
                                    idle_frac_of_tdp=ec.idle_frac_of_tdp,
                                    busy_frac_of_tdp=ec.decode_frac_of_tdp) * gpus_d
    else:   # colocated: busy time split between the phases' power draws
        share_p = load_p / np.maximum(load_p + load_d, 1e-12)
        frac = ec.prefill_frac_of_tdp * share_p + ec.decode_frac_of_tdp * (1 - share_p)
        power_d = kecon.gpu_power_w(tdp_w=hw_d.tdp_w, busy_frac=busy_d,
                                    idle_frac_of_tdp=ec.idle_frac_of_tdp, busy_frac_of_tdp=frac) * gpus_d
    power_w = power_p + power_d                                            # per hour of the day
    energy = float(kecon.energy_usd_per_hour(power_w=power_w, pue=ec.pue,
                                             usd_per_kwh=ec.usd_per_kwh).sum())
    gpu_hours_day = float(gpus.sum())
    if ec.cost_basis == "capex":
        hw_cost = gpu_hours_day * kecon.capex_usd_per_gpu_hour(
            capex_usd_per_gpu=ec.capex_usd_per_gpu, depreciation_years=ec.depreciation_years,
            residual_frac=ec.residual_frac)
        cost = hw_cost + energy
    else:   # an all-in rental price already covers power
        hw_cost = gpu_hours_day * ec.rental_usd_per_gpu_hour
        cost = hw_cost
    gpus_avg = gpu_hours_day / 24.0
    monthly_contrib_per_gpu = (revenue - energy) / gpus_avg * 365.0 / 12.0
    capex = ec.capex_usd_per_gpu
    payback = float(kecon.payback_months(capex_usd_per_gpu=capex,
                                         monthly_margin_usd_per_gpu=monthly_contrib_per_gpu)) \
        if capex > 0 else math.nan
    out_per_s = rate_mean * out.mean()
    facility_w = float(power_w.mean()) * ec.pue
    if ec.power_basis == "all-in-provisioned":   # InferenceX's provisioned kW per GPU
        kw = allin_kw_per_gpu(hw_d)
        facility_w = gpus_avg * float(kecon.facility_power_w_per_gpu(
            power_basis=ec.power_basis, gpu_power_w=0.0, pue=ec.pue,
            allin_kw_per_gpu=math.nan if kw is None else kw))
    gpu_s = float(gs_prefill.sum() + gs_decode.sum())
    concurrency = kserv.concurrency(arrival_rate_per_s=rate_mean,
                                    mean_time_in_system_s=float((out * tpot).mean()))
    gpn = hw_d.gpus_per_node

    metrics = {
        "requests": int(trace.n_requests),
        "kv_tokens_per_output_token": kv_len,
        "input_tokens_per_day": rate_mean * float(inp.mean()) * SECONDS_PER_DAY,
        "output_tokens_per_day": rate_mean * float(out.mean()) * SECONDS_PER_DAY,
        "input_tokens": int(inp.sum()), "output_tokens": int(out.sum()),
        "decode_tokens_per_s_per_gpu": decode_tput,
        "prefill_tokens_per_s_per_gpu": rate_p / max(1.0 - hit_rate, 1e-9),
        "prefill_computed_tokens_per_s_per_gpu": rate_p,
        "cache_hit_rate": hit_rate,
        "cache_hit_rate_source": "fixed by the scenario" if fixed_hit is not None else
        ("simulated (exact-prefix LRU)" if lv.prefix_cache else "no prefix cache"),
        "arrival_rate_per_s": rate_mean,
        "arrival_rate_source": arrival_rate_source(cfg),
        "cache_hit_rate_by_tier": {t: float(tier_tok[t].sum() / inp.sum()) for t in tier_tok},
        "cache_capacity_tokens": dict(zip(("hbm", "dram", "nvme"), map(float, caps))),
        "speculative_tokens_per_pass": float((out_share * dp_.tokens_per_step).sum()),
        "draft_depth_by_class": {n: int(d) for n, d in zip(trace.class_names, dp_.depth)},
        "draft_time_share": dp_.draft_share,
        "expert_efficiency": dp_.expert_efficiency,
        "decode_binding_resource": dp_.binding,
        "decode_batch_per_gpu": dp_.batch / dpool.tp,
        "decode_occupancy": concurrency / max(float(gpus_d.mean()) * dp_.batch / dpool.tp, 1e-12),
        "static_batch_efficiency": static_eff,
        "colocated_interference": interference,
        "decode_batch_per_instance": dp_.batch * dpool.dp,
        "prefill_prompts_per_pass": chunk_tokens / max((1.0 - hit_rate) * p_bar, 1.0),
        "meets_tpot_slo_at_operating_batch": dp_.meets_slo,
        "ttft_p50_s": float(ttft_q[0]), "ttft_p99_s": float(ttft_q[1]),
        "tpot_p50_s": tpot_p50, "tpot_p99_s": tpot_p99,
        "goodput_frac": goodput,
        "goodput_tokens_per_s_per_gpu": out_per_s * goodput / gpus_avg,
        "required_gpu_hours": gpu_s / SECONDS_PER_HOUR,
        "gpu_seconds": gpu_s,
        "gpus_avg": gpus_avg, "gpus_peak": float(gpus.max()),
        "nodes_avg": gpus_avg / gpn, "nodes_peak": float(gpus.max()) / gpn,
        "prefill_gpus_avg": float(gpus_p.mean()), "decode_gpus_avg": float(gpus_d.mean()),
        "revenue_usd_per_day": float(revenue), "cost_usd_per_day": float(cost),
        "hardware_cost_usd_per_day": float(hw_cost), "energy_cost_usd_per_day": energy,
        "gross_margin": float(kecon.gross_margin_frac(revenue_usd=revenue, cost_usd=cost)),
        "cost_profit_margin": float(kecon.cost_profit_margin_frac(revenue_usd=revenue, cost_usd=cost)),
        "usd_per_mtok_output": float(kecon.usd_per_mtok(cost_usd=cost,
                                                        tokens=out_per_s * SECONDS_PER_DAY)),
        "usd_per_mtok_all": float(kecon.usd_per_mtok(
            cost_usd=cost, tokens=rate_mean * (inp.mean() + out.mean()) * SECONDS_PER_DAY)),
        "payback_months": payback,
        "payback_absent": "" if capex > 0 else (
            f"payback_months absent: no purchase price (economics.capex_usd_per_gpu is 0 or unset "
            f"and {hw_d.name} lists none in its [price])"),
        "output_tokens_per_s_per_mw": float(kecon.tokens_per_s_per_mw(
            tokens_per_s=out_per_s, facility_power_w=facility_w)),
        "price_basis": ec.price_basis_label,
        "power_basis": ec.power_basis if math.isfinite(facility_w) else (
            f"{ec.power_basis} ({hw_d.name} is not in it: tokens per MW n/a)"),
        "usd_per_gpu_hour": {hw_d.name: float(hw_cost / max(gpu_hours_day, 1e-12))},
        "precisions": {**prec_d, "overlap": overlap, "redundant_experts": redundant_d},
        "engine": eng.name,
    }
    return SideResult(name=name or cfg.name, metrics=metrics,
                      per_request={"ttft_s": ttft, "tpot_s": tpot, "hit_tokens": hit_tok},
                      cache=res, decode_grid=dgrid,
                      context=dict(model=m, pool=dpool, precisions=prec_d, overlap=overlap,
                                   redundant_experts=lv.redundant_experts if m.is_moe else 0,
                                   popularity=pop, kv_len=kv_len, decode_point=dp_))


# --------------------------------------------------------------------------------------------
# a config written by 'plan --emit-config': simulate's figures against the plan's
# --------------------------------------------------------------------------------------------

def side_config(cfg: FactoryConfig, which: str) -> FactoryConfig:
    if which == "factory":
        return cfg
    if cfg.baseline is None:
        raise SpecError(f"{cfg.path}: no baseline: add baseline = \"baseline.toml\" to the config")
    return cfg.baseline


__all__ = ["SideResult", "simulate", "expert_popularity", "static_batch_efficiency",
           "lever_precisions", "DecodeGrid", "DecodePoint", "decode_grid", "decode_point",
           "prompt_queue_wait_s", "prefill_busy_share", "static_fill_time_s",
           "static_batch_index", "arrival_rate_per_s", "config_trace"]
