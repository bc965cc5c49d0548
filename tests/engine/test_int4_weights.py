"""INT4 weight-only (W4A16) experts: Kimi-K2-Thinking's routed experts as its checkpoint ships
them (compressed-tensors int4, group 32, symmetric; aiconfigurator's Kimi-K2.5 config copy),
4 bits plus a BF16 scale per 32 weights = 4.5 bits, multiplied at BF16."""

from __future__ import annotations

import pytest

from inference_factory.engine.geometry import Geom, weight_bytes_per_gpu
from inference_factory.engine.layer_mix import architecture
from inference_factory.engine.precision import compute_precision
from inference_factory.specs import load_hardware, load_model
from inference_factory.specs.realism import load_realism


def test_kimi_k2_thinking_routed_experts_are_int4_and_the_rest_bf16():
    m = load_model("Kimi-K2-Thinking")
    assert (m.weight_precision, m.expert_precision) == ("bf16", "int4")
    g = Geom(m=m, hw=load_hardware("B200"), rl=load_realism(), tp=8, dp=1, ep=8, redundant=0,
             skew=0.0, wprec="bf16", eprec="int4", kvprec="bf16", aprec="bf16",
             dispatch_b=1.0, combine_b=2.0, overlap="none", tier="hbm")
    arch = architecture(m)
    h, v = 7168, 163840
    expert = 3 * h * 2048
    routed = 60 * (384 // 8) * expert * (4 + 16 / 32) / 8         # 48 experts per rank
    dense = arch.n_dense_path_params * 2 / 8 + 2 * v * h * 2 / 8    # BF16 over TP 8
    dense += arch.replicated_weight_bytes(8, 2.0)                   # MLA latents on every rank
    assert weight_bytes_per_gpu(g, with_mtp=False) == pytest.approx(routed + dense, rel=1e-12)
    # same Kimi-K2 shape: 1.03 T parameters with 60 x 384 routed experts
    assert arch.total_params == pytest.approx(
        architecture(load_model("Kimi-K2")).total_params, rel=1e-12)


@pytest.mark.parametrize("device", ["B200", "H200", "MI355X"])
def test_int4_weights_multiply_at_bf16(device):
    assert compute_precision(load_hardware(device), "int4") == "bf16"
