"""Sweeps: named axes from a TOML file or the command line, evaluated in memory or in chunks.

A sweep is a :class:`SweepSpec`: models and hardware (each list adds a dimension), axes
(lists of values: the numeric axes of :data:`~inference_factory.engine.NUMERIC_AXES`, the
structural choices of :data:`~inference_factory.engine.STRUCT_AXES`), fixed scalars, and
optional economics. :func:`run_sweep` evaluates it with :func:`inference_factory.evaluate`:

* in memory (``chunks=None``): one ``evaluate`` call, the very Dataset the library returns;
* chunked (``chunks=N`` points per block, or ``{dim: block length}``): the grid is cut into
  blocks, each block is one ``evaluate`` call run as a :func:`dask.delayed` task, and the
  blocks are assembled into a dask-backed Dataset with the same dimensions, coordinates,
  variables and attributes. Writing it (:func:`write_result`) computes block by block, so
  peak memory is bounded by a few blocks, not by the grid. Any dask scheduler runs it; a
  ``dask.distributed`` address or Client may be given.

:func:`write_result` picks the format from the suffix: ``.nc`` (netCDF4), ``.zarr``
(a folder), ``.csv`` and ``.parquet`` (the tidy frame of :func:`inference_factory.to_dataframe`,
written part by part for chunked sweeps). Output goes to a temporary name in the same folder
and is renamed at the end: a failure leaves no output behind.

Results carry their provenance in ``attrs`` (flat strings, as netCDF requires): the package
version, every model and hardware spec file with its SHA-256, the realism and price configs
with theirs, the sweep file with its hash, and the exact axes and fixed values as JSON.

Axis specifications (command line ``--axis NAME=SPEC`` and string values in ``[axes]``)
follow the one option grammar of :mod:`inference_factory.grammar` (its module docstring
lists every form).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import operator
import os
import uuid
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
import xarray as xr

from ... import __version__
from ..economics import CostModel, add_economics
from ...engine import NUMERIC_AXES, as_count, evaluate
from ...specs import schema as schemas
from ...output.files import json_text
from ...axes import COST_BASES, DEFAULT_CHUNK_POINTS, SWEEP_FORMATS  # noqa: F401
from ...specs.grammar import MAX_AXIS_LENGTH, check_values, parse_values, scalar as _scalar  # noqa: F401
from ...errors import SpecError, require
from ...specs.realism import Realism, load_realism
from ...specs import data_dir, load_hardware, load_model
from .spec import (SPEC_AXES, SweepSpec, _check_axis_name, coerce_values,  # noqa: F401
                   load_sweep_file, parse_axis, parse_setting)
from .io import (FORMATS, compute, dask_scheduler, is_lazy, open_result,  # noqa: F401
                 output_format, write_result)


# --------------------------------------------------------------------------------------------
# provenance
# --------------------------------------------------------------------------------------------


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def provenance(spec: SweepSpec, realism: Realism | None) -> dict[str, str]:
    """Flat string attributes recording what produced a sweep result."""
    def files(paths):
        return ", ".join(f"{n} ({p}; sha256 {file_sha256(p)})" for n, p in paths)

    models = [load_model(m) for m in spec.models]
    hws = [load_hardware(h) for h in spec.hardware]
    attrs = {
        "inference_factory_version": __version__,
        "sweep_config": (f"{spec.path} (sha256 {file_sha256(spec.path)})" if spec.path
                         else "command line"),
        "sweep_name": spec.name or "command line",
        "model_specs": files((m.name, m.path) for m in models),
        "hardware_specs": files((h.name, h.path) for h in hws),
        "realism_config": ("ideal (no realism terms)" if realism is None
                           else f"{realism.source} (sha256 {file_sha256(realism.source)})"
                           if os.path.isfile(realism.source) else realism.source),
        "sweep_axes": json_text({"model": list(spec.models), "hardware": list(spec.hardware),
                                 **{k: list(v) for k, v in spec.axes.items()}}, indent=None),
        "sweep_fixed": json_text(dict(spec.fixed), indent=None),
    }
    from ...specs.engines import resolve_serving_engine
    attrs["engine"] = resolve_serving_engine(spec.engine, "engine").name
    if spec.draft_model is not None:
        d = load_model(spec.draft_model)
        attrs["draft_model_spec"] = files([(d.name, d.path)])
    if spec.description:
        attrs["sweep_description"] = spec.description
    if spec.price is not None:
        prices = data_dir("configs") / "prices.toml"
        attrs["price_config"] = f"{prices} (sha256 {file_sha256(prices)})"
    return attrs


# --------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------


def _check_distinct(spec: SweepSpec) -> None:
    """Each axis lists each value once (names and aliases of one spec file count once)."""
    lists = {"model": [load_model(m).name for m in spec.models],
             "hardware": [load_hardware(h).name for h in spec.hardware], **spec.axes}
    for name, values in lists.items():
        seen: set = set()
        for v in values:
            if v in seen:
                raise SpecError(f"axis {name} lists {v!r} more than once; give each value once")
            seen.add(v)


def _load_realism(spec: SweepSpec) -> Realism | None:
    return None if spec.ideal else load_realism()


def _evaluate(spec: SweepSpec, realism: Realism | None, models, hardware,
              axes: Mapping[str, Sequence]) -> xr.Dataset:
    kw = spec.evaluate_kwargs()
    kw.update({k: list(v) for k, v in axes.items()})
    m = list(models) if len(models) > 1 else models[0]
    h = list(hardware) if len(hardware) > 1 else hardware[0]
    return evaluate(m, h, ideal=spec.ideal, realism=realism, **kw)


def _finish(ds: xr.Dataset, spec: SweepSpec, realism: Realism | None) -> xr.Dataset:
    if spec.economics:
        ds = add_economics(ds, price=spec.price, cost=spec.cost or CostModel())
    ds.attrs.update(provenance(spec, realism))
    return ds


def check_size(spec: SweepSpec, max_points: int = schemas.MAX_SWEEP_POINTS) -> None:
    """A one-line SpecError when the grid has more than ``max_points`` points (the
    command line's ``--max-points``), before anything is evaluated or written."""
    n = spec.n_points
    if n > max_points:
        dims = " x ".join(f"{k} {len(v)}" for k, v in (("model", spec.models),
                                                       ("hardware", spec.hardware),
                                                       *spec.axes.items()) if len(v) > 1)
        raise SpecError(f"the sweep has {n:,} points ({dims}), more than the limit of "
                        f"{max_points:,}; shrink an axis or raise --max-points")


def run_sweep(spec: SweepSpec, *, chunks: int | Mapping[str, int] | None = None,
              scheduler: Any = None, progress: bool = False, lazy: bool = False,
              max_points: int = schemas.MAX_SWEEP_POINTS) -> xr.Dataset:
    """Evaluate a sweep.

    Parameters
    ----------
    spec : SweepSpec
        From :func:`load_sweep_file` or built in code.
    chunks : int or mapping, optional
        ``None``: one in-memory :func:`evaluate` call. An int: at most that many grid points
        per block. A mapping ``{dim: block length}``: blocks along those dimensions.
    scheduler : str or distributed.Client, optional
        A ``dask.distributed`` scheduler address (or Client) that computes the blocks.
    progress : bool
        Progress bar on stderr while computing blocks.
    lazy : bool
        Return the chunked result without computing it (dask-backed), e.g. to write it
        with :func:`write_result` block by block. Ignored when ``chunks`` is None.
    max_points : int
        Refuse a grid of more points (default ``schema.MAX_SWEEP_POINTS`` = 10^8).

    Returns
    -------
    xr.Dataset
        The :func:`evaluate` Dataset (plus economics when the spec has them) with provenance
        attributes. Chunked results equal the in-memory one.
    """
    check_size(spec, max_points)
    _check_distinct(spec)
    realism = _load_realism(spec)
    if chunks is None:
        ds = _evaluate(spec, realism, spec.models, spec.hardware, spec.axes)
        return _finish(ds, spec, realism)
    ds = _finish(_chunked(spec, realism, chunks), spec, realism)
    if lazy:
        return ds
    with dask_scheduler(scheduler) as client:
        return compute(ds, client=client, progress=progress)


# ---- chunked evaluation ---------------------------------------------------------------------


def _probe_values(values: Sequence) -> list:
    """Two values that exercise an axis's shape and extremes (or its only value)."""
    v = np.asarray(values, dtype=float)
    return [float(v.min()), float(v.max())] if v.size > 1 else [float(v[0])]


def _blocks(dims: Sequence[str], sizes: Mapping[str, int],
            chunks: int | Mapping[str, int]) -> dict[str, list[slice]]:
    """Slices of each dimension. An int budget fills the innermost dimensions first."""
    if isinstance(chunks, Mapping):
        unknown = set(chunks) - set(dims)
        if unknown:
            raise SpecError(f"chunks: {sorted(unknown)[0]!r} is not a dimension of the sweep; "
                            f"dimensions: {list(dims)}")
        length = {}
        for d in dims:
            n = chunks.get(d, sizes[d])
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise SpecError(f"chunks: {d} = {n!r} must be a positive whole number")
            length[d] = min(int(n), sizes[d])
    else:
        if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
            raise SpecError(f"chunk size = {chunks!r} must be a positive whole number of points")
        budget, length = int(chunks), {}
        for d in reversed(dims):
            length[d] = max(1, min(sizes[d], budget))
            budget = max(1, budget // length[d])
    return {d: [slice(i, min(i + length[d], sizes[d])) for i in range(0, sizes[d], length[d])]
            for d in dims}


def _layout(probe: xr.Dataset) -> dict[str, tuple[tuple[str, ...], np.dtype, dict]]:
    out = {}
    for k, v in probe.data_vars.items():
        dtype = v.dtype
        if dtype.kind == "U":
            dtype = np.dtype(f"<U{max(dtype.itemsize // 4, 16)}")
        out[k] = (v.dims, dtype, dict(v.attrs))
    return out


def _eval_block(spec: SweepSpec, realism: Realism | None, models, hardware,
                axes: Mapping[str, Sequence], names: Mapping[str, list], dims: Sequence[str],
                layout: Mapping[str, tuple]) -> dict[str, np.ndarray]:
    """Evaluate one block; each variable as a numpy array on the template's dimensions.

    ``models``/``hardware`` are spec paths (no name lookup per block); ``names`` holds the
    block's coordinate labels. Every engine value is per point, so a block equals the same
    slice of the whole-grid call.
    """
    ds = _evaluate(spec, realism, models, hardware, {k: list(v) for k, v in axes.items()})
    for d in ("model", "hardware"):
        if d in dims and d not in ds.dims:
            ds = ds.expand_dims(d)
        if d in dims:
            ds = ds.sel({d: names[d]})
    sizes = {d: ds.sizes[d] for d in dims}
    out = {}
    for name, (vdims, dtype, _) in layout.items():
        v = ds.variables[name]
        extra = [d for d in v.dims if d not in vdims]
        if any(v.sizes[d] != 1 for d in extra):
            raise RuntimeError(f"sweep block: {name} varies along {extra}, which the template "
                               "lacks (the engine's broadcasting changed)")
        if extra:
            v = v.isel({d: 0 for d in extra})
        missing = [d for d in vdims if d not in v.dims]
        if missing:
            v = v.set_dims({**{d: sizes[d] for d in missing}, **v.sizes})
        arr = np.asarray(v.transpose(*vdims).values)
        if arr.dtype.kind == "U" and arr.dtype.itemsize > dtype.itemsize:
            raise RuntimeError(f"sweep block: labels of {name} longer than {dtype}")
        out[name] = arr.astype(dtype, copy=False)
    return out


def _chunked(spec: SweepSpec, realism: Realism | None,
             chunks: int | Mapping[str, int]) -> xr.Dataset:
    require("dask", "chunked evaluation")
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    # probe: every model/hardware/structural value, two values of each numeric axis. It
    # checks the structural choices and the range of every numeric axis, and gives each
    # variable's dimensions, dtype and units, the coordinates and the attributes.
    probe_axes = {k: (_probe_values(v) if k in NUMERIC_AXES else list(v))
                  for k, v in spec.axes.items()}
    probe = _evaluate(spec, realism, spec.models, spec.hardware, probe_axes)
    for k, v in spec.axes.items():     # whole-number and other per-value checks
        if k in NUMERIC_AXES and len(v) > 2:
            one = {j: (list(w) if j == k else list(w[:1])) for j, w in spec.axes.items()}
            _evaluate(spec, realism, spec.models[:1], spec.hardware[:1], one)
    dims = [d for d in SPEC_AXES if d in probe.dims]
    coords: dict[str, Any] = {}
    for d in dims:
        if d in NUMERIC_AXES:
            # counts as integers, as the engine's own grids (engine.dataset.as_count)
            values = as_count(d, np.asarray(spec.axes[d], dtype=float))
        else:
            values = probe[d].values
        coords[d] = xr.Variable(d, values, attrs=dict(probe[d].attrs))
    for c in probe.coords:
        if c not in probe.dims:
            coords[c] = probe[c].variable
    sizes = {d: len(coords[d]) for d in dims}
    slices = _blocks(dims, sizes, chunks)
    layout = _layout(probe)

    # blocks load specs by path: no name lookup per block, and the same files everywhere
    model_specs = [load_model(m) for m in spec.models]
    hw_specs = [load_hardware(h) for h in spec.hardware]
    model_path = {m.name: m.path for m in model_specs}
    hw_path = {h.name: h.path for h in hw_specs}
    block_spec = spec if spec.draft_model is None else replace(
        spec, draft_model=load_model(spec.draft_model).path)

    def values_of(d, sl):
        return list(np.asarray(coords[d].values)[sl])

    # one low-level graph: a task per block, and per variable one getitem task per chunk
    token = tokenize(block_spec, realism, chunks, uuid.uuid4().hex)
    block_name = f"sweep-block-{token}"
    blocks = {}
    for idx in itertools.product(*(range(len(slices[d])) for d in dims)):
        names = {d: values_of(d, slices[d][i]) for d, i in zip(dims, idx)}
        models = [model_path[m] for m in names.get("model", [model_specs[0].name])]
        hardware = [hw_path[h] for h in names.get("hardware", [hw_specs[0].name])]
        axes = {k: names.get(k, list(v)) for k, v in spec.axes.items()}
        blocks[(block_name, *idx)] = (functools.partial(
            _eval_block, block_spec, realism, models, hardware, axes, names, dims, layout),)

    data = {}
    for name, (vdims, dtype, attrs) in layout.items():
        var_name = f"sweep-{name}-{token}"
        pos = [dims.index(d) for d in vdims]
        layer = {}
        for idx in itertools.product(*(range(len(slices[d])) for d in vdims)):
            full = [0] * len(dims)
            for p, i in zip(pos, idx):
                full[p] = i
            layer[(var_name, *idx)] = (operator.itemgetter(name), (block_name, *full))
        graph = HighLevelGraph({block_name: blocks, var_name: layer},
                               {block_name: set(), var_name: {block_name}})
        chunks_v = tuple(tuple(len(range(sizes[d])[sl]) for sl in slices[d]) for d in vdims)
        arr = da.Array(graph, var_name, chunks=chunks_v, dtype=dtype,
                       meta=np.empty((0,) * len(vdims), dtype=dtype))
        data[name] = xr.Variable(vdims, arr, attrs=attrs)
    return xr.Dataset(data, coords=coords, attrs=dict(probe.attrs))


