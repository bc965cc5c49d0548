"""Non-dominated points: the Pareto mask the front of ``pareto`` and ``plan`` is drawn from."""

from __future__ import annotations

import numpy as np

from ..errors import SpecError


def pareto_mask(x, y) -> np.ndarray:
    """True where the point (x, y) is not dominated, maximising both: no other point is >= in
    both and > in one. Exact duplicates of a front point are all kept; NaN points are not.

    Sorted by x descending, then y descending, a point is on the front when its y exceeds
    every y before it; a run of identical points shares the verdict of its first (one pass of
    numpy: no Python loop over the points)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise SpecError(f"pareto_mask: x and y must be 1-D of one length; got {x.shape}, {y.shape}")
    keep = np.zeros(x.size, bool)
    finite = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    if finite.size == 0:
        return keep
    order = finite[np.lexsort((-y[finite], -x[finite]))]     # x descending, then y descending
    xs, ys = x[order], y[order]
    best_before = np.maximum.accumulate(np.concatenate([[-np.inf], ys[:-1]]))
    new_run = np.ones(order.size, bool)          # first point of a run of identical points
    new_run[1:] = (xs[1:] != xs[:-1]) | (ys[1:] != ys[:-1])
    run = np.cumsum(new_run) - 1
    first_kept = (ys > best_before)[new_run]
    keep[order] = first_kept[run]
    return keep
