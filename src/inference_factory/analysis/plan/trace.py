"""``plan --trace``: deployments for agentic traffic, chosen by replaying the trace.

For each device, serving engine (:func:`inference_factory.specs.engines.engines_for_plan`),
precision profile and instance shape of the plan's search (:func:`.search.candidate_shapes`),
the session replay of ``bench --trace`` is prepared once
(:func:`inference_factory.analysis.bench.replay.prepare_replay`) and run, per KV tier
setting (``none``: HBM only; ``dram``: InferenceX's pro-rata DRAM offload), over a coarse
concurrency ladder (lanes per instance), searched for its best point meeting the E2E
normalized interactivity target (P90, tok/s/user: ``1 / P90(E2E / OSL)``, InferenceX
MODELS.md "AgentX") in a few replays (:func:`_ladder`: bisection, then the knee). Disaggregated
candidates pair a prefill pool (the prefix cache lives there, :mod:`..bench.replay_pd`)
with a decode pool within the budget, one instance each; the prefill shape is, of the
shapes of its size that fit, the one with the fastest batch-1 prefill of the trace's mean
prompt (bounds the search: one prefill shape per size).

Every (deployment, tiers, concurrency) point is a candidate row in the plan's columns, the
fleet filling the budget with whole instances (per-GPU figures are one instance's); the
plan's ranking (:func:`.ranking._rank`: the objective among the rows meeting the targets),
recommendation per device and footing (at the trace's mean prompt and output, hit 0) apply
unchanged; launch commands are not given (the engines' ``[launch]`` parts turn prefix caching
off, as the random-prompt recipes do). The all-in $/M counts every GPU-hour over the output
tokens (and over all tokens, ``usd_per_mtok_total_all_in``) at the plan's cost model.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..bench.replay import prepare_replay, replay_point
from ..bench.replay_metrics import economics
from ..closed_loop import Pool
from ..economics import CostModel, gpu_cost_usd_per_hour, usd_per_mtok_at
from ...errors import SpecError
from ...specs import load_hardware, load_model
from ...specs.grammar import PrecisionProfile, parse_precision

#: Lanes per instance tried, in order (InferenceX's sweep runs powers of two).
DEFAULT_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: KV tier settings tried: HBM only, and HBM + the pro-rata DRAM offload.
DEFAULT_OFFLOAD = ("none", "dram")


def _precisions(prof: dict) -> dict:
    return {k: v for k, v in prof.items() if k.endswith("_precision") and k != "low_precision"
            and k in ("weight_precision", "moe_precision", "kv_precision",
                      "attention_precision")}


def _row(st, p, *, hw, eng, prof, offload, c, instances, rates, cost, target, ttft_s):
    """One candidate row from one replay point (plan's column names)."""
    lp = p["_loop"]
    d, pp = st.d_pool, st.cache_pool
    g = st.gpus
    inp, out = p["total_input_tokens"], p["total_output_tokens"]
    per_gpu = p["output_tokens_per_s_per_gpu"]
    # each phase's speed while it runs (plan's D and P: decode output tokens/s per GPU at
    # the batch, prompt tokens/s per GPU in prefill passes)
    dec = float(lp.decoding[0]) * d.ranks * st.dtab.tokens_per_step / float(
        lp.decode_step_s[0]) / d.gpus
    pre = float(lp.prompts_per_pass[0]) * inp / p["request_count"] * pp.ranks / float(
        lp.pass_s[0]) / pp.gpus
    isl, osl = inp / p["request_count"], out / p["request_count"]
    share_p = ((isl / pre) / (isl / pre + osl / dec) if st.colocated else pp.gpus / g)
    usd_h = rates["prefill"] * share_p + rates["decode"] * (1.0 - share_p)
    e2e_int = p["e2e_normalized_interactivity_p90"]
    ttft90 = p["time_to_first_token_p90_ms"] / 1e3
    late = ttft_s is not None and ttft90 > ttft_s
    reason = ("misses E2E interactivity" if e2e_int < target else
              "misses TTFT (P90)" if late else "")
    prefill_shape = {f"prefill_{k}": v for k, v in pp.shape.items()}
    return dict(
        hardware=hw.name, engine=eng.name, engine_version=eng.version,
        engine_label=eng.label(), mode="aggregated" if st.colocated else "disaggregated",
        **d.shape, **prefill_shape, instances=instances * (1 if st.colocated else 2),
        decode_instances=instances, prefill_instances=0 if st.colocated else instances,
        decode_gpus=d.gpus, prefill_gpus=pp.gpus, gpus=g * instances,
        precision=prof.get("precision", ""), low_precision=prof["low_precision"],
        **_precisions(prof), overlap="none", prefill_overlap="none",
        batch_size=max(float(lp.decoding[0]), 1.0), draft_depth=float(st.axes["draft_depth"]),
        concurrency=c, kv_offload=offload, prefill_batch_size=max(float(lp.prompts_per_pass[0]), 1.0),
        request_rate_per_s=p["request_throughput"] * instances,
        output_tokens_per_s=p["output_token_throughput"] * instances,
        output_tokens_per_s_per_gpu=per_gpu,
        total_tokens_per_s_per_gpu=p["total_tokens_per_s_per_gpu"],
        decode_tokens_per_s_per_gpu=dec, prefill_tokens_per_s_per_gpu=pre,
        tokens_per_s_per_user=1e3 / p["inter_token_latency_p50_ms"],
        e2e_normalized_interactivity_p90=e2e_int,
        ttft_s=p["time_to_first_token_p50_ms"] / 1e3, ttft_p90_s=ttft90,
        tpot_s=p["inter_token_latency_p50_ms"] / 1e3,
        e2e_p90_s=p["request_latency_p90_ms"] / 1e3,
        prefix_hit_rate=p["prefix_hit_rate"], prefix_hit_rate_hbm=p["prefix_hit_rate_hbm"],
        prefix_hit_rate_dram=p["prefix_hit_rate_dram"],
        decode_binding_resource=str(st.dtab.decode_resource(lp.decoding)[0]),
        usd_per_mtok_output_all_in=float(usd_per_mtok_at(
            per_gpu, gpu_cost_usd_per_hour=usd_h, utilization=cost.utilization)),
        usd_per_mtok_total_all_in=float(usd_per_mtok_at(
            p["total_tokens_per_s_per_gpu"], gpu_cost_usd_per_hour=usd_h,
            utilization=cost.utilization)),
        revenue_usd_per_gpu_hour=p["revenue_usd_per_gpu_hour"], fits=True, prefill_fits=True,
        meets_slo=not reason, reason=reason)


def _ladder(st, rows, *, ladder, offloads, econ, kw):
    """Per tier setting, the ladder's best point meeting the targets, found in a few
    replays: the largest concurrency meeting them by bisection (ASSUMPTION: interactivity
    falls as concurrency rises), then down the ladder while the output tokens/s per GPU
    rises (past the knee: ASSUMPTION, throughput is unimodal in concurrency). Every point
    replayed is a candidate row. A point of a larger tier setting where DRAM / NVMe served
    nothing is the HBM-only point too (the same LRU sequence): reused, not replayed."""
    clean: dict[int, dict] = {}
    for off in sorted(offloads, key=lambda o: o in (None, "", "none")):
        memo: dict[int, dict] = {}

        def at(i):
            if i in memo:
                return memo[i]
            c = ladder[i]
            if off in (None, "", "none") and c in clean:
                r = dict(clean[c], kv_offload="none")
            else:
                p = replay_point(st, c, kv_offload=off)
                state = p.pop("_state")
                p["_loop"] = state["loop"]
                economics([p], st.hw, model=st.m, **econ)
                r = _row(st, p, offload=off, c=c, **kw)
                if state["tier_hit_tokens"] == 0:
                    clean[c] = r
            memo[i] = r
            return r

        lo, hi = -1, len(ladder)          # the largest index known to meet, the smallest not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if at(mid)["reason"] else (mid, hi)
        i = lo
        while i > 0 and at(i - 1)["output_tokens_per_s_per_gpu"] > at(i)[
                "output_tokens_per_s_per_gpu"]:
            i -= 1
        rows.extend(memo[k] for k in sorted(memo))


def _unfit(hw, eng, prof, d: Pool, p: Pool | None, why: str) -> dict:
    return dict(hardware=hw.name, engine=eng.name, engine_version=eng.version,
                engine_label=eng.label(), mode="aggregated" if p is None else "disaggregated",
                **d.shape, **{f"prefill_{k}": v for k, v in (p or d).shape.items()},
                gpus=d.gpus + (p.gpus if p else 0), precision=prof.get("precision", ""),
                **_precisions(prof), fits=False, meets_slo=False, batch_size=np.nan,
                draft_depth=np.nan, reason="does not fit in HBM" if "fit" in why else why)


def plan_trace(model, hardware, *, trace="agentic_coding", e2e_interactivity: float = 20.0,
               gpus: int = 8, max_instance_gpus: int | None = None, min_gpus: int = 1,
               ttft_s: float | None = None, objective: str = "usd_per_mtok_output_all_in",
               modes: Sequence[str] = ("aggregated", "disaggregated"), shapes=None,
               precision=None, low_precision: Sequence[bool] = (False, True),
               draft_depth: Sequence[int] = (0,), kv_offload: Sequence[str] = DEFAULT_OFFLOAD,
               concurrency: Sequence[int] = DEFAULT_LADDER, engine: Any = None,
               price=None, cost: CostModel | None = None,
               cached_input_fraction: float | None = None):
    """Recommend one deployment per device for a session trace (module docstring):
    the best on ``objective`` among the replayed points whose E2E normalized interactivity
    P90 is at least ``e2e_interactivity`` tok/s/user (and TTFT P90 within ``ttft_s`` where
    given). Returns a :class:`.search.PlanResult` (``request["seconds"]``: the search's
    wall time)."""
    from ..bench.replay import resolve_trace
    from ...specs.engines import engines_for_plan, resolve_serving_engine
    from .footing import add_footing
    from .ranking import OBJECTIVES, _front, _rank, _recommend
    from .search import PlanResult, _check_profiles, _profiles, candidate_shapes

    t0 = time.perf_counter()
    if objective not in OBJECTIVES:
        raise SpecError(f"objective = {objective!r} is not one of {list(OBJECTIVES)}")
    if not (isinstance(e2e_interactivity, (int, float)) and math.isfinite(e2e_interactivity)
            and e2e_interactivity > 0):
        raise SpecError(f"e2e_interactivity = {e2e_interactivity!r} must be a positive number "
                        "(tok/s/user)")
    max_instance_gpus = gpus if max_instance_gpus is None else max_instance_gpus
    names = None if engine is None else ([engine] if isinstance(engine, str) else list(engine))
    for n in names or []:
        resolve_serving_engine(n, "engine")
    m = load_model(model)
    hws = [load_hardware(h) for h in (hardware if isinstance(hardware, (list, tuple))
                                      else [hardware])]
    s = resolve_trace(trace)
    profiles = (parse_precision(precision) if precision is not None else
                tuple(PrecisionProfile("low" if f else "native") for f in low_precision))
    _check_profiles(m, profiles)
    cost = cost or CostModel()
    rows: list[dict] = []
    notes: dict[str, list[str]] = {}
    used: dict = {}
    for hw in hws:
        engines = engines_for_plan(names, hw.name)
        used.update({(hw.name, e.name): e for e in engines})
        rates = {ph: sum(gpu_cost_usd_per_hour(hw, cost, ph)) for ph in ("decode", "prefill")}
        runs, notes[hw.name] = _profiles(m, hw, profiles)
        hw_shapes = [dict(x) for x in shapes] if shapes is not None else \
            candidate_shapes(m, hw, max_instance_gpus)
        hw_shapes = [x for x in hw_shapes
                     if min_gpus <= x.get("tp", 1) * x.get("dp", 1) <= max_instance_gpus]
        for prof, eng, depth in ((p, e, d) for p in runs for e in engines for d in draft_depth):
            if eng.refusal(model=m, mode=eng.supports.modes[0], precisions={
                    k: v for k, v in _precisions(prof).items() if k != "attention_precision"}):
                continue
            kw = dict(hw=hw, eng=eng, prof=prof, rates=rates, cost=cost,
                      target=float(e2e_interactivity), ttft_s=ttft_s)
            econ = dict(price=price, cached_input_fraction=cached_input_fraction)
            common = dict(trace=s, engine=eng, draft_depth=int(depth), **_precisions(prof))
            fitting = []
            for shape in hw_shapes:
                pool = Pool(1, shape.get("tp", 1), shape.get("dp", 1), shape.get("ep", 1))
                if eng.refusal(model=m, mode="aggregated", draft_depth=int(depth),
                               **pool.shape):
                    continue
                try:
                    st = prepare_replay(m, hw, **pool.shape, **common)
                except SpecError as exc:
                    rows.append(_unfit(hw, eng, prof, pool, None, str(exc)))
                    continue
                fitting.append((pool, st))
                if "aggregated" in modes:
                    _ladder(st, rows, ladder=concurrency, offloads=kv_offload, econ=econ,
                            kw=dict(kw, instances=gpus // pool.gpus))
            if "disaggregated" in modes and "disaggregated" in eng.supports.modes:
                _disaggregated(m, hw, eng, fitting, gpus, depth, rows, common, concurrency,
                               kv_offload, econ, kw)
    if not rows:
        raise SpecError(f"plan --trace: no instance shape of {min_gpus}..{max_instance_gpus} "
                        f"GPUs runs {m.name} on {', '.join(h.name for h in hws)}")
    cand = _rank(pd.DataFrame(rows), objective)
    recs = _recommend(cand, hws, objective, notes)
    isl = int(round(float(s.input_tokens.mean())))
    osl = max(int(round(float(s.output_tokens.mean()))), 1)
    # no launch commands: the engines' [launch] parts state prefix caching off (the
    # random-prompt recipes); a trace plan runs it on, with its tiers
    recs = add_footing(recs, cand, m, hws, isl=isl, osl=osl)
    front = _front(cand.assign(fits=cand["fits"].astype(bool) & cand["meets_slo"].notna()),
                   user="e2e_normalized_interactivity_p90")
    request = dict(model=m.name, hardware=[h.name for h in hws], gpus=gpus, min_gpus=min_gpus,
                   max_instance_gpus=max_instance_gpus, trace=s.source, sessions=s.n_sessions,
                   turns=s.n_turns, isl=isl, osl=osl, e2e_interactivity=e2e_interactivity,
                   ttft_s=ttft_s, tpot_s=None, objective=objective, modes=list(modes),
                   kv_offload=list(kv_offload), concurrency=list(concurrency),
                   draft_depth=list(draft_depth), precision=[p.label() for p in profiles],
                   precision_notes={h: n for h, n in notes.items() if n},
                   price=price, cost=dataclasses.asdict(cost), cost_basis=cost.cost_basis,
                   engine=(",".join(sorted({e for _, e in used})) if names is None
                           else ",".join(str(n) for n in names)),
                   engines={f"{h} {e}": used[(h, e)].label() for h, e in sorted(used)},
                   seconds=time.perf_counter() - t0)
    for df in (recs, cand, front):
        df.attrs.update({k: v for k, v in request.items() if isinstance(v, (str, int, float))})
    return PlanResult(recommendations=recs, candidates=cand, front=front, request=request)


def _disaggregated(m, hw, eng, fitting, gpus, depth, rows, common, ladder, offloads, econ,
                   kw):
    """P/D pairs within the budget, one instance each: every fitting decode shape with the
    fastest-prefilling fitting shape of each size that leaves it room."""
    by_size: dict[int, tuple] = {}
    for pool, st in fitting:
        t = float(st.ptab0.prefill_pass_s(1.0)) / pool.gpus     # batch-1 pass per GPU share
        if pool.gpus not in by_size or t * pool.gpus < by_size[pool.gpus][1]:
            by_size[pool.gpus] = (pool, t * pool.gpus)
    for d_pool, _ in fitting:
        for n_p, (p_pool, _) in sorted(by_size.items()):
            if n_p + d_pool.gpus > gpus:
                continue
            if eng.refusal(mode="disaggregated", draft_depth=int(depth), **d_pool.shape) or \
                    eng.refusal(mode="disaggregated", draft_depth=int(depth), **p_pool.shape):
                continue
            try:
                st = prepare_replay(m, hw, prefill_pool=p_pool, decode_pool=d_pool, **common)
            except SpecError as exc:
                rows.append(_unfit(hw, eng, kw["prof"], d_pool, p_pool, str(exc)))
                continue
            _ladder(st, rows, ladder=ladder, offloads=offloads, econ=econ,
                    kw=dict(kw, instances=gpus // (n_p + d_pool.gpus)))
