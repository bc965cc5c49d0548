"""One precision, one costing (issue 21): a precision reaches the measured tables the same way
whether the model file declares it (a user's own quantised checkpoint) or an ``evaluate``
argument asks for it. Reference: the same call on the bundled file with the argument; the two
must agree op by op (times and source labels), exactly, since they are one computation."""

import re
from pathlib import Path

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.errors import SpecError
from inference_factory.specs import list_models, load_model
from inference_factory.specs.models import _parse_model

HW = "B200"          # FP8 and FP4 tensor cores, and measured tables of every family


def _copy(model, tmp_path, prec):
    """The model's file with weights and experts stored in ``prec``: a user's checkpoint. A
    format line of the original precision no longer applies (a user's file would state its
    own format or take the default), so it is dropped where the precision changes."""
    m = load_model(model)
    text = Path(m.path).read_text()
    text = re.sub(r'^weight_precision = .*$', f'weight_precision = "{prec}"', text, flags=re.MULTILINE)
    text = re.sub(r'^expert_precision = .*$', f'expert_precision = "{prec}"', text, flags=re.MULTILINE)
    for key, old in (("weight_format", m.weight_precision), ("expert_format", m.expert_precision)):
        if old != prec:
            text = re.sub(rf'^{key} = .*$\n', "", text, flags=re.MULTILINE)
    path = tmp_path / f"{m.name}.toml"
    path.write_text(text)
    return _parse_model(path)


def _layout(m):
    return dict(tp=8, ep=8) if m.is_moe else dict(tp=8)


@pytest.mark.parametrize("prec", ["bf16", "fp8", "fp4"])
@pytest.mark.parametrize("model", list_models())
def test_file_and_argument_precision_cost_alike(model, prec, tmp_path):
    m = load_model(model)
    kw = dict(_layout(m), batch_size=32, kv_len=2048, prompt_len=1024, detail="ops")
    by_arg = inf.evaluate(model, HW, weight_precision=prec, moe_precision=prec, **kw)
    by_file = inf.evaluate(_copy(model, tmp_path, prec), HW, **kw)
    for phase in ("decode", "prefill"):
        np.testing.assert_array_equal(by_arg[f"{phase}_op_source"].values,
                                      by_file[f"{phase}_op_source"].values)
        np.testing.assert_allclose(by_arg[f"{phase}_op_time_s"].values,
                                   by_file[f"{phase}_op_time_s"].values, rtol=1e-12)


def test_fp4_dense_gemms_are_measured_from_file_and_argument(tmp_path):
    """The issue's case: Llama-3.1-70B on B200 TP8, batch 32, KV 2048 at FP4 reads the NVFP4
    GEMM table both ways (before the fix a file declaring fp4 put every GEMM on the
    roofline: 824 against 538 tok/s/GPU)."""
    kw = dict(tp=8, batch_size=32, kv_len=2048, detail="ops")
    by_arg = inf.evaluate("Llama-3.1-70B", HW, weight_precision="fp4", **kw)
    by_file = inf.evaluate(_copy("Llama-3.1-70B", tmp_path, "fp4"), HW, **kw)
    for ds in (by_arg, by_file):
        src = dict(zip(ds.op.values, ds.decode_op_source.values))
        assert all(src[o] != "roofline" for o in ("qkv", "o_proj", "ffn_gate_up", "ffn_down"))
    assert float(by_file.decode_tokens_per_s_per_gpu) == pytest.approx(
        float(by_arg.decode_tokens_per_s_per_gpu), rel=1e-12)


def test_native_formats_are_kept():
    """The bundled checkpoints' own formats: DeepSeek-V3 128x128 block FP8, gpt-oss MXFP4
    experts (their model cards); another precision takes that precision's default format."""
    ds, oss = load_model("DeepSeek-V3"), load_model("gpt-oss-120b")
    assert ds.quant_format("fp8") == "fp8_block" and ds.quant_format("fp4") == "nvfp4"
    assert oss.quant_format("fp4", experts=True) == "mxfp4"
    assert oss.quant_format("fp4") == "nvfp4" and oss.quant_format("bf16") == "bf16"
    assert load_model("Llama-3.1-70B").quant_format("fp8") == "fp8"


def test_format_of_another_precision_is_rejected(tmp_path):
    text = Path(load_model("DeepSeek-V3").path).read_text().replace(
        'weight_precision = "fp8"', 'weight_precision = "fp4"').replace(
        'expert_precision = "fp8"', 'expert_precision = "fp4"')
    path = tmp_path / "DeepSeek-V3.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match=r"weight_format = 'fp8_block' .* allowed \['nvfp4', 'mxfp4'\]"):
        _parse_model(path)
