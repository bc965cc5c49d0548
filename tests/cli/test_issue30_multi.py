"""Issue 30, "tables a person reads" (rest): ``bench -H A,B`` and several ``-p`` in one run,
one chart titled with model, precision, ISL/OSL and engine; plan rows with $/GPU-h, tokens
per MW and J per token on the named power basis (``--power-basis`` changes them).

Reference values: a run of several devices and shapes must give, per run, what one bench of
that run gives (the same numbers); the energy rows are recomputed by hand from TDP x the
cost model's phase shares of TDP x PUE (configs: H200 700 W, decode 380/700, prefill 1.0,
PUE 1.3; Splitwise, specs/prices.py) or SemiAnalysis's provisioned kW per GPU (H200 1.73,
configs/price_bases.toml), and $/GPU-h against the plan's own all-in $/M
($/M = $/GPU-h / (tok/s/GPU x 3600 s) x 1e6 at full use)."""

from __future__ import annotations

import io
import json

from click.testing import CliRunner

from inference_factory.cli import cli
from inference_factory.cli.bench import _chart_words

from tests.cli_helpers import fails, ok


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


BENCH = ("bench", "-m", "DeepSeek-V3", "-c", "4,16")
ONE = ("bench", "-m", "DeepSeek-V3", "-c", "4")


def test_bench_several_devices_and_shapes_one_chart(tmp_path):
    png = tmp_path / "b.png"
    text = ok(run(*BENCH, "-H", "H200,MI355X", "-p", "tp=8,ep=8", "-p", "dp=8,ep=8",
                  "--preset", "inferencex", "--plot", str(png)))
    heads = [s for s in text.splitlines() if s.startswith("DeepSeek-V3 on ")]
    assert [h.split(" (")[0] for h in heads] == [
        "DeepSeek-V3 on H200-SXM tp8 ep8", "DeepSeek-V3 on H200-SXM dp8 ep8",
        "DeepSeek-V3 on MI355X tp8 ep8", "DeepSeek-V3 on MI355X dp8 ep8"]
    assert text.count("footing: ") == 4
    assert max(len(s) for s in text.splitlines() if not s.startswith("wrote")) <= 100
    assert png.stat().st_size > 10_000
    # each run is what a bench of that run alone gives
    one = json.loads(ok(run(*BENCH, "-H", "MI355X", "-p", "dp=8,ep=8", "--json")))
    many = json.loads(ok(run(*BENCH, "-H", "H200,MI355X", "-p", "dp=8,ep=8",
                             "--json")))["runs"]
    assert [r["attrs"]["hardware"] for r in many] == ["H200-SXM", "MI355X"]
    assert many[1]["points"] == one["points"]
    import pandas as pd
    csv = pd.read_csv(io.StringIO(ok(run(*ONE, "-H", "H200,MI355X", "-p", "tp=8,ep=8",
                                         "--format", "csv"))))
    assert list(csv.columns[:3]) == ["hardware", "deployment", "concurrency"]
    assert list(csv["hardware"]) == ["H200-SXM", "MI355X"]


def test_the_chart_title_names_what_the_runs_share_and_labels_the_rest():
    a = dict(model="DeepSeek-V3", precision="fp8", kv_precision="fp8", isl=1024, osl=1024,
             range_ratio=0.8, engine="sglang-0.5.6", hardware="H200-SXM", deployment="tp8 ep8")
    title, labels = _chart_words([a, {**a, "hardware": "MI355X"}])
    assert title == ("DeepSeek-V3 · fp8 (KV fp8) · ISL 1024 / OSL 1024, range ratio 0.8 · "
                     "engine sglang-0.5.6")
    assert labels == ["H200-SXM tp8 ep8", "MI355X tp8 ep8"]
    title, labels = _chart_words([a, {**a, "kv_precision": "bf16", "hardware": "H100"}])
    assert "fp8" not in title and labels[1] == "H100 tp8 ep8 fp8 (KV bf16)"


def test_bench_several_runs_refusals():
    assert "--compare scores one deployment" in fails(run(
        *BENCH, "-H", "H200,B200", "--compare", "tests/data/bench"))
    assert "a device name is empty" in fails(run(*BENCH, "-H", "H200,"))
    assert "at most 12" in fails(run(*BENCH, "-H", "H200,B200,B300,H100", "-p", "tp=1",
                                     "-p", "tp=2", "-p", "tp=4", "-p", "tp=8"))


def test_plan_rows_show_dollars_per_gpu_hour_and_energy_on_the_named_power_basis():
    args = ("plan", "-m", "Llama-3.1-8B", "-H", "H200", "--gpus", "8", "--tpot", "50ms",
            "--ttft", "2s", "--json")
    tdp = json.loads(ok(run(*args)))
    allin = json.loads(ok(run(*args, "--power-basis", "all-in-provisioned")))
    r, q = tdp["recommendations"][0], allin["recommendations"][0]
    per_gpu = r["output_tokens_per_s_per_gpu"]
    if r["mode"] == "aggregated":
        sp = (1024 / r["prefill_tokens_per_s_per_gpu"]) / (
            1024 / r["prefill_tokens_per_s_per_gpu"] + 1024 / r["decode_tokens_per_s_per_gpu"])
    else:
        sp = r["prefill_instances"] * r["prefill_gpus"] / r["gpus"]
    watts = (sp * 700 * 1.0 + (1 - sp) * 700 * 380 / 700) * 1.3
    assert abs(r["facility_w_per_gpu"] / watts - 1) < 1e-9
    assert abs(r["j_per_output_token"] / (watts / per_gpu) - 1) < 1e-9
    assert abs(r["output_tokens_per_s_per_mw"] / (per_gpu * 1e6 / watts) - 1) < 1e-9
    assert abs(q["output_tokens_per_s_per_mw"] / (per_gpu * 1e6 / 1730) - 1) < 1e-9
    assert abs(q["j_per_output_token"] / (1730 / per_gpu) - 1) < 1e-9
    # rental-3yr: H200 1.6 $/GPU-h (configs/price_bases.toml), the plan's all-in $/M from it
    assert r["usd_per_gpu_hour"] == 1.6
    assert abs(r["usd_per_mtok_output_all_in"] / (1.6 / (per_gpu * 3600) * 1e6) - 1) < 1e-9
    text = ok(run(*args[:-1], "--power-basis", "all-in-provisioned"))
    assert "power basis all-in-provisioned" in " ".join(text.split())
    assert "$/GPU-h" in text and "out tok/s per MW" in text and "J per out token" in text
