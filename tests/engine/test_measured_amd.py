"""AMD measured kernel tables (AITER tuned tables, calibration/extract_aiter.py).

Reference values: AMD's measured latencies in hardware/measured/MI300X and MI355X (AITER
github ROCm/aiter commit e4048607a5 and amd-aiter 0.1.7.post2.dev18); the MI300X / MI325X
HBM bandwidths of hardware/*.toml (5.3 / 6.0 TB/s, ml-engineering accelerator table).
"""

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import grid as G
from inference_factory.engine import measured as M
from inference_factory.specs import data_dir

from .test_measured import _leave_one_out

AMD = ("MI300X", "MI355X")
MEASURED = {"measured", "interpolated"}


@pytest.mark.parametrize("device", AMD)
def test_leave_one_out_per_family_amd(device):
    """Component check: the GEMM and fused-MoE tables of each AMD device predict their own
    left-out measured points with median |ln(pred/measured)| <= 0.15 (the issue's bar, the
    same as the NVIDIA tables')."""
    tabs = M.DeviceTables(data_dir("hardware") / "measured" / device, inf.load_hardware(device))
    checked = {}
    for name in ("gemm", "moe"):
        df = tabs.rows(name).to_frame()
        errs = _leave_one_out(df, M.FAMILIES[name])
        assert errs.size >= 50, (device, name, errs.size)
        checked[name] = float(np.median(errs))
        assert checked[name] <= 0.15, (device, name, checked[name], errs.size)
    assert set(checked) == {"gemm", "moe"}


def _sources(ds, op):
    return set(np.unique(ds.decode_op_source.sel(op=op).values)) - {""}


@pytest.mark.parametrize("model,device,kw,gemms", [
    ("DeepSeek-V3", "MI355X", {},
     ("q_a_kv_a", "q_b", "o_proj", "ffn_gate_up", "ffn_down", "shared_gate_up", "shared_down",
      "router", "lm_head")),
    # MI300X: AITER has no BF16 GEMM table at 304 CUs, so the BF16 router and lm_head stay on
    # the roofline; every FP8 block-scaled GEMM is measured
    ("DeepSeek-V3", "MI300X", {},
     ("q_a_kv_a", "q_b", "o_proj", "ffn_gate_up", "ffn_down", "shared_gate_up", "shared_down")),
    # Llama-3.1-70B quantised to FP8 runs per-tensor FP8 GEMMs: AITER has no such table at
    # 304 CUs (only 1x128 block-scaled), so they stay on the roofline (see calibration/README)
    ("Llama-3.1-70B", "MI300X", {"weight_precision": "fp8"}, ()),
])
def test_gemms_and_moe_come_from_the_amd_tables(model, device, kw, gemms):
    # AITER's rows of most DeepSeek-V3 shapes start at M = 16 (MI300X gemm.csv: n = 2112,
    # k = 7168 from 16 up): M = 1 reads below them, extrapolated (was labelled measured)
    ds = inf.evaluate(model, device, tp=8, batch_size=[16, 64], kv_len=2048, detail="ops", **kw)
    for op in gemms:
        assert _sources(ds, op) <= MEASURED, (op, _sources(ds, op))
    if device == "MI300X" and gemms:
        one = inf.evaluate(model, device, tp=8, batch_size=1, kv_len=2048, detail="ops", **kw)
        assert _sources(one, "q_a_kv_a") == {"extrapolated"}
    if not gemms:
        assert _sources(ds, "ffn_gate_up") == {"roofline"}
    if "moe" in ds.op.values:
        # AITER measured DeepSeek-V3's experts with the shared expert fused (257 experts,
        # top-9) on MI355X (the nearest measured shape's efficiency, labelled extrapolated);
        # on MI300X AMD's MoE benchmarking run measured the TP8 shape itself: never the roofline
        assert _sources(ds, "moe") and "roofline" not in _sources(ds, "moe")
    assert {"attention", "allreduce_attn"} <= set(ds.op.values)
    assert _sources(ds, "attention") == {"roofline"}     # no AITER attention table


def test_mi325x_reads_mi300x_silicon_tables_with_its_own_hbm():
    """MI325X = MI300X compute (gfx942, 304 CUs) with 6.0 TB/s HBM3e: its memory-bound GEMMs
    come from MI300X's tables and are faster by at most the bandwidth ratio 6.0 / 5.3."""
    assert M.tables_for(inf.load_hardware("MI325X")) is M.tables_for(inf.load_hardware("MI300X"))
    kw = {"tp": 8, "batch_size": 16, "kv_len": 2048, "detail": "ops"}    # a row of the table
    a = inf.evaluate("DeepSeek-V3", "MI300X", **kw)
    b = inf.evaluate("DeepSeek-V3", "MI325X", **kw)
    op = "shared_gate_up"
    assert _sources(b, op) <= MEASURED
    ratio = float(a.decode_op_time_s.sel(op=op)) / float(b.decode_op_time_s.sel(op=op))
    assert 1.0 <= ratio <= 6000 / 5300 * (1 + 1e-6)


def test_a_table_node_is_the_aiter_measurement():
    """At a measured shape on a monotone line the op costs AITER's number: MI355X BF16
    GEMM m=1, n=256, k=7168 (DeepSeek-V3's router) is 5.215 us in
    model_configs/dsv3_bf16_tuned_gemm.csv (kernel 'sol2')."""
    hw = inf.load_hardware("MI355X")
    curve = M.tables_for(hw).curve("gemm", {"dtype": "bf16"}, {}, {"n": 256.0, "k": 7168.0})
    t, src = curve.time_s(lambda m_: M.gemm_roofline_s(hw, "bf16", m_, 256, 7168), np.array([1.0]))
    assert float(t[0]) == pytest.approx(5.215e-6, rel=1e-3)
    assert int(src()[0]) == G.MEASURED


def _mla_points():
    import pandas as pd
    return pd.read_csv(data_dir("hardware") / "measured" / "MI355X" / "mla_decode_points.csv",
                       comment="#")


@pytest.mark.parametrize("heads,batch,kv_len,kv_dtype,tb_per_s", [
    # aiter/ops/triton/gluon/README.md (ROCm/aiter e4048607a5), MI350: the TB/s each run
    # reports next to its time ('return_lse' table; bh16bn64 / bh16bn128 blocks)
    (16, 1, 10_000, "bf16", 0.30), (16, 3, 10_000, "bf16", 1.07), (16, 4, 10_000, "bf16", 1.75),
    (16, 1, 100_000, "bf16", 1.81), (16, 3, 100_000, "bf16", 3.89), (16, 4, 100_000, "bf16", 4.31),
    (16, 1, 10_000_000, "bf16", 5.33), (16, 1, 10_000_000, "fp8", 4.58),
])
def test_mla_decode_points_reproduce_the_readme_bandwidths(heads, batch, kv_len, kv_dtype,
                                                           tb_per_s):
    """Independent check of the extracted MI355X MLA decode latencies: op_tests/test_mla.py's
    byte count (KV latent + rope at the KV dtype, BF16 Q in, BF16 O out) over the extracted
    latency gives the TB/s the README prints beside it, within its 0.01 TB/s rounding."""
    df = _mla_points()
    row = df[(df.num_heads == heads) & (df.batch_size == batch) & (df.kv_len == kv_len)
             & (df.kv_dtype == kv_dtype)]
    assert len(row) == 1
    kv_b = 1 if kv_dtype == "fp8" else 2
    nbytes = batch * kv_len * 576 * kv_b + batch * heads * 576 * 2 + batch * heads * 512 * 2
    got = nbytes / (float(row.latency_us.iloc[0]) * 1e-6) / 1e12
    assert got == pytest.approx(tb_per_s, abs=0.006 + 1e-4 * tb_per_s)


def test_mla_decode_points_bh64_are_the_readme_tflops():
    """The bh64 rows are test_mla.py's flops (batch x kv_len x heads x (576 + 512) x 2) over
    the README's fastest TFLOPS (Gluon: 453.6, 462.0, 529.3, 563.0 at 64/64, 128/64, 64/128,
    128/128 batch/heads, ctx 16384), to the table's 4 significant figures."""
    df = _mla_points()
    for (b, h), tf in {(64, 64): 453.6, (128, 64): 462.0, (64, 128): 529.3,
                       (128, 128): 563.0}.items():
        row = df[(df.num_heads == h) & (df.batch_size == b) & (df.kv_len == 16384)]
        want_us = b * 16384 * h * 1088 * 2 / (tf * 1e12) * 1e6
        assert float(row.latency_us.iloc[0]) == pytest.approx(want_us, rel=5e-4)
        assert row.kernel_source.iloc[0].startswith("gluon")


def test_mla_decode_points_are_not_an_engine_table():
    """The points are reference data: the MI355X folder has no engine-read mla_decode.csv,
    so MLA decode attention stays on the realistic roofline (see MLA_POINTS in
    calibration/extract_aiter.py for why)."""
    tabs = M.tables_for(inf.load_hardware("MI355X"))
    assert not tabs.has("mla_decode")


# ---- MI355X attention fractions fitted to the MLA decode points -----------------------------
# hardware/MI355X.toml [measured] decode_attention_compute_frac / decode_attention_hbm_frac;
# method in docs/MODEL.md (AMD section): the engine's own pure compute and memory times of each
# point (engine.table_rooflines.mla_decode_roofline_s with the other peak made infinite), the
# realistic roofline rule t = max(t_F / phi_c, t_B / phi_m) of engine/cost.py, minimum rms
# ln error over the points whose pure roofline is >= 10x the device's per-kernel floor.

FIT_FLOOR_MULTIPLE = 10.0        # the fit's selection rule (docs/MODEL.md, AMD section)


def _mla_point_times():
    """(t_F, t_B, measured) in seconds for the 12 points: mla_decode_roofline_s at infinite
    bandwidth is its FLOP time, at infinite FLOP rate its byte time."""
    import dataclasses
    hw = inf.load_hardware("MI355X")
    hwf = dataclasses.replace(hw, hbm_bw_bytes_per_s=np.inf)
    hwb = dataclasses.replace(hw, dense_flop_per_s={k: np.inf for k in hw.dense_flop_per_s})
    df = _mla_points()
    args = [(r.kv_dtype, r.num_heads, r.batch_size, r.kv_len) for r in df.itertuples()]
    t_f = np.array([float(M.mla_decode_roofline_s(hwf, *a)) for a in args])
    t_b = np.array([float(M.mla_decode_roofline_s(hwb, *a)) for a in args])
    return t_f, t_b, df.latency_us.to_numpy() * 1e-6


def _fit_fracs(t_f, t_b, meas):
    """(rms, phi_c, phi_m) minimising rms ln(max(t_F/phi_c, t_B/phi_m) / measured) on a
    log grid of 0.5 % steps over [0.02, 1]."""
    g = np.exp(np.arange(np.log(0.02), 0.0 + 1e-12, 0.005))
    pred = np.maximum(t_f[None, None, :] / g[:, None, None], t_b[None, None, :] / g[None, :, None])
    rms = np.sqrt(np.mean(np.log(pred / meas) ** 2, axis=2))
    i, j = np.unravel_index(np.argmin(rms), rms.shape)
    return float(rms[i, j]), float(g[i]), float(g[j])


def _kept(t_f, t_b):
    floor = M.tables_for(inf.load_hardware("MI355X")).kernel_floor_s()
    return np.maximum(t_f, t_b) >= FIT_FLOOR_MULTIPLE * floor


def test_mi355x_attention_fractions_are_the_fit_to_the_aiter_points():
    """The TOML fractions are the fit (within its 0.5 % grid, the TOML's 3 digits); the fit
    keeps 8 of the 12 points (the 4 small ones, 1.4-14 us of roofline work, are a fixed cost
    no fraction represents) with rms ln 0.110; leave-one-out over all 12 (the rule applied to
    the other 11, the left-out point predicted whether kept or not) has median |ln| <= 0.25
    (the adoption bar); the plain 2-fraction fit of all 12 does not (0.53), which is why the
    rule exists."""
    hw = inf.load_hardware("MI355X")
    t_f, t_b, meas = _mla_point_times()
    keep = _kept(t_f, t_b)
    assert int(keep.sum()) == 8
    rms, phi_c, phi_m = _fit_fracs(t_f[keep], t_b[keep], meas[keep])
    assert rms == pytest.approx(0.110, abs=0.002)
    assert hw.decode_attention_compute_frac == pytest.approx(phi_c, rel=0.006)
    assert hw.decode_attention_hbm_frac == pytest.approx(phi_m, rel=0.006)
    loo = []
    for i in range(len(meas)):
        rest = keep & (np.arange(len(meas)) != i)
        _, c, b = _fit_fracs(t_f[rest], t_b[rest], meas[rest])
        loo.append(abs(np.log(max(t_f[i] / c, t_b[i] / b) / meas[i])))
    assert np.median(loo) <= 0.25, loo
    assert max(np.array(loo)[keep]) <= 0.25, loo          # every kept point out of sample
    loo_all = []
    for i in range(len(meas)):
        rest = np.arange(len(meas)) != i
        _, c, b = _fit_fracs(t_f[rest], t_b[rest], meas[rest])
        loo_all.append(abs(np.log(max(t_f[i] / c, t_b[i] / b) / meas[i])))
    assert np.median(loo_all) > 0.25, loo_all


def _without_fit(hw):
    import dataclasses
    return dataclasses.replace(hw, decode_attention_compute_frac=None,
                               decode_attention_hbm_frac=None)


def _engine_attention_s(hw, heads, batch, kv_len, kv_dtype):
    """The engine's decode attention time per layer for DeepSeek-V3 (128 heads) at
    tp = 128 / heads: decode_op_time_s of op 'attention' over its full-attention layers."""
    m = inf.load_model("DeepSeek-V3")
    ds = inf.evaluate("DeepSeek-V3", hw, tp=int(m.n_q_heads // heads), batch_size=batch,
                      kv_len=kv_len, kv_precision=kv_dtype, detail="ops")
    assert _sources(ds, "attention") == {"roofline"}
    return float(ds.decode_op_time_s.sel(op="attention")) / m.n_full_attention_layers


def test_mi355x_engine_attention_against_the_points_before_and_after():
    """The engine's attention op (its own bytes: the model's KV format, the KV write) at the
    12 shapes: with the fitted fractions the 8 kept points are within 0.25 in ln (the fit's
    worst out-of-sample residual) and the median |ln| over all 12 drops from 0.86 (the
    FlashMLA-on-H800 fractions, 0.667 / 0.895) to <= 0.20; the 4 small points stay
    optimistic (engine faster than AITER), the bias the docs state."""
    hw = inf.load_hardware("MI355X")
    before_hw = _without_fit(hw)
    df = _mla_point_times()
    keep = _kept(df[0], df[1])
    pts = _mla_points()
    meas = pts.latency_us.to_numpy() * 1e-6
    args = [(r.num_heads, r.batch_size, r.kv_len, r.kv_dtype) for r in pts.itertuples()]
    after = np.log(np.array([_engine_attention_s(hw, *a) for a in args]) / meas)
    before = np.log(np.array([_engine_attention_s(before_hw, *a) for a in args]) / meas)
    assert np.median(np.abs(before)) == pytest.approx(0.86, abs=0.02)
    assert np.median(np.abs(after)) <= 0.20, after
    assert np.all(np.abs(after[keep]) <= 0.25), after
    assert np.all(after[~keep] < 0), after
    assert np.all(after >= before - 1e-12)     # slower fractions: never faster than before


@pytest.mark.parametrize("device,kw", [
    ("H200-SXM", {"tp": 8, "batch_size": 64, "kv_len": 2048}),
    ("B200", {"tp": 8, "batch_size": 1, "kv_len": 2048}),
    ("H100-SXM", {"tp": 8, "batch_size": 32, "kv_len": 8192, "kv_precision": "fp8"}),
    ("MI300X", {"tp": 8, "batch_size": 64, "kv_len": 2048}),
])
def test_devices_without_fitted_attention_fractions_are_unchanged(device, kw):
    """Only MI355X has fitted attention fractions; every other device (NVIDIA; MI300X and
    MI325X, which have no attention measurement) keeps the realism constants: decode_step_s
    is bit-identical to the realism-only path (the fields set to None by hand)."""
    hw = inf.load_hardware(device)
    assert hw.decode_attention_compute_frac is None and hw.decode_attention_hbm_frac is None
    ref = _without_fit(hw)
    a = inf.evaluate("DeepSeek-V3", hw, **kw)
    b = inf.evaluate("DeepSeek-V3", ref, **kw)
    assert float(a.decode_step_s) == float(b.decode_step_s)
    assert inf.load_hardware("MI325X").decode_attention_compute_frac is None
    # the fractions the engine reads for them are the realism constants themselves
    rl = inf.load_realism()
    for kv in ("bf16", "fp8"):
        assert rl.decode_attn_compute_frac_on(hw, kv) == rl.attn_compute_frac_for(kv)
    assert rl.decode_attn_hbm_frac_on(hw) == rl.attn_hbm_frac


def test_mi355x_prefill_attention_keeps_the_realism_constants():
    """The fit is of decode kernels: MI355X's prefill (MLA prefill attention on the roofline)
    is bit-identical with and without the fitted decode fractions; its decode is slower."""
    hw = inf.load_hardware("MI355X")
    kw = {"tp": 8, "batch_size": 64, "kv_len": 2048}
    a = inf.evaluate("DeepSeek-V3", hw, **kw)
    b = inf.evaluate("DeepSeek-V3", _without_fit(hw), **kw)
    assert float(a.prefill_step_s) == float(b.prefill_step_s)
    assert float(a.decode_step_s) > float(b.decode_step_s)


@pytest.mark.parametrize("device", ["MI300X", "MI355X"])
def test_ops_off_the_tables_cost_at_least_one_kernel_floor_per_layer(device):
    """An op the device's tables do not hold still runs one kernel per layer: no faster than
    the fastest kernel measured there (the floor measured ops already keep). DeepSeek-V3 at
    batch 1, kv 1024, TP8: MLA decode attention reads 1024 x 656 B per layer, 0.13 us at
    MI300X's 5.3 TB/s, far below the floor; so do the per-head w_uk / w_uv products."""
    floor = M.tables_for(inf.load_hardware(device)).kernel_floor_s()
    m = inf.load_model("DeepSeek-V3")
    ds = inf.evaluate(m, device, tp=8, batch_size=1, kv_len=1024, detail="ops")
    src = dict(zip(ds.op.values, np.atleast_1d(ds.decode_op_source.squeeze().values)))
    t = dict(zip(ds.op.values, np.atleast_1d(ds.decode_op_time_s.squeeze().values)))
    layers = m.n_layers
    for op in ("attention", "w_uk", "w_uv"):
        assert src[op] == "roofline", (op, src[op])
        assert t[op] == pytest.approx(layers * floor, rel=1e-9), op
