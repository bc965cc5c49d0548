"""A recommendation's GPU-hour price and energy on the named bases: $/GPU-h of its fleet,
facility watts per GPU, output tokens/s per MW and joules per output token (``plan
--price-basis`` / ``--power-basis`` change these rows), each phase weighted by its share of
the fleet's GPU time as the plan's all-in $/M weights it (aggregated: the prefill share of
busy time, isl/P over isl/P + osl/D; disaggregated: the prefill pool's share of the GPUs)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...kernels import economics as kecon
from ..economics import facility_power_w, gpu_cost_usd_per_hour

if TYPE_CHECKING:
    import pandas as pd

#: The columns :func:`add_energy` adds.
ENERGY_COLUMNS = ("usd_per_gpu_hour", "facility_w_per_gpu", "output_tokens_per_s_per_mw",
                  "j_per_output_token")


def prefill_gpu_share(row, *, isl: float, osl: float) -> float:
    """The prefill phase's share of a deployment's GPU time (see the module)."""
    if row.get("mode") == "aggregated":
        p, d = float(row["prefill_tokens_per_s_per_gpu"]), float(row["decode_tokens_per_s_per_gpu"])
        return (isl / p) / (isl / p + osl / d)
    return float(row["prefill_instances"] * row["prefill_gpus"] / row["gpus"])


def add_energy(recs: "pd.DataFrame", hws, cost, *, isl: float, osl: float) -> "pd.DataFrame":
    """``recs`` with :data:`ENERGY_COLUMNS`: ``usd_per_gpu_hour`` (hardware and, on a capex
    basis, energy), ``facility_w_per_gpu`` at the cost model's busy share, and from it
    ``output_tokens_per_s_per_mw`` and ``j_per_output_token`` at that busy share
    (:func:`~inference_factory.kernels.economics.tokens_per_s_per_mw`,
    :func:`~inference_factory.kernels.economics.joules_per_token`); NaN on a row without a
    recommendation or a device the power basis does not list."""
    by_name = {hw.name: hw for hw in hws}
    out = {k: [] for k in ENERGY_COLUMNS}
    for _, r in recs.iterrows():
        hw = by_name.get(r["hardware"])
        per_gpu = float(r.get("output_tokens_per_s_per_gpu", math.nan))
        if hw is None or not math.isfinite(per_gpu) or per_gpu <= 0:
            for k in ENERGY_COLUMNS:
                out[k].append(math.nan)
            continue
        sp = prefill_gpu_share(r, isl=isl, osl=osl)
        usd = {ph: sum(gpu_cost_usd_per_hour(hw, cost, ph)) for ph in ("decode", "prefill")}
        watts = {ph: float(facility_power_w(hw, cost, phase=ph)) for ph in ("decode", "prefill")}
        w = sp * watts["prefill"] + (1 - sp) * watts["decode"]
        tokens = per_gpu * cost.utilization
        out["usd_per_gpu_hour"].append(sp * usd["prefill"] + (1 - sp) * usd["decode"])
        out["facility_w_per_gpu"].append(w)
        out["output_tokens_per_s_per_mw"].append(float(kecon.tokens_per_s_per_mw(
            tokens_per_s=tokens, facility_power_w=w)))
        out["j_per_output_token"].append(float(kecon.joules_per_token(
            tokens_per_s=tokens, facility_power_w=w)))
    recs = recs.copy()
    at = list(recs.columns).index("gpus_for_load") if "gpus_for_load" in recs else (
        list(recs.columns).index("reason") if "reason" in recs else len(recs.columns))
    for i, (k, v) in enumerate(out.items()):
        recs.insert(at + i, k, v)
    return recs
