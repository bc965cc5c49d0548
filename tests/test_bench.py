"""The analyst's bench (issue 10): one option grammar on every command, the former CLI
defects, tables through one renderer.

Each former defect has a regression test: ``best-draft`` with ``-a batch_size`` and
``--batch-size`` (was a TypeError traceback), ``max-batch``'s header (was ``? on ?``),
``cheapest`` errors naming CLI options (were Python function names and keyword dicts).
"""

from __future__ import annotations

import json

import numpy as np

import pytest
from click.testing import CliRunner

from inference_factory.specs import grammar as g
from inference_factory.cli import cli
from inference_factory.errors import SpecError
from inference_factory.output.tables import format_number, render

from cli_helpers import fails, ok

DS = "DeepSeek-V3"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


# --------------------------------------------------------------------------------------------
# the grammar
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("batch_size=1,2,4,...,32", ("batch_size", (1, 2, 4, 8, 16, 32))),
    ("draft_depth=0..3", ("draft_depth", (0, 1, 2, 3))),
    ("kv_len=geom:1024:4096:3", ("kv_len", (1024.0, 2048.0, 4096.0))),
    ("acceptance_rate=0.6:0.8:3", ("acceptance_rate", (0.6, 0.7, 0.8))),
    ("kv_precision=bf16,fp8", ("kv_precision", ("bf16", "fp8"))),
    ("tp=8", ("tp", (8,))),
])
def test_one_grammar_parses_every_form(text, expected):
    name, values = g.parse_assignment(text, "--axis")
    assert (name, values) == expected
    # whole-number axes stay integers; numeric axes are floats
    assert all(type(v) is type(e) for v, e in zip(values, expected[1]))


@pytest.mark.parametrize("text, message", [
    ("batch_size=2.5", "must be a whole number"),
    ("tp=-8", "tp = -8 is out of range"),
    ("kv_precision=fp5", "kv_precision = 'fp5' is not one of"),
    ("batch_size=1,2,2", "lists 2 twice"),
    ("acceptance_rate=1.5", "out of range"),
    ("cache_hit_rate=1", "out of range"),
    ("overlap=three-batch", "not one of"),
    ("pp=2", "unknown axis 'pp'"),
    ("batch_size", "expected NAME=VALUES"),
])
def test_grammar_refuses_bad_values_in_one_line(text, message):
    with pytest.raises(SpecError, match=message):
        g.parse_assignment(text, "--axis")


@pytest.mark.parametrize("text, seconds", [("50ms", 0.05), ("2s", 2.0), ("250us", 250e-6),
                                           ("1.5 s", 1.5), ("1min", 60.0)])
def test_durations_take_units(text, seconds):
    assert g.parse_duration(text, "--tpot") == pytest.approx(seconds)


@pytest.mark.parametrize("text, message", [("50", "give a unit"), ("50h", "unknown unit"),
                                           ("-5ms", "positive"), ("fast", "expected a duration")])
def test_bad_durations_are_refused(text, message):
    with pytest.raises(SpecError, match=message):
        g.parse_duration(text, "--tpot")


@pytest.mark.parametrize("args, message", [
    # the same axis twice, through -a twice or through -a and its own option
    (["best-draft", "-a", "batch_size=8", "-a", "batch_size=16"], "batch_size is given twice"),
    (["best-draft", "-a", "batch_size=8", "--batch-size", "16"], "batch_size is given twice"),
    (["best-draft", "--batch-size", "1.5,2"], "must be a whole number"),
    (["max-batch", "-a", "batch_size=8", "--tpot", "50ms"], "max-batch searches it"),
    (["max-batch", "--tpot", "50", "-a", "dp=8", "-a", "ep=8"], "give a unit"),
    (["max-batch", "--tpot", "50ms", "--tpot-ms", "50"], "give --tpot once"),
    # invalid shapes are usage errors (issue 12 item 3), not 'invalid' rows
    (["cheapest", "-p", "tp=-8"], "tp = -8 is out of range"),
    (["cheapest", "-p", "tp=3"], "tp = 3 must divide the 128 attention heads"),
    (["cheapest", "-a", "kv_precision=fp5"], "kv_precision = 'fp5' is not one of"),
    (["cheapest", "-p", "pp=2"], "unknown axis 'pp'"),
    (["cheapest", "-p", "dp=8,ep=3"], "ep = 3 must divide"),
    (["cheapest", "-p", "tp=8", "-a", "tp=4"], "tp is given twice"),
    (["cheapest", "-a", "kv_len=1024,2048"], "give kv_len one value"),
    (["tornado", "-r", "acceptance_rate=0.6:0.9"], "write the range as acceptance_rate=LOW,HIGH"),
    (["montecarlo", "-r", "acceptance_rate=0.6:0.7:0.9"], "tri:LOW:MODE:HIGH"),
])
def test_cli_refuses_clashes_and_invalid_shapes_in_one_line(args, message):
    line = fails(run(*args))
    assert message in line
    # errors name CLI options and values, never Python functions or keyword dicts
    assert "cheapest_meeting_slo" not in line and "max_batch_meeting_slo" not in line
    assert "{'" not in line


def test_former_defect_best_draft_batch_from_axis_is_used():
    out = json.loads(ok(run("best-draft", "-a", "dp=32", "-a", "ep=32", "-a", "batch_size=8,64",
                            "--json")))
    assert [r["batch_size"] for r in out["rows"]] == [8, 64]


def test_former_defect_max_batch_header_names_model_and_hardware():
    text = ok(run("max-batch", "-H", "h800", "-a", "dp=32", "-a", "ep=32", "--tpot", "50ms"))
    assert text.splitlines()[0].startswith("DeepSeek-V3 on H800-SXM; SLO: tpot_s = 0.05")
    assert "?" not in text.splitlines()[0]


def test_tpot_with_units_equals_old_milliseconds_option():
    a = json.loads(ok(run("max-batch", "-a", "dp=32", "-a", "ep=32", "--tpot", "0.03s",
                          "--json")))
    b = json.loads(ok(run("max-batch", "-a", "dp=32", "-a", "ep=32", "--tpot-ms", "30",
                          "--json")))
    assert a["rows"] == b["rows"]


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("x, text", [(17320.4, "17,320"), (1927.0, "1,927"), (52.314, "52.31"),
                                     (0.20341, "0.2034"), (3, "3"), (float("nan"), "-"),
                                     (1.5e-5, "0.000015"), (True, "yes")])
def test_numbers_have_one_format(x, text):
    assert format_number(x) == text


def test_table_formats_agree_and_show_units():
    import pandas as pd

    df = pd.DataFrame({"batch_size": [1, 256], "tpot_s": [0.0123, 0.05],
                       "gross_margin_frac": [0.5, 0.25],
                       "decode_tokens_per_s_per_gpu": [17320.4, 1927.0]})
    table = render(df, "table")
    assert "tpot ms" in table and "gross_margin %" in table and "decode tok/s/GPU" in table
    assert "17,320" in table and "12.3" in table and "50" in table and "e+" not in table
    md = render(df, "markdown")
    assert md.splitlines()[1].startswith("|--")
    csv = render(df, "csv")
    assert csv.splitlines()[1] == "1,0.0123,0.5,17320.4"   # machine formats keep SI values
    js = json.loads(render(df, "json"))
    assert js["rows"][0]["tpot_s"] == 0.0123


def test_cheapest_table_fits_a_terminal_and_csv_keeps_every_column(tmp_path):
    args = ["cheapest", "-H", "B200", "-p", "dp=8,ep=8", "-p", "tp=8", "--tpot", "50ms",
            "--price", "deepseek-chat-2025-02"]
    r = CliRunner().invoke(cli, args, terminal_width=160)
    text = ok(r)
    assert max(len(line) for line in text.splitlines()) < 300
    out = tmp_path / "c.csv"
    ok(run(*args, "--format", "csv", "-o", str(out)))
    header = out.read_text().splitlines()[0].split(",")
    assert "usd_per_mtok_blended" in header and "reason" in header


# --------------------------------------------------------------------------------------------
# plots never rank an infeasible point
# --------------------------------------------------------------------------------------------


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


def test_sweep_cli_log_options_need_a_plot(tmp_path):
    line = fails(run("sweep", "-m", DS, "-H", "H800", "-a", "batch_size=1,2", "-o",
                     str(tmp_path / "a.csv"), "--log-color"))
    assert "give --plot" in line


# --------------------------------------------------------------------------------------------
# results remember what they are
# --------------------------------------------------------------------------------------------


def test_evaluate_records_scalar_structural_choices_as_coordinates():
    import pandas as pd

    import inference_factory as inf

    a = inf.evaluate(DS, "H800-SXM", dp=32, ep=32, kv_precision="fp8", batch_size=[1, 8])
    b = inf.evaluate(DS, "H800-SXM", tp=8, batch_size=[1, 8])
    assert (int(a.tp), int(a.dp), int(a.ep)) == (1, 32, 32)
    assert str(a.kv_precision.values) == "fp8" and str(b.kv_precision.values) == "bf16"
    # defaults are recorded as resolved: the model's native weight precision, the skew used
    assert str(a.weight_precision.values) == inf.load_model(DS).weight_precision
    assert float(a.expert_skew) == inf.load_realism().default_expert_skew
    assert a.tp.dtype.kind == "i"                    # integer axes stay integers
    # two calls' frames stay apart
    both = pd.concat([inf.to_dataframe(a), inf.to_dataframe(b)])
    assert set(zip(both.tp, both.dp, both.ep)) == {(1, 32, 32), (8, 1, 1)}
    # a structural list is a dimension, not a scalar coordinate
    c = inf.evaluate(DS, "H800-SXM", dp=32, ep=32, kv_precision=["bf16", "fp8"])
    assert c.kv_precision.dims == ("kv_precision",) and c.tp.dims == ()


# --------------------------------------------------------------------------------------------
# every command: --help, and the catalog commands' happy paths
# --------------------------------------------------------------------------------------------


def _commands(group, path=()):
    import click

    for name, cmd in group.commands.items():
        yield (*path, name)
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))


@pytest.mark.parametrize("path", list(_commands(cli)), ids=" ".join)
def test_every_command_has_help(path):
    text = ok(run(*path, "--help"))
    assert text.startswith("Usage: inference-factory " + " ".join(path))


def test_prices_list_and_show_read_the_bundled_prices():
    from inference_factory.specs.prices import load_prices

    rows = json.loads(ok(run("prices", "list", "--json")))["rows"]
    assert {r["id"] for r in rows} == set(load_prices())
    ds = json.loads(ok(run("prices", "list", "-m", "deepseek-v3", "--json")))["rows"]
    assert ds and all(r["model"] == "DeepSeek-V3" for r in ds)
    shown = ok(run("prices", "show", "deepseek-chat-2025-02"))
    assert "DS_PRICING" in shown and "1.1" in shown
    assert "is not a price id" in fails(run("prices", "show", "nope"))


def test_configs_list_and_show_from_the_package():
    from inference_factory.factory.config import load_config

    rows = {r["name"]: r for r in json.loads(ok(run("configs", "list", "--json")))["rows"]}
    assert rows["factory"]["kind"] == "factory" and rows["sweeps/decode_grid"]["kind"] == "sweep"
    path = ok(run("configs", "show", "factory", "--path")).strip()
    assert load_config(path).name == "factory"
    text = ok(run("configs", "show", "factory.toml"))
    assert text.startswith("#") and "[decode]" in text
    assert "unknown config 'nope'" in fails(run("configs", "show", "nope"))


def test_roofline_options_use_the_grammar_and_warn_when_nothing_fits():
    assert "batch_size = 2.5 must be a whole number" in fails(run("roofline", "--batch-size",
                                                                  "2.5"))
    assert "tp = -8 is out of range" in fails(run("roofline", "--tp", "-8"))
    text = ok(run("roofline", "-m", DS, "-H", "H800", "--tp", "8"))
    assert text.startswith("*** DOES NOT FIT")
    assert "DOES NOT FIT" not in ok(run("roofline", "-m", DS, "-H", "H800", "--dp", "32",
                                        "--ep", "32"))


# --------------------------------------------------------------------------------------------
# docs resolve every source tag and stay inside the repository
# --------------------------------------------------------------------------------------------


def test_every_source_tag_resolves_in_references_and_docs_stay_in_the_repo():
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    listed = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", (repo / "docs" / "REFERENCES.md")
                            .read_text(encoding="utf-8"), flags=re.M))
    assert len(listed) > 40
    code_names = {"BLOCK_M", "BYTES_PER_ELEMENT", "INFERENCE_FACTORY_HARDWARE_DIR",
                  "INFERENCE_FACTORY_MODELS_DIR", "NUMBA_CACHE_DIR", "HYPOTHESIS_PROFILE",
                  "INFERENCE_FACTORY_CACHE_DIR", "XDG_CACHE_HOME",
                  "KV_LEN", "PATH_ORDER", "POOL_BYTES"}
    files = [*[f for f in (repo / "docs").glob("*.md") if f.name != "REFERENCES.md"],
             repo / "README.md", *(repo / "configs").glob("*.toml"),
             *(repo / "hardware").glob("*.toml"), *(repo / "models").glob("*.toml")]
    for f in files:
        text = f.read_text(encoding="utf-8")
        tags = set(re.findall(r"\b[A-Z][A-Z0-9]+_[A-Z0-9_]*[A-Z0-9]\b", text)) - code_names
        assert tags <= listed, f"{f.name}: {sorted(tags - listed)} not in docs/REFERENCES.md"
        if f.suffix == ".md":
            assert "shared/" not in text, f"{f.name} points outside the repository"


def test_list_axes_mask_invalid_combinations_instead_of_raising():
    import inference_factory as inf

    ds = inf.evaluate(DS, "H800-SXM", dp=[8, 32], ep=[8, 32], batch_size=[1, 64])
    valid = ds["valid"].transpose("dp", "ep").values
    # ep = 32 does not divide tp x dp = 8; every other pair is an instance
    assert valid.tolist() == [[True, False], [True, True]]
    bad = ds.sel(dp=8, ep=32)
    assert bad["decode_tokens_per_s_per_gpu"].isnull().all() and not bad["fits"].any()
    good = ds.sel(dp=32, ep=32)
    one = inf.evaluate(DS, "H800-SXM", dp=32, ep=32, batch_size=[1, 64])
    assert np.allclose(good["decode_tokens_per_s_per_gpu"], one["decode_tokens_per_s_per_gpu"])
    # scalars that are invalid still raise: nothing else to show
    with pytest.raises(SpecError, match="ep = 32 must divide"):
        inf.evaluate(DS, "H800-SXM", dp=8, ep=32)
