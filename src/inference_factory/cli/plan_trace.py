"""``inference-factory plan --trace``: deployments for a session trace (thin: call
:func:`inference_factory.analysis.plan.trace.plan_trace`, print)."""

from __future__ import annotations

import click

from ..errors import SpecError
from ..output.tables import TABLE_WIDTH, fit_lines, render
from .text import _launch_lines

#: Rows of the recommendation (one column per device).
REC_ROWS = ("engine", "mode", "tp", "dp", "ep", "prefill_tp", "prefill_dp", "prefill_ep",
            "instances", "gpus", "precision", "kv_offload", "concurrency", "batch_size",
            "total_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
            "e2e_normalized_interactivity_p90", "ttft_p90_s", "e2e_p90_s", "prefix_hit_rate",
            "prefix_hit_rate_dram", "usd_per_mtok_output_all_in", "footing", "reason")
#: Columns of the per-device table of each deployment kind's best point: the kind, then its
#: figures, then its shape (what a table that does not fit 100 columns drops first).
KIND_COLUMNS = ("hardware", "mode", "kv_offload", "engine", "concurrency",
                "total_tokens_per_s_per_gpu", "e2e_normalized_interactivity_p90",
                "prefix_hit_rate", "usd_per_mtok_output_all_in", "precision", "tp", "dp", "ep",
                "prefill_tp")


def best_per_kind(cand):
    """Each device's best candidate meeting the targets per (mode, KV tiers): what P/D and
    DRAM offload are worth on that trace (the candidates are ranked best first)."""
    ok = cand[cand["meets_slo"].astype(bool)]
    return ok.groupby(["hardware", "mode", "kv_offload"], sort=False).head(1)


def plan_trace_cmd(ctx, fmt, o: dict) -> None:
    """``plan --trace`` from plan's options ``o``: those it takes, the others refused."""
    from ..analysis.economics import CostModel
    from ..specs import grammar as g
    from ..specs.hardware import DEFAULT_HARDWARE
    from .questions import _names

    unsupported = dict(isl=o["isl"] != 1024, osl=o["osl"] != 1024, tpot=o["tpot"],
                       load=o["load"], plot=o["plot_path"], emit_config=o["emit_config"],
                       emit_launch=o["emit_launch"], uncertainty=o["uncertainty"],
                       draft_model=o["draft_model"], target_utilization=o["target_utilization"])
    for name, given in unsupported.items():
        if given:
            raise SpecError(f"--{name.replace('_', '-')} does not apply with --trace (the "
                            "trace sets the lengths; the target is --e2e-interactivity)")
    axes = dict(o["axes"])
    depth = list(axes.pop("draft_depth", [0]))
    if axes:
        raise SpecError(f"--axis {sorted(axes)[0]}: with --trace only draft_depth is searched")
    # plan's TTFT default (5 s) is not a target here; a --ttft given is, on TTFT P90
    explicit = ctx.get_parameter_source("ttft") != click.core.ParameterSource.DEFAULT
    cost = CostModel(cost_basis=o["cost_basis"], price_basis=o["price_basis"],
                     power_basis=o["power_basis"] or "gpu-tdp-pue",
                     rental_usd_per_gpu_hour=o["rental_usd_per_gpu_hour"],
                     capex_usd_per_gpu=o["capex_usd_per_gpu"])
    gpus = o["gpus"]
    run_plan_trace(trace=o["trace"], e2e_interactivity=o["e2e_interactivity"],
                   kv_offload=o["kv_offload"], ladder=o["concurrency"], fmt=fmt,
                   output=o["output"], wide=o["wide"], kw=dict(
                       model=o["model"], hardware=_names(o["hardware"]) or [DEFAULT_HARDWARE],
                       gpus=gpus[1], min_gpus=gpus[0], max_instance_gpus=o["max_instance_gpus"],
                       ttft_s=o["ttft"] if explicit else None, objective=o["objective"],
                       modes=(("aggregated", "disaggregated") if o["mode"] == "both"
                              else (o["mode"],)),
                       shapes=[dict(x) for x in o["parallelism"]] or None,
                       precision=g.parse_precision(o["precision"], "--precision"),
                       draft_depth=[int(d) for d in depth], engine=o["engine"],
                       price=o["price"], cost=cost))


def run_plan_trace(*, trace, e2e_interactivity, kv_offload, ladder, fmt, output, wide,
                   kw) -> None:
    from ..analysis.plan.trace import DEFAULT_LADDER, DEFAULT_OFFLOAD, plan_trace

    offloads = tuple(x.strip() for x in kv_offload.split(",")) if kv_offload else \
        DEFAULT_OFFLOAD
    for o in offloads:
        if o not in ("none", "dram", "dram+nvme") and not o.startswith("dram:"):
            raise SpecError(f"--kv-offload {kv_offload!r}: each of none, dram, dram:GB, "
                            "dram+nvme (comma-separated)")
    result = plan_trace(trace=trace, e2e_interactivity=e2e_interactivity,
                        kv_offload=offloads, concurrency=tuple(ladder or DEFAULT_LADDER), **kw)
    recs, q = result.recommendations, result.request
    head = (f"{q['model']}: plan --trace {q['trace']} ({q['sessions']:,} sessions, "
            f"{q['turns']:,} turns) with engine {q['engine']}; {len(result.candidates):,} "
            f"replayed points in {q['seconds']:.0f} s\nwithin {q['gpus']} GPUs, E2E "
            f"interactivity P90 >= {e2e_interactivity:g} tok/s/user"
            f"{', TTFT P90 <= ' + format(q['ttft_s'], 'g') + ' s' if q['ttft_s'] else ''}, "
            f"KV tiers {', '.join(offloads)}, lanes per instance "
            f"{','.join(str(c) for c in q['concurrency'])}")
    if fmt == "json":
        from ..output.files import json_text
        from ..output.tables import records
        text = json_text({"recommendations": records(recs),
                          "best_per_kind": records(best_per_kind(result.candidates)),
                          "front": records(result.front), "request": q})
    elif fmt == "csv":
        text = render(result.candidates, fmt)
    else:
        import pandas as pd

        from ..output.tables import human_header

        cols = [c for c in (recs.columns if wide else REC_ROWS) if c in recs]
        heads = [human_header(c) if not wide else (c, 1.0) for c in cols]

        def cell(v, k):
            return v * k if isinstance(v, float) and k != 1.0 else v

        table = pd.DataFrame({"": [h for h, _ in heads], **{
            str(r["hardware"]): [cell(r[c], k) for c, (_, k) in zip(cols, heads)]
            for _, r in recs.iterrows()}})
        text = render(table, fmt, header=head, human=not wide,
                      width=10_000 if wide else None)
        kinds = best_per_kind(result.candidates)
        kinds, title = (kinds[[c for c in KIND_COLUMNS if c in kinds]], "best per deployment "
                        "kind (aggregated or P/D, KV tiers) meeting the target")
        if wide:
            text += "\n\n" + render(kinds, fmt, header=title, width=10_000)
        else:       # within 100 columns: the shape's columns dropped first, and named
            from .question_options import fit_columns, hidden_note
            more, hidden = fit_columns(kinds, fmt, title, width=TABLE_WIDTH, human=True,
                                       keep=KIND_COLUMNS[:4])
            text += "\n\n" + more + hidden_note(hidden, TABLE_WIDTH)
        launch = [f"launch ({r['hardware']}, {r.get('engine_label')}):\n  "
                  + _launch_lines(str(r["launch_command"]), None if wide else TABLE_WIDTH - 2).replace(
                      "\n", "\n  ")
                  for _, r in recs.iterrows() if str(r.get("launch_command") or "")]
        if launch:
            text += "\n\n" + "\n".join(launch)
        top = [str(r["hardware"]) for _, r in recs.iterrows()
               if r.get("concurrency") == max(q["concurrency"]) and not r.get("reason")]
        if top:
            text += "\n" + fit_lines(
                f"{', '.join(top)}: the recommendation sits at the ladder's top "
                f"({max(q['concurrency'])} lanes per instance); more lanes may do better "
                "(-c ...,512,1024)")
        text += "\n" + fit_lines(
            "each point is bench --trace's replay of the trace on one instance (the fleet "
            "fills the budget with whole instances); concurrency = lanes per instance")
    if output is not None:
        from ..output.files import write_text_atomic
        write_text_atomic(output, text + "\n")
    click.echo(text)
