"""The roofline engine: one call evaluates prefill and decode over a grid of named axes.

``evaluate(model, hardware, batch_size=[1, 8, 64], kv_len=[1024, 4096], ...)`` returns an
``xr.Dataset`` whose dimensions are the arguments given as lists. Numeric axes (batch size,
context, prompt length, draft depth, acceptance, cache-hit rate) broadcast through the pure
kernels in :mod:`inference_factory.kernels`: there is no Python loop over grid points.
Structural choices (hardware, model, parallelism, precisions, overlap policy) may be lists
too; each combination is one vectorized block, concatenated along its own dimension.

The engine wires kernels together: it counts, per operation group, the parameters, tokens
and bytes the kernels take (documented in docs/MODEL.md); the rate equations are kernels.
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Any, Iterable, Mapping

import numpy as np
import xarray as xr
from xarray.core import indexing as _xr_indexing

from .. import __version__
from ..errors import SpecError
from ..specs.realism import Realism, load_realism
from ..specs import HardwareSpec, ModelSpec, load_hardware, load_model
from .block import RESOURCES, evaluate_block, op_table
from .geometry import validate_struct
from .backends.tape import NotTraceable
from ..axes import NUMERIC_AXES, STRUCT_AXES, CacheTier, Overlap  # noqa: F401 (re-exported)


# --------------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------------


def _as_axis(name: str, value: Any) -> Any:
    """Scalars stay floats; lists, 1-D arrays and DataArrays become labelled axes."""
    default, unit, lo, hi, integer = NUMERIC_AXES[name]
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
    vals = np.asarray(arr, dtype=float)
    stats = None
    if integer and vals.size >= _PARALLEL_MIN:    # a long list of points: one compiled pass
        from .backends.interp import summary
        stats = summary(vals)
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
    return arr


#: Array length from which the checks of an integer axis are one compiled pass (numba) and
#: binding labels are read lazily.
_PARALLEL_MIN = 1 << 18


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


def evaluate(model: str | ModelSpec | Iterable = "Llama-3.1-8B",
             hardware: str | HardwareSpec | Iterable = "H100-SXM", *,
             ideal: bool = False, realism: Realism | str | None = None,
             detail: str = "resources",
             variables: Iterable[str] | None = None,
             acceptance_by_position: Iterable[float] | None = None,
             draft_model: str | ModelSpec | None = None,
             expert_popularity: Iterable[float] | None = None,
             **kwargs: Any) -> xr.Dataset:
    """Evaluate prefill and decode of ``model`` on ``hardware`` over a grid of named axes.

    Parameters
    ----------
    model, hardware : name, alias, path, spec, or a list of them (each list adds a dimension)
    batch_size, kv_len, prompt_len, prefill_batch_size, draft_depth, acceptance_rate,
    cache_hit_rate : number or list
        Numeric axes (see ``NUMERIC_AXES`` for units and ranges). A list adds a dimension.
    tp, dp, ep, redundant_experts, expert_skew, weight_precision, moe_precision, kv_precision,
    attention_precision, dispatch_precision, combine_precision, overlap, cache_tier : value or list
        Structural choices. ``tp`` x ``dp`` GPUs form one serving instance; MoE layers use
        ``ep`` expert-parallel ranks and ``tp*dp/ep``-way expert tensor parallelism.
    ideal : bool
        Pure roofline: every realism term off, parts combined by max.
    realism : Realism, "measured" or "roofline"
        Realism constants (default: bundled ``configs/realism.toml``, which costs every op from
        the measured kernel tables where they cover it). ``"roofline"``: the same constants
        with the measured tables off (every op on the realistic roofline).
    variables : list of str
        Keep only these output variables (default: all). A list of points is then computed
        for them alone (the fused pass drops the rest of the work) and the result holds only
        them: Monte Carlo over 10^7 points fits in memory.
    detail : "resources" or "ops"
        ``"ops"`` adds an ``op`` dimension: each operation's time per step
        (``decode_op_time_s``, ``prefill_op_time_s``), the resource it is charged to and where
        its cost came from (``*_op_source``: measured / interpolated / extrapolated / roofline).
    acceptance_by_position : list of float
        Per-position acceptance a_1..a_D, instead of a constant ``acceptance_rate``.
    draft_model : model name
        Separate draft model for speculative decoding (default: the model's MTP module).
    expert_popularity : sequence of float
        Share of routed tokens per expert (overrides ``expert_skew``; e.g. measured or mixed
        from workload classes).

    Returns
    -------
    xr.Dataset
        Per-resource times, step times, binding resources, tokens/s per GPU and per user,
        TTFT, TPOT, memory and ``fits``; units in each variable's ``attrs``. The binding
        resources of a list of 2^18 points or more are labels read lazily, as a file's
        variable: kept as one-byte codes until first read (``.values``, ``load()``, a
        DataFrame), then kept as labels; a selection reads its own points only.
    """
    if not _AXIS_NAMES.issuperset(kwargs):
        unknown = set(kwargs) - _AXIS_NAMES
        raise SpecError(f"unknown axis {sorted(unknown)[0]!r}; allowed: {sorted(_AXIS_NAMES)}")
    if detail not in ("resources", "ops"):
        raise SpecError(f"detail = {detail!r} is not one of ['ops', 'resources']")
    if isinstance(realism, str):
        if realism not in ("measured", "roofline"):
            raise SpecError(f"realism = {realism!r} is not one of ['measured', 'roofline'] "
                            "(or a Realism object)")
        realism = load_realism() if realism == "measured" else load_realism().without("measured")
    rl = Realism.ideal() if ideal else (realism if realism is not None else load_realism())
    axes = {k: _as_axis(k, kwargs.get(k, v[0])) for k, v in NUMERIC_AXES.items()}
    if acceptance_by_position is not None:
        acc = np.asarray(list(acceptance_by_position), dtype=float)
        if acc.ndim != 1 or acc.size == 0 or np.any((acc < 0) | (acc > 1)):
            raise SpecError(f"acceptance_by_position = {list(acc)} must be a non-empty list of "
                            "fractions in [0, 1]")
        if np.max(np.asarray(axes["draft_depth"])) > acc.size:
            raise SpecError(f"draft_depth up to {np.max(np.asarray(axes['draft_depth'])):g} needs "
                            f"{int(np.max(np.asarray(axes['draft_depth'])))} acceptance values; "
                            f"acceptance_by_position has {acc.size}")
        acceptance_by_position = acc
    models = [load_model(x) for x in _listify(model)]
    hws = [load_hardware(x) for x in _listify(hardware)]
    for kind, specs in (("model", models), ("hardware", hws)):
        names = [x.name for x in specs]
        if len(set(names)) < len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise SpecError(f"{kind} {dup!r} is listed twice (names and aliases resolve to the "
                            f"same spec); give each once")
    draft = load_model(draft_model) if draft_model is not None else None
    struct = {k: _listify(kwargs.get(k, v)) for k, v in STRUCT_AXES.items()}
    struct_dims = [k for k in STRUCT_AXES if isinstance(kwargs.get(k), (list, tuple))]
    for k in struct_dims:
        vals = struct[k]
        if len(set(map(str, vals))) < len(vals):
            raise SpecError(f"{k} = {vals!r} lists a value twice; give each once")

    dim_order, dim_sizes, raw_axes = _raw_axes(axes)
    blocks = []
    chosen: dict[str, set] = {k: set() for k in STRUCT_AXES if k not in struct_dims}
    listed = any(len(struct[k]) > 1 for k in struct_dims)
    invalid: list[tuple[dict, SpecError]] = []
    valid: list[tuple] = []
    for mi, hi in itertools.product(models, hws):
        for combo in itertools.product(*struct.values()):
            s = dict(zip(struct, combo))
            try:
                g = validate_struct(mi, hi, s, rl, expert_popularity)
            except SpecError as exc:
                if not listed:
                    raise
                # a combination of list values the model cannot take (ep not dividing tp x dp,
                # say) is masked (valid = False), not raised: the other points stand
                invalid.append(({"model": mi.name, "hardware": hi.name,
                                 **{k: s[k] for k in struct_dims}}, exc))
                continue
            for k, v in _resolved_struct(g, s).items():
                if k in chosen:
                    chosen[k].add(v)
            valid.append((mi, hi, s, g))
    # structural choices held at one value (defaults resolved) are scalar coordinates, so a
    # result remembers its shape and precisions (and frames of several calls stay apart);
    # given at construction, like model and hardware (no extra alignment per call)
    held = {k: ((), next(iter(v)), _struct_attrs(k)) for k, v in chosen.items() if len(v) == 1}
    d = axes["draft_depth"]
    any_draft = d > 0 if isinstance(d, float) else bool(np.any(np.asarray(d) > 0))
    for mi, hi, s, g in valid:
        if draft is None and mi.n_mtp_modules == 0 and any_draft:
            raise SpecError(f"draft_depth > 0 needs a draft: model {mi.name!r} has no MTP "
                            "module; give a draft model (draft_model=NAME, CLI --draft-model NAME)")
        if detail == "ops":
            res = _select(evaluate_block(g, raw_axes, acceptance_by_position, draft, detail),
                          variables)
        else:
            res = _evaluate_tiled(g, raw_axes, dim_order, dim_sizes,
                                  acceptance_by_position, draft, variables)
        passes = res.pop("_ops", None)
        ds = _to_dataset(res, dim_order, dim_sizes, axes,
                         {"model": mi.name, "hardware": hi.name, **held})
        if passes is not None:
            ds = _add_ops(ds, op_table(passes), dim_order, dim_sizes)
        if struct_dims:
            ds["valid"] = xr.DataArray(True, attrs={
                "long_name": "the structural combination is a valid instance"})
        blocks.append((ds, mi.name, hi.name, {k: s[k] for k in struct_dims}))
    if invalid:
        if not blocks:
            raise invalid[0][1]
        blocks += [(_masked_block(blocks[0][0]), c["model"], c["hardware"],
                    {k: c[k] for k in struct_dims}) for c, _ in invalid]
    if len(blocks) == 1:
        # one block: model and hardware are scalar coordinates, nothing to align or copy
        ds, _, _, sdims = blocks[0]
        ds = ds.expand_dims({k: [v] for k, v in sdims.items()}) if sdims else ds
    else:
        ds = xr.combine_by_coords(
            [b.drop_vars(["model", "hardware"]).expand_dims(
                {"model": [mn], "hardware": [hn], **{k: [v] for k, v in sd.items()}})
             for b, mn, hn, sd in blocks], combine_attrs="drop_conflicts")
        # keep the order the user gave (combine_by_coords sorts labels)
        order = {"model": [x.name for x in models], "hardware": [x.name for x in hws]}
        order.update({k: struct[k] for k in struct_dims})
        order = {k: v for k, v in order.items() if k in ds.dims and ds.sizes[k] > 1
                 and list(ds.indexes[k]) != list(v)}
        ds = ds.reindex(order) if order else ds
        ds = ds.squeeze([d for d in ("model", "hardware") if ds.sizes[d] == 1])
    ds.attrs.update({
        "title": "inference-factory roofline evaluation",
        "inference_factory_version": __version__,
        "mode": "ideal" if rl.is_ideal else ("measured" if rl.measured else "roofline"),
        "realism_source": rl.source,
        "models": ", ".join(f"{x.name} ({x.path})" for x in models),
        "hardware": ", ".join(f"{x.name} ({x.path})" for x in hws),
        "hardware_files": "; ".join(f"{x.name}={x.path}" for x in hws),
    })
    return ds


#: Points per tile of a grid evaluated tile by tile: the temporaries of one tile (a few hundred
#: arrays of this length, a few dozen alive at once) stay in the CPU caches.
TILE_POINTS = 65_536


def _select(res: dict[str, Any], variables) -> dict[str, Any]:
    """The outputs named in ``variables`` (all when None); an unknown name is an error."""
    if variables is None:
        return res
    names = [variables] if isinstance(variables, str) else list(variables)
    unknown = [v for v in names if v not in res or v.startswith("_")]
    if unknown or not names:
        allowed = sorted(k for k in res if not k.startswith("_"))
        raise SpecError(f"variables = {unknown[0] if unknown else names!r} is not an output "
                        f"variable; allowed: {allowed}")
    return {k: v for k, v in res.items() if k in names or k.startswith("_")}


def _evaluate_tiled(g, raw: Mapping[str, Any], order: list[str], sizes: Mapping[str, int],
                    acceptance_by_position, draft, variables=None) -> dict[str, Any]:
    """:func:`.block.evaluate_block` over the grid, tile by tile along its longest dimension
    when that dimension is long (a list of non-separable points), on every core.

    Every per-point quantity depends on the point's own coordinates only, so a tile's result
    is the grid's result restricted to the tile; numpy releases the GIL inside its passes,
    so tiles run on threads. Short grids and outer products of short axes are one block."""
    if not order:
        return _evaluate_point(g, raw, acceptance_by_position, draft, variables)
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


#: Compiled programs of one-point calls, by structure (the specs they were traced with are
#: kept alive with them, so their ids stay theirs); oldest dropped beyond the cap.
_POINT_PROGRAMS: dict[tuple, Any] = {}
_POINT_PROGRAMS_CAP = 256


def _evaluate_point(g, raw: Mapping[str, float], acceptance_by_position, draft,
                    variables=None) -> dict[str, Any]:
    """:func:`.block.evaluate_block` at one point, through a program traced once per
    structure (:mod:`.tape`) and kept: a repeated one-configuration call (a question, a
    search, a plan) costs a replay, not the ~1,000 numpy operations on scalars."""
    from .backends import tape as T
    from .backends.interp import run_point

    key = _structure_key(g, draft, acceptance_by_position, variables) + (
        bool(raw["draft_depth"] > 0),)
    entry = _POINT_PROGRAMS.get(key)
    if entry is None:
        try:
            program, dtypes = _traced_program(
                g, {k: np.array([v], dtype=float) for k, v in raw.items()}, raw,
                acceptance_by_position, draft, variables)
        except T.NotTraceable:
            program, dtypes = None, None
        if len(_POINT_PROGRAMS) >= _POINT_PROGRAMS_CAP:
            _POINT_PROGRAMS.pop(next(iter(_POINT_PROGRAMS)))
        _POINT_PROGRAMS[key] = entry = (program, dtypes, (g, draft))
    # every call, the first too, through the program: equal calls give equal bits
    program, dtypes, _ = entry
    if program is None:
        return _select(evaluate_block(g, raw, acceptance_by_position, draft), variables)
    values = run_point(program, raw)
    out = {}
    for name, (kind, v) in program.outputs.items():
        if kind == "reg":
            v, dt = values[name], dtypes[name]
            v = (v != 0.0) if dt.kind == "b" else (dt.type(v) if dt.kind in "iu" else v)
        out[name] = v
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
    from .backends import tape as T

    tape = T.Tape()
    # each numeric axis is validated inside its range (:func:`_as_axis`)
    ax = {k: tape.input(k, data[k], bounds=NUMERIC_AXES[k][2:4] if k in NUMERIC_AXES else None)
          if k in data else v for k, v in point.items()}
    program = T.compile_outputs(
        tape, _select(evaluate_block(g, ax, acceptance_by_position, draft), variables))
    ref = _select(evaluate_block(g, point, acceptance_by_position, draft), variables)
    return program, {k: np.asarray(v).dtype for k, v in ref.items()}


#: Programs of point lists, by structure and by what they were traced from
#: (:func:`_evaluate_fused`); as :data:`_POINT_PROGRAMS`.
_FUSED_PROGRAMS: dict[tuple, Any] = {}
_FUSED_PROGRAMS_CAP = 64

#: Points from which a list of points is evaluated by one compiled pass (below, numpy's
#: passes over a few thousand points cost less than recording the tape).
FUSED_MIN_POINTS = 4096


def _evaluate_fused(g, raw: Mapping[str, Any], axis: int, n: int, acceptance_by_position,
                    draft, variables=None) -> dict[str, Any]:
    """:func:`.block.evaluate_block` over a list of ``n`` points (every varying axis varies
    along dimension ``axis`` only), as one compiled pass: the block's numpy code is traced
    once on stand-ins for the per-point axes (:mod:`.tape`) and the recorded program runs
    over the points (:mod:`.tape_exec`). Same results as the numpy passes (to rounding)."""
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


_UNITS = {"_s": "s", "_per_gpu": "per GPU", "_frac": "1", "_tokens_per_s_per_gpu": "tokens/s/GPU",
          "_tokens_per_s_per_user": "tokens/s/user", "_bytes_per_gpu": "bytes",
          "_flop_per_gpu": "FLOP"}


def _masked_block(template: xr.Dataset) -> xr.Dataset:
    """A block shaped like ``template`` for an invalid structural combination: numbers NaN,
    flags False (``fits``, ``valid``), labels empty."""
    out = template.copy()
    for k, da in template.data_vars.items():
        kind = da.dtype.kind
        fill = False if kind == "b" else ("" if kind in "OUS" else np.nan)
        out[k] = xr.full_like(da, fill, dtype=da.dtype if kind in "bOUS" else float)
    return out


#: Descriptions of the structural coordinates.
STRUCT_LONG_NAMES = {
    "tp": "tensor-parallel degree", "dp": "attention data-parallel degree",
    "ep": "expert-parallel degree", "redundant_experts": "redundant expert replicas",
    "expert_skew": "Zipf skew of expert popularity",
    "context_cv": "coefficient of variation of context across DP ranks",
    "weight_precision": "non-expert weight precision", "moe_precision": "routed-expert precision",
    "kv_precision": "KV-cache precision", "attention_precision": "attention math precision",
    "dispatch_precision": "MoE dispatch precision", "combine_precision": "MoE combine precision",
    "overlap": "overlap policy", "cache_tier": "prefix-cache tier",
}


def _struct_attrs(k: str) -> dict[str, str]:
    """The attributes of a structural coordinate (shared: a Variable copies its attrs)."""
    attrs = _STRUCT_ATTRS.get(k)
    if attrs is None:
        attrs = _STRUCT_ATTRS[k] = {"long_name": STRUCT_LONG_NAMES.get(k, k)}
        if k in ("tp", "dp", "ep", "redundant_experts"):
            attrs["units"] = "GPUs" if k != "redundant_experts" else "experts"
    return attrs


_STRUCT_ATTRS: dict[str, dict[str, str]] = {}


def _resolved_struct(g, s: Mapping[str, Any]) -> dict[str, Any]:
    """The structural choices of one block as used (defaults resolved by validate_struct)."""
    return {"tp": g.tp, "dp": g.dp, "ep": g.ep, "redundant_experts": g.redundant,
            "expert_skew": g.skew, "context_cv": g.context_cv, "weight_precision": g.wprec,
            "moe_precision": g.eprec, "kv_precision": g.kvprec, "attention_precision": g.aprec,
            "dispatch_precision": s["dispatch_precision"] or "fp8",
            "combine_precision": s["combine_precision"] or "bf16", "overlap": g.overlap,
            "cache_tier": g.tier}


def _unit_of(name: str) -> str:
    for suffix in ("_tokens_per_s_per_gpu", "_tokens_per_s_per_user", "_bytes_per_gpu",
                   "_flop_per_gpu", "_frac", "_s"):
        if name.endswith(suffix):
            return _UNITS[suffix]
    return {"tokens_per_step": "tokens/step", "fits": "bool", "max_batch_size": "sequences"}.get(
        name, "label")


def _raw_axes(axes: Mapping[str, Any]):
    """Axes as plain numpy arrays on one common dimension order, with singleton dimensions
    where an axis does not vary, so the kernels broadcast by numpy rules at numpy speed."""
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


def _to_dataset(res: Mapping[str, Any], order, sizes, axes: Mapping[str, Any],
                labels: Mapping[str, Any]) -> xr.Dataset:
    """The block's arrays as Dataset variables, without copying them (a variable keeps the
    dimensions it varies along); ``labels`` (model, hardware, held structural choices: a
    value or a ``((), value, attrs)`` tuple) become scalar coordinates, the axes coordinates."""
    data: dict[str, tuple] = {}
    for k, v in res.items():
        arr = np.asarray(v)
        attrs = _var_attrs(k)
        dims: tuple = ()
        if arr.ndim:
            keep = [i for i, (d, n) in enumerate(zip(order, arr.shape)) if n > 1 or sizes[d] == 1]
            dims = tuple(order[i] for i in keep)
            arr = arr.squeeze(axis=tuple(i for i in range(arr.ndim) if i not in keep))
        if k.endswith("_binding_resource"):      # int8 codes -> their labels
            arr = _labels(arr) if arr.size < _PARALLEL_MIN else _lazy_labels(arr)
        data[k] = (dims, arr, attrs)
    coords: dict[str, tuple | xr.Variable] = {
        k: v if isinstance(v, tuple) else ((), v, None) for k, v in labels.items()}
    indexes: dict[str, Any] = {}
    for name, a in axes.items():
        if isinstance(a, xr.DataArray):
            # shallow copies: the result's attributes are its own, not the caller's axis's
            for c, var in a.coords.variables.items():
                coords[c] = var = var.copy(deep=False)
                if c in axes and "units" not in var.attrs:
                    var.attrs["units"] = NUMERIC_AXES[c][1]
            indexes.update(a.xindexes)
        else:   # a scalar axis is recorded as a scalar coordinate (provenance, DataFrames)
            coords[name] = ((), float(a), _axis_attrs(name))
    return _dataset(data, coords, indexes)


_PandasIndex = xr.indexes.PandasIndex
_ExplicitlyIndexed = _xr_indexing.ExplicitlyIndexed
#: The labels of the binding-resource codes.
_RESOURCE_LABELS = np.asarray(RESOURCES)
#: The same labels, each as the int64 words of its UTF-32 text (one row per label).
_LABEL_WORDS = _RESOURCE_LABELS.view(np.int64).reshape(len(RESOURCES), -1)


def _labels(codes: np.ndarray) -> np.ndarray:
    """``_RESOURCE_LABELS[codes]``, copied as rows of int64 words (a fixed-width string array
    is gathered element by element; 10^6 labels: 15 -> 4 ms)."""
    if codes.ndim == 0:
        return _RESOURCE_LABELS[codes]
    words = np.take(_LABEL_WORDS, codes.astype(np.intp).reshape(-1), axis=0)
    return words.view(_RESOURCE_LABELS.dtype).reshape(codes.shape)


class _LabelArray(xr.backends.BackendArray):
    """The labels of an array of binding-resource codes, looked up when read (xarray's lazy
    backend-array interface, as a file's variable): a long list of points keeps one byte per
    point until its labels are read, not 32 (``<U8``), and costs nothing to a caller that
    never reads them."""

    def __init__(self, codes: np.ndarray):
        self.codes = codes
        self.shape = codes.shape
        self.dtype = _RESOURCE_LABELS.dtype

    def __getitem__(self, key):
        return _xr_indexing.explicit_indexing_adapter(
            key, self.shape, _xr_indexing.IndexingSupport.BASIC, self._read)

    def _read(self, key):
        return _labels(self.codes[key])


def _lazy_labels(codes: np.ndarray):
    """``_labels(codes)`` as xarray lazy data: computed on the first read of the whole
    variable (``.values``, ``load()``, a DataFrame), then kept; a selection (``isel``) reads
    its own points only. Writing into the variable before it is read is not supported."""
    return _xr_indexing.MemoryCachedArray(
        _xr_indexing.LazilyIndexedArray(_LabelArray(codes)))


_VAR_ATTRS: dict[str, dict[str, str]] = {}
_AXIS_ATTRS = {k: {"units": v[1]} for k, v in NUMERIC_AXES.items()}


def _var_attrs(name: str) -> dict[str, str]:
    """``{"units": ...}`` of an output variable (shared: a Variable copies its attrs)."""
    a = _VAR_ATTRS.get(name)
    if a is None:
        a = _VAR_ATTRS[name] = {"units": _unit_of(name)}
    return a


def _axis_attrs(name: str) -> dict[str, str]:
    return _AXIS_ATTRS[name]


# ---- the result Dataset: one block's variables need no merge -------------------------------
# xarray's public constructor merges and aligns every variable (~0.7 ms for the ~56 variables
# of one point, more than the whole rest of a call). The variables of one block agree by
# construction, so the Dataset is assembled the way xarray assembles it internally, through
# two private entry points: ``Dataset._construct_direct`` and a Variable's four slots. Both are
# guarded (:data:`_DIRECT`: signature and slots checked at import, the result compared with
# the public constructor's on first use in the process, the public path kept as the fallback)
# and tested against the public path (tests/test_speed_paths.py).

def _dataset_public(data: Mapping[str, tuple], coords: Mapping[str, tuple | xr.Variable],
                    indexes: Mapping[str, Any]) -> xr.Dataset:
    """The Dataset through its public constructor (merges and aligns every variable, and
    builds the default index of each dimension coordinate)."""
    return xr.Dataset(dict(data), coords=dict(coords))


def _dataset_direct(data: Mapping[str, tuple], coords: Mapping[str, tuple | xr.Variable],
                    indexes: Mapping[str, Any]) -> xr.Dataset:
    """The same Dataset as :func:`_dataset_public`, without the merge."""
    variables = {k: _variable(*t) for k, t in data.items()}
    for k, v in coords.items():
        variables[k] = _variable(*v) if isinstance(v, tuple) else v
    # one point: every variable is a scalar, there are no dimensions (xarray's own count of
    # them, with its checks, costs ~50 us for ~56 scalars); a grid: xarray counts them
    scalar = (not indexes and all(not t[0] for t in data.values())
              and all(type(v) is tuple and not v[0] for v in coords.values()))
    return _construct_direct(variables, set(coords), {} if scalar else None, None, dict(indexes))


def _variable(dims, value, attrs) -> xr.Variable:
    """``xr.Variable(dims, value, attrs)``, its slots filled directly when ``value`` needs no
    conversion (what xarray's conversion does, ``np.asarray``, is done here; objects and
    datetimes, which it converts further, go through the constructor)."""
    if isinstance(value, _ExplicitlyIndexed):    # lazy data (long label lists): kept lazy
        return xr.Variable(dims, value, attrs)
    arr = value if type(value) is np.ndarray else np.asarray(value)
    if type(arr) is not np.ndarray or arr.dtype.kind in "OMm" or len(dims) != arr.ndim:
        return xr.Variable(dims, value, attrs)
    v = _new(xr.Variable)
    v._dims = tuple(dims)
    v._data = arr
    v._attrs = dict(attrs) if attrs else None
    v._encoding = None
    return v


def _direct_applies(coords: Mapping[str, tuple | xr.Variable],
                    indexes: Mapping[str, Any]) -> bool:
    """The given indexes are what the public constructor would build: one plain
    ``PandasIndex`` per dimension coordinate (as every axis given as a list has), no other."""
    dim_coords = [c for c, v in coords.items()
                  if (v[0] if isinstance(v, tuple) else v.dims) == (c,)]
    return (len(dim_coords) == len(indexes)
            and all(type(indexes.get(c)) is _PandasIndex for c in dim_coords))


def _direct_available() -> bool:
    """xarray's internals are the ones this module was written against."""
    import inspect
    f = getattr(xr.Dataset, "_construct_direct", None)
    try:
        params = list(inspect.signature(f).parameters) if f is not None else []
    except (TypeError, ValueError):
        return False
    slots: set[str] = set()
    for c in xr.Variable.__mro__:
        sl = c.__dict__.get("__slots__", ())
        slots |= {sl} if isinstance(sl, str) else set(sl)
    return (params[:5] == ["variables", "coord_names", "dims", "attrs", "indexes"]
            and slots == {"_attrs", "_data", "_dims", "_encoding"})


_new = object.__new__
_construct_direct = getattr(xr.Dataset, "_construct_direct", None)
#: None: the direct construction not yet checked against the public one; True/False after.
_DIRECT: bool | None = None if _direct_available() else False


def _dataset(data, coords, indexes) -> xr.Dataset:
    global _DIRECT
    if _DIRECT is False or not _direct_applies(coords, indexes):
        return _dataset_public(data, coords, indexes)
    if _DIRECT:
        return _dataset_direct(data, coords, indexes)
    public = _dataset_public(data, coords, indexes)
    try:                    # first use in this process: the shortcut must give the same thing
        _DIRECT = _same_dataset(_dataset_direct(data, coords, indexes), public)
    except Exception:       # noqa: BLE001 (any failure: keep the public constructor)
        _DIRECT = False
    return public


def _same_dataset(a: xr.Dataset, b: xr.Dataset) -> bool:
    """Identical (values, dtypes, attributes, coordinates, indexes), in the same order, and
    each variable of the same type with its own attributes and no encoding."""
    return (a.identical(b) and list(a.variables) == list(b.variables)
            and list(a.sizes) == list(b.sizes) and set(a.coords) == set(b.coords)
            and list(a.xindexes) == list(b.xindexes)
            and all(type(v) is type(b.variables[k]) and v.dtype == b.variables[k].dtype
                    and v.dims == b.variables[k].dims and v.encoding == b.variables[k].encoding
                    and v.attrs is not b.variables[k].attrs for k, v in a.variables.items()))


def _add_ops(ds: xr.Dataset, table, order, sizes) -> xr.Dataset:
    """The ``op`` dimension of ``detail="ops"``: per phase, each op's time per step, the
    resource it is charged to and the source of its cost."""
    names = list(dict.fromkeys(n for phase in table.values() for n in phase[0]))
    full = [sizes[d] for d in order]
    for phase, (ops, times, res, src) in table.items():
        t = np.full([len(names)] + full, np.nan)
        r = np.full([len(names)] + full, "", dtype=object)
        so = np.full([len(names)] + full, "", dtype=object)
        for name, ti, ri, si in zip(ops, times, res, src):
            i = names.index(name)
            t[i] = np.broadcast_to(np.asarray(ti, dtype=float), full) if full else ti
            r[i] = np.broadcast_to(np.asarray(ri, dtype=object), full) if full else ri
            so[i] = np.broadcast_to(np.asarray(si, dtype=object), full) if full else si
        dims = ["op"] + list(order)
        ds[f"{phase}_op_time_s"] = xr.DataArray(t, dims=dims, attrs={"units": "s"})
        ds[f"{phase}_op_resource"] = xr.DataArray(r.astype(str), dims=dims,
                                                  attrs={"units": "label"})
        ds[f"{phase}_op_source"] = xr.DataArray(so.astype(str), dims=dims,
                                                attrs={"units": "label"})
    return ds.assign_coords(op=names)


def to_dataframe(ds: xr.Dataset) -> "pd.DataFrame":  # noqa: F821
    """Tidy DataFrame: one row per grid point, one column per variable; ``df.attrs["units"]``
    maps each column to its unit. Variables are broadcast to the full grid first."""
    import pandas as pd

    full = xr.broadcast(ds)[0]
    if not full.dims:                      # a single point: one row
        df = pd.DataFrame([{k: v.values.item() for k, v in full.variables.items()}])
    else:
        df = full.to_dataframe().reset_index()
    df.attrs["units"] = {k: ds[k].attrs.get("units", "") for k in ds.data_vars}
    df.attrs["units"].update({k: ds[k].attrs.get("units", "") for k in ds.coords})
    df.attrs.update({k: v for k, v in ds.attrs.items() if isinstance(v, str)})
    return df
