"""What a bench prediction stands on, as plan states it (:mod:`..plan.footing`, the one
mechanism): the share of GPU time read from measured kernel tables at one concurrency, the
precisions the engine runs (and a weight-only fallback where the device lacks a format's
tensor cores) and the serving-engine profile with what it was written for."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..footing import precision_note
from ..plan.footing import footing_of


def bench_footing(m, hw, *, decode_pool, prefill_pool, axes: Mapping[str, Any], state,
                  tokens_per_step: float, prompt_tokens: float, concurrency, isl: int,
                  osl: int, precisions: Mapping[str, str]) -> dict[str, Any]:
    """The footing (:func:`footing_of`) at the middle concurrency of the run: its decode batch
    and prefill pass as a plan row, each phase weighted by its GPU-seconds per request
    (``footing``, ``measured_share``, ``table_share``, ``footing_concurrency``) and the
    ``precision_note``."""
    i = len(concurrency) // 2
    at = lambda v: float(np.asarray(v).reshape(-1)[i])  # noqa: E731
    b, step = max(at(state.decoding), 1.0), at(state.decode_step_s)
    k, pass_s = max(at(state.prompts_per_pass), 1.0), at(state.pass_s)
    row = {"tp": decode_pool.tp, "dp": decode_pool.dp, "ep": decode_pool.ep,
           "prefill_tp": prefill_pool.tp, "prefill_dp": prefill_pool.dp,
           "prefill_ep": prefill_pool.ep, "batch_size": b,
           "draft_depth": axes.get("draft_depth", 0), "prefill_batch_size": k,
           "overlap": axes.get("overlap", "none"), "prefill_overlap": axes.get("overlap", "none"),
           "decode_tokens_per_s_per_gpu": b * tokens_per_step / step / decode_pool.tp
           if step > 0 else np.nan,
           "prefill_tokens_per_s_per_gpu": k * prompt_tokens / pass_s / prefill_pool.tp
           if pass_s > 0 else np.nan, **precisions}
    opts = {key: v for key, v in axes.items()
            if not key.endswith("_precision") and key not in ("draft_depth", "overlap")}
    got = footing_of(m, hw, row, isl=isl, osl=osl, engine_options=opts)
    return {"footing": got["footing"], "measured_share": got["measured_share"],
            "table_share": got["table_share"], "footing_concurrency": int(concurrency[i]),
            "precision_note": precision_note(m, hw, precisions)}
