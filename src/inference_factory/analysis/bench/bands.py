"""Prediction bands of ``bench`` (``bench(..., uncertainty=True)``, ``bench --uncertainty``).

The closed loop is not linear in the step times (a slower step both lengthens TPOT and lets
more requests queue), so the band is not that of one step time: each draw of the component
uncertainty (:mod:`inference_factory.engine.uncertainty`: one factor per op family per
device, the assumption ranges, ``configs/uncertainty.toml``) gives its own decode and prefill
step tables, the loop is solved and the run drawn on each, and the band is the 10th-90th
percentile of the results per concurrency, never narrower than the point; then widened by
the model-structure term of the device's footing (measured or roofline-only), the
split-conformal term calibrated on ``validation/dev_cases.csv`` (MODEL.md section 13). That
term comes from steady-state serving figures, not from closed-loop benchmarks: no bench-
specific calibration is made (the development table has one deployment), an ASSUMPTION.
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: Draws of the component uncertainty for a bench band, and requests per draw (a band needs
#: fewer of either than the point: its quantiles are of 64 loop solutions).
BAND_DRAWS = 64
BAND_REQUESTS = 1024
#: The throughputs and latencies that carry bands (counts and settings do not).
BANDED = ("duration", "request_throughput", "output_throughput", "total_token_throughput",
          *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
            for s in ("mean", "median", "p99")))


def _table_draws(m, hw, pool, tab, axes, lengths, u, rl, n):
    """``n`` perturbed copies of one pool's step tables (the same draw keys per family and
    device as every other answer under the same seed, so pools of one device correlate)."""
    from ...engine import evaluate_arrays, sample_arrays

    draws, _ = sample_arrays(
        evaluate_arrays, m, hw, u, realism=rl, n=n, **pool.shape, **axes, **lengths,
        batch_size=tab.batch[:, None], prefill_batch_size=tab.prompts[None, :],
        variables=["decode_step_s", "prefill_step_s", "tokens_per_step"])
    nb, nk = tab.batch.size, tab.prompts.size
    dec = np.broadcast_to(draws["decode_step_s"], (n, nb, nk))[:, :, 0]
    pre = np.broadcast_to(draws["prefill_step_s"], (n, nb, nk))[:, 0, :]
    tok = np.broadcast_to(draws["tokens_per_step"], (n, nb, nk))[:, 0, 0]
    return [dataclasses.replace(tab, decode_step_s=dec[i], pass_s=pre[i],
                                tokens_per_step=float(tok[i])) for i in range(n)]


def bench_bands(metrics: dict, run, uncertainty, *, m, hw, pools, tables, colocated: bool,
                axes: dict, realism, lengths: dict) -> dict:
    """``metrics`` with ``<name>_low`` / ``<name>_high`` of every :data:`BANDED` metric:
    ``run(decode_table, prefill_table, draws)`` solves the loop and the run on one draw."""
    from ...engine import (resolve_realism as _realism, resolve_uncertainty as resolve,
                           structure_ln, widened_band)

    u = resolve(uncertainty)
    rl = _realism(False, realism)
    n = min(int(u.draws), BAND_DRAWS)
    d_pool, p_pool = pools
    d_tab, p_tab = tables
    d_draws = _table_draws(m, hw, d_pool, d_tab, axes, lengths, u, rl, n)
    p_draws = d_draws if colocated else _table_draws(m, hw, p_pool, p_tab, axes, lengths, u,
                                                     rl, n)
    got = {k: [] for k in BANDED}
    for dt, pt in zip(d_draws, p_draws):
        _, res = run(dt, pt, BAND_REQUESTS)
        for k in BANDED:
            got[k].append(np.asarray(res[k], dtype=float))
    w = 0.0 if uncertainty == "components" else structure_ln(u, hw)
    out = dict(metrics)
    for k in BANDED:
        lo, hi = widened_band(np.stack(got[k]), metrics[k], u.quantiles, w)
        out[f"{k}_low"], out[f"{k}_high"] = lo, hi
    out["band_structure_ln"] = w
    return out
