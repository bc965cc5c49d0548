"""Measured benchmark results (``bench --compare``): reading vLLM ``--save-result`` files and
InferenceX processed files, and comparing them with a prediction.

Reference values:
- the vLLM record is hand-made and self-consistent: 40 prompts (10 x concurrency 4, as
  InferenceX runs them), throughputs = tokens / duration; its TPOT (9.2 ms) is the measured
  B200 SGLang 0.5.5 figure of shared/reference/inferencex_dev.csv (IMAX_SGL056). Reading it
  back must give the same numbers exactly (a copy, no arithmetic).
- the InferenceX processed records are computed in this file from the formulas of
  InferenceX's ``utils/process_result.py`` (IMAX_REPO, quoted in the module docstring of
  ``analysis/bench/results.py``): tput_per_gpu = total / (tp * pp * pcp_size), multinode
  output_tput_per_gpu = output / decode GPUs, latencies in s, intvty = 1000 / tpot_ms. The
  reader inverts them; a float round trip (x / n * n, x / 1000 * 1000) is exact to ~1e-15,
  hence rel=1e-12.
- |ln| errors in the comparison are computed here with math.log, independently of numpy.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from inference_factory.analysis.bench.comparison import compare_results, summarize_comparison
from inference_factory.analysis.bench.results import COLUMNS, read_bench_results
from inference_factory.errors import SpecError

TIGHT = dict(rel=1e-12)

# 40 requests at concurrency 4, 8k/1k lengths drawn in [0.8 x L, L]: mean input 7372.8,
# mean output 921.2 tokens; a 100 s run
VLLM = {
    "date": "20251215-101500", "backend": "sglang", "model_id": "deepseek-ai/DeepSeek-R1-0528",
    "tokenizer_id": "deepseek-ai/DeepSeek-R1-0528", "best_of": 1, "num_prompts": 40,
    "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4,
    "duration": 100.0, "completed": 40, "total_input_tokens": 294912,
    "total_output_tokens": 36848, "request_throughput": 0.4, "request_goodput:": None,
    "output_throughput": 368.48, "total_token_throughput": 3317.6,
    "input_lens": [7373] * 40, "output_lens": [921] * 40,
    "mean_ttft_ms": 1204.3, "median_ttft_ms": 1180.5, "std_ttft_ms": 150.1,
    "p90_ttft_ms": 1402.7, "p99_ttft_ms": 1650.2, "p99.9_ttft_ms": 1701.9,
    "mean_tpot_ms": 9.31, "median_tpot_ms": 9.2, "std_tpot_ms": 0.35,
    "p90_tpot_ms": 9.8, "p99_tpot_ms": 10.4, "p99.9_tpot_ms": 10.6,
    "mean_itl_ms": 9.28, "median_itl_ms": 9.05, "std_itl_ms": 1.6,
    "p90_itl_ms": 9.9, "p99_itl_ms": 14.9, "p99.9_itl_ms": 31.2,
    "mean_e2el_ms": 9783.1, "median_e2el_ms": 9801.7, "std_e2el_ms": 612.4,
    "p90_e2el_ms": 10502.0, "p99_e2el_ms": 10950.3, "p99.9_e2el_ms": 11004.8,
}


def processed(bmk: dict, *, gpus: dict) -> dict:
    """InferenceX's utils/process_result.py applied by hand to one vLLM record."""
    data = {"hw": "b200", "conc": int(bmk["max_concurrency"]), "image": "lmsysorg/sglang:v0.5.5",
            "model": bmk["model_id"], "infmax_model_prefix": "dsr1", "framework": "sglang",
            "precision": "fp4", "spec_decoding": "none", "disagg": False, "isl": 8192,
            "osl": 1024}
    total, out = bmk["total_token_throughput"], bmk["output_throughput"]
    if "num_prefill_gpu" in gpus:
        n, d = gpus["num_prefill_gpu"] + gpus["num_decode_gpu"], gpus["num_decode_gpu"]
        data |= {"is_multinode": True, "disagg": True, **gpus, "tput_per_gpu": total / n,
                 "output_tput_per_gpu": out / d,
                 "input_tput_per_gpu": (total - out) / gpus["num_prefill_gpu"]}
    else:
        n = gpus["tp"] * gpus.get("pp", 1) * gpus.get("pcp_size", 1)
        data |= {"is_multinode": False, **gpus, "tput_per_gpu": total / n,
                 "output_tput_per_gpu": out / n, "input_tput_per_gpu": (total - out) / n}
    for key, value in bmk.items():
        if key.endswith("ms"):
            data[key.replace("_ms", "")] = float(value) / 1000.0
        if "tpot" in key:
            data[key.replace("_ms", "").replace("tpot", "intvty")] = 1000.0 / float(value)
    return data


def df_bool(v) -> bool | None:
    """A cell of a boolean column (numpy's bool_) as a Python bool."""
    return None if v is None else bool(v)


def write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


def test_a_vllm_result_reads_back_its_own_numbers(tmp_path):
    f = write(tmp_path / "sglang-infqps-concurrency4-DeepSeek-R1.json", VLLM)
    df = read_bench_results(f, num_gpus=4)
    assert list(df.columns[:len(COLUMNS)]) == list(COLUMNS) and len(df) == 1
    r = df.iloc[0]
    assert r["format"] == "vllm" and r["source"] == str(f)
    assert r["model"] == "deepseek-ai/DeepSeek-R1-0528" and r["backend"] == "sglang"
    for k in ("max_concurrency", "completed", "duration", "request_throughput",
              "output_throughput", "total_token_throughput", "total_input_tokens",
              "total_output_tokens", "num_prompts", "burstiness"):
        assert r[k] == VLLM[k], k
    for k in [k for k in VLLM if k.endswith("_ms")]:
        assert r[k] == VLLM[k], k           # every latency statistic, p90 and p99.9 included
    assert r["request_rate"] == math.inf
    assert math.isnan(r["request_goodput"])  # written as null (under InferenceX's "...:" key)
    assert r["num_gpus"] == 4
    assert r["total_token_throughput_per_gpu"] == pytest.approx(3317.6 / 4, **TIGHT)
    assert r["output_throughput_per_gpu"] == pytest.approx(368.48 / 4, **TIGHT)
    assert r["interactivity"] == pytest.approx(1000 / 9.2, **TIGHT)
    # no GPU count given: unknown, not guessed
    r = read_bench_results(f).iloc[0]
    assert math.isnan(r["num_gpus"]) and math.isnan(r["total_token_throughput_per_gpu"])


def test_vllm_metadata_gives_gpus_hardware_and_lengths(tmp_path):
    meta = {"hardware": "B200", "num_gpus": "4", "tp": "4", "ep": "4", "isl": "8192",
            "osl": "1024"}        # --metadata KEY=VALUE pairs are strings
    r = read_bench_results(write(tmp_path / "r.json", VLLM | meta), num_gpus=8).iloc[0]
    assert (r["hardware"], r["num_gpus"], r["isl"], r["osl"]) == ("B200", 4, 8192, 1024)
    assert r["deployment"] == "tp4 ep4"


def test_an_inferencex_processed_file_gives_back_the_benchmark_numbers(tmp_path):
    gpus = {"tp": 4, "pp": 1, "dcp_size": 1, "pcp_size": 1, "ep": 4, "dp_attention": "false"}
    rec = processed(VLLM, gpus=gpus)
    assert rec["tput_per_gpu"] == 829.4 and rec["median_ttft"] == 1.1805   # 3317.6 / 4, s
    r = read_bench_results(write(tmp_path / "agg_dsr1_c4.json", rec)).iloc[0]
    assert r["format"] == "inferencex" and r["hardware"] == "b200"
    assert (r["framework"], r["precision"], r["isl"], r["osl"]) == ("sglang", "fp4", 8192, 1024)
    assert (r["max_concurrency"], r["num_gpus"], r["tp"], r["ep"]) == (4, 4, 4, 4)
    assert df_bool(r["dp_attention"]) is False and r["deployment"] == "tp4 ep4"
    assert r["total_token_throughput"] == pytest.approx(3317.6, **TIGHT)
    assert r["output_throughput"] == pytest.approx(368.48, **TIGHT)
    assert r["total_token_throughput_per_gpu"] == pytest.approx(829.4, **TIGHT)
    for k in [k for k in VLLM if k.endswith("_ms")]:
        assert r[k] == pytest.approx(VLLM[k], **TIGHT), k
    assert r["interactivity"] == pytest.approx(1000 / 9.2, **TIGHT)
    # what the processed file does not carry stays unknown
    assert math.isnan(r["completed"]) and math.isnan(r["duration"])


def test_inferencex_gpu_counts_single_node_pp_and_an_older_file(tmp_path):
    # num_gpus = tp * pp * pcp_size (dcp reuses the TP GPUs); older files have tp alone
    r = read_bench_results(write(tmp_path / "a.json", processed(
        VLLM, gpus={"tp": 4, "pp": 2, "dcp_size": 2, "pcp_size": 1, "ep": 1,
                    "dp_attention": "true"}))).iloc[0]
    assert r["num_gpus"] == 8 and r["deployment"] == "dp4 pp2"
    assert r["total_token_throughput"] == pytest.approx(3317.6, **TIGHT)
    old = processed(VLLM, gpus={"tp": 8, "ep": 8, "dp_attention": "true"})
    r = read_bench_results(write(tmp_path / "b.json", old)).iloc[0]
    assert r["num_gpus"] == 8 and r["deployment"] == "dp8 ep8"


def test_inferencex_multinode_output_throughput_is_per_decode_gpu_there(tmp_path):
    gpus = {"prefill_num_workers": 2, "prefill_tp": 4, "prefill_ep": 4,
            "prefill_dp_attention": "false", "num_prefill_gpu": 8, "decode_num_workers": 1,
            "decode_tp": 8, "decode_ep": 8, "decode_dp_attention": "true", "num_decode_gpu": 8}
    run = VLLM | {"total_token_throughput": 40000.0, "output_throughput": 5000.0}
    rec = processed(run, gpus=gpus)
    assert (rec["tput_per_gpu"], rec["output_tput_per_gpu"]) == (2500.0, 625.0)
    r = read_bench_results(write(tmp_path / "m.json", rec)).iloc[0]
    assert r["num_gpus"] == 16 and r["deployment"] == "2p:tp4 ep4 x 1d:dp8 ep8"
    assert (r["total_token_throughput"], r["output_throughput"]) == (40000.0, 5000.0)
    assert r["total_token_throughput_per_gpu"] == 2500.0
    assert r["output_throughput_per_gpu"] == 312.5            # per GPU of the deployment
    assert r["output_throughput_per_decode_gpu"] == 625.0     # InferenceX's output_tput_per_gpu


def test_lists_json_lines_and_folders(tmp_path):
    runs = [VLLM, VLLM | {"max_concurrency": 8, "median_tpot_ms": 11.6}]
    df = read_bench_results(write(tmp_path / "runs.json", runs), num_gpus=4)
    assert list(df["max_concurrency"]) == [4, 8]
    assert list(df["source"]) == [f"{tmp_path / 'runs.json'} item {i}" for i in (0, 1)]
    (tmp_path / "runs.jsonl").write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    df = read_bench_results(tmp_path / "runs.jsonl")
    assert list(df["median_tpot_ms"]) == [9.2, 11.6] and df["source"][1].endswith("line 2")
    # an InferenceX result folder: the benchmark file, its processed copy, a power sidecar
    d = tmp_path / "results"
    d.mkdir()
    write(d / "dsr1_c4.json", VLLM)
    write(d / "agg_dsr1_c4.json", processed(VLLM, gpus={"tp": 4, "ep": 4,
                                                         "dp_attention": "false"}))
    write(d / "power_validation_dsr1_c4.json", {"power_valid": False, "reasons": []})
    df = read_bench_results(d)
    assert list(df["format"]) == ["inferencex"] and len(df.attrs["skipped"]) == 2


@pytest.mark.parametrize("text, message", [
    ("{", "not valid JSON"),
    (json.dumps(VLLM | {"median_ttft_ms": "fast"}),
     "field 'median_ttft_ms' = 'fast' must be a number > 0"),
    (json.dumps(VLLM | {"completed": -1}), "field 'completed' = -1 must be a whole number in [0,"),
    (json.dumps(VLLM | {"completed": 39.5}), "field 'completed' = 39.5 must be a whole number"),
    (json.dumps({k: v for k, v in VLLM.items() if k != "duration"}),
     "field 'duration' is missing"),
    (json.dumps(VLLM | {"num_gpus": "four"}), "field 'num_gpus' = 'four'"),
    (json.dumps({"model": "x", "conc": 4}), "field 'tput_per_gpu' is missing"),
    (json.dumps({"hello": 1}), "neither a vLLM --save-result record"),
    (json.dumps([VLLM, 3]), "item 1: a result is a JSON object; got int"),
    (json.dumps(VLLM) + "\n{oops\n", "line 2: not valid JSON"),
    # a failed run is not a measurement: zero, NaN or missing throughput and TTFT
    (json.dumps(VLLM | {"total_token_throughput": 0}), "'total_token_throughput' = 0 must be a "
                                                      "number > 0"),
    (json.dumps(VLLM | {"output_throughput": float("nan")}), "'output_throughput' = nan"),
    (json.dumps({k: v for k, v in VLLM.items() if k != "median_ttft_ms"}),
     "field 'median_ttft_ms' is missing"),
    (json.dumps(VLLM | {"median_ttft_ms": 0.0}), "'median_ttft_ms' = 0.0 must be a number > 0"),
    (json.dumps(processed(VLLM, gpus={"tp": 4}) | {"tput_per_gpu": 0}),
     "'tput_per_gpu' = 0 must be a number > 0"),
    (json.dumps({k: v for k, v in processed(VLLM, gpus={"tp": 4}).items()
                 if k != "median_ttft"}), "field 'median_ttft' is missing"),
    # the concurrency a prediction is matched on (a vLLM file without it: an open-loop run)
    (json.dumps({k: v for k, v in VLLM.items() if k != "max_concurrency"}),
     "field 'max_concurrency' is missing (vllm bench serve --max-concurrency N"),
    # GPU counts and parallel degrees: whole numbers >= 1, in range
    (json.dumps(processed(VLLM, gpus={"tp": 4}) | {"tp": 0}), "field 'tp' = 0 must be a whole number in [1,"),
    (json.dumps(VLLM | {"tp": "0"}), "field 'tp' = '0' must be a whole number in [1,"),
    (json.dumps(processed(VLLM, gpus={"tp": 4}) | {"tp": 10 ** 30}), "field 'tp' = 1000000000"),
    (json.dumps(VLLM | {"completed": 10 ** 400}), "field 'completed'"),
    ('{"completed": 1' + "0" * 5000 + "}", "out of range"),
    (json.dumps(VLLM | {"duration": 1e400}), "field 'duration' = inf"),
    (json.dumps(VLLM | {"range_ratio": "1.5"}), "'range_ratio' = '1.5' must be a fraction"),
    # nesting deep enough to exhaust the parser's stack
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
    (json.dumps(VLLM | {"x": [[[[{"a": "]]]"}]]]]}) + "\n" + "{" * 5000, "nested deeper"),
])
def test_a_bad_file_is_one_line_naming_file_field_and_value(tmp_path, text, message):
    f = tmp_path / "bad_result.json"
    f.write_text(text)
    with pytest.raises(SpecError) as exc:
        read_bench_results(f)
    line = str(exc.value)
    assert message in line and "bad_result.json" in line and "\n" not in line


def test_missing_paths_and_empty_folders_are_spec_errors(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        read_bench_results(tmp_path / "nope.json")
    with pytest.raises(SpecError, match="holds no"):
        read_bench_results(tmp_path)
    with pytest.raises(SpecError, match="--num-gpus"):
        read_bench_results(write(tmp_path / "r.json", VLLM), num_gpus=0)


# --------------------------------------------------------------------------------------------
# comparing
# --------------------------------------------------------------------------------------------

PRED = {4: dict(tput=600.0, out=70.0, ttft=900.0, tpot=10.0),
        8: dict(tput=1000.0, out=115.0, ttft=1100.0, tpot=12.5),
        16: dict(tput=1400.0, out=160.0, ttft=1500.0, tpot=16.0)}
MEAS = {4: dict(tput=508.0, out=56.5, ttft=1180.5, tpot=9.2),
        8: dict(tput=903.0, out=100.4, ttft=1250.0, tpot=11.6),
        64: dict(tput=2900.0, out=322.0, ttft=3100.0, tpot=30.1)}


def frame(points: dict, *, gpus: float = 4.0, isl: float = 8192.0) -> pd.DataFrame:
    return pd.DataFrame([dict(max_concurrency=c, num_gpus=gpus, isl=isl, osl=1024.0,
                              total_token_throughput_per_gpu=v["tput"],
                              total_token_throughput=v["tput"] * gpus,
                              output_throughput=v["out"], median_ttft_ms=v["ttft"],
                              median_tpot_ms=v["tpot"], interactivity=1000.0 / v["tpot"],
                              source=f"run-c{c}.json") for c, v in points.items()])


def test_compare_gives_ln_errors_per_point_and_keeps_unmatched_rows():
    import xarray as xr

    # the prediction as bench returns it: a Dataset over concurrency, then to_dataframe()
    pred = frame(PRED).drop(columns="source").set_index("max_concurrency")
    ds = xr.Dataset.from_dataframe(pred).rename({"max_concurrency": "concurrency"})
    ds["max_concurrency"] = ds["concurrency"]
    df = compare_results(ds.to_dataframe(), frame(MEAS))
    assert df.attrs["throughput_metric"] == "total_token_throughput_per_gpu"
    assert df.attrs["keys"] == ["max_concurrency", "isl", "osl"]
    assert list(df["max_concurrency"]) == [4, 8, 64]
    assert list(df["matched"]) == [True, True, False]
    assert list(df["source"]) == ["run-c4.json", "run-c8.json", "run-c64.json"]
    for i, c in enumerate((4, 8)):
        p, m = PRED[c], MEAS[c]
        row = df.iloc[i]
        assert row["total_token_throughput_per_gpu_predicted"] == p["tput"]
        assert row["total_token_throughput_per_gpu_measured"] == m["tput"]
        for col, key in (("total_token_throughput_per_gpu", "tput"), ("output_throughput", "out"),
                         ("median_ttft_ms", "ttft"), ("median_tpot_ms", "tpot")):
            assert row[f"{col}_abs_ln"] == pytest.approx(abs(math.log(p[key] / m[key])), **TIGHT)
        assert row["interactivity_abs_ln"] == pytest.approx(abs(math.log(m["tpot"] / p["tpot"])),
                                                            **TIGHT)
    assert math.isnan(df.iloc[2]["median_ttft_ms_predicted"])
    assert math.isnan(df.iloc[2]["median_ttft_ms_abs_ln"])

    s = summarize_comparison(df)
    assert (s["n_points"], s["n_unmatched"], s["unmatched_concurrency"]) == (2, 1, [64.0])
    t = s["metrics"]["median_ttft_ms"]
    e4, e8 = abs(math.log(900 / 1180.5)), abs(math.log(1100 / 1250))
    assert t["n"] == 2 and t["median_abs_ln"] == pytest.approx((e4 + e8) / 2, **TIGHT)
    assert t["worst_abs_ln"] == pytest.approx(e4, **TIGHT) and t["worst_at_concurrency"] == 4
    assert t["geomean_ratio"] == pytest.approx(math.sqrt(900 / 1180.5 * 1100 / 1250), **TIGHT)
    g = s["metrics"]["total_token_throughput_per_gpu"]["geomean_ratio"]
    assert g == pytest.approx(math.sqrt(600 / 508 * 1000 / 903), **TIGHT) and g > 1


def test_compare_without_gpu_counts_uses_total_throughput_and_other_lengths_do_not_match():
    meas = frame(MEAS)
    meas["total_token_throughput_per_gpu"] = math.nan       # a per-GPU figure not given
    df = compare_results(frame(PRED), meas)
    assert df.attrs["throughput_metric"] == "total_token_throughput"
    assert df.loc[0, "total_token_throughput_abs_ln"] == pytest.approx(
        abs(math.log(600 * 4 / (508 * 4))), **TIGHT)
    # a measured run at other lengths is reported, not compared
    df = compare_results(frame(PRED), frame(MEAS, isl=1024.0))
    assert not df["matched"].any() and len(df) == 3
    # measured without lengths: matched on concurrency alone
    df = compare_results(frame(PRED), frame(MEAS).drop(columns=["isl", "osl"]))
    assert df.attrs["keys"] == ["max_concurrency"] and df["matched"].sum() == 2


def test_compare_refuses_a_prediction_with_a_point_twice():
    pred = pd.concat([frame(PRED), frame(PRED)])
    with pytest.raises(SpecError, match="appears twice"):
        compare_results(pred, frame(MEAS))


def test_compare_reads_back_a_vllm_file_against_itself(tmp_path):
    """--compare on a hand-made vLLM result reproduces its numbers: a prediction equal to the
    file has zero error on every metric."""
    meas = read_bench_results(write(tmp_path / "r.json", VLLM), num_gpus=4)
    pred = [dict(concurrency=4, total_token_throughput_per_gpu=3317.6 / 4,
                 output_throughput=368.48, median_ttft_ms=1180.5, median_tpot_ms=9.2)]
    df = compare_results(pd.DataFrame(pred), meas)
    s = summarize_comparison(df)
    assert s["n_points"] == 1
    for m, v in s["metrics"].items():
        assert v["n"] == 1 and v["worst_abs_ln"] == pytest.approx(0.0, abs=1e-12), m
