"""Prediction bands from component uncertainty (engine/uncertainty.py).

Reference values: the spreads of configs/uncertainty.toml, measured by
calibration/uncertainty_spreads.py (leave-one-out residuals of the measured tables; the
roofline against the tables on NVIDIA). A draw multiplies an op's time by exp(sigma z),
z ~ N(0, 1): over n draws the sample standard deviation of ln(time) estimates sigma with a
relative standard error of 1/sqrt(2(n-1)) (7 % at n = 100); the tolerance 25 % is 3.5 of those.
"""

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import evaluate_arrays
from inference_factory.engine import uncertainty as U
from inference_factory.engine.arrays import _realism
from inference_factory.specs.uncertainty import load_uncertainty

N = 100


def _op_log_draws(hw, op="ffn_down", u=None, **kw):
    """ln(draw / point) of one op's decode time over N draws (one evaluation per draw)."""
    u = (u or load_uncertainty()).pinned()
    rl = _realism(False, None)
    base = dict(model="Llama-3.1-8B", hardware=hw, batch_size=64, kv_len=2048, detail="ops")
    base.update(kw)
    point = float(inf.evaluate(**base)["decode_op_time_s"].sel(op=op))
    out, keys = [], {}
    for j in range(N):
        f = U.OpFactors(u, u.seed, N, np.array([j]), ())
        t = inf.evaluate(**base, realism=U.perturbed(rl, f))["decode_op_time_s"].sel(op=op)
        out.append(np.log(float(t) / point))
        keys.update(f.log)
    return np.asarray(out), keys


def test_measured_op_band_is_its_leave_one_out_spread_when_assumptions_are_pinned():
    u = load_uncertainty()
    sigma = u.family_sigma_ln("H200-SXM", "gemm")
    x, keys = _op_log_draws("H200-SXM")
    assert keys["m|H200-SXM|gemm"] == sigma
    assert np.std(x, ddof=1) == pytest.approx(sigma, rel=0.25)
    # the 80 % band of the op: +-1.2816 sigma in ln
    lo, hi = np.quantile(x, [0.1, 0.9])
    assert (hi - lo) / 2 == pytest.approx(1.2816 * sigma, rel=0.3)


def test_roofline_only_device_gets_the_wider_roofline_spread():
    u = load_uncertainty()
    x_m, _ = _op_log_draws("H200-SXM")
    x_r, keys = _op_log_draws("H20-96GB")
    sigma_r = u.roofline_sigma_ln["gemm"]
    assert keys["r|H20-96GB|gemm"] == sigma_r
    assert sigma_r > 3 * u.family_sigma_ln("H200-SXM", "gemm")
    assert np.std(x_r, ddof=1) == pytest.approx(sigma_r, rel=0.25)
    assert np.std(x_r) > 3 * np.std(x_m)


def test_one_draw_per_family_per_device_is_shared_by_its_ops():
    """Two GEMMs of one device move together (same z); the attention op has its own."""
    x1, _ = _op_log_draws("H200-SXM", op="ffn_down")
    x2, _ = _op_log_draws("H200-SXM", op="o_proj")
    xa, _ = _op_log_draws("H200-SXM", op="attention")
    assert np.corrcoef(x1, x2)[0, 1] > 0.99
    assert abs(np.corrcoef(x1, xa)[0, 1]) < 0.4


def test_bands_are_deterministic_hold_the_point_and_widen_on_roofline_devices():
    kw = dict(tp=8, batch_size=32, kv_len=4096)
    a = evaluate_arrays("Llama-3.1-70B", "H200-SXM", uncertainty=True, **kw)
    b = evaluate_arrays("Llama-3.1-70B", "H200-SXM", uncertainty=True, **kw)
    k = "decode_tokens_per_s_per_gpu"
    assert float(a[k + "_low"]) == float(b[k + "_low"])
    assert float(a[k + "_low"]) <= float(a[k]) <= float(a[k + "_high"])
    point = evaluate_arrays("Llama-3.1-70B", "H200-SXM", **kw)
    assert float(a[k]) == float(point[k])                 # the point is not moved
    r = evaluate_arrays("Llama-3.1-70B", "H20-96GB", uncertainty="components", **kw)
    m = evaluate_arrays("Llama-3.1-70B", "H200-SXM", uncertainty="components", **kw)
    width = lambda d: float(d[k + "_high"] / d[k + "_low"])  # noqa: E731
    assert width(r) > 2 * width(m)


def test_structure_term_widens_throughputs_not_memory():
    u = load_uncertainty()
    kw = dict(tp=8, batch_size=32, kv_len=4096)
    c = evaluate_arrays("Llama-3.1-70B", "H200-SXM", uncertainty="components", **kw)
    f = evaluate_arrays("Llama-3.1-70B", "H200-SXM", uncertainty=True, **kw)
    w = u.conformal_ln["measured"]
    k = "decode_tokens_per_s_per_gpu"
    assert float(f[k + "_high"]) == pytest.approx(float(c[k + "_high"]) * np.exp(w), rel=1e-12)
    assert float(f["max_batch_size_high"]) == float(c["max_batch_size_high"])


def test_skew_range_is_cut_where_a_model_admits_it():
    """DeepSeek-V3 (256 experts, top-8): Zipf 1.0 would give its top expert > all tokens."""
    s = U.max_skew("DeepSeek-V3")
    p = np.arange(1, 257, dtype=float) ** -s
    assert 8 * p.max() / p.sum() == pytest.approx(1.0, abs=1e-5)


def test_dataset_gets_a_quantile_dimension_with_the_point_in_the_middle():
    kw = dict(tp=8, batch_size=[8, 64], kv_len=2048)
    ds = inf.evaluate("Llama-3.1-70B", "H200-SXM", uncertainty=True, **kw)
    point = inf.evaluate("Llama-3.1-70B", "H200-SXM", **kw)
    v = ds["decode_tokens_per_s_per_gpu"]
    assert list(ds["quantile"].values) == [0.1, 0.5, 0.9]
    np.testing.assert_array_equal(v.sel(quantile=0.5), point["decode_tokens_per_s_per_gpu"])
    assert bool((v.sel(quantile=0.1) < v.sel(quantile=0.5)).all())
    assert bool((v.sel(quantile=0.9) > v.sel(quantile=0.5)).all())
    assert "quantile" not in ds["fits"].dims
