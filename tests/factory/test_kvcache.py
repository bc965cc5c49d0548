"""Tiered exact-prefix KV cache: the fast simulation against a brute-force oracle, capacity
invariants, and Che's approximation against the exact LRU simulation."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_factory.errors import SpecError
from inference_factory.factory.kvcache import (che_token_hit_rate, popularity_trace,
                                               simulate_prefix_cache, zipf_popularity)
from inference_factory.factory.workload import (Trace, WorkloadClass, WorkloadSpec,
                                                example_trace_path, generate_trace, load_trace)
from tests.kvcache_oracle import brute_force_prefix_cache, interpreted_prefix_cache

FIELDS = ("hit_tokens_hbm", "hit_tokens_dram", "hit_tokens_nvme")


def random_trace(rng: np.random.Generator, n_requests: int, n_items: int, max_chain: int,
                 max_item_tokens: int) -> Trace:
    """Small adversarial trace: random chains with repeats, own items, sizes up to the tiers."""
    sizes = rng.integers(1, max_item_tokens + 1, n_items)
    lengths = rng.integers(0, max_chain + 1, n_requests)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    # Zipf-ish reuse so that hits happen, plus repeated items inside one chain
    items = np.minimum(rng.zipf(1.3, offsets[-1]) - 1, n_items - 1)
    own = np.where(rng.random(n_requests) < 0.4, rng.integers(0, n_items, n_requests), -1)
    chain_tok = np.array([sizes[items[offsets[i]:offsets[i + 1]]].sum()
                          for i in range(n_requests)], dtype=np.int64)
    return Trace(arrival_s=np.arange(n_requests, dtype=float), class_id=np.zeros(n_requests),
                 class_names=("x",), input_tokens=chain_tok + rng.integers(0, 5, n_requests),
                 output_tokens=np.ones(n_requests), chain_offsets=offsets, chain_items=items,
                 item_tokens=sizes, own_item=own, acceptance_rate=[0.5], expert_skew=[0.0])


def assert_same(fast, ref):
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(fast, f), getattr(ref, f), err_msg=f)
    assert fast.peak_occupancy_tokens == ref.peak_occupancy_tokens


CAPACITY_CASES = [
    (40, 80, 160),
    (0, 50, 100),          # no HBM
    (30, 0, 60),           # no DRAM
    (25, 25, 0),           # no NVMe
    (0, 0, 0),             # no cache at all
    (10, 200, 15),         # items larger than HBM and NVMe but not DRAM
    (math.inf, 0, 0),      # unbounded HBM
    (7, 7, 7),             # most items larger than every tier
]


@pytest.mark.parametrize("caps", CAPACITY_CASES, ids=str)
def test_fast_equals_brute_force_on_random_traces(caps):
    rng = np.random.default_rng(abs(hash(caps)) % 2**32)
    for _ in range(40):
        tr = random_trace(rng, n_requests=int(rng.integers(1, 60)),
                          n_items=int(rng.integers(1, 40)), max_chain=6,
                          max_item_tokens=int(rng.integers(1, 30)))
        fast = interpreted_prefix_cache(tr, caps)
        assert_same(fast, brute_force_prefix_cache(tr, caps))
        assert_same(simulate_prefix_cache(tr, caps), fast)      # compiled = interpreted
        for t, cap in enumerate(caps):
            assert fast.peak_occupancy_tokens[t] <= cap
        assert np.all(fast.hit_tokens <= tr.chain_tokens)
        assert np.all(fast.hit_tokens <= tr.input_tokens)


@given(seed=st.integers(0, 2**32 - 1), caps=st.tuples(*[st.integers(0, 120)] * 3),
       n_items=st.integers(1, 30), max_item=st.integers(1, 60))
def test_fast_equals_brute_force_property(seed, caps, n_items, max_item):
    tr = random_trace(np.random.default_rng(seed), 40, n_items, 5, max_item)
    fast = interpreted_prefix_cache(tr, caps)
    assert_same(fast, brute_force_prefix_cache(tr, caps))
    assert_same(simulate_prefix_cache(tr, caps), fast)


def test_fast_equals_brute_force_on_generated_and_loaded_traces():
    c = WorkloadClass("chat", 1.0, prompt_tokens_median=60, prompt_tokens_sigma=1.0,
                      output_tokens_median=80, output_tokens_sigma=1.0, max_prompt_tokens=2000,
                      max_output_tokens=2000, system_prompt_tokens=300, n_system_prompts=6,
                      turns_mean=3.0)
    tr = generate_trace(WorkloadSpec(n_requests=400, arrival_rate_per_s=1.0, seed=2,
                                     classes=(c,), think_time_mean_s=5.0))
    for caps in [(1000, 3000, 10_000), (0, 2000, 500), (400, 400, 400)]:
        ref = brute_force_prefix_cache(tr, caps)
        assert_same(interpreted_prefix_cache(tr, caps), ref)
        assert_same(simulate_prefix_cache(tr, caps), ref)
    mc = load_trace(example_trace_path())
    for caps in [(2048, 4096, 16384), (0, 0, 1e9), (1024, 0, 3000)]:
        fast = interpreted_prefix_cache(mc, caps)
        assert_same(fast, brute_force_prefix_cache(mc, caps))
        assert_same(simulate_prefix_cache(mc, caps), fast)
        assert fast.token_hit_rate() > 0


@pytest.mark.parametrize("caps", [(3e4, 2e5, 1e6), (2e5, 0, 2e6), (1e4, 1e4, 1e4)], ids=str)
def test_compiled_equals_interpreted_on_a_long_generated_trace(caps):
    """The compiled LRU (the production path) against the interpreted one without the audit
    (too slow for 20,000 requests) on a generated multi-turn trace: the same hits per request
    and tier, the same peaks."""
    c = WorkloadClass("chat", 1.0, prompt_tokens_median=600, prompt_tokens_sigma=1.0,
                      output_tokens_median=80, output_tokens_sigma=1.0, max_prompt_tokens=20000,
                      max_output_tokens=2000, system_prompt_tokens=3000, n_system_prompts=50,
                      turns_mean=4.0)
    tr = generate_trace(WorkloadSpec(n_requests=20_000, arrival_rate_per_s=5.0, seed=3,
                                     classes=(c,), think_time_mean_s=20.0))
    compiled = simulate_prefix_cache(tr, caps)
    assert_same(compiled, interpreted_prefix_cache(tr, caps, audit=False))
    assert 0 < compiled.token_hit_rate() < 1


def test_hand_worked_example():
    # items: 0 (system, 4 tokens), 1 (turn, 3), 2 (turn, 5). HBM 8, DRAM 4, NVMe 100.
    tr = Trace(arrival_s=[0, 1, 2, 3], class_id=[0] * 4, class_names=("x",),
               input_tokens=[6, 9, 14, 6], output_tokens=[1] * 4,
               chain_offsets=[0, 1, 3, 6, 7], chain_items=[0, 0, 1, 0, 1, 2, 0],
               item_tokens=[4, 3, 5], own_item=[1, 2, -1, -1],
               acceptance_rate=[0.5], expert_skew=[0.0])
    r = simulate_prefix_cache(tr, (8, 4, 100))
    # r0: miss. HBM [0, 1] (LRU first).
    # r1: 0 and 1 hit in HBM (7). Own item 2 (5) needs room: 0 demoted. HBM [1, 2], DRAM [0].
    # r2: 0 hits in DRAM (4), 1 and 2 in HBM (8). Touch 0: HBM evicts 1 (-> DRAM) and 2
    #     (larger than DRAM: skips it, -> NVMe). HBM [0], DRAM [1], NVMe [2].
    #     Touch 1: HBM [0, 1]. Touch 2: 0 demoted. HBM [1, 2], DRAM [0], NVMe [].
    # r3: 0 hits in DRAM (4).
    np.testing.assert_array_equal(r.hit_tokens_hbm, [0, 7, 8, 0])
    np.testing.assert_array_equal(r.hit_tokens_dram, [0, 0, 4, 4])
    np.testing.assert_array_equal(r.hit_tokens_nvme, [0, 0, 0, 0])
    assert r.peak_occupancy_tokens == (8, 4, 5)
    assert_same(r, brute_force_prefix_cache(tr, (8, 4, 100)))


def test_prefix_match_stops_at_first_missing_item():
    # item 1 is never cached (larger than every tier), so item 2 behind it never hits
    tr = Trace(arrival_s=[0, 1], class_id=[0, 0], class_names=("x",), input_tokens=[60, 60],
               output_tokens=[1, 1], chain_offsets=[0, 3, 6], chain_items=[0, 1, 2, 0, 1, 2],
               item_tokens=[2, 50, 3], own_item=[-1, -1], acceptance_rate=[0.5],
               expert_skew=[0.0])
    r = simulate_prefix_cache(tr, (10, 10, 10))
    np.testing.assert_array_equal(r.hit_tokens, [0, 2])


def test_a_state_snapshot_takes_room_but_hits_count_tokens():
    """A model with per-sequence state keeps a snapshot with each cached item: it takes
    ``snapshot_tokens`` of room beyond the item's tokens, and a hit still counts tokens.
    Items 0 (4 tokens) and 1 (3), each request using both; HBM of 9 tokens, nothing else."""
    tr = Trace(arrival_s=[0, 1], class_id=[0, 0], class_names=("x",), input_tokens=[8, 8],
               output_tokens=[1, 1], chain_offsets=[0, 2, 4], chain_items=[0, 1, 0, 1],
               item_tokens=[4, 3], own_item=[-1, -1], acceptance_rate=[0.5],
               expert_skew=[0.0])
    # without snapshots both items fit (7 <= 9): the second request hits 7 tokens
    r = simulate_prefix_cache(tr, (9, 0, 0))
    np.testing.assert_array_equal(r.hit_tokens, [0, 7])
    # snapshots of 1 token each: 5 + 4 = 9 still fit, hits are still 7 tokens
    r = simulate_prefix_cache(tr, (9, 0, 0), snapshot_tokens=1)
    np.testing.assert_array_equal(r.hit_tokens, [0, 7])
    assert r.peak_occupancy_tokens[0] == 9
    # 2 tokens each (rounded up from 1.5): 6 + 5 > 9, item 0 is evicted by item 1: no hit
    r = simulate_prefix_cache(tr, (9, 0, 0), snapshot_tokens=1.5)
    np.testing.assert_array_equal(r.hit_tokens, [0, 0])
    with pytest.raises(SpecError, match="snapshot_tokens"):
        simulate_prefix_cache(tr, (9, 0, 0), snapshot_tokens=-1)


def test_unbounded_cache_hits_every_repeat():
    tr = generate_trace(WorkloadSpec(
        n_requests=3000, arrival_rate_per_s=1.0, seed=0,
        classes=(WorkloadClass("c", 1.0, 50, 1.0, 50, 1.0, 1000, 1000, system_prompt_tokens=100,
                               n_system_prompts=20, turns_mean=3.0),)))
    r = simulate_prefix_cache(tr, (math.inf, 0, 0))
    # only compulsory misses: each system prompt (item ids 0..19) once; a turn item is first
    # inserted by its producer, so every later use hits
    first_sys = np.unique(tr.chain_items[tr.chain_items < 20]).size
    assert r.hit_tokens.sum() == tr.chain_tokens.sum() - 100 * first_sys


def test_hit_rate_definition_and_validation():
    tr = popularity_trace(500, 20, 1.0, item_tokens=10, suffix_tokens=5, seed=0)
    r = simulate_prefix_cache(tr, (30, 30, 30))
    assert r.token_hit_rate() == pytest.approx(r.hit_tokens.sum() / tr.input_tokens.sum())
    assert r.token_hit_rate(100) == pytest.approx(r.hit_tokens[100:].sum()
                                                   / tr.input_tokens[100:].sum())
    assert sum(r.token_hit_rate(tier=t) for t in ("hbm", "dram", "nvme")) == \
        pytest.approx(r.token_hit_rate())
    with pytest.raises(SpecError, match=r"capacity_tokens = \(1, 2\) must be three numbers"):
        simulate_prefix_cache(tr, (1, 2))
    with pytest.raises(SpecError, match="must be three numbers >= 0"):
        simulate_prefix_cache(tr, (1, -2, 3))


# ---- Che's approximation ------------------------------------------------------------------

N_ITEMS, ITEM_TOKENS, SUFFIX_TOKENS = 2000, 1024, 256
N_REQ, WARMUP = 150_000, 20_000
TIER_ITEMS = (50, 150, 400)         # tiers in items; cumulative 50, 200, 600 of 2000 items


@pytest.mark.parametrize("alpha", [0.6, 0.9, 1.2])
def test_che_matches_exact_lru_simulation(alpha):
    """One simulation gives three capacities: the exclusive tiers are one LRU stack, so the
    hits of HBM, HBM+DRAM and all tiers are those of single LRU caches of the cumulative sizes
    (exactly, here: equal item sizes leave no slack at the tier boundaries).

    Tolerance 0.006 absolute: Che's error under IRM vanishes as the number of items grows
    (Fricker, Robert & Roberts 2012) and is of order 1e-3 at N = 2000 items; the measured rate
    over 130k requests (the first 20k, far more than the 600-item cache needs to fill, are
    excluded) has a standard error of about 0.8 * sqrt(0.25 / 130e3) ~ 1.1e-3 (more with the
    time correlation of LRU hits), so 0.006 is about five standard errors. Observed errors
    here: at most 0.003 (alpha 0.6, 600 items), typically 0.001.
    """
    tr = popularity_trace(N_REQ, N_ITEMS, alpha, item_tokens=ITEM_TOKENS,
                          suffix_tokens=SUFFIX_TOKENS, seed=11)
    caps = tuple(k * ITEM_TOKENS for k in TIER_ITEMS)
    r = simulate_prefix_cache(tr, caps)
    measured = np.cumsum([getattr(r, f)[WARMUP:].sum() for f in FIELDS]) \
        / tr.input_tokens[WARMUP:].sum()
    che = che_token_hit_rate(zipf_popularity(N_ITEMS, alpha), ITEM_TOKENS, np.cumsum(caps),
                             uncacheable_tokens=SUFFIX_TOKENS)
    np.testing.assert_allclose(measured, che, atol=0.006)


def test_che_with_unequal_item_sizes_single_tier():
    # sizes 256..2048: the LRU also leaves some slack (< one item) at the tier end;
    # 0.01 absolute covers that (one item of ~1100 tokens in a 300-item cache: ~0.3 %) plus noise
    rng = np.random.default_rng(0)
    sizes = 256 * rng.integers(1, 9, N_ITEMS)
    tr = popularity_trace(100_000, N_ITEMS, 0.9, item_tokens=sizes, suffix_tokens=100, seed=3)
    p = zipf_popularity(N_ITEMS, 0.9)
    for cap in (100_000, 400_000):
        r = simulate_prefix_cache(tr, (cap, 0, 0))
        che = che_token_hit_rate(p, sizes, cap, uncacheable_tokens=100)
        assert r.token_hit_rate(WARMUP) == pytest.approx(float(che), abs=0.01)


def test_che_limits_shape_and_monotonicity():
    p = zipf_popularity(500, 0.8)
    caps = np.array([[0.0, 1e3, 1e4], [1e5, 5e5, 1e9]])
    h = che_token_hit_rate(p, 1000, caps, uncacheable_tokens=250)
    assert h.shape == caps.shape
    assert h[0, 0] == 0.0
    assert h[1, 2] == pytest.approx(1000 / 1250)              # all 500 items fit: 5e5 tokens
    assert h[1, 1] == pytest.approx(1000 / 1250)              # capacity == total
    flat = h.ravel()
    assert np.all(np.diff(flat) >= 0)
    # scalar in, 0-d out; no uncacheable tokens and uniform popularity: H = C / total
    assert float(che_token_hit_rate(np.ones(100), 1, 100)) == pytest.approx(1.0)
    assert float(che_token_hit_rate(np.ones(100), 1, 40)) == pytest.approx(0.4, rel=1e-9)
    with pytest.raises(SpecError, match="item_popularity"):
        che_token_hit_rate([-1.0, 2.0], 1, 10)
    with pytest.raises(SpecError, match="uncacheable_tokens"):
        che_token_hit_rate([1.0], 1, 10, uncacheable_tokens=-1)
