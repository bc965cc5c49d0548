"""DeepSeek-V4's measured tables (engine/table_families_v4.py): the attention modules and mHC.

Reference values: NVIDIA's measured latencies as extracted into hardware/measured/<device>/
dsv4_attention.csv and mhc.csv (calibration/extract_aiconfigurator_v4.py, aiconfigurator git
095f58a5); hand sums of the split operations they stand for.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.analysis.validation.bands import leave_one_out_residuals
from inference_factory.engine import STRUCT_AXES
from inference_factory.engine import geometry as Gm
from inference_factory.engine import measured as M
from inference_factory.engine import ops as O
from inference_factory.engine.table_families_v4 import module_roofline_s
from inference_factory.kernels import ops as kops
from inference_factory.specs import data_dir

V4_FAMILIES = ("mhc", "compressed_module_decode", "compressed_module_prefill")
V4_DEVICES = ("B200", "B300", "GB200", "GB300", "H100-SXM", "H200-SXM")


@pytest.mark.parametrize("device", V4_DEVICES)
def test_leave_one_out_of_each_v4_family(device):
    """Every V4 family predicts its own left-out points: median |ln(pred/measured)| 0.012 -
    0.035 on the six devices (measured when written); asserted <= 0.06, p90 <= 0.2."""
    tabs = M.DeviceTables(data_dir("hardware") / "measured" / device,
                          inf.load_hardware(device))
    for name in V4_FAMILIES:
        df = tabs.rows(name).to_frame()
        errs = np.abs(leave_one_out_residuals(df, M.FAMILIES[name]))
        assert errs.size >= 50, (device, name)
        assert np.median(errs) <= 0.06 and np.quantile(errs, 0.9) <= 0.2, (
            device, name, float(np.median(errs)))
        # the roofline is a lower bound of every measured module and mHC step
        assert float(np.exp(df["log_ratio"]).min()) > 1.0, (device, name)


def _geom(model, device, realism=None, tp=8):
    m, hw = inf.load_model(model), inf.load_hardware(device)
    rl = realism or inf.load_realism()
    return m, Gm.validate_struct(m, hw, dict(STRUCT_AXES, tp=tp, ep=tp, kv_precision="fp8"), rl)


def _decode_ops(g, m, seqs, kv_len):
    return O.layer_ops(g, Gm.main_layers(m), seqs=np.asarray(seqs, float), new_tokens=1.0,
                       cached_tokens=kv_len - 1.0, kv_len=kv_len, logit_tokens_per_seq=1.0,
                       phase="decode")


def test_module_stands_for_the_split_and_its_kernels():
    """On B200 (tables) V4-Pro's CSA layers are module_in + module_out carrying the FLOPs and
    bytes of the split operations (q_a_kv, q_b, indexer_q | attention, indexer, o_a, o_b),
    and the layer's small kernels drop by realism compressed_in_module per compressed layer
    (plus what measured GEMM and all-reduce rows time); without tables, the split."""
    m, g = _geom("DeepSeek-V4-Pro", "B200")
    _, g0 = _geom("DeepSeek-V4-Pro", "B200", dataclasses.replace(inf.load_realism(),
                                                                   measured=False))
    ops = {o.name: o for o in _decode_ops(g, m, [16.0], 8192.0)}
    split = {o.name: o for o in _decode_ops(g0, m, [16.0], 8192.0)}
    assert "q_a_kv" not in ops and "attention" not in ops
    for part, names in (("in", ("q_a_kv", "q_b", "indexer_q")),
                        ("out", ("attention", "indexer", "o_a", "o_b"))):
        op = ops[f"module_{part}"]
        assert op.family == "compressed_module_decode" and op.count == 30
        np.testing.assert_allclose(op.flop, sum(split[n].flop for n in names), rtol=1e-12)
        np.testing.assert_allclose(op.hbm_bytes, sum(split[n].hbm_bytes for n in names),
                                   rtol=1e-12)
    assert ops["compressed2_module_out"].count == 31
    drop = split["other_kernels"].params["kernels"] - ops["other_kernels"].params["kernels"]
    # every one of the 61 layers is compressed: the module's 6; and with tables on B200 the
    # three quantisation kernels per layer (attention in and out, FFN) timed inside NVIDIA's
    # GEMM rows and the two RMSNorms fused into the TP-8 all-reduce at 16 tokens (realism
    # quantization_timed_with_gemm, norms_fused_into_allreduce), which the table-less
    # realism counts
    assert drop == pytest.approx(6 + 3 * 1 + 2)
    # MI355X has no V4 tables: the split, on the roofline
    m, gm = _geom("DeepSeek-V4-Pro", "MI355X")
    assert "q_a_kv" in {o.name for o in _decode_ops(gm, m, [16.0], 8192.0)}


def test_module_roofline_is_the_sum_of_the_split_rooflines():
    """The family's row roofline and the op's pure function are one formula: at V4-Pro's
    shape (tp 8) it equals the split GEMMs' table rooflines plus the attention and indexer
    kernels' own max(FLOPs / peak, bytes / bandwidth), summed by hand here."""
    m, g0 = _geom("DeepSeek-V4-Pro", "B200", dataclasses.replace(inf.load_realism(),
                                                                   measured=False))
    hw = g0.hw
    b, L = np.array([1.0, 16.0, 64.0]), 131072.0
    split = {o.name: o for o in _decode_ops(g0, m, b, L)}
    hand = sum(split[n].pure_fn(b) for n in ("q_a_kv", "q_b", "indexer_q", "o_a", "o_b"))
    for n, prec in (("attention", "bf16"), ("indexer", "fp8")):
        hand = hand + kops.pure_roofline_s(flop=split[n].flop, bytes_moved=split[n].hbm_bytes,
                                           peak_flop_per_s=hw.dense_flop_per_s[prec],
                                           peak_bytes_per_s=hw.hbm_bw_bytes_per_s)
    got = module_roofline_s(hw, phase="decode", gemm_dtype="fp8_block", kv_fp8=True, ratio=4,
                            indexer=True, hidden=7168, n_heads=128, heads=16, head_dim=512,
                            rope_head_dim=64, q_lora=1536, o_lora=1024, o_groups=16,
                            index_heads=64, index_dim=128, topk=1024, window=128, batch=b,
                            new_tokens=1.0, kv_len=L)
    np.testing.assert_allclose(got, hand, rtol=1e-12)


def _envelope(df, axes, **kw):
    """The largest measured latency (s) at or below a shape along every axis, among the rows
    with the keys ``kw``: the engine's monotone envelope at a measured node (more work is never
    faster, engine/measured.py ``_efficiency_grid``)."""
    sel = np.ones(len(df), bool)
    for k, v in kw.items():
        sel &= df[k].astype(str).to_numpy() == str(v)
    for a, v in axes.items():
        sel &= df[a].astype(float).to_numpy() <= v
    return float(df[sel]["latency_us"].astype(float).max()) * 1e-6


def test_measured_shapes_cost_the_measured_latency():
    """B200, V4-Pro tp 8 (16 heads per rank), FP8: at a measured shape the engine's time per
    layer is the table's latency under its monotone envelope (60.4 us measured for HCA at 16
    sequences x 8,192 tokens, 65.7 us after the envelope: 4 sequences at 1,024 tokens measured
    65.7 us), module_in + module_out together, for CSA and HCA; mHC at 16 tokens (31.1 us)."""
    m, g = _geom("DeepSeek-V4-Pro", "B200")
    costs = {c.op.name: c for c in M_cost(g, _decode_ops(g, m, [16.0], 8192.0))}
    df = M.tables_for(g.hw).rows("compressed_module_decode").to_frame()
    for prefix, ratio in (("", 4), ("compressed2_", 128)):
        t = sum(float(np.ravel(costs[f"{prefix}module_{p}"].time_s)[0]) for p in ("in", "out"))
        want = _envelope(df, {"batch_size": 16, "kv_len": 8192}, compress_ratio=ratio,
                         hidden_size=7168, num_heads=16)
        assert t == pytest.approx(want, rel=1e-4), (ratio, t, want)
    mhc = M.tables_for(g.hw).rows("mhc").to_frame()
    assert float(np.ravel(costs["mhc"].time_s)[0]) == pytest.approx(
        _envelope(mhc, {"num_tokens": 16}, hidden_size=7168), rel=1e-4)


def M_cost(g, ops):
    from inference_factory.engine.cost import cost_ops
    return cost_ops(g, ops)
