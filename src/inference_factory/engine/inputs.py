"""Checks of the numeric axes a caller gives :func:`inference_factory.evaluate`: finite, inside
the axis's range, whole where the axis counts whole units; one-line errors naming the axis.
And the checked axes as plain arrays on one dimension order (:func:`_raw_axes`), which the
evaluation and its prediction bands share."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..axes import NUMERIC_AXES, STRUCT_AXES
from ..errors import SpecError


def _as_axis(name: str, value: Any) -> Any:
    """Scalars stay floats; lists, 1-D arrays and DataArrays become labelled axes."""
    import xarray as xr

    unit = NUMERIC_AXES[name][1]
    if isinstance(value, xr.DataArray):
        arr = value.astype(float, copy=False)     # no copy of a float axis (10^7 points)
    elif np.ndim(value) == 0:
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise SpecError(f"{name} = {value!r} must be a number ({unit})") from None
        return _check_scalar(name, v)
    else:
        try:
            vals = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            raise SpecError(f"{name} = {value!r} must be numbers ({unit})") from None
        if vals.ndim != 1 or vals.size == 0:
            raise SpecError(f"{name} must be a number or a non-empty 1-D list; got {value!r}")
        arr = xr.DataArray(vals, dims=name, coords={name: vals})
    check_values(name, np.asarray(arr, dtype=float))
    return arr


def check_values(name: str, vals: np.ndarray) -> None:
    """The checks of axis ``name`` on an array of any shape: every value finite, inside the
    axis's range, and whole where the axis counts whole units; else a one-line SpecError
    naming the first bad value."""
    _, _, lo, hi, integer = NUMERIC_AXES[name]
    stats = None
    if integer and vals.size >= _PARALLEL_MIN and _summary is not None:
        stats = _summary(vals)    # a long list of points: one compiled pass
    if stats is not None:
        mn, mx, whole = stats
    else:                         # no temporaries; NaN propagates (numpy's SIMD min and max:
        # 0.7 ms for 10^6 values, the one-pass summary with its whole-number check 1.3 ms)
        mn, mx = (vals.min(), vals.max()) if vals.size else (lo, lo)
        whole = None
    inside = (np.isfinite(mn) and np.isfinite(mx) and mn >= lo
              and (mx < hi if name in _UPPER_EXCLUSIVE else mx <= hi))
    if not inside and not np.all(np.isfinite(vals)):
        raise _not_finite(name, vals[~np.isfinite(vals)].flat[0])
    if not inside:
        bad = vals[~((vals >= lo) & ((vals < hi) if name in _UPPER_EXCLUSIVE else (vals <= hi)))]
        raise _out_of_range(name, bad[0])
    if integer and not whole and np.any(vals != np.round(vals)):
        raise _not_whole(name, vals[vals != np.round(vals)][0])


#: Array length from which the checks of an integer axis are one compiled pass (numba) and
#: binding labels are read lazily.
_PARALLEL_MIN = 1 << 18
#: (min, max, all whole) of a long array in one pass, or None: set by the engine's entry
#: point (:mod:`.fused`) to the compiled backend's, so this module imports no backend.
_summary = None


def _check_scalar(name: str, v: float) -> float:
    """:func:`_as_axis`'s checks for one number, in plain Python (numpy on a 0-d array costs
    ~10 us per axis): the same rules and messages as on arrays."""
    if not math.isfinite(v):
        raise _not_finite(name, v)
    _, _, lo, hi, integer = NUMERIC_AXES[name]
    if not (lo <= v < hi if name in _UPPER_EXCLUSIVE else lo <= v <= hi):
        raise _out_of_range(name, v)
    if integer and v != round(v):
        raise _not_whole(name, v)
    return v


#: Axes whose upper bound is not allowed (a cache-hit rate of 1 leaves nothing to compute).
_UPPER_EXCLUSIVE = frozenset({"cache_hit_rate"})


def _not_finite(name: str, v) -> SpecError:
    return SpecError(f"{name} = {v:g} must be a finite number ({NUMERIC_AXES[name][1]})")


def _out_of_range(name: str, v) -> SpecError:
    _, unit, lo, hi, _ = NUMERIC_AXES[name]
    hi_txt = f"{hi:g} (exclusive)" if name in _UPPER_EXCLUSIVE else str(hi)
    return SpecError(f"{name} = {v:g} is out of range; allowed [{lo:g}, {hi_txt}] ({unit})")


def _not_whole(name: str, v) -> SpecError:
    return SpecError(f"{name} = {v:g} must be a whole number")


_AXIS_NAMES = frozenset(NUMERIC_AXES) | frozenset(STRUCT_AXES)


def _listify(value) -> list:
    if isinstance(value, (list, tuple)):
        if not value:
            raise SpecError("an axis list is empty; give at least one value")
        return list(value)
    return [value]


def _raw_axes(axes: Mapping[str, Any]):
    """Axes as plain numpy arrays on one common dimension order, with singleton dimensions
    where an axis does not vary, so the kernels broadcast by numpy rules at numpy speed."""
    import xarray as xr

    order: list[str] = []
    sizes: dict[str, int] = {}
    for a in axes.values():
        if isinstance(a, xr.DataArray):
            for d in a.dims:
                if d not in sizes:
                    order.append(d)
                    sizes[d] = a.sizes[d]
                elif sizes[d] != a.sizes[d]:
                    raise SpecError(f"axis dimension {d!r} has sizes {sizes[d]} and "
                                    f"{a.sizes[d]}; axes sharing a dimension must agree")
    raw = {}
    for k, a in axes.items():
        if isinstance(a, xr.DataArray):
            present = [d for d in order if d in a.dims]
            arr = np.asarray(a.transpose(*present).values, dtype=float)
            raw[k] = arr.reshape([sizes[d] if d in a.dims else 1 for d in order])
        else:
            raw[k] = float(a)
    return order, sizes, raw


# --------------------------------------------------------------------------------------------
# the public entry point: whole units stay whole
# --------------------------------------------------------------------------------------------


def check_whole_axes(kwargs: dict) -> None:
    """The axes counted in whole units (:data:`~inference_factory.axes.WHOLE_AXES`: batch
    sizes, draft depth, group sizes) must be whole numbers where a user gives them: the
    engine keeps batch sizes continuous for the library's own root finding and operating
    points, but ``batch_size=2.5`` typed by a person is a mistake (the CLI refuses it too)."""
    from ..axes import WHOLE_AXES

    for name in WHOLE_AXES:
        if name not in kwargs or name not in NUMERIC_AXES:
            continue
        value = kwargs[name]
        try:
            vals = np.asarray(value, dtype=float).ravel()
        except (TypeError, ValueError):
            continue                       # not numbers: the engine's own check names it
        bad = vals[np.isfinite(vals) & (vals != np.round(vals))]
        if bad.size:
            raise SpecError(f"{name} = {bad[0]:g} must be a whole number "
                            f"({NUMERIC_AXES[name][1]}); allowed: integers >= "
                            f"{NUMERIC_AXES[name][2]:g}")


def evaluate(*args: Any, **kwargs: Any):
    """:func:`inference_factory.evaluate`: the engine's
    :func:`inference_factory.engine.evaluate.evaluate` (every argument and the Dataset it
    returns are documented there), after :func:`check_whole_axes` (``batch_size=2.5`` is a
    one-line SpecError here; the library's internal callers use the engine's directly)."""
    from . import __getattr__ as engine_attr        # the package's lazy name, the function

    engine_evaluate = engine_attr("evaluate")

    check_whole_axes(kwargs)
    return engine_evaluate(*args, **kwargs)
