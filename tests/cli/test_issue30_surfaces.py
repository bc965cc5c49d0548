"""Issue 30, "surfaces that agree": deepseek-day prints DeepSeek's published day beside the
prediction; price and power labels name the basis actually used; a price basis under a capex
cost basis is refused (it would change nothing); an empty value is refused by every text
option.

Reference values: DeepSeek's Day-6 post (DS_DAY6, open-infra-index commit 56d8685): peak 278
nodes, average 226.75, $87,072 cost and $562,027 revenue per day, 545 % cost-profit margin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from inference_factory.cli import cli

from tests.cli_helpers import fails, ok

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


def test_deepseek_day_prints_the_published_day_beside_the_prediction():
    args = ("simulate", "-c", "configs/deepseek-day.toml", "--requests", "300")
    res = json.loads(ok(run(*args, "--json")))
    pub, s = res["published"], res["scenario"]
    assert pub == {"source": "DS_DAY6", "input_tokens_per_day": 608e9,
                   "kv_tokens_per_output_token": 4989, "prefill_tokens_per_s_per_gpu": 9212.5,
                   "decode_tokens_per_s_per_gpu": 1850, "nodes_avg": 226.75, "nodes_peak": 278,
                   "revenue_usd_per_day": 562027, "cost_usd_per_day": 87072,
                   "cost_profit_margin": 5.45}
    text = ok(run(*args))
    assert "predicted       published   ratio  (published: DS_DAY6)" in text
    row = next(x for x in text.splitlines() if x.startswith("nodes, peak"))
    assert row.split()[2:] == [f"{s['nodes_peak']:,.0f}", "278", f"{s['nodes_peak'] / 278:.2f}"]
    row = next(x for x in text.splitlines() if x.startswith("cost-profit margin"))
    assert row.split()[2:4] == [f"{s['cost_profit_margin']:.0%}", "545%"]
    # a scenario without [published] prints one column, as before
    from inference_factory.factory.compare import format_simulate
    assert "published" not in format_simulate({k: v for k, v in res.items()
                                               if k != "published"})


def test_published_needs_its_source_and_known_keys(tmp_path):
    base = f'extends = "{ROOT / "configs" / "factory.toml"}"\nname = "x"\n[published]\n'
    cfg = tmp_path / "a.toml"
    cfg.write_text(base + "nodes_peak = 278\n")
    assert "published.source is missing" in fails(run("simulate", "-c", str(cfg)))
    cfg.write_text(base + 'source = "DS_DAY6"\nnodes_peek = 278\n')
    assert "nodes_peek" in fails(run("simulate", "-c", str(cfg)))


def test_a_price_basis_under_capex_is_refused_and_labels_name_the_basis_used(tmp_path):
    msg = fails(run("simulate", "-c", "configs/factory.toml", "--price-basis", "rental-3yr"))
    assert "price basis 'rental-3yr'" in msg and "cost basis is capex" in msg
    msg = fails(run("plan", "-m", "Llama-3.1-8B", "-H", "H200", "--gpus", "8", "--cost-basis",
                    "capex", "--price-basis", "rental-3yr"))
    assert "cost basis is capex" in msg
    # a rental config priced from its basis: --power-basis keeps the price label the basis's
    # (it said 'user rate 2 $/GPU-h (rental_usd_per_gpu_hour)', a key the file lacks)
    cfg = tmp_path / "r.toml"
    cfg.write_text(f'extends = "{ROOT / "configs" / "factory.toml"}"\nname = "r"\n'
                   '[economics]\ncost_basis = "rental"\nprice_basis = "rental-3yr,hardware-file"\n')
    text = ok(run("simulate", "-c", str(cfg), "--requests", "200", "--power-basis",
                  "all-in-provisioned"))
    head = text[text.index("GPU-hours:"):text.index("\nfleet and money")]
    line = " ".join(head.split())        # the line, wrapped within 100 columns
    assert line.startswith("GPU-hours: price basis rental-3yr (IMAX_TCO, 2026-04); H800-SXM 2 "
                           "$/GPU-h from hardware-file")
    assert "user rate" not in line and "power basis all-in-provisioned" in line


@pytest.mark.parametrize("args", [
    ("plan", "-H", ""), ("plan", "-m", "Llama-3.1-8B", "-H", "H200", "--price-basis", ""),
    ("plan", "-m", "Llama-3.1-8B", "-H", "H200", "--draft-model", " "),
    ("simulate", "-c", ""), ("simulate", "-c", "configs/factory.toml", "--price-basis", ""),
    ("sweep", "-m", "", "-H", "H200", "--axis", "batch_size=1,2", "-o", "x.csv"),
    ("sweep", "-m", "Llama-3.1-8B", "-H", "H200", "--axis", "batch_size=1,2", "--price", "",
     "-o", "x.csv"),
    ("bench", "-m", ""), ("roofline", "-H", "")])
def test_an_empty_value_is_refused_naming_the_option(args):
    i = args.index("") if "" in args else args.index(" ")
    msg = fails(run(*args))
    assert "an empty value" in msg and f"'{args[i - 1]}'" in msg
