"""Run one request trace through one serving configuration ("side"): baseline or factory.

Every throughput figure comes from the roofline engine (:func:`inference_factory.evaluate`);
this module adds no physics of its own. It decides *operating points* (decode batch, draft
depth per class, prefill chunk) from engine grids, sizes the fleet with Little's law and the
diurnal load, turns the trace's prefix reuse into cache hits (exact LRU simulation over the
HBM/DRAM/NVMe tiers), and prices the result.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine import evaluate
from ..errors import SpecError
from ..realism import load_realism
from ..kernels import cache as kcache
from ..kernels import economics as kecon
from ..kernels import moe as kmoe
from ..specs import HardwareSpec, ModelSpec, load_hardware, load_model
from .config import FactoryConfig, Levers, PoolConfig
from .kvcache import simulate_prefix_cache
from .workload import Trace, generate_trace, load_trace

SECONDS_PER_DAY = 86400.0
_PREC_ORDER = ("fp4", "fp8", "bf16")


@dataclass
class SideResult:
    """Metrics of one side (ordered, JSON-ready) plus per-request arrays for percentiles."""

    name: str
    metrics: dict[str, Any]
    per_request: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    cache: Any = field(default=None, repr=False)


# --------------------------------------------------------------------------------------------
# choices the levers make
# --------------------------------------------------------------------------------------------


def _lowest_supported(hw: HardwareSpec, wanted: str) -> str:
    """The lowest precision >= ``wanted`` that the device computes in."""
    i = _PREC_ORDER.index(wanted) if wanted in _PREC_ORDER else len(_PREC_ORDER) - 1
    for p in _PREC_ORDER[i:]:
        if p in hw.dense_flop_per_s:
            return p
    return "bf16"


def _precisions(m: ModelSpec, hw: HardwareSpec, levers: Levers) -> dict[str, str]:
    """Low precision lever: FP8 KV cache and FP8 dispatch, and FP4 routed experts on devices
    with FP4 tensor cores. Off: BF16 KV and dispatch, weights at the model's native precision."""
    weight = _lowest_supported(hw, m.weight_precision)
    expert = _lowest_supported(hw, m.expert_precision)
    if levers.low_precision:
        if m.is_moe and "fp4" in hw.dense_flop_per_s:
            expert = "fp4"
        return dict(weight_precision=weight, moe_precision=expert, kv_precision="fp8",
                    dispatch_precision="fp8")
    return dict(weight_precision=weight, moe_precision=expert, kv_precision="bf16",
                dispatch_precision="bf16")


def expert_popularity(m: ModelSpec, trace: Trace, seed: int) -> np.ndarray | None:
    """Routed-token share per expert for the trace's class mix: each class has its own Zipf
    hot set (exponent = the class's expert_skew) on its own seeded permutation of experts,
    weighted by the class's share of tokens."""
    if not m.is_moe:
        return None
    tokens = np.bincount(trace.class_id, weights=trace.input_tokens + trace.output_tokens,
                         minlength=len(trace.class_names))
    pop = np.zeros(m.n_routed_experts)
    for c, w in enumerate(tokens / tokens.sum()):
        base = kmoe.zipf_popularity(n_experts=m.n_routed_experts, skew=float(trace.expert_skew[c]))
        perm = np.random.default_rng(seed + 7919 * (c + 1)).permutation(m.n_routed_experts)
        pop[perm] += w * base
    return pop / pop.sum()


def with_config_class_params(trace: Trace, cfg: FactoryConfig) -> Trace:
    """Give a loaded trace (whose classes carry no tendencies) the acceptance rate and expert
    skew of the config's class of the same name; unnamed or unknown classes take the
    request-share-weighted mean of the config's classes."""
    if np.all(np.isfinite(trace.acceptance_rate)) and np.all(np.isfinite(trace.expert_skew)):
        return trace
    by_name = {c.name: c for c in cfg.workload.classes}
    shares = np.array([c.share for c in cfg.workload.classes])
    mean_acc = float(np.average([c.acceptance_rate for c in cfg.workload.classes], weights=shares))
    mean_skew = float(np.average([c.expert_skew for c in cfg.workload.classes], weights=shares))
    acc = {n: by_name[n].acceptance_rate if n in by_name else mean_acc for n in trace.class_names}
    skew = {n: by_name[n].expert_skew if n in by_name else mean_skew for n in trace.class_names}
    return trace.with_class_params(acceptance_rate=acc, expert_skew=skew)


def static_batch_efficiency(output_tokens: np.ndarray, batch: int) -> float:
    """Useful share of slot-steps when requests are served in static batches of ``batch``
    consecutive arrivals: a batch runs until its longest request ends.

    .. math:: \\eta = \\frac{\\sum_i L_i}{\\sum_b |b| \\max_{i \\in b} L_i}
    """
    n = output_tokens.size
    batch = max(int(batch), 1)
    pad = (-n) % batch
    x = np.concatenate([output_tokens.astype(float), np.zeros(pad)]).reshape(-1, batch)
    sizes = np.full(x.shape[0], batch, dtype=float)
    if pad:
        sizes[-1] = batch - pad
    return float(output_tokens.sum() / (x.max(axis=1) * sizes).sum())


# --------------------------------------------------------------------------------------------
# decode operating point
# --------------------------------------------------------------------------------------------


def _batch_grid(max_batch: int) -> np.ndarray:
    grid = np.unique(np.concatenate([np.geomspace(1, max_batch, 48).round(), [max_batch]]))
    return grid[grid >= 1]


@dataclass
class _DecodePoint:
    batch: float                  # sequences per attention-DP rank
    depth: np.ndarray             # draft depth per class
    tokens_per_step: np.ndarray   # per class
    step_s: float                 # mixed step time at the operating batch
    tput_per_gpu: float           # output tokens/s/GPU at the operating batch
    tpot_by_class_s: np.ndarray
    draft_share: float            # share of the step spent drafting
    expert_efficiency: float
    meets_slo: bool
    grid_batch: np.ndarray        # for interpolation at other occupancies
    grid_step_by_class: np.ndarray  # (class, batch) step times at the chosen depths
    fits_batch_max: float


def _decode_point(cfg: FactoryConfig, m: ModelSpec, pool: PoolConfig, prec: dict, kw: dict,
                  trace: Trace, kv_len: float, out_share: np.ndarray, levers: Levers,
                  popularity) -> _DecodePoint:
    n_cls = len(trace.class_names)
    max_b = pool.max_batch_per_gpu * pool.tp if levers.continuous_batching else \
        pool.static_batch_per_gpu * pool.tp
    grid = _batch_grid(max_b)
    depths = list(range(pool.max_draft_depth + 1)) if (levers.speculative and m.n_mtp_modules) \
        else [0]
    step = np.empty((n_cls, len(depths), grid.size))
    toks = np.empty((n_cls, len(depths)))
    draft = np.empty((n_cls, len(depths), grid.size))
    fits = None
    eff_grid = None
    for c in range(n_cls):
        ds = evaluate(m, pool.hardware, tp=pool.tp, dp=pool.dp, ep=pool.ep, **prec, **kw,
                      batch_size=list(grid), kv_len=kv_len, draft_depth=depths,
                      acceptance_rate=float(trace.acceptance_rate[c]),
                      expert_popularity=popularity)
        ds = ds.transpose("draft_depth", "batch_size")
        step[c] = ds.decode_step_s.values
        draft[c] = ds.decode_draft_s.broadcast_like(ds.decode_step_s).values
        toks[c] = ds.tokens_per_step.values
        if fits is None:
            fits = ds.max_batch_size.broadcast_like(ds.draft_depth).values
            eff_grid = ds.expert_efficiency_frac.broadcast_like(ds.decode_step_s).values
    # per class and batch: the draft depth with the best per-GPU throughput (tokens/step/time)
    rate = toks[:, :, None] / step                              # (class, depth, batch)
    best = rate.argmax(axis=1)                                   # (class, batch)
    ci = np.arange(n_cls)[:, None]
    bi = np.arange(grid.size)[None, :]
    step_cb = step[ci, best, bi]
    toks_cb = toks[ci, best]
    draft_cb = draft[ci, best, bi]
    w = out_share[:, None]
    step_mix = (w * step_cb).sum(axis=0)                         # (batch,)
    tpot_cb = step_mix[None, :] / toks_cb
    max_fit = float(np.min(fits)) if fits is not None else math.inf
    ok = (tpot_cb.max(axis=0) <= cfg.tpot_slo_s) & (grid <= max_fit)
    if not levers.continuous_batching:
        idx = grid.size - 1 if grid[-1] <= max_fit else int(np.searchsorted(grid, max_fit) - 1)
        idx = max(idx, 0)
        meets = bool(ok[idx])
    elif ok.any():
        idx, meets = int(np.flatnonzero(ok)[-1]), True
    else:
        idx, meets = 0, False
    # the scheduler keeps the depths chosen at the operating batch when occupancy moves
    chosen = best[:, idx]
    step_fixed = step[np.arange(n_cls)[:, None], chosen[:, None], np.arange(grid.size)[None, :]]
    e_mix = float((out_share * toks_cb[:, idx]).sum())
    b = float(grid[idx])
    tput = b * pool.dp * e_mix / (step_mix[idx] * pool.tp * pool.dp)
    return _DecodePoint(
        batch=b, depth=np.array([depths[i] for i in best[:, idx]]), tokens_per_step=toks_cb[:, idx],
        step_s=float(step_mix[idx]), tput_per_gpu=float(tput), tpot_by_class_s=tpot_cb[:, idx],
        draft_share=float((w[:, 0] * draft_cb[:, idx]).sum() / step_mix[idx]),
        expert_efficiency=float(eff_grid[best[0, idx], idx]), meets_slo=meets, grid_batch=grid,
        grid_step_by_class=step_fixed,
        fits_batch_max=max_fit)


# --------------------------------------------------------------------------------------------
# prefix cache capacity
# --------------------------------------------------------------------------------------------


def _cache_capacity_tokens(m: ModelSpec, pool: PoolConfig, levers: Levers, kv_prec: str,
                           weight_bytes_per_gpu: float, n_gpus: float) -> tuple[float, float, float]:
    """Token capacity of each tier over the prefill pool's GPUs: a share of the HBM left after
    weights and the runtime reserve, the hosts' DRAM and NVMe (per node, from the hardware)."""
    if not levers.prefix_cache:
        return (0.0, 0.0, 0.0)
    hw = load_hardware(pool.hardware)
    # prefix KV of the full-attention layers (sliding-window layers keep <= w tokens)
    kv_tok = m.kv_bytes_per_token(kv_prec)
    nodes = n_gpus / hw.gpus_per_node
    reserve = load_realism().reserve_frac
    hbm = (max(hw.hbm_capacity_bytes * (1 - reserve) - weight_bytes_per_gpu, 0.0)
           * levers.hbm_cache_frac * n_gpus)
    caps = {"hbm": hbm / kv_tok, "dram": hw.host_dram_capacity_bytes * nodes / kv_tok,
            "nvme": hw.nvme_capacity_bytes * nodes / kv_tok}
    return tuple(caps[t] if t in levers.cache_tiers else 0.0 for t in ("hbm", "dram", "nvme"))


# --------------------------------------------------------------------------------------------
# one side
# --------------------------------------------------------------------------------------------


def _diurnal_factors(amplitude: float) -> np.ndarray:
    """Hourly load relative to the mean over one day: 1 + A sin(2 pi (h + 1/2)/24 - pi/2)."""
    h = np.arange(24) + 0.5
    return 1.0 + amplitude * np.sin(2 * np.pi * h / 24 - np.pi / 2)


def _weighted_percentiles(values: np.ndarray, weights: np.ndarray, q) -> tuple[float, ...]:
    """Percentiles of a weighted sample (lower value at each cumulative-weight threshold)."""
    order = np.argsort(values, kind="stable")
    v, cw = values[order], np.cumsum(weights[order])
    return tuple(float(v[min(np.searchsorted(cw, p / 100.0 * cw[-1]), v.size - 1)]) for p in q)


def _units(gpus: np.ndarray, unit: int) -> np.ndarray:
    return np.ceil(np.maximum(gpus, 1e-12) / unit) * unit


def simulate(cfg: FactoryConfig, trace: Trace | None = None, *, name: str | None = None,
             cache_memo: dict | None = None, cache_result=None) -> SideResult:
    """Serve ``trace`` (default: the config's synthetic or loaded trace) with ``cfg``.

    ``cache_result`` reuses the prefix-cache simulation of another side on the same trace
    (the attribution holds cache capacity fixed while it switches a non-cache lever)."""
    m = load_model(cfg.model)
    lv = cfg.levers
    if trace is None:
        trace = load_trace(cfg.trace_path) if cfg.trace_path else generate_trace(cfg.workload)
    trace = with_config_class_params(trace, cfg)
    dpool = cfg.decode
    ppool = cfg.prefill if lv.pd_split else dataclasses.replace(
        cfg.decode, tokens_per_gpu=cfg.prefill.tokens_per_gpu)
    hw_d, hw_p = load_hardware(dpool.hardware), load_hardware(ppool.hardware)
    prec_d, prec_p = _precisions(m, hw_d, lv), _precisions(m, hw_p, lv)
    overlap = "two-batch" if lv.overlap else "none"
    redundant = lv.redundant_experts if (lv.expert_balancing and m.is_moe) else 0
    pop = expert_popularity(m, trace, cfg.workload.seed)
    n_cls = len(trace.class_names)

    inp = trace.input_tokens.astype(float)
    out = trace.output_tokens.astype(float)
    out_share = np.bincount(trace.class_id, weights=out, minlength=n_cls) / out.sum()
    kv_len = float((out * (inp + out / 2)).sum() / out.sum())   # token-weighted decode context

    # ---- decode operating point
    kw_d = dict(overlap=overlap, redundant_experts=redundant)
    dp_ = _decode_point(cfg, m, dpool, prec_d, kw_d, trace, kv_len, out_share, lv, pop)
    static_eff = 1.0
    if not lv.continuous_batching:
        static_eff = static_batch_efficiency(trace.output_tokens, int(dp_.batch * dpool.dp))
    decode_tput = dp_.tput_per_gpu * static_eff

    # ---- prefill: first pass sized without cache hits, to size the cache tiers
    p_bar = float((inp * inp).sum() / inp.sum())                  # token-weighted prompt
    rho = min(cfg.target_utilization, 0.99)
    queue = rho / (2 * (1 - rho))                                 # M/D/1 mean wait / service

    def prefill_rate(hit: float):
        """Prefill operating point: the largest chunk (tokens per GPU per pass, up to the
        pool's tokens_per_gpu) whose p99 TTFT (one pass + the p99 of the queueing delay drawn
        below) meets the TTFT SLO."""
        chunks = np.unique(np.geomspace(512, max(ppool.tokens_per_gpu, 512), 12).round())
        per_prompt = max((1.0 - hit) * p_bar, 1.0)
        b = np.maximum(chunks * ppool.tp / per_prompt, 1.0)
        ds = evaluate(m, ppool.hardware, tp=ppool.tp, dp=ppool.dp, ep=ppool.ep, **prec_p,
                      overlap=overlap, redundant_experts=redundant, prompt_len=p_bar,
                      prefill_batch_size=list(np.unique(b)), cache_hit_rate=min(hit, 0.999),
                      expert_popularity=pop)
        t = np.atleast_1d(ds.prefill_step_s.values)
        ok = (1.0 + queue / rho * math.log(max(100.0 * rho, 1.0))) * t <= cfg.ttft_slo_s
        i = int(np.flatnonzero(ok)[-1]) if ok.any() else 0
        bb = float(np.atleast_1d(ds.prefill_batch_size.values)[i])
        return (float(np.atleast_1d(ds.prefill_computed_tokens_per_s_per_gpu.values)[i]),
                float(t[i]), float(ds.weight_bytes_per_gpu), bb * per_prompt)

    rate0, _, w_bytes_p, _ = prefill_rate(0.0)
    rate_mean = cfg.workload.arrival_rate_per_s
    gpus_p0 = rate_mean * inp.mean() / rate0 / cfg.target_utilization
    caps = _cache_capacity_tokens(m, ppool, lv, prec_p["kv_precision"], w_bytes_p,
                                  float(_units(np.array([gpus_p0]), ppool.unit_gpus)[0]))
    if lv.prefix_cache:
        key = (id(trace), tuple(round(c, -3) for c in caps))
        res = cache_result
        if res is None and cache_memo is not None:
            res = cache_memo.get(key)
        if res is None:
            res = simulate_prefix_cache(trace, capacity_tokens=caps)
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
    rate_p, t_pass, _, chunk_tokens = prefill_rate(hit_rate)

    # ---- GPU time per request (busy), colocation, fleet
    gs_prefill = computed / rate_p                  # GPU-seconds per request
    gs_decode = out / decode_tput
    util = cfg.target_utilization
    f = _diurnal_factors(cfg.workload.diurnal_amplitude)
    load_p = rate_mean * gs_prefill.mean() * f      # busy GPUs needed per hour
    load_d = rate_mean * gs_decode.mean() * f
    if lv.pd_split:
        gpus_p = _units(load_p / util, ppool.unit_gpus)
        gpus_d = _units(load_d / util, dpool.unit_gpus)
        interference = 1.0
    else:
        gpus_p = np.zeros(24)
        gpus_d = _units((load_p + load_d) / util, dpool.unit_gpus)
        interference = 1.0 / max(1.0 - gs_prefill.sum() / (gs_prefill.sum() + gs_decode.sum()), 1e-9)
    gpus = gpus_p + gpus_d
    busy_d = load_d / gpus_d if lv.pd_split else (load_p + load_d) / gpus_d
    busy_p = load_p / np.maximum(gpus_p, 1e-12)

    # ---- latency per request
    hour = ((trace.arrival_s % SECONDS_PER_DAY) // 3600).astype(int)
    occ_h = np.clip(dp_.batch * busy_d / util, 1.0, dp_.batch)           # batch per DP rank
    step_ch = np.array([np.interp(occ_h, dp_.grid_batch, dp_.grid_step_by_class[c])
                        for c in range(n_cls)])                            # (class, hour)
    w = out_share[:, None]
    step_h = (w * step_ch).sum(axis=0)
    tpot = step_h[hour] / dp_.tokens_per_step[trace.class_id] * interference
    static_wait = 0.0
    if not lv.continuous_batching:
        # a request joins the next static batch: it first waits, on average, half the
        # current batch's run, which lasts as long as its longest output
        static_wait = 0.5 * float(out.mean()) / static_eff * float(step_h.mean()) * interference
    # queueing delay: M/D/1 mean wait, spread with the M/M/1 waiting-time shape (no wait with
    # probability 1 - rho, else exponential), drawn deterministically from the trace seed
    rng = np.random.default_rng(cfg.workload.seed + 1)
    waits = rng.random(trace.n_requests) < rho
    wait = waits * rng.exponential(queue * t_pass / max(rho, 1e-9), trace.n_requests)
    passes = np.maximum(np.ceil(computed / max(chunk_tokens, 1.0)), 1.0)
    kv_tok = m.kv_bytes_per_token(prec_p["kv_precision"])
    tier_bw = {"hbm": hw_p.hbm_bw_bytes_per_s, "dram": hw_p.host_dram_bw_bytes_per_s,
               "nvme": hw_p.nvme_bw_bytes_per_s / hw_p.gpus_per_node}
    restore = sum(kcache.kv_restore_s(restored_tokens=tier_tok[t].astype(float),
                                      kv_bytes_per_token=kv_tok, tier_bytes_per_s=tier_bw[t])
                  for t in ("dram", "nvme"))
    ttft = wait + static_wait + np.maximum(passes * t_pass, restore)
    # over the whole day: a trace covers part of it, so each request's class is served at
    # every hour's occupancy, weighted by that hour's load (TTFT does not depend on the hour)
    tpot_ch = step_h[None, :] / dp_.tokens_per_step[:, None] * interference   # (class, hour)
    n_c = np.bincount(trace.class_id, minlength=n_cls).astype(float)
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
    gpu_s = float(gs_prefill.sum() + gs_decode.sum())
    concurrency = rate_mean * float((out * tpot).mean())
    gpn = hw_d.gpus_per_node

    metrics = {
        "requests": int(trace.n_requests),
        "input_tokens": int(inp.sum()), "output_tokens": int(out.sum()),
        "decode_tokens_per_s_per_gpu": decode_tput,
        "prefill_tokens_per_s_per_gpu": rate_p / max(1.0 - hit_rate, 1e-9),
        "prefill_computed_tokens_per_s_per_gpu": rate_p,
        "cache_hit_rate": hit_rate,
        "cache_hit_rate_by_tier": {t: float(tier_tok[t].sum() / inp.sum()) for t in tier_tok},
        "cache_capacity_tokens": dict(zip(("hbm", "dram", "nvme"), map(float, caps))),
        "speculative_tokens_per_pass": float((out_share * dp_.tokens_per_step).sum()),
        "draft_depth_by_class": {n: int(d) for n, d in zip(trace.class_names, dp_.depth)},
        "draft_time_share": dp_.draft_share,
        "expert_efficiency": dp_.expert_efficiency,
        "decode_batch_per_gpu": dp_.batch / dpool.tp,
        "decode_occupancy": concurrency / max(float(gpus_d.mean()) * dp_.batch / dpool.tp, 1e-12),
        "static_batch_efficiency": static_eff,
        "meets_tpot_slo_at_operating_batch": dp_.meets_slo,
        "ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_p99_s": float(np.percentile(ttft, 99)),
        "tpot_p50_s": tpot_p50, "tpot_p99_s": tpot_p99,
        "goodput_frac": goodput,
        "required_gpu_hours": gpu_s / 3600.0,
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
        "output_tokens_per_s_per_mw": float(kecon.tokens_per_s_per_mw(
            tokens_per_s=out_per_s, facility_power_w=facility_w)),
        "precisions": {**prec_d, "overlap": overlap, "redundant_experts": redundant},
    }
    return SideResult(name=name or cfg.name, metrics=metrics,
                      per_request={"ttft_s": ttft, "tpot_s": tpot, "hit_tokens": hit_tok},
                      cache=res if lv.prefix_cache else None)


def side_config(cfg: FactoryConfig, which: str) -> FactoryConfig:
    if which == "factory":
        return cfg
    if cfg.baseline is None:
        raise SpecError(f"{cfg.path}: no baseline: add baseline = \"baseline.toml\" to the config")
    return cfg.baseline


__all__ = ["SideResult", "simulate", "expert_popularity", "static_batch_efficiency"]
