"""Sweep plots (inference_factory.output.sweep_plot) never rank an infeasible point: heatmaps
mask and label the cells that do not fit, line plots break there (issue 10)."""

from __future__ import annotations

import numpy as np
import pytest

DS = "DeepSeek-V3"


@pytest.fixture(scope="module")
def h800_grid():
    pytest.importorskip("matplotlib")
    import inference_factory as inf

    # DeepSeek's decode shape on H800: batch 256 does not fit (max batch 192 with FP8 KV)
    return inf.evaluate(DS, "H800-SXM", dp=32, ep=32, redundant_experts=32, kv_precision="fp8",
                        overlap="two-batch", kv_len=4096, batch_size=[1, 16, 128, 256],
                        draft_depth=[0, 1])


def test_heatmap_masks_cells_that_do_not_fit_and_labels_them(h800_grid):
    from matplotlib.patches import Rectangle

    from inference_factory.output.sweep_plot import UNFIT_LABEL, draw_sweep

    ds = h800_grid
    fits = ds["fits"].transpose("draft_depth", "batch_size").values
    assert not fits.all() and fits.any()            # the grid has both kinds of point
    fig = draw_sweep(ds, x="batch_size", y="draft_depth", var="decode_tokens_per_s_per_gpu")
    ax = fig.axes[0]
    mesh = ax.collections[0]
    drawn = mesh.get_array()
    assert np.array_equal(np.ma.getmaskarray(drawn).reshape(fits.shape), ~fits)
    # the colour scale spans the fitting points only: the brightest colour is feasible
    value = ds["decode_tokens_per_s_per_gpu"].transpose("draft_depth", "batch_size").values
    assert mesh.norm.vmax == pytest.approx(value[fits].max())
    assert mesh.norm.vmax < value.max()
    hatched = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert len(hatched) == int((~fits).sum())
    labels = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert any(UNFIT_LABEL in t for t in labels)


def test_binding_resource_heatmap_masks_too(h800_grid):
    from inference_factory.output.sweep_plot import draw_sweep

    fits = h800_grid["fits"].transpose("draft_depth", "batch_size").values
    fig = draw_sweep(h800_grid, x="batch_size", y="draft_depth", var="decode_binding_resource")
    drawn = fig.axes[0].collections[0].get_array()
    assert np.array_equal(np.ma.getmaskarray(drawn).reshape(fits.shape), ~fits)


def test_line_plot_breaks_at_unfit_points_and_log_options(h800_grid):
    from inference_factory.output.sweep_plot import draw_sweep

    ds = h800_grid.sel(draft_depth=0.0)
    fig = draw_sweep(ds, x="batch_size", var="decode_tokens_per_s_per_gpu", logx=True,
                     log_color=True)
    ax = fig.axes[0]
    line = ax.lines[0]
    y = np.asarray(line.get_ydata(), float)
    fits = ds["fits"].values
    assert np.all(np.isnan(y[~fits])) and np.all(np.isfinite(y[fits]))
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    fig = draw_sweep(ds, x="batch_size", var="decode_tokens_per_s_per_gpu", logx=False)
    assert fig.axes[0].get_xscale() == "linear"

