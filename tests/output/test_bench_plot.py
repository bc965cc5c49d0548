"""InferenceX's two benchmark charts (inference_factory.output.bench_plot): throughput per GPU
vs interactivity (one line per label, markers annotated by concurrency) and median TTFT vs
concurrency on a log2 axis; measured points as separate markers; optional bands."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from inference_factory.errors import SpecError

pytest.importorskip("matplotlib")

CONC = [4, 8, 16, 32]


def points(scale: float, *, band: bool = False) -> pd.DataFrame:
    tpot = np.array([9.0, 11.0, 15.0, 22.0]) / scale
    df = pd.DataFrame({"max_concurrency": CONC, "median_tpot_ms": tpot,
                       "interactivity": 1000.0 / tpot,
                       "total_token_throughput_per_gpu": np.array([500, 900, 1450, 2300]) * scale,
                       "median_ttft_ms": [700.0, 900.0, 1300.0, 2100.0],
                       "model": "DeepSeek-R1-0528", "hardware": "B200", "isl": 8192,
                       "osl": 1024})
    if band:
        for c in ("total_token_throughput_per_gpu", "median_ttft_ms"):
            df[f"{c}_low"], df[f"{c}_high"] = df[c] * 0.9, df[c] * 1.1
    return df


def test_two_charts_one_line_per_label_measured_markers_and_bands():
    from matplotlib.collections import PolyCollection

    from inference_factory.output.bench_plot import draw_bench

    measured = points(0.9).drop(columns="interactivity")       # interactivity from TPOT
    fig = draw_bench([("SGLang 0.5.5", points(1.0, band=True)), ("SGLang 0.5.6", points(1.2))],
                     measured)
    left, right = fig.axes
    assert len(fig.axes) == 2
    assert [ln.get_label() for ln in left.get_lines()] == ["SGLang 0.5.5", "SGLang 0.5.6",
                                                           "measured"]
    line = left.get_lines()[0]
    assert np.allclose(line.get_xdata(), 1000.0 / np.array([9.0, 11.0, 15.0, 22.0]))
    assert np.allclose(line.get_ydata(), [500, 900, 1450, 2300])
    assert np.allclose(left.get_lines()[2].get_xdata(), 0.9 * 1000 / np.array([9, 11, 15, 22]))
    # every predicted marker is annotated with its concurrency
    assert sorted(t.get_text() for t in left.texts) == sorted([str(c) for c in CONC] * 2)
    assert "per GPU" in left.get_ylabel() and "interactivity" in left.get_xlabel()
    # right: TTFT (max 2.1 s -> seconds) vs concurrency on log2
    assert right.get_xscale() == "log" and right.xaxis.get_transform().base == 2
    assert np.allclose(right.get_lines()[0].get_ydata(), [0.7, 0.9, 1.3, 2.1])
    assert right.get_ylabel() == "median TTFT [s]"
    # the first label's bands: one shaded region per chart
    assert [len([c for c in ax.collections if isinstance(c, PolyCollection)])
            for ax in (left, right)] == [1, 1]


def test_plot_bench_writes_a_png_of_the_asked_size(tmp_path):
    from PIL import Image

    from inference_factory.output.bench_plot import plot_bench

    # bench's own output: a Dataset over concurrency, drawn as its to_dataframe()
    ds = points(1.0).set_index("max_concurrency").to_xarray().rename(
        max_concurrency="concurrency")
    path = plot_bench([("predicted", ds)], tmp_path / "bench.png", measured=points(0.9),
                      size=(10, 4), dpi=50)
    assert path == tmp_path / "bench.png"
    with Image.open(path) as im:
        assert im.size == (500, 200)
    assert [p.name for p in tmp_path.iterdir()] == ["bench.png"]     # no temporary left


def test_without_gpu_counts_the_left_chart_shows_total_throughput():
    from inference_factory.output.bench_plot import draw_bench

    df = points(1.0).drop(columns="total_token_throughput_per_gpu")
    df["total_token_throughput"] = [2000.0, 3600.0, 5800.0, 9200.0]
    left = draw_bench([("a", df)]).axes[0]
    assert np.allclose(left.get_lines()[0].get_ydata(), df["total_token_throughput"])
    assert "GPU count unknown" in left.get_ylabel()
    assert draw_bench([("a", points(1.0))]).axes[1].get_ylabel() == "median TTFT [s]"


def test_bad_requests_are_one_line_spec_errors(tmp_path):
    from inference_factory.output.bench_plot import draw_bench, plot_bench

    with pytest.raises(SpecError, match="must end in one of"):
        plot_bench([("a", points(1.0))], tmp_path / "bench.txt")
    with pytest.raises(SpecError, match="nothing to draw"):
        draw_bench([])
    with pytest.raises(SpecError, match=r"lacks column\(s\) \['median_ttft_ms'\]"):
        draw_bench([("a", points(1.0).drop(columns="median_ttft_ms"))])
    with pytest.raises(SpecError, match="folder"):
        plot_bench([("a", points(1.0))], tmp_path / "missing" / "bench.png")
    assert list(tmp_path.iterdir()) == []
