"""The busiest EP rank's grouped expert GEMM (issue 31): the balanced kernel's time plus the
rank's pairs beyond the mean at the kernel's compute-bound rate
(``kernels.moe.busiest_rank_excess_s``), so expert skew costs time in weight-streaming decode
too, as NVIDIA's skewed-routing MoE measurements show."""

import csv
from pathlib import Path

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.kernels import moe as kmoe

ROOT = Path(__file__).resolve().parents[2]
DEEPSEEK_MOE_LAYERS = 58           # DeepSeek-V3/R1: 61 layers, the first 3 dense
FP4 = dict(tp=1, weight_precision="fp4", moe_precision="fp4", kv_precision="fp8", kv_len=9216)


def _row_us(device, table, **match):
    """Latency of the one row of ``hardware/measured/<device>/<table>.csv`` matching ``match``."""
    with open(ROOT / "hardware" / "measured" / device / f"{table}.csv") as f:
        rows = [r for r in csv.DictReader(line for line in f if not line.startswith("#"))
                if all(r[k] == str(v) for k, v in match.items())]
    assert len(rows) == 1, (device, table, match, rows)
    return float(rows[0]["latency_us"])


def _moe_per_layer(hardware, **kw):
    ds = inf.evaluate("DeepSeek-R1", hardware, detail="ops", **kw)
    t = float(ds["decode_op_time_s"].sel(op="moe")) / DEEPSEEK_MOE_LAYERS
    return t, 1.0 / float(ds["expert_efficiency_frac"])


def test_excess_formula_by_hand():
    """(L - 1) x mean pairs x time per pair; nothing for a balanced or lighter rank."""
    assert kmoe.busiest_rank_excess_s(mean_pairs=1000.0, load_factor=1.5,
                                      compute_s_per_pair=1e-7) == pytest.approx(5e-5, rel=1e-12)
    assert kmoe.busiest_rank_excess_s(mean_pairs=1000.0, load_factor=1.0,
                                      compute_s_per_pair=1e-7) == 0.0
    assert kmoe.busiest_rank_excess_s(mean_pairs=1000.0, load_factor=0.9,
                                      compute_s_per_pair=1e-7) == 0.0


@pytest.mark.parametrize("hardware,dp,key_tokens", [("B200", 8, 1024), ("GB200", 32, 4096)])
def test_measured_decode_moe_is_the_balanced_row_plus_the_busiest_ranks_excess(
        hardware, dp, key_tokens):
    """At a token count the table measures (128 sequences per rank x dp), the decode MoE of
    the busiest rank is the balanced row's latency plus (L - 1) x its mean pairs x the
    per-pair time of the table's largest row (16384 tokens, compute-bound): a hand
    computation from the CSV rows and the engine's own placement load L (1 / expert
    efficiency). Tolerance 1e-3: the rows are printed to 4 digits."""
    t, load = _moe_per_layer(hardware, dp=dp, ep=dp, batch_size=128, **FP4)
    keys = dict(dtype="nvfp4", hidden_size=7168, inter_size=2048, topk=8, num_experts=256,
                moe_tp=1, moe_ep=dp)
    bal = _row_us(hardware, "moe", num_tokens=key_tokens, **keys)
    top = _row_us(hardware, "moe", num_tokens=16384, **keys)
    pairs = key_tokens * 8 / dp
    expected_us = bal + (load - 1.0) * pairs * top / (16384 * 8 / dp)
    assert load > 1.1
    assert t * 1e6 == pytest.approx(expected_us, rel=1e-3)


def test_wide_ep_decode_moe_against_trtllm_skewed_measurement():
    """Check, not fitted: GB200, DeepSeek-R1 NVFP4, EP 32, 4096 tokens in the group (128 per
    rank). TensorRT-LLM's wide-EP MoE kernel timed on the busiest rank under power-law
    routing (alpha 1.01, the routing aiconfigurator assumes for DeepSeek) took 185.1 us
    (moe_wideep.csv, phase any, 256 slots; 184.7 with EPLB's 288 slots). The engine builds
    its time from the BALANCED fused-MoE rows and its own placement load (default skew 0.47,
    configs/realism.toml [experts], set from H200 prefill ratios, not from this row): within
    10 %. The max-roofline load it replaces gave 144 us (-22 %)."""
    measured = _row_us("GB200", "moe_wideep", phase="any", dtype="nvfp4", num_tokens=4096,
                       hidden_size=7168, inter_size=2048, topk=8, num_experts=256,
                       num_slots=256, moe_ep=32, distribution="power_law_1.01")
    t, _ = _moe_per_layer("GB200", dp=32, ep=32, batch_size=128, **FP4)
    assert t * 1e6 == pytest.approx(measured, rel=0.10)


def test_roofline_mode_decode_moe_pays_for_skew():
    """Realistic roofline (no tables): a weight-streaming decode MoE costs more under expert
    skew (a max(L t_F, t_B) roofline left it unchanged until compute-bound); with no skew
    the only load is routing noise."""
    kw = dict(dp=8, ep=8, batch_size=64, realism="roofline", **FP4)
    flat, _ = _moe_per_layer("B200", expert_skew=0.0, **kw)
    skewed, load = _moe_per_layer("B200", expert_skew=0.8, **kw)
    assert load > 1.3
    assert skewed > flat * 1.02
    assert np.isfinite(skewed)


def test_compute_bound_slope_on_the_cited_rows():
    """The rule's two cited cases (H200 wide-EP, DeepSeek shape, FP8, EP 8): the decode
    curve's last interval is flat (weight streaming), the prefill curve's linear."""
    keys = dict(dtype="fp8_block", hidden_size=7168, inter_size=2048, topk=8, num_experts=256,
                num_slots=256, moe_ep=8, distribution="uniform")
    dec = [_row_us("H200-SXM", "moe_wideep", phase="decode", num_tokens=n, **keys)
           for n in (512, 1024)]
    pre = [_row_us("H200-SXM", "moe_wideep", phase="prefill", num_tokens=n, **keys)
           for n in (65536, 131072)]
    assert not kmoe.is_compute_bound(t_s=dec[1], t_prev_s=dec[0], tokens=1024, prev_tokens=512)
    assert kmoe.is_compute_bound(t_s=pre[1], t_prev_s=pre[0], tokens=131072, prev_tokens=65536)
    # the threshold is the ridge of t = B + tau n: compute share 1/2 <=> slope 1/2
    assert kmoe.is_compute_bound(t_s=2.0, t_prev_s=2.0 / 1.5, tokens=2.0, prev_tokens=1.0)
    assert not kmoe.is_compute_bound(t_s=2.0, t_prev_s=1.5, tokens=2.0, prev_tokens=1.0)


def test_short_decode_curve_takes_tau_from_the_compute_bound_prefill_row():
    """H200 wide-EP decode, DeepSeek-V3 FP8, EP 8, 128 sequences per rank (1024 tokens, the
    decode curve's last row, still flat at 385 us): the busiest rank is the balanced decode
    row plus (L - 1) x pairs x the per-pair time of the same shape's largest compute-bound
    row, prefill at 131072 tokens (10440 us over 131072 pairs, 0.080 us). The decode curve's
    own last row (0.376 us per pair) would charge 4.7 times that excess. Tolerance 1e-3: rows
    printed to 4 digits."""
    ds = inf.evaluate("DeepSeek-V3", "H200-SXM", tp=1, dp=8, ep=8, batch_size=128,
                      detail="ops")
    t = float(ds["decode_op_time_s"].sel(op="moe")) / DEEPSEEK_MOE_LAYERS
    load = 1.0 / float(ds["expert_efficiency_frac"])
    keys = dict(dtype="fp8_block", hidden_size=7168, inter_size=2048, topk=8, num_experts=256,
                num_slots=256, moe_ep=8, distribution="uniform")
    bal = _row_us("H200-SXM", "moe_wideep", phase="decode", num_tokens=1024, **keys)
    top = _row_us("H200-SXM", "moe_wideep", phase="prefill", num_tokens=131072, **keys)
    pairs = 1024 * 8 / 8
    assert load > 1.1
    assert t * 1e6 == pytest.approx(bal + (load - 1.0) * pairs * top / 131072, rel=1e-3)
