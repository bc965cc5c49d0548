"""A shareable Markdown report of a ``compare`` run: the side-by-side table, the attribution,
when the levers pay, and the lever waterfall and speculation curve as PNGs beside it.

Plots need matplotlib (``pip install "inference-factory[plots]"``); without it the report is
written with a one-line note where the figures would be. Figures are
:class:`matplotlib.figure.Figure` objects made without pyplot: no global state, no backend
switched (a notebook's inline backend keeps drawing), nothing to close.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..output.files import atomic_output, write_text_atomic
from ..errors import SpecError
from .compare import HEADLINE, _fmt, attribution_table, lever_effect_lines
from .levers import lever_waterfall

WATERFALL_METRIC = "usd_per_mtok_output"


def _figure_class():
    """:class:`matplotlib.figure.Figure`, or None without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


def _new_figure(option: str, **kw):
    """A Figure (no pyplot: its canvas renders PNG through Agg when saved)."""
    figure = _figure_class()
    if figure is None:
        raise SpecError(f"{option}: plotting needs matplotlib: pip install \"inference-factory[plots]\"")
    return figure(**kw)


def figure_png(fig, dpi: int = 110) -> bytes:
    """The PNG bytes of a Figure (for ``IPython.display.Image`` in a notebook, or a file)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    return buf.getvalue()


def draw_lever_waterfall(steps, *, title: str = "", option: str = "--report"):
    """Figure of :func:`inference_factory.factory.levers.lever_waterfall` steps (green: the
    lever helps, red: it hurts; log scale when the steps are factors)."""
    log = bool(steps.attrs.get("log"))
    metric = steps.attrs.get("metric", "")
    lower_better = metric in ("usd_per_mtok_output", "gpu_seconds")
    fig = _new_figure(option, figsize=(10, 4.5), layout="constrained")
    ax = fig.subplots()
    colors = {"start": "tab:grey", "end": "tab:blue", "interactions": "tab:purple"}
    for i, r in steps.iterrows():
        if r.kind in ("start", "end"):
            lo, hi = (1e-12 if log else 0.0), r.after
        else:
            lo, hi = sorted((r.before, r.after))
        better = (r.after < r.before) if lower_better else (r.after > r.before)
        ax.bar(i, hi - lo, bottom=lo, color=colors.get(r.kind, "tab:green" if better else "tab:red"))
        if r.kind in ("lever", "interactions"):
            ax.text(i, hi, f"x{r.change:.2g}" if log else f"{r.change:+.3g}", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(range(len(steps)), steps.step, rotation=30, ha="right")
    if log:
        ax.set_yscale("log")
        vals = steps[["before", "after"]].to_numpy().ravel()
        vals = vals[vals == vals]
        ax.set_ylim(vals.min() / 2, vals.max() * 2)
    ax.set_ylabel(metric)
    ax.set_title(title or f"lever waterfall ({metric}, each lever measured at the "
                          f"{steps.attrs.get('basis')})")
    return fig


def draw_speculation_curve(result: dict, *, option: str = "--report"):
    """Figure of decode tokens/s per GPU against the TPOT target, with the best draft depth
    and with none (a ``compare`` result's ``lever_effects.speculative.tpot_curve``)."""
    curve = result["lever_effects"]["speculative"]["tpot_curve"]
    x = [r["tpot_target_s"] * 1e3 for r in curve]
    fig = _new_figure(option, figsize=(6.5, 4), layout="constrained")
    ax = fig.subplots()
    for key, label in (("tokens_per_s_per_gpu_no_draft", "no draft"),
                       ("tokens_per_s_per_gpu_best_depth", "best draft depth (MTP)")):
        y = [r[key] if r[key] is not None else float("nan") for r in curve]
        ax.plot(x, y, marker="o", label=label)
    ax.set_xlabel("TPOT target (ms)")
    ax.set_ylabel("decode tokens/s per GPU")
    ax.set_title(f"{result['model']}: when speculation pays")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def _save(fig, path: str | os.PathLike, option: str) -> Path:
    target = Path(path)
    with atomic_output(target, option=option) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    return target


def plot_lever_waterfall(steps, path: str | os.PathLike, *, title: str = "", option: str = "--report"):
    """Write :func:`draw_lever_waterfall` as a PNG. Returns the path."""
    return _save(draw_lever_waterfall(steps, title=title, option=option), path, option)


def plot_speculation_curve(result: dict, path: str | os.PathLike, *, option: str = "--report"):
    """Write :func:`draw_speculation_curve` as a PNG. Returns the path."""
    return _save(draw_speculation_curve(result, option=option), path, option)


def write_report(result: dict, path: str | os.PathLike) -> list[Path]:
    """Write the Markdown report to ``path`` and its figures beside it
    (``<stem>_waterfall.png``, ``<stem>_speculation.png``). Returns every path written."""
    target = Path(path)
    if target.suffix.lower() != ".md":
        raise SpecError(f"--report {path}: must end in .md")
    b, f, t = result["baseline"], result["factory"], result["trace"]
    md = [f"# {result['model']}: generic baseline vs factory", "",
          f"Config `{result['config']}`, price `{result['price']}`. Trace: {t['n_requests']:,} "
          f"requests, {t['input_tokens']:,} input / {t['output_tokens']:,} output tokens; fleet "
          f"and money at {f['arrival_rate_per_s']:,.1f} requests/s ({f['arrival_rate_source']}).",
          "", "| metric | baseline | factory |", "|---|---:|---:|"]
    md += [f"| {label} | {_fmt(b.get(k), fmt)} | {_fmt(f.get(k), fmt)} |" for k, label, fmt in HEADLINE]
    written: list[Path] = []
    plt_ok = _figure_class() is not None
    if "attribution" in result:
        md += ["", "## Attribution", "", "```", *attribution_table(result), "```"]
        steps = lever_waterfall(result, WATERFALL_METRIC, basis="path", log=True)
        at_b = lever_waterfall(result, WATERFALL_METRIC, basis="baseline", log=True)
        at_f = lever_waterfall(result, WATERFALL_METRIC, basis="factory", log=True)
        md += ["", "## Lever waterfall ($/M output tokens)", "",
               "The chart adds the factory's choices to the generic baseline one at a time "
               "(cumulative, in the order of the first table; each factor is the lever's value "
               "given the earlier ones). The second table measures each lever alone: added to "
               "(or, for continuous batching, removed from) the generic baseline, and removed "
               "from the factory. Alone, levers that need others (expert balancing needs EP, "
               "overlap needs a collective to hide) show little or nothing; `interactions` "
               "closes the gap to the factory.", "",
               "| cumulative step | $/M output | factor |", "|---|---:|---:|"]
        md += [f"| {r.step} | {_fmt(r.after, '{:.3f}')} | {_fmt(r.change, 'x{:.3g}')} |"
               for r in steps.itertuples() if r.kind != "end"]
        md += ["", "| lever alone | factor at the baseline | factor at the factory |",
               "|---|---:|---:|"]
        md += [f"| {r.step} | {_fmt(r.change, 'x{:.3g}')} | {_fmt(q.change, 'x{:.3g}')} |"
               for r, q in zip(at_b.itertuples(), at_f.itertuples())
               if r.kind in ("lever", "interactions")]
        md += [f"| total ({steps.step.iloc[0]} -> factory) | "
               f"x{steps.after.iloc[-1] / steps.after.iloc[0]:.3g} | |"]
        if plt_ok:
            png = target.with_name(target.stem + "_waterfall.png")
            written.append(plot_lever_waterfall(steps, png))
            md += ["", f"![lever waterfall]({png.name})"]
        else:
            md += ["", "(figure skipped: matplotlib is not installed)"]
    effects = lever_effect_lines(result)
    if effects:
        md += ["", "## When the levers pay", "", "```", *[x for x in effects if x], "```"]
        if plt_ok and "speculative" in result.get("lever_effects", {}):
            png = target.with_name(target.stem + "_speculation.png")
            written.append(plot_speculation_curve(result, png))
            md += ["", f"![speculation vs TPOT]({png.name})"]
    if result.get("no_change"):
        md += ["", "## Levers that change nothing here", ""] + [f"- {x}" for x in result["no_change"]]
    write_text_atomic(target, "\n".join(md) + "\n", option="--report")
    return [target, *written]


__all__ = ["write_report", "draw_lever_waterfall", "draw_speculation_curve",
           "plot_lever_waterfall", "plot_speculation_curve", "figure_png"]
