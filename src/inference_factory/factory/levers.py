"""When does a lever pay? Studies of the speculative-decoding and expert-balancing levers
around a simulated side, and the plain-language reason a lever changes nothing.

Everything here re-reads the engine through the side's own decode grid (:mod:`.simulate`):
no physics of its own.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal, Mapping

import numpy as np

from ..engine import evaluate_arrays, mtp_acceptance_by_position
from ..errors import SpecError
from ..kernels import speculative as kspec
from ..specs.realism import load_realism
from .simulate import DecodeGrid, SideResult, decode_point

if TYPE_CHECKING:       # pandas is imported where a waterfall is built (not on compare's path)
    import pandas as pd

#: TPOT targets of the speculation curve [s]
DEFAULT_TPOT_TARGETS_S = (0.020, 0.025, 0.030, 0.035, 0.040, 0.050, 0.060, 0.080, 0.100)

#: what each lever acts on, for the "changes nothing" explanation
ACTS_ON = {
    "continuous_batching": "batch occupancy (static batches idle while their longest request runs)",
    "pd_split": "prefill/decode interference and per-phase pool shapes",
    "prefix_cache": "prefill compute of reused prompt prefixes",
    "speculative": "tokens per decode step, paid for with a longer verify step",
    "expert_balancing": "the busiest expert-parallel rank's load (needs EP > 1 and skewed routing)",
    "low_precision": "KV-cache and dispatch bytes (and FP4 experts where the device has FP4)",
    "overlap": "communication hidden behind the other micro-batch's compute",
    "parallelism": "the pool shapes (TP vs attention-DP with expert parallelism)",
}

#: a lever "changes nothing" below this relative change of $/M output
NO_CHANGE_REL = 0.005


def _depth0(g: DecodeGrid) -> DecodeGrid:
    """The same grid restricted to draft depth 0 (no speculation)."""
    return dataclasses.replace(g, depths=g.depths[:1], step_s=g.step_s[:, :1], draft_s=g.draft_s[:, :1],
                               tokens_per_step=g.tokens_per_step[:, :1], binding=g.binding[:1],
                               expert_efficiency=g.expert_efficiency[:1])


def speculation_curve(side: SideResult, tpot_targets_s=DEFAULT_TPOT_TARGETS_S) -> list[dict]:
    """Decode tokens/s per GPU at each TPOT target with the best per-class draft depths and
    with none, from the side's decode grid (same pool, precisions, overlap, skew).

    The depths and the batch are chosen jointly per target (:func:`.simulate.decode_point`);
    a target no batch meets gives ``None``."""
    g = side.decode_grid
    g0 = _depth0(g)
    rows = []
    for t in tpot_targets_s:
        on, off = decode_point(g, t), decode_point(g0, t)
        rows.append({
            "tpot_target_s": float(t),
            "tokens_per_s_per_gpu_best_depth": on.tput_per_gpu if on.meets_slo else None,
            "tokens_per_s_per_gpu_no_draft": off.tput_per_gpu if off.meets_slo else None,
            "gain": (on.tput_per_gpu / off.tput_per_gpu if on.meets_slo and off.meets_slo else None),
            "depth_by_class": [int(d) for d in on.depth] if on.meets_slo else None,
            "batch_per_gpu": on.batch / g.tp if on.meets_slo else None,
            "binding_no_draft": off.binding if off.meets_slo else None,
        })
    return rows


def light_load_speedup(side: SideResult) -> dict:
    """Per-user output speed at batch 1 (light load) with the best draft depth per class over
    no draft: (E(d) / t_step(d)) / (1 / t_step(0)), output-share weighted."""
    g = side.decode_grid
    rate = g.tokens_per_step / g.step_s[:, :, 0]                  # (class, depth) tokens/s/user
    best = rate.max(axis=1)
    return {"per_user_tokens_per_s_no_draft": float(g.out_share @ rate[:, 0]),
            "per_user_tokens_per_s_best_depth": float(g.out_share @ best),
            "speedup": float(g.out_share @ (best / rate[:, 0])),
            "depth_by_class": [int(g.depths[i]) for i in rate.argmax(axis=1)]}


def acceptance_table(trace_names, first_position_acceptance, depth: int) -> list[dict]:
    """Per class: acceptance per draft position and expected tokens per verify step at each
    depth, with the decay of ``configs/realism.toml`` [speculative]."""
    rows = []
    for name, a1 in zip(trace_names, first_position_acceptance):
        acc = mtp_acceptance_by_position(a1, depth)
        e = kspec.expected_tokens_per_step_sequence(draft_depth=np.arange(depth + 1),
                                                    acceptance_by_position=acc)
        rows.append({"class": name, "acceptance_by_position": [float(x) for x in acc],
                     "tokens_per_step_by_depth": [float(x) for x in e]})
    return rows


def expert_balance(side: SideResult) -> dict | None:
    """The busiest expert-parallel rank at the side's decode operating point, with and
    without the configured redundant experts (EPLB), at the trace's expert popularity."""
    c = side.context
    m, pool = c["model"], c["pool"]
    if not m.is_moe or pool.ep <= 1:
        return None
    dp_ = c["decode_point"]
    out = {}
    for label, r in (("without", 0), ("with", c["redundant_experts"])):
        ds = evaluate_arrays(m, pool.hardware, tp=pool.tp, dp=pool.dp, ep=pool.ep,
                             **c["precisions"], overlap=c["overlap"], redundant_experts=r,
                             batch_size=dp_.batch, kv_len=c["kv_len"],
                             expert_popularity=c["popularity"])
        eff = float(np.asarray(ds["expert_efficiency_frac"]).reshape(-1)[0])
        out[label] = {"expert_efficiency": eff,
                      "busiest_rank_load_over_mean": 1.0 / eff,
                      "decode_step_s": float(np.asarray(ds["decode_step_s"]).reshape(-1)[0]),
                      "binding": str(np.asarray(ds["decode_binding_resource"]).reshape(-1)[0])}
    out["redundant_experts"] = int(c["redundant_experts"])
    out["ep"] = int(pool.ep)
    out["step_time_ratio"] = out["with"]["decode_step_s"] / out["without"]["decode_step_s"]
    return out


def no_change_reasons(result: dict) -> list[str]:
    """One line per lever whose removal from the factory changes $/M output by less than
    ``NO_CHANGE_REL``, naming the binding resource and what the lever acts on."""
    f = result["factory"]
    lines = []
    for row in result.get("attribution", []):
        ref = row["factory_without"]["usd_per_mtok_output"]
        rel = f["usd_per_mtok_output"] / ref - 1.0 if ref else 0.0
        if abs(rel) >= NO_CHANGE_REL:
            continue
        lever = row["lever"]
        why = (f"{lever} changes $/M output by {rel:+.2%} at the factory: decode binds on "
               f"{f.get('decode_binding_resource', '?')} at {f['decode_batch_per_gpu']:.0f} "
               f"sequences/GPU; the lever acts on {ACTS_ON.get(lever, lever)}")
        if lever == "speculative":
            why += (f"; the chosen draft depths are {f.get('draft_depth_by_class')}, "
                    "see the TPOT curve for where drafting pays")
        if lever == "expert_balancing":
            eb = result.get("lever_effects", {}).get("expert_balancing")
            if eb:
                why += (f"; busiest rank {eb['without']['busiest_rank_load_over_mean']:.2f}x the mean "
                        f"without, {eb['with']['busiest_rank_load_over_mean']:.2f}x with "
                        f"{eb['redundant_experts']} redundant experts")
        lines.append(why)
    return lines


def lever_effects(side: SideResult, trace) -> dict:
    """The lever studies of one side (normally the factory), JSON-ready."""
    g = side.decode_grid
    out: dict = {}
    if g.depths.size > 1:
        out["speculative"] = {
            "tpot_curve": speculation_curve(side),
            "light_load": light_load_speedup(side),
            "acceptance": acceptance_table(trace.class_names, trace.acceptance_rate,
                                           int(g.depths.max())),
            "acceptance_decay_per_position": load_realism().acceptance_decay_per_position,
        }
    eb = expert_balance(side)
    if eb is not None:
        out["expert_balancing"] = eb
    return out


WATERFALL_METRICS = ("decode_tokens_per_s_per_gpu", "gpu_seconds", "usd_per_mtok_output",
                     "gross_margin")


INTERACTIONS = "interactions"


def lever_waterfall(result: Mapping[str, Any], metric: str = "usd_per_mtok_output", *,
                    basis: Literal["factory", "baseline", "path"] = "factory",
                    log: bool = False) -> pd.DataFrame:
    """Steps from the baseline to the factory, one per lever, from a
    :func:`inference_factory.factory.compare.compare` result with attribution.

    The steps start at the generic baseline without the levers it already has (continuous
    batching: ``baseline_without`` rows), then one step per lever. A lever's step is its
    effect measured at the factory (``basis="factory"``: the factory minus the factory
    without the lever) or at the baseline (``"baseline"``: the baseline with the lever minus
    the baseline, or the baseline minus the baseline without it). Levers interact (they
    multiply), so the steps do not add up to the total; the remainder is one
    ``interactions`` step (named ``INTERACTIONS``), and the bars end exactly at the factory.
    ``basis="path"`` instead adds the levers to the baseline cumulatively, in compare's
    ``PATH_ORDER`` (the result's ``path``): each step is a lever's value given the earlier
    ones, the steps are exact, and ``interactions`` holds only what differs between the two
    configs besides levers and shapes (zero for the bundled pair). The path depends on the
    order; the other two bases do not. With ``log=True`` the steps are factors (ratios) and
    the remainder is the total factor over the product of the lever factors.

    Returns
    -------
    pandas.DataFrame
        Rows: the start, one per lever (compare's order), ``interactions``, ``factory``;
        columns ``step``, ``kind`` (start | lever | interactions | end), ``before``,
        ``after`` and ``change`` (after - before; a factor after / before with ``log``).
    """
    if metric not in WATERFALL_METRICS:
        raise SpecError(f"lever_waterfall: metric = {metric!r} is not one of "
                        f"{list(WATERFALL_METRICS)}")
    if basis not in ("factory", "baseline", "path"):
        raise SpecError(f"lever_waterfall: basis = {basis!r} is not one of ['baseline', 'factory', 'path']")
    if basis == "path" and "path" not in result:
        raise SpecError("lever_waterfall: the compare result has no cumulative path; run "
                        "compare(cfg, attribution=True)")
    if "attribution" not in result:
        raise SpecError("lever_waterfall: the compare result has no attribution; run "
                        "compare(cfg, attribution=True)")
    base = float(result["baseline"][metric])
    fact = float(result["factory"][metric])
    # levers the baseline already has (continuous batching in the generic baseline) come
    # first: the waterfall starts at the baseline without them
    pre = [r for r in result["attribution"] if "baseline_without" in r]
    post = [r for r in result["attribution"] if "baseline_without" not in r]
    start_name, start = "baseline", base
    if pre:
        start = float(pre[0]["baseline_without"][metric])
        for r in pre[1:]:
            start = start * float(r["baseline_without"][metric]) / base if log else \
                start + float(r["baseline_without"][metric]) - base
        start_name = "baseline without " + ", ".join(r["lever"] for r in pre)
    if log and (base <= 0 or fact <= 0 or start <= 0 or metric == "gross_margin"):
        raise SpecError(f"lever_waterfall: log steps need a positive metric; {metric} is "
                        f"{base:g} (baseline) and {fact:g} (factory)")
    def change(new, ref):
        return new / ref if log else new - ref

    # a lever the baseline has is measured by its removal there (path, baseline) or at the
    # factory; a lever it lacks by its addition there, or at the factory
    steps = []
    for row in pre + ([] if basis == "path" else post):
        if basis == "factory":
            steps.append((row["lever"], change(fact, float(row["factory_without"][metric]))))
        elif "baseline_without" in row:
            steps.append((row["lever"], change(base, float(row["baseline_without"][metric]))))
        else:
            steps.append((row["lever"], change(float(row["baseline_with"][metric]), base)))
    if basis == "path":
        # cumulative: each lever added to the baseline with every earlier one (compare's
        # PATH_ORDER); the steps are exact, and what remains is the configs' other differences
        level = base
        for r in result["path"]:
            steps.append((r["step"], change(float(r[metric]), level)))
            level = float(r[metric])
    rows = [{"step": start_name, "kind": "start", "before": 0.0 if not log else np.nan,
             "after": start, "change": np.nan}]
    level = start
    for name, ch in steps:
        after = level * ch if log else level + ch
        rows.append({"step": name, "kind": "lever", "before": level, "after": after, "change": ch})
        level = after
    rest = fact / level if log else fact - level
    # what no single lever explains: lever interactions and the pool shapes (parallelism,
    # deployment units) that differ between the two configs but are not levers
    rows.append({"step": INTERACTIONS, "kind": "interactions", "before": level, "after": fact,
                 "change": rest})
    rows.append({"step": "factory", "kind": "end", "before": np.nan, "after": fact,
                 "change": np.nan})
    import pandas as pd

    out = pd.DataFrame(rows)
    out.attrs.update({"metric": metric, "basis": basis, "log": log,
                      "config": str(result.get("config", "")), "model": str(result.get("model", ""))})
    return out


__all__ = ["speculation_curve", "light_load_speedup", "acceptance_table", "expert_balance",
           "no_change_reasons", "lever_effects", "lever_waterfall", "DEFAULT_TPOT_TARGETS_S",
           "INTERACTIONS", "WATERFALL_METRICS"]
