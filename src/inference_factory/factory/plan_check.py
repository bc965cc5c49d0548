"""A simulated scenario against the plan that wrote its config (``plan --emit-config``):
the plan's own figures, read back from the config's ``#plan`` lines, beside simulate's, and
one line per choice of simulate's own that differs, with why."""

from __future__ import annotations

import math
from typing import Any

from ..units import SECONDS_PER_DAY
from .config import FactoryConfig

#: Relative difference within which simulate "reproduces" a plan figure (issue 23: 10 %).
PLAN_AGREEMENT_REL = 0.10


def plan_figures(path) -> dict[str, Any]:
    """The plan's own figures in a config written by ``plan --emit-config`` (its ``#plan KEY
    = VALUE`` comment lines, :data:`inference_factory.analysis.plan.config.PLAN_FIGURES`);
    empty for any other config."""
    import tomllib
    from pathlib import Path

    try:
        text = Path(path).read_text()
    except (OSError, TypeError):
        return {}
    body = "\n".join(line[len("#plan "):] for line in text.splitlines()
                     if line.startswith("#plan "))
    try:
        return tomllib.loads(body) if body else {}
    except tomllib.TOMLDecodeError:
        return {}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def plan_check(cfg: FactoryConfig, metrics: dict[str, Any]) -> dict[str, Any] | None:
    """Simulate's figures against the plan that wrote ``cfg`` (None for another config).

    Compares, like with like: output tokens/s per GPU over every GPU of the fleet (the plan's
    at full load times simulate's busy share, arrivals x osl / GPUs), TTFT and TPOT (p50) and
    all-in $/M output (the plan's restated at simulate's utilisation: the plan charges its
    GPU-hours ``utilization`` busy, simulate sizes its fleet for ``target_utilization``).
    Each figure ``agrees`` within :data:`PLAN_AGREEMENT_REL`. ``lines``: one per choice of
    simulate's own that differs from the plan's, and why."""
    plan = plan_figures(cfg.path)
    if not plan:
        return None
    s = metrics
    u_sim, u_plan = float(cfg.target_utilization), float(plan.get("utilization", 1.0))
    gpus = float(s["gpus_avg"])
    sim_per_gpu = s["output_tokens_per_day"] / SECONDS_PER_DAY / gpus if gpus else math.nan
    busy = s["arrival_rate_per_s"] / max(plan["request_rate_per_s"], 1e-300)  # of the plan's
    plan_at = plan["output_tokens_per_s_per_gpu"] * min(busy, 1.0)
    usd_plan_at = plan["usd_per_mtok_output_all_in"] * u_plan / max(min(busy, 1.0), 1e-300)
    figs = {
        "output_tokens_per_s_per_gpu": (plan_at, sim_per_gpu),
        "ttft_s": (plan["ttft_s"], s["ttft_p50_s"]),
        "tpot_s": (plan["tpot_s"], s["tpot_p50_s"]),
        "usd_per_mtok_output_all_in": (usd_plan_at, s["usd_per_mtok_output"]),
    }
    out = {k: {"plan": a, "simulate": b, "rel_diff": _rel(b, a),
               "agrees": bool(_rel(b, a) <= PLAN_AGREEMENT_REL)} for k, (a, b) in figs.items()}
    lines = []
    if abs(min(busy, 1.0) - u_plan) > 1e-3:     # always, unless the plan priced that share
        lines.append(
            f"utilisation: simulate serves {s['arrival_rate_per_s']:,.2f} requests/s = "
            f"{100 * busy:.0f} % of the plan's sustained {plan['request_rate_per_s']:,.2f} "
            f"(fleet.target_utilization {u_sim:g}); the plan's per-GPU throughput and $/M "
            f"are at {100 * u_plan:.0f} % busy, so they are compared at {100 * min(busy, 1):.0f} %")
    d_inst = s["decode_gpus_avg"] / max(plan["decode_gpus"], 1)
    p_inst = s["prefill_gpus_avg"] / max(plan["prefill_gpus"], 1) if plan["prefill_gpus"] else 0
    if plan["mode"] == "disaggregated" and (
            round(d_inst) != plan["decode_instances"] or round(p_inst) != plan["prefill_instances"]):
        lines.append(
            f"fleet: simulate provisions {p_inst:g} prefill + {d_inst:g} decode instances "
            f"({gpus:g} GPUs) for its arrivals at {u_sim:g} target utilisation (its own "
            f"prefill {s['prefill_computed_tokens_per_s_per_gpu']:,.0f} and decode "
            f"{s['decode_tokens_per_s_per_gpu']:,.0f} tokens/s/GPU); the plan packed "
            f"{plan['prefill_instances']} + {plan['decode_instances']} ({plan['gpus']} GPUs)")
    elif plan["mode"] == "aggregated" and round(d_inst) != plan["decode_instances"]:
        lines.append(
            f"fleet: simulate provisions {d_inst:g} instances ({gpus:g} GPUs) for its arrivals "
            f"at {u_sim:g} target utilisation; the plan packed {plan['decode_instances']} "
            f"({plan['gpus']} GPUs)")
    b_sim = float(s["decode_batch_per_gpu"])
    occ = float(s["decode_occupancy"])       # time-average share of the operating batch
    fill = min(occ / u_sim, 1.0)             # while busy (kernels.serving occupancy rule)
    if _rel(b_sim, plan["batch_per_gpu"]) > 0.02 or fill < 0.95:
        lines.append(
            f"decode batch: simulate runs {b_sim * fill:.0f} per GPU (operating batch "
            f"{b_sim:g}, arrivals fill {100 * fill:.0f} % of it while busy), plan assumed "
            f"{plan['batch_per_gpu']:g}")
    depth = sorted(set(s["draft_depth_by_class"].values()))
    if depth != [int(plan["draft_depth"])]:
        lines.append(
            f"draft depth: simulate chose {', '.join(map(str, depth))} (most decode tokens/s "
            f"meeting TPOT over its own grid up to max_draft_depth), plan "
            f"{int(plan['draft_depth'])}")
    if _rel(s["decode_tokens_per_s_per_gpu"], plan["decode_tokens_per_s_per_gpu"]) > 0.02:
        lines.append(
            f"decode rate: simulate {s['decode_tokens_per_s_per_gpu']:,.0f} tokens/s/GPU at "
            f"its operating point (binds on {s['decode_binding_resource']}, expert efficiency "
            f"{100 * s['expert_efficiency']:.0f} %, colocated interference "
            f"{s['colocated_interference']:.2f}), plan {plan['decode_tokens_per_s_per_gpu']:,.0f} "
            f"(binds on {plan['decode_binding_resource']})")
    elif s["decode_binding_resource"] != plan["decode_binding_resource"]:
        lines.append(f"decode binding: simulate {s['decode_binding_resource']} at occupancy "
                     f"{100 * occ:.0f} %, plan {plan['decode_binding_resource']} at its batch")
    p_sim = float(s["prefill_computed_tokens_per_s_per_gpu"])
    if plan["mode"] == "disaggregated" and _rel(p_sim, plan["prefill_tokens_per_s_per_gpu"]) > 0.02:
        lines.append(
            f"prefill rate: simulate {p_sim:,.0f} input tokens/s/GPU (the largest chunk whose "
            f"p99 TTFT with the queue at {100 * u_sim:.0f} % busy meets the SLO), plan "
            f"{plan['prefill_tokens_per_s_per_gpu']:,.0f} (the best batch whose one pass does)")
    if not out["ttft_s"]["agrees"]:
        lines.append(
            f"TTFT: simulate's p50 {s['ttft_p50_s']:.2f} s adds the prompt queue at "
            f"{100 * u_sim:.0f} % busy and the wait for the next prefill pass; the plan's "
            f"{plan['ttft_s']:.2f} s is " + ("one prefill pass" if plan["mode"] ==
                                               "disaggregated" else "bench's closed loop"))
    if plan["mode"] == "aggregated" and not out["tpot_s"]["agrees"]:
        lines.append(
            f"TPOT: simulate stretches the decode step by its colocated interference "
            f"{s['colocated_interference']:.2f} (prefill share of busy time); the plan's "
            f"{1e3 * plan['tpot_s']:.1f} ms is bench's closed loop (prefill stalls at its "
            "concurrency)")
    return {"figures": out, "lines": lines, "plan": plan}


def format_plan_check(check: dict[str, Any]) -> str:
    """The comparison as text: one line per figure, then the differing choices."""
    units = {"output_tokens_per_s_per_gpu": ("output tokens/s per GPU", 1.0, ",.0f"),
             "ttft_s": ("TTFT (s)", 1.0, ".3f"), "tpot_s": ("TPOT (ms)", 1e3, ".1f"),
             "usd_per_mtok_output_all_in": ("$ per M output tokens, all-in", 1.0, ".3f")}
    rows = [f"against the plan that wrote this config (agree: within "
            f"{100 * PLAN_AGREEMENT_REL:.0f} %):"]
    for k, f in check["figures"].items():
        name, scale, fmt = units[k]
        rows.append(f"  {name:32} plan {format(f['plan'] * scale, fmt):>10}  simulate "
                    f"{format(f['simulate'] * scale, fmt):>10}  "
                    f"{'agrees' if f['agrees'] else 'differs'} ({100 * f['rel_diff']:.1f} %)")
    rows += [f"  differs: {line}" for line in check["lines"]]
    return "\n".join(rows)
