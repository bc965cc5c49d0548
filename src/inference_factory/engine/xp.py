"""The one seam between the physics and the engine's execution backends.

The physics (:mod:`.grid`, :mod:`.cost`, :mod:`.block`, ...) is plain numpy array code. A
backend may run it on values of its own: the tracer (:mod:`.backends.tape`) passes per-point
placeholders that record every numpy operation they meet. The few things plain numpy cannot
say about such a value go through the four helpers here, which a backend's values answer by
protocol (three methods: ``xp_concrete``, ``xp_take``, ``xp_guarded``), as numpy's
``__array_function__`` lets an array type answer numpy's functions; a backend registers the
type of its values (:func:`register`). This module imports no backend, and the physics
imports no backend.

- :func:`is_traced`: a value varies per point and is not known here (no Python branch on it).
- :func:`concrete`: the values of an input at the points, for a Python branch over a whole
  block (is there any draft?).
- :func:`take`: ``values.reshape(-1)[index]`` of a concrete table at a per-point index.
- :func:`guarded`: a region computed only where ``mask`` holds (its result is used only there).
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


def take(values, index):
    """``values.reshape(-1)[index]`` for a concrete table and a concrete or per-point index."""
    if type(index) in _TRACED:
        return index.xp_take(np.asarray(values))
    if type(values) is np.ndarray and values.ndim == 1:     # the common case, no reshape
        return values.take(index)
    return np.asarray(values).reshape(-1).take(index)


def guarded(mask):
    """A context in which the code computes values used only where ``mask`` holds (a backend
    may skip it elsewhere); nothing for a concrete mask."""
    return mask.xp_guarded() if is_traced(mask) else contextlib.nullcontext()
