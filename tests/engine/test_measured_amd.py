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
    ds = inf.evaluate(model, device, tp=8, batch_size=[1, 64], kv_len=2048, detail="ops", **kw)
    for op in gemms:
        assert _sources(ds, op) <= MEASURED, (op, _sources(ds, op))
    if not gemms:
        assert _sources(ds, "ffn_gate_up") == {"roofline"}
    if "moe" in ds.op.values:
        # AITER measured DeepSeek-V3's experts with the shared expert fused (257 experts,
        # top-9) on MI355X and at EP8 (33 local experts) on MI300X: the nearest measured
        # shape's efficiency, labelled extrapolated, never the roofline
        assert _sources(ds, "moe") and "roofline" not in _sources(ds, "moe")
    assert {"attention", "allreduce_attn"} <= set(ds.op.values)
    assert _sources(ds, "attention") == {"roofline"}     # no AITER attention table


def test_mi325x_reads_mi300x_silicon_tables_with_its_own_hbm():
    """MI325X = MI300X compute (gfx942, 304 CUs) with 6.0 TB/s HBM3e: its memory-bound GEMMs
    come from MI300X's tables and are faster by at most the bandwidth ratio 6.0 / 5.3."""
    assert M.tables_for(inf.load_hardware("MI325X")) is M.tables_for(inf.load_hardware("MI300X"))
    kw = {"tp": 8, "batch_size": 1, "kv_len": 2048, "detail": "ops"}
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
