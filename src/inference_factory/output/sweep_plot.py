"""Figures of sweep results: a heatmap (x, y) or a line plot (x, one line per value of a
remaining small dimension), optionally faceted, written to a file.

Drawing uses matplotlib's object API with the Agg canvas: no pyplot state, no backend change
for the caller. The figure is exactly ``size`` inches times ``dpi`` pixels (no tight bounding
box), axes carry the units from the Dataset's ``attrs``, the title names model and hardware.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import xarray as xr

from ..errors import SpecError
from .files import atomic_output
from ..errors import require

#: Figure formats by suffix.
PLOT_FORMATS = (".png", ".svg", ".pdf")
#: Most lines one line plot draws (one per value of the remaining dimension).
MAX_LINES = 12
#: Most facets (subplots).
MAX_FACETS = 12
#: Scalar axes named in a plot's title when the sweep held them at their default.
TITLE_DEFAULTS = ("kv_len", "prompt_len", "acceptance_rate", "draft_depth", "cache_hit_rate",
                  "tp", "dp", "ep", "weight_precision", "moe_precision", "kv_precision", "overlap")
#: Legend label of the points that do not fit in HBM.
UNFIT_LABEL = "does not fit"


def parse_size(text: str) -> tuple[float, float]:
    """``"8x5"`` -> ``(8.0, 5.0)`` inches."""
    parts = text.lower().split("x")
    try:
        w, h = (float(p) for p in parts)
    except ValueError:
        raise SpecError(f"--size {text!r} must be WIDTHxHEIGHT in inches, e.g. 8x5") from None
    if not (0 < w <= 100 and 0 < h <= 100):
        raise SpecError(f"--size {text!r}: width and height must lie in (0, 100] inches")
    return w, h


def _plot_dims(ds: xr.Dataset, *, x: str, var: str, y: str | None, facet: str | None
               ) -> tuple[list[str], str | None]:
    """Check a plot request against ``ds``; returns the plotted dims and the line dim."""
    if var not in ds.data_vars:
        raise SpecError(f"--var {var!r} is not a variable of the sweep; available: "
                        f"{sorted(ds.data_vars)}")
    dims = list(ds.dims)
    for opt, name in (("--x", x), ("--y", y), ("--facet", facet)):
        if name is not None and name not in ds.dims:
            raise SpecError(f"{opt} {name!r} is not a swept dimension; dimensions: {dims} "
                            "(sweep it with --axis NAME=VALUES)")
    given = [d for d in (x, y, facet) if d is not None]
    if len(set(given)) != len(given):
        raise SpecError(f"--x, --y and --facet must be different dimensions; got {given}")
    if facet is not None and ds.sizes[facet] > MAX_FACETS:
        raise SpecError(f"--facet {facet!r} has {ds.sizes[facet]} values; at most {MAX_FACETS} "
                        "facets")
    da = ds[var]
    rest = [d for d in da.dims if d not in given and ds.sizes[d] > 1]
    kind = ds[var].dtype.kind
    hue = None
    if y is not None:
        if rest:
            raise SpecError(f"--var {var} also varies along {rest}; a heatmap shows x and y only: "
                            f"add --facet {rest[0]}, or hold it with --set {rest[0]}=VALUE")
    else:
        if kind in "OUS":
            raise SpecError(f"--var {var} holds labels; draw it as a heatmap (give --y)")
        if len(rest) > 1:
            raise SpecError(f"--var {var} varies along {rest} besides --x {x}; a line plot "
                            "draws one line per value of one more dimension: add --y or "
                            f"--facet, or hold one with --set {rest[-1]}=VALUE")
        if rest:
            hue = rest[0]
            if ds.sizes[hue] > MAX_LINES:
                raise SpecError(f"--var {var}: one line per {hue} would draw {ds.sizes[hue]} "
                                f"lines (at most {MAX_LINES}); give --y {hue} for a heatmap")
    return given, hue


def check_plot(ds: xr.Dataset, path: str | os.PathLike, *, x: str | None, var: str | None,
               y: str | None = None, facet: str | None = None) -> None:
    """Raise a one-line SpecError if the plot cannot be drawn from ``ds``."""
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_FORMATS:
        raise SpecError(f"--plot {path}: the name must end in one of {list(PLOT_FORMATS)}")
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise SpecError(f"--plot {path}: folder {folder} does not exist")
    if x is None or var is None:
        raise SpecError(f"--plot {path} needs --x DIMENSION and --var VARIABLE "
                        "(and --y for a heatmap)")
    require("matplotlib", f"--plot {path}", extra="plots")
    _plot_dims(ds, x=x, var=var, y=y, facet=facet)


def _label(ds: xr.Dataset, name: str) -> str:
    units = ds[name].attrs.get("units", "")
    return f"{name} [{units}]" if units and units != "label" else name


def _geometric(values: np.ndarray) -> bool:
    """Spaced more evenly in log than in linear terms, over at least 1.5 decades."""
    if values.dtype.kind not in "fiu" or values.size < 3 or np.any(values <= 0):
        return False
    v = np.sort(values.astype(float))
    if v[-1] / v[0] < 30:
        return False
    lin, log = np.diff(v), np.diff(np.log(v))
    return bool(np.std(log) / np.mean(log) < np.std(lin) / np.mean(lin))


def _axis_values(values: np.ndarray, log: bool | None = None
                 ) -> tuple[np.ndarray, str, list[str] | None]:
    """Positions, scale ('linear'|'log') and tick labels (None: matplotlib's own ticks).
    ``log`` forces the scale (True needs positive, increasing values); None chooses."""
    numeric = values.dtype.kind in "fiu" and values.size and np.all(np.diff(values) > 0)
    if log and not (numeric and np.all(values > 0)):
        raise SpecError(f"a log axis needs positive increasing numbers; got {list(values)[:5]}")
    if numeric:
        scale = ("log" if log else "linear") if log is not None else (
            "log" if _geometric(values) else "linear")
        if values.size <= 10 or scale == "log":
            return values.astype(float), scale, [_fmt(v) for v in values]
        return values.astype(float), scale, None
    return np.arange(values.size, dtype=float), "linear", [_fmt(v) for v in values]


def _set_ticks(axis, pos: np.ndarray, labels: list[str] | None, max_ticks: int) -> None:
    """Ticks at the swept values (thinned to ``max_ticks``), plain numbers, no minor ticks."""
    from matplotlib.ticker import NullLocator

    if labels is None:
        return
    step = max(1, math.ceil(len(pos) / max(max_ticks, 2)))
    keep = list(range(0, len(pos), step))
    axis.set_ticks([pos[i] for i in keep], [labels[i] for i in keep])
    axis.set_minor_locator(NullLocator())


def _fmt(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return f"{float(v):g}"
    return str(v)


def _edges(pos: np.ndarray, scale: str) -> np.ndarray:
    """Cell edges around centres ``pos`` (geometric midpoints on a log axis)."""
    p = np.log(pos) if scale == "log" else pos
    if p.size == 1:
        e = np.array([p[0] - 0.5, p[0] + 0.5])
    else:
        mid = (p[1:] + p[:-1]) / 2
        e = np.concatenate([[p[0] - (mid[0] - p[0])], mid, [p[-1] + (p[-1] - mid[-1])]])
    return np.exp(e) if scale == "log" else e


def _title(ds: xr.Dataset, var: str, plotted: Sequence[str]) -> str:
    who = []
    for d in ("model", "hardware"):
        if d in ds.coords and d not in ds.dims:
            who.append(str(ds[d].values))
    head = " on ".join(who) if who else ""
    try:
        fixed = json.loads(ds.attrs.get("sweep_fixed", "{}"))
    except ValueError:
        fixed = {}
    held = [f"{k}={_fmt(ds[k].values.item())}" for k in ds.dims
            if k not in plotted and ds.sizes[k] == 1]
    held += [f"{k}={_fmt(v)}" for k, v in fixed.items()]
    # defaults that shape the result: scalar axes the engine recorded, economics
    named = {h.split("=", 1)[0] for h in held}
    for k in TITLE_DEFAULTS:
        if k in ds.coords and ds[k].ndim == 0 and k not in named and k not in plotted:
            held.append(f"{k}={_fmt(ds[k].values.item())}")
    draft = ds.attrs.get("draft_model")
    if draft:
        held.append(f"draft={draft}")
    for key in ("price", "cost_basis"):
        if ds.attrs.get(key):
            held.append(f"{key}={str(ds.attrs[key]).split(' (')[0]}")
    mode = ds.attrs.get("mode")
    line1 = f"{var}" + (f" — {head}" if head else "") + (f" ({mode})" if mode else "")
    return line1 + ("\n" + ", ".join(held) if held else "")


def _wrap(text: str, width_chars: int) -> str:
    import textwrap

    return "\n".join(textwrap.fill(line, max(width_chars, 20)) for line in text.split("\n"))


def plot_sweep(ds: xr.Dataset, path: str | os.PathLike, *, x: str, var: str,
               y: str | None = None, facet: str | None = None,
               size: tuple[float, float] = (8.0, 5.0), dpi: int = 100,
               logx: bool | None = None, logy: bool | None = None, log_color: bool = False,
               mask_unfit: bool = True) -> Path:
    """Draw ``var`` over ``x`` (and ``y``: heatmap), one subplot per ``facet`` value, and
    write it to ``path`` (.png, .svg, .pdf). The file is ``size`` x ``dpi`` pixels.

    Points where ``fits`` is false (the batch does not fit in HBM) are not coloured or joined:
    heatmap cells are hatched grey, line points drawn as grey crosses, under a legend entry
    "does not fit"; the colour scale spans the fitting points only. ``logx`` / ``logy``
    force a log (True) or linear (False) axis (default: log where the swept values are
    geometric); ``log_color`` puts a heatmap's colour scale (or a line plot's values) on a
    log scale."""
    check_plot(ds, path, x=x, var=var, y=y, facet=facet)
    fig = draw_sweep(ds, x=x, var=var, y=y, facet=facet, size=size, dpi=dpi, logx=logx,
                     logy=logy, log_color=log_color, mask_unfit=mask_unfit)
    target = Path(path)
    with atomic_output(target, option="--plot") as tmp:
        fig.savefig(tmp, dpi=dpi, format=target.suffix.lstrip(".").lower())
    return target


def draw_sweep(ds: xr.Dataset, *, x: str, var: str, y: str | None = None,
               facet: str | None = None, size: tuple[float, float] = (8.0, 5.0),
               dpi: int = 100, logx: bool | None = None, logy: bool | None = None,
               log_color: bool = False, mask_unfit: bool = True):
    """The figure :func:`plot_sweep` writes (a matplotlib ``Figure`` on the Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import BoundaryNorm, ListedColormap, LogNorm
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    given, hue = _plot_dims(ds, x=x, var=var, y=y, facet=facet)
    plotted = given + ([hue] if hue else [])
    da = ds[var]
    # a variable that does not depend on a plotted dimension is constant along it
    grid = xr.Dataset(coords={d: ds[d] for d in plotted})
    da = da.squeeze([d for d in da.dims if d not in plotted]).broadcast_like(grid).compute()
    fits = None
    if mask_unfit and "fits" in ds.data_vars and var != "fits":
        f = ds["fits"]
        f = f.squeeze([d for d in f.dims if d not in plotted]).broadcast_like(grid).compute()
        fits = f.transpose(*da.dims).astype(bool)
        if bool(fits.all()):
            fits = None
    labels = da.dtype.kind in "OUS"
    categories: list[str] = []
    if labels:
        categories = sorted({str(v) for v in np.asarray(da.values).ravel()})
        codes = {c: i for i, c in enumerate(categories)}
        da = xr.DataArray(np.vectorize(lambda s: codes[str(s)], otypes=[float])(da.values),
                          dims=da.dims, coords=da.coords)
    elif da.dtype.kind == "b":
        da = da.astype(float)

    facet_values = list(ds[facet].values) if facet else [None]
    n = len(facet_values)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    axs = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    flat = list(axs.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)

    xpos, xscale, xticks = _axis_values(np.asarray(ds[x].values), logx)
    if log_color and labels:
        raise SpecError(f"--log-color: --var {var} holds labels, not numbers")
    finite = np.asarray(da.values, dtype=float)
    if fits is not None:
        finite = finite[np.asarray(fits.values)]
    finite = finite[np.isfinite(finite) & ((finite > 0) if log_color else True)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    mesh = None
    if labels:
        cmap = ListedColormap([f"C{i % 10}" for i in range(len(categories))])
        norm = BoundaryNorm(np.arange(len(categories) + 1) - 0.5, len(categories))
    elif log_color:
        cmap, norm = "viridis", LogNorm(vmin=vmin if vmin > 0 else 1e-12, vmax=max(vmax, vmin))
    else:
        cmap, norm = "viridis", None
    unfit_seen = False

    for ax, fv in zip(flat, facet_values):
        sub = da.sel({facet: fv}) if facet else da
        fsub = None if fits is None else (fits.sel({facet: fv}) if facet else fits)
        if y is not None:
            ypos, yscale, yticks = _axis_values(np.asarray(ds[y].values), logy)
            z = np.asarray(sub.transpose(y, x).values, dtype=float)
            ok = np.ones(z.shape, bool) if fsub is None else np.asarray(
                fsub.transpose(y, x).values, bool)
            if log_color:
                ok &= z > 0
            kw = dict(norm=norm) if norm is not None else dict(vmin=vmin, vmax=vmax)
            xe, ye = _edges(xpos, xscale), _edges(ypos, yscale)
            mesh = ax.pcolormesh(xe, ye, np.ma.masked_array(z, mask=~ok), cmap=cmap,
                                 shading="flat", **kw)
            if fsub is not None and not ok.all():
                unfit_seen = True
                for j, i in zip(*np.nonzero(~np.asarray(fsub.transpose(y, x).values, bool))):
                    ax.add_patch(_unfit_patch(xe[i], ye[j], xe[i + 1] - xe[i], ye[j + 1] - ye[j]))
            ax.set_yscale(yscale)
            _set_ticks(ax.yaxis, ypos, yticks, max_ticks=int(size[1] / nrows * 2.5))
        else:
            lines = list(ds[hue].values) if hue else [None]
            for i, hv in enumerate(lines):
                line = sub.sel({hue: hv}) if hue else sub
                yv = np.asarray(line.transpose(x).values, dtype=float)
                ok = np.ones(yv.shape, bool)
                if fsub is not None:
                    fl = fsub.sel({hue: hv}) if hue else fsub
                    ok = np.asarray(fl.transpose(x).values, bool)
                ax.plot(xpos, np.where(ok, yv, np.nan), marker="o", markersize=3,
                        color=f"C{i % 10}", label=f"{hue} = {_fmt(hv)}" if hue else None)
                if not ok.all():
                    unfit_seen = True
                    ax.plot(xpos[~ok], yv[~ok], linestyle="none", marker="x", markersize=4,
                            color="0.55")
            if log_color:
                ax.set_yscale("log")
            if hue and ax is flat[0]:
                ax.legend(fontsize="small")
            ax.grid(True, alpha=0.3)
        ax.set_xscale(xscale)
        _set_ticks(ax.xaxis, xpos, xticks, max_ticks=int(size[0] / ncols * 1.5))
        if facet:
            ax.set_title(f"{facet} = {_fmt(fv)}", fontsize="medium")
    ylabel = _label(ds, y) if y is not None else _label(ds, var)
    if n == 1:
        flat[0].set_xlabel(_label(ds, x))
        flat[0].set_ylabel(ylabel)
    else:
        fig.supxlabel(_label(ds, x), fontsize="medium")
        fig.supylabel(ylabel, fontsize="medium")
    if mesh is not None:
        cb = fig.colorbar(mesh, ax=flat[:n], shrink=0.9)
        if labels:
            cb.set_ticks(np.arange(len(categories)), labels=categories)
        else:
            cb.set_label(_label(ds, var))
    fig.suptitle(_wrap(_title(ds, var, plotted), int(size[0] * 72 / 6.5)), fontsize="medium")
    if unfit_seen:
        marker = (_unfit_patch(0, 0, 1, 1) if y is not None else
                  Line2D([], [], linestyle="none", marker="x", color="0.55"))
        marker.set_label(UNFIT_LABEL + " (HBM)")
        fig.legend(handles=[marker], loc="outside lower right", fontsize="small")
    return fig


def _unfit_patch(x0: float, y0: float, w: float, h: float):
    """A hatched grey cell: the mark of a point that does not fit."""
    from matplotlib.patches import Rectangle

    return Rectangle((x0, y0), w, h, facecolor="0.88", edgecolor="0.45", hatch="///",
                     linewidth=0.0)
