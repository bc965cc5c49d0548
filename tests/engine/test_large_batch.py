"""Large-batch decode (issue 21, item 6): beyond a measured table's largest shape an op keeps
the efficiency measured at its largest rows (no jump back to the roofline), and the
two-micro-batch decode schedule checked against SGLang's own on/off ablation."""

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import measured as M


@pytest.mark.parametrize("family,exact,nearest,fixed,pure", [
    ("gemm", {"dtype": "fp8_block"}, {}, {"n": 7168.0, "k": 2048.0},
     lambda hw: (lambda m_: M.gemm_roofline_s(hw, "fp8_block", m_, 7168.0, 2048.0))),
    ("moe_wideep", {"phase": "decode", "dtype": "fp8_block"},
     {"hidden_size": 7168, "inter_size": 2048, "topk": 8, "num_experts": 256, "moe_ep": 8}, {},
     lambda hw: (lambda n_: M.moe_roofline_s(hw, "fp8_block", n_, 7168, 2048, 8, 256, 1.0, 8))),
])
def test_efficiency_is_held_above_the_largest_measured_shape(family, exact, nearest, fixed, pure):
    """t(x) / t0(x) beyond the table equals the measured ratio at its largest row: the time is
    the op's roofline times the efficiency measured there (independent reference: the
    table row's own latency over the same roofline formula)."""
    hw = inf.load_hardware("H200-SXM")
    curve = M.tables_for(hw).curve(family, exact, nearest, fixed)
    top = float(np.exp(curve.grid.axes[0][-1]))
    t0 = pure(hw)
    x = np.array([top, 2 * top, 8 * top])
    t, src = curve.time_s(t0, x)
    ratio = t / t0(x)
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
    assert list(src()) == [3, 1, 1]          # measured at the top row, extrapolated beyond


def _decode_gain(batch):
    kw = dict(dp=72, ep=72, redundant_experts=32, batch_size=batch, kv_len=2048)
    on, off = (inf.evaluate("DeepSeek-V3", "H100-SXM", overlap=o, **kw)
               for o in ("two-batch", "none"))
    return float(on.decode_tokens_per_s_per_gpu / off.decode_tokens_per_s_per_gpu)


def test_two_batch_decode_gain_against_sglang_ablation():
    """Check of the schedule, not fitted: SGLang's decode TBO on/off ablation (dev_set.csv row
    "two-batch-overlap, decode 256 tokens/device", SGL_EP: EP72 on H100, 2K input) measured
    +25.5 % at 256 tokens per GPU and -27 % at 32. Setup: 9 nodes EP72 with attention DP, 32
    redundant experts (DeepSeek's count, DS_DAY6; SGLang's decode ran EPLB), KV ~2K, the
    engine's default expert skew. Tolerance 15 % on the gain: the stage-wise pipeline costs
    each stage at the standalone measured kernel times and charges no slowdown for kernels
    sharing the GPU with the overlapped all-to-all (none is measured in the tables), so it
    bounds the gain from above; today 1.42 (+13 %). At 32 tokens the two half-batches must
    lose (floors paid twice), as measured."""
    gain = _decode_gain(256)
    assert abs(np.log(gain / 1.255)) <= np.log(1.15)
    assert _decode_gain(32) < 1.0
