"""The engine's results as ``xr.Dataset`` and DataFrames: variables with units, structural
choices as scalar coordinates, binding resources as labels (read lazily for long point lists),
the ``op`` dimension of ``detail="ops"``, and the tidy frame of :func:`to_dataframe`.

Datasets are built through xarray's public constructor, from ``xr.Variable`` objects made
with ``fastpath=True`` where the data is already a numpy array of the right dimensions
(xarray's conversion would only check what is true by construction, and its first use in a
process imports dask where dask is installed: ~0.4 s for a one-point answer).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import xarray as xr
from xarray.core import indexing as _xr_indexing

from ..axes import NUMERIC_AXES
from ..output.metadata import as_count, cf_attrs
from .arrays import _RESOURCE_LABELS, _labels, invalid_fill
from .inputs import _PARALLEL_MIN


_UNITS = {"_s": "s", "_per_gpu": "per GPU", "_frac": "1", "_tokens_per_s_per_gpu": "tokens/s/GPU",
          "_tokens_per_s_per_user": "tokens/s/user", "_bytes_per_gpu": "bytes",
          "_flop_per_gpu": "FLOP"}




def _masked_block(template: xr.Dataset) -> xr.Dataset:
    """A block shaped like ``template`` for an invalid structural combination: numbers NaN,
    flags False (``fits``, ``valid``), labels empty."""
    out = template.copy()
    for k, da in template.data_vars.items():
        fill, dtype = invalid_fill(da.dtype)
        out[k] = xr.full_like(da, fill, dtype=dtype)
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
        attrs = _STRUCT_ATTRS[k] = cf_attrs(k, long_name=STRUCT_LONG_NAMES.get(k, k))
        if k not in STRUCT_NUMBER_NAMES:      # precisions, overlap, cache tier: labels
            attrs.pop("units", None)
    return attrs


#: Structural coordinates that are numbers (the others are labels: no units).
STRUCT_NUMBER_NAMES = ("tp", "dp", "ep", "redundant_experts", "expert_skew", "context_cv")



_STRUCT_ATTRS: dict[str, dict[str, str]] = {}


def _unit_of(name: str) -> str:
    for suffix in ("_tokens_per_s_per_gpu", "_tokens_per_s_per_user", "_bytes_per_gpu",
                   "_flop_per_gpu", "_frac", "_s"):
        if name.endswith(suffix):
            return _UNITS[suffix]
    return {"tokens_per_step": "tokens/step", "fits": "bool", "max_batch_size": "sequences"}.get(
        name, "label")


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
        else:
            arr = as_count(k, arr)
        data[k] = (dims, arr, attrs)
    coords: dict[str, tuple | xr.Variable] = {
        k: v if isinstance(v, tuple) else ((), v, _label_attrs(k)) for k, v in labels.items()}
    for name, a in axes.items():
        if isinstance(a, xr.DataArray):
            # shallow copies: the result's attributes are its own, not the caller's axis's
            for c, var in a.coords.variables.items():
                coords[c] = var = var.copy(deep=False)
                if c in axes and var.ndim == 1 and c in var.dims:    # a grid's index: counts
                    counted = as_count(c, np.asarray(var.values))    # as integers
                    if counted is not var.values:
                        coords[c] = var = xr.Variable(var.dims, counted, dict(var.attrs))
                if c in axes and "units" not in var.attrs:
                    var.attrs.update(_axis_attrs(c))
        else:   # a scalar axis is recorded as a scalar coordinate (provenance, DataFrames)
            coords[name] = ((), as_count(name, np.float64(a))[()], _axis_attrs(name))
    return xr.Dataset({k: _variable(*t) for k, t in data.items()},
                      coords={k: _variable(*v) if isinstance(v, tuple) else v
                              for k, v in coords.items()})


def _variable(dims, value, attrs) -> xr.Variable:
    """``xr.Variable(dims, value, attrs)``; a numpy array (or number) of plain dtype whose
    dimensions match is taken as it is (``fastpath``: no conversion, no copy)."""
    if isinstance(value, _xr_indexing.ExplicitlyIndexed):   # lazy labels: kept lazy
        return xr.Variable(dims, value, attrs)
    arr = np.asarray(value)
    if arr.dtype.kind in "OMm" or arr.ndim != len(dims):
        return xr.Variable(dims, value, attrs)
    return xr.Variable(dims, arr, attrs, fastpath=True)




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
_AXIS_ATTRS = {k: cf_attrs(k) for k in NUMERIC_AXES}
_LABEL_ATTRS: dict[str, dict[str, str]] = {}


def _var_attrs(name: str) -> dict[str, str]:
    """``{"units": ..., "long_name": ...}`` of an output variable (output.metadata; shared:
    a Variable copies its attrs)."""
    a = _VAR_ATTRS.get(name)
    if a is None:
        a = _VAR_ATTRS[name] = cf_attrs(name, _unit_of(name))
    return a


def _dim_attrs(ds: xr.Dataset) -> xr.Dataset:
    """Give the dimension coordinates that listing made (model, hardware, a listed structural
    choice) their attributes (in place)."""
    for d in dict.fromkeys([*ds.dims, "model", "hardware"]):
        if d in ds.coords and "long_name" not in ds[d].attrs:
            attrs = _struct_attrs(d) if d in STRUCT_LONG_NAMES else _label_attrs(d)
            ds[d].attrs.update(attrs)
    return ds


def _label_attrs(name: str) -> dict[str, str]:
    """Attributes of a scalar label coordinate (model, hardware, a structural choice)."""
    a = _LABEL_ATTRS.get(name)
    if a is None:
        a = _LABEL_ATTRS[name] = cf_attrs(name)
        a.pop("units", None)
    return a


def _axis_attrs(name: str) -> dict[str, str]:
    return _AXIS_ATTRS[name]


def _add_ops(ds: xr.Dataset, table, order, sizes) -> xr.Dataset:
    """The ``op`` dimension of ``detail="ops"``: per phase, each op's time, FLOPs and HBM bytes
    per step per GPU, the resource it is charged to and the source of its cost."""
    names = list(dict.fromkeys(n for phase in table.values() for n in phase[0]))
    full = [sizes[d] for d in order]
    for phase, (ops, times, res, src, flop, nbytes) in table.items():
        t = np.full([len(names)] + full, np.nan)
        f = np.full([len(names)] + full, np.nan)
        b = np.full([len(names)] + full, np.nan)
        r = np.full([len(names)] + full, "", dtype=object)
        so = np.full([len(names)] + full, "", dtype=object)
        for name, ti, ri, si, fi, bi in zip(ops, times, res, src, flop, nbytes):
            i = names.index(name)
            t[i] = np.broadcast_to(np.asarray(ti, dtype=float), full) if full else ti
            f[i] = np.broadcast_to(np.asarray(fi, dtype=float), full) if full else fi
            b[i] = np.broadcast_to(np.asarray(bi, dtype=float), full) if full else bi
            r[i] = np.broadcast_to(np.asarray(ri, dtype=object), full) if full else ri
            so[i] = np.broadcast_to(np.asarray(si, dtype=object), full) if full else si
        dims = ["op"] + list(order)
        for name, values in ((f"{phase}_op_time_s", t), (f"{phase}_op_flop_per_gpu", f),
                             (f"{phase}_op_hbm_bytes_per_gpu", b),
                             (f"{phase}_op_resource", r.astype(str)),
                             (f"{phase}_op_source", so.astype(str))):
            ds[name] = xr.DataArray(values, dims=dims, attrs=cf_attrs(name))
    ds = ds.assign_coords(op=names)
    ds["op"].attrs.update(cf_attrs("op"))
    return ds


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
