"""The questions users ask of the engine, as library functions.

Each function is a thin layer over :func:`inference_factory.evaluate` and
:func:`inference_factory.economics.add_economics`: every number comes from the engine and
the economics layer; nothing here adds physics. SciPy does the searching and sampling
(``optimize.brentq`` for SLO boundaries, ``stats.qmc`` and ``stats.triang`` for Monte Carlo).

* :func:`best_draft_depth` - the speculative draft depth with the most decode tokens/s per GPU,
  per batch size (and any other axis).
* :func:`max_batch_meeting_slo` - the largest decode batch that fits in HBM and meets TPOT /
  per-user-rate SLOs, and the largest prefill batch meeting a TTFT SLO.
* :func:`cheapest_meeting_slo` - hardware x parallelism x precision options ranked by
  $/M tokens among those meeting the SLOs, with the reason each other option fails.
* :func:`pareto_front` - the non-dominated points of tokens/s per GPU against tokens/s per user.
* :func:`lever_waterfall` - the baseline-to-factory steps of a ``compare`` attribution.
* :func:`tornado` - one-at-a-time sensitivity of $/M tokens and margin to levers and assumptions.
* :func:`monte_carlo` - the distribution of $/M tokens and margin over assumption ranges,
  with the engine evaluated once, vectorized along a ``sample`` dimension.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np
import pandas as pd
import xarray as xr
# scipy (brentq, qmc, triang) is imported where it is used: importing this module for
# pareto_mask or the waterfall does not pay scipy's import time

from .economics import (INPUT_TOKENS_PER_OUTPUT_TOKEN, CostModel, add_economics,
                        economics_from_rates, gpu_cost_usd_per_hour)
from ..specs.prices import resolve_price
from ..factory.levers import INTERACTIONS, WATERFALL_METRICS, lever_waterfall
from ..engine import NUMERIC_AXES, STRUCT_AXES, evaluate, to_dataframe
from ..errors import SpecError
from ..specs import HardwareSpec, ModelSpec, load_hardware, load_model

__all__ = ["best_draft_depth", "max_batch_meeting_slo", "cheapest_meeting_slo", "pareto_front",
           "pareto_mask", "tornado", "monte_carlo", "MonteCarloResult", "default_batch_grid",
           "cost_model", "lever_waterfall",
           "COST_PARAMETERS", "PRICE_PARAMETERS"]

#: evaluate() keywords that are not axes; passed through unchanged
ENGINE_OPTIONS = ("ideal", "realism", "acceptance_by_position", "draft_model", "expert_popularity")
#: CostModel fields a tornado or Monte Carlo may vary: name -> (lower, upper, open upper?)
COST_PARAMETERS: dict[str, tuple[float, float]] = {
    "rental_usd_per_gpu_hour": (0.0, math.inf), "capex_usd_per_gpu": (0.0, math.inf),
    "depreciation_years": (0.0, math.inf), "residual_frac": (0.0, 1.0), "pue": (1.0, math.inf),
    "usd_per_kwh": (0.0, math.inf), "utilization": (0.0, 1.0),
}
#: list-price fields (USD per million tokens) a tornado or Monte Carlo may vary
PRICE_PARAMETERS = ("output_usd_per_mtok", "input_cache_miss_usd_per_mtok",
                    "input_cache_hit_usd_per_mtok")
RATIO_PARAMETER = "input_tokens_per_output_token"
#: economics variables that need a price
PRICED = ("gross_margin_frac", "cost_profit_margin_frac", "payback_months",
          "revenue_usd_per_gpu_hour_decode", "revenue_usd_per_gpu_hour_prefill")
DOLLAR_METRICS = ("usd_per_mtok_output", "usd_per_mtok_input", "usd_per_mtok_blended")


# --------------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------------


def default_batch_grid(max_batch: int = 4096, n: int = 33) -> list[int]:
    """Whole batch sizes from 1 to ``max_batch``, geometrically spaced (plus the ends)."""
    if isinstance(max_batch, bool) or not isinstance(max_batch, (int, np.integer)) or max_batch < 1:
        raise SpecError(f"max_batch = {max_batch!r} must be a whole number >= 1")
    grid = np.unique(np.concatenate([np.round(np.geomspace(1, max_batch, n)), [max_batch]]))
    return [int(x) for x in grid]


def _check_kwargs(kwargs: Mapping[str, Any], who: str, *, scalar_axes: bool = False,
                  forbid: Iterable[str] = ()) -> None:
    allowed = set(NUMERIC_AXES) | set(STRUCT_AXES) | set(ENGINE_OPTIONS)
    for k, v in kwargs.items():
        if k not in allowed:
            raise SpecError(f"{who}: unknown argument {k!r}; allowed engine axes and options: "
                            f"{sorted(allowed)}")
        if k in forbid:
            raise SpecError(f"{who}: {k} is what this question varies; do not pass it as an axis")
        if scalar_axes and k in set(NUMERIC_AXES) | set(STRUCT_AXES) and (
                isinstance(v, (list, tuple, np.ndarray, xr.DataArray, range))):
            raise SpecError(f"{who}: {k} = {v!r} must be a single value (the operating point); "
                            "vary it with ranges={...} instead")


def _single(value, kind: str, who: str):
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise SpecError(f"{who}: give one {kind} (got {len(value)}: {list(value)!r})")
        value = value[0]
    return value


def _int_list(name: str, values, lo: int) -> list[int]:
    vals = list(values) if isinstance(values, (list, tuple, range, np.ndarray)) else [values]
    if not vals:
        raise SpecError(f"{name} is empty; give at least one whole number >= {lo}")
    out = []
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or (
                not float(v).is_integer()) or v < lo:
            raise SpecError(f"{name} = {v!r} must be a whole number >= {lo}")
        out.append(int(v))
    if sorted(set(out)) != out:
        raise SpecError(f"{name} = {out} must be increasing without repeats")
    return out


def _positive(name: str, value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not (
            math.isfinite(float(value)) and float(value) > 0):
        raise SpecError(f"{name} = {value!r} must be a positive number")
    return float(value)


def _point_kwargs(ds: xr.Dataset, dims: Sequence[str], index: tuple[int, ...],
                  specs: Mapping[str, Mapping[str, Any]], who: str) -> dict[str, Any]:
    """evaluate() arguments selecting one point of the non-searched dimensions."""
    out: dict[str, Any] = {}
    for d, i in zip(dims, index):
        v = ds[d].values[i]
        v = v.item() if hasattr(v, "item") else v
        if d in ("model", "hardware"):
            out[d] = specs[d][str(v)]
        elif d in NUMERIC_AXES or d in STRUCT_AXES:
            out[d] = v
        else:
            raise SpecError(f"{who}: dimension {d!r} is not an engine axis; give every varied "
                            "axis as a list named after it")
    return out


def _spec_maps(model, hardware) -> dict[str, dict[str, Any]]:
    models = [load_model(x) for x in (model if isinstance(model, (list, tuple)) else [model])]
    hws = [load_hardware(x) for x in (hardware if isinstance(hardware, (list, tuple)) else [hardware])]
    return {"model": {m.name: m for m in models}, "hardware": {h.name: h for h in hws}}


# --------------------------------------------------------------------------------------------
# best draft depth per batch
# --------------------------------------------------------------------------------------------


def best_draft_depth(model: str | ModelSpec | Sequence, hardware: str | HardwareSpec | Sequence, *,
                     batch_size, draft_depth: Iterable[int] = range(0, 5),
                     metric: Literal["decode_tokens_per_s_per_gpu",
                                     "decode_tokens_per_s_per_user"] = "decode_tokens_per_s_per_gpu",
                     only_fitting: bool = True, **kwargs: Any) -> xr.Dataset:
    """The draft depth that maximises ``metric`` at each batch size (and every other axis).

    Parameters
    ----------
    model, hardware : as for :func:`~inference_factory.evaluate` (lists add dimensions)
    batch_size : number or list
        Sequences per attention-DP rank.
    draft_depth : whole numbers
        Depths to compare (0 = no speculation).
    metric : str
        What "best" maximises: decode tokens/s per GPU (throughput; default) or per user.
    only_fitting : bool
        Ignore depths whose batch does not fit in HBM (draft activations and MTP weights).
    **kwargs
        Any other engine axis or option (``acceptance_rate``, ``kv_len``, ``tp``...).

    Returns
    -------
    xr.Dataset
        ``best_draft_depth`` (NaN where no depth fits), ``best_<metric>``, ``best_tpot_s``,
        ``best_decode_tokens_per_s_per_user``, ``speedup_over_no_draft`` (when 0 is among the
        depths) and ``fits_any_depth``, over every dimension but ``draft_depth``.
    """
    if metric not in ("decode_tokens_per_s_per_gpu", "decode_tokens_per_s_per_user"):
        raise SpecError(f"metric = {metric!r} is not one of ['decode_tokens_per_s_per_gpu', "
                        "'decode_tokens_per_s_per_user']")
    _check_kwargs(kwargs, "best_draft_depth")
    depths = _int_list("draft_depth", draft_depth, 0)
    ds = evaluate(model, hardware, batch_size=batch_size, draft_depth=depths, **kwargs)
    if "draft_depth" not in ds.dims:      # one depth: make it a dimension of length 1
        ds = ds.expand_dims(draft_depth=[float(depths[0])])
    value = ds[metric]
    ok = ds["fits"] if only_fitting else xr.ones_like(ds["fits"])
    value, ok = xr.broadcast(value, ok)
    masked = value.where(ok)
    any_ok = masked.notnull().any("draft_depth")
    idx = masked.fillna(-np.inf).argmax("draft_depth")

    def at_best(da: xr.DataArray) -> xr.DataArray:
        da = da.broadcast_like(value)
        return da.isel(draft_depth=idx).drop_vars("draft_depth", errors="ignore").where(any_ok)

    out = xr.Dataset({
        "best_draft_depth": at_best(ds["draft_depth"]),
        f"best_{metric}": at_best(value),
        "best_tpot_s": at_best(ds["tpot_s"]),
        "best_decode_tokens_per_s_per_user": at_best(ds["decode_tokens_per_s_per_user"]),
        "fits_any_depth": any_ok,
    })
    if metric != "decode_tokens_per_s_per_gpu":
        out["best_decode_tokens_per_s_per_gpu"] = at_best(ds["decode_tokens_per_s_per_gpu"])
    if 0 in depths:
        out["speedup_over_no_draft"] = out[f"best_{metric}"] / value.sel(draft_depth=0.0)
    units = {"best_draft_depth": "draft tokens per verify step", "best_tpot_s": "s",
             "best_decode_tokens_per_s_per_user": "tokens/s/user",
             "best_decode_tokens_per_s_per_gpu": "tokens/s/GPU", "fits_any_depth": "bool",
             "speedup_over_no_draft": "1"}
    for k in out.data_vars:
        out[k].attrs["units"] = units.get(k, ds[metric].attrs.get("units", ""))
    out.attrs.update(ds.attrs)
    out.attrs["question"] = f"draft depth maximising {metric} among {depths}"
    return out


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
        out = xr.merge([out, pout], combine_attrs="override")
    units = {"max_batch_size_meeting_slo": "sequences per attention-DP rank",
             "max_prefill_batch_size_meeting_slo": "prompts per attention-DP rank per pass",
             "slo_binding_constraint": "label", "prefill_slo_binding_constraint": "label",
             "tpot_s": "s", "ttft_s": "s", "decode_tokens_per_s_per_user": "tokens/s/user",
             "decode_tokens_per_s_per_gpu": "tokens/s/GPU",
             "prefill_tokens_per_s_per_gpu": "tokens/s/GPU"}
    for k in out.data_vars:
        out[k].attrs["units"] = units.get(k, "")
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
        As for :func:`~inference_factory.economics.add_economics`.
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
    out.attrs.update({"metric": metric, "cost_basis": cost.cost_basis,
                      "price": pr.id if pr is not None else "",
                      "slo": ", ".join(f"{k} = {v:g}" for k, v in (
                          ("tpot_s", tpot_s), ("ttft_s", ttft_s),
                          ("min_user_tokens_per_s", min_user_tokens_per_s)) if v is not None)})
    return out


# --------------------------------------------------------------------------------------------
# Pareto front
# --------------------------------------------------------------------------------------------


def pareto_mask(x, y) -> np.ndarray:
    """True where the point (x, y) is not dominated, maximising both: no other point is >= in
    both and > in one. Exact duplicates of a front point are all kept; NaN points are not."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise SpecError(f"pareto_mask: x and y must be 1-D of one length; got {x.shape}, {y.shape}")
    keep = np.zeros(x.size, bool)
    finite = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    order = finite[np.lexsort((-y[finite], -x[finite]))]     # x descending, then y descending
    best_y, best_x = -np.inf, np.nan
    for i in order:
        if y[i] > best_y:
            keep[i] = True
            best_y, best_x = y[i], x[i]
        elif y[i] == best_y and x[i] == best_x:
            keep[i] = True
    return keep


def pareto_front(data: xr.Dataset | pd.DataFrame, *, x: str = "decode_tokens_per_s_per_user",
                 y: str = "decode_tokens_per_s_per_gpu", only_fitting: bool = True) -> pd.DataFrame:
    """Non-dominated points of ``y`` against ``x`` (both maximised) across every dimension.

    The capacity planner's view: each point is a configuration (batch, draft depth, hardware,
    parallelism...); the front is the best tokens/s per GPU available at each tokens/s per user.

    Parameters
    ----------
    data : xr.Dataset or pandas.DataFrame
        An engine result (any dimensions) or its :func:`~inference_factory.to_dataframe`.
    x, y : str
        Variables to maximise.
    only_fitting : bool
        Drop points that do not fit in HBM (``fits`` False) before taking the front.

    Returns
    -------
    pandas.DataFrame
        The front's rows (every column of the tidy frame), sorted by ``x`` ascending.
    """
    df = to_dataframe(data) if isinstance(data, xr.Dataset) else data.copy()
    for col in (x, y):
        if col not in df.columns:
            raise SpecError(f"pareto_front: {col!r} is not a variable of the data; numeric "
                            f"columns: {sorted(df.select_dtypes('number').columns)}")
    if only_fitting and "fits" in df.columns:
        df = df[df["fits"].astype(bool)]
    mask = pareto_mask(df[x].to_numpy(), df[y].to_numpy())
    front = df[mask].sort_values([x, y], ascending=[True, False], kind="stable").reset_index(drop=True)
    front.attrs.update(df.attrs)
    front.attrs["pareto"] = f"maximise {x} and {y}; {int(mask.sum())} of {len(df)} points"
    return front


# --------------------------------------------------------------------------------------------
# sensitivity: tornado and Monte Carlo
# --------------------------------------------------------------------------------------------


def _param_kind(name: str) -> str:
    if name in NUMERIC_AXES:
        return "engine"
    if name in STRUCT_AXES:
        return "structure"
    if name in COST_PARAMETERS:
        return "cost"
    if name in PRICE_PARAMETERS:
        return "price"
    if name == RATIO_PARAMETER:
        return "token mix"
    allowed = sorted(set(NUMERIC_AXES) | set(STRUCT_AXES) | set(COST_PARAMETERS)
                     | set(PRICE_PARAMETERS) | {RATIO_PARAMETER})
    raise SpecError(f"unknown parameter {name!r}; allowed: {allowed}")


def _check_econ_value(name: str, v: float) -> None:
    if name in COST_PARAMETERS:
        lo, hi = COST_PARAMETERS[name]
        ok = {"utilization": 0 < v <= 1, "residual_frac": 0 <= v < 1, "pue": v >= 1,
              "depreciation_years": v > 0}.get(name, v >= lo)
        if not (math.isfinite(v) and ok):
            rng = {"utilization": "(0, 1]", "residual_frac": "[0, 1)", "pue": ">= 1",
                   "depreciation_years": "> 0"}.get(name, ">= 0")
            raise SpecError(f"{name} = {v:g} is out of range; allowed {rng}")
    elif name in PRICE_PARAMETERS or name == RATIO_PARAMETER:
        if not (math.isfinite(v) and v >= 0):
            raise SpecError(f"{name} = {v:g} is out of range; allowed >= 0")


def cost_model(**kwargs: Any) -> CostModel:
    """A :class:`~inference_factory.economics.CostModel` with its values checked: ``cost_basis``
    one of rental / capex / tco, and every number of :data:`COST_PARAMETERS` in range."""
    fields = {f.name for f in dataclasses.fields(CostModel)}
    for k, v in kwargs.items():
        if k not in fields:
            raise SpecError(f"cost: unknown field {k!r}; allowed: {sorted(fields)}")
        if k == "cost_basis":
            if v not in ("rental", "capex", "tco"):
                raise SpecError(f"cost_basis = {v!r} is not one of ['capex', 'rental', 'tco']")
        elif v is not None:
            _check_econ_value(k, _numeric(k, v))
    return CostModel(**kwargs)


def _numeric(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise SpecError(f"{name}: {v!r} must be a number")
    return float(v)


def _metrics_for(metrics, pr, who: str) -> list[str]:
    if metrics is None:
        metrics = ["usd_per_mtok_blended"] + (["gross_margin_frac"] if pr is not None else [])
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    if not metrics:
        raise SpecError(f"{who}: metrics is empty; give e.g. ['usd_per_mtok_blended']")
    for m in metrics:
        if m in PRICED and pr is None:
            raise SpecError(f"{who}: metric {m!r} needs a price; pass price=ID (see "
                            "configs/prices.toml)")
    return metrics


def _econ(ds, pr, cost, ratio):
    return add_economics(ds, price=pr, cost=cost, input_tokens_per_output_token=ratio)


def tornado(model: str | ModelSpec, hardware: str | HardwareSpec,
            ranges: Mapping[str, tuple[Any, Any]], *, price=None, cost: CostModel | None = None,
            input_tokens_per_output_token: float = INPUT_TOKENS_PER_OUTPUT_TOKEN, metrics: Sequence[str] | str | None = None,
            **point: Any) -> pd.DataFrame:
    """One-at-a-time sensitivity of $/M tokens and margin around one operating point.

    Each parameter of ``ranges`` is set to its low and then its high value with every other
    input at the operating point; the swing is |metric(high) - metric(low)|.

    Parameters
    ----------
    ranges : {name: (low, high)}
        Engine axes (``acceptance_rate``, ``cache_hit_rate``, ``batch_size``, ``draft_depth``,
        ``kv_len``...), structural choices (``expert_skew``, ``redundant_experts``, or two
        alternatives such as ``kv_precision: ("bf16", "fp8")``), cost assumptions
        (:data:`COST_PARAMETERS`: ``usd_per_kwh``, ``pue``, ``rental_usd_per_gpu_hour``,
        ``utilization``...), list prices (:data:`PRICE_PARAMETERS`) and
        ``input_tokens_per_output_token``.
    price, cost, input_tokens_per_output_token
        The economics of the operating point (see :func:`add_economics`). Under the rental
        basis power does not enter the cost, so ``pue`` and ``usd_per_kwh`` swing nothing.
    metrics : str or list
        Output variables (default ``usd_per_mtok_blended`` and, with a price,
        ``gross_margin_frac``); rows are sorted by the swing of the first.
    **point
        The operating point: single values of engine axes and options.

    Returns
    -------
    pandas.DataFrame
        One row per parameter: ``parameter``, ``kind``, ``base``, ``low``, ``high``,
        ``fits_low``, ``fits_high`` and, per metric, ``<metric>_low``, ``<metric>_high``,
        ``<metric>_swing``; ``attrs["base"]`` holds the metrics at the operating point.
    """
    who = "tornado"
    model = _single(model, "model", who)
    hardware = _single(hardware, "hardware", who)
    _check_kwargs(point, who, scalar_axes=True)
    if not isinstance(ranges, Mapping) or not ranges:
        raise SpecError(f"{who}: ranges must be a non-empty {{name: (low, high)}} mapping")
    pr = resolve_price(price)
    cost = cost or CostModel()
    metrics = _metrics_for(metrics, pr, who)
    spec_m, spec_h = load_model(model), load_hardware(hardware)
    base_ds = evaluate(spec_m, spec_h, **point)
    base = _econ(base_ds, pr, cost, input_tokens_per_output_token)
    for m in metrics:
        if m not in base or base[m].dtype.kind not in "fiub":
            raise SpecError(f"{who}: metric {m!r} is not a numeric result variable; e.g. "
                            f"{list(DOLLAR_METRICS) + ['gross_margin_frac']}")

    rows = []
    for name, rng in ranges.items():
        kind = _param_kind(name)
        if name in point:
            raise SpecError(f"{who}: {name} is both fixed at the operating point and varied")
        if not isinstance(rng, (list, tuple)) or len(rng) != 2:
            raise SpecError(f"{who}: range of {name} must be (low, high); got {rng!r}")
        lo, hi = rng
        categorical = kind == "structure" and (isinstance(lo, str) or isinstance(hi, str))
        if categorical:
            if lo == hi:
                raise SpecError(f"{who}: {name} alternatives {lo!r} and {hi!r} must differ")
        else:
            lo, hi = _numeric(name, lo), _numeric(name, hi)
            if not lo < hi:
                raise SpecError(f"{who}: range of {name} = ({lo:g}, {hi:g}) must have low < high")
            if kind == "structure" and name in ("tp", "dp", "ep", "redundant_experts"):
                if not (lo.is_integer() and hi.is_integer()):
                    raise SpecError(f"{who}: {name} = ({lo:g}, {hi:g}) must be whole numbers")
                lo, hi = int(lo), int(hi)
            _check_econ_value(name, lo)
            _check_econ_value(name, hi)
        results = []
        for v in (lo, hi):
            if kind in ("engine", "structure"):
                e = _econ(evaluate(spec_m, spec_h, **point, **{name: v}), pr, cost,
                          input_tokens_per_output_token)
            elif kind == "cost":
                e = _econ(base_ds, pr, dataclasses.replace(cost, **{name: v}),
                          input_tokens_per_output_token)
            elif kind == "price":
                if pr is None:
                    raise SpecError(f"{who}: varying {name} needs a price; pass price=ID")
                e = _econ(base_ds, dataclasses.replace(pr, **{name: v}), cost,
                          input_tokens_per_output_token)
            else:
                e = _econ(base_ds, pr, cost, v)
            results.append(e)
        row = {"parameter": name, "kind": kind, "base": _base_value(name, point, cost, pr, spec_h,
                                                                     input_tokens_per_output_token),
               "low": lo, "high": hi, "fits_low": bool(results[0]["fits"]),
               "fits_high": bool(results[1]["fits"])}
        for m in metrics:
            a, b = float(results[0][m]), float(results[1][m])
            row.update({f"{m}_low": a, f"{m}_high": b, f"{m}_swing": abs(b - a)})
        rows.append(row)
    out = pd.DataFrame(rows)
    out = out.sort_values(f"{metrics[0]}_swing", ascending=False, kind="stable",
                          na_position="last").reset_index(drop=True)
    out.attrs.update({"base": {m: float(base[m]) for m in metrics}, "metrics": metrics,
                      "model": spec_m.name, "hardware": spec_h.name, "cost_basis": cost.cost_basis,
                      "price": pr.id if pr is not None else "", "point": dict(point)})
    return out


def _base_value(name, point, cost, pr, hw, ratio):
    if name in point:
        return point[name]
    if name in NUMERIC_AXES:
        return NUMERIC_AXES[name][0]
    if name in STRUCT_AXES:
        return STRUCT_AXES[name] if STRUCT_AXES[name] is not None else "model default"
    if name in COST_PARAMETERS:
        v = getattr(cost, name)
        if v is None:
            v = hw.price.get(name, np.nan)
        return v
    if name in PRICE_PARAMETERS:
        return getattr(pr, name) if pr is not None else np.nan
    return ratio


@dataclass(frozen=True)
class MonteCarloResult:
    """``samples``: Dataset along ``sample`` with each sampled input and metric (and ``fits``);
    ``summary``: one row per metric with mean, std, percentiles, the share of fitting samples
    and the probability of a negative value (over the samples that fit)."""

    samples: xr.Dataset
    summary: pd.DataFrame


def _sample_unit(n: int, d: int, seed: int, method: str) -> np.ndarray:
    if method == "lhs":
        from scipy.stats import qmc

        gen = np.random.default_rng(seed)
        try:
            sampler = qmc.LatinHypercube(d=d, rng=gen)
        except TypeError:                       # SciPy < 1.15 names the argument ``seed``
            sampler = qmc.LatinHypercube(d=d, seed=gen)
        return sampler.random(n)
    if method == "random":
        return np.random.default_rng(seed).random((n, d))
    raise SpecError(f"method = {method!r} is not one of ['lhs', 'random']")


def _transform(name: str, rng, u: np.ndarray) -> np.ndarray:
    """Unit samples -> parameter values: (low, high) uniform, (low, mode, high) triangular;
    whole-number axes take the nearest whole value (uniform over low..high)."""
    if not isinstance(rng, (list, tuple)) or len(rng) not in (2, 3):
        raise SpecError(f"monte_carlo: range of {name} must be (low, high) or (low, mode, high); "
                        f"got {rng!r}")
    vals = [_numeric(name, v) for v in rng]
    lo, hi = vals[0], vals[-1]
    if not lo < hi:
        raise SpecError(f"monte_carlo: range of {name} = {tuple(rng)} must have low < high")
    _check_econ_value(name, lo)
    _check_econ_value(name, hi)
    integer = name in NUMERIC_AXES and NUMERIC_AXES[name][4]
    if len(vals) == 3:
        mode = vals[1]
        if not lo <= mode <= hi:
            raise SpecError(f"monte_carlo: mode of {name} = {mode:g} must lie in [{lo:g}, {hi:g}]")
        from scipy import stats

        x = stats.triang.ppf(u, (mode - lo) / (hi - lo), loc=lo, scale=hi - lo)
        return np.round(x) if integer else x
    if integer:
        if not (lo.is_integer() and hi.is_integer()):
            raise SpecError(f"monte_carlo: {name} = ({lo:g}, {hi:g}) must be whole numbers")
        return np.minimum(np.floor(lo + u * (hi - lo + 1)), hi)
    return lo + u * (hi - lo)


def monte_carlo(model: str | ModelSpec, hardware: str | HardwareSpec,
                ranges: Mapping[str, tuple], *, n: int = 1000, seed: int = 0,
                method: Literal["lhs", "random"] = "lhs", price=None,
                cost: CostModel | None = None, input_tokens_per_output_token: float = INPUT_TOKENS_PER_OUTPUT_TOKEN,
                metrics: Sequence[str] | str | None = None,
                percentiles: Sequence[float] = (5, 25, 50, 75, 95), **point: Any) -> MonteCarloResult:
    """Distribution of $/M tokens and margin over assumption ranges.

    Samples are drawn with a Latin hypercube (:class:`scipy.stats.qmc.LatinHypercube`;
    ``method="random"`` for plain uniform draws) and mapped to each range: ``(low, high)``
    uniform, ``(low, mode, high)`` triangular (:data:`scipy.stats.triang`). The engine runs
    once, with the sampled engine axes as DataArrays on one ``sample`` dimension; the cost
    assumptions and prices are applied per sample with the economics layer's own formulas.

    Parameters
    ----------
    ranges : {name: (low, high) | (low, mode, high)}
        Numeric engine axes (``acceptance_rate``, ``cache_hit_rate``, ``batch_size``,
        ``kv_len``, ``prompt_len``, ``draft_depth``...), cost assumptions
        (:data:`COST_PARAMETERS`), list prices (:data:`PRICE_PARAMETERS`) and
        ``input_tokens_per_output_token``. Structural choices (``expert_skew``, ``tp``...)
        are one engine block per value: vary them with :func:`tornado`.
    n, seed, method
        Sample count, seed (same seed, same samples), ``"lhs"`` or ``"random"``.
    price, cost, input_tokens_per_output_token, **point
        The economics and the operating point, as for :func:`tornado`.
    metrics : str or list
        Default ``usd_per_mtok_output``, ``usd_per_mtok_blended`` and, with a price,
        ``gross_margin_frac``; any engine variable (e.g. ``tpot_s``) may be added.
    percentiles : numbers in [0, 100]

    Returns
    -------
    MonteCarloResult
    """
    who = "monte_carlo"
    model = _single(model, "model", who)
    hardware = _single(hardware, "hardware", who)
    _check_kwargs(point, who, scalar_axes=True)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise SpecError(f"{who}: n = {n!r} must be a whole number >= 2")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SpecError(f"{who}: seed = {seed!r} must be a whole number >= 0")
    if not isinstance(ranges, Mapping) or not ranges:
        raise SpecError(f"{who}: ranges must be a non-empty {{name: (low, high)}} mapping")
    pcts = [float(p) for p in percentiles]
    if any(not 0 <= p <= 100 for p in pcts):
        raise SpecError(f"{who}: percentiles = {list(percentiles)} must lie in [0, 100]")
    pr = resolve_price(price)
    cost = cost or CostModel()
    if metrics is None:
        metrics = ["usd_per_mtok_output", "usd_per_mtok_blended"] + (
            ["gross_margin_frac"] if pr is not None else [])
    metrics = _metrics_for(metrics, pr, who)
    for name in ranges:
        kind = _param_kind(name)
        if kind == "structure":
            raise SpecError(f"{who}: {name} is a structural choice (one engine block per value); "
                            f"Monte Carlo samples numeric engine axes {sorted(NUMERIC_AXES)}, cost "
                            f"assumptions {sorted(COST_PARAMETERS)}, prices and "
                            f"{RATIO_PARAMETER}; vary {name} with tornado")
        if name in point:
            raise SpecError(f"{who}: {name} is both fixed at the operating point and sampled")
        if kind == "price" and pr is None:
            raise SpecError(f"{who}: sampling {name} needs a price; pass price=ID")
    names = list(ranges)
    u = _sample_unit(int(n), len(names), int(seed), method)
    sampled = {name: _transform(name, ranges[name], u[:, j]) for j, name in enumerate(names)}
    for name, vals in sampled.items():
        for v in (vals.min(), vals.max()):
            _check_econ_value(name, float(v))
    sample = np.arange(int(n))
    engine_axes = {k: xr.DataArray(v, dims="sample", coords={"sample": sample, k: ("sample", v)})
                   for k, v in sampled.items() if k in NUMERIC_AXES}
    spec_m, spec_h = load_model(model), load_hardware(hardware)
    ds = evaluate(spec_m, spec_h, **point, **engine_axes)
    if "sample" not in ds.dims:            # only economics sampled: the engine is one point
        ds = ds.expand_dims(sample=sample)
    ds = ds.assign_coords(sample=sample)
    out = _economics_on_samples(ds, spec_h, cost, pr, input_tokens_per_output_token,
                                {k: v for k, v in sampled.items() if k not in NUMERIC_AXES})
    for m in metrics:
        if m not in out or out[m].dtype.kind not in "fiub":
            raise SpecError(f"{who}: metric {m!r} is not available; choose from "
                            f"{sorted(k for k in out.data_vars if out[k].dtype.kind in 'fiub')}")
    samples = out[metrics + ["fits"]].assign_coords({k: ("sample", v) for k, v in sampled.items()})
    samples = samples.transpose("sample", ...)
    fits = samples["fits"].broadcast_like(samples[metrics[0]]).values.astype(bool)
    rows = []
    for m in metrics:
        vals = samples[m].broadcast_like(samples["fits"]).values.astype(float)
        v = vals[fits & np.isfinite(vals)]
        row = {"metric": m, "n_samples": int(n), "fits_frac": float(fits.mean()),
               "mean": float(v.mean()) if v.size else np.nan,
               "std": float(v.std(ddof=1)) if v.size > 1 else np.nan}
        row.update({f"p{p:g}": float(np.percentile(v, p)) if v.size else np.nan for p in pcts})
        row["prob_below_zero"] = float((v < 0).mean()) if v.size else np.nan
        rows.append(row)
    summary = pd.DataFrame(rows).set_index("metric")
    attrs = {"model": spec_m.name, "hardware": spec_h.name, "cost_basis": cost.cost_basis,
             "price": pr.id if pr is not None else "", "method": method, "seed": int(seed),
             "ranges": "; ".join(f"{k} = {tuple(v)}" for k, v in ranges.items())}
    samples.attrs.update(ds.attrs)
    samples.attrs.update(attrs)
    summary.attrs.update(attrs)
    return MonteCarloResult(samples=samples, summary=summary)


def _economics_on_samples(ds: xr.Dataset, hw: HardwareSpec, cost: CostModel, pr, ratio,
                          sampled: Mapping[str, np.ndarray]) -> xr.Dataset:
    """:func:`add_economics` with cost assumptions, prices and the token mix varying along
    ``sample``. Without such samples it *is* one vectorized add_economics call; with them, the
    GPU-hour cost of each sample comes from :func:`gpu_cost_usd_per_hour` and the per-token
    variables from :func:`economics_from_rates`, the same wiring add_economics uses."""
    econ = {k: v for k, v in sampled.items() if k in COST_PARAMETERS}
    prices = {k: v for k, v in sampled.items() if k in PRICE_PARAMETERS}
    r = sampled.get(RATIO_PARAMETER)
    if not econ and not prices and r is None:
        return add_economics(ds, price=pr, cost=cost, input_tokens_per_output_token=ratio)
    n = ds.sizes["sample"]

    def along(values) -> xr.DataArray:
        return xr.DataArray(np.asarray(values, dtype=float), dims="sample",
                            coords={"sample": ds["sample"].values})

    costs = [dataclasses.replace(cost, **{k: float(v[i]) for k, v in econ.items()}) for i in range(n)]
    rates = [(gpu_cost_usd_per_hour(hw, c, "decode"), gpu_cost_usd_per_hour(hw, c, "prefill"))
             for c in costs]
    prices = None if pr is None else {
        k: along(prices[k]) if k in prices else getattr(pr, k) for k in PRICE_PARAMETERS}
    return economics_from_rates(
        ds, gpu_cost_decode=along([sum(d) for d, _ in rates]),
        gpu_cost_prefill=along([sum(p) for _, p in rates]),
        energy_decode=along([d[1] for d, _ in rates]), tdp_w=hw.tdp_w,
        utilization=along([c.utilization for c in costs]), pue=along([c.pue for c in costs]),
        prices=prices, input_tokens_per_output_token=along(r) if r is not None else ratio)
