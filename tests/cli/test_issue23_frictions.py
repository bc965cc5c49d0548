"""Issue 23's small frictions: tables that fit a 100-column terminal in people's units (and
``--wide`` for every column), Ctrl-C's exit status, a printed config that works where it is
saved, bundled configs by name from any folder, figures without pyplot, and the docs' numbers
against what the code computes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from inference_factory.cli import cli
from inference_factory.cli.main import EXIT_INTERRUPTED, _Group
from tests.cli_helpers import title_lines

REPO = Path(__file__).resolve().parents[2]


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


@pytest.fixture
def terminal_100(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")


MAX_BATCH = ("max-batch", "-m", "DeepSeek-V3", "-H", "H200,B200", "--tpot", "50ms", "--ttft",
             "2s", "-a", "dp=8", "-a", "ep=8", "-a", "kv_len=1024,4096", "-a", "prompt_len=4096")


def test_max_batch_fits_100_columns_and_wide_shows_all(terminal_100):
    """It was 221 columns wide with API names."""
    r = run(*MAX_BATCH)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines[1:]) <= 100, r.stdout
    assert "max batch" in lines[1] and "tpot ms" in lines[1]
    assert "max_batch_size_meeting_slo" not in lines[1]
    assert "--wide shows every column" in r.stdout
    wide = run(*MAX_BATCH, "--wide")
    head = wide.stdout.splitlines()[1]
    assert "max prefill batch" in head and "ttft ms" in head and "prefill tok/s/GPU" in head
    assert "--wide" not in wide.stdout
    csv = run(*MAX_BATCH, "--format", "csv").stdout.splitlines()[0].split(",")
    assert "max_batch_size_meeting_slo" in csv and "ttft_s" in csv      # machines: API names


def test_tornado_shows_percent_and_fits(terminal_100):
    """Margins were 0.1362 under 'gross_margin_frac_low', 218 columns wide."""
    args = ("tornado", "-m", "Llama-3.1-8B", "-H", "H100", "-a", "batch_size=64",
            "--price", "llama-3.1-8b-together-2025-08", "-r", "usd_per_kwh=0.05,0.5")
    r = run(*args)
    assert r.exit_code == 0, r.stderr
    assert max(len(x) for x in r.stdout.splitlines()) <= 100, r.stdout    # the title wrapped
    lines = title_lines(r.stdout)
    assert "gross_margin_swing %" in lines[1] and "$/Mtok blended_swing" in lines[1]
    js = json.loads(run(*args, "--json").stdout)
    row = js["rows"][0]
    swing_pct = float(re.split(r"\s+", lines[3].strip())[-1])
    assert swing_pct == pytest.approx(row["gross_margin_frac_swing"] * 100, rel=1e-3)
    wide = run(*args, "--wide").stdout.splitlines()[1]
    assert "gross_margin_low %" in wide and "gross_margin_high %" in wide and "fits_low" in wide


def test_ctrl_c_exits_130():
    group = _Group("g")

    @group.command("slow")
    def slow():
        raise KeyboardInterrupt

    result = CliRunner().invoke(group, ["slow"])
    assert result.exit_code == EXIT_INTERRUPTED == 130
    assert "error: interrupted" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["deepseek-day", "factory", "baseline", "conservative"])
def test_configs_show_gives_a_file_that_works_elsewhere(tmp_path, name):
    """``configs show deepseek-day > dd.toml`` kept ``extends = "factory.toml"`` (and factory
    its ``baseline``), relative to a folder the copy is not in."""
    from inference_factory.factory.config import load_config

    text = run("configs", "show", name).stdout
    (tmp_path / "copy.toml").write_text(text)
    raw = tomllib.loads(text)
    for key in ("extends", "baseline"):
        if key in raw:
            assert Path(raw[key]).is_absolute() and Path(raw[key]).is_file()
    from inference_factory.specs import bundled_dir

    # the bundled copy: the repository's configs/ in a checkout, the wheel's in an install
    mine, bundled = (load_config(tmp_path / "copy.toml"),
                     load_config(bundled_dir("configs") / f"{name}.toml"))
    assert (mine.name, mine.model, mine.decode, mine.levers, mine.tpot_slo_s) == \
        (bundled.name, bundled.model, bundled.decode, bundled.levers, bundled.tpot_slo_s)
    if bundled.baseline_path:      # (baseline.toml inherits itself as baseline: none)
        assert mine.baseline_path == bundled.baseline_path


def test_bundled_config_by_name_from_another_folder(tmp_path, monkeypatch):
    """Notebook 03 looked for configs/ beside the working folder (StopIteration elsewhere)."""
    from inference_factory.factory.config import load_config

    from inference_factory.specs import bundled_dir

    monkeypatch.chdir(tmp_path)
    assert load_config("factory.toml").path == str(bundled_dir("configs") / "factory.toml")
    assert load_config("deepseek-day").name == "deepseek-day"
    (tmp_path / "factory.toml").write_text('extends = "missing.toml"\n')   # a local file wins
    with pytest.raises(Exception, match="missing.toml"):
        load_config("factory.toml")


def test_report_figures_use_no_pyplot():
    """factory/report.py called matplotlib.use("Agg") inside the notebook kernel (notebook 03
    showed no figures): drawing now leaves pyplot unimported and the backend unchanged."""
    pytest.importorskip("matplotlib")
    code = """
import sys, matplotlib, pandas as pd
before = matplotlib.rcParams._get_backend_or_none()
from inference_factory.factory.report import draw_lever_waterfall, figure_png
steps = pd.DataFrame({"step": ["baseline", "a", "factory"], "kind": ["start", "lever", "end"],
                      "before": [2.0, 2.0, 1.0], "after": [2.0, 1.0, 1.0],
                      "change": [1.0, 0.5, 1.0]})
steps.attrs = {"log": True, "metric": "usd_per_mtok_output", "basis": "path"}
fig = draw_lever_waterfall(steps)
png = figure_png(fig)
from matplotlib.figure import Figure
assert type(fig) is Figure and png[:8] == b"\\x89PNG\\r\\n\\x1a\\n", type(fig)
assert "matplotlib.pyplot" not in sys.modules
assert matplotlib.rcParams._get_backend_or_none() == before
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_readme_validation_numbers_match_validate():
    """README said median 0.27 / worst 0.65 while validate printed 0.163 / 0.435."""
    r = run("validate", "--cases", str(REPO / "validation" / "dev_cases.csv"), "--json")
    assert r.exit_code == 0, r.stderr
    overall = json.loads(r.stdout)["summary"]["overall"]
    readme = (REPO / "README.md").read_text()
    m = re.search(r"median \|ln\(predicted / published\)\| (\d\.\d+) .*?worst (\d\.\d+)",
                  readme, re.S)
    assert m, "README's 'How good is it' line is gone"
    assert float(m.group(1)) == round(overall["median_abs_log_error"], 3)
    assert float(m.group(2)) == round(overall["worst_abs_log_error"], 3)


def test_model_doc_runtime_reserve_matches_realism():
    """MODEL.md said 0.08 of HBM; configs/realism.toml has 0.10."""
    realism = tomllib.loads((REPO / "configs" / "realism.toml").read_text())
    value = realism["memory"]["runtime_reserve_frac"]
    row = next(x for x in (REPO / "docs" / "MODEL.md").read_text().splitlines()
               if x.startswith("| $\\rho$ runtime reserve"))
    assert f"| {value:.2f} of HBM |" in row, row
