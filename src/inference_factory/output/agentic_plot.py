"""The session replay's figure (``bench --trace --plot``): left, total tokens per second per
GPU against E2E normalized interactivity (InferenceX's AgentX x-axis), one line per
label (deployment, tier scenario), markers annotated with the concurrency; right, the prefix
hit rate against concurrency (log2). Object API with the Agg canvas, written atomically."""

from __future__ import annotations

from .files import atomic_output


def plot_agentic(series, path, title: str = "") -> None:
    """``series``: (label, list of point dicts) pairs, each point with ``concurrency``,
    ``total_tokens_per_s_per_gpu``, ``e2e_normalized_interactivity_p90``, ``prefix_hit_rate``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.8))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    for label, pts in series:
        pts = sorted(pts, key=lambda p: p["concurrency"])
        x = [p["e2e_normalized_interactivity_p90"] for p in pts]
        y = [p["total_tokens_per_s_per_gpu"] for p in pts]
        line, = left.plot(x, y, marker="o", label=label)
        for p, xi, yi in zip(pts, x, y):
            left.annotate(str(p["concurrency"]), (xi, yi), textcoords="offset points",
                          xytext=(3, 3), fontsize=7, color=line.get_color())
        right.plot([p["concurrency"] for p in pts], [100 * p["prefix_hit_rate"] for p in pts],
                   marker="o", color=line.get_color(), label=label)
    left.set_xlabel("E2E normalized interactivity, P90 (output tok/s/user)")
    left.set_ylabel("total tokens/s per GPU (input + output)")
    left.grid(alpha=0.3)
    left.legend(fontsize=7)
    right.set_xscale("log", base=2)
    right.set_xlabel("concurrency (session lanes)")
    right.set_ylabel("prefix hit rate (% of input tokens)")
    right.set_ylim(0, 100)
    right.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=110, format=str(path).rsplit(".", 1)[-1])
