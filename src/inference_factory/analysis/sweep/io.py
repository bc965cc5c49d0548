"""Computing and writing sweep results: the dask scheduler context (:func:`dask_scheduler`),
:func:`compute` of a chunked result, and :func:`write_result` / :func:`open_result` for
``.nc``, ``.zarr``, ``.csv`` and ``.parquet`` (atomic: the output appears only when complete;
chunked results are written block by block).

Re-exported by :mod:`inference_factory.analysis.sweep`, where users import them."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import xarray as xr

from ...engine import to_dataframe
from ...output.files import atomic_output
from ...axes import SWEEP_FORMATS
from ...errors import SpecError, require

#: Output formats by suffix.
FORMATS: dict[str, str] = SWEEP_FORMATS


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
                try:
                    job = ds.to_netcdf(tmp, engine="netcdf4", compute=not is_lazy(ds))
                    if is_lazy(ds):
                        _run(job, client=client, progress=progress)
                except RuntimeError as exc:     # netCDF4/HDF5 report a failed write so
                    if not str(exc).startswith("NetCDF"):
                        raise                   # a failed computation is not a failed write
                    raise SpecError(f"--output {path}: cannot write the netCDF file ({exc}: "
                                    "a full disk or a file-size limit?); nothing was "
                                    "written") from None
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
