"""What an answer stands on, stated alike by ``bench``, ``roofline`` and ``simulate`` (``plan``
states it per device): the share of GPU time the engine read from measured kernel tables
(:mod:`.plan.footing`, the one mechanism: the engine's per-op cost sources), the precisions
run with any weight-only fallback, and the serving-engine profile with what it was written
for."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .plan.footing import (MEASURED_SOURCES, TABLE_SOURCES, footing_label, footing_of,
                           measured_tables, op_source_shares)

#: The precisions a footing names, with their words.
PRECISION_WORDS = (("weight_precision", "weights"), ("moe_precision", "experts"),
                   ("kv_precision", "KV cache"), ("attention_precision", "attention"))


def resolved_precisions(m, hw, axes: Mapping[str, Any]) -> dict[str, str]:
    """The precisions the engine runs (its defaults resolved by its one check,
    ``validate_struct``), and ``precision``: the experts' of a MoE model, else the weights'
    (what a benchmark's ``precision`` label names: InferenceX's ``fp4`` DeepSeek-R1)."""
    from ..axes import STRUCT_AXES
    from ..engine import validate_struct
    from ..specs.realism import load_realism

    g = validate_struct(m, hw, {**STRUCT_AXES, **{k: v for k, v in axes.items()
                                                  if k.endswith("_precision")}},
                        load_realism())
    return {"weight_precision": g.wprec, **({"moe_precision": g.eprec} if m.is_moe else {}),
            "kv_precision": g.kvprec, "attention_precision": g.aprec,
            "precision": g.eprec if m.is_moe else g.wprec}


def precision_note(m, hw, precisions: Mapping[str, str]) -> str:
    """``"experts stored in fp4 and computed at fp8 on H200-SXM (weight-only: no fp4 tensor
    cores)"``: each of the weights' and experts' precisions the device has no tensor cores
    for, and what the engine computes them at (:func:`compute_precision`); empty if none."""
    from ..engine import compute_precision

    notes = []
    for key, what in (("weight_precision", "weights"), ("moe_precision", "experts")):
        p = precisions.get(key)
        if p is None or (key == "moe_precision" and not m.is_moe) or p in hw.dense_flop_per_s:
            continue
        notes.append(f"{what} stored in {p} and computed at {compute_precision(hw, p)} on "
                     f"{hw.name} (weight-only: no {p} tensor cores)")
    return "; ".join(notes)


def engine_words(name: str) -> str:
    """``sglang-0.5.6 (SGLang 0.5.6 with InferenceX's B200 DeepSeek-R1 FP4 flags ...)``: a
    serving-engine profile and what it was written for (its description)."""
    from ..specs.engines import load_serving_engine

    return f"{name} ({load_serving_engine(name).description})"


def footing_lines(*, footing: str, measured_share: float, where: str,
                  precisions: Mapping[str, str], notes=(), engine: str) -> list[str]:
    """The footing as every command prints it: ``footing: LABEL (N% of GPU time on measured
    tables WHERE)``, ``precisions: weights fp8, ...``, one ``precision:`` line per note (a
    weight-only fallback, a preset's choice) and ``engine: ...``."""
    pct = (f" ({100 * measured_share:.0f}% of GPU time on measured tables{where})"
           if isinstance(measured_share, float) and math.isfinite(measured_share)
           and footing != "roofline-only" else "")
    prec = ", ".join(f"{w} {precisions[k]}" for k, w in PRECISION_WORDS
                     if precisions.get(k) is not None)
    return [f"footing: {footing or 'unknown'}{pct}", f"precisions: {prec}",
            *[f"precision: {n}" for n in notes if n], f"engine: {engine}"]


def phase_footing(ops: Mapping[str, Any], phase: str) -> tuple[str, dict[str, float]]:
    """One pass's footing label and each cost source's share of its op time (``ops``: the
    arrays of ``evaluate(_arrays)(..., detail="ops")``)."""
    sh = op_source_shares(np.asarray(ops[f"{phase}_op_time_s"]),
                          np.asarray(ops[f"{phase}_op_source"]))
    label = footing_label(sum(sh.get(k, 0.0) for k in MEASURED_SOURCES),
                          sum(sh.get(k, 0.0) for k in TABLE_SOURCES)) if sh else ""
    return label, sh


def point_footing(m, hw, ops: Mapping[str, Any], axes: Mapping[str, Any]) -> dict[str, Any]:
    """The footing of ONE operating point (``roofline``): each pass's label and source shares,
    who measured the device's tables, the precisions run (with the weight-only note) and no
    serving engine (one step; bench, plan and simulate model an engine's scheduling)."""
    precs = {k: v for k, v in resolved_precisions(m, hw, axes).items() if k != "precision"}
    out: dict[str, Any] = {}
    for phase in ("decode", "prefill"):
        label, sh = phase_footing(ops, phase)
        out[phase] = {"footing": label, **{k: float(v) for k, v in sh.items()}}
    out.update(tables=measured_tables(hw), tables_detail=measured_tables(hw, detail=True),
               precisions=precs, precision_note=precision_note(m, hw, precs),
               engine="none (one engine step: no serving engine's scheduling or host time; "
                      "bench, plan and simulate model one)")
    return out


def simulate_footing(cfg, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The footing of a simulated scenario (:func:`footing_of` on its pools): the decode pool
    at its operating batch per DP rank and deepest draft, the prefill pool at its prompts per
    pass, at the trace's mean input and output lengths and cache hit rate, each phase
    weighted by its GPU-seconds per request. The trace's own expert skew is not applied (the
    engine's default skew is): the share moves little with it."""
    from ..factory.simulate import lever_precisions
    from ..specs import load_hardware, load_model

    m = load_model(cfg.model)
    d = cfg.decode
    p = cfg.prefill if cfg.levers.pd_split else cfg.decode
    hw_d, hw_p = load_hardware(d.hardware), load_hardware(p.hardware)
    n = max(int(metrics["requests"]), 1)
    isl = max(int(round(metrics["input_tokens"] / n)), 1)
    osl = max(int(round(metrics["output_tokens"] / n)), 1)
    prec_d = {k: v for k, v in metrics["precisions"].items() if k.endswith("_precision")}
    prec_p = lever_precisions(m, hw_p, cfg.levers)
    overlap = metrics["precisions"].get("overlap", "none")
    depth = max(metrics.get("draft_depth_by_class", {}).values(), default=0)
    row = {"tp": d.tp, "dp": d.dp, "ep": d.ep, "prefill_tp": p.tp, "prefill_dp": p.dp,
           "prefill_ep": p.ep, "batch_size": max(metrics["decode_batch_per_gpu"] * d.tp, 1.0),
           "draft_depth": depth, "overlap": overlap, "prefill_overlap": overlap,
           "prefill_batch_size": max(float(metrics.get("prefill_prompts_per_pass", 1.0)), 1.0),
           "decode_tokens_per_s_per_gpu": metrics["decode_tokens_per_s_per_gpu"],
           "prefill_tokens_per_s_per_gpu": metrics["prefill_tokens_per_s_per_gpu"], **prec_d}
    opts = {"cache_hit_rate": min(float(metrics.get("cache_hit_rate", 0.0)), 0.999),
            "redundant_experts": int(metrics["precisions"].get("redundant_experts", 0))}
    got = footing_of(m, hw_d, row, isl=isl, osl=osl, engine_options=opts, prefill_hw=hw_p,
                     prefill_precisions=prec_p)
    notes = [precision_note(m, hw, pr) for hw, pr in
             ((hw_d, prec_d), *(((hw_p, prec_p),) if hw_p.name != hw_d.name else ()))]
    return {"footing": got["footing"], "measured_share": got["measured_share"],
            "table_share": got["table_share"],
            "decode_measured_share": got["decode_measured_share"],
            "prefill_measured_share": got["prefill_measured_share"],
            "precisions": prec_d, "precision_note": "; ".join(n for n in notes if n),
            "tables": {hw.name: measured_tables(hw) for hw in (hw_d, hw_p)}}


def compare_footing(cfg, result: Mapping[str, Any]) -> dict[str, Any]:
    """Each side's footing in a ``compare`` result (:func:`simulate_footing` of the baseline's
    config with its metrics, and of the factory's): the two sides run different pools,
    batches and precisions, so each stands on its own share of measured tables."""
    from ..factory.simulate import side_config

    return {side: simulate_footing(side_config(cfg, side), result[side])
            for side in ("baseline", "factory")}


__all__ = ["PRECISION_WORDS", "resolved_precisions", "precision_note", "engine_words",
           "footing_lines", "phase_footing", "point_footing", "simulate_footing",
           "compare_footing"]
