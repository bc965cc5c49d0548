"""The plan's Pareto front prints every row distinguishable: two deployments of one shape and
batch that differ only in their precision profile (KV fp8 under ``low``, bf16 under
``native``) printed as identical lines before the front carried a precision column.

Reference values: the printed lines themselves (no two equal) and the front's own JSON rows
(the precision each printed row names is the one the row carries)."""

from __future__ import annotations

import json

import pandas as pd
from click.testing import CliRunner

from inference_factory.analysis.plan.ranking import front_note
from inference_factory.cli import cli

from tests.cli_helpers import ok

MI300X = ("plan", "-m", "gpt-oss-120b", "-H", "MI300X", "--gpus", "8", "--isl", "1024",
          "--osl", "1024", "--tpot", "1us")


def run(*args: str):
    return CliRunner(env={"COLUMNS": "100"}).invoke(cli, list(args),
                                                    prog_name="inference-factory")


def _front_lines(text: str) -> list[str]:
    """The front's data rows: the lines under the dashed rule after the front's title."""
    after = text.split("Pareto front", 1)[1].splitlines()
    rule = next(i for i, x in enumerate(after) if x.startswith("------"))
    rows = []
    for line in after[rule + 1:]:
        if not line.startswith("MI300X"):
            break
        rows.append(line)
    return rows


def test_no_two_front_rows_print_alike_and_each_names_its_precision():
    text = ok(run(*MI300X))
    rows = _front_lines(text)
    front = json.loads(ok(run(*MI300X, "--json")))["front"]
    assert len(rows) == len(front) > 2
    assert len(set(rows)) == len(rows), [r for r in rows if rows.count(r) > 1]
    # the rows that printed alike before: same shape, batch and figures, low against native
    assert {r["precision"] for r in front} == {"low", "native"}
    for line, r in zip(rows, front):
        assert line.split()[3] == r["precision"]
    assert max(len(x) for x in text.splitlines()) <= 100
    # no engine note: every row is vllm-v1's, so "rows of different engines" was wrong here
    assert "different engines" not in text and "print alike" not in text


def _row(**kw):
    base = {"hardware": "H100-SXM", "engine": "vllm-v1", "mode": "aggregated",
            "precision": "native", "tp": 1, "dp": 1, "ep": 1, "batch_size": 8,
            "draft_depth": 0, "tokens_per_s_per_user": 50.0,
            "output_tokens_per_s_per_gpu": 400.0, "usd_per_mtok_output_all_in": 1.0,
            "overlap": False, "kv_precision": "bf16"}
    return {**base, **kw}


def test_front_note_names_what_tells_alike_rows_apart():
    # rows that differ only in a column the table does not print (overlap) name it
    two = pd.DataFrame([_row(), _row(overlap=True)])
    assert "rows that print alike differ in overlap" in front_note(two)
    # a column the narrow table dropped counts as not printed
    hid = pd.DataFrame([_row(), _row(usd_per_mtok_output_all_in=1.5)])
    assert front_note(hid) == ""
    assert "differ in usd_per_mtok_output_all_in" in front_note(
        hid, hidden=("usd_per_mtok_output_all_in",))
    # two engines with one figure set: the engine note, and no "alike" note (they print apart)
    eng = pd.DataFrame([_row(), _row(engine="sglang-0.5.6")])
    assert "different engines" in front_note(eng) and "alike" not in front_note(eng)
