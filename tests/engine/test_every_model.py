"""Every bundled model evaluates on one NVIDIA and one AMD device: finite, positive prefill and
decode throughput and times at one point (or a clean one-line SpecError), so a model file or an
attention kind cannot break silently. The list is read from models/ at collection time: a new
model is checked without editing this file. validation/smoke_all_models.py runs every command on
every model x device; this is its fast core."""

from __future__ import annotations

import math

import pytest

import inference_factory as inf

#: One device per vendor, both of which run FP4, FP8 and BF16 (so each model's shipped
#: precisions run) and hold every bundled model's weights on 8 GPUs but Kimi-K3's on B200
#: (fits is then False, and the throughput is still a finite figure of the point).
DEVICES = ("B200", "MI355X")
POSITIVE = ("decode_tokens_per_s_per_gpu", "decode_tokens_per_s_per_user", "tpot_s",
            "prefill_tokens_per_s_per_gpu", "ttft_s", "weight_bytes_per_gpu",
            "hbm_used_bytes_per_gpu")


@pytest.mark.parametrize("hardware", DEVICES)
@pytest.mark.parametrize("model", inf.list_models())
def test_model_evaluates_on_nvidia_and_amd(model, hardware):
    spec = inf.load_model(model)
    shape = dict(tp=8, ep=8) if spec.is_moe else dict(tp=8)
    try:
        ds = inf.evaluate(model, hardware, batch_size=8, kv_len=8192, prompt_len=8192, **shape)
    except inf.SpecError as exc:                     # a clean refusal: one line naming why
        assert "\n" not in str(exc) and str(exc), exc
        return
    for name in POSITIVE:
        value = float(ds[name].values)
        assert math.isfinite(value) and value > 0, (model, hardware, name, value)
    # one instance of 8 GPUs (dp = 1) decodes 8 sequences: per GPU = per user x 8 / 8 GPUs
    per_gpu = float(ds["decode_tokens_per_s_per_gpu"].values)
    per_user = float(ds["decode_tokens_per_s_per_user"].values)
    assert per_gpu == pytest.approx(per_user * 8 / 8, rel=1e-9)
    assert int(ds["max_batch_size"].values) >= 0


@pytest.mark.parametrize("hardware, dtype, nbytes", [("A100-80GB-SXM", "bf16", 2),
                                                     ("H100-SXM", "fp8", 1)])
def test_fp8_mla_checkpoint_runs_its_absorbed_bmms_at_16_bits_without_fp8_cores(
        hardware, dtype, nbytes):
    """Found by the smoke check: DeepSeek-V3's FP8 checkpoint was refused on A100 ('no dense
    tensor-core rate for fp8') by the absorbed MLA BMMs alone, while every other GEMM runs
    weight-only there. Without FP8 tensor cores the BMMs run at BF16 on weights dequantised
    at load (AIConfigurator measures only BF16 BMM rows on A100); with them, at FP8. By
    hand: W_UK is heads x qk_nope_head_dim x kv_lora_rank = 128 x 128 x 512 elements per
    layer at TP1, W_UV heads x kv_lora_rank x v_head_dim = 128 x 512 x 128."""
    from inference_factory.engine import STRUCT_AXES
    from inference_factory.engine import geometry as Gm
    from inference_factory.engine import ops as O

    m, hw = inf.load_model("DeepSeek-V3"), inf.load_hardware(hardware)
    s = dict(STRUCT_AXES, tp=1, weight_precision="fp8", kv_precision="bf16", expert_skew=0.0)
    g = Gm.validate_struct(m, hw, s, inf.load_realism())
    ops = {o.name: o for o in O.layer_ops(g, Gm.main_layers(m), seqs=1.0, new_tokens=1.0,
                                          cached_tokens=1023.0, kv_len=1024.0,
                                          logit_tokens_per_seq=1.0, phase="decode")}
    for name in ("w_uk", "w_uv"):
        op = ops[name]
        assert op.precision == dtype and op.keys["dtype"] == dtype
        assert float(op.hbm_bytes) == 128 * 128 * 512 * nbytes
    ds = inf.evaluate("DeepSeek-V3", hardware, tp=8, ep=8, batch_size=1)
    assert float(ds["decode_tokens_per_s_per_gpu"].values) > 0
