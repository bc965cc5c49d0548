"""Tests of the command-line interface (``inference-factory`` / ``python -m inference_factory``).

Covers: hardware/models list and show (text and JSON, alias lookup); ``roofline`` agrees with
:func:`inference_factory.evaluate` at the same point, ``--ideal`` and precision options;
every bad input exits with status 2 and exactly one ``error: ...`` line on stderr, without a
traceback; a malformed spec file given by path names the file and the key.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import inference_factory as inf
from inference_factory.engine.layer_mix import architecture
from inference_factory import units
from inference_factory.cli import cli, main

from tests.cli_helpers import fails, ok

REPO = Path(__file__).resolve().parents[2]
H100_TOML = REPO / "hardware" / "H100-SXM.toml"


@pytest.fixture
def run():
    runner = CliRunner()

    def _run(*args: str):
        return runner.invoke(cli, list(args), prog_name="inference-factory")

    return _run


def roofline_json(run, *args: str) -> dict:
    return json.loads(ok(run("roofline", *args, "--json")))


# ============================================================================================
# hardware
# ============================================================================================


def test_hardware_list_names_key_figures_and_descriptions(run):
    out = ok(run("hardware", "list"))
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["name", "vendor", "HBM"]      # human headers, 2 lines
    assert lines[1].split()[:2] == ["GB", "TB/s"]
    rows = json.loads(ok(run("hardware", "list", "--json")))["rows"]
    # one row per bundled file, in the library's order, with the spec's own figures
    assert [r["name"] for r in rows] == inf.list_hardware()
    for r in rows:
        hw = inf.load_hardware(r["name"])
        assert r["description"] == hw.description
        assert r["hbm_gb"] == pytest.approx(hw.hbm_capacity_bytes / 1e9)
        assert r["bf16_tflop_per_s"] == pytest.approx(hw.dense_flop_per_s["bf16"] / 1e12)
    table_names = [line.split()[0] for line in lines[3:] if line and not line.startswith(" ")]
    assert table_names == inf.list_hardware()


@pytest.mark.parametrize("alias", ["h800", "H800", "H800-SXM", "h800-sxm5"])
def test_hardware_show_alias_case_insensitive(run, alias):
    out = ok(run("hardware", "show", alias))
    assert out.splitlines()[0].startswith("H800-SXM")


def test_hardware_show_vendor_units(run):
    out = ok(run("hardware", "show", "h800"))
    hw = inf.load_hardware("H800-SXM")

    def row(label: str) -> str:
        return next(line for line in out.splitlines() if line.strip().startswith(label))

    # TFLOP/s per precision, from the file's own numbers
    assert re.search(r"\bbf16\s+989 TFLOP/s", out)
    assert re.search(r"\bfp8\s+1979 TFLOP/s", out)
    assert "fp4" not in row("bf16")
    assert "80 GB" in row("HBM capacity")
    assert "3352 GB/s" in row("HBM bandwidth")
    scale_up = row("scale-up bandwidth")
    assert "200 GB/s" in scale_up and "one direction" in scale_up
    assert "8 GPUs" in row("scale-up domain")
    assert "400 Gbit/s" in row("scale-out bandwidth")
    assert "700 W" in row("TDP")
    # node values are placeholders in this file: flagged
    assert hw.node_values_assumed
    assert "2048 GB" in row("host DRAM") and "(assumed)" in row("host DRAM")
    assert "30 TB" in row("NVMe ") and "(assumed)" in row("NVMe ")
    # price with its date, sources and notes
    assert "2 USD/GPU-hour (2025-02)" in row("rental")
    flat = " ".join(out.split())         # long sources and notes wrap within 100 columns
    assert "sources" in out and " ".join(hw.sources["scale_up"].split()) in flat
    assert "notes" in out and " ".join(hw.notes["tdp"].split()) in flat
    assert hw.path in out


def test_hardware_show_measured_and_all_prices(run):
    out = ok(run("hardware", "show", "H100"))
    assert re.search(r"\bbf16\s+794.5 TFLOP/s", out)  # measured matmul rate
    assert "1.3 USD/GPU-hour (2026-04)" in out          # rental and TCO, dated
    out = ok(run("hardware", "show", "B300"))
    assert "45000 USD/GPU" in out                        # capex
    assert re.search(r"\bfp4\s+\d+ TFLOP/s", out)


def test_hardware_show_json_roundtrip(run):
    data = json.loads(ok(run("hardware", "show", "h800", "--json")))
    assert data == json.loads(json.dumps(inf.load_hardware("H800-SXM").to_dict()))
    assert data["name"] == "H800-SXM"
    assert data["scale_up_bw_bytes_per_s"] == pytest.approx(200 * units.GB)


def test_hardware_show_by_path_without_assumed_node(run, tmp_path):
    text = H100_TOML.read_text().replace("assumed = true", "assumed = false")
    path = tmp_path / "custom.toml"
    path.write_text(text)
    out = ok(run("hardware", "show", str(path)))
    assert out.startswith("H100-SXM")
    assert "(assumed)" not in out


# ============================================================================================
# models
# ============================================================================================


def test_models_list(run):
    out = ok(run("models", "list"))
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "KIND"]
    assert [line.split()[0] for line in lines[2:]] == inf.list_models()
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    ds = rows["DeepSeek-V3"]
    assert ds[1] == "MoE"
    assert float(ds[-2]) == pytest.approx(671, abs=1)      # model card: 671B total
    assert float(ds[-1]) == pytest.approx(37, abs=1)       # model card: 37B active
    llama = rows["Llama-3.1-8B"]
    assert llama[1] == "dense" and llama[-2] == llama[-1] == "8.0"
    m = inf.load_model("Mixtral-8x7B")
    assert rows["Mixtral-8x7B"][-2:] == [f"{architecture(m).total_params / 1e9:.1f}",
                                         f"{architecture(m).active_params() / 1e9:.1f}"]


def test_models_show_text(run):
    out = ok(run("models", "show", "deepseek-r1"))            # alias, lower case
    m = inf.load_model("DeepSeek-V3")
    assert out.startswith("DeepSeek-V3")
    assert "mla" in out and "KV LoRA rank" in out
    assert re.search(r"routed experts\s+256", out)
    assert f"{architecture(m).total_params / 1e9:.2f} B" in out
    assert f"{architecture(m).active_params() / 1e9:.2f} B" in out
    assert re.search(r"KV bytes/token bf16\s+70,272\b", out)
    assert f"{architecture(m).kv_bytes_per_token('fp8'):,.0f}" in out


def test_models_show_json(run):
    data = json.loads(ok(run("models", "show", "DeepSeek-V3", "--json")))
    ref = architecture(inf.load_model("DeepSeek-V3")).to_dict()
    assert data["derived"] == ref["derived"]
    assert data["n_routed_experts"] == 256 and data["attention_kind"] == "mla"


# ============================================================================================
# roofline
# ============================================================================================


def _assert_matches(data: dict, ds) -> None:
    for k in ds.data_vars:
        want = ds[k].item()
        if isinstance(want, float):
            assert data[k] == pytest.approx(want, rel=1e-12), k
        else:
            assert data[k] == want, k


def test_roofline_json_matches_evaluate(run):
    args = ["--model", "Llama-3.1-70B", "--hardware", "h100", "--tp", "8", "--batch-size", "64",
            "--kv-len", "2048", "--prompt-len", "4096", "--cache-hit-rate", "0.25"]
    data = roofline_json(run, *args)
    ds = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, batch_size=64, kv_len=2048,
                      prompt_len=4096, cache_hit_rate=0.25)
    assert data["decode_step_s"] == ds["decode_step_s"].item()
    _assert_matches(data, ds)
    assert set(ds.data_vars) <= set(data)
    assert data["model"] == "Llama-3.1-70B" and data["hardware"] == "H100-SXM"
    assert data["attrs"]["mode"] == "measured"
    assert data["attrs"]["inference_factory_version"] == inf.__version__
    assert data["units"]["decode_step_s"] == "s"
    assert isinstance(data["fits"], bool) and isinstance(data["decode_binding_resource"], str)
    assert data["inputs"]["tp"] == 8


def test_roofline_defaults_are_engine_defaults(run):
    data = roofline_json(run, "-H", "H100-SXM")     # the library's default device
    ds = inf.evaluate()
    assert data["model"] == "Llama-3.1-8B" and data["hardware"] == "H100-SXM"
    _assert_matches(data, ds)
    # nothing was passed on: precisions stay the engine's (model's) defaults
    assert {k for k in data["inputs"] if k.endswith("_precision")} == set()


def test_roofline_moe_options_and_default_precision(run):
    # DeepSeek-V3 is FP8; the engine default must be kept when no precision is given
    args = ["-m", "DeepSeek-V3", "-H", "H800", "--dp", "16", "--ep", "16", "--batch-size", "32",
            "--kv-len", "4096", "--draft-depth", "1", "--acceptance-rate", "0.7",
            "--overlap", "two-batch", "--redundant-experts", "16", "--expert-skew", "0.5"]
    data = roofline_json(run, *args)
    ds = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=16, ep=16, batch_size=32, kv_len=4096,
                      draft_depth=1, acceptance_rate=0.7, overlap="two-batch",
                      redundant_experts=16, expert_skew=0.5)
    _assert_matches(data, ds)
    assert data["tokens_per_step"] == pytest.approx(1.7)
    bf16 = roofline_json(run, *args, "--weight-precision", "bf16")
    ds16 = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=16, ep=16, batch_size=32, kv_len=4096,
                        draft_depth=1, acceptance_rate=0.7, overlap="two-batch",
                        redundant_experts=16, expert_skew=0.5, weight_precision="bf16")
    _assert_matches(bf16, ds16)
    assert bf16["weight_bytes_per_gpu"] > data["weight_bytes_per_gpu"]


def test_roofline_precision_and_cache_options(run):
    args = ["-H", "H100-SXM", "--kv-precision", "fp8", "--attention-precision", "fp8",
            "--cache-tier", "nvme",
            "--cache-hit-rate", "0.5", "--prefill-batch-size", "2"]
    data = roofline_json(run, *args)
    ds = inf.evaluate(kv_precision="fp8", attention_precision="fp8", cache_tier="nvme",
                      cache_hit_rate=0.5, prefill_batch_size=2)
    _assert_matches(data, ds)
    assert data["prefill_restore_s"] > 0


def test_roofline_draft_model(run):
    data = roofline_json(run, "-m", "Llama-3.1-70B", "-H", "H100-SXM", "--tp", "4",
                         "--draft-depth", "3",
                         "--draft-model", "Llama-3.1-8B")
    ds = inf.evaluate("Llama-3.1-70B", tp=4, draft_depth=3, draft_model="Llama-3.1-8B")
    _assert_matches(data, ds)
    assert data["decode_draft_s"] > 0


def test_roofline_ideal(run):
    args = ["-m", "Llama-3.1-70B", "-H", "H100-SXM", "--tp", "4", "--batch-size", "16"]
    real = roofline_json(run, *args)
    ideal = roofline_json(run, *args, "--ideal")
    assert real["attrs"]["mode"] == "measured"
    assert ideal["attrs"]["mode"] == "ideal"
    assert ideal["decode_step_s"] <= real["decode_step_s"]
    assert ideal["prefill_step_s"] <= real["prefill_step_s"]
    assert ideal["decode_step_s"] == inf.evaluate("Llama-3.1-70B", tp=4, batch_size=16,
                                                  ideal=True)["decode_step_s"].item()
    assert "[ideal]" in ok(run("roofline", *args, "--ideal")).splitlines()[0]


def test_roofline_text_report(run):
    out = ok(run("roofline", "-m", "Llama-3.1-8B", "-H", "H100-SXM", "--batch-size", "8"))
    ds = inf.evaluate("Llama-3.1-8B", "H100-SXM", batch_size=8)
    v = {k: ds[k].item() for k in ds.data_vars}
    assert out.splitlines()[0].startswith("Llama-3.1-8B on H100-SXM  [measured]")
    for section in ("decode", "prefill", "memory per GPU"):
        assert any(line.startswith(section) for line in out.splitlines()), section
    decode = out.split("decode (one step)")[1].split("prefill (one pass)")[0]
    prefill = out.split("prefill (one pass)")[1].split("memory per GPU")[0]

    def ms(block: str, label: str) -> float:
        m = re.search(rf"^\s+{label}\s+([\d,.]+) ms", block, re.M)
        assert m, label
        return float(m.group(1).replace(",", ""))

    for r in ("compute", "memory", "comm", "overhead", "draft", "step"):
        assert ms(decode, r) == pytest.approx(v[f"decode_{r}_s"] * 1e3, abs=1e-3)
    assert ms(decode, "TPOT") == pytest.approx(v["tpot_s"] * 1e3, abs=1e-3)
    for r in ("compute", "memory", "comm", "overhead", "restore", "step"):
        assert ms(prefill, r) == pytest.approx(v[f"prefill_{r}_s"] * 1e3, abs=1e-3)
    assert ms(prefill, "TTFT") == pytest.approx(v["ttft_s"] * 1e3, abs=1e-3)
    assert re.search(rf"binding resource\s+{v['decode_binding_resource']}\b", decode)
    assert re.search(rf"binding resource\s+{v['prefill_binding_resource']}\b", prefill)
    assert re.search(rf"{v['decode_binding_resource']}\s+[\d.]+ ms  <- binding", decode)
    assert f"{v['decode_tokens_per_s_per_gpu']:,.1f}" in decode
    assert f"{v['decode_tokens_per_s_per_user']:,.1f}" in decode
    assert f"{v['prefill_tokens_per_s_per_gpu']:,.1f}" in prefill
    assert "expert efficiency" in decode and "tokens per step" in decode
    mem = out.split("memory per GPU")[1]
    assert f"{v['weight_bytes_per_gpu'] / 1e9:.3f} GB" in mem
    assert f"{v['hbm_used_bytes_per_gpu'] / 1e9:.3f} GB of 80 GB" in mem
    assert re.search(r"fits\s+yes", mem)
    assert re.search(rf"max batch size\s+{v['max_batch_size']:,.0f}\b", mem)


def test_roofline_text_reports_not_fitting(run):
    out = ok(run("roofline", "-m", "Llama-3.1-405B", "-H", "H100-SXM"))
    assert re.search(r"fits\s+NO", out)


# ============================================================================================
# errors: one line on stderr, status 2, no traceback
# ============================================================================================


def test_unknown_hardware(run):
    line = fails(run("hardware", "show", "TPU-v9"))
    assert "'TPU-v9'" in line and "available" in line
    for name in ("H100-SXM", "H800-SXM", "MI300X"):
        assert name in line
    line = fails(run("roofline", "--hardware", "TPU-v9"))
    assert "'TPU-v9'" in line and "H800-SXM" in line


def test_unknown_model(run):
    line = fails(run("models", "show", "GPT-7"))
    assert "'GPT-7'" in line and "available" in line
    assert "DeepSeek-V3" in line and "Llama-3.1-8B" in line
    line = fails(run("roofline", "--model", "GPT-7"))
    assert "'GPT-7'" in line and "DeepSeek-V3" in line


def test_precision_the_device_lacks(run):
    # attention math needs its tensor cores (weights in a format the device lacks run
    # weight-only: tests/engine/test_weight_only.py)
    line = fails(run("roofline", "--hardware", "H100-SXM", "--attention-precision", "fp4"))
    assert "'fp4'" in line and "H100-SXM" in line
    assert "['bf16', 'fp16', 'fp8']" in line   # what the device lists


def test_unknown_precision_is_a_usage_error(run):
    line = fails(run("roofline", "--kv-precision", "int3"))
    assert "--kv-precision" in line and "int3" in line


def test_cache_hit_rate_out_of_range(run):
    line = fails(run("roofline", "--cache-hit-rate", "1.5"))
    assert "cache_hit_rate" in line and "1.5" in line
    assert re.search(r"\[0, 1", line)  # the allowed range


@pytest.mark.parametrize("args, words", [
    (["--tp", "0"], ["tp", "0"]),
    (["--dp", "-1"], ["dp", "-1"]),
    (["--ep", "2"], ["ep", "2"]),                                    # dense model / divisibility
    (["--batch-size", "0"], ["batch_size", "0"]),
    (["--draft-depth", "2"], ["draft"]),                             # Llama has no MTP module
    (["--draft-depth", "1.5", "-m", "DeepSeek-V3", "-H", "H800"], ["draft_depth", "1.5"]),
    (["--expert-skew", "9", "-m", "Mixtral-8x7B"], ["expert_skew", "9"]),
    (["--tp", "two"], ["--tp", "two"]),                              # click: not an integer
    (["--overlap", "three-batch"], ["--overlap", "three-batch"]),
    (["--cache-tier", "tape"], ["--cache-tier", "tape"]),
    (["--no-such-option"], ["--no-such-option"]),
])
def test_bad_roofline_inputs(run, args, words):
    line = fails(run("roofline", *args))
    for w in words:
        assert w in line, (w, line)


def test_usage_errors_elsewhere(run):
    assert "NAME" in fails(run("hardware", "show"))
    assert "frobnicate" in fails(run("frobnicate"))
    assert "frobnicate" in fails(run("models", "frobnicate"))


def test_help_and_bare_group_are_not_errors(run):
    assert "roofline" in ok(run("--help"))
    assert "--weight-precision" in ok(run("roofline", "--help"))
    assert "list" in ok(run("hardware"))
    assert inf.__version__ in ok(run("--version"))


def _write_bad_hardware(tmp_path: Path, old: str, new: str) -> Path:
    text = H100_TOML.read_text()
    assert old in text
    path = tmp_path / "bad-gpu.toml"
    path.write_text(text.replace(old, new, 1))
    return path


def test_bad_spec_file_unknown_key(run, tmp_path):
    path = _write_bad_hardware(tmp_path, "hbm_capacity_gb = 80",
                               "hbm_capacity_gb = 80\nhbm_capacity_gib = 74.5")
    for args in (["hardware", "show", str(path)], ["roofline", "--hardware", str(path)]):
        line = fails(run(*args))
        assert str(path) in line and "hbm_capacity_gib" in line and "known key" in line


def test_bad_spec_file_negative_value(run, tmp_path):
    path = _write_bad_hardware(tmp_path, "hbm_capacity_gb = 80", "hbm_capacity_gb = -80")
    line = fails(run("roofline", "--hardware", str(path)))
    assert str(path) in line and "hbm_capacity_gb" in line and "-80" in line and "in (0, " in line


def test_bad_spec_file_not_toml_and_missing(run, tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("name = \n[[[")
    line = fails(run("hardware", "show", str(path)))
    assert str(path) in line and "TOML" in line
    line = fails(run("models", "show", str(tmp_path / "absent.toml")))
    assert "absent.toml" in line and "not found" in line


def test_main_returns_status_without_exiting():
    assert cli.main(["hardware", "list"], standalone_mode=False) == 0
    assert cli.main(["roofline", "--tp", "0"], standalone_mode=False) == 2
    with pytest.raises(SystemExit) as exc:
        main(["roofline", "--tp", "0"])
    assert exc.value.code == 2


# ============================================================================================
# the real process: python -m inference_factory
# ============================================================================================


def test_python_dash_m_end_to_end(tmp_path):
    ok_proc = subprocess.run(
        [sys.executable, "-m", "inference_factory", "roofline", "-m", "DeepSeek-V3", "-H", "h800",
         "--dp", "8", "--ep", "8", "--batch-size", "16", "--json"],
        capture_output=True, text=True, timeout=120)
    assert ok_proc.returncode == 0, ok_proc.stderr
    data = json.loads(ok_proc.stdout)
    ds = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=8, ep=8, batch_size=16)
    assert data["decode_step_s"] == ds["decode_step_s"].item()
    assert math.isfinite(data["tpot_s"])

    bad = subprocess.run(
        [sys.executable, "-m", "inference_factory", "roofline", "-H", "H100-SXM",
         "--attention-precision", "fp4"],
        capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert "Traceback" not in bad.stderr
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: ")
    assert "'fp4'" in bad.stderr and "H100-SXM" in bad.stderr


def test_roofline_ops_and_realism(run):
    """--ops lists every operation with its time, resource and source; --realism roofline
    keeps every op on the roofline; the op times of a sequential step add up to it."""
    out = ok(run("roofline", "-m", "Llama-3.1-8B", "-H", "H200-SXM", "--batch-size", "32",
                 "--ops"))
    assert "decode operations (time per step)" in out and "prefill operations" in out
    for name in ("qkv", "attention", "o_proj", "ffn_gate_up", "ffn_down", "lm_head"):
        assert f"\n{name} " in out
    data = roofline_json(run, "-m", "Llama-3.1-8B", "-H", "H200-SXM", "--batch-size", "32",
                         "--ops", "--realism", "roofline")
    assert data["attrs"]["mode"] == "roofline"
    assert set(data["decode_op_source"]) == {"roofline"}
    assert sum(data["decode_op_time_s"]) == pytest.approx(data["decode_step_s"], rel=1e-9)
    measured = roofline_json(run, "-m", "Llama-3.1-8B", "-H", "H200-SXM", "--batch-size", "32",
                             "--ops")
    assert {"measured", "interpolated"} & set(measured["decode_op_source"])


def test_non_utf8_and_non_finite_inputs_are_one_line_errors(run, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'name = "\xff\xfe"\n')
    for args in (["hardware", "show", str(bad)], ["models", "show", str(bad)],
                 ["compare", "--config", str(bad)]):
        res = run(*args)
        assert res.exit_code == 2 and "not a UTF-8 text file" in res.output
        assert "Traceback" not in res.output
    for value in ("inf", "nan"):
        res = run("roofline", "--kv-len", value, "--json")
        assert res.exit_code == 2 and "must be a finite number" in res.output
