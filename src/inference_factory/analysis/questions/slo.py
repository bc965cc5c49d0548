"""The SLO questions: the largest batch meeting latency SLOs (:func:`max_batch_meeting_slo`,
refined between grid points by :func:`scipy.optimize.brentq`) and the cheapest hardware x
parallelism x options meeting them (:func:`cheapest_meeting_slo`).

Re-exported by :mod:`inference_factory.analysis.questions`, where users import them."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import xarray as xr

from ..economics import INPUT_TOKENS_PER_OUTPUT_TOKEN, CostModel, add_economics, cost_attrs
from ...specs.prices import resolve_price
from ...engine import STRUCT_AXES, evaluate, to_dataframe
from ...errors import SpecError
from ...output.metadata import annotate
from ...specs import HardwareSpec, ModelSpec, load_hardware, load_model
from .args import (DOLLAR_METRICS, _check_kwargs, _int_list, _point_kwargs, _positive,
                            _spec_maps, default_batch_grid)


# --------------------------------------------------------------------------------------------
# largest batch meeting SLOs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Constraint:
    var: str       # engine variable
    kind: str      # "max": var <= limit; "min": var >= limit
    limit: float
    label: str

    def ok(self, value):
        return value <= self.limit if self.kind == "max" else value >= self.limit

    def violation(self, value: float) -> float:
        """<= 0 when met; a continuous function of the value for root finding."""
        if self.kind == "max":
            return value / self.limit - 1.0
        return self.limit / value - 1.0 if value > 0 else math.inf


def _largest_meeting(model, hardware, kwargs: dict, var: str, grid: list[int],
                     constraints: list[_Constraint], memory: bool, refine: bool, who: str):
    """Largest whole ``var`` on or between grid points meeting every constraint (and fitting,
    when ``memory``), per point of the other dimensions."""
    specs = _spec_maps(model, hardware)
    m_arg = [load_model(x) for x in model] if isinstance(model, (list, tuple)) else load_model(model)
    h_arg = ([load_hardware(x) for x in hardware] if isinstance(hardware, (list, tuple))
             else load_hardware(hardware))
    ds = evaluate(m_arg, h_arg, **{var: [float(b) for b in grid]}, **kwargs)
    if var not in ds.dims:
        ds = ds.expand_dims({var: [float(grid[0])]})
    names = [c.var for c in constraints] + (["fits", "max_batch_size"] if memory else [])
    arrays = xr.broadcast(*[ds[n] for n in names], ds[var])
    others = [d for d in arrays[0].dims if d != var]
    arrays = [a.transpose(*others, var).values for a in arrays[:-1]]
    by_name = dict(zip(names, arrays))
    shape = tuple(ds.sizes[d] for d in others)
    answer = np.full(shape, np.nan)
    binding = np.empty(shape, dtype=object)

    for index in np.ndindex(*shape) if shape else [()]:
        cont = [c.ok(by_name[c.var][index]) for c in constraints]
        cont_ok = np.logical_and.reduce(cont) if cont else np.ones(len(grid), bool)
        fits = by_name["fits"][index].astype(bool) if memory else np.ones(len(grid), bool)
        meets = cont_ok & fits

        def reason(i: int) -> str:
            if memory and not fits[i]:
                return "memory"
            for c, okc in zip(constraints, cont):
                if not okc[i]:
                    return c.label
            return "none"

        good = np.flatnonzero(meets)
        if good.size == 0:
            binding[index] = reason(0)
            continue
        i = int(good[-1])
        if i == len(grid) - 1:
            answer[index], binding[index] = grid[i], "grid"
            continue
        lo, hi = grid[i], grid[i + 1]
        binding[index] = reason(i + 1)
        best = lo
        if refine and hi - lo > 1:
            point = _point_kwargs(ds, others, index, specs, who)
            base = {**kwargs, **point}
            base.setdefault("model", m_arg)
            base.setdefault("hardware", h_arg)
            mdl, hw = base.pop("model"), base.pop("hardware")

            def at(b: float) -> dict[str, float]:
                one = evaluate(mdl, hw, **{var: float(b)}, **base)
                return {n: float(one[n]) for n in names}

            def failing(b: int) -> str:
                """'' when batch b meets everything, else what it fails first."""
                v = at(b)
                if memory and not bool(v["fits"]):
                    return "memory"
                return next((c.label for c in constraints if not c.ok(v[c.var])), "")

            def meets_at(b: int) -> bool:
                return failing(b) == ""

            cap = hi - 1
            if memory:
                cap = min(cap, int(by_name["max_batch_size"][index][i]))
            cand = cap
            if constraints and not bool(cont_ok[i + 1]):
                def h(b: float) -> float:
                    v = at(b)
                    return max(c.violation(v[c.var]) for c in constraints)
                from scipy import optimize

                root = optimize.brentq(h, float(lo), float(hi), xtol=1e-3)
                cand = min(cap, int(math.floor(root)))
            cand = max(lo, cand)
            steps = 0
            while cand > lo and not meets_at(cand) and steps < 16:
                cand, steps = cand - 1, steps + 1
            steps = 0
            while cand + 1 < hi and meets_at(cand + 1) and steps < 16:
                cand, steps = cand + 1, steps + 1
            best = cand
            if best + 1 < hi:                      # what stops the batch one above the answer
                binding[index] = failing(best + 1) or binding[index]
        answer[index] = best
    coords = {d: ds[d] for d in others}
    return ds, others, coords, answer, binding, specs, m_arg, h_arg


def max_batch_meeting_slo(model: str | ModelSpec | Sequence, hardware: str | HardwareSpec | Sequence,
                          *, tpot_s: float | None = None, min_user_tokens_per_s: float | None = None,
                          ttft_s: float | None = None, batch_size: Sequence[int] | None = None,
                          prefill_batch_size: Sequence[int] | None = None, max_batch: int = 4096,
                          refine: bool = True, **kwargs: Any) -> xr.Dataset:
    """The largest decode batch that fits in HBM and meets the decode SLOs, and (with
    ``ttft_s``) the largest prefill batch meeting the TTFT SLO.

    The engine is evaluated on a whole-number batch grid (``batch_size``, default geometric
    from 1 to ``max_batch``); between the last grid point that meets the SLOs and the next
    one, :func:`scipy.optimize.brentq` finds where the binding SLO is crossed on a continuous
    batch, and the answer is the largest whole batch there that meets every SLO, checked by
    the engine (HBM capacity is the engine's own ``max_batch_size``).

    Parameters
    ----------
    tpot_s : float, optional
        Time-per-output-token SLO (seconds).
    min_user_tokens_per_s : float, optional
        Decode tokens/s every user must see.
    ttft_s : float, optional
        Time-to-first-token SLO (seconds); searched over ``prefill_batch_size`` (prompts per
        attention-DP rank per pass), since in the engine TTFT depends on the prefill batch.
    batch_size, prefill_batch_size : whole numbers, optional
        Search grids (increasing).
    refine : bool
        Refine between grid points (otherwise the answer is the largest grid point).
    **kwargs
        Any other engine axis (lists add dimensions) or option.

    Returns
    -------
    xr.Dataset
        ``max_batch_size_meeting_slo`` (NaN where none meets), ``slo_binding_constraint``
        (what stops a larger batch: 'tpot', 'user_tokens_per_s', 'memory', or 'grid' when the
        grid top still meets), and at that batch ``tpot_s``, ``decode_tokens_per_s_per_user``,
        ``decode_tokens_per_s_per_gpu``; with ``ttft_s`` also
        ``max_prefill_batch_size_meeting_slo``, ``prefill_slo_binding_constraint``, ``ttft_s``
        and ``prefill_tokens_per_s_per_gpu``.
    """
    who = "max_batch_meeting_slo"
    _check_kwargs(kwargs, who, forbid=("batch_size", "prefill_batch_size"))
    tpot_s = _positive("tpot_s", tpot_s)
    min_user_tokens_per_s = _positive("min_user_tokens_per_s", min_user_tokens_per_s)
    ttft_s = _positive("ttft_s", ttft_s)
    grid = _int_list("batch_size", batch_size if batch_size is not None
                     else default_batch_grid(max_batch), 1)
    cons = []
    if tpot_s is not None:
        cons.append(_Constraint("tpot_s", "max", tpot_s, "tpot"))
    if min_user_tokens_per_s is not None:
        cons.append(_Constraint("decode_tokens_per_s_per_user", "min", min_user_tokens_per_s,
                                "user_tokens_per_s"))
    ds, others, coords, answer, binding, specs, m_arg, h_arg = _largest_meeting(
        model, hardware, dict(kwargs), "batch_size", grid, cons, True, refine, who)
    out = xr.Dataset(coords=coords)
    out["max_batch_size_meeting_slo"] = (others, answer)
    out["slo_binding_constraint"] = (others, binding.astype(str))
    at_vars = ("tpot_s", "decode_tokens_per_s_per_user", "decode_tokens_per_s_per_gpu")
    out = _values_at(out, ds, others, answer, "batch_size", at_vars, kwargs, specs, m_arg, h_arg, who)
    if ttft_s is not None:
        pgrid = _int_list("prefill_batch_size", prefill_batch_size if prefill_batch_size is not None
                          else default_batch_grid(max_batch), 1)
        pds, pothers, pcoords, panswer, pbinding, *_ = _largest_meeting(
            model, hardware, dict(kwargs), "prefill_batch_size", pgrid,
            [_Constraint("ttft_s", "max", ttft_s, "ttft")], False, refine, who)
        pout = xr.Dataset(coords=pcoords)
        pout["max_prefill_batch_size_meeting_slo"] = (pothers, panswer)
        pout["prefill_slo_binding_constraint"] = (pothers, pbinding.astype(str))
        pout = _values_at(pout, pds, pothers, panswer, "prefill_batch_size",
                          ("ttft_s", "prefill_tokens_per_s_per_gpu"), kwargs, specs, m_arg,
                          h_arg, who)
        out = xr.merge([out, pout], combine_attrs="override", compat="no_conflicts")
    units = {"max_batch_size_meeting_slo": "sequences per attention-DP rank",
             "max_prefill_batch_size_meeting_slo": "prompts per attention-DP rank per pass",
             "slo_binding_constraint": "label", "prefill_slo_binding_constraint": "label",
             "tpot_s": "s", "ttft_s": "s", "decode_tokens_per_s_per_user": "tokens/s/user",
             "decode_tokens_per_s_per_gpu": "tokens/s/GPU",
             "prefill_tokens_per_s_per_gpu": "tokens/s/GPU"}
    for k in out.data_vars:
        out[k].attrs["units"] = units.get(k, "")
    annotate(out)            # CF: units pint parses and a long name on every variable
    out.attrs.update(ds.attrs)
    out.attrs["slo"] = ", ".join(f"{k} = {v:g}" for k, v in (("tpot_s", tpot_s), (
        "min_user_tokens_per_s", min_user_tokens_per_s), ("ttft_s", ttft_s)) if v is not None) or "none"
    return out


def _values_at(out, ds, others, answer, var, names, kwargs, specs, m_arg, h_arg, who):
    """Engine values at each point's answer (one evaluation per point with an answer)."""
    shape = answer.shape
    vals = {n: np.full(shape, np.nan) for n in names}
    for index in np.ndindex(*shape) if shape else [()]:
        b = answer[index]
        if not np.isfinite(b):
            continue
        point = _point_kwargs(ds, others, index, specs, who)
        mdl, hw = point.pop("model", m_arg), point.pop("hardware", h_arg)
        one = evaluate(mdl, hw, **{**kwargs, **point, var: float(b)})
        for n in names:
            vals[n][index] = float(one[n])
    for n in names:
        out[n] = (others, vals[n])
    return out


# --------------------------------------------------------------------------------------------
# cheapest configuration meeting an SLO
# --------------------------------------------------------------------------------------------


def cheapest_meeting_slo(model: str | ModelSpec | Sequence, hardware: str | HardwareSpec | Sequence,
                         *, parallelism: Sequence[Mapping[str, int]] | None = None,
                         options: Mapping[str, Sequence[Any]] | None = None,
                         tpot_s: float | None = None, ttft_s: float | None = None,
                         min_user_tokens_per_s: float | None = None,
                         batch_size: Sequence[int] | None = None, price=None,
                         cost: CostModel | None = None, metric: str = "usd_per_mtok_output",
                         input_tokens_per_output_token: float = INPUT_TOKENS_PER_OUTPUT_TOKEN,
                         **kwargs: Any) -> pd.DataFrame:
    """Rank hardware x parallelism x options by $/M tokens among those meeting the SLOs.

    Every combination of ``model``, ``hardware``, one entry of ``parallelism`` and one value
    of each ``options`` list is evaluated over the batch grid; its operating point is the
    batch with the lowest ``metric`` among those that fit in HBM and meet every SLO.

    Parameters
    ----------
    parallelism : list of dicts, optional
        Instance shapes, e.g. ``[{"tp": 8}, {"dp": 8, "ep": 8}]`` (keys: structural axes).
    options : dict of lists, optional
        Other structural choices, crossed: e.g. ``{"kv_precision": ["bf16", "fp8"]}``.
    tpot_s, ttft_s, min_user_tokens_per_s : float, optional
        SLOs (TTFT is the engine's at the given ``prompt_len`` / ``prefill_batch_size``).
    batch_size : whole numbers, optional
        Decode batch grid (default 129 geometric steps from 1 to 4096, about 7% apart); the
        operating batch is a grid point.
    price, cost, input_tokens_per_output_token
        As for :func:`~inference_factory.analysis.economics.add_economics`.
    metric : str
        ``usd_per_mtok_output`` (default), ``usd_per_mtok_blended`` or ``usd_per_mtok_input``.

    Returns
    -------
    pandas.DataFrame
        One row per combination: the choices, ``n_gpus``, the chosen ``batch_size``, $/M
        tokens, throughput, latency, margin (with a price), ``meets_slo``, ``rank`` (1 =
        cheapest; NaN when failing) and ``reason`` (why a combination fails: invalid, no price,
        does not fit, misses an SLO). Rows meeting the SLOs come first, cheapest first.
    """
    who = "cheapest_meeting_slo"
    if metric not in DOLLAR_METRICS:
        raise SpecError(f"metric = {metric!r} is not one of {list(DOLLAR_METRICS)}")
    _check_kwargs(kwargs, who, scalar_axes=True, forbid=("batch_size",))
    tpot_s = _positive("tpot_s", tpot_s)
    ttft_s = _positive("ttft_s", ttft_s)
    min_user_tokens_per_s = _positive("min_user_tokens_per_s", min_user_tokens_per_s)
    grid = _int_list("batch_size", batch_size if batch_size is not None
                     else default_batch_grid(4096, n=129), 1)
    pars = [dict(p) if isinstance(p, Mapping) else p for p in (parallelism or [{}])]
    opts = dict(options or {})
    for p in pars:
        if not isinstance(p, Mapping):
            raise SpecError(f"{who}: parallelism entries must be dicts like {{'tp': 8}}; got {p!r}")
        bad = [k for k in p if k not in STRUCT_AXES]
        if bad:
            raise SpecError(f"{who}: parallelism key {bad[0]!r} is not a structural axis; "
                            f"allowed: {sorted(STRUCT_AXES)}")
    for k, v in opts.items():
        if k not in STRUCT_AXES:
            raise SpecError(f"{who}: option {k!r} is not a structural axis; allowed: "
                            f"{sorted(STRUCT_AXES)}")
        if not isinstance(v, (list, tuple)) or not v:
            raise SpecError(f"{who}: option {k} must be a non-empty list of choices; got {v!r}")
    clash = (set().union(*[set(p) for p in pars]) | set(opts)) & set(kwargs)
    if clash:
        raise SpecError(f"{who}: {sorted(clash)[0]} is given both as a fixed axis and as a choice")
    pr = resolve_price(price)
    cost = cost or CostModel()
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    hws = list(hardware) if isinstance(hardware, (list, tuple)) else [hardware]
    par_keys = sorted(set().union(*[set(p) for p in pars]), key=list(STRUCT_AXES).index)
    opt_keys = list(opts)

    rows = []
    for m, h, par, combo in itertools.product(models, hws, pars, itertools.product(*opts.values())):
        choice = dict(par, **dict(zip(opt_keys, combo)))
        mname = load_model(m).name
        hname = load_hardware(h).name
        tp = int(choice.get("tp", kwargs.get("tp", STRUCT_AXES["tp"])))
        dp = int(choice.get("dp", kwargs.get("dp", STRUCT_AXES["dp"])))
        row: dict[str, Any] = {"model": mname, "hardware": hname}
        row.update({k: choice.get(k, kwargs.get(k, STRUCT_AXES[k])) for k in par_keys})
        row.update({k: choice[k] for k in opt_keys})
        row["n_gpus"] = tp * dp
        try:
            ds = evaluate(m, h, batch_size=[float(b) for b in grid], **choice, **kwargs)
        except SpecError as exc:
            rows.append({**row, "meets_slo": False, "reason": f"invalid: {exc}"})
            continue
        try:
            ds = add_economics(ds, price=pr, cost=cost,
                               input_tokens_per_output_token=input_tokens_per_output_token)
        except SpecError as exc:
            rows.append({**row, "meets_slo": False, "reason": f"no cost: {exc}"})
            continue
        df = to_dataframe(ds)
        fits = df["fits"].to_numpy(bool)
        checks = []
        if tpot_s is not None:
            checks.append(("TPOT", df["tpot_s"].to_numpy() <= tpot_s))
        if min_user_tokens_per_s is not None:
            checks.append(("tokens/s per user",
                           df["decode_tokens_per_s_per_user"].to_numpy() >= min_user_tokens_per_s))
        if ttft_s is not None:
            checks.append(("TTFT", df["ttft_s"].to_numpy() <= ttft_s))
        meets = fits & np.logical_and.reduce([c for _, c in checks]) if checks else fits
        if meets.any():
            i = int(np.flatnonzero(meets)[np.argmin(df[metric].to_numpy()[meets])])
            reason = ""
        elif not fits.any():
            i = 0
            reason = (f"does not fit: {df['hbm_used_bytes_per_gpu'].iloc[0] / 1e9:.1f} GB per GPU "
                      f"at batch {grid[0]} (max batch {df['max_batch_size'].iloc[0]:.0f})")
        else:
            fit_idx = np.flatnonzero(fits)
            i = int(fit_idx[0])
            failed = []
            if tpot_s is not None and not (df["tpot_s"].to_numpy()[fits] <= tpot_s).any():
                failed.append(f"TPOT {df['tpot_s'].to_numpy()[fits].min() * 1e3:.1f} ms > "
                              f"{tpot_s * 1e3:g} ms")
            if min_user_tokens_per_s is not None and not (
                    df["decode_tokens_per_s_per_user"].to_numpy()[fits] >= min_user_tokens_per_s).any():
                failed.append(f"{df['decode_tokens_per_s_per_user'].to_numpy()[fits].max():.1f} "
                              f"tokens/s per user < {min_user_tokens_per_s:g}")
            if ttft_s is not None and not (df["ttft_s"].to_numpy()[fits] <= ttft_s).any():
                failed.append(f"TTFT {df['ttft_s'].to_numpy()[fits].min():.3g} s > {ttft_s:g} s")
            if not failed:
                failed.append("no fitting batch meets every SLO at once")
            reason = "misses SLO: " + "; ".join(failed) + " at every fitting batch"
        r = df.iloc[i]
        row.update({"batch_size": float(r["batch_size"]) if meets.any() else np.nan,
                    metric: float(r[metric]) if meets.any() else np.nan})
        for k in DOLLAR_METRICS + ("gross_margin_frac", "decode_tokens_per_s_per_gpu",
                                   "decode_tokens_per_s_per_user", "tpot_s", "ttft_s",
                                   "gpu_cost_usd_per_hour", "max_batch_size"):
            if k in df and k != metric:
                row[k] = float(r[k]) if meets.any() or k == "max_batch_size" else np.nan
        row.update({"meets_slo": bool(meets.any()), "reason": reason})
        rows.append(row)
    out = pd.DataFrame(rows)
    if metric not in out:
        out[metric] = np.nan
    out["_order"] = np.where(out["meets_slo"], out[metric], np.inf)
    out = out.sort_values(["_order"], kind="stable").drop(columns="_order").reset_index(drop=True)
    out.insert(0, "rank", np.where(out["meets_slo"], np.arange(1, len(out) + 1), np.nan))
    out.attrs.update({"metric": metric, **cost_attrs(cost, [load_hardware(h) for h in hws]),
                      "price": pr.id if pr is not None else "",
                      "slo": ", ".join(f"{k} = {v:g}" for k, v in (
                          ("tpot_s", tpot_s), ("ttft_s", ttft_s),
                          ("min_user_tokens_per_s", min_user_tokens_per_s)) if v is not None)})
    return out


