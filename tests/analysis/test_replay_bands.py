"""``bench --trace --uncertainty``: bench's band mechanism through the replay's latency solve
(at concurrency 1 the TPOT band is the decode step's band by hand; the model-structure term
widens the component band by its factor each side)."""

import math

import numpy as np
import pytest

from inference_factory.analysis.bench.bands import _table_draws
from inference_factory.analysis.bench.replay import bench_trace, prepare_replay
from inference_factory.engine import resolve_realism, resolve_uncertainty, structure_ln
from inference_factory.factory.sessions import build_sessions
from inference_factory.specs import load_hardware


def sessions(n=16, turns=3):
    sid = np.repeat(np.arange(n), turns)
    k = np.tile(np.arange(turns), n)
    prev = np.where(k == 0, -1, np.arange(n * turns) - 1)
    return build_sessions(sid, prev, 3000 + k * 950, np.full(n * turns, 150),
                          np.zeros(n * turns), np.arange(n * turns) + 1, [[]] * (n * turns), [],
                          "test")


@pytest.fixture(scope="module")
def runs():
    kw = dict(trace=sessions(), tp=1, concurrency=[1], kv_offload=None)
    return (bench_trace("Llama-3.1-8B", "H100-SXM", uncertainty="components", **kw),
            bench_trace("Llama-3.1-8B", "H100-SXM", uncertainty=True, **kw),
            bench_trace("Llama-3.1-8B", "H100-SXM", **kw))


def test_bands_hold_the_point_and_leave_it_unmoved(runs):
    comp, full, plain = runs
    for p, q in zip(comp["points"], plain["points"]):
        for k in ("total_tokens_per_s_per_gpu", "time_to_first_token_p90_ms",
                  "e2e_normalized_interactivity_p90", "cost_usd_per_mtok_output"):
            assert p[k] == q[k]
            assert p[f"{k}_low"] <= p[k] <= p[f"{k}_high"]
        assert p["total_tokens_per_s_per_gpu_high"] > p["total_tokens_per_s_per_gpu_low"]


def test_tpot_band_at_one_lane_is_the_decode_steps_band(runs):
    # one lane: nothing else prefills while a turn decodes, so each draw's TPOT is its decode
    # step at batch 1 plus the engine's host time, over the tokens per step
    p = runs[0]["points"][0]
    st = prepare_replay("Llama-3.1-8B", "H100-SXM", trace=sessions(), tp=1)
    u = resolve_uncertainty("components")
    draws = _table_draws(st.m, st.hw, st.d_pool, st.dtab, {**st.axes, "cache_hit_rate": 0.0},
                         st.lengths, u, resolve_realism(False, None), 64)
    host = st.eng.host_s_per_decode_step
    tpot = np.array([(d.decode_s(1.0) + host) / d.tokens_per_step for d in draws]) * 1e3
    lo, hi = np.quantile(tpot, [u.quantiles[0], u.quantiles[2]])
    point = p["inter_token_latency_p50_ms"]
    assert p["inter_token_latency_p50_ms_low"] == pytest.approx(min(lo, point), rel=1e-6)
    assert p["inter_token_latency_p50_ms_high"] == pytest.approx(max(hi, point), rel=1e-6)


def test_model_structure_term_widens_each_side(runs):
    comp, full, _ = runs
    w = structure_ln(resolve_uncertainty(True), load_hardware("H100-SXM"))
    assert w > 0
    for p, q in zip(comp["points"], full["points"]):
        k = "request_latency_p90_ms"
        assert q[f"{k}_low"] == pytest.approx(p[f"{k}_low"] / math.exp(w), rel=1e-9)
        assert q[f"{k}_high"] == pytest.approx(p[f"{k}_high"] * math.exp(w), rel=1e-9)
