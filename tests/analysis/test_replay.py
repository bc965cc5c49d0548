"""Session replay (``bench --trace``): the random-prompt bench as its special case, a two-turn
trace checked by hand, the tiers' sizes."""

import numpy as np
import pytest

from inference_factory.analysis.bench import bench
from inference_factory.analysis.bench.replay import bench_trace, tier_bytes
from inference_factory.analysis.closed_loop import Pool
from inference_factory.engine import evaluate_arrays
from inference_factory.factory.sessions import build_sessions
from inference_factory.specs import load_hardware
from inference_factory.specs.engines import load_serving_engine


def one_turn_sessions(n, isl, osl):
    return build_sessions(np.arange(n), np.full(n, -1), np.full(n, isl), np.full(n, osl),
                          np.zeros(n), np.zeros(n), [[]] * n, [], "one-turn")


@pytest.mark.parametrize("c", [1, 64, 256])
def test_one_turn_sessions_without_shared_prefixes_are_the_random_prompt_bench(c):
    # the same requests (4,096 prompts of 4,096 tokens, 512 out) as bench's uniform lengths
    # at range ratio 1; the replay draws its own waits per turn, so the medians agree to the
    # sampling error of 4,096 draws (< 1 %), the throughput to the first wave's share
    isl, osl, n = 4096, 512, 4096
    r = bench_trace("DeepSeek-V3", "B200", trace=one_turn_sessions(n, isl, osl), tp=8,
                    concurrency=[c], kv_offload=None)["points"][0]
    b = bench("DeepSeek-V3", "B200", tp=8, isl=isl, osl=osl, concurrency=[c],
              num_prompts=n, as_frame=True).iloc[0]
    assert r["prefix_hit_rate"] == 0.0
    for mine, theirs in (("total_tokens_per_s_per_gpu", "total_token_throughput_per_gpu"),
                         ("output_tokens_per_s_per_gpu", "output_throughput_per_gpu"),
                         ("time_to_first_token_p50_ms", "median_ttft_ms"),
                         ("inter_token_latency_p50_ms", "median_tpot_ms"),
                         ("request_latency_p50_ms", "median_e2el_ms")):
        assert r[mine] == pytest.approx(b[theirs], rel=0.02), mine


def test_two_turns_by_hand():
    # one session: turn 0 sends 1,000 tokens and gets 100; turn 1 resends those 1,100 plus 400
    # new ones. The cache is DRAM only (HBM 0 tokens), so turn 1 restores 1,100 tokens.
    s = build_sessions([0, 0], [-1, 0], [1000, 1500], [100, 100], [0.0, 0.0], [1, 2],
                       [[], []], [], "two-turn")
    r = bench_trace("Llama-3.1-70B", "H100-SXM", trace=s, tp=2, concurrency=[1],
                    capacity_tokens=(0, 1e6, 0), per_turn=True)["points"][0]
    t = r["turns"]
    assert r["prefix_hit_rate"] == pytest.approx(1100 / 2500, abs=1e-12)
    assert r["prefix_hit_rate_dram"] == pytest.approx(1100 / 2500, abs=1e-12)
    assert list(t["hit_tokens_dram"]) == [0, 1100]
    # Llama-3.1-70B bf16 KV: 80 layers x 2 (K, V) x 8 heads x 128 x 2 bytes = 327,680 B a
    # token, split over tp = 2 (8 KV heads >= 2): 163,840 B per GPU
    per_gpu = 80 * 2 * 8 * 128 * 2 / 2
    assert r["restored_bytes_per_gpu"] == pytest.approx(1100 * per_gpu, rel=1e-12)
    hw = load_hardware("H100-SXM")
    assert t["restore_s"][1] == pytest.approx(1100 * per_gpu / hw.host_dram_bw_bytes_per_s)
    # at concurrency 1 nothing waits: TTFT = max(own prefill, restore), the own prefill being
    # the engine's batch-1 pass of the turn's prompt and hit plus the engine's host time
    host = load_serving_engine(None).host_s_per_prefill_pass
    for i, (p, h) in enumerate(((1000, 0.0), (1500, 1100 / 1500))):
        pre = float(np.asarray(evaluate_arrays(
            "Llama-3.1-70B", "H100-SXM", tp=2, batch_size=1.0, prefill_batch_size=1.0,
            prompt_len=float(p), cache_hit_rate=h, kv_len=1262.5, final_len=1350.0,
            variables=["prefill_step_s"])["prefill_step_s"]).reshape(-1)[0])
        # 3 %: the replay interpolates the pass between hit-rate nodes (0.7, 0.8) and
        # scales host time with the prompt
        assert t["ttft_s"][i] == pytest.approx(max(pre + host, t["restore_s"][i]), rel=0.03)
    assert t["start_s"][1] == pytest.approx(t["e2e_s"][0], rel=1e-6)   # no think time


def test_dram_tier_is_the_inferencex_pro_rata_rule():
    hw = load_hardware("B200")
    dram, nvme = tier_bytes(hw, Pool(1, 4), "dram")
    # min(2,048 GB, 3 TB) x 0.80 x 4 / 8 GPUs
    assert dram == pytest.approx(2048e9 * 0.8 * 4 / 8)
    assert nvme == 0.0
    assert tier_bytes(hw, Pool(1, 8), "dram:100+nvme") == (100e9, hw.nvme_capacity_bytes)
