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
from functools import cached_property
from typing import Any

import numpy as np

from ..engine import evaluate
from ..errors import SpecError
from ..specs.realism import load_realism
from ..kernels import cache as kcache
from ..kernels import economics as kecon
from ..kernels import memory as kmem
from ..kernels import moe as kmoe
from ..kernels import roofline as kroof
from ..kernels import serving as kserv
from ..kernels import speculative as kspec
# the serving formulas live in kernels/serving.py; these names stay importable from here
from ..kernels.serving import prefill_busy_share, prompt_queue_wait_s, static_fill_time_s
from ..specs import HardwareSpec, ModelSpec, load_hardware, load_model
from .config import FactoryConfig, Levers, PoolConfig
from .kvcache import simulate_prefix_cache
from ..units import SECONDS_PER_DAY, SECONDS_PER_HOUR
from .workload import Trace, generate_trace, load_trace

_PREC_ORDER = ("fp4", "fp8", "bf16")


@dataclass
class SideResult:
    """Metrics of one side (ordered, JSON-ready) plus per-request arrays for percentiles."""

    name: str
    metrics: dict[str, Any]
    per_request: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    cache: Any = field(default=None, repr=False)
    decode_grid: Any = field(default=None, repr=False)
    context: dict = field(default_factory=dict, repr=False)   # what lever studies re-evaluate


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


def lever_precisions(m: ModelSpec, hw: HardwareSpec, levers: Levers) -> dict[str, str]:
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
    """Useful share of slot-steps in static batches of ``batch`` consecutive arrivals
    (:func:`inference_factory.kernels.serving.static_batch_efficiency`)."""
    return kserv.static_batch_efficiency(output_tokens=output_tokens, batch_size=batch)


# --------------------------------------------------------------------------------------------
# decode operating point
# --------------------------------------------------------------------------------------------


def _batch_grid(max_batch: int) -> np.ndarray:
    grid = np.unique(np.concatenate([np.geomspace(1, max_batch, 48).round(), [max_batch]]))
    return grid[grid >= 1]


#: above this many per-class depth combinations the depths are chosen per class (argmax of
#: each class's own rate) instead of jointly
_MAX_DEPTH_COMBOS = 4096


@dataclass
class DecodeGrid:
    """Engine decode step times over (class, draft depth, batch per attention-DP rank) for one
    pool, precisions and levers: what every decode operating-point choice reads from."""

    batch: np.ndarray             # (batch,) sequences per attention-DP rank
    depths: np.ndarray            # (depth,) draft depths evaluated
    step_s: np.ndarray            # (class, depth, batch) verify-step time [s]
    draft_s: np.ndarray           # (class, depth, batch) of which drafting [s]
    tokens_per_step: np.ndarray   # (class, depth)
    binding: np.ndarray           # (depth, batch) binding resource (first class)
    expert_efficiency: np.ndarray  # (depth, batch)
    fits_batch_max: float
    out_share: np.ndarray         # (class,) output-token share
    tp: int
    dp: int

    @cached_property
    def table(self):
        """Every candidate (per-class depths, batch): the depth combinations (combo, class),
        their tokens per step (combo, class), the mixed step (combo, batch), output tokens/s
        per GPU (combo, batch) and per-class TPOT (combo, class, batch). Computed once per
        grid; every operating-point choice (any SLO, static or not) reads it."""
        ci = np.arange(self.step_s.shape[0])
        combos = _depth_choices(self)
        st = self.step_s[ci[None, :], combos, :]                           # (combo, class, batch)
        tk = self.tokens_per_step[ci[None, :], combos]                      # (combo, class)
        step_mix = np.einsum("c,kcb->kb", self.out_share, st)               # (combo, batch)
        tput = kroof.tokens_per_s_per_gpu(seqs_per_rank=self.batch[None, :],
                                          tokens_per_seq=(tk @ self.out_share)[:, None],
                                          step_s=step_mix, tp=self.tp)
        tpot = step_mix[:, None, :] / tk[:, :, None]                       # (combo, class, batch)
        return combos, tk, step_mix, tput, tpot

    @cached_property
    def tpot_max(self) -> np.ndarray:
        """The slowest class's TPOT of every candidate (combo, batch)."""
        return self.table[4].max(axis=1)


def _on_grid(da, dims: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
    """``da``'s values laid out on ``dims`` (in that order) and broadcast over the ones it
    lacks: what ``broadcast_like`` then ``.values`` give, without xarray's alignment (a few
    ms per call)."""
    own = [d for d in dims if d in da.dims]
    v = np.transpose(da.values, [da.dims.index(d) for d in own])
    v = v.reshape([n if d in da.dims else 1 for d, n in zip(dims, shape)])
    return np.array(np.broadcast_to(v, shape))


def decode_grid(cfg: FactoryConfig, m: ModelSpec, pool: PoolConfig, prec: dict, kw: dict,
                trace: Trace, kv_len: float, out_share: np.ndarray, levers: Levers,
                popularity, *, speculative: bool | None = None) -> DecodeGrid:
    """Evaluate the decode step of every class over the batch grid and the draft depths the
    speculative lever allows (depth 0 only when it is off). Acceptance per position decays
    geometrically from each class's first-position acceptance (``configs/realism.toml``
    ``[speculative]``)."""
    spec_on = levers.speculative if speculative is None else speculative
    n_cls = len(trace.class_names)
    max_b = pool.max_batch_per_gpu * pool.tp
    grid = _batch_grid(max_b)
    depths = list(range(pool.max_draft_depth + 1)) if (spec_on and m.n_mtp_modules) else [0]
    decay = load_realism().acceptance_decay_per_position
    step = np.empty((n_cls, len(depths), grid.size))
    toks = np.empty((n_cls, len(depths)))
    draft = np.empty((n_cls, len(depths), grid.size))
    fits = binding = eff = None
    dims = ("draft_depth", "batch_size")
    for c in range(n_cls):
        acc = kspec.acceptance_by_position(
            first_position_acceptance=float(trace.acceptance_rate[c]),
            decay_per_position=decay, depth=max(max(depths), 1))
        ds = evaluate(m, pool.hardware, tp=pool.tp, dp=pool.dp, ep=pool.ep, **prec, **kw,
                      batch_size=list(grid), kv_len=kv_len, draft_depth=depths,
                      acceptance_by_position=list(acc), expert_popularity=popularity)
        step[c] = _on_grid(ds.decode_step_s, dims, step.shape[1:])
        draft[c] = _on_grid(ds.decode_draft_s, dims, step.shape[1:])
        # batch-independent; a one-point batch grid carries it along batch_size too
        toks[c] = _on_grid(ds.tokens_per_step, dims, step.shape[1:])[:, 0]
        if fits is None:
            fits = float(np.min(ds.max_batch_size.values))
            binding = _on_grid(ds.decode_binding_resource, dims, step.shape[1:])
            eff = _on_grid(ds.expert_efficiency_frac, dims, step.shape[1:])
    return DecodeGrid(batch=grid, depths=np.array(depths), step_s=step, draft_s=draft,
                      tokens_per_step=toks, binding=binding, expert_efficiency=eff,
                      fits_batch_max=fits, out_share=out_share, tp=pool.tp, dp=pool.dp)


@dataclass
class DecodePoint:
    batch: float                  # sequences per attention-DP rank
    depth: np.ndarray             # draft depth per class
    tokens_per_step: np.ndarray   # per class
    step_s: float                 # mixed step time at the operating batch
    tput_per_gpu: float           # output tokens/s/GPU at the operating batch
    tpot_by_class_s: np.ndarray
    draft_share: float            # share of the step spent drafting
    expert_efficiency: float
    binding: str                  # binding resource at the operating point
    meets_slo: bool
    grid_batch: np.ndarray        # for interpolation at other occupancies
    grid_step_by_class: np.ndarray  # (class, batch) step times at the chosen depths
    fits_batch_max: float


def _depth_choices(g: DecodeGrid) -> np.ndarray:
    """Candidate per-class depth indices, (combo, class): every combination when there are
    few, else the depth of each class's own best rate at each batch."""
    n_cls, n_d = g.tokens_per_step.shape
    if n_d ** n_cls <= _MAX_DEPTH_COMBOS:
        return np.array(np.meshgrid(*[np.arange(n_d)] * n_cls, indexing="ij")).reshape(n_cls, -1).T
    best = (g.tokens_per_step[:, :, None] / g.step_s).argmax(axis=1)    # (class, batch)
    return np.unique(best.T, axis=0)


def decode_point(g: DecodeGrid, tpot_slo_s: float, *, batch_index: int | None = None) -> DecodePoint:
    """The decode operating point: the per-class draft depths and batch with the highest
    output tokens/s per GPU whose every class meets the TPOT SLO and whose KV fits in HBM.
    All classes share one batch; the step is their output-share-weighted mean. With
    ``batch_index`` the batch is fixed (static batching) and only the depths are chosen.
    Where no point meets the SLO the smallest batch is taken (``meets_slo`` False)."""
    n_cls = g.step_s.shape[0]
    w = g.out_share
    ci = np.arange(n_cls)
    combos, tk, step_mix, tput, tpot = g.table
    ok = (g.tpot_max <= tpot_slo_s) & (g.batch[None, :] <= g.fits_batch_max)
    if batch_index is not None:
        ok = ok & (np.arange(g.batch.size) == batch_index)[None, :]
    if ok.any():
        k, b = np.unravel_index(np.argmax(np.where(ok, tput, -np.inf)), tput.shape)
        meets = True
    else:
        b = batch_index if batch_index is not None else 0
        k = int(np.argmin(g.tpot_max[:, b]))
        meets = False
    depth_idx = combos[k]
    step_fixed = g.step_s[ci[:, None], depth_idx[:, None], np.arange(g.batch.size)[None, :]]
    draft = g.draft_s[ci, depth_idx, b]
    return DecodePoint(
        batch=float(g.batch[b]), depth=g.depths[depth_idx], tokens_per_step=tk[k],
        step_s=float(step_mix[k, b]), tput_per_gpu=float(tput[k, b]),
        tpot_by_class_s=tpot[k, :, b],
        draft_share=float((w * draft).sum() / step_mix[k, b]),
        expert_efficiency=float(g.expert_efficiency[depth_idx[0], b]),
        binding=str(g.binding[depth_idx[0], b]), meets_slo=meets, grid_batch=g.batch,
        grid_step_by_class=step_fixed, fits_batch_max=g.fits_batch_max)


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
    hbm = kmem.free_hbm_cache_bytes(hbm_capacity_bytes=hw.hbm_capacity_bytes,
                                    reserve_frac=load_realism().reserve_frac,
                                    weight_bytes=weight_bytes_per_gpu,
                                    cache_frac=levers.hbm_cache_frac, n_gpus=n_gpus)
    caps = {t: float(kmem.cache_capacity_tokens(cache_bytes=b, kv_bytes_per_token=kv_tok))
            for t, b in (("hbm", hbm), ("dram", hw.host_dram_capacity_bytes * nodes),
                         ("nvme", hw.nvme_capacity_bytes * nodes))}
    return tuple(caps[t] if t in levers.cache_tiers else 0.0 for t in ("hbm", "dram", "nvme"))


# --------------------------------------------------------------------------------------------
# one side
# --------------------------------------------------------------------------------------------


def _diurnal_factors(amplitude: float) -> np.ndarray:
    """Hourly load relative to the mean over one day, at each hour's midpoint."""
    return kserv.diurnal_load_factor(hour_of_day=np.arange(24) + 0.5, amplitude=amplitude)


def _weighted_percentiles(values: np.ndarray, weights: np.ndarray, q) -> tuple[float, ...]:
    """Percentiles of a weighted sample (lower value at each cumulative-weight threshold)."""
    order = np.argsort(values, kind="stable")
    v, cw = values[order], np.cumsum(weights[order])
    return tuple(float(v[min(np.searchsorted(cw, p / 100.0 * cw[-1]), v.size - 1)]) for p in q)


def static_batch_index(g: DecodeGrid, pool: PoolConfig, rate_per_s: float, ttft_budget_s: float,
                       tpot_slo_s: float) -> int:
    """Static batching's batch: the largest grid batch (per attention-DP rank) that fits in
    HBM, meets the TPOT SLO, stays under the pool's ``static_batch_per_gpu`` cap (if any) and
    fills within the TTFT budget left after one prefill pass. The smallest batch if none."""
    fill = static_fill_time_s(batch_sequences=g.batch * pool.dp, arrival_rate_per_s=rate_per_s)
    ok = (fill <= ttft_budget_s) & (g.batch <= g.fits_batch_max)
    if pool.static_batch_per_gpu:
        ok &= g.batch <= pool.static_batch_per_gpu * pool.tp
    meets = ok & (g.tpot_max <= tpot_slo_s).any(axis=0)
    return int(np.flatnonzero(meets)[-1]) if meets.any() else 0


def arrival_rate_per_s(cfg: FactoryConfig, trace: Trace) -> float:
    """Mean arrival rate over the day that sizes the fleet and the money [requests/s]:
    ``workload.output_tokens_per_day`` over the trace's mean output (a scenario given by its
    daily tokens); else a loaded trace's own rate, n / (last - first arrival); else the
    config's ``arrival_rate_per_s`` (the synthetic trace's daily mean)."""
    w = cfg.workload
    if w.output_tokens_per_day:
        return float(w.output_tokens_per_day / SECONDS_PER_DAY / trace.output_tokens.mean())
    if cfg.trace_path and trace.n_requests > 1 and trace.duration_s > 0:
        return float((trace.n_requests - 1) / trace.duration_s)
    return float(w.arrival_rate_per_s)


def arrival_rate_source(cfg: FactoryConfig) -> str:
    if cfg.workload.output_tokens_per_day:
        return "workload.output_tokens_per_day / mean output tokens"
    return "the trace's own (requests / span)" if cfg.trace_path else "workload.arrival_rate_per_s"


def config_trace(cfg: FactoryConfig) -> Trace:
    """The config's trace: the loaded file (its first ``trace_head`` requests when set) or
    the synthetic workload."""
    if cfg.trace_path:
        trace = load_trace(cfg.trace_path)
        return trace.head(cfg.trace_head) if cfg.trace_head else trace
    return generate_trace(cfg.workload)


def simulate(cfg: FactoryConfig, trace: Trace | None = None, *, name: str | None = None,
             cache_memo: dict | None = None, cache_result=None) -> SideResult:
    """Serve ``trace`` (default: the config's synthetic or loaded trace) with ``cfg``.

    ``cache_result`` reuses the prefix-cache simulation of another side on the same trace
    (the attribution holds cache capacity fixed while it switches a non-cache lever)."""
    m = load_model(cfg.model)
    lv = cfg.levers
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
    pop = expert_popularity(m, trace, cfg.workload.seed)
    n_cls = len(trace.class_names)

    inp = trace.input_tokens.astype(float)
    out = trace.output_tokens.astype(float)
    out_share = np.bincount(trace.class_id, weights=out, minlength=n_cls) / out.sum()
    kv_len = float(kserv.token_weighted_decode_context_tokens(input_tokens=inp, output_tokens=out))

    # ---- decode grid (operating point chosen below, once the arrival rate is known)
    kw_d = dict(overlap=overlap, redundant_experts=redundant_d)
    dgrid = decode_grid(cfg, m, dpool, prec_d, kw_d, trace, kv_len, out_share, lv, pop)
    rate_mean = arrival_rate_per_s(cfg, trace)

    # ---- prefill: first pass sized without cache hits, to size the cache tiers
    p_bar = float(kserv.token_weighted_prompt_tokens(input_tokens=inp))
    rho = min(cfg.target_utilization, 0.99)

    def prefill_rate(hit: float, rho: float = rho):
        """Prefill operating point: the largest chunk (tokens per GPU per pass, up to the
        pool's tokens_per_gpu) whose p99 TTFT (waiting for the next pass, one pass, and the
        p99 of the queueing delay drawn below) meets the TTFT SLO."""
        chunks = np.unique(np.geomspace(512, max(ppool.tokens_per_gpu, 512), 12).round())
        per_prompt = max((1.0 - hit) * p_bar, 1.0)
        b = np.maximum(chunks * ppool.tp / per_prompt, 1.0)
        ds = evaluate(m, ppool.hardware, tp=ppool.tp, dp=ppool.dp, ep=ppool.ep, **prec_p,
                      overlap=overlap, redundant_experts=redundant_p, prompt_len=p_bar,
                      prefill_batch_size=list(np.unique(b)), cache_hit_rate=min(hit, 0.999),
                      expert_popularity=pop)
        t = np.atleast_1d(ds.prefill_step_s.values)
        r = np.atleast_1d(ds.prefill_computed_tokens_per_s_per_gpu.values)
        wait = prompt_queue_wait_s(utilization=rho, tokens_per_s=r * ppool.unit_gpus,
                                   mean_tokens=(1.0 - hit) * inp.mean(),
                                   mean_sq_tokens=(1.0 - hit) ** 2 * (inp * inp).mean())
        ok = kserv.p99_ttft_s(pass_s=t, mean_wait_s=wait, utilization=rho) <= cfg.ttft_slo_s
        i = int(np.flatnonzero(ok)[-1]) if ok.any() else 0
        bb = float(np.atleast_1d(ds.prefill_batch_size.values)[i])
        return (float(np.atleast_1d(ds.prefill_computed_tokens_per_s_per_gpu.values)[i]),
                float(t[i]), float(ds.weight_bytes_per_gpu), bb * per_prompt)

    rate0, t_pass0, w_bytes_p, _ = prefill_rate(0.0)

    def choose_decode(tpot_budget_s: float):
        """Decode operating point and its throughput (static batching's efficiency applied)
        for a TPOT budget (the SLO, over the colocated interference factor)."""
        if lv.continuous_batching:
            pt = decode_point(dgrid, tpot_budget_s)
            return pt, 1.0, pt.tput_per_gpu
        idx = static_batch_index(dgrid, dpool, rate_mean, cfg.ttft_slo_s - t_pass0, tpot_budget_s)
        pt = decode_point(dgrid, tpot_budget_s, batch_index=idx)
        eff = static_batch_efficiency(trace.output_tokens, int(pt.batch * dpool.dp))
        return pt, eff, pt.tput_per_gpu * eff

    dp_, static_eff, decode_tput = choose_decode(cfg.tpot_slo_s)
    gpus_p0 = kserv.provisioned_gpus(busy_gpus=rate_mean * inp.mean() / rate0,
                                     target_utilization=cfg.target_utilization,
                                     unit_gpus=ppool.unit_gpus)
    caps = _cache_capacity_tokens(m, ppool, lv, prec_p["kv_precision"], w_bytes_p, float(gpus_p0))
    res = None
    fixed_hit = lv.cache_hit_rate if lv.prefix_cache else None
    if fixed_hit is not None:
        # scenario-fixed hit rate: every request hits the same share of its prompt, served
        # from the slowest configured tier (DeepSeek's on-disk cache)
        hit_tok = np.floor(inp * fixed_hit)
        slowest = [t for t in ("hbm", "dram", "nvme") if t in lv.cache_tiers][-1]
        tier_tok = {t: hit_tok if t == slowest else np.zeros_like(inp) for t in ("hbm", "dram", "nvme")}
    elif lv.prefix_cache:
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
    rho_p = rho
    if not lv.pd_split:
        # colocated, prefill-first scheduling (vLLM / SGLang default): a prompt queues only
        # behind other prompts, so its server is busy the prefill share of the busy time
        rate_c, *_ = prefill_rate(hit_rate)
        rho_p = rho * prefill_busy_share(prefill_s_per_request=computed.mean() / rate_c,
                                         decode_s_per_request=out.mean() / decode_tput)
    rate_p, t_pass, _, chunk_tokens = prefill_rate(hit_rate, rho_p)
    mean_wait = prompt_queue_wait_s(utilization=rho_p, tokens_per_s=rate_p * ppool.unit_gpus,
                                    mean_tokens=computed.mean(), mean_sq_tokens=(computed ** 2).mean())
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
    # queueing delay: the prompt queue's mean wait (Pollaczek-Khinchine), spread with the
    # M/M/1 waiting-time shape (no wait with probability 1 - rho, else exponential), plus the
    # wait for the next pass to start (uniform over one pass), drawn from the trace seed
    rng = np.random.default_rng(cfg.workload.seed + 1)
    waits = rng.random(trace.n_requests) < rho_p
    wait = waits * rng.exponential(kserv.conditional_wait_s(mean_wait_s=mean_wait,
                                                            utilization=rho_p), trace.n_requests)
    wait = wait + rng.random(trace.n_requests) * t_pass
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
        "meets_tpot_slo_at_operating_batch": dp_.meets_slo,
        "ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_p99_s": float(np.percentile(ttft, 99)),
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
        "precisions": {**prec_d, "overlap": overlap, "redundant_experts": redundant_d},
    }
    return SideResult(name=name or cfg.name, metrics=metrics,
                      per_request={"ttft_s": ttft, "tpot_s": tpot, "hit_tokens": hit_tok},
                      cache=res, decode_grid=dgrid,
                      context=dict(model=m, pool=dpool, precisions=prec_d, overlap=overlap,
                                   redundant_experts=lv.redundant_experts if m.is_moe else 0,
                                   popularity=pop, kv_len=kv_len, decode_point=dp_))


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
