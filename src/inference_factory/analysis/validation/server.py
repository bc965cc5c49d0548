"""The SLO search of a case whose GPUs both prefill and decode (MLPerf Server): p99 bounds
under Poisson arrivals.

MLPerf's LoadGen issues Server queries as a Poisson process and bounds the 99th percentile
over requests of TTFT and of each request's TPOT, ``(latency - ttft) / (n_tokens - 1)``
(github.com/mlcommons/inference at b66003e: ``loadgen/loadgen.cc``
``ScheduleDistribution<TestScenario::Server>``, ``loadgen/logging.cc``,
``loadgen/mlperf.conf`` ``*.Server.target_latency_percentile = 99``). A case's
``max_ttft_s`` and ``min_user_tokens_per_s`` (TPOT bound = 1 / it) are read as such bounds.

An operating point is a decode batch B (sequences per attention-DP rank) and prompts per
prefill pass k. With continuous batching the GPU runs back to back: the generated tokens/s
per GPU are the time-share figure D' of :func:`~inference_factory.engine.decode_outputs`, so
each rank receives λ = D' tp / O requests per second (Little's law makes B the mean number
decoding). Each prompt costs the GPU D = t_pass / k seconds of prefill, at utilisation
ρ = λ D (= the prefill share of GPU time). Then

* TTFT p99 = the M/D/1 waiting-time p99 (λ, D) + the pass itself (or the KV restore, if
  longer) + one decode step that may be running when the prompt arrives
  (:func:`~inference_factory.kernels.queueing.md1_wait_cdf`);
* TPOT p99 = t_d + D n_99 / (O - 1), n_99 the p99 of the prompts prefilled while a request
  decodes (:func:`~inference_factory.kernels.queueing.server_tpot_quantile_s`).

The case is predicted at the highest D' whose two p99s meet the bounds. Nothing is fitted.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...engine import decode_outputs
from ...kernels import queueing as kq

#: LoadGen's percentile for Server latency bounds (loadgen/mlperf.conf, b66003e:
#: ``*.Server.target_latency_percentile = 99``)
SLO_QUANTILE = 0.99


def _grid2(res: Mapping[str, np.ndarray], name: str, shape) -> np.ndarray:
    return np.broadcast_to(np.asarray(res[name], dtype=float), shape)


def tails(*, lam, service_s, pass_s, step_s, tokens_per_step, output_len: float,
          quantile: float = SLO_QUANTILE) -> tuple[float, float]:
    """(TTFT, TPOT) quantiles at one operating point (scalars; see the module docstring)."""
    wait = kq.md1_wait_quantile_s(quantile=quantile, arrival_rate_per_s=lam, service_s=service_s)
    tpot = float(kq.server_tpot_quantile_s(quantile=quantile, decode_step_s=step_s,
                                           tokens_per_step=tokens_per_step,
                                           output_tokens=output_len, arrival_rate_per_s=lam,
                                           service_s=service_s))
    return wait + pass_s + step_s, tpot


def search(c: Mapping[str, Any], res: Mapping[str, np.ndarray], grid_b, grid_p
           ) -> dict[str, Any]:
    """The best operating point of a colocated SLO case over the outer grid (decode batch on
    axis 0, prompts per pass on axis 1) that ``res`` holds; returns its indices, the
    generated tokens/s/GPU and per user there, both p99s and whether they meet the bounds.
    Points are tried in decreasing throughput; those failing a necessary condition (the mean
    TPOT, or the pass alone, already over the bound; ρ >= 1) are skipped unevaluated. If none
    meets both, the point with the smallest worst ratio of p99 to bound is taken."""
    shape = (len(np.atleast_1d(grid_b)), len(np.atleast_1d(grid_p)))
    tp = float(c["tp"])
    out_len, in_len = float(c["output_len"]), float(c["input_len"])
    co = decode_outputs({"decode_tokens_per_s_per_gpu":
                         _grid2(res, "decode_tokens_per_s_per_gpu", shape),
                         "decode_tokens_per_s_per_user":
                         _grid2(res, "decode_tokens_per_s_per_user", shape)},
                        prefill_tokens_per_s_per_gpu=_grid2(res, "prefill_tokens_per_s_per_gpu",
                                                            shape),
                        input_per_output_token=in_len / out_len)
    d_eff, user = co["decode_tokens_per_s_per_gpu"], co["decode_tokens_per_s_per_user"]
    lam = d_eff * tp / out_len                                   # requests/s per DP rank
    pass_s = _grid2(res, "prefill_step_s", shape)
    service = pass_s / np.asarray(grid_p, dtype=float)[None, :]  # GPU s per prompt
    first = _grid2(res, "ttft_s", shape)                         # the pass, or the restore
    step = _grid2(res, "decode_step_s", shape)
    tps = _grid2(res, "tokens_per_step", shape)
    max_ttft = float(c["max_ttft_s"]) if np.isfinite(c["max_ttft_s"]) else np.inf
    max_tpot = 1.0 / float(c["min_user_tokens_per_s"]) if np.isfinite(
        c["min_user_tokens_per_s"]) else np.inf
    rho = lam * service
    cheap = (rho < 1.0) & (first + step <= max_ttft) & (1.0 / user <= max_tpot * (1 + 1e-12))

    def at(i, j):
        return tails(lam=float(lam[i, j]), service_s=float(service[i, j]),
                     pass_s=float(first[i, j]), step_s=float(step[i, j]),
                     tokens_per_step=float(tps[i, j]), output_len=out_len)

    chosen, met = None, False
    for flat in np.argsort(-np.where(cheap, d_eff, -np.inf), axis=None, kind="stable"):
        i, j = np.unravel_index(flat, shape)
        if not cheap[i, j]:
            break
        ttft99, tpot99 = at(i, j)
        if ttft99 <= max_ttft * (1 + 1e-12) and tpot99 <= max_tpot * (1 + 1e-12):
            chosen, met = (i, j, ttft99, tpot99), True
            break
    if chosen is None:                         # nothing meets both: the least violation
        best = np.inf
        for i, j in np.ndindex(shape):
            if rho[i, j] >= 1.0:
                continue
            ttft99, tpot99 = at(i, j)
            worst = max(ttft99 / max_ttft, tpot99 / max_tpot)
            if worst < best:
                best, chosen = worst, (i, j, ttft99, tpot99)
        if chosen is None:                     # every point overloaded: the lightest
            i, j = np.unravel_index(int(np.argmin(rho)), shape)
            chosen = (i, j, np.inf, np.inf)
    i, j, ttft99, tpot99 = chosen
    return {"i": int(i), "j": int(j), "met": met, "ttft_p99_s": ttft99, "tpot_p99_s": tpot99,
            "decode_tokens_per_s_per_gpu": float(d_eff[i, j]),
            "decode_tokens_per_s_per_user": float(user[i, j])}
