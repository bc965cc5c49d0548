"""Bands of a simulated scenario (``simulate --uncertainty``, ``compare --uncertainty``): the
scenario re-simulated on draws of the component uncertainty (:mod:`..engine.uncertainty`).
Its home is the factory floor (compare and simulate call it); ``plan``'s bands are in
:mod:`inference_factory.analysis.plan.bands`."""

from __future__ import annotations

import numpy as np

#: Draws of a ``simulate`` band (each a whole simulation on the same trace, the prefix cache
#: simulated once: a few tens of ms each) and the headline figures that carry one.
SIMULATE_DRAWS = 64
SIMULATE_BANDED = ("decode_tokens_per_s_per_gpu", "prefill_tokens_per_s_per_gpu",
                   "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                   "goodput_tokens_per_s_per_gpu", "usd_per_mtok_output", "usd_per_mtok_all",
                   "gpus_avg", "gpus_peak")


def simulate_bands(cfg, metrics: dict, uncertainty, *, trace=None, n: int | None = None,
                   cache_memo: dict | None = None) -> dict:
    """``metrics`` (one side of :func:`inference_factory.factory.simulate.simulate`) with
    ``<name>_low`` / ``<name>_high`` of every :data:`SIMULATE_BANDED` figure: the scenario
    re-simulated on each of ``n`` draws of the component uncertainty (the same per-family,
    per-device draw keys as every other answer under the seed; one draw per simulation, so
    the draw's op factors are scalars), the realism constants of the assumption ranges per
    stratum. The assumptions a factory config states (expert skew, acceptance per class)
    are the config's and are not drawn. Then widened by the decode device's
    model-structure term unless ``uncertainty="components"``. The point is not moved."""
    from ..engine import (OpFactors, perturbed, resolve_realism, strata, structure_ln,
                          widened_band)
    from ..engine import resolve_uncertainty as resolve
    from .simulate import config_trace, simulate
    from ..specs import load_hardware

    u = resolve(uncertainty)
    n = int(n or min(u.draws, SIMULATE_DRAWS))
    rl = resolve_realism(False, None)
    trace = trace if trace is not None else config_trace(cfg)
    memo = {} if cache_memo is None else cache_memo
    free = {"runtime_reserve_frac", "overlap_comm_sm_frac"} & set(u.ranges)
    got: dict[str, np.ndarray] = {k: np.full(n, np.nan) for k in SIMULATE_BANDED}
    for st in strata(u, free, n, u.seed):
        for j in st.index:
            f = OpFactors(u, u.seed, n, np.array([j]), ())
            side = simulate(cfg, trace, cache_memo=memo,
                            realism=perturbed(rl, f, **st.constants))
            for k in SIMULATE_BANDED:
                got[k][j] = float(side.metrics[k])
    w = 0.0 if uncertainty == "components" else structure_ln(u, load_hardware(
        cfg.decode.hardware))
    out = dict(metrics)
    for k in SIMULATE_BANDED:
        lo, hi = widened_band(got[k], float(metrics[k]), u.quantiles, w)
        out[f"{k}_low"], out[f"{k}_high"] = float(lo), float(hi)
    out["band_structure_ln"] = w
    out["band_draws"] = n
    return out
