"""Small-batch floors from the code that produced the measured tables and runs the model.

Reference values: NVIDIA's measured GEMM latencies (hardware/measured/B200/gemm.csv,
aiconfigurator 0.12.0) and hand counts of the small kernels of one layer from
configs/realism.toml [other_kernels] (sources beside each key there).
"""

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.axes import STRUCT_AXES
from inference_factory.engine import measured as M
from inference_factory.engine.geometry import main_layers, validate_struct
from inference_factory.engine.ops import other_kernel_count
from inference_factory.specs.realism import load_realism


def _count(model, device, tokens, **struct):
    m, hw = inf.load_model(model), inf.load_hardware(device)
    g = validate_struct(m, hw, dict(STRUCT_AXES, **struct), load_realism())
    return float(np.asarray(other_kernel_count(g, main_layers(m), np.asarray(tokens))))


def test_a_measured_gemm_shape_costs_its_own_measurement():
    """B200 FP8 GEMM m=1 n=1024 k=8192 (Llama-70B's TP8 o_proj-sized weight): 10.37 us measured
    (sgl-kernel). A smaller weight measured slower (n=256 k=7168: 13.95 us) no longer lifts it:
    the GEMM envelope runs along the tokens only."""
    hw = inf.load_hardware("B200")
    tabs = M.tables_for(hw)
    curve = tabs.curve("gemm", {"dtype": "fp8"}, {}, {"n": 1024.0, "k": 8192.0})
    t, _ = curve.time_s(lambda m_: M.gemm_roofline_s(hw, "fp8", m_, 1024.0, 8192.0),
                        np.array([1.0]))
    assert float(t[0]) == pytest.approx(10.37e-6, rel=1e-6)
    # along the tokens the envelope holds: m = 16 is never faster than m = 1
    t16, _ = curve.time_s(lambda m_: M.gemm_roofline_s(hw, "fp8", m_, 1024.0, 8192.0),
                          np.array([16.0]))
    assert float(t16[0]) >= float(t[0])


def test_quantisation_kernels_are_in_nvidia_gemm_rows_not_in_aiter_ones():
    backends = load_realism().quantization_timed_with_gemm
    assert M.tables_for(inf.load_hardware("B200")).gemm_times_quantization(backends)
    assert not M.tables_for(inf.load_hardware("MI300X")).gemm_times_quantization(backends)


def test_small_kernel_counts_by_hand():
    """Llama-3.1-70B FP8 (GQA 4 + dense FFN 1, quantised GEMM groups 2 + 1):
    B200 TP8 at one token: 4 - 2 norms in the fused all-reduce + 1 = 3 (quantisation timed
    with the GEMMs); above 2048 tokens the norms run on their own: 5; TP1: 5.
    MI300X TP1 (AITER GEMMs take quantised activations): 4 + 2 + 1 + 1 = 8."""
    fp8 = dict(weight_precision="fp8")
    assert _count("Llama-3.1-70B", "B200", 1.0, tp=8, **fp8) == 3.0
    assert _count("Llama-3.1-70B", "B200", 4096.0, tp=8, **fp8) == 5.0
    assert _count("Llama-3.1-70B", "B200", 1.0, tp=1, **fp8) == 5.0
    assert _count("Llama-3.1-70B", "MI300X", 1.0, tp=1, **fp8) == 8.0
    # MI300X TP8: RCCL all-reduce only, no fused norms: 8 as well
    assert _count("Llama-3.1-70B", "MI300X", 1.0, tp=8, **fp8) == 8.0
    # attention DP: no fused all-reduce (SGLang's condition), the norms stay
    assert _count("DeepSeek-V3", "B200", 1.0, tp=1, dp=8, ep=8) == pytest.approx(
        _count("DeepSeek-V3", "B200", 1.0, tp=1))
