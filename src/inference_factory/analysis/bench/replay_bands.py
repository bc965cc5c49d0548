"""Prediction bands of a session replay (``bench --trace --uncertainty``): ``bench``'s band
mechanism (:mod:`.bands`) on the replay's latency solve.

Each draw of the component uncertainty (one factor per op family per device,
``configs/uncertainty.toml``) gives its own decode and prefill step tables
(:func:`.bands._table_draws`, the same draw keys as ``bench``'s bands); the prefill passes at
every hit node are scaled by the draw's ratio at hit 0 (ASSUMPTION: an op family's factor
moves a pass alike at any hit rate). On each draw the replay's latency solve is re-run: the
closed loop at the requests in flight, the turns' latencies, the lanes' schedule, the
requests in flight again (``ROUNDS_PER_DRAW`` rounds), then the turns' draws and the economics;
the prefix cache's hits are held at the point's (ASSUMPTION: the LRU's hits move little with
the latencies at one concurrency, as the fixed point's last rounds show; re-simulating the
cache per draw would cost 64 x the cache's share of a point). The band is the 10th-90th
percentile over the draws, never narrower than the point, widened by the device's
model-structure term (``structure_ln``) unless ``uncertainty="components"``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .bands import BAND_DRAWS, _table_draws
from .replay_metrics import economics, turn_metrics
from .replay_solve import e2e_of, loop_at, turn_terms

#: Rounds of (loop, schedule, requests in flight) per draw, from the point's state.
ROUNDS_PER_DRAW = 1
#: The replay's figures that carry bands.
BANDED = ("total_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
          "time_to_first_token_p50_ms", "time_to_first_token_p90_ms",
          "inter_token_latency_p50_ms", "request_latency_p50_ms", "request_latency_p90_ms",
          "request_latency_p99_ms", "e2e_normalized_interactivity_p90",
          "revenue_usd_per_gpu_hour", "cost_usd_per_mtok_output")


class ReplayBands:
    """The draws of one deployment's step tables (made once, shared by its concurrencies)."""

    def __init__(self, st, uncertainty):
        from ...engine import (resolve_realism as _realism, resolve_uncertainty as resolve,
                               structure_ln)

        self.st = st
        self.u = resolve(uncertainty)
        rl = _realism(False, None)
        n = min(int(self.u.draws), BAND_DRAWS)
        axes = {**st.axes, "cache_hit_rate": 0.0}
        self.d_draws = _table_draws(st.m, st.hw, st.d_pool, st.dtab, axes, st.lengths,
                                    self.u, rl, n)
        p_draws = self.d_draws if st.colocated else _table_draws(
            st.m, st.hw, st.cache_pool, st.ptab0, axes, st.lengths, self.u, rl, n)
        self.pass_by_h = [st.pass_by_h * (pt.pass_s / st.ptab0.pass_s)[None, :]
                          for pt in p_draws]
        self.widen_ln = 0.0 if uncertainty == "components" else structure_ln(self.u, st.hw)

    def of(self, point: dict, state: dict, *, seed: int = 0, cached_input_fraction=None,
           price=None) -> dict:
        """``<name>_low`` / ``<name>_high`` of :data:`BANDED` at one replayed point."""
        from ...engine import widened_band

        st, c = self.st, int(point["concurrency"])
        hits = state["hits"]
        h_bar, scale, restore = turn_terms(st, hits)
        got = {k: [] for k in BANDED}
        for dt, pbh in zip(self.d_draws, self.pass_by_h):
            dt = dataclasses.replace(st.dtab, decode_step_s=dt.decode_step_s,
                                     tokens_per_step=dt.tokens_per_step)
            n_eff = state["n_eff"]
            for _ in range(ROUNDS_PER_DRAW):
                loop, ptab, dtab, pass_max = loop_at(st, n_eff, h_bar, dtab=dt, pass_by_h=pbh)
                e2e = e2e_of(st, loop, scale, restore)
                start, span = st.sched.run(e2e, c)
                n_eff = float(np.clip(e2e.sum() / (span.sum() / c), 1.0, c))
            loop, ptab, dtab, pass_max = loop_at(st, n_eff, h_bar, dtab=dt, pass_by_h=pbh)
            met = turn_metrics(loop, st.s, st.sched, start, scale, restore, hits, dtab, ptab,
                               st.eng, pass_max=pass_max, concurrency=c,
                               engine_time=st.engine_time, seed=seed,
                               ranks=st.cache_pool.ranks, transfer=st.transfer_s,
                               colocated=st.colocated)
            met.update(duration=(span.sum() + met.pop("_e2e_sum_s") - e2e.sum()) / c,
                       num_gpus=st.gpus)
            economics([met], st.hw, cached_input_fraction=cached_input_fraction, price=price,
                      model=st.m)
            for k in BANDED:
                got[k].append(met[k])
        out = {}
        for k in BANDED:
            lo, hi = widened_band(np.asarray(got[k], float), point[k], self.u.quantiles,
                                  self.widen_ln)
            out[f"{k}_low"], out[f"{k}_high"] = float(lo), float(hi)
        out["band_structure_ln"] = self.widen_ln
        return out
