"""``plan --trace``: the recommendation is the best replayed point meeting the E2E
interactivity target (checked against ``bench --trace`` at every ladder point), its all-in $/M
by hand, P/D candidates are the P/D replay; and the P/D replay itself by hand (the cache on
the prefill pool, the KV transfer per turn)."""

import numpy as np
import pytest

from inference_factory.analysis.bench.replay import bench_trace
from inference_factory.analysis.closed_loop import Pool
from inference_factory.analysis.economics import CostModel, gpu_cost_usd_per_hour
from inference_factory.analysis.plan import plan_trace
from inference_factory.engine import evaluate_arrays, resolve_realism
from inference_factory.factory.sessions import build_sessions
from inference_factory.specs import load_hardware
from inference_factory.specs.engines import resolve_serving_engine

LADDER = (1, 2, 4, 8, 16)


def sessions(n=24, turns=4):
    """n sessions of ``turns`` turns: 3,000 tokens then 800 new per turn, 150 out."""
    sid = np.repeat(np.arange(n), turns)
    k = np.tile(np.arange(turns), n)
    prev = np.where(k == 0, -1, np.arange(n * turns) - 1)
    inp = 3000 + k * (800 + 150)
    return build_sessions(sid, prev, inp, np.full(n * turns, 150), np.zeros(n * turns),
                          np.arange(n * turns) + 1, [[]] * (n * turns), [], "test")


@pytest.fixture(scope="module")
def points():
    r = bench_trace("Llama-3.1-8B", "H100-SXM", trace=sessions(), tp=1, concurrency=LADDER,
                    kv_offload=None)
    return {p["concurrency"]: p for p in r["points"]}


def test_recommendation_is_the_best_replayed_point_meeting_the_target(points):
    e2e = [points[c]["e2e_normalized_interactivity_p90"] for c in LADDER]
    assert all(a > b for a, b in zip(e2e, e2e[1:]))       # the bisection's assumption
    target = 0.5 * (e2e[2] + e2e[3])                       # c = 4 meets it, c = 8 does not
    res = plan_trace("Llama-3.1-8B", "H100-SXM", trace=sessions(), gpus=1,
                     shapes=[{"tp": 1}], precision="native", engine="sglang",
                     modes=("aggregated",), kv_offload=("none",), concurrency=LADDER,
                     e2e_interactivity=target)
    rec = res.recommendations.iloc[0]
    ok = [c for c in LADDER if points[c]["e2e_normalized_interactivity_p90"] >= target]
    best = max(ok, key=lambda c: points[c]["output_tokens_per_s_per_gpu"])
    assert rec["concurrency"] == best == 4
    assert rec["output_tokens_per_s_per_gpu"] == pytest.approx(
        points[best]["output_tokens_per_s_per_gpu"], rel=1e-12)
    # bisection: index 2 (c = 4) meets, 3 (c = 8) misses; 1 (c = 2) for the knee: 3 replays
    assert len(res.candidates) == 3
    # all-in $/M output: the GPU-hour (rental; prefill and decode price alike here) over the
    # output tokens one GPU makes in an hour at the cost model's utilisation
    hw, cost = load_hardware("H100-SXM"), CostModel()
    usd_h = sum(gpu_cost_usd_per_hour(hw, cost, "decode"))
    assert usd_h == sum(gpu_cost_usd_per_hour(hw, cost, "prefill"))
    assert rec["usd_per_mtok_output_all_in"] == pytest.approx(
        usd_h / (points[best]["output_tokens_per_s_per_gpu"] * 3600 * cost.utilization) * 1e6,
        rel=1e-12)


def test_no_point_meets_an_unreachable_target():
    res = plan_trace("Llama-3.1-8B", "H100-SXM", trace=sessions(), gpus=1,
                     shapes=[{"tp": 1}], precision="native", engine="sglang",
                     modes=("aggregated",), kv_offload=("none",), concurrency=LADDER,
                     e2e_interactivity=1e6)
    rec = res.recommendations.iloc[0]
    assert "misses E2E interactivity" in rec["reason"]
    assert len(res.candidates) == 2                      # indices 2, 0: c = 4, then 1


def test_disaggregated_candidate_is_the_pd_replay():
    res = plan_trace("Llama-3.1-8B", "H100-SXM", trace=sessions(), gpus=2,
                     shapes=[{"tp": 1}], precision="native", engine="sglang",
                     modes=("disaggregated",), kv_offload=("none",), concurrency=(2, 8),
                     e2e_interactivity=1.0)
    rec = res.recommendations.iloc[0]
    assert rec["mode"] == "disaggregated" and rec["gpus"] == 2
    r = bench_trace("Llama-3.1-8B", "H100-SXM", trace=sessions(), prefill_pool=Pool(1, 1),
                    decode_pool=Pool(1, 1), concurrency=[int(rec["concurrency"])],
                    kv_offload=None)["points"][0]
    assert r["num_gpus"] == 2
    assert rec["output_tokens_per_s_per_gpu"] == pytest.approx(
        r["output_tokens_per_s_per_gpu"], rel=1e-12)


def test_pd_replay_two_turns_by_hand():
    # the two-turn trace of test_replay on 1 prefill + 1 decode H100 (tp 2 each): the
    # prefill pool's DRAM holds the cache (HBM 0 tokens), so turn 1 restores 1,100 tokens
    # there; each turn's whole prompt KV then crosses to the decode pool
    s = build_sessions([0, 0], [-1, 0], [1000, 1500], [100, 100], [0.0, 0.0], [1, 2],
                       [[], []], [], "two-turn")
    r = bench_trace("Llama-3.1-70B", "H100-SXM", trace=s, prefill_pool=Pool(1, 2),
                    decode_pool=Pool(1, 2), concurrency=[1], capacity_tokens=(0, 1e6, 0),
                    per_turn=True)["points"][0]
    t = r["turns"]
    assert list(t["hit_tokens_dram"]) == [0, 1100]
    hw = load_hardware("H100-SXM")
    per_gpu = 80 * 2 * 8 * 128 * 2 / 2          # bf16 KV split over the prefill pool's tp 2
    assert t["restore_s"][1] == pytest.approx(1100 * per_gpu / hw.host_dram_bw_bytes_per_s)
    rl = resolve_realism(False, None)
    link = hw.scale_out_bw_bytes_per_s * 2 * rl.out_frac
    host = resolve_serving_engine(None, "engine", hardware="H100-SXM").host_s_per_prefill_pass
    for i, (p, h) in enumerate(((1000, 0.0), (1500, 1100 / 1500))):
        transfer = p * 80 * 2 * 8 * 128 * 2 / link + rl.out_latency_s   # the whole prompt
        pre = float(np.asarray(evaluate_arrays(
            "Llama-3.1-70B", "H100-SXM", tp=2, batch_size=1.0, prefill_batch_size=1.0,
            prompt_len=float(p), cache_hit_rate=h, kv_len=1262.5, final_len=1350.0,
            variables=["prefill_step_s"])["prefill_step_s"]).reshape(-1)[0])
        # 3 %: the pass interpolated between hit nodes (as test_replay's aggregated case)
        assert t["ttft_s"][i] == pytest.approx(max(pre + host, t["restore_s"][i]) + transfer,
                                               rel=0.03)
