"""The one seam between the physics and the engine's execution backends.

The physics (:mod:`.grid`, :mod:`.cost`, :mod:`.block`, ...) is plain numpy array code. A
backend may run it on values of its own: the tracer (:mod:`.backends.tape`) passes per-point
placeholders that record every numpy operation they meet, and answers the numpy functions it
can record (``np.where``, ``np.clip``, ``np.full_like``...) through numpy's
``__array_function__``. What plain numpy cannot say about such a value, the physics asks
through the neutral array operations here, which numpy arrays answer as numpy does and a
backend's values answer by protocol (three methods: ``xp_concrete``, ``xp_take``,
``xp_guarded``); a backend registers the type of its values (:func:`register`). This module
imports no backend, and the physics imports no backend and never asks whether it is traced.

What the physics calls:

- :func:`asarray`: ``np.asarray(x, dtype)``; a backend's value is an array of its own already.
- :func:`lookup`: ``values.reshape(-1)[index]`` of a table at a per-point index.
- :func:`where_lazy`: ``np.where(mask, then(), otherwise)``, ``then`` needed only where
  ``mask`` holds.
- :func:`apply_where`: ``np.where(mask, f(*args), otherwise)`` with ``f`` evaluated at the
  masked points only (elementwise in ``args``).
- :func:`broadcast_like`: ``x + 0 like``, ``x`` on the grid of ``like``.
- :func:`any_above`: whether some point of an input exceeds a bound (a branch over a block).
- :func:`memo_key`: a key of values for a memo of what is computed from them, or None.

What the backends and their tests use (the tracer's vocabulary, here and nowhere in the
physics): :func:`is_traced`, :func:`concrete`, :func:`guarded`.
"""

from __future__ import annotations

import contextlib

import numpy as np


#: The types of the backends' per-point values (:func:`register`).
_TRACED: set[type] = set()


def register(cls: type) -> type:
    """Declare ``cls`` a backend's per-point value type (it has the three methods)."""
    _TRACED.add(cls)
    return cls


# ---- the backends' vocabulary -------------------------------------------------------------


def is_traced(*xs) -> bool:
    """Any of ``xs`` is a backend's per-point value (not a concrete number or array)."""
    for x in xs:                  # a type lookup per value: called ~200 times per pass
        if type(x) in _TRACED:
            return True
    return False


def concrete(x):
    """``x`` itself, or a backend value's data at the points (an input's; an intermediate's
    values are unknown while tracing and raise the backend's ``NotTraceable``)."""
    return x.xp_concrete() if is_traced(x) else x


def guarded(mask):
    """A context in which the code computes values used only where ``mask`` holds (a backend
    may skip it elsewhere); nothing for a concrete mask."""
    return mask.xp_guarded() if is_traced(mask) else contextlib.nullcontext()


# ---- the physics' array operations --------------------------------------------------------


def asarray(x, dtype=None):
    """``np.asarray(x, dtype)``; a backend's per-point value is an array of its kind already
    (converted with its own ``astype`` where ``dtype`` is given)."""
    if type(x) in _TRACED:
        return x if dtype is None else x.astype(dtype)
    return np.asarray(x, dtype=dtype)


def lookup(values, index):
    """``values.reshape(-1)[index]`` for a concrete table and a concrete or per-point index."""
    if type(index) in _TRACED:
        return index.xp_take(np.asarray(values))
    if type(values) is np.ndarray and values.ndim == 1:     # the common case, no reshape
        return values.take(index)
    return np.asarray(values).reshape(-1).take(index)


def where_lazy(mask, then, otherwise):
    """``np.where(mask, then(), otherwise)``, where the values ``then()`` computes are needed
    only where ``mask`` holds: numpy computes them everywhere, a backend may skip them for
    points where the mask is false (the beyond-the-table corrections, rare inside a grid)."""
    with guarded(mask):
        value = then()
    return np.where(mask, value, otherwise)


def apply_where(mask, args: tuple, f, otherwise):
    """``np.where(mask, f(*args), otherwise)`` for an ``f`` elementwise in ``args`` alone (no
    other per-point values): numpy evaluates ``f`` at the masked elements only (on ``args``
    broadcast to the result's shape) and returns a new float array; a backend's per-point
    mask, as :func:`where_lazy`."""
    if type(mask) in _TRACED:
        return where_lazy(mask, lambda: f(*args), otherwise)
    shape = np.broadcast_shapes(np.shape(mask), np.shape(otherwise),
                                *[np.shape(a) for a in args])
    out = np.array(np.broadcast_to(otherwise, shape), dtype=float)
    m = mask if np.shape(mask) == shape else np.broadcast_to(mask, shape)
    out[m] = f(*[np.broadcast_to(a, shape)[m] for a in args])
    return out


def broadcast_like(x, like):
    """``x`` on the grid of ``like``: ``x + 0 like`` (broadcast to its shape); a backend's
    per-point value is on the grid of every point already and is returned as it is."""
    return x if type(x) in _TRACED else x + 0.0 * like


def any_above(x, bound):
    """Whether some point of ``x`` exceeds ``bound``, as a Python truth value for a branch
    over a whole block (is there any draft?); a backend's per-point input answers from its
    values at the points."""
    return np.any(concrete(x) > bound)


def any_below(x, bound):
    """Whether some point of ``x`` is below ``bound`` (:func:`any_above`'s mirror: fewer than
    two sequences to split into micro-batches?)."""
    return np.any(concrete(x) < bound)


def memo_key(*xs, max_points: int):
    """A hashable key of the values of ``xs`` (the shape and bytes of each as a float array)
    for a memo of what is computed from them; None where one of them is a backend's
    per-point value (what is computed from it belongs to that backend's run) or where they
    span more than ``max_points`` points (nothing to share, much to keep)."""
    if is_traced(*xs):
        return None
    arrays = [np.asarray(x, dtype=float) for x in xs]
    if np.prod(np.broadcast_shapes(*[a.shape for a in arrays])) > max_points:
        return None
    return tuple(part for a in arrays for part in (a.shape, a.tobytes()))
