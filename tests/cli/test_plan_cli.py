"""``plan --precision`` on the command line: profiles as users state them, one-line errors, the
footing in the table and the JSON, and the emitted config naming an explicit profile."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from inference_factory.cli import cli
from inference_factory.factory.config import load_config

from tests.cli_helpers import fails, ok

BASE = ["plan", "--isl", "4096", "--osl", "1024", "--tpot", "100ms", "-a", "batch_size=16,64",
        "-a", "draft_depth=0", "-a", "prefill_batch_size=1"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


def test_a_dense_model_at_fp8_from_the_command_line_with_its_footing():
    obj = json.loads(ok(run(*BASE, "-m", "Llama-3.1-70B", "-H", "B200", "-p", "tp=8",
                            "--precision", "fp8-weights+fp8-kv", "--json")))
    rec = obj["recommendations"][0]
    assert rec["precision"] == "fp8-weights+fp8-kv"
    assert (rec["weight_precision"], rec["kv_precision"]) == ("fp8", "fp8")
    assert rec["footing"] in ("measured", "extrapolated", "partly measured")
    assert 0 < rec["measured_share"] <= 1
    assert obj["request"]["precision"] == ["fp8-weights+fp8-kv"]


def test_the_table_shows_each_device_footing_and_the_refusals():
    text = ok(run(*BASE, "-m", "DeepSeek-V3", "-H", "H200,B200", "-p", "tp=8,ep=8",
                  "--precision", "native", "--precision", "weight=fp8,moe=fp4,kv=fp8"))
    # H200 has no FP4 tensor cores: its FP4 experts run weight-only (MXFP4 x BF16), whose
    # measured rows are at EP 1 only, so the EP-8 grouped GEMM is extrapolated from them
    assert "footing: H200-SXM extrapolated" in text and "B200 measured" in text
    assert ("precision: H200-SXM: experts stored in fp4 and computed at bf16 on H200-SXM "
            "(weight-only") in text
    assert "fp8-dense+fp4-experts+fp8-kv" in text.split("footing:")[0]   # B200's choice


@pytest.mark.parametrize("value, message", [
    ("fp8-kvcache", "--precision 'fp8-kvcache': unknown part 'kvcache'; allowed:"),
    ("fp3-weights", "names precision 'fp3'; allowed: fp32, bf16, fp16, fp8, fp4"),
    ("lowest", "'lowest' is not a profile (native, low, both)"),
])
def test_bad_precision_is_one_line(value, message):
    assert message in fails(run(*BASE, "-H", "B200", "--precision", value))


def test_an_explicit_profile_in_the_emitted_config(tmp_path):
    toml = tmp_path / "plan.toml"
    ok(run(*BASE, "-m", "DeepSeek-V3", "-H", "B200", "-p", "tp=8,ep=8", "--precision",
           "fp8-weights+fp8-kv", "--price", "deepseek-chat-2025-02", "--emit-config",
           str(toml)))
    text = toml.read_text()
    assert "# Precision profile fp8-weights+fp8-kv" in text
    assert load_config(toml).levers.low_precision is False
