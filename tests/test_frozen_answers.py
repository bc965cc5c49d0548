"""The answers users rely on do not move under a refactor: ``validate`` on the dev cases,
``compare`` and ``simulate`` on the bundled configs, ``bench`` on the development table and
``plan`` on the issue's question give the numbers frozen in ``tests/data/frozen/`` (written
at checkout d5eb109, before the "module per variant" restructuring).

Reference values: the program's own output at that checkout (a regression oracle, not a
truth). Tolerance: relative 1e-9 on every number, far below the printed digits (4-6
significant) yet above the float reassociation a vectorised rewrite may bring (~1e-15).
Keys may be added (a new label in the output); none may go or change. One string was
edited since, on purpose: simulate's ``price_basis`` label of a user rate names
``rental_usd_per_gpu_hour`` as every command's one label does (specs.prices.price_basis_label).
Regenerated on purpose since: simulate's and compare's TTFT p50/p99 and goodput, when the
prompt queue's wait became the exact M/G/1 law (kernels.queueing.mg1_wait_law) instead of an
M/M/1 shape around its mean (no operating point, fleet or cost moved).
"""

from __future__ import annotations

import json
import math
import runpy
from pathlib import Path

import pytest
from click.testing import CliRunner

from inference_factory.cli import cli

from .cli_helpers import ok

ROOT = Path(__file__).resolve().parents[1]
FROZEN = Path(__file__).resolve().parent / "data" / "frozen"
REL = 1e-9


def same(frozen, now, where="$"):
    """Assert ``now`` carries every value of ``frozen`` (numbers within REL)."""
    if isinstance(frozen, dict):
        assert isinstance(now, dict), f"{where}: {type(now).__name__}, was an object"
        for k, v in frozen.items():
            assert k in now, f"{where}.{k} is gone"
            same(v, now[k], f"{where}.{k}")
    elif isinstance(frozen, list):
        assert isinstance(now, list) and len(now) == len(frozen), f"{where}: length changed"
        for i, (a, b) in enumerate(zip(frozen, now)):
            same(a, b, f"{where}[{i}]")
    elif isinstance(frozen, bool) or frozen is None or isinstance(frozen, str):
        assert now == frozen, f"{where}: {now!r}, was {frozen!r}"
    elif isinstance(frozen, (int, float)):
        assert isinstance(now, (int, float)) and not isinstance(now, bool), f"{where}: {now!r}"
        if math.isnan(frozen):
            assert math.isnan(now), f"{where}: {now!r}, was NaN"
        else:
            assert now == pytest.approx(frozen, rel=REL, abs=1e-12), \
                f"{where}: {now!r}, was {frozen!r}"
    else:
        raise TypeError(where)


CASES = {
    "validate": ["validate", "--cases", "validation/dev_cases.csv", "--json"],
    "compare": ["compare", "--config", "configs/factory.toml", "--json"],
    "simulate": ["simulate", "--config", "configs/deepseek-day.toml", "--json"],
    "plan": ["plan", "-m", "DeepSeek-V3", "-H", "H200-SXM,B200", "--gpus", "64", "--isl", "4096",
             "--osl", "1024", "--tpot", "50ms", "--json"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_command_answers_are_frozen(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = ok(CliRunner().invoke(cli, CASES[name]))
    same(json.loads((FROZEN / f"{name}.json").read_text()), json.loads(out))


def test_bench_on_the_development_table_is_frozen():
    rows = runpy.run_path(str(ROOT / "validation" / "bench_dev.py"), run_name="frozen")["main"]()
    same(json.loads((FROZEN / "bench_dev.json").read_text()), rows.to_dict(orient="records"))
