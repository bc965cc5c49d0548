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

import contextlib
import functools
import hashlib
import itertools
import json
import math
import operator
import os
import re
import sys
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import xarray as xr

from .. import __version__
from .economics import CostModel, add_economics
from ..engine import NUMERIC_AXES, STRUCT_AXES, evaluate, to_dataframe
from ..specs import schema as schemas
from ..output.files import atomic_output
from ..axes import COST_BASES, DEFAULT_CHUNK_POINTS, SWEEP_FORMATS  # noqa: F401
from ..specs.grammar import MAX_AXIS_LENGTH, check_values, parse_values, scalar as _scalar  # noqa: F401
from ..errors import SpecError, require
from ..specs.realism import Realism, load_realism
from ..specs import data_dir, load_hardware, load_model
from ..specs.files import _read_toml

#: Axes a sweep may vary, in the engine's dimension order.
SPEC_AXES: tuple[str, ...] = ("model", "hardware", *STRUCT_AXES, *NUMERIC_AXES)
#: Output formats by suffix.
FORMATS: dict[str, str] = SWEEP_FORMATS



# --------------------------------------------------------------------------------------------
# the sweep description
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepSpec:
    """What to evaluate. ``axes`` maps axis names to tuples of values (each a dimension);
    ``fixed`` maps axis names to scalars. ``model`` and ``hardware`` are tuples of names."""

    models: tuple[str, ...]
    hardware: tuple[str, ...]
    axes: Mapping[str, tuple] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    ideal: bool = False
    draft_model: str | None = None
    price: str | None = None
    cost: CostModel | None = None
    name: str = ""
    description: str = ""
    path: str = ""          # the sweep file, "" when built on the command line

    @property
    def economics(self) -> bool:
        return self.price is not None or self.cost is not None

    @property
    def n_points(self) -> int:
        return math.prod(len(v) for v in self.axes.values()) * len(self.models) * len(self.hardware)

    def with_axis(self, name: str, values: Sequence) -> "SweepSpec":
        """A copy with ``name`` swept over ``values`` (model and hardware included)."""
        _check_axis_name(name, f"--axis {name}")
        values = tuple(values)
        if not values:
            raise SpecError(f"axis {name!r} is empty; give at least one value")
        if name == "model":
            return replace(self, models=values)
        if name == "hardware":
            return replace(self, hardware=values)
        axes = dict(self.axes)
        axes[name] = values
        fixed = {k: v for k, v in self.fixed.items() if k != name}
        return replace(self, axes=axes, fixed=fixed)

    def with_fixed(self, name: str, value: Any) -> "SweepSpec":
        """A copy with ``name`` held at ``value`` (removed from the swept axes)."""
        _check_axis_name(name, f"--set {name}", allow_lists=False)
        fixed = dict(self.fixed)
        fixed[name] = value
        axes = {k: v for k, v in self.axes.items() if k != name}
        return replace(self, axes=axes, fixed=fixed)

    def evaluate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the equivalent :func:`inference_factory.evaluate` call."""
        kw: dict[str, Any] = dict(self.fixed)
        kw.update({k: list(v) for k, v in self.axes.items()})
        if self.draft_model is not None:
            kw["draft_model"] = self.draft_model
        return kw


def _check_axis_name(name: str, where: str, allow_lists: bool = True) -> None:
    allowed = SPEC_AXES if allow_lists else SPEC_AXES[2:]
    if name not in allowed:
        hint = ("; model and hardware are lists (--model/--hardware or --axis)"
                if name in ("model", "hardware") else "")
        raise SpecError(f"{where}: unknown axis {name!r}; allowed: {list(allowed)}{hint}")


# --------------------------------------------------------------------------------------------
# parsing axis specifications
# --------------------------------------------------------------------------------------------


def _coerce(name: str, values: Sequence, where: str) -> tuple:
    """Numeric axes become floats (with a clear message for names); model and hardware
    names stay strings; structural values keep their parsed type."""
    if name in NUMERIC_AXES:
        out = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise SpecError(f"{where}: {name} = {v!r} must be a number "
                                f"({NUMERIC_AXES[name][1]})")
            out.append(float(v))
        return tuple(out)
    if name in ("model", "hardware"):
        return tuple(str(v) for v in values)
    return tuple(values)


def parse_axis(text: str, where: str | None = None) -> tuple[str, tuple]:
    """``"batch_size=1,2,4,...,1024"`` -> ``("batch_size", (1.0, 2.0, ..., 1024.0))``.

    Raises SpecError (one line) on an unknown axis name or an empty or malformed range.
    Values outside an axis's domain are rejected by the engine when the sweep runs.
    """
    where = where or f"--axis {text}"
    if "=" not in text:
        raise SpecError(f"{where}: expected NAME=VALUES, e.g. batch_size=1,2,4,...,1024")
    name, spec = (s.strip() for s in text.split("=", 1))
    _check_axis_name(name, where)
    return name, _coerce(name, check_values(name, parse_values(spec, where), where), where)


def parse_setting(text: str, where: str | None = None) -> tuple[str, Any]:
    """``"kv_len=4096"`` -> ``("kv_len", 4096.0)``: one fixed value."""
    where = where or f"--set {text}"
    if "=" not in text:
        raise SpecError(f"{where}: expected NAME=VALUE, e.g. kv_len=4096")
    name, value = (s.strip() for s in text.split("=", 1))
    _check_axis_name(name, where, allow_lists=False)
    if not value:
        raise SpecError(f"{where}: no value given for {name}")
    return name, _coerce(name, check_values(name, (_scalar(value),), where), where)[0]


# --------------------------------------------------------------------------------------------
# sweep files
# --------------------------------------------------------------------------------------------


def load_sweep_file(path: str | os.PathLike) -> SweepSpec:
    """Read a sweep file (strict TOML; an unknown key is a one-line SpecError).

    ::

        [sweep]
        name = "decode_grid"                 # optional
        description = "..."                  # optional
        model = "DeepSeek-V3"                # a name or a list (a list adds a dimension)
        hardware = ["H800-SXM", "H200-SXM"]
        ideal = false                        # optional
        draft_model = "Llama-3.1-8B"         # optional

        [axes]                               # each entry is a dimension
        batch_size = "1,2,4,...,256"         # a specification string, or
        draft_depth = [0, 1, 2, 3]           # a list of values
        kv_precision = ["bf16", "fp8"]

        [fixed]                              # scalars
        dp = 32
        kv_len = 4096

        [economics]                          # optional: add_economics on the result
        price = "deepseek-chat-2025-02"
        cost_basis = "rental"                # rental | capex | tco; other CostModel fields too
    """
    p = Path(path)
    f = schemas.check(schemas.SweepFile, _read_toml(p), str(p))
    name = f.sweep.name if f.sweep.name is not None else p.stem
    description = f.sweep.description or ""
    models = tuple(f.sweep.model) if f.sweep.model is not None else None
    hardware = tuple(f.sweep.hardware) if f.sweep.hardware is not None else None
    ideal = bool(f.sweep.ideal)
    draft = f.sweep.draft_model

    axes: dict[str, tuple] = {}
    for key, raw in f.axes.items():
        where = f"{p}: axes.{key}"
        _check_axis_name(key, where)
        if isinstance(raw, str):
            values = parse_values(raw, where)
        elif isinstance(raw, list):
            if not raw:
                raise SpecError(f"{where}: empty range (empty list); give at least one value")
            if any(isinstance(v, (list, dict)) for v in raw):
                raise SpecError(f"{where} = {raw!r} must be a flat list of values")
            values = tuple(raw)
        elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
            values = (raw,)
        else:
            raise SpecError(f"{where} = {raw!r} must be a list or a specification string "
                            "such as \"1,2,4,...,1024\" or \"0:0.9:10\"")
        values = _coerce(key, check_values(key, values, where), where)
        if key == "model":
            if models is not None:
                raise SpecError(f"{where}: model is also given in [sweep]; give it once")
            models = values
        elif key == "hardware":
            if hardware is not None:
                raise SpecError(f"{where}: hardware is also given in [sweep]; give it once")
            hardware = values
        else:
            axes[key] = values

    fixed: dict[str, Any] = {}
    for key, raw in f.fixed.items():
        where = f"{p}: fixed.{key}"
        _check_axis_name(key, where, allow_lists=False)
        if key in axes:
            raise SpecError(f"{where}: {key} is also an axis in [axes]; give it once")
        if isinstance(raw, (list, dict)) or isinstance(raw, bool):
            raise SpecError(f"{where} = {raw!r} must be one value (lists go in [axes])")
        fixed[key] = _coerce(key, check_values(key, (raw,), where), where)[0]

    price, cost = None, None
    if f.economics is not None:
        ec = f.economics.model_dump()
        price = ec.pop("price")
        ec["cost_basis"] = ec["cost_basis"] or "rental"
        cost = CostModel(**{k: v for k, v in ec.items() if v is not None})

    if models is None or hardware is None:
        missing = "model" if models is None else "hardware"
        raise SpecError(f"{p}: sweep.{missing} is missing (required): a name or a list of names")
    return SweepSpec(models=models, hardware=hardware, axes=axes, fixed=fixed, ideal=ideal,
                     draft_model=draft, price=price, cost=cost, name=name,
                     description=description, path=str(p))


# --------------------------------------------------------------------------------------------
# provenance
# --------------------------------------------------------------------------------------------


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _json_values(values) -> list:
    return [v.item() if hasattr(v, "item") else v for v in values]


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
        "sweep_axes": json.dumps({"model": list(spec.models), "hardware": list(spec.hardware),
                                  **{k: _json_values(v) for k, v in spec.axes.items()}}),
        "sweep_fixed": json.dumps({k: _json_values([v])[0] for k, v in spec.fixed.items()}),
    }
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
            values = np.asarray(spec.axes[d], dtype=float)
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


# ---- computing ------------------------------------------------------------------------------


@contextlib.contextmanager
def dask_scheduler(scheduler: Any = None) -> Iterator[Any]:
    """``None``: dask's default (threads). A string: connect a ``distributed.Client`` to that
    address for the duration. A Client: use it."""
    if scheduler is None:
        yield None
        return
    require("distributed", f"--scheduler {scheduler}")
    from distributed import Client

    if isinstance(scheduler, Client):
        yield scheduler
        return
    try:
        client = Client(scheduler, timeout="10s", set_as_default=True)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SpecError(f"--scheduler {scheduler}: cannot connect to a dask scheduler "
                        f"({' '.join(str(exc).split()) or type(exc).__name__})") from None
    try:
        yield client
    finally:
        client.close()


def _run(obj: Any, *, client: Any = None, progress: bool = False) -> Any:
    """Compute a dask collection, optionally with a progress bar on stderr."""
    import dask

    def local():
        # xarray's own compute for Datasets: dask.compute(Dataset) loses blockwise layers
        # shared between variables (dask 2026.8, "Missing dependency ... truediv")
        with dask.config.set(scheduler=client) if client is not None else contextlib.nullcontext():
            return obj.compute() if isinstance(obj, xr.Dataset) else dask.compute(obj)[0]

    if client is not None and progress:
        from distributed import progress as dprogress

        with dask.config.set(scheduler=client):
            running = obj.persist() if isinstance(obj, xr.Dataset) else client.compute(obj)
        with contextlib.redirect_stdout(sys.stderr):
            dprogress(running)
            sys.stderr.write("\n")
        if isinstance(obj, xr.Dataset):
            with dask.config.set(scheduler=client):
                return running.compute()
        return running.result()
    if progress:
        from tqdm.dask import TqdmCallback

        with TqdmCallback(desc="sweep", unit="task", file=sys.stderr, leave=False):
            return local()
    return local()


def compute(ds: xr.Dataset, *, client: Any = None, progress: bool = False) -> xr.Dataset:
    """Load a chunked result into memory (on ``client`` when given)."""
    return _run(ds, client=client, progress=progress)


def is_lazy(ds: xr.Dataset) -> bool:
    return any(v.chunks is not None for v in ds.variables.values())


# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------


def output_format(path: str | os.PathLike) -> str:
    """The suffix of an output path, checked (one-line SpecError otherwise)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise SpecError(f"--output {path}: the name must end in one of {list(FORMATS)} "
                        "(netCDF, Zarr folder, CSV, Parquet)")
    folder = p.resolve().parent
    if not folder.is_dir():
        raise SpecError(f"--output {path}: folder {folder} does not exist")
    require({".nc": "netCDF4", ".zarr": "zarr", ".parquet": "pyarrow"}.get(suffix),
            f"--output {path}")
    return suffix


def _frame_parts(ds: xr.Dataset, max_rows: int) -> Iterator[xr.Dataset]:
    """Pieces of ``ds`` whose tidy frames, concatenated, are ``to_dataframe(ds)`` row for
    row: consecutive runs of the frame's C-order, each of at most about ``max_rows`` rows."""
    order = list(xr.broadcast(ds)[0].sizes)
    sizes = [ds.sizes[d] for d in order]
    k, inner = len(order), 1
    while k > 0 and inner * sizes[k - 1] <= max_rows:
        k -= 1
        inner *= sizes[k]
    if k == 0:
        yield ds
        return
    lead, split = order[:k - 1], order[k - 1]
    step = max(1, max_rows // inner)
    for idx in itertools.product(*(range(ds.sizes[d]) for d in lead)):
        sel = {d: slice(i, i + 1) for d, i in zip(lead, idx)}
        for j in range(0, ds.sizes[split], step):
            yield ds.isel({**sel, split: slice(j, j + step)})


def _frame(ds: xr.Dataset):
    """``to_dataframe(ds)``; a single point (no dimension) gives one row."""
    if ds.dims:
        return to_dataframe(ds)
    df = to_dataframe(ds.expand_dims("_point")).drop(columns="_point")
    df.attrs["units"].pop("_point", None)
    return df


def _write_frame(ds: xr.Dataset, tmp: str, suffix: str, *, client: Any, progress: bool,
                 max_rows: int) -> None:
    parts: Iterator[xr.Dataset] = _frame_parts(ds, max_rows) if is_lazy(ds) else iter([ds])
    bar = None
    if progress and is_lazy(ds):
        from tqdm import tqdm

        total = sum(1 for _ in _frame_parts(ds, max_rows))
        bar = tqdm(total=total, desc="sweep", file=sys.stderr, leave=False)
    import importlib.util

    arrow = importlib.util.find_spec("pyarrow") is not None
    writer, schema = None, None
    try:
        for i, part in enumerate(parts):
            if is_lazy(part):
                part = _run(part, client=client)
            df = _frame(part)
            if suffix == ".csv" and not arrow:
                df.to_csv(tmp, mode="w" if i == 0 else "a", header=i == 0, index=False)
            else:
                import pyarrow as pa

                table = pa.Table.from_pandas(df, preserve_index=False)
                if writer is None:
                    schema = table.schema
                    if suffix == ".csv":    # pyarrow's writer: ~10x pandas, same values
                        import pyarrow.csv as pcsv

                        writer = pcsv.CSVWriter(tmp, schema)
                    else:
                        import pyarrow.parquet as pq

                        meta = dict(schema.metadata or {})
                        meta[b"PANDAS_ATTRS"] = json.dumps(df.attrs).encode()
                        schema = schema.with_metadata(meta)
                        writer = pq.ParquetWriter(tmp, schema)
                writer.write_table(table.cast(schema))
                del table
            del df, part           # one part in memory at a time
            if bar is not None:
                bar.update()
    finally:
        if writer is not None:
            writer.close()
        if bar is not None:
            bar.close()


def _block_points(ds: xr.Dataset) -> int:
    """Grid points of one block of a chunked result (the whole grid when in memory)."""
    chunks = {d: max(c) for d, c in ds.chunksizes.items()} if is_lazy(ds) else {}
    return max(1, math.prod(chunks.get(d, n) for d, n in ds.sizes.items()))


def write_result(ds: xr.Dataset, path: str | os.PathLike, *, scheduler: Any = None,
                 progress: bool = False, max_rows: int | None = None) -> Path:
    """Write a sweep result; the suffix picks the format (``.nc``, ``.zarr``, ``.csv``,
    ``.parquet``). A chunked (dask-backed) result is computed block by block as it is
    written. The output appears only when complete (temporary name, then rename).

    CSV and Parquet hold ``inference_factory.to_dataframe(ds)``: one row per grid point.
    A chunked result is converted in parts of at most ``max_rows`` rows (default: the
    points of one block, so that each part evaluates about one block).
    """
    suffix = output_format(path)
    target = Path(path)
    with atomic_output(target, directory=(suffix == ".zarr")) as tmp:
        if max_rows is None:
            max_rows = _block_points(ds)
        with dask_scheduler(scheduler) as client:
            if suffix == ".nc":
                job = ds.to_netcdf(tmp, engine="netcdf4", compute=not is_lazy(ds))
                if is_lazy(ds):
                    _run(job, client=client, progress=progress)
            elif suffix == ".zarr":
                job = ds.to_zarr(tmp, mode="w", compute=not is_lazy(ds), consolidated=True,
                                 zarr_format=2)
                if is_lazy(ds):
                    _run(job, client=client, progress=progress)
            else:
                _write_frame(ds, tmp, suffix, client=client, progress=progress,
                             max_rows=max_rows)
    return target


def open_result(path: str | os.PathLike) -> xr.Dataset:
    """Read back a ``.nc`` or ``.zarr`` result written by :func:`write_result`."""
    suffix = Path(path).suffix.lower()
    if suffix == ".nc":
        ds = xr.load_dataset(path, engine="netcdf4")
    elif suffix == ".zarr":
        ds = xr.open_zarr(path).load()
    else:
        raise SpecError(f"{path}: open_result reads .nc or .zarr")
    return ds
