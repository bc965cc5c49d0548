"""The figure of ``price-by-position``: cost per million tokens over token position, prefill
and decode, one line per model (and device), and below each the cost stacked by operation
group, one bar per model side by side at each position.

Input: the long table of :func:`inference_factory.analysis.price_by_position.price_table`
(columns ``phase``, ``position``, ``hardware``, ``model``, ``usd_per_mtok`` and
``usd_<group>``). Drawing uses matplotlib's object API with the Agg canvas (no pyplot state);
the file is written through :func:`~inference_factory.output.files.atomic_output`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SpecError
from .files import atomic_output
from .sweep_plot import PLOT_FORMATS

#: Hatches that tell the models apart in the stacked bars (colours are the groups').
_HATCHES = ("", "//", "..", "xx", "\\\\", "oo")


def _k(x: float) -> str:
    return f"{x / 1024:g}K" if x >= 1024 else f"{x:g}"


def draw_price_by_position(df: Any, *, title: str = ""):
    """A 2 x 2 ``Figure``: top, $/Mtok against position (log-log) for prefill and decode;
    bottom, each model's $/Mtok stacked by group at each position."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups = [c[4:] for c in df.columns if c.startswith("usd_") and c != "usd_per_mtok"]
    fig = Figure(figsize=(13, 8.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    keys = list(dict.fromkeys(zip(df["hardware"], df["model"])))
    multi_hw = len({h for h, _ in keys}) > 1
    colours = {g: f"C{i % 10}" for i, g in enumerate(groups)}
    for j, phase in enumerate(("prefill", "decode")):
        part = df[df["phase"] == phase]
        top, bottom = axes[0][j], axes[1][j]
        for k, (h, m) in enumerate(keys):
            rows = part[(part["hardware"] == h) & (part["model"] == m)].sort_values("position")
            label = f"{m} on {h}" if multi_hw else m
            top.plot(rows["position"], rows["usd_per_mtok"], marker="o", label=label)
        top.set_xscale("log", base=2)
        ticks = sorted(part["position"].unique())
        top.set_xticks(ticks, [_k(x) for x in ticks])
        top.minorticks_off()
        top.set_yscale("log")
        top.set_ylabel(f"{phase}: $ per million tokens")
        top.set_title(("prefill (marginal: a chunk after L cached tokens)" if phase == "prefill"
                       else "decode (one token at context L)"))
        top.grid(True, which="both", alpha=0.3)
        top.legend(fontsize=8)
        positions = sorted(part["position"].unique())
        width = 0.8 / max(len(keys), 1)
        labelled: set[str] = set()
        for k, (h, m) in enumerate(keys):
            rows = (part[(part["hardware"] == h) & (part["model"] == m)]
                    .set_index("position").reindex(positions))
            x = np.arange(len(positions)) + (k - (len(keys) - 1) / 2) * width
            base = np.zeros(len(positions))
            for g in groups:
                v = np.nan_to_num(rows[f"usd_{g}"].to_numpy(dtype=float))
                if not v.any():
                    continue
                bottom.bar(x, v, width, bottom=base, color=colours[g],
                           hatch=_HATCHES[k % len(_HATCHES)], edgecolor="white", linewidth=0.3,
                           label=None if g in labelled else g)
                labelled.add(g)
                base += v
        bottom.set_xticks(np.arange(len(positions)),
                          [_k(x) for x in positions])
        bottom.set_xlabel("token position L (hatch: " + ", ".join(
            f"{m}{' on ' + h if multi_hw else ''} {_HATCHES[k % len(_HATCHES)] or 'plain'}"
            for k, (h, m) in enumerate(keys)) + ")", fontsize=8)
        bottom.set_ylabel(f"{phase}: $ per million tokens by group")
        bottom.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[1][1].get_legend_handles_labels()
    h0, l0 = axes[1][0].get_legend_handles_labels()
    seen = dict(zip(labels + l0, handles + h0))
    order = {g: i for i, g in enumerate(groups)}
    names = sorted(seen, key=lambda g: order.get(g, len(order)))
    axes[1][0].legend([seen[n] for n in names], names, fontsize=7, ncol=2)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_price_by_position(df: Any, path: str | os.PathLike, *, title: str = "",
                           dpi: int = 110) -> Path:
    """Write :func:`draw_price_by_position` to ``path`` (.png, .svg or .pdf)."""
    target = Path(path)
    if target.suffix.lower() not in PLOT_FORMATS:
        raise SpecError(f"--plot {path}: the name must end in one of {list(PLOT_FORMATS)}")
    fig = draw_price_by_position(df, title=title)
    with atomic_output(target, option="--plot") as tmp:
        fig.savefig(tmp, dpi=dpi, format=target.suffix.lstrip(".").lower())
    return target
