"""The plan's candidates as arrays: each instance shape's grid (overlap x decode batch x draft
depth x prefill batch) through the engine in one pass per overlap, the aggregated and
disaggregated candidates of a device and precision profile as one frame, their SLO verdicts,
their closed loop (:mod:`..closed_loop`); the sizing for a load, the ranking, the
recommendation and the Pareto front are :mod:`.ranking`, the footing :mod:`.footing`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..economics import usd_per_mtok_at
from ...engine import evaluate_arrays, invalid_fill
from ...errors import SpecError


#: per draft depth, as ``bench``'s step table sizes an engine's pool
#: (:func:`..full_memory.sequence_memory`): the bytes a token takes per GPU, a sequence's
#: fixed bytes in tokens, and the draft's share of the weights and of the bytes a token
_POOL_VARS = ("kv_pool_bytes_per_token_per_gpu", "sequence_overhead_tokens",
              "draft_weight_bytes_per_gpu", "draft_bytes_per_token_per_gpu")
_DECODE_VARS = ("decode_tokens_per_s_per_gpu", "decode_tokens_per_s_per_user", "tpot_s", "fits",
                "max_batch_size", "decode_binding_resource", "usd_per_mtok_output",
                "tokens_per_step", "weight_bytes_per_gpu", "sequence_bytes_per_gpu",
                *_POOL_VARS)
#: evaluated for ``sequence_bytes_per_gpu`` (a sequence's KV and activations per GPU at its
#: final length: what an engine's KV pool holds, :func:`.engines.engine_candidates`)
_SEQUENCE_VARS = ("kv_bytes_per_gpu", "activation_bytes_per_gpu")
_PREFILL_VARS = ("prefill_tokens_per_s_per_gpu", "ttft_s", "usd_per_mtok_input",
                 "prefill_binding_resource")


@dataclass
class _ShapeGrid:
    """One instance shape's candidates as arrays: per overlap policy, each variable over
    (decode batch, draft depth, prefill batch), broadcast by numpy's rules."""

    overlaps: list[str]
    batch_size: np.ndarray
    draft_depth: np.ndarray
    prefill_batch_size: np.ndarray
    values: list[dict[str, np.ndarray]]


def _shape_grid(m, hw, shape, precs, ovs, axes, kwargs, rates, cost) -> "_ShapeGrid | None":
    """The engine over one shape's grid, once per overlap policy. An overlap the engine
    refuses for this shape while another is valid gives NaN values that do not fit (as
    :func:`inference_factory.evaluate` masks an invalid combination of list values); None
    when every policy is refused."""
    names = (*_DECODE_VARS, *_PREFILL_VARS)
    got: list[dict | None] = []
    pool: dict[str, np.ndarray] = {}     # memory does not depend on the overlap: once
    for ov in ovs:
        try:
            r = evaluate_arrays(m, hw, **shape, **precs, overlap=ov, **axes, **kwargs,
                                variables=[v for v in names if not v.startswith("usd_")
                                           and v != "sequence_bytes_per_gpu"
                                           and v not in _POOL_VARS]
                                + list(_SEQUENCE_VARS))
        except SpecError:
            if len(ovs) == 1:
                return None
            got.append(None)
            continue
        r["sequence_bytes_per_gpu"] = (np.asarray(r.pop("kv_bytes_per_gpu"), float)
                                       + np.asarray(r.pop("activation_bytes_per_gpu"), float)
                                       ) / axes["batch_size"]
        pool = pool or _pool_vars(m, hw, dict(shape, **precs, overlap=ov, **kwargs), axes)
        r.update(pool)
        r["usd_per_mtok_output"] = usd_per_mtok_at(
            r["decode_tokens_per_s_per_gpu"], gpu_cost_usd_per_hour=rates["decode"],
            utilization=cost.utilization)
        r["usd_per_mtok_input"] = usd_per_mtok_at(
            r["prefill_tokens_per_s_per_gpu"], gpu_cost_usd_per_hour=rates["prefill"],
            utilization=cost.utilization)
        got.append(r)
    template = next((r for r in got if r is not None), None)
    if template is None:
        return None
    masked = {k: np.full(np.shape(v), *invalid_fill(np.asarray(v).dtype))
              for k, v in template.items()}
    return _ShapeGrid(list(ovs), np.ravel(axes["batch_size"]), np.ravel(axes["draft_depth"]),
                      np.ravel(axes["prefill_batch_size"]),
                      [r if r is not None else masked for r in got])


def _pool_vars(m, hw, common, axes) -> dict[str, np.ndarray]:
    """:data:`_POOL_VARS` over the grid's draft axis (the draft's share against depth 0, the
    target alone, as ``bench``'s step table takes it)."""
    from ..full_memory import sequence_memory

    depths = np.ravel(axes["draft_depth"])
    lengths = {k: axes[k] for k in ("prompt_len", "kv_len") if k in axes}
    _, overhead, per_token, weights = sequence_memory(
        m, hw, {**common, **lengths, "draft_depth": np.concatenate([[0.0], depths])},
        float(axes["final_len"]))
    col = lambda a: np.asarray(a, float)[None, :, None]  # noqa: E731
    return {"kv_pool_bytes_per_token_per_gpu": col(per_token[1:]),
            "sequence_overhead_tokens": col(overhead[1:]),
            "draft_weight_bytes_per_gpu": col(weights[1:] - weights[0]),
            "draft_bytes_per_token_per_gpu": col(per_token[1:] - per_token[0])}


def _decode_frame(sg: _ShapeGrid) -> dict[str, np.ndarray]:
    """Columns with one row per (overlap, batch, depth) of the decode variables, in that
    order."""
    nb, nd = sg.batch_size.size, sg.draft_depth.size
    cols: dict[str, list] = {"overlap": [], "batch_size": [], "draft_depth": []}
    parts: dict[str, list] = {v: [] for v in _DECODE_VARS}
    for ov, r in zip(sg.overlaps, sg.values):
        cols["overlap"].append(np.full(nb * nd, ov, dtype=object))
        cols["batch_size"].append(np.repeat(sg.batch_size, nd))
        cols["draft_depth"].append(np.tile(sg.draft_depth, nb))
        for v in _DECODE_VARS:
            a = np.asarray(r[v])
            a = a[..., 0] if a.ndim == 3 else a          # decode: no prefill-batch axis
            parts[v].append(np.broadcast_to(a, (nb, nd)).reshape(-1))
    out = {k: np.concatenate(v) for k, v in cols.items()}
    out.update({k: np.concatenate(v) for k, v in parts.items()})
    out["decode_binding_resource"] = out["decode_binding_resource"].astype(object)
    return out


def _along(a, n: int, float_: bool = True) -> np.ndarray:
    """A prefill variable along the prefill batch (the first point of the decode axes, on
    which it does not depend)."""
    a = np.asarray(a)
    a = a[0, 0] if a.ndim == 3 else a
    return np.broadcast_to(np.asarray(a, float if float_ else object), (n,))


def _prefill_best(sg: _ShapeGrid, ttft_s: float | None) -> dict[str, np.ndarray]:
    """Columns with one row per overlap: the prefill batch with the most input tokens/s per
    GPU meeting TTFT (NaN where none does), and whether the instance's weights fit at all."""
    rows = []
    pb = sg.prefill_batch_size
    for ov, r in zip(sg.overlaps, sg.values):
        p = _along(r["prefill_tokens_per_s_per_gpu"], pb.size)
        t = _along(r["ttft_s"], pb.size)
        cin = _along(r["usd_per_mtok_input"], pb.size)
        ok = np.ones(pb.shape, bool) if ttft_s is None else t <= ttft_s
        # the instance fits where its weights and one sequence at the final length fit
        mb = np.asarray(r["max_batch_size"])
        mb = mb[:, :1] if mb.ndim >= 2 else mb           # the first draft depth
        row = [str(ov), bool(np.min(mb) >= 1), float(t.min())]
        if ok.any():
            i = int(np.flatnonzero(ok)[np.argmax(p[ok])])
            row += [float(pb[i]), float(p[i]), float(t[i]), float(cin[i]),
                    str(_along(r["prefill_binding_resource"], pb.size, float_=False)[i])]
        else:
            row += [np.nan, np.nan, np.nan, np.nan, ""]
        rows.append(row)
    names = ("overlap", "prefill_fits", "min_ttft_s", "prefill_batch_size",
             "prefill_tokens_per_s_per_gpu", "ttft_s", "usd_per_mtok_input",
             "prefill_binding_resource")
    kinds = (object, bool, float, float, float, float, float, object)
    return {k: np.array([r[c] for r in rows], dtype=kd)
            for c, (k, kd) in enumerate(zip(names, kinds))}


def _shape_cols(shape, n_rows: int, prefix: str = "") -> dict[str, np.ndarray]:
    """The shape's tp, dp, ep and GPU count as columns of ``n_rows`` rows."""
    tp, dp, ep = shape.get("tp", 1), shape.get("dp", 1), shape.get("ep", 1)
    return {f"{prefix}tp": np.full(n_rows, tp, dtype=np.int64),
            f"{prefix}dp": np.full(n_rows, dp, dtype=np.int64),
            f"{prefix}ep": np.full(n_rows, ep, dtype=np.int64),
            f"{prefix or 'decode_'}gpus": np.full(n_rows, tp * dp, dtype=np.int64)}


#: Columns of an aggregated candidate's closed loop (:func:`_closed_loop`); NaN elsewhere.
_LOOP_COLUMNS = ("loop_request_rate_per_s", "loop_in_service", "loop_ttft_s", "loop_tpot_s",
                 "loop_prompts_per_pass")


def _closed_loop(sg: _ShapeGrid, dec: dict, shape, isl: int, osl: int,
                 serving_engine=None) -> dict[str, np.ndarray]:
    """Each aggregated row (overlap, batch, depth) of one shape as ``bench``'s closed loop at
    its decode batch (:func:`_closed_loops` of that shape alone)."""
    return _closed_loops([(shape, sg)], [dec], isl, osl, serving_engine)[0]


def _closed_loops(per_shape, decs, isl: int, osl: int,
                  serving_engine=None) -> list[dict[str, np.ndarray]]:
    """Each aggregated row (overlap, batch, depth) of every shape as ``bench``'s closed loop
    at its decode batch (:func:`..closed_loop.loop_at_batch`, under the serving-engine
    profile ``serving_engine``, default the file's default):
    prompts per pass gathered in the poll window, from the shape's own pass times over the
    prefill-batch grid. The rows of all shapes and overlaps are one array through the loop
    (each row's arithmetic is its own: the shape's dp, pass budget and pass times per row),
    so the loop's rounds run once per device and profile, not once per shape and overlap.
    Returns the columns of :data:`_LOOP_COLUMNS` per shape, rows as in ``decs``."""
    from ...specs.engines import load_serving_engine
    from ..closed_loop import loop_at_batch

    eng = load_serving_engine(serving_engine)
    host_d, host_p = eng.host_s_per_decode_step, eng.host_s_per_prefill_pass
    cols: dict[str, list] = {k: [] for k in ("b", "tpot0", "tau", "depth", "dp", "k_max",
                                             "budget")}
    groups, bounds, start = [], [], 0        # (rows, prefill batches, pass times) per overlap
    for (shape, sg), dec in zip(per_shape, decs):
        dp = shape.get("dp", 1)
        pb = sg.prefill_batch_size
        k_max = float(min(max(1.0, np.floor(eng.pass_tokens_per_rank(dp) / isl)), pb.max()))
        n_rows = len(dec["overlap"])
        per = n_rows // len(sg.overlaps)
        bounds.append(slice(start, start + n_rows))
        for i, r in enumerate(sg.values):
            rows = slice(i * per, (i + 1) * per)
            groups.append((slice(start + i * per, start + (i + 1) * per), pb,
                           _along(r["ttft_s"], pb.size)))
            cols["b"].append(dec["batch_size"][rows].astype(float))
            cols["tpot0"].append(dec["tpot_s"][rows].astype(float))
            cols["tau"].append(dec["tokens_per_step"][rows].astype(float))
            cols["depth"].append(dec["draft_depth"][rows].astype(float))
        start += n_rows
        mixed = eng.mixed_pass_tokens(dp)     # None: prefill passes run on their own
        for k, v in (("dp", float(dp)), ("k_max", k_max),
                     ("budget", np.nan if mixed is None else mixed)):
            cols[k].append(np.full(n_rows, v))
    if start == 0:
        return [{k: np.empty(0) for k in _LOOP_COLUMNS} for _ in decs]
    b, tpot0, tau, depth, dp, k_max, budget = (
        np.concatenate(cols[k]) for k in ("b", "tpot0", "tau", "depth", "dp", "k_max", "budget"))
    dp_attention = dp > 1

    def pass_s_of(k):
        t = np.empty(np.shape(k))
        for rows, pb, nodes in groups:
            t[rows] = np.interp(k[rows], pb, nodes)
        return t + host_p

    td = tpot0 * tau
    n = dp * b
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(2):     # the poll interval depends on the concurrency it implies
            recv = np.where(dp_attention, eng.recv_interval(n, True), eng.recv_interval(n, False))
            # the engine profile's host times and policy, as bench applies them
            lp = loop_at_batch(
                b, tpot0_s=(td + host_d) / tau, decode_step_s=td + host_d,
                pass_s_of=pass_s_of, max_prompts=k_max,
                decode_tokens_per_request=max(osl - 1, 1), recv_interval_steps=recv,
                mixed_budget_tokens=None if np.all(np.isnan(budget)) else budget,
                mean_prompt=float(isl), draft_depth=depth)
            n = np.where(np.isfinite(lp["in_service"]), dp * lp["in_service"], n)
    out = {"loop_request_rate_per_s": lp["request_rate_per_s"],
           "loop_in_service": lp["in_service"], "loop_ttft_s": lp["ttft_s"],
           "loop_tpot_s": lp["tpot_s"], "loop_prompts_per_pass": lp["prompts_per_pass"]}
    return [{k: np.asarray(v, dtype=float)[rows] for k, v in out.items()} for rows in bounds]


def pack_pools(*, total_gpus, decode_instance_gpus, decode_requests_per_s_per_instance,
               prefill_instance_gpus, prefill_requests_per_s_per_instance):
    r"""Whole prefill and decode instances within a GPU budget, balanced on request rate.

    .. math:: \max_{n_d, n_p \ge 1,\; n_d g_d + n_p g_p \le N} \min(n_d x_d,\ n_p x_p)

    then the fewest instances that carry that rate: :math:`n = \lceil R / x \rceil` per pool
    (what ``simulate`` provisions for the same rate). ``x`` requests/s of one instance at its
    operating point, ``g`` its GPUs, ``N`` the budget. The optimum lies at the balance point
    :math:`n_d^* = N x_p / (x_p g_d + x_d g_p)`; the integers within 2 of it (and 1) are
    tried. Arrays broadcast; no feasible pair gives zeros and a rate of NaN.

    Returns ``(n_decode, n_prefill, requests_per_s)``.
    """
    n_gpu = float(total_gpus)
    gd, xd = np.asarray(decode_instance_gpus, float), np.asarray(
        decode_requests_per_s_per_instance, float)
    gp, xp = np.asarray(prefill_instance_gpus, float), np.asarray(
        prefill_requests_per_s_per_instance, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        star = n_gpu * xp / (xp * gd + xd * gp)
        nd_max = np.floor((n_gpu - gp) / gd)
        best_r = np.full(np.broadcast_shapes(gd.shape, xd.shape, gp.shape, xp.shape), -np.inf)
        for off in (-2, -1, 0, 1, 2, None):
            nd = np.ones_like(star) if off is None else np.floor(star) + off
            nd = np.clip(np.nan_to_num(nd, nan=1.0), 1.0, np.maximum(nd_max, 1.0))
            npf = np.floor((n_gpu - nd * gd) / gp)
            r = np.where((npf >= 1) & (nd <= nd_max), np.minimum(nd * xd, npf * xp), -np.inf)
            best_r = np.maximum(best_r, np.nan_to_num(r, nan=-np.inf))
        ok = np.isfinite(best_r) & (best_r > 0)
        rate = np.where(ok, best_r, np.nan)
        # the fewest whole instances that carry the rate (1e-9: float noise at the balance)
        n_d = np.where(ok, np.maximum(np.ceil(rate / xd * (1 - 1e-9)), 1), 0)
        n_p = np.where(ok, np.maximum(np.ceil(rate / xp * (1 - 1e-9)), 1), 0)
    return n_d.astype(np.int64), n_p.astype(np.int64), rate


def _candidates(m, hw, prof, per_shape, isl, osl, ttft_s, tpot_s, gpus, modes, *,
                rates, utilization, serving_engine=None) -> list:
    """Every candidate of one device and precision profile as one frame: per shape, its
    aggregated rows (its own best prefill batch per overlap, as many whole instances as the
    budget holds) and its disaggregated rows (the prefill instance of any shape, and the
    whole prefill and decode instance counts within the budget, that carry the most
    requests/s: :func:`pack_pools`)."""
    prefill = []
    for shape, sg in per_shape:
        pf = _prefill_best(sg, ttft_s)
        prefill.append({**pf, **_shape_cols(shape, len(pf["overlap"]), "prefill_")})
    prefill_all = ({k: np.concatenate([pf[k] for pf in prefill]) for k in prefill[0]}
                   if prefill else {})
    common = dict(hardware=hw.name, precision=prof.get("precision", ""),
                  low_precision=prof["low_precision"],
                  **{k: v for k, v in prof.items()
                     if k.endswith("_precision") and k != "low_precision"})
    decs = []
    for shape, sg in per_shape:
        dec = _decode_frame(sg)
        dec.update(_shape_cols(shape, len(dec["overlap"])))
        decs.append(dec)
    loops = (_closed_loops(per_shape, decs, isl, osl, serving_engine)
             if "aggregated" in modes else None)
    frames = []
    for i, ((shape, sg), own, dec) in enumerate(zip(per_shape, prefill, decs)):
        n_rows = len(dec["overlap"])
        n = shape.get("tp", 1) * shape.get("dp", 1)
        tags = lambda mode, pov: {"prefill_overlap": pov,  # noqa: E731
                                  "mode": np.full(n_rows, mode, dtype=object),
                                  **{k: np.full(n_rows, v, dtype=object if isinstance(v, str)
                                                else None) for k, v in common.items()}}
        if loops is not None:
            at = np.repeat(np.arange(len(sg.overlaps)), n_rows // len(sg.overlaps))
            loop = loops[i]
            n_inst = gpus // n
            frames.append({**dec, **{k: v[at] for k, v in own.items() if k != "overlap"},
                           **tags("aggregated", dec["overlap"].copy()),
                           "decode_instances": np.full(n_rows, n_inst, dtype=np.int64),
                           "prefill_instances": np.zeros(n_rows, dtype=np.int64),
                           "request_rate_per_s": n_inst * loop["loop_request_rate_per_s"]
                           * shape.get("dp", 1),
                           **loop})
        if "disaggregated" in modes and prefill_all:
            # the prefill pool: of every prefill instance (any shape, same precision profile)
            # that fits beside this decode instance, the one whose whole-instance packing in
            # the budget carries the most requests/s; ties: fewer GPUs, then the first listed
            # (per shape: arrays of a shape's rows x the prefill instances stay in cache,
            # which one array of every shape's rows does not)
            pg = prefill_all["prefill_gpus"].astype(float)
            p_ok = (prefill_all["prefill_fits"]
                    & np.isfinite(prefill_all["prefill_tokens_per_s_per_gpu"]) & (pg + n <= gpus))
            with np.errstate(divide="ignore", invalid="ignore"):
                # requests/s of an instance: its output tokens/s over osl (as the pools'
                # arithmetic and simulate charge a request osl / D of decode GPU time)
                xd = dec["decode_tokens_per_s_per_gpu"].astype(float) * n / osl
                xp = prefill_all["prefill_tokens_per_s_per_gpu"] * pg / isl
            xp = np.where(p_ok, xp, np.nan)
            nd, npf, rate = pack_pools(total_gpus=gpus, decode_instance_gpus=float(n),
                                       decode_requests_per_s_per_instance=xd[:, None],
                                       prefill_instance_gpus=pg[None, :],
                                       prefill_requests_per_s_per_instance=xp[None, :])
            used = nd * n + npf * pg[None, :]
            key = np.where(np.isfinite(rate), -rate, np.inf)
            # best rate first, then fewer GPUs (lexsort's last key is the primary one)
            order = np.lexsort((used, key), axis=1) if key.size else key.astype(int)
            best = order[:, 0] if key.size else np.zeros(n_rows, int)
            rr = np.arange(n_rows)
            row = {k: v[best] for k, v in prefill_all.items() if k != "overlap"}
            none = ~np.isfinite(rate[rr, best]) if key.size else np.ones(n_rows, bool)
            for k in ("prefill_tokens_per_s_per_gpu", "ttft_s", "usd_per_mtok_input",
                      "prefill_batch_size"):
                row[k] = np.where(none, np.nan, row[k].astype(float))
            row["prefill_fits"] = np.where(none, False, row["prefill_fits"])
            pov = np.where(none, "", prefill_all["overlap"][best].astype(object))
            frames.append({**dec, **row,
                           **tags("disaggregated", pov.astype(object)),
                           "decode_instances": np.where(none, 0, nd[rr, best]),
                           "prefill_instances": np.where(none, 0, npf[rr, best]),
                           "request_rate_per_s": rate[rr, best],
                           **{k: np.full(n_rows, np.nan) for k in _LOOP_COLUMNS}})
    if not frames:
        return []
    f = {k: np.concatenate([fr[k] for fr in frames]) for k in frames[0]}
    return [_judge(f, isl, osl, ttft_s, tpot_s, rates=rates, utilization=utilization,
                   gpus=gpus)]


def _judge(f: dict[str, np.ndarray], isl, osl, ttft_s, tpot_s, *, rates, utilization,
           gpus) -> pd.DataFrame:
    """The derived columns of the candidates, as a frame: an aggregated candidate is the
    closed loop of ``bench`` at its decode batch (:func:`..closed_loop.loop_at_batch`: TPOT with the
    others' prefill stalls, TTFT with the poll and queue waits, the request rate and the
    concurrency that batch implies, under the plan's serving-engine profile); a
    disaggregated one pairs pools sized to each other (all-in output tokens/s per GPU), its
    TTFT one prefill pass. Both fill the budget with whole instances: ``gpus`` is every GPU
    used, ``output_tokens_per_s`` the whole fleet's, and the per-GPU figures and the all-in
    $/M count every GPU used (the GPU-hours of both pools, by phase price, over the output
    tokens). Then whether the SLOs are met and why not."""
    agg = f["mode"] == "aggregated"
    d = f["decode_tokens_per_s_per_gpu"].astype(float)
    p = f["prefill_tokens_per_s_per_gpu"].astype(float)
    b, dp = f["batch_size"].astype(float), f["dp"].astype(float)
    tpot0 = f["tpot_s"].astype(float)
    n_d, n_p = f["decode_instances"].astype(float), f["prefill_instances"].astype(float)
    f["instances"] = (n_d + n_p).astype(np.int64)
    f["gpus"] = (n_d * f["decode_gpus"] + n_p * np.where(agg, 0, f["prefill_gpus"])).astype(
        np.int64)
    rate = f["request_rate_per_s"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        f["output_tokens_per_s"] = rate * osl
        per_gpu = f["output_tokens_per_s"] / f["gpus"]
        # GPU-hour price of the fleet: by phase, weighted by each phase's GPU time
        # (aggregated: the prefill share of busy time, isl/P over isl/P + osl/D)
        share_p = np.where(agg, (isl / p) / (isl / p + osl / d),
                           n_p * f["prefill_gpus"] / f["gpus"])
        usd_h = rates["prefill"] * share_p + rates["decode"] * (1.0 - share_p)
    del b
    f["decode_tpot_s"] = tpot0
    f["tpot_s"] = np.where(agg, f["loop_tpot_s"], tpot0)
    f["tokens_per_s_per_user"] = 1.0 / f["tpot_s"]
    f["ttft_s"] = np.where(agg, f["loop_ttft_s"], f["ttft_s"])
    f["prefill_batch_size"] = np.where(agg, f["loop_prompts_per_pass"], f["prefill_batch_size"])
    f["output_tokens_per_s_per_gpu"] = per_gpu
    f["usd_per_mtok_output_all_in"] = usd_per_mtok_at(per_gpu, gpu_cost_usd_per_hour=usd_h,
                                                      utilization=utilization)
    # requests in flight per instance (Little's law over TTFT and the decode time)
    f["concurrency"] = np.where(agg, dp * f["loop_in_service"],
                                rate / np.maximum(n_d, 1)
                                * (f["ttft_s"] + max(osl - 1.0, 0.0) * tpot0))
    reasons = np.full(len(agg), "", dtype=object)
    pfits = f["prefill_fits"].astype(bool)
    fits = f["fits"].astype(bool) & pfits
    no_prefill = ~np.isfinite(p)
    reasons[no_prefill & pfits] = "misses TTFT at every prefill batch"
    reasons[~pfits] = "prefill does not fit"
    reasons[~f["fits"].astype(bool)] = "does not fit in HBM"
    unpacked = fits & ~no_prefill & ~np.isfinite(rate)
    reasons[unpacked] = f"no whole prefill and decode instances fit in {gpus} GPUs"
    slow = (f["tpot_s"] > tpot_s) if tpot_s is not None else np.zeros(len(agg), bool)
    late = ((f["ttft_s"] > ttft_s) if ttft_s is not None else np.zeros(len(agg), bool)) & agg
    # an aggregated batch whose prompts the engine cannot prefill between its decode steps
    unsustained = agg & ~np.isfinite(f["tpot_s"].astype(float)) & ~no_prefill
    reasons[fits & ~no_prefill & late] = "misses TTFT (closed loop: poll and queue waits)"
    reasons[fits & ~no_prefill & slow] = "misses TPOT"
    reasons[fits & unsustained] = "prefill cannot keep up with this decode batch"
    f["meets_slo"] = fits & ~no_prefill & ~slow & ~late & ~unsustained & ~unpacked
    f["reason"] = reasons
    return pd.DataFrame(f)
