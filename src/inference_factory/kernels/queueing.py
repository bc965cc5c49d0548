"""Tails of a Poisson stream served by a colocated engine: M/D/1 waits and prefill stalls.

MLPerf's Server scenario issues queries as a Poisson process (LoadGen's
``ScheduleDistribution<TestScenario::Server>``: exponential inter-arrival times) and bounds the
99th percentile over requests of the time to first token and of each request's time per output
token, ``(latency - ttft) / (n_tokens - 1)`` (LoadGen ``logging.cc``). Source:
github.com/mlcommons/inference at b66003e, ``loadgen/loadgen.cc``, ``loadgen/logging.cc``,
``loadgen/mlperf.conf`` (``*.Server.target_latency_percentile = 99``). These functions give
those percentiles for a server whose prompts queue first-come first-served for prefill, each
costing a fixed ``service_s`` of the GPU, with decode steps in the time prefill leaves. No
constant is fitted; the formulas are exact for the model they state.
"""

from __future__ import annotations

import math

import numpy as np

#: how far past the mean (in standard deviations) the count grids of the quantiles reach
_SPAN_SD = 12.0


def _poisson_sf(mean: float, n: int) -> np.ndarray:
    """``P(A > j)`` for ``j = 0 .. n-1``, ``A ~ Poisson(mean)``, summed from the tail upward
    (all terms positive: accurate where ``1 - cdf`` would cancel)."""
    top = n + int(_SPAN_SD * math.sqrt(mean + 1.0)) + 40
    j = np.arange(top + 1, dtype=float)
    logp = -mean + j * math.log(max(mean, 1e-300)) - np.cumsum(np.log(np.maximum(j, 1.0)))
    pmf = np.exp(logp) if mean > 0 else (j == 0).astype(float)
    tail = np.cumsum(pmf[::-1])[::-1]          # P(A >= j)
    return tail[1:n + 1]


def md1_number_in_system_cdf(*, utilization: float, max_count: int) -> np.ndarray:
    r"""``P(N <= m)``, m = 0 .. max_count, of the customers in an M/D/1 system at a random time.

    .. math:: \pi_0 = 1 - \rho, \qquad
              \pi_n = \frac{\pi_0\, \bar a_{n-1} + \sum_{i=1}^{n-1} \pi_i\, \bar a_{n-i}}{a_0}

    :math:`a_j` the Poisson(ρ) probability of j arrivals during one service,
    :math:`\bar a_j = P(A > j)`. The level-crossing form of the M/G/1 embedded chain (up-
    crossings of level n equal down-crossings; every term positive, so stable where the
    textbook subtractive recursion is not); the embedded chain's law is the time-average law
    (Kleinrock, Queueing Systems I, 1975, section 5.6, and PASTA). ρ < 1.
    """
    rho = float(utilization)
    sf = _poisson_sf(rho, max_count + 1)
    pi = np.zeros(max_count + 1)
    pi[0] = 1.0 - rho
    a0 = math.exp(-rho)
    for n in range(1, max_count + 1):
        pi[n] = (pi[0] * sf[n - 1] + float(np.dot(pi[1:n], sf[n - 1:0:-1]))) / a0
    return np.minimum(np.cumsum(pi), 1.0)


def md1_wait_cdf(*, wait_s, arrival_rate_per_s: float, service_s: float,
                 _counts: np.ndarray | None = None) -> np.ndarray:
    r"""``P(W <= wait_s)``: the FCFS waiting time (before service starts) in an M/D/1 queue.

    .. math:: P(W \le kD + u) = \sum_{j=0}^{k} e^{-\lambda (D-u)}
              \frac{(\lambda (D-u))^j}{j!}\; P(N \le k + 1 - j), \qquad 0 \le u < D

    D the service time, λ the Poisson arrival rate, ρ = λD < 1, N the number in system at a
    random time (:func:`md1_number_in_system_cdf`). Derivation: by PASTA an arrival's wait is
    the work V(t) at a random time; with s = t - (D - u), V(t) <= kD + u exactly when the
    customers present at s plus those arriving in (s, t] number at most k + 1 (the one in
    service at s, if any, leaves by t). Franx's form of Erlang's M/D/1 formula (G. J. Franx,
    "A simple solution for the M/D/c waiting time distribution", Oper. Res. Lett. 29, 2001),
    which unlike Erlang's alternating sum stays exact in floating point for long waits.
    """
    lam, d = float(arrival_rate_per_s), float(service_s)
    w = np.maximum(np.asarray(wait_s, dtype=float), 0.0)
    k = np.floor(w / d).astype(int)
    u = w - k * d
    q = (_counts if _counts is not None
         else md1_number_in_system_cdf(utilization=lam * d, max_count=int(k.max()) + 1))
    out = np.empty(w.shape)
    for idx in np.ndindex(w.shape):
        kk, mu = int(k[idx]), lam * (d - float(u[idx]))
        j = np.arange(kk + 1, dtype=float)
        logp = -mu + j * math.log(max(mu, 1e-300)) - np.cumsum(np.log(np.maximum(j, 1.0)))
        pj = np.exp(logp) if mu > 0 else (j == 0).astype(float)
        out[idx] = float(np.dot(pj, q[kk + 1 - j.astype(int)]))
    return np.minimum(out, 1.0)


def md1_wait_quantile_s(*, quantile: float, arrival_rate_per_s: float, service_s: float) -> float:
    r"""The ``quantile`` (e.g. 0.99) of the M/D/1 waiting time: the least w with
    :math:`P(W \le w) \ge q` (:func:`md1_wait_cdf`); 0 when 1 - ρ >= q, infinite when ρ >= 1.

    Found by bisection on the exact CDF (continuous above its atom 1 - ρ at zero), to 1e-9 of
    a service time; the wait is below k D once P(N <= k) >= q, which brackets it.
    """
    lam, d = float(arrival_rate_per_s), float(service_s)
    rho = lam * d
    if rho >= 1.0:
        return math.inf
    if 1.0 - rho >= quantile:
        return 0.0
    m = 8
    while True:                              # P(W <= mD) >= P(N <= m): bracket the quantile
        q = md1_number_in_system_cdf(utilization=rho, max_count=m + 1)
        if q[m] >= quantile or m > 10 ** 6:
            break
        m *= 2
    lo, hi = 0.0, m * d
    while hi - lo > 1e-9 * d:
        mid = 0.5 * (lo + hi)
        if md1_wait_cdf(wait_s=mid, arrival_rate_per_s=lam, service_s=d, _counts=q) >= quantile:
            hi = mid
        else:
            lo = mid
    return hi


def stalled_prompts_quantile(*, quantile: float, first_prompts: float, utilization: float) -> float:
    r"""The ``quantile`` of the prompts prefilled while one request decodes, each stalling it.

    .. math:: P(N = n) = \frac{\theta\,(\theta + n\rho)^{n-1} e^{-\theta - n\rho}}{n!}

    Consul's generalized Poisson law (P. C. Consul, G. C. Jain, Technometrics 15, 1973): the
    total progeny of a branching process with Poisson(θ) founders and Poisson(ρ) offspring.
    A request decodes for θ/λ s of steps; the θ (Poisson) prompts arriving meanwhile are each
    prefilled for D s first (priority to prefill, or prefill chunks mixed into the steps: the
    same GPU time), during which ρ = λD more arrive on average, and so on. Mean θ/(1 - ρ),
    variance θ/(1 - ρ)^3, so the mean TPOT this gives, t_d/(1 - ρ), is the time-share one.
    """
    theta, rho = float(first_prompts), float(utilization)
    if rho >= 1.0:
        return math.inf
    if theta <= 0.0:
        return 0.0
    mean = theta / (1.0 - rho)
    top = int(mean + _SPAN_SD * math.sqrt(theta / (1.0 - rho) ** 3) + 40)
    n = np.arange(top + 1, dtype=float)
    logp = (math.log(theta) + (n - 1.0) * np.log(theta + n * rho) - theta - n * rho
            - np.cumsum(np.log(np.maximum(n, 1.0))))
    cdf = np.cumsum(np.exp(logp))
    return float(n[min(int(np.searchsorted(cdf, quantile)), top)])


def server_tpot_quantile_s(*, quantile: float, decode_step_s, tokens_per_step,
                           output_tokens: float, arrival_rate_per_s, service_s):
    r"""A quantile over requests of MLPerf's per-request TPOT, (E2E - TTFT) / (O - 1).

    .. math:: TPOT_q = \frac{t_d}{\tau} + \frac{D\; n_q}{O - 1}, \qquad
              \theta = \lambda\, \frac{(O - 1)\, t_d}{\tau}

    :math:`t_d` the decode step with τ tokens per step, D the GPU time of one prompt's
    prefill, :math:`n_q` the quantile of the prompts stalling the request
    (:func:`stalled_prompts_quantile` with θ founders and ρ = λD). Every request has O output
    tokens and the decode batch is the mean one (ASSUMPTIONS: spread in O and in the batch
    widen the tail, so this is optimistic).
    """
    td = np.asarray(decode_step_s, dtype=float) / np.asarray(tokens_per_step, dtype=float)
    lam, d = np.broadcast_arrays(np.asarray(arrival_rate_per_s, float),
                                 np.asarray(service_s, float))
    td = np.broadcast_to(td, lam.shape)
    out = np.empty(lam.shape)
    for idx in np.ndindex(lam.shape):
        n = stalled_prompts_quantile(quantile=quantile,
                                     first_prompts=lam[idx] * (output_tokens - 1.0) * td[idx],
                                     utilization=lam[idx] * d[idx])
        out[idx] = td[idx] + d[idx] * n / (output_tokens - 1.0)
    return out
