"""A plan's footing: how much of a recommendation's GPU time the engine read from measured
kernel tables (the engine's per-op sources, ``evaluate_arrays(..., detail="ops")``), so a
ranking across vendors shows what it stands on."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:       # annotations only: the one-point roofline report loads no pandas
    import pandas as pd

#: Op cost sources read from a measured table at or between its rows.
MEASURED_SOURCES = ("measured", "interpolated")
#: Op cost sources read from a measured table (beyond its rows too).
TABLE_SOURCES = ("measured", "interpolated", "extrapolated")
#: Share of GPU time on measured (or interpolated) rows at or above which a deployment's
#: footing reads "measured"; a labelling convention, not a physical constant.
MEASURED_FOOTING_SHARE = 0.5


def op_source_shares(times_s, sources) -> dict[str, float]:
    """Share of the summed op time of one pass per cost source: ``{source: sum(t[source]) /
    sum(t)}`` over the ops with a finite time (seconds per step; the labels of
    ``evaluate(..., detail="ops")``'s ``*_op_source``). Empty when no op has time."""
    t = np.asarray(times_s, dtype=float).ravel()
    src = np.asarray(sources, dtype=object).ravel()
    ok = np.isfinite(t) & (t > 0)
    total = float(t[ok].sum())
    if total <= 0:
        return {}
    return {str(k): float(t[ok][src[ok] == k].sum()) / total for k in dict.fromkeys(src[ok])}


def measured_tables(hw, detail: bool = False) -> str:
    """Who measured the device's kernel tables (its own or its sibling's, ``[measured]
    kernel_tables``): the backends, e.g. ``aiter, rccl`` (MI300X) or ``nccl, sglang, trtllm,
    vllm`` (H200); with ``detail`` each backend's versions and tables, e.g. ``aiter
    0.1.7.post2.dev18/e4048607a5 (gemm, moe); rccl rccl-tests ae3e635 (allreduce)``. Empty
    for a device without tables."""
    from ...engine import tables_for
    from ...specs import load_hardware

    tabs = tables_for(load_hardware(hw) if isinstance(hw, str) else hw)
    if tabs is None:
        return ""
    prov = tabs.provenance()
    if not detail:
        return ", ".join(prov)
    return "; ".join(f"{b} {'/'.join(v)} ({', '.join(f)})" for b, (v, f) in prov.items())


def footing_label(measured_share: float, table_share: float) -> str:
    """``"measured"`` where at least :data:`MEASURED_FOOTING_SHARE` of the GPU time is read
    at or between measured table rows, ``"extrapolated"`` where that much is on tables only
    with rows beyond them counted, ``"roofline-only"`` where no op reads a table, else
    ``"partly measured"``."""
    if not np.isfinite(measured_share) or not np.isfinite(table_share):
        return ""
    if table_share <= 0:
        return "roofline-only"
    if measured_share >= MEASURED_FOOTING_SHARE:
        return "measured"
    if table_share >= MEASURED_FOOTING_SHARE:
        return "extrapolated"
    return "partly measured"


def footing_of(m, hw, row, *, isl: int, osl: int, engine_options=None, prefill_hw=None,
               prefill_precisions=None) -> dict[str, float]:
    """The footing of one deployment (a plan row): the engine's per-op sources
    (``evaluate_arrays(..., detail="ops")``, the arrays of ``evaluate(..., detail="ops")``
    without building a Dataset) at its decode point and at its prefill point, each
    pass's share of op time per source weighted by the pass's GPU-seconds per request
    (``osl / D`` decode, ``isl / P`` prefill; P and D the row's tokens/s per GPU).

    Returns ``measured_share`` (measured + interpolated rows), ``table_share`` (with
    extrapolated rows), ``decode_measured_share``, ``prefill_measured_share`` and the
    ``footing`` label (:func:`footing_label`). ``prefill_hw`` and ``prefill_precisions``:
    a prefill pool on another device (simulate's split pools; default: ``hw``, the row's)."""
    from ...engine import evaluate_arrays

    opts = dict(engine_options or {})
    precs = {k: row[k] for k in ("weight_precision", "moe_precision", "kv_precision",
                                 "attention_precision", "dispatch_precision",
                                 "combine_precision") if k in row and isinstance(row[k], str)}
    fixed = dict(prompt_len=float(isl), kv_len=float(isl + osl / 2), final_len=float(isl + osl))
    shares, weights = {}, {}
    for phase, prefix, ov, rate, tokens, dev, pr in (
            ("decode", "", "overlap", "decode_tokens_per_s_per_gpu", osl, hw, precs),
            ("prefill", "prefill_", "prefill_overlap", "prefill_tokens_per_s_per_gpu", isl,
             prefill_hw or hw, {**precs, **(prefill_precisions or {})})):
        shape = {k: int(row[f"{prefix}{k}"]) for k in ("tp", "dp", "ep")}
        r = float(row.get(rate, np.nan))
        overlap = row.get(ov) or "none"
        if not (np.isfinite(r) and r > 0):
            continue
        ops = evaluate_arrays(m, dev, detail="ops", **shape, **pr, overlap=str(overlap),
                              batch_size=float(row["batch_size"]),
                              draft_depth=float(row["draft_depth"]),
                              prefill_batch_size=float(row["prefill_batch_size"])
                              if np.isfinite(float(row.get("prefill_batch_size", np.nan)))
                              else 1.0, **fixed, **opts)
        shares[phase] = op_source_shares(ops[f"{phase}_op_time_s"], ops[f"{phase}_op_source"])
        weights[phase] = tokens / r
    total = sum(weights.values())
    if not total:
        return {"footing": "", "measured_share": np.nan, "table_share": np.nan,
                "decode_measured_share": np.nan, "prefill_measured_share": np.nan}

    def share(phase, sources):
        return sum(shares.get(phase, {}).get(k, 0.0) for k in sources)

    meas = sum(weights[p] * share(p, MEASURED_SOURCES) for p in weights) / total
    table = sum(weights[p] * share(p, TABLE_SOURCES) for p in weights) / total
    return {"footing": footing_label(meas, table), "measured_share": meas,
            "table_share": table,
            "decode_measured_share": share("decode", MEASURED_SOURCES) if "decode" in shares
            else np.nan,
            "prefill_measured_share": share("prefill", MEASURED_SOURCES) if "prefill" in shares
            else np.nan}


def add_footing(recs: pd.DataFrame, cand: pd.DataFrame, m, hws, *, isl: int, osl: int,
                engine_options=None) -> pd.DataFrame:
    """The recommendations with each device's footing (:func:`footing_of`) at its
    recommendation, or at its best-ranked candidate where nothing meets the targets; a
    device with no candidate at all is ``roofline-only`` when it has no measured tables."""
    from ...engine import tables_for

    cols: dict[str, list] = {k: [] for k in ("footing", "measured_share", "table_share",
                                             "decode_measured_share",
                                             "prefill_measured_share")}
    for hw in hws:                      # the rows of _recommend, in the same order
        mine = cand[cand["hardware"] == hw.name]
        ok = mine[mine["meets_slo"].astype(bool)]
        row = ok.iloc[0] if not ok.empty else (mine.iloc[0] if not mine.empty else None)
        if row is not None:
            got = footing_of(m, hw, row, isl=isl, osl=osl, engine_options=engine_options)
        elif tables_for(hw) is None:
            got = {"footing": "roofline-only", "measured_share": 0.0, "table_share": 0.0}
        else:
            got = {}
        for k in cols:
            cols[k].append(got.get(k, "" if k == "footing" else np.nan))
    recs = recs.copy()
    at = list(recs.columns).index("reason") if "reason" in recs else len(recs.columns)
    for i, (k, v) in enumerate(cols.items()):
        recs.insert(at + i, k, v)
    return recs
