"""Issue 30, "what the user reads is what the model computed", on the command line: one
provisioning rule for plan and simulate, tables within 100 columns, errors that help, nothing
wrong accepted and nothing lost.

Reference values: the program's own counts on both sides of one rule (plan --load and simulate
size with kernels.serving at the same target utilisation, so the GPU counts must be equal, not
close); widths and messages are properties of the output, checked directly."""

from __future__ import annotations

import json
import re

import pytest

from click.testing import CliRunner

from inference_factory.cli import cli
from inference_factory.specs import list_hardware, list_models, load_hardware, load_model

from tests.cli_helpers import fails, ok


def run(*args: str, **env):
    return CliRunner(env=env or None).invoke(cli, list(args), prog_name="inference-factory")


# ---- one provisioning rule -----------------------------------------------------------------

def test_plan_load_and_simulate_of_its_config_give_the_same_gpu_counts(tmp_path):
    cfg = tmp_path / "plan.toml"
    out = json.loads(ok(run("plan", "-m", "DeepSeek-V3", "-H", "B200", "--gpus", "64",
                            "--tpot", "50ms", "--ttft", "2s", "--load", "1000000",
                            "--emit-config", str(cfg), "--json")))
    r = out["recommendations"][0]
    assert out["request"]["target_utilization"] == 0.8      # configs/provisioning.toml
    sim = json.loads(ok(run("simulate", "--config", str(cfg), "--json")))["scenario"]
    assert sim["gpus_peak"] == r["gpus_for_load"]
    assert sim["decode_gpus_avg"] == r["decode_gpus_for_load"]
    assert sim["prefill_gpus_avg"] == r["prefill_gpus_for_load"]
    # the share of the load the 64-GPU recommendation serves, at the same utilisation
    assert r["load_share_frac"] == 0.8 * r["output_tokens_per_s"] / 1e6
    assert "target_utilization = 0.8" in cfg.read_text()
    # one option in both, the same rule: a lower utilisation provisions more GPUs on both
    # sides, and the table says what share of the load the budget serves
    text = ok(run("plan", "-m", "DeepSeek-V3", "-H", "B200", "--gpus", "64", "--tpot", "50ms",
                  "--ttft", "2s", "--load", "1000000", "--target-utilization", "0.5"))
    line = " ".join(text[text.index("\n--load"):].split())      # the note, unwrapped
    assert "at 50% target utilisation: the --gpus 64 budget serves B200" in line
    gpus5 = float(line.split("B200 ")[1].split("(")[1].split(" GPUs")[0].replace(",", ""))
    sim5 = json.loads(ok(run("simulate", "--config", str(cfg), "--target-utilization", "0.5",
                             "--json")))["scenario"]
    assert gpus5 > r["gpus_for_load"] and sim5["gpus_peak"] == gpus5
    assert "--target-utilization" in fails(run("simulate", "--config", str(cfg),
                                               "--target-utilization", "0"))


# ---- tables a person reads -------------------------------------------------------------------

def _widest(text: str) -> int:
    return max(len(s) for s in text.splitlines())


def test_every_default_table_fits_100_columns_with_human_headers(tmp_path):
    result = tmp_path / "r.json"
    result.write_text(json.dumps({
        "model_id": "meta-llama/Llama-3.1-70B", "max_concurrency": 4, "duration": 100.0,
        "completed": 40, "output_throughput": 102.4, "total_token_throughput": 512.0,
        "median_ttft_ms": 150.0, "median_tpot_ms": 11.0, "num_gpus": "8", "isl": "8192"}))
    bench = ["bench", "-m", "Llama-3.1-70B", "-H", "H100-SXM", "-p", "tp=8",
             "--weight-precision", "fp8", "--osl", "256"]
    tables = {
        "bench": ok(run(*bench, "-c", "1,64,512", COLUMNS="100")),
        "bench --compare": ok(run(*bench, "--compare", str(result), COLUMNS="100")),
        "plan": ok(run("plan", "-m", "DeepSeek-V3", "-H", "H200,B200,MI355X", "--gpus", "16",
                       "--tpot", "50ms", "--load", "100000", COLUMNS="100")),
        "hardware list": ok(run("hardware", "list", COLUMNS="100")),
        "models list": ok(run("models", "list", COLUMNS="100")),
    }
    for name, text in tables.items():
        assert _widest(text) <= 100, (name, _widest(text))
        assert "_per_" not in text and "_ms " not in text, name     # no snake_case headers
    assert "TTFT ms" in tables["bench"] and "tok/s/GPU" in tables["bench"]
    assert "$/M out all-in" in tables["plan"] and "on measured tables %" in tables["plan"]
    # --wide shows every column; the machine formats keep the library's names
    wide = ok(run(*bench, "-c", "1", "--wide", COLUMNS="100"))
    assert "prefill_binding_resource" in wide and _widest(wide) > 100
    assert "total_token_throughput_per_gpu" in ok(run(*bench, "-c", "1", "--format", "csv"))


PLAN6 = ("plan", "-m", "Llama-3.1-8B", "-H", "H100,H200,B200,MI355X,GB200,H800", "--gpus", "8",
         "--tpot", "50ms", "--mode", "aggregated", "--precision", "native")


def test_every_commands_default_output_fits_100_columns(tmp_path):
    """Every line of every command's default human output (no options, or the bundled file
    or the help's example a command needs, and the typical arguments of those that need
    one), titles, notes and headers included, within 100 columns: the long ones wrapped by
    output.tables.fit_lines (roofline's axes line was 126, simulate's GPU-hours line 126,
    cheapest's title 206, compare's attribution table 124, hardware show MI355X's sources
    729, models show DeepSeek-V3's 611, sweep's note 221), tables narrowed by human headers,
    wrapped text and columns dropped from the right and named (validate's case table was
    133, bench --uncertainty 190, bench --trace 501, plan --trace 133), a side-by-side
    table in blocks (plan on six devices: 565 with bands), a launch command continued with
    ' \\'. Nothing cut: every case id, source word and command is there whole."""
    trace = ("--trace", "configs/traces/example_mooncake.jsonl", "-c", "4")
    outputs = {
        " ".join(args): ok(run(*args, COLUMNS="100")) for args in (
            ("roofline",), ("roofline", "--ops"), ("roofline", "--uncertainty"),
            ("simulate", "-c", "configs/factory.toml", "--requests", "300"),
            ("compare", "-c", "configs/factory.toml", "--requests", "300", "--no-progress"),
            ("cheapest",), ("pareto",), ("price-by-position",), ("best-draft",),
            ("max-batch",), ("plan",), ("prices",), ("configs", "list"),
            ("tornado", "-r", "acceptance_rate=0.6,0.9"),
            ("montecarlo", "-r", "acceptance_rate=0.6,0.9"),
            ("validate", "--cases", "validation/dev_cases.csv"),
            ("validate", "--cases", "validation/dev_cases.csv", "--uncertainty"),
            ("bench", "-m", "DeepSeek-R1", "-H", "B200", "-p", "tp=8", "-c", "4,64",
             "--uncertainty"),
            ("bench", "-m", "Llama-3.1-8B", "-H", "H100", *trace, "--uncertainty"),
            ("bench", "-m", "Llama-3.1-8B", "-H", "H100", *trace, "--attribution"),
            ("plan", "-m", "Llama-3.1-8B", "-H", "H100", "--gpus", "1", *trace,
             "--kv-offload", "none,dram", "--engine", "sglang", "--precision", "native"),
            PLAN6, ("sweep", "-c", "configs/sweeps/decode_grid.toml", "-o",
                    str(tmp_path / "grid.csv")),
            *(("hardware", "show", n) for n in list_hardware()),
            *(("models", "show", n) for n in list_models()))}
    for name, text in outputs.items():
        assert _widest(text) <= 100, (name, _widest(text),
                                      max(text.splitlines(), key=len))
    # wrapped, not cut: the roofline's axes and compare's footing are all there
    flat = " ".join(outputs["roofline"].split())
    assert "batch_size=1 kv_len=1024" in flat and "cache_hit_rate=0 final_len=0" in flat
    cmp = outputs["compare -c configs/factory.toml --requests 300 --no-progress"]
    assert "factory without the lever" in cmp and "baseline toggled" in cmp
    # every word of every source and note whole (a URL is one word), every case id on its line
    for n in list_hardware():
        hw, words = load_hardware(n), set(outputs[f"hardware show {n}"].split())
        assert all(set(v.split()) <= words for v in (*hw.sources.values(), *hw.notes.values()))
    assert set(load_model("DeepSeek-V3").source.split()) <= set(
        outputs["models show DeepSeek-V3"].split())
    ids = {s.split()[0] for s in outputs["validate --cases validation/dev_cases.csv"]
           .splitlines() if s.strip()}
    assert "mlperf-mixtral-mi300x-offline-vllm" in ids and "sglang-h20-decode" in ids
    banded = outputs["validate --cases validation/dev_cases.csv --uncertainty"]
    assert "1 more column: hardware" in banded                    # the device, dropped, named
    # a band under its value, the columns that did not fit named (--wide shows them)
    b = outputs["bench -m DeepSeek-R1 -H B200 -p tp=8 -c 4,64 --uncertainty"]
    assert re.search(r"^\s+\[[\d.,]+-[\d.,]+\]", b, re.M) and "more columns:" in b
    # six devices side by side: in blocks, every device a column; each launch command whole
    plan = outputs[" ".join(PLAN6)]
    lines = plan.splitlines()
    heads = [lines[i - 1].split() for i, s in enumerate(lines)     # above each block's rule
             if s.startswith("-" * 20 + "  ") and lines[i - 1].startswith(" " * 20)]
    assert sorted(h for hs in heads for h in hs) == sorted(
        ["H100-SXM", "H200-SXM", "B200", "MI355X", "GB200", "H800-SXM"]) and len(heads) == 2
    joined = re.sub(r" \\\n +", " ", plan.replace("\n  ", "\n"))
    for r in json.loads(ok(run(*PLAN6, "--json")))["recommendations"]:
        assert r["launch_command"] in joined


# ---- errors that help ------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["bench", "-m", "Lama-3.1-70B"], "unknown model 'Lama-3.1-70B'; did you mean 'Llama-3.1-70B'?"),
    (["bench", "-m", "deepseekv3"], "did you mean 'DeepSeek-V3'?"),
    (["bench", "-H", "b20"], "unknown hardware 'b20'; did you mean 'B200'?"),
    (["bench", "--engine", "sglang-0.5.5x"], "did you mean 'sglang-0.5.6'?"),
    (["plan", "-m", "Llama-3.1-8B", "-H", "H100", "--gpus", "1", "--price-basis", "rental-3y"],
     "did you mean 'rental-3yr'?"),
    (["bench", "-p", "tpp=8"], "unknown axis 'tpp'; did you mean 'tp'?"),
    (["bench", "--isl", "1kk"], "--isl '1kk': expected a token count such as 1024, 1k or 8k"),
    (["plan", "--osl", "0"], "--osl '0': a token count is a whole number in [1,"),
    (["bench", "--osl", "1.2k"], "1228.8 tokens is not a whole number"),
])
def test_errors_name_the_option_the_value_and_the_nearest_allowed(args, message):
    assert message in fails(run(*args))


def test_lengths_read_1k_and_8k_and_option_keys_any_case():
    out = json.loads(ok(run("bench", "-m", "Llama-3.1-8B", "-H", "H100", "--isl", "8k",
                            "--osl", "1k", "-p", "TP=1", "-c", "1", "--json")))
    assert (out["attrs"]["isl"], out["attrs"]["osl"]) == (8192, 1024)      # k = 1024 tokens
    assert out["attrs"]["deployment"] == "tp1"


# ---- every answer states its footing ---------------------------------------------------------

def test_bench_states_its_footing_precisions_and_engine():
    args = ["bench", "-m", "DeepSeek-V3", "-H", "H200", "-p", "dp=8,ep=8", "--moe-precision",
            "fp4", "-c", "4,64", "--isl", "1k", "--osl", "256"]
    text = ok(run(*args))
    assert "footing: " in text and "% of GPU time on measured tables at concurrency 64" in text
    assert "experts stored in fp4 and computed at" in text and "weight-only" in text
    assert "engine: sglang-0.5.6 (" in text
    a = json.loads(ok(run(*args, "--json")))["attrs"]
    assert a["footing"] in ("measured", "partly measured", "extrapolated")
    assert 0 < a["measured_share"] <= 1 and a["footing_concurrency"] == 64
    assert (a["moe_precision"], a["kv_precision"], a["precision"]) == ("fp4", "bf16", "fp4")


def test_bench_preset_inferencex_sets_the_benchmarks_defaults():
    base = ["bench", "-m", "Llama-3.1-8B", "-c", "4", "--osl", "128", "--json"]
    a = json.loads(ok(run(*base, "-H", "H100", "--preset", "inferencex")))["attrs"]
    assert (a["range_ratio"], a["kv_precision"]) == (0.8, "fp8")   # configs/bench_presets.toml
    a = json.loads(ok(run(*base, "-H", "H100", "--preset", "inferencex", "--range-ratio", "1",
                          "--kv-precision", "bf16")))["attrs"]
    assert (a["range_ratio"], a["kv_precision"]) == (1.0, "bf16")  # what the user gives wins
    a = json.loads(ok(run(*base, "-H", "A100", "--preset", "inferencex")))["attrs"]
    assert a["kv_precision"] == "bf16"                               # no FP8 on A100
    assert "did you mean 'inferencex'?" in fails(run(*base, "--preset", "inferenceX2"))


# ---- nothing wrong accepted, nothing lost ----------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["bench", "--acceptance-rate", "nan"], "'--acceptance-rate': 'nan' is not a finite number"),
    (["bench", "--range-ratio", "inf"], "--range-ratio"),
    (["plan", "--rental-usd-per-gpu-hour", "inf"], "'inf' is not a finite number"),
    (["plan", "--capex-usd-per-gpu", "nan"], "'nan' is not a finite number"),
    (["plan", "--load", "nan"], "--load"),
    (["bench", "-o", ""], "'--output' / '-o': an empty value"),
    (["plan", "-o", ""], "'--output' / '-o': an empty value"),
])
def test_non_finite_numbers_and_empty_names_are_refused(args, message):
    assert message in fails(run(*args))


def test_plan_never_overwrites_an_emitted_config_without_force_and_writes_all_or_nothing(
        tmp_path):
    cfg, out = tmp_path / "plan.toml", tmp_path / "plan.json"
    cfg.write_text("# the user's own file\n")
    args = ["plan", "-m", "Llama-3.1-8B", "-H", "H100", "--gpus", "1", "-a", "batch_size=8",
            "--price", "llama-3.1-8b-together-2025-08", "--emit-config", str(cfg), "-o", str(out)]
    line = fails(run(*args))
    assert "--emit-config" in line and "--force" in line
    assert cfg.read_text() == "# the user's own file\n" and not out.exists()    # nothing written
    ok(run(*args, "--force"))
    assert "[decode]" in cfg.read_text() and out.exists()
