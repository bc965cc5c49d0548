"""Weight-only quantisation: a 4- or 8-bit weight format on a device without its tensor cores
is stored in the format and multiplied at 16 bits (Marlin / MXFP4 x BF16 kernels), costed from
the measured MXFP4 x BF16 MoE rows where the device has them."""

from __future__ import annotations

import pytest

from inference_factory.engine import evaluate
from inference_factory.engine.arrays import evaluate_arrays
from inference_factory.engine.geometry import compute_precision
from inference_factory.errors import SpecError
from inference_factory.specs import load_hardware


def test_compute_precision_per_device():
    h100, b200, a100 = (load_hardware(h) for h in ("H100-SXM", "B200", "A100-80GB-SXM"))
    assert compute_precision(b200, "fp4") == "fp4"           # FP4 tensor cores
    assert compute_precision(h100, "fp4") == "bf16"          # weight-only
    assert compute_precision(h100, "fp8") == "fp8"
    assert compute_precision(a100, "fp8") == "bf16"          # weight-only
    assert compute_precision(h100, "fp32") is None or "fp32" in h100.dense_flop_per_s


def test_ideal_weight_only_does_bf16_math_on_a_quarter_of_the_bytes():
    kw = dict(tp=4, batch_size=8, kv_len=2048, prompt_len=2048, ideal=True)
    bf = evaluate_arrays("Llama-3.1-70B", "H100-SXM", weight_precision="bf16", **kw)
    w4 = evaluate_arrays("Llama-3.1-70B", "H100-SXM", weight_precision="fp4", **kw)
    # the same 16-bit tensor-core rate for the math (independent: FLOPs are precision-free)
    assert float(w4["prefill_compute_s"]) == pytest.approx(float(bf["prefill_compute_s"]),
                                                           rel=1e-9)
    assert float(w4["prefill_flop_per_gpu"]) == pytest.approx(float(bf["prefill_flop_per_gpu"]))
    # weights stored in 4 bits: a quarter of the 16-bit weight bytes (norms stay 16-bit)
    assert float(w4["weight_bytes_per_gpu"]) / float(bf["weight_bytes_per_gpu"]) == \
        pytest.approx(0.25, abs=0.04)


def test_weight_only_at_memory_bound_batch_is_about_twice_as_fast_not_four():
    # serving_facts.md (efoley/inferencesim CALIBRATION.md): INT4 weight-only gives ~2x (not
    # 4x) at memory-bound batch; a check of the composition, not a fit (1.5x-3x)
    kw = dict(tp=4, batch_size=1, kv_len=2048)
    bf = evaluate_arrays("Llama-3.1-70B", "H100-SXM", weight_precision="bf16", **kw)
    w4 = evaluate_arrays("Llama-3.1-70B", "H100-SXM", weight_precision="fp4", **kw)
    gain = float(bf["decode_step_s"]) / float(w4["decode_step_s"])
    assert 1.5 < gain < 3.0


def test_gpt_oss_mxfp4_experts_run_on_hopper_from_the_measured_w4a16_kernel():
    ds = evaluate("gpt-oss-120b", "H100-SXM", tp=1, batch_size=16, kv_len=2048, detail="ops")
    src = ds.decode_op_source.sel(op="moe").item()
    assert src in ("measured", "interpolated")
    # stored in 4 bits like on B200 (the same weight bytes per GPU)
    b200 = evaluate_arrays("gpt-oss-120b", "B200", tp=1, batch_size=16, kv_len=2048)
    assert float(ds.weight_bytes_per_gpu) == pytest.approx(float(b200["weight_bytes_per_gpu"]))
    # the measured kernel: 1,120 us per layer at 16 tokens (H100 moe.csv, w4a16_mxfp4, TP1/EP1,
    # 128 experts, top-4), x 36 layers
    moe = float(ds.decode_op_time_s.sel(op="moe"))
    assert moe == pytest.approx(36 * 1120e-6, rel=0.05)


def test_attention_math_still_needs_its_tensor_cores():
    with pytest.raises(SpecError, match="attention_precision = 'fp4'.*no dense fp4"):
        evaluate_arrays("Llama-3.1-70B", "H100-SXM", tp=4, attention_precision="fp4")
