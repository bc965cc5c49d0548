"""The analyst's bench (issue 10) on the command line: one option grammar on every command
(the grammar itself: tests/specs/test_grammar.py), the former CLI defects, every command's help,
the catalog commands, tables that fit a terminal (the renderer: tests/output/test_tables.py).

Each former defect has a regression test: ``best-draft`` with ``-a batch_size`` and
``--batch-size`` (was a TypeError traceback), ``max-batch``'s header (was ``? on ?``),
``cheapest`` errors naming CLI options (were Python function names and keyword dicts).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from inference_factory.cli import cli

from tests.cli_helpers import fails, ok

DS = "DeepSeek-V3"


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


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


def test_sweep_cli_log_options_need_a_plot(tmp_path):
    line = fails(run("sweep", "-m", DS, "-H", "H800", "-a", "batch_size=1,2", "-o",
                     str(tmp_path / "a.csv"), "--log-color"))
    assert "give --plot" in line


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
