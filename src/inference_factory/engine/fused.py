"""Point lists through the compiled backend, and long grids tile by tile.

A list of non-separable points (every varying axis along one dimension) of
:data:`FUSED_MIN_POINTS` or more is one compiled pass: the block's numpy code is traced once on
stand-ins for the per-point axes (:mod:`.backends.tape`) and the recorded program is replayed
over the points by the numba interpreter (:mod:`.backends.interp`). Other long grids are cut
into tiles along their longest dimension and run on threads; short grids and single points
are one numpy pass (:func:`.block.evaluate_block`). This module is the engine's only import
of a backend.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from ..axes import NUMERIC_AXES
from . import inputs as _inputs
from .backends.tape import NotTraceable
from .arrays import _select
from .block import evaluate_block


def _long_summary(vals: np.ndarray):
    """(min, max, all whole) of a long axis in one compiled pass (numba loads on first use)."""
    from .backends.interp import summary

    return summary(vals)


_inputs._summary = _long_summary


#: Points per tile of a grid evaluated tile by tile: the temporaries of one tile (a few hundred
#: arrays of this length, a few dozen alive at once) stay in the CPU caches.
TILE_POINTS = 65_536


def _evaluate_tiled(g, raw: Mapping[str, Any], order: list[str], sizes: Mapping[str, int],
                    acceptance_by_position, draft, variables=None) -> dict[str, Any]:
    """:func:`.block.evaluate_block` over the grid, tile by tile along its longest dimension
    when that dimension is long (a list of non-separable points), on every core.

    Every per-point quantity depends on the point's own coordinates only, so a tile's result
    is the grid's result restricted to the tile; numpy releases the GIL inside its passes,
    so tiles run on threads. Short grids and outer products of short axes are one block."""
    if not order:          # one point: numpy on scalars (~1-2 ms), no program to trace
        return _select(evaluate_block(g, raw, acceptance_by_position, draft), variables)
    axis = max(range(len(order)), key=lambda i: sizes[order[i]])
    n = sizes[order[axis]]
    if n >= FUSED_MIN_POINTS and all(np.ndim(a) == 0 or a.size == a.shape[axis] or a.size == 1
                                     for a in raw.values()):
        try:           # a list of points: one compiled pass (engine.tape)
            return _evaluate_fused(g, raw, axis, n, acceptance_by_position, draft, variables)
        except NotTraceable:
            pass
    if n < 4 * TILE_POINTS:
        return _select(evaluate_block(g, raw, acceptance_by_position, draft), variables)
    starts = list(range(0, n, TILE_POINTS))
    if n - starts[-1] < 2:          # a one-point tile could not tell "varies" from "constant"
        starts.pop()

    def tile(k: int) -> dict[str, Any]:
        sl = slice(starts[k], starts[k + 1] if k + 1 < len(starts) else n)
        sub = {}
        for name, a in raw.items():
            if np.ndim(a) and a.shape[axis] > 1:
                idx = [slice(None)] * a.ndim
                idx[axis] = sl
                a = a[tuple(idx)]
            sub[name] = a
        return _select(evaluate_block(g, sub, acceptance_by_position, draft), variables)

    first = tile(0)        # alone: fills the shared caches (tables, placements) once
    # output buffers from the first tile: a variable that varies along the tiled axis gets the
    # full length there; each tile is written into place as it completes, then dropped
    out: dict[str, Any] = {}
    for name, v in first.items():
        a = np.asarray(v)
        if a.ndim and a.shape[axis] > 1:
            shape = list(a.shape)
            shape[axis] = n
            out[name] = np.empty(shape, dtype=a.dtype)
        else:
            out[name] = v

    def place(k: int, part: Mapping[str, Any]) -> None:
        stop = starts[k + 1] if k + 1 < len(starts) else n
        for name, v in part.items():
            a, buf = np.asarray(v), out[name]
            if np.ndim(buf) and np.shape(buf)[axis] == n:
                idx = [slice(None)] * buf.ndim
                idx[axis] = slice(starts[k], stop)
                buf[tuple(idx)] = a
            elif not np.array_equal(a, buf):   # not expected: the tile's coordinates are
                raise AssertionError(f"{name} varies across tiles but not within the first")

    place(0, first)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=_N_THREADS) as pool:
        for k, part in zip(range(1, len(starts)), pool.map(tile, range(1, len(starts)))):
            place(k, part)
    return out


def _structure_key(g, draft, acceptance_by_position, variables) -> tuple:
    """What a traced program depends on besides the per-point values: the structure (the
    specs by identity: the caches keep them alive), the draft model, the acceptance by
    position and the outputs asked for."""
    from dataclasses import fields

    return (tuple(id(getattr(g, f.name)) if f.name in ("m", "hw", "rl") else getattr(g, f.name)
                  for f in fields(g)),
            id(draft), None if acceptance_by_position is None else tuple(acceptance_by_position),
            None if variables is None else tuple(variables))


def _traced_program(g, data: Mapping[str, np.ndarray], point: Mapping[str, Any],
                    acceptance_by_position, draft, variables):
    """The block's program with the axes in ``data`` (their values at the points) traced and
    the others fixed at ``point``, and the dtype of each output (the numpy block at
    ``point``, one of the points). Raises :class:`.tape.NotTraceable`."""
    from .backends import program as P
    from .backends import tape as T

    tape = T.Tape()
    # each numeric axis is validated inside its range (:func:`_as_axis`)
    ax = {k: tape.input(k, data[k], bounds=NUMERIC_AXES[k][2:4] if k in NUMERIC_AXES else None)
          if k in data else v for k, v in point.items()}
    program = P.compile_outputs(
        tape, _select(evaluate_block(g, ax, acceptance_by_position, draft), variables))
    ref = _select(evaluate_block(g, point, acceptance_by_position, draft), variables)
    return program, {k: np.asarray(v).dtype for k, v in ref.items()}


#: Programs of point lists, by structure and by what they were traced from
#: (:func:`_evaluate_fused`); the specs they were traced with are kept alive with them (so
#: their ids stay theirs); oldest dropped beyond the cap.
_FUSED_PROGRAMS: dict[tuple, Any] = {}
_FUSED_PROGRAMS_CAP = 64

#: Points from which a list of points is evaluated by one compiled pass (below, numpy's
#: passes over a few thousand points cost less than recording the tape).
FUSED_MIN_POINTS = 4096


def _evaluate_fused(g, raw: Mapping[str, Any], axis: int, n: int, acceptance_by_position,
                    draft, variables=None) -> dict[str, Any]:
    """:func:`.block.evaluate_block` over a list of ``n`` points (every varying axis varies
    along dimension ``axis`` only), as one compiled pass: the block's numpy code is traced
    once on stand-ins for the per-point axes (:mod:`.backends.tape`) and the recorded program
    runs over the points (:mod:`.backends.interp`). Same results as the numpy passes (to rounding)."""
    from .backends.interp import run

    shape = [1] * np.ndim(next(a for a in raw.values() if np.ndim(a)))
    shape[axis] = n
    data = {k: a.reshape(-1) for k, a in raw.items() if np.ndim(a) and a.size > 1}
    first = {k: a[:1] if k in data else a for k, a in {**raw, **data}.items()}
    # the program depends on which axes vary, the values of the others, and (the one branch
    # on the data, block.evaluate_block) whether any point drafts
    drafts = np.any(data["draft_depth"] > 0) if "draft_depth" in data else None
    key = _structure_key(g, draft, acceptance_by_position, variables) + (
        tuple(sorted(data)), bool(drafts),
        tuple((k, float(np.asarray(v).reshape(-1)[0])) for k, v in sorted(first.items())
              if k not in data))
    entry = _FUSED_PROGRAMS.get(key)
    if entry is None:
        program, dtypes = _traced_program(g, data, first, acceptance_by_position, draft,
                                          variables)
        if len(_FUSED_PROGRAMS) >= _FUSED_PROGRAMS_CAP:
            _FUSED_PROGRAMS.pop(next(iter(_FUSED_PROGRAMS)))
        _FUSED_PROGRAMS[key] = entry = (program, dtypes, (g, draft))
    program, dtypes, _ = entry
    values = run(program, data, n, dtypes)
    return {name: v if kind == "const" else values[name].reshape(shape)
            for name, (kind, v) in program.outputs.items()}


_N_THREADS = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else (os.cpu_count() or 1))


