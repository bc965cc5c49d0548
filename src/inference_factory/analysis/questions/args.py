"""Constants and argument checks shared by the question functions
(:mod:`~inference_factory.analysis.questions`, :mod:`~inference_factory.analysis.slo`,
:mod:`~inference_factory.analysis.sensitivity`): the engine options passed through, the cost
and price parameters a sensitivity may vary, the default batch grid, and the checks of
keyword arguments, whole-number lists and positive SLOs."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import xarray as xr

from ...engine import NUMERIC_AXES, STRUCT_AXES
from ...errors import SpecError
from ...specs import load_hardware, load_model


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
    if kwargs.get("draft_model") is not None:
        try:
            load_model(kwargs["draft_model"])
        except SpecError as exc:
            raise SpecError(f"{who}: draft_model: {exc}") from None


def check_ratio(name: str, value) -> float:
    """An input-per-output token ratio: a finite number >= 0 (NaN, infinity and negatives are
    refused: they made every cost NaN or a row's reason, not an error)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not (math.isfinite(float(value)) and float(value) >= 0):
        raise SpecError(f"{name} = {value!r} must be a finite number >= 0 (input tokens per "
                        "output token, e.g. 3.6)")
    return float(value)


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


