"""InferenceX's two charts of a serving benchmark, side by side, written to a file.

Left: total token throughput per GPU against interactivity (tok/s/user = 1000 / median TPOT),
one line per label, each marker annotated with its concurrency. Right: median TTFT against
concurrency on a log2 axis. Measured points, when given, are separate black markers on both.
A column pair ``<name>_low`` / ``<name>_high`` beside a plotted ``<name>`` is drawn as a shaded
band of that label's colour.

Drawing uses matplotlib's object API with the Agg canvas (``Figure`` + ``FigureCanvasAgg``):
no pyplot state, no backend change for the caller (a notebook kernel keeps its own). The file
is written through :func:`~inference_factory.output.files.atomic_output`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SpecError, require
from .files import atomic_output
from .sweep_plot import PLOT_FORMATS

#: y of the left chart, then the fallback used when no frame knows its GPU count.
THROUGHPUT = ("total_token_throughput_per_gpu", "total_token_throughput")
#: Most labelled lines one chart draws.
MAX_LABELS = 12


def _points(frame: Any, label: str):
    """A DataFrame with ``max_concurrency`` and ``interactivity`` columns, sorted by
    concurrency (``ds.to_dataframe()`` carries the concurrency as its index)."""
    import pandas as pd

    df = frame.to_dataframe() if hasattr(frame, "to_dataframe") and not isinstance(
        frame, pd.DataFrame) else pd.DataFrame(frame)
    if "max_concurrency" not in df.columns:
        if "concurrency" in (df.index.names or []):
            df = df.reset_index()
        if "concurrency" not in df.columns:
            raise SpecError(f"--plot: {label}: no max_concurrency (or concurrency) column")
        df = df.assign(max_concurrency=df["concurrency"])
    if "interactivity" not in df.columns and "median_tpot_ms" in df.columns:
        tpot = df["median_tpot_ms"].astype(float)
        df = df.assign(interactivity=1000.0 / tpot.where(tpot > 0))
    return df.sort_values("max_concurrency", kind="stable").reset_index(drop=True)


def _need(df, cols: Sequence[str], label: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise SpecError(f"--plot: {label} lacks column(s) {missing}; a benchmark point has "
                        "max_concurrency, interactivity (or median_tpot_ms), median_ttft_ms "
                        "and total_token_throughput[_per_gpu]")


def _band(ax, df, x: str, y: str, scale: float, color: str) -> None:
    lo, hi = f"{y}_low", f"{y}_high"
    if lo in df.columns and hi in df.columns:
        d = df.sort_values(x, kind="stable")
        ax.fill_between(d[x].to_numpy(float), d[lo].to_numpy(float) * scale,
                        d[hi].to_numpy(float) * scale, color=color, alpha=0.2, linewidth=0)


def draw_bench(frames: Sequence[tuple[str, Any]], measured: Any = None, *,
               size: tuple[float, float] = (12.0, 5.0), dpi: int = 100,
               title: str | None = None):
    """The figure :func:`plot_bench` writes: a matplotlib ``Figure`` (Agg canvas) with two
    axes, ``fig.axes[0]`` throughput/GPU vs interactivity, ``fig.axes[1]`` median TTFT vs
    concurrency; each label's line carries the label, measured markers ``"measured"``.
    ``title``: the figure's title (default: the first frame's model, hardware, ISL/OSL
    columns where it has them)."""
    require("matplotlib", "--plot", extra="plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not frames:
        raise SpecError("--plot: nothing to draw (no predicted points)")
    if len(frames) > MAX_LABELS:
        raise SpecError(f"--plot: {len(frames)} labelled series; at most {MAX_LABELS}")
    series = [(str(label), _points(df, str(label))) for label, df in frames]
    meas = None if measured is None else _points(measured, "measured")
    every = [d for _, d in series] + ([meas] if meas is not None else [])
    thr = next((t for t in THROUGHPUT if all(t in d.columns and d[t].notna().any()
                                             for d in every)), THROUGHPUT[-1])
    for label, d in series + ([("measured", meas)] if meas is not None else []):
        _need(d, ["interactivity", "median_ttft_ms", thr], label)
    ttft_max = max(float(np.nanmax(d["median_ttft_ms"].to_numpy(float), initial=0.0))
                   for d in every)
    ttft_scale, ttft_unit = (1e-3, "s") if ttft_max >= 1000.0 else (1.0, "ms")

    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    for i, (label, d) in enumerate(series):
        color = f"C{i % 10}"
        x, y = d["interactivity"].to_numpy(float), d[thr].to_numpy(float)
        conc = d["max_concurrency"].to_numpy(float)
        left.plot(x, y, marker="o", markersize=4, color=color, label=label)
        _band(left, d, "interactivity", thr, 1.0, color)
        for xi, yi, ci in zip(x, y, conc):
            if np.isfinite(xi) and np.isfinite(yi):
                left.annotate(f"{ci:g}", (xi, yi), xytext=(3, 3), textcoords="offset points",
                              fontsize="x-small", color=color)
        right.plot(conc, d["median_ttft_ms"].to_numpy(float) * ttft_scale, marker="o",
                   markersize=4, color=color, label=label)
        _band(right, d, "max_concurrency", "median_ttft_ms", ttft_scale, color)
    if meas is not None:
        kw = {"linestyle": "none", "marker": "x", "markersize": 6, "color": "black",
              "label": "measured"}
        left.plot(meas["interactivity"].to_numpy(float), meas[thr].to_numpy(float), **kw)
        right.plot(meas["max_concurrency"].to_numpy(float),
                   meas["median_ttft_ms"].to_numpy(float) * ttft_scale, **kw)
    per_gpu = thr.endswith("_per_gpu")
    left.set_xlabel("interactivity [tok/s/user] (1000 / median TPOT)")
    left.set_ylabel("total token throughput " + ("per GPU [tok/s/GPU]" if per_gpu
                                                  else "[tok/s] (GPU count unknown)"))
    right.set_xscale("log", base=2)
    ticks = sorted({float(c) for d in every for c in d["max_concurrency"] if np.isfinite(c)
                    and c > 0})
    if ticks:                          # plain numbers at the concurrencies run, not 2^k
        from matplotlib.ticker import NullLocator

        right.set_xticks(ticks, [f"{c:g}" for c in ticks])
        right.xaxis.set_minor_locator(NullLocator())
    right.set_xlabel("concurrency [requests in flight]")
    right.set_ylabel(f"median TTFT [{ttft_unit}]")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    left.legend(fontsize="small")
    if title:
        fig.suptitle(title, fontsize="medium")
        return fig
    first = series[0][1]
    title = [str(first[c].iloc[0]) for c in ("model", "hardware") if c in first.columns
             and first[c].notna().any()]
    if "isl" in first.columns and "osl" in first.columns and first["isl"].notna().any():
        title.append(f"ISL {first['isl'].iloc[0]:g} / OSL {first['osl'].iloc[0]:g}")
    if title:
        fig.suptitle(" · ".join(title), fontsize="medium")
    return fig


def plot_bench(frames: Sequence[tuple[str, Any]], path: str | os.PathLike,
               measured: Any = None, *, size: tuple[float, float] = (12.0, 5.0),
               dpi: int = 100, title: str | None = None) -> Path:
    """Draw :func:`draw_bench` and write it to ``path`` (.png, .svg, .pdf) atomically.
    ``frames``: ``[(label, points), ...]``, each a DataFrame (or ``bench``'s Dataset, or a
    list of point dicts) with vLLM's column names; ``measured``: the same, e.g. from
    ``read_bench_results``; ``title`` the figure's (:func:`draw_bench`). Returns the path
    written."""
    target = Path(path)
    if target.suffix.lower() not in PLOT_FORMATS:
        raise SpecError(f"--plot {path}: the name must end in one of {list(PLOT_FORMATS)}")
    fig = draw_bench(frames, measured, size=size, dpi=dpi, title=title)
    with atomic_output(target, option="--plot") as tmp:
        fig.savefig(tmp, dpi=dpi, format=target.suffix.lstrip(".").lower())
    return target
