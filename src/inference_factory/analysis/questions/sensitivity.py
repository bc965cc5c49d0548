"""Sensitivity of $/M tokens and margin: :func:`tornado` (one-at-a-time swings of levers and
assumptions) and :func:`monte_carlo` (the distribution over assumption ranges, with the engine
evaluated once, vectorized along a ``sample`` dimension), and :func:`cost_model` (a checked
:class:`~inference_factory.analysis.economics.CostModel`).

Re-exported by :mod:`inference_factory.analysis.questions`, where users import them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import pandas as pd
import xarray as xr

from ..economics import (INPUT_TOKENS_PER_OUTPUT_TOKEN, CostModel, add_economics, cost_attrs,
                        economics_from_rates, facility_power_w, gpu_cost_usd_per_hour,
                        gpu_hour_price)
from ...specs.prices import check_power_basis, resolve_price, resolve_price_bases
from ...engine import NUMERIC_AXES, STRUCT_AXES, evaluate
from ...errors import SpecError
from ...specs import HardwareSpec, ModelSpec, load_hardware, load_model
from .args import (COST_PARAMETERS, DOLLAR_METRICS, PRICE_PARAMETERS, PRICED,
                            RATIO_PARAMETER, _check_kwargs, _single)


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
    """A :class:`~inference_factory.analysis.economics.CostModel` with its values checked: ``cost_basis``
    one of rental / capex / tco, and every number of :data:`COST_PARAMETERS` in range."""
    fields = {f.name for f in dataclasses.fields(CostModel)}
    for k, v in kwargs.items():
        if k not in fields:
            raise SpecError(f"cost: unknown field {k!r}; allowed: {sorted(fields)}")
        if k == "cost_basis":
            if v not in ("rental", "capex", "tco"):
                raise SpecError(f"cost_basis = {v!r} is not one of ['capex', 'rental', 'tco']")
        elif k == "price_basis":
            if v is not None:
                resolve_price_bases(v)           # a one-line SpecError naming what is allowed
        elif k == "power_basis":
            check_power_basis(v)
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
                      "model": spec_m.name, "hardware": spec_h.name, **cost_attrs(cost, [spec_h]),
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
        if v is None and name == "rental_usd_per_gpu_hour" and cost.cost_basis == "rental":
            v = gpu_hour_price(hw, cost).usd_per_gpu_hour      # the run's price basis
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
    attrs = {"model": spec_m.name, "hardware": spec_h.name, **cost_attrs(cost, [spec_h]),
             "price": pr.id if pr is not None else "", "method": method, "seed": int(seed),
             "ranges": "; ".join(f"{k} = {tuple(v)}" for k, v in ranges.items())}
    samples.attrs.update(ds.attrs)
    samples.attrs.update({k: v for k, v in attrs.items() if not isinstance(v, dict)})
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
        prices=prices, input_tokens_per_output_token=along(r) if r is not None else ratio,
        facility_power_w=facility_power_w(hw, cost, utilization=along(
            [c.utilization for c in costs]), pue=along([c.pue for c in costs])))
