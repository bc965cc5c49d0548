"""The MLPerf Server tail model (kernels/queueing.py, analysis/validation/server.py) against
independent computations.

* The M/D/1 waiting-time law against a numpy Monte Carlo of the queue (Lindley's recursion
  w' = max(0, w + D - a) over exponential inter-arrival times a), and against closed forms
  (the atom 1 - rho at zero; pi_1 = (1 - rho)(e^rho - 1); Pollaczek-Khinchine's mean).
  Successive waits are correlated; at rho <= 0.6 the integrated autocorrelation time is
  below ~25 customers, so 270,000 kept waits hold >= 5,000 independent ones: the standard
  error of an empirical CDF value is at most sqrt(0.25 / 5000) = 0.007 mid-range and
  sqrt(0.99 x 0.01 / 5000) = 0.0014 at 0.99. Tolerances: 0.01 on the CDF at six points
  (mostly mid-range values; seen differences ~0.002) and 0.005 (3.5 sigma) at the p99.
* The stalled-prompt count against a Monte Carlo of the branching process it states
  (Poisson(theta) founders, Poisson(rho) offspring each): 100,000 independent draws, so the
  empirical CDF's standard error at 0.99 is 3.1e-4; tolerance 0.0015 (~5 sigma).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from inference_factory.analysis.validation import predict
from inference_factory.analysis.validation.server import SLO_QUANTILE, tails
from inference_factory.kernels import queueing as kq

from .test_validation import DEV_CASES


def _md1_waits(rho: float, d: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.exponential(d / rho, n)
    s = np.concatenate([[0.0], np.cumsum(d - a[1:])])
    w = s - np.minimum.accumulate(s)            # Lindley's recursion, vectorised
    return w[n // 10:]                          # drop the warm-up from an empty queue


@pytest.mark.parametrize("rho", [0.3, 0.6])
def test_md1_wait_law_matches_a_monte_carlo_of_the_queue(rho):
    d = 0.8
    w = _md1_waits(rho, d, 300_000, seed=int(rho * 10))
    lam = rho / d
    xs = np.array([0.0, 0.4, 0.8, 1.3, 2.5, 4.0])
    exact = kq.md1_wait_cdf(wait_s=xs, arrival_rate_per_s=lam, service_s=d)
    emp = np.array([np.mean(w <= x) for x in xs])
    assert np.max(np.abs(exact - emp)) < 0.01, (exact, emp)
    q99 = kq.md1_wait_quantile_s(quantile=0.99, arrival_rate_per_s=lam, service_s=d)
    # the empirical share below the exact p99 is 0.99 within the tolerance
    assert abs(np.mean(w <= q99) - 0.99) < 0.005


def test_md1_wait_law_closed_forms():
    rho, d = 0.7, 2.0
    lam = rho / d
    # atom at zero: an arrival finds the server idle with probability 1 - rho
    assert kq.md1_wait_cdf(wait_s=np.array([0.0]), arrival_rate_per_s=lam,
                           service_s=d)[0] == pytest.approx(1 - rho, rel=1e-12)
    q = kq.md1_number_in_system_cdf(utilization=rho, max_count=2)
    assert q[1] - q[0] == pytest.approx((1 - rho) * (math.exp(rho) - 1), rel=1e-12)
    assert q[2] - q[1] == pytest.approx((1 - rho) * (math.exp(2 * rho) - math.exp(rho) * (1 + rho)),
                                        rel=1e-10)
    # the mean wait, integral of P(W > x), is Pollaczek-Khinchine's rho D / (2 (1 - rho))
    xs = np.linspace(0.0, 60 * d, 24001)
    tail = 1.0 - kq.md1_wait_cdf(wait_s=xs, arrival_rate_per_s=lam, service_s=d)
    mean = float(np.sum((tail[1:] + tail[:-1]) / 2 * np.diff(xs)))
    assert mean == pytest.approx(rho * d / (2 * (1 - rho)), rel=1e-4)
    # no wait at all below the atom, none finite at or past saturation
    assert kq.md1_wait_quantile_s(quantile=0.99, arrival_rate_per_s=0.005, service_s=1.0) == 0.0
    assert kq.md1_wait_quantile_s(quantile=0.99, arrival_rate_per_s=1.0, service_s=1.0) == math.inf


@pytest.mark.parametrize("theta,rho", [(40.0, 0.5), (5.0, 0.8)])
def test_stalled_prompts_match_a_monte_carlo_of_the_branching(theta, rho):
    rng = np.random.default_rng(7)
    gen = rng.poisson(theta, 100_000).astype(float)
    total = gen.copy()
    while gen.sum() > 0:
        gen = rng.poisson(rho * gen).astype(float)
        total += gen
    q = kq.stalled_prompts_quantile(quantile=0.99, first_prompts=theta, utilization=rho)
    assert np.mean(total <= q) >= 0.99 - 0.0015
    assert np.mean(total <= q - 1) < 0.99 + 0.0015
    assert total.mean() == pytest.approx(theta / (1 - rho), rel=0.01)


def test_tpot_tail_reduces_to_the_time_share_mean():
    """The stalled count's mean theta/(1 - rho) gives the time-share TPOT t_d / (1 - rho) the
    colocated decode_outputs uses (checked by the Monte Carlo above); the law is skewed
    right, so its median TPOT lies just below that mean and its p99 well above."""
    td, lam, d, o = 0.03, 0.4, 1.2, 681.0
    rho = lam * d
    p99 = float(kq.server_tpot_quantile_s(quantile=0.99, decode_step_s=td, tokens_per_step=1.0,
                                          output_tokens=o, arrival_rate_per_s=lam, service_s=d))
    p50 = float(kq.server_tpot_quantile_s(quantile=0.5, decode_step_s=td, tokens_per_step=1.0,
                                          output_tokens=o, arrival_rate_per_s=lam, service_s=d))
    mean = td / (1 - rho)
    assert 0.95 * mean < p50 < mean
    assert p99 > 1.1 * mean


def test_server_cases_meet_their_p99_bounds_at_the_chosen_point():
    """Every colocated SLO case of the dev set is predicted at a point whose p99 TTFT and
    TPOT meet the case's bounds, and its throughput is the arrival rate times the output."""
    res = predict(DEV_CASES)
    server = res[res["ttft_p99_s"].notna()]
    assert len(server) >= 3
    for r in server.itertuples():
        assert r.meets_slo
        bound_ttft = {"mlperf-8b-h200-server": 2.0}.get(r.case_id, 6.0)
        bound_tpot = {"mlperf-8b-h200-server": 0.1}.get(r.case_id, 0.175)
        assert r.ttft_p99_s <= bound_ttft * (1 + 1e-12)
        assert r.tpot_p99_s <= bound_tpot * (1 + 1e-12)


def test_tails_are_the_sum_of_their_parts():
    lam, d, t_pass, td = 0.3, 1.5, 1.5, 0.02
    ttft, tpot = tails(lam=lam, service_s=d, pass_s=t_pass, step_s=td, tokens_per_step=1.0,
                       output_len=500.0)
    wait = kq.md1_wait_quantile_s(quantile=SLO_QUANTILE, arrival_rate_per_s=lam, service_s=d)
    assert ttft == pytest.approx(wait + t_pass + td, rel=1e-12)
    assert tpot > td / (1 - lam * d)
