"""The closed-loop formulas of ``bench`` (kernels/serving.py) against independent computations:
brute-force moments, the algebra of Little's law, textbook queue values, enumerated waves."""

from __future__ import annotations

import numpy as np
import pytest

from inference_factory.kernels import serving as ks


@pytest.mark.parametrize("length, ratio", [(1024, 0.8), (8192, 0.8), (1000, 1.0), (7, 0.0)])
def test_uniform_length_moments_match_the_enumerated_integers(length, ratio):
    values = np.arange(int(np.floor(length * ratio)), length + 1, dtype=float)
    mean, sq = ks.uniform_length_moments(max_tokens=length, range_ratio=ratio)
    assert mean == pytest.approx(values.mean(), rel=1e-12)
    assert sq == pytest.approx((values ** 2).mean(), rel=1e-12)


def test_request_rate_satisfies_littles_law_on_the_decode_phase():
    b, td, tau, o, s = 24.0, 0.03, 1.8, 900.0, 0.004
    x = ks.closed_loop_request_rate_per_s(decoding_sequences=b, decode_step_s=td,
                                          tokens_per_step=tau, decode_tokens_per_request=o,
                                          stall_s_per_request=s)
    tpot = ks.colocated_tpot_s(decode_step_s=td, tokens_per_step=tau, stall_frac=x * s)
    assert x * o * tpot == pytest.approx(b, rel=1e-12)       # B = X (O - 1) TPOT


def test_no_stall_from_ones_own_prefill_and_none_at_concurrency_one():
    assert ks.others_prefill_stall_frac(request_rate_per_s=2.0, prefill_s_per_request=0.1,
                                        in_service=1.0) == 0.0
    assert ks.others_prefill_stall_frac(request_rate_per_s=2.0, prefill_s_per_request=0.1,
                                        in_service=4.0) == pytest.approx(0.15)
    assert ks.others_busy_probability(decode_share=0.9, in_service=1.0) == 0.0
    assert ks.others_busy_probability(decode_share=0.5, in_service=3.0) == pytest.approx(0.75)


def test_md1_queue_wait_is_the_textbook_value():
    # M/D/1 at rho = 0.5: Wq = rho t / (2 (1 - rho)) = t / 2 (Kleinrock 1975, eq. 5.105)
    assert ks.pass_queue_wait_s(utilization=0.5, pass_s=0.2) == pytest.approx(0.1)
    assert ks.pass_queue_wait_s(utilization=0.0, pass_s=0.2) == 0.0
    assert np.isfinite(ks.pass_queue_wait_s(utilization=3.0, pass_s=0.2))


def test_poll_wait_is_half_the_window():
    assert ks.poll_wait_s(recv_interval_steps=10, decode_step_s=0.01,
                          busy_probability=1.0) == pytest.approx(0.05)
    assert ks.poll_wait_s(recv_interval_steps=10, decode_step_s=0.01, busy_probability=0.0) == 0


def test_prompts_per_pass_is_the_poisson_count_given_at_least_one():
    # lambda = X w = 1: E[N | N >= 1] = 1 / (1 - e^-1) = 1.582 (independently: the sum over
    # n >= 1 of n p(n) / (1 - p(0)))
    n = np.arange(1, 60)
    pmf = np.exp(-1.0) / np.cumprod(np.r_[1.0, n[1:]].astype(float))
    expected = (n * pmf).sum() / (1 - np.exp(-1.0))
    k = ks.prompts_per_pass(request_rate_per_s=np.array([0.0, 10.0, 1000.0]),
                            gather_window_s=0.1, in_service=np.array([8.0, 8.0, 8.0]),
                            max_prompts=4.0)
    assert k[0] == 1.0 and k[1] == pytest.approx(expected) and k[2] == 4.0


def test_kv_transfer_of_a_deepseek_prompt_over_eight_nics():
    # 8,192 tokens x 70,272 B (MLA BF16, serving_facts.md) over 8 x 50 GB/s = 1.44 ms
    t = ks.kv_transfer_s(prompt_tokens=8192, kv_bytes_per_token=70272,
                         link_bytes_per_s=8 * 50e9, latency_s=0.0)
    assert t == pytest.approx(8192 * 70272 / 400e9)
