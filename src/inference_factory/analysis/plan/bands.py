"""Prediction bands of ``plan``'s recommendations (``plan(..., uncertainty=True)``,
``plan --uncertainty``).

Only each device's recommended deployment gets a band (not every candidate: the search stays
one engine pass per shape, and the band costs a few engine passes per device). Its operating
point is re-evaluated under the draws of the component uncertainty
(:func:`inference_factory.engine.uncertainty.sample_arrays`: one factor per op family per
device, the same draw keys for the decode and prefill pools of a device, so they correlate;
the assumption ranges of ``configs/uncertainty.toml`` the call leaves free), with the
recommendation's shape, precisions, overlap, decode batch, draft depth, prefill batch and the
plan's own engine options. Each draw then goes through the plan's own derived-column
arithmetic (:func:`.candidates._judge`): an aggregated recommendation is ``bench``'s
closed loop at its decode batch (:func:`.candidates._closed_loop`, the prefill batch
the best meeting TTFT on that draw's pass times, as the plan picks it); a disaggregated one
re-sizes its pools to each other within the budget (:func:`.candidates.pack_pools`)
with its instance shapes and prefill batch held. The band is the (10th, 90th) percentile of
the draws, never narrower than the point, widened by the model-structure term of the
device's footing (:func:`~inference_factory.engine.uncertainty.structure_ln`, measured or
roofline-only; not with ``uncertainty="components"``). It never moves the point.

A draft's acceptance: the plan runs an MTP draft with a per-position acceptance
``a_1 delta^(i-1)`` (:func:`inference_factory.engine.with_mtp_acceptance`); where ``acceptance_rate`` is left
free its range is drawn for ``a_1`` and the engine's decode figures are read at that draw's
expected tokens per step
(:func:`inference_factory.kernels.speculative.expected_tokens_per_step_sequence`):
the engine's step time does not depend on acceptance, its decode throughputs are
``B E / step`` and TPOT ``step / E``, so they scale with ``E`` (an identity of the engine,
read through :func:`inference_factory.engine.decode_outputs`, not a new relation).

Draws in which the closed loop cannot be sustained (prefill cannot keep up with the decode
batch) count as the worst outcome (zero throughput, unbounded latency and cost), not as
missing. ``meets_slo_share`` is the share of the component draws (before the model-structure
term) on which the recommendation still meets the TTFT and TPOT targets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: The recommendation's figures that carry bands (the plan's own derived columns).
BANDED = ("output_tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "tpot_s",
          "usd_per_mtok_output", "usd_per_mtok_input", "usd_per_mtok_output_all_in")
#: Of those, the ones that are better when larger (a draw that cannot be sustained: 0).
_LARGER_BETTER = ("output_tokens_per_s_per_gpu", "tokens_per_s_per_user")
#: Engine outputs the band re-reads.
_ENGINE_VARS = ("decode_tokens_per_s_per_gpu", "decode_tokens_per_s_per_user", "tpot_s",
                "tokens_per_step", "max_batch_size", "prefill_tokens_per_s_per_gpu", "ttft_s")
_PRECISIONS = ("weight_precision", "moe_precision", "kv_precision", "attention_precision",
               "dispatch_precision", "combine_precision")


def _engine(acceptance_by_position):
    """The engine as :func:`~inference_factory.engine.uncertainty.sample_arrays` calls it.

    With a per-position acceptance (an MTP draft), the drawn ``acceptance_rate`` is read as
    the first position's ``a_1`` and the decode figures scale with the expected tokens per
    step at that ``a_1`` (see the module docstring); elsewhere the engine as it is."""
    from ...engine import decode_outputs, evaluate_arrays, mtp_acceptance_by_position
    from ...kernels.speculative import expected_tokens_per_step_sequence

    if acceptance_by_position is None:
        return evaluate_arrays
    depth = len(acceptance_by_position)

    def ev(model, hardware, *, acceptance_rate=None, draft_depth=0.0, **kw):
        res = evaluate_arrays(model, hardware, acceptance_by_position=acceptance_by_position,
                              draft_depth=draft_depth, **kw)
        if acceptance_rate is None:
            return res
        a1 = np.asarray(acceptance_rate, dtype=float)
        e = np.array([expected_tokens_per_step_sequence(
            draft_depth=float(draft_depth),
            acceptance_by_position=mtp_acceptance_by_position(a, depth))
            for a in a1.ravel()]).reshape(a1.shape)
        return decode_outputs(res, tokens_per_step=e)

    return ev


def _sample(m, hw, u, rl, engine_kw, free_acceptance: bool, n: int, *, shape, precs, overlap,
            **axes) -> dict[str, np.ndarray]:
    """Draws (axis 0) of the engine outputs the band needs at one operating point."""
    from ...engine import sample_arrays

    opts = dict(engine_kw)
    acc_pos = opts.pop("acceptance_by_position", None)
    if acc_pos is not None and not free_acceptance:
        opts["acceptance_rate"] = float(acc_pos[0])      # pinned: the user's a_1
    ev = _engine(acc_pos)
    draws, _ = sample_arrays(ev, m, hw, u, realism=rl, n=n, **shape, **precs, overlap=overlap,
                             **axes, **opts, variables=list(_ENGINE_VARS))
    return draws


def _aggregated(m, hw, row, d, pb, *, isl, osl, ttft_s, tpot_s, gpus, rates, utilization,
                serving_engine=None):
    """The plan's derived columns on each draw of an aggregated recommendation."""
    from ..economics import usd_per_mtok_at
    from .candidates import _closed_loop, _judge, _prefill_best, _ShapeGrid

    n = d["tpot_s"].shape[0]
    shape = {k: int(row[k]) for k in ("tp", "dp", "ep")}
    ov = str(row["overlap"])
    npb = pb.size

    def per(k, i, size):
        return np.broadcast_to(d[k][i], (size,)) if np.ndim(d[k][i]) else np.full(size, d[k][i])

    values = []
    for i in range(n):
        p = per("prefill_tokens_per_s_per_gpu", i, npb)
        values.append({
            "prefill_tokens_per_s_per_gpu": p, "ttft_s": per("ttft_s", i, npb),
            "usd_per_mtok_input": usd_per_mtok_at(p, gpu_cost_usd_per_hour=rates["prefill"],
                                                  utilization=utilization),
            "max_batch_size": np.atleast_1d(per("max_batch_size", i, 1)),
            "prefill_binding_resource": np.full(npb, "", dtype=object)})
    sg = _ShapeGrid([ov] * n, np.array([float(row["batch_size"])]),
                    np.array([float(row["draft_depth"])]), pb, values)
    pf = _prefill_best(sg, ttft_s)
    late = ~np.isfinite(pf["prefill_tokens_per_s_per_gpu"])
    if late.any():          # no prefill batch meets TTFT on this draw: the fastest one
        free = _prefill_best(sg, None)
        for k in pf:
            pf[k] = np.where(late, free[k], pf[k])
    dec = {"overlap": np.full(n, ov, dtype=object),
           "batch_size": np.full(n, float(row["batch_size"])),
           "tpot_s": d["tpot_s"].reshape(n, -1)[:, 0],
           "tokens_per_step": d["tokens_per_step"].reshape(n, -1)[:, 0],
           "draft_depth": np.full(n, float(row["draft_depth"]))}
    loop = _closed_loop(sg, dec, shape, isl, osl, serving_engine)
    n_inst = int(row["decode_instances"])
    f = {"mode": np.full(n, "aggregated", dtype=object),
         "decode_tokens_per_s_per_gpu": d["decode_tokens_per_s_per_gpu"].reshape(n, -1)[:, 0],
         "prefill_tokens_per_s_per_gpu": pf["prefill_tokens_per_s_per_gpu"],
         "batch_size": dec["batch_size"], "dp": np.full(n, shape["dp"]),
         "tpot_s": dec["tpot_s"], "decode_instances": np.full(n, n_inst),
         "prefill_instances": np.zeros(n, dtype=np.int64),
         "decode_gpus": np.full(n, int(row["decode_gpus"])),
         "prefill_gpus": np.full(n, int(row["decode_gpus"])),
         "request_rate_per_s": n_inst * loop["loop_request_rate_per_s"] * shape["dp"],
         "ttft_s": pf["ttft_s"], "prefill_batch_size": pf["prefill_batch_size"],
         "fits": np.ones(n, bool), "prefill_fits": np.ones(n, bool),
         "usd_per_mtok_input": pf["usd_per_mtok_input"], **loop}
    return _judge(f, isl, osl, ttft_s, tpot_s, rates=rates, utilization=utilization,
                  gpus=gpus)


def _disaggregated(row, dd, pd_, *, isl, osl, ttft_s, tpot_s, gpus, rates, utilization):
    """The plan's derived columns on each draw of a disaggregated recommendation: its pools
    re-sized to each other within the budget (:func:`.candidates.pack_pools`)."""
    from ..economics import usd_per_mtok_at
    from .candidates import _LOOP_COLUMNS, _judge, pack_pools

    n = dd["tpot_s"].shape[0]
    first = lambda a: np.asarray(a).reshape(n, -1)[:, 0]  # noqa: E731
    dec_n = int(row["tp"]) * int(row["dp"])
    pg = float(int(row["prefill_tp"]) * int(row["prefill_dp"]))
    d = first(dd["decode_tokens_per_s_per_gpu"])
    p = first(pd_["prefill_tokens_per_s_per_gpu"])
    with np.errstate(divide="ignore", invalid="ignore"):
        nd, npf, rate = pack_pools(total_gpus=gpus, decode_instance_gpus=float(dec_n),
                                   decode_requests_per_s_per_instance=d * dec_n / osl,
                                   prefill_instance_gpus=pg,
                                   prefill_requests_per_s_per_instance=p * pg / isl)
    f = {"mode": np.full(n, "disaggregated", dtype=object),
         "decode_tokens_per_s_per_gpu": d, "prefill_tokens_per_s_per_gpu": p,
         "batch_size": np.full(n, float(row["batch_size"])), "dp": np.full(n, int(row["dp"])),
         "tpot_s": first(dd["tpot_s"]), "decode_instances": nd, "prefill_instances": npf,
         "decode_gpus": np.full(n, dec_n), "prefill_gpus": np.full(n, int(pg)),
         "request_rate_per_s": rate, "ttft_s": first(pd_["ttft_s"]),
         "prefill_batch_size": np.full(n, float(row["prefill_batch_size"])),
         "fits": np.ones(n, bool), "prefill_fits": np.ones(n, bool),
         "usd_per_mtok_input": usd_per_mtok_at(p, gpu_cost_usd_per_hour=rates["prefill"],
                                               utilization=utilization),
         **{k: np.full(n, np.nan) for k in _LOOP_COLUMNS}}
    return _judge(f, isl, osl, ttft_s, tpot_s, rates=rates, utilization=utilization,
                  gpus=gpus)


def recommendation_draws(m, hw, row, uncertainty, *, isl: int, osl: int, ttft_s, tpot_s,
                         gpus: int, cost, prefill_batch_sizes, engine_kw, free_acceptance: bool,
                         realism=None, serving_engine=None) -> pd.DataFrame:
    """The plan's derived columns of one recommendation (a row of
    ``PlanResult.recommendations``) on each draw of the component uncertainty, one row per
    draw (``u.draws`` of them), in the plan's own column names."""
    from ...engine import resolve_realism as _realism, resolve_uncertainty as resolve
    from ..economics import gpu_cost_usd_per_hour, usd_per_mtok_at

    u = resolve(uncertainty)
    rl = _realism(False, realism)
    if serving_engine is not None:      # its kernel choices, as the plan priced the row
        rl = rl.for_engine(serving_engine)
    n = int(u.draws)
    precs = {k: row[k] for k in _PRECISIONS if k in row and isinstance(row[k], str)}
    rates = {ph: sum(gpu_cost_usd_per_hour(hw, cost, ph)) for ph in ("decode", "prefill")}
    lengths = dict(prompt_len=float(isl), kv_len=float(isl + osl / 2),
                   final_len=float(isl + osl))
    common = dict(isl=isl, osl=osl, ttft_s=ttft_s, tpot_s=tpot_s, gpus=gpus, rates=rates,
                  utilization=cost.utilization)
    point = dict(batch_size=float(row["batch_size"]), draft_depth=float(row["draft_depth"]))
    shape = {k: int(row[k]) for k in ("tp", "dp", "ep")}
    if row["mode"] == "aggregated":
        pb = np.asarray(prefill_batch_sizes, dtype=float)
        d = _sample(m, hw, u, rl, engine_kw, free_acceptance, n, shape=shape, precs=precs,
                    overlap=str(row["overlap"]), prefill_batch_size=pb, **point, **lengths)
        got = _aggregated(m, hw, row, d, pb, **common, serving_engine=serving_engine)
    else:
        dd = _sample(m, hw, u, rl, engine_kw, free_acceptance, n, shape=shape, precs=precs,
                     overlap=str(row["overlap"]), prefill_batch_size=1.0, **point, **lengths)
        pshape = {k: int(row[f"prefill_{k}"]) for k in ("tp", "dp", "ep")}
        pdr = _sample(m, hw, u, rl, engine_kw, free_acceptance, n, shape=pshape, precs=precs,
                      overlap=str(row["prefill_overlap"] or "none"),
                      prefill_batch_size=float(row["prefill_batch_size"]), **point, **lengths)
        got = _disaggregated(row, dd, pdr, **common)
    got["usd_per_mtok_output"] = usd_per_mtok_at(
        got["decode_tokens_per_s_per_gpu"].to_numpy(float),
        gpu_cost_usd_per_hour=rates["decode"], utilization=cost.utilization)
    return got


def _quantiles(x: np.ndarray, point: float, name: str, quantiles,
               widen_ln: float) -> tuple[float, float]:
    """(low, high) of the draws of one figure, holding the point, widened by ``widen_ln``; a
    draw that cannot be sustained (NaN) counts as the worst outcome (then the quantiles are
    the nearest draws: an interpolation with an infinite draw has no value)."""
    from ...engine import widened_band

    x = np.where(np.isnan(x), 0.0 if name in _LARGER_BETTER else np.inf, x)
    method = "linear" if np.all(np.isfinite(x)) else "nearest"
    lo, hi = widened_band(x, point, quantiles, widen_ln, method)
    return float(lo), float(hi)


def add_bands(recs: pd.DataFrame, m, hws, uncertainty, *, isl: int, osl: int, ttft_s, tpot_s,
              gpus: int, cost, prefill_batch_sizes, engine_kw, free_acceptance: bool,
              realism=None, serving_engine=None) -> pd.DataFrame:
    """The recommendations with ``<name>_low`` / ``<name>_high`` of every :data:`BANDED`
    figure (NaN where a device has no recommendation), ``band_structure_ln`` (the
    model-structure widening of the device, ln) and ``meets_slo_share``."""
    from ...engine import resolve_uncertainty as resolve, structure_ln

    u = resolve(uncertainty)
    cols: dict[str, list] = {f"{k}_{s}": [] for k in BANDED for s in ("low", "high")}
    cols.update(band_structure_ln=[], meets_slo_share=[])
    by_name = {h.name: h for h in hws}
    for _, row in recs.iterrows():
        hw = by_name[row["hardware"]]
        w = 0.0 if uncertainty == "components" else structure_ln(u, hw)
        ok = not str(row.get("reason") or "") and np.isfinite(
            float(row.get("output_tokens_per_s_per_gpu", np.nan)))
        if not ok:
            for k in cols:
                cols[k].append(np.nan)
            continue
        got = recommendation_draws(m, hw, row, u, isl=isl, osl=osl, ttft_s=ttft_s,
                                   tpot_s=tpot_s, gpus=gpus, cost=cost,
                                   prefill_batch_sizes=prefill_batch_sizes,
                                   engine_kw=engine_kw, free_acceptance=free_acceptance,
                                   realism=realism,
                                   serving_engine=(serving_engine.get((row["hardware"],
                                                                      row.get("engine")))
                                                   if isinstance(serving_engine, dict)
                                                   else serving_engine))
        for k in BANDED:
            lo, hi = _quantiles(got[k].to_numpy(float), float(row[k]), k, u.quantiles, w)
            cols[f"{k}_low"].append(float(lo))
            cols[f"{k}_high"].append(float(hi))
        met = np.ones(len(got), bool)
        with np.errstate(invalid="ignore"):
            if tpot_s is not None:
                met &= got["tpot_s"].to_numpy(float) <= tpot_s
            if ttft_s is not None:
                met &= got["ttft_s"].to_numpy(float) <= ttft_s
        cols["band_structure_ln"].append(w)
        cols["meets_slo_share"].append(float(met.mean()))
    out = recs.copy()
    for k, v in cols.items():
        out[k] = v
    return out
