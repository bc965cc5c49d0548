"""The full KV pool (factory/kv_pool.py) against hand-followed schedules.

A rank whose pool holds exactly three sequences' worth at their final length (60 tokens;
prompts and outputs of 10 tokens, one token a step, one free token needed per running
request) serves four clients. Every count below is followed by hand in the comments from
the engines' rules (SGLang 0.5.6 schedule_policy.py / schedule_batch.py, vLLM 0.11.0
v1/core/sched/scheduler.py, as configs/serving_engines.toml cites them).
"""

import numpy as np
import pytest

from inference_factory.factory import kv_pool as kp

TEN = 10.0


#: page 1, one free token a request (window 0 at page 1 counts every request)
ONE_TOKEN = np.array([1.0, 0.0, 1.0, kp.CHECK_BOUNDARY])


def run(admission, *, clients=4, pool=60.0, ratio=(0.7, 0.7, 0.0), newest=True, front=False,
        requests=5, reserve=1.0, check=ONE_TOKEN, prompt=TEN, output=TEN, tau=1.0):
    prompt = np.full(requests, prompt)
    out = np.full(requests, output)
    return kp.simulate_kv_pool(
        prompt, out, clients, pool, 0.0, tau, check, admission, newest, front, *ratio, 20.0,
        4096.0, reserve, 1000.0, 1000.0,
        np.array([1.0, 100.0]), np.array([1.0, 1.0]),      # every decode step 1 s
        np.array([1.0, 100.0]), np.array([0.0, 0.0]),      # prefill passes take no time
        TEN, 0)


def test_vllm_preempts_the_latest_and_admits_nothing_in_that_step():
    # one pass admits all four prompts (40 of 60 tokens: the prompts only). Each step adds
    # 4 tokens: after 5 steps the pool is full (60), the 6th step's check preempts the
    # request admitted last (frees 10 + 5) and the three run on; the preempted one needs
    # its 15 tokens again, never free before the three finish together after 10 steps
    s = run(kp.ADMIT_PROMPT, front=True)
    assert s[kp.PREFILL_PASSES] == 1 and s[kp.ADMISSIONS] == 4
    assert s[kp.RETRACTIONS] == 1
    assert s[kp.DECODE_STEPS] == 10 and s[kp.T_S] == 10.0
    assert s[kp.COMPLETED] == 3
    assert s[kp.RUNNING_S] == 4 * 5 + 3 * 5          # four for 5 steps, three for 5
    assert s[kp.WAIT_RETRACTED_S] == 5.0 and s[kp.WAIT_NEW_S] == 0.0
    assert s[kp.RECOMPUTE_TOKENS] == 0.0 and s[kp.FRESH_PREFILL_TOKENS] == 40.0


def test_sglang_ratio_overcommits_then_retracts_one():
    # ratio 0.1: pass 1 takes two (the second needs 10 + 10 < 50 - 0 - 10), the third fails
    # (20 < 40 - 20 is false); pass 2 (running reserve 2 x 10 x 0.1) takes the third (20 <
    # 38), not the fourth (20 < 18); pass 3 takes the fourth (20 < 30 - 3): four running
    # where three fit at final length. After 5 steps the pool is full; the check retracts
    # one (all tied: the last in the batch), the new ratio (15 + 20 x 3)/31 clips to 1, and
    # the retracted request (15 + 5 tokens against 12 - 12 left) waits until the end
    s = run(kp.ADMIT_RATIO, ratio=(0.1, 0.1, 0.0), newest=False)
    assert s[kp.PREFILL_PASSES] == 3 and s[kp.ADMISSIONS] == 4
    assert s[kp.RETRACTIONS] == 1 and s[kp.DECODE_STEPS] == 10
    assert s[kp.RUNNING_S] == 4 * 5 + 3 * 5 and s[kp.WAIT_RETRACTED_S] == 5.0


def test_sglang_ratio_at_its_default_never_overcommits_here():
    # ratio 0.7 (the default): pass 1 takes two, pass 2 the third (20 < 40 - 14), the fourth
    # never (15 - 1.5 g tokens left after g steps < 20): three run 10 steps, no retraction
    s = run(kp.ADMIT_RATIO, newest=False)
    assert s[kp.PREFILL_PASSES] == 2 and s[kp.ADMISSIONS] == 3
    assert s[kp.RETRACTIONS] == 0 and s[kp.DECODE_STEPS] == 10
    assert s[kp.RUNNING_S] == 3 * 10 and s[kp.WAIT_NEW_S] == 10.0


@pytest.mark.parametrize("pool, admitted", [(60.0, 2), (63.0, 2), (64.0, 3)])
def test_sglang_exact_check_keeps_a_token_per_request(pool, admitted):
    # three requests of 10 + 10 tokens in lockstep peak at 60 tokens; SGLang's check wants
    # more than one free token per request at each finish (min_free <= 1 x bs refuses):
    # 60 and 63 tokens take two at once, 64 three (64 - 30 - 30 = 4 > 3)
    left = np.full(4, TEN)
    occ = np.full(4, TEN)
    got = 1
    for k in (2, 3):
        # k requests: the cur_rem after the candidate's prompt, the others' prompts held
        if kp.exact_admission_fits(left, occ, k, pool - TEN * k, 1.0):
            got = k
    assert got == admitted


def test_exact_admission_waits_for_the_running_to_progress():
    # pool 60, two running after g steps (10 - g tokens left, 10 + g held), the third's
    # prompt of 10 taken: 60 - 2 (10 + g) - 10 = 30 - 2g free, less 3 x (10 - g) at the
    # first finish is g, against 3 tokens reserved: g = 1, 2, 3 refuse, g = 4 admits
    left, occ = np.zeros(3), np.zeros(3)
    first = None
    for g in range(10):
        left[:2], occ[:2] = TEN - g, TEN + g
        left[2], occ[2] = TEN, TEN
        if kp.exact_admission_fits(left, occ, 3, 60.0 - 2 * (TEN + g) - TEN, 1.0):
            first = g
            break
    assert first == 4


def test_a_pool_that_holds_everyone_never_retracts():
    # four clients, pool of four sequences at final length: every rule admits all and
    # never retracts; the batch is four whenever decoding
    for adm in (kp.ADMIT_RATIO, kp.ADMIT_EXACT, kp.ADMIT_PROMPT):
        s = run(adm, pool=90.0)
        assert s[kp.RETRACTIONS] == 0 and s[kp.ADMISSIONS] == 4
        assert s[kp.RUNNING_S] == 4 * s[kp.DECODE_STEPS]


def test_bench_past_the_pool_preempts_and_falls_under_vllm_but_not_guaranteed():
    # Llama-3.1-70B, 8 x H100, BF16 KV, 8K/1K: the pool holds about 140 sequences at their
    # final length. vLLM V1 admits by prompt blocks, overcommits and preempts the latest
    # (some % of requests prefilled again), so past the pool its throughput falls; an engine
    # that reserves whole outputs (``ideal``: guaranteed) stays at the final-length fit
    from inference_factory.analysis.bench import bench
    from inference_factory.engine import evaluate_arrays

    fit = float(evaluate_arrays("Llama-3.1-70B", "H100-SXM", batch_size=1.0, tp=8,
                                kv_precision="bf16", kv_len=8192.0, final_len=9216.0,
                                variables=["max_batch_size"])["max_batch_size"])
    kw = dict(tp=8, kv_precision="bf16", isl=8192, osl=1024, range_ratio=0.8,
              concurrency=[128, 512], as_frame=True)
    v = bench("Llama-3.1-70B", "H100-SXM", engine="vllm", **kw).set_index("max_concurrency")
    assert v.loc[128, "kv_retractions_per_request"] == 0.0          # the pool holds 128
    assert v.loc[512, "kv_retractions_per_request"] > 0.02
    assert v.loc[512, "kv_recompute_frac"] > 0.02
    assert v.loc[512, "decode_batch_per_rank"] > fit                 # overcommitted
    # and the recompute costs more than the larger batch gains (2,096 -> 2,026 tok/s/GPU seen)
    assert v.loc[512, "output_throughput"] < v.loc[128, "output_throughput"]
    i = bench("Llama-3.1-70B", "H100-SXM", engine="ideal", **kw).set_index("max_concurrency")
    assert i.loc[512, "kv_retractions_per_request"] == 0.0
    assert i.loc[512, "decode_batch_per_rank"] == pytest.approx(fit)


@pytest.mark.parametrize("length, need", [(58, 0.0), (59, 320.0), (64, 320.0), (65, 0.0)])
def test_sglang_decode_check_with_a_draft_at_page_64(length, need):
    # SGLang 0.5.6 with EAGLE (2 steps, top-k 1, 3 draft tokens): buf multiplier and
    # threshold 3 + 1 x 2 = 5; a request counts where (seqlen + 5) % 64 <= 5, i.e. seqlen
    # 59 .. 64 of every 64, and then asks for 5 pages of 64 = 320 tokens
    assert kp.decode_need_tokens(float(length), 64.0, 5.0, 5.0, kp.CHECK_BOUNDARY) == need


def test_sglang_decode_check_at_page_one_counts_every_request():
    # page_size 1: new_page_count_next_decode is the batch size, times the multiplier
    for length in (10.0, 11.0, 12.5):
        assert kp.decode_need_tokens(length, 1.0, 5.0, 5.0, kp.CHECK_BOUNDARY) == 5.0
        assert kp.decode_need_tokens(length, 1.0, 0.0, 1.0, kp.CHECK_BOUNDARY) == 1.0


@pytest.mark.parametrize("length, need", [(13, 0.0), (14, 16.0), (16, 16.0), (17, 0.0)])
def test_vllm_allocates_the_blocks_that_cover_the_step_and_lookahead(length, need):
    # vLLM 0.11 with one draft token: 1 + 1 new tokens and 1 lookahead slot: blocks of 16 for
    # s + 3 tokens against the ceil(s / 16) held: one more block from s = 14 to 16
    assert kp.decode_need_tokens(float(length), 16.0, 3.0, 1.0, kp.CHECK_COVER) == need


def test_paged_tokens_are_whole_pages():
    assert kp.paged_tokens(10.0, 8.0) == 16.0
    assert kp.paged_tokens(16.0, 8.0) == 16.0
    assert kp.paged_tokens(17.0, 8.0) == 24.0
    assert kp.paged_tokens(10.5, 1.0) == 11.0


def test_pages_of_8_make_vllm_preempt_more_than_single_tokens():
    # pool 64, four prompts of 10, one token a step. Page 1: the four take 40 tokens, grow 4
    # a step, fill the pool after 6 steps; the 7th step's check (4 tokens) preempts the
    # latest (frees 16) and three run on to the end (step 10).
    one = run(kp.ADMIT_PROMPT, pool=64.0, front=True,
              check=np.array([1.0, 1.0, 1.0, kp.CHECK_COVER]))
    assert one[kp.RETRACTIONS] == 1 and one[kp.RUNNING_S] == 4 * 6 + 3 * 4
    # Pages of 8: each prompt holds 16 (2 pages): the four fill the pool at once. At length
    # 16 (after step 6) each needs a third page (32 tokens, none free): the latest two are
    # preempted (16 free < 24 for three; 32 >= 16 for two), step 7 runs two (17 tokens, 3
    # pages each, 16 free). Then vLLM readmits the third (its 16 tokens again in 2 pages:
    # 16 <= 16 free), whose next token needs a page: preempted again at the next step, and
    # so on: steps 7, 9, 11, 13 run two and each is followed by a readmission (3 in all),
    # until the two finish at 20 tokens
    eight = run(kp.ADMIT_PROMPT, pool=64.0, front=True,
                check=np.array([8.0, 1.0, 1.0, kp.CHECK_COVER]))
    assert eight[kp.DECODE_STEPS] == 10 and eight[kp.COMPLETED] == 2
    assert eight[kp.RETRACTIONS] == 2 + 3
    assert eight[kp.ADMISSIONS] == 4 + 3 and eight[kp.PREFILL_PASSES] == 1 + 3
    assert eight[kp.RECOMPUTE_TOKENS] == 3 * 16.0
    assert eight[kp.RUNNING_S] == 4 * 6 + 2 * 4
    assert eight[kp.WAIT_RETRACTED_S] == 2 * 4


def test_sglang_sizes_the_targets_pool_without_the_draft():
    # half of a 100-byte GPU for weights and KV; 20 bytes of weights of which the draft's 5,
    # 2 bytes a token of which the draft's 0.5: with the draft in the pool (50 - 20) / 2 = 15
    # tokens, without it (SGLang: the target's pool first) (50 - 15) / 1.5 = 23.3 -> 23
    # whole one-token pages; in pages of 4 tokens, 20
    import dataclasses

    from inference_factory.analysis.full_memory import engine_pool
    from inference_factory.specs.engines import load_serving_engine

    eng = load_serving_engine("sglang-0.5.6")
    assert eng.kv_pool.draft_in_pool is False and eng.kv_pool.page_tokens == 1
    eng = dataclasses.replace(eng, kv_memory_fraction=0.5)
    kw = dict(context_tokens=1.0, hbm_bytes=100.0, weight_bytes=20.0, bytes_per_token=2.0,
              draft_weight_bytes=5.0, draft_bytes_per_token=0.5)
    inside = dataclasses.replace(eng, kv_pool=dataclasses.replace(eng.kv_pool,
                                                                   draft_in_pool=True))
    assert engine_pool(inside, **kw) == 15.0
    assert engine_pool(eng, **kw) == 23.0
    paged = dataclasses.replace(eng, kv_pool=dataclasses.replace(eng.kv_pool, page_tokens=4))
    assert engine_pool(paged, **kw) == 20.0


def test_a_sequences_fixed_bytes_count_in_the_pools_tokens():
    # a sequence's fixed bytes a = 6 at b = 2 bytes a token with the draft's 0.5: 3 tokens
    # of the line a + b L; SGLang's pool (the target's alone) counts tokens of 1.5 bytes, so
    # the same 6 bytes are 4 of its tokens; an engine whose pool holds the draft keeps 3
    import dataclasses

    from inference_factory.analysis.full_memory import engine_overhead_tokens
    from inference_factory.specs.engines import load_serving_engine

    eng = load_serving_engine("sglang-0.5.6")
    assert eng.kv_pool.draft_in_pool is False
    kw = dict(bytes_per_token=2.0, draft_bytes_per_token=0.5)
    assert engine_overhead_tokens(eng, 3.0, **kw) == pytest.approx(4.0, rel=1e-15)
    inside = dataclasses.replace(eng, kv_pool=dataclasses.replace(eng.kv_pool,
                                                                   draft_in_pool=True))
    assert engine_overhead_tokens(inside, 3.0, **kw) == 3.0
    assert engine_overhead_tokens(eng, 3.0, bytes_per_token=2.0) == 3.0   # no draft
