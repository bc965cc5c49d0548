"""``inference-factory bench`` on the command line: vLLM's keys in JSON, the table, the plot,
``--compare`` against a hand-made ``vllm bench serve --save-result`` file, clean errors."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from inference_factory.cli import cli

from tests.cli_helpers import fails, ok

BASE = ["bench", "-m", "Llama-3.1-70B", "-H", "H100-SXM", "-p", "tp=8", "--weight-precision",
        "fp8", "--isl", "1024", "--osl", "256"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


def test_json_has_one_point_per_concurrency_with_vllm_keys():
    out = json.loads(ok(run(*BASE, "-c", "1,4,16", "--json")))
    points = out["points"]
    assert [p["max_concurrency"] for p in points] == [1, 4, 16]
    for key in ("median_ttft_ms", "p99_tpot_ms", "mean_itl_ms", "median_e2el_ms",
                "total_token_throughput", "output_throughput_per_gpu", "interactivity",
                "decode_binding_resource", "num_gpus"):
        assert key in points[0]
    assert out["attrs"]["engine"] == "sglang-0.5.6"


def test_table_and_plot(tmp_path):
    path = tmp_path / "b.png"
    text = ok(run(*BASE, "-c", "1,2,4,...,64", "--plot", str(path)))
    assert "tok/s/GPU" in text and "Llama-3.1-70B on H100-SXM tp8 (8 GPUs)" in text
    assert path.stat().st_size > 10_000 and path.read_bytes()[:4] == b"\x89PNG"


def test_disaggregated_pools_count_every_gpu():
    out = json.loads(ok(run("bench", "-m", "Llama-3.1-70B", "-H", "H100-SXM",
                            "--weight-precision", "fp8", "--prefill-pool", "2:tp=8",
                            "--decode-pool", "1:tp=8", "-c", "8", "--json")))
    assert out["points"][0]["num_gpus"] == 24
    assert out["attrs"]["deployment"] == "2p:tp8 + 1d:tp8"


def test_compare_reproduces_the_measured_file(tmp_path):
    # a hand-made vLLM result (keys of vllm bench serve --save-result) at two concurrencies
    files = []
    for conc, tput, ttft, tpot in ((4, 3100.0, 150.0, 11.0), (16, 9000.0, 260.0, 16.5)):
        rec = {"backend": "vllm", "model_id": "meta-llama/Llama-3.1-70B", "num_prompts": 10 * conc,
               "max_concurrency": conc, "duration": 100.0, "completed": 10 * conc,
               "total_input_tokens": 10240 * conc, "total_output_tokens": 2560 * conc,
               "request_throughput": conc / 10.0, "output_throughput": tput / 5,
               "total_token_throughput": tput, "mean_ttft_ms": ttft, "median_ttft_ms": ttft,
               "std_ttft_ms": 1.0, "p99_ttft_ms": 2 * ttft, "mean_tpot_ms": tpot,
               "median_tpot_ms": tpot, "std_tpot_ms": 0.5, "p99_tpot_ms": 1.2 * tpot,
               "mean_itl_ms": tpot, "median_itl_ms": tpot, "std_itl_ms": 1.0,
               "p99_itl_ms": 3 * tpot, "mean_e2el_ms": 4000.0, "median_e2el_ms": 4000.0,
               "std_e2el_ms": 10.0, "p99_e2el_ms": 5000.0,
               "num_gpus": "8"}      # vllm bench serve --metadata num_gpus=8 (a top-level key)
        f = tmp_path / f"c{conc}.json"
        f.write_text(json.dumps(rec))
        files.append(str(f))
    out = json.loads(ok(run(*BASE, "--compare", files[0], "--compare", files[1], "--json")))
    pts = {p["max_concurrency"]: p for p in out["points"]}
    assert sorted(pts) == [4, 16]                  # the concurrencies come from the files
    assert pts[4]["median_ttft_ms_measured"] == 150.0
    assert pts[16]["median_tpot_ms_measured"] == 16.5
    assert pts[16]["interactivity_measured"] == pytest.approx(1000 / 16.5)
    p = pts[16]
    assert p["median_tpot_ms_abs_ln"] == pytest.approx(
        abs(math.log(p["median_tpot_ms_predicted"] / 16.5)))
    assert out["summary"]["n_points"] == 2
    text = ok(run(*BASE, "--compare", files[0]))
    assert "predicted vs measured" in text and "median |ln|" in text


def _result(tmp_path, name: str, **fields) -> str:
    """A vLLM --save-result record of the prediction BASE describes (concurrency 4; 8 GPUs
    at tp8; 1024/256 tokens; fp8) with ``fields`` changed; returns its path."""
    rec = {"backend": "sglang", "model_id": "meta-llama/Llama-3.1-70B", "num_prompts": 40,
           "max_concurrency": 4, "duration": 100.0, "completed": 40,
           "total_input_tokens": 40960, "total_output_tokens": 10240,
           "output_throughput": 102.4, "total_token_throughput": 512.0,
           "median_ttft_ms": 150.0, "median_tpot_ms": 11.0, "num_gpus": "8", "tp": "8",
           "isl": "1024", "osl": "256", "precision": "fp8", "hardware": "h100"} | fields
    f = tmp_path / f"{name}.json"
    f.write_text(json.dumps({k: v for k, v in rec.items() if v is not None}))
    return str(f)


def test_compare_scores_like_with_like_only(tmp_path):
    files = [_result(tmp_path, "same"),
             _result(tmp_path, "isl8k", isl="8192", total_input_tokens=327680),
             _result(tmp_path, "deepseek", model_id="deepseek-ai/DeepSeek-R1-0528"),
             _result(tmp_path, "tp4", num_gpus="4", tp="4"),
             _result(tmp_path, "mi355x", hardware="mi355x"),
             _result(tmp_path, "fp4", precision="nvfp4"),
             _result(tmp_path, "rr", range_ratio="0.8"),
             _result(tmp_path, "runner", hardware="h100-multinode", model_id="/m/Llama-3.1-70B")]
    out = json.loads(ok(run(*BASE, *[a for f in files for a in ("--compare", f)], "--json")))
    why = {p["source"].rsplit("/", 1)[-1]: p["reason"] for p in out["points"]}
    assert why == {"same.json": "", "runner.json": "",
                   "isl8k.json": "ISL 8192 (predicted 1024)",
                   "deepseek.json": "model DeepSeek-V3 (predicted Llama-3.1-70B)",
                   "tp4.json": "4 GPUs (predicted 8); deployment tp4 (predicted tp8)",
                   "mi355x.json": "device MI355X (predicted H100-SXM)",
                   "fp4.json": "precision nvfp4 (predicted fp8)",
                   "rr.json": "range ratio 0.8 (predicted 1)"}
    scored = [p for p in out["points"] if p["matched"]]
    assert len(scored) == 2 and out["summary"]["n_points"] == 2
    for p in out["points"]:     # a run unlike the prediction is never scored
        assert p["matched"] == (p["reason"] == "")
        if not p["matched"]:
            assert p["median_ttft_ms_predicted"] is None and p["median_ttft_ms_abs_ln"] is None
    assert {u["reason"] for u in out["summary"]["unmatched"]} == set(why.values()) - {""}
    text = ok(run(*BASE, "--compare", files[1]))
    assert "ISL 8192 (predicted 1024)" in text and "0 of 1 runs" in text


def test_compare_refuses_a_run_without_its_gpu_count(tmp_path):
    f = _result(tmp_path, "nogpus", num_gpus=None, tp=None)
    assert "field 'num_gpus' is missing" in fails(run(*BASE, "--compare", f))
    assert ok(run(*BASE, "--compare", f, "--num-gpus", "8"))


@pytest.mark.parametrize("args, message", [
    (["--prefill-pool", "2:tp=8"], "go together"),
    (["--prefill-pool", "x:tp=8", "--decode-pool", "1:tp=8"], "expected N:SHAPE"),
    (["-c", "0,4"], "whole numbers >= 1"),
    (["--engine", "sglang-9"], "not a profile"),
    (["--plot", "b.txt"], "must end in"),
    (["--isl", "200000"], "exceeds"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    assert message in fails(run(*BASE, *args))


def test_uncertainty_prints_bands_and_json_low_high():
    text = ok(run(*BASE, "-c", "4", "--uncertainty"))
    lines = text.splitlines()
    i = next(i for i, s in enumerate(lines) if s.lstrip().startswith("4 "))   # the c=4 row
    band = lines[i + 1]                     # each band on the line under its value
    assert "[" not in lines[i] and "[" in band and "-" in band.split("[")[1]
    p = json.loads(ok(run(*BASE, "-c", "4", "--uncertainty", "--json")))["points"][0]
    assert p["median_tpot_ms_low"] < p["median_tpot_ms"] < p["median_tpot_ms_high"]
