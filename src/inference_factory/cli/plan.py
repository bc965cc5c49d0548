"""``inference-factory plan``: a GPU budget and latency targets in, one recommended deployment
per hardware out (thin: parse, call :func:`inference_factory.plan.plan`, print)."""

from __future__ import annotations

import math

import click

from ..specs import grammar as g
from . import params as p
from ..errors import SpecError
from ..output.tables import TABLE_WIDTH, chosen_format, fit_lines, human_header, render, render_blocks
from .bench import _concurrency
from .params import engine_option, format_option
from .text import _launch_lines
from ..specs.hardware import DEFAULT_HARDWARE

#: Columns printed as a table (every column goes to csv and json).
TABLE_COLUMNS = ("hardware", "engine", "engine_version", "mode", "tp", "dp", "ep", "prefill_tp", "prefill_dp", "prefill_ep",
                 "instances", "decode_instances", "prefill_instances", "gpus", "precision", "weight_precision", "moe_precision", "kv_precision",
                 "overlap", "batch_size", "draft_depth", "concurrency",
                 "output_tokens_per_s", "output_tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s", "tpot_s",
                 "decode_binding_resource", "usd_per_mtok_output", "usd_per_mtok_input",
                 "usd_per_mtok_output_all_in", "usd_per_gpu_hour", "output_tokens_per_s_per_mw",
                 "j_per_output_token", "gpus_for_load", "footing", "measured_share",
                 "reason")


def _gpus(ctx, param, value):
    try:
        values = g.parse_values(value, "--gpus")
    except SpecError as exc:
        raise click.UsageError(str(exc), ctx) from None
    if not all(isinstance(v, int) and v >= 1 for v in values):
        raise click.UsageError(f"--gpus {value}: GPU counts are whole numbers >= 1", ctx)
    return (1 if len(values) == 1 else min(values)), max(values)


@click.command("plan")
@click.option("--model", "-m", default="DeepSeek-V3", show_default=True,
              help="Model name, alias or TOML path.")
@click.option("--hardware", "-H", "hardware", multiple=True,
              help=f"Hardware to plan for (repeat or comma-separate; default {DEFAULT_HARDWARE}, "
                   "the one default of every command).")
@click.option("--gpus", "-g", default="8", show_default=True, callback=_gpus, metavar="N|A..B",
              help="GPU budget in total: whole instances (for P/D, prefill and decode "
                   "instances balanced on request rate) using at most N GPUs; per-GPU figures "
                   "count every GPU used. A range A..B (or list) also sets the smallest "
                   "instance to A GPUs.")
@click.option("--max-instance-gpus", type=click.IntRange(min=1), default=None, metavar="M",
              help="The most GPUs one instance (prefill or decode) may take (default: N; "
                   "tensor parallelism stays within one node's scale-up domain).")
@click.option("--isl", type=p.TokensParam(), default=1024, show_default=True,
              help="Prompt tokens per request.")
@click.option("--osl", type=p.TokensParam(), default=1024, show_default=True,
              help="Output tokens per request.")
@click.option("--ttft", type=p.DurationParam(), default="5s", show_default=True,
              help="TTFT target (the default is a factory config's default [slo] ttft_s).")
@click.option("--tpot", type=p.DurationParam(), default=None, help="TPOT target, e.g. 50ms.")
@click.option("--objective", type=click.Choice(["usd_per_mtok_output_all_in",
                                                "output_tokens_per_s_per_gpu",
                                                "tokens_per_s_per_user"]),
              default="usd_per_mtok_output_all_in", show_default=True,
              help="What the recommendation optimises (among candidates meeting the targets).")
@click.option("--mode", type=click.Choice(["both", "aggregated", "disaggregated"]),
              default="both", show_default=True,
              help="Aggregated (one pool) and/or prefill/decode disaggregation.")
@click.option("--precision", multiple=True, default=("both",), show_default=True,
              metavar="PROFILES",
              help="Precision profiles to try (repeat or comma-separate): native (the model's "
                   "weights, BF16 KV), low (FP8 KV and dispatch, FP4 experts where the device "
                   "has FP4), both, or parts PREC-PART joined by '+' (parts: weights, dense, "
                   "experts, kv, attention, dispatch, combine), e.g. fp8-weights+fp8-kv, "
                   "fp4-experts+fp8-kv, low+fp8-dense, or weight=fp8,moe=fp4,kv=fp8. A part a "
                   "device cannot run is refused there, with the reason.")
@click.option("--parallelism", "-p", multiple=True, type=p.ShapeParam(),
              help="Instance shapes to try instead of the default search (repeat).")
@click.option("--axis", "-a", "axes", multiple=True, type=p.AxisParam(), callback=p.collect_axes,
              help="Search grids (batch_size, draft_depth, prefill_batch_size, overlap) or "
                   "fixed engine values (acceptance_rate, expert_skew, redundant_experts, "
                   "cache_hit_rate, context_cv).")
@click.option("--draft-model", default=None, help="Separate draft model (default: MTP).")
@engine_option(note="plan keeps the deployments that engine runs on each device and prices "
                    "them with its profile (default: every bundled engine, each row naming "
                    "its engine).")
@click.option("--emit-launch", "emit_launch", default=None, metavar="FILE.sh",
              help="Write each device's recommendation as the engine's own launch command "
                   "(several devices: FILE-<device>.sh).")
@click.option("--load", "load", type=p.FiniteRange(min=0, min_open=True), default=None,
              metavar="TOKENS/S", help="Output tokens/s to serve: adds the GPUs it needs at "
              "--target-utilization, and the share of it the --gpus budget serves.")
@click.option("--target-utilization", type=p.FiniteRange(0, 1, min_open=True), default=None,
              metavar="U", help="Busy share of the GPUs a fleet is sized for (default 0.8, "
              "configs/provisioning.toml; simulate applies the same rule).")
@click.option("--price", default=None, metavar="ID",
              help="Price id (see 'inference-factory prices list'); the config needs one.")
@click.option("--cost-basis", type=click.Choice(["rental", "capex", "tco"]), default="rental",
              show_default=True, help="How a GPU-hour is charged.")
@click.option("--rental-usd-per-gpu-hour", type=p.FiniteRange(min=0, min_open=True),
              default=None, help="Override the hardware file's rental price.")
@click.option("--capex-usd-per-gpu", type=p.FiniteRange(min=0, min_open=True), default=None,
              help="Override the hardware file's purchase price.")
@p.price_basis_options
@click.option("--plot", "plot_path", default=None, metavar="FILE.png",
              help="Draw the Pareto fronts with the recommendations.")
@click.option("--emit-config", "emit_config", default=None, metavar="FILE.toml",
              help="Write each device's recommendation as a factory config for 'simulate' "
                   "(several devices: FILE-<device>.toml, e.g. plan-h200-sxm.toml).")
@click.option("--uncertainty", is_flag=True,
              help="Add the 80% band of each recommendation's tokens/s per GPU and per user, "
                   "TTFT, TPOT and $/M (table: value [low-high]; JSON <name>_low/_high; "
                   "--plot draws it): component uncertainty at the recommended operating "
                   "point, widened by the model-structure term (docs/MODEL.md section 13).")
@click.option("--output", "-o", default=None, metavar="FILE",
              help="Also write the recommendations in the chosen --format.")
@click.option("--force", is_flag=True, help="Replace existing --emit-config files (without "
              "it an existing file is never overwritten).")
@click.option("--wide", is_flag=True, help="Table: every column of a recommendation, library "
              "names (default: the ones a person reads, within 100 characters).")
@click.option("--trace", default=None, metavar="FILE|NAME",
              help="Plan for agent sessions (as bench --trace replays them): each deployment "
                   "replayed over a concurrency ladder against --e2e-interactivity.")
@click.option("--e2e-interactivity", type=p.FiniteRange(min=0, min_open=True), default=20.0,
              show_default=True, metavar="TOK/S",
              help="With --trace: E2E normalized interactivity target at P90 (tok/s/user, "
                   "InferenceX AgentX: 1 / P90 of E2E latency per output token).")
@click.option("--kv-offload", default=None, metavar="TIERS",
              help="With --trace: KV tier settings to try, comma-separated (default none,dram).")
@click.option("--concurrency", "-c", callback=_concurrency, default=None, metavar="LIST",
              help="With --trace: the ladder of lanes per instance (default 1,2,4,...,256).")
@format_option
@click.pass_context
def plan_cmd(ctx, model: str, hardware: tuple[str, ...], gpus: tuple[int, int],
             max_instance_gpus: int | None, isl: int, osl: int,
             ttft: float | None, tpot: float | None, objective: str, mode: str,
             precision: tuple[str, ...],
             parallelism: tuple[dict, ...], axes: dict, draft_model: str | None,
             engine, load: float | None, target_utilization: float | None,
             price: str | None, cost_basis: str,
             price_basis: str | None, power_basis: str | None,
             rental_usd_per_gpu_hour: float | None, capex_usd_per_gpu: float | None,
             plot_path: str | None, emit_config: str | None, emit_launch: str | None,
             uncertainty: bool, output: str | None, force: bool, wide: bool, trace,
             e2e_interactivity, kv_offload, concurrency, fmt: str | None,
             as_json: bool) -> None:
    """Recommend a deployment per hardware for a GPU budget, ISL/OSL and TTFT/TPOT targets.

    Searches tensor/data/expert parallelism within the budget, aggregated vs P/D, the
    precision profiles, overlap, decode batch, draft depth and prefill batch; prints one
    recommendation per hardware (shape, batch, depth, tokens/s per GPU and per user, binding
    resource, $/M output and input, GPUs for --load) and the Pareto front.

    \b
    inference-factory plan -m DeepSeek-V3 -H H800,B200 --gpus 64 --isl 4096 --osl 1024 \\
        --ttft 2s --tpot 50ms --price deepseek-chat-2025-02 --plot pareto.png \\
        --emit-config plan.toml
    """
    from ..analysis.economics import CostModel, cost_attrs, cost_header
    from ..analysis.plan import DEFAULT_BATCHES, DEFAULT_PREFILL_BATCHES, plan, plot_front
    from .questions import _names, check_shapes

    fmt = chosen_format(fmt, as_json)
    if trace is not None:           # agent sessions: every option as given
        from .plan_trace import plan_trace_cmd
        return plan_trace_cmd(ctx, fmt, dict(locals()))
    profiles = g.parse_precision(precision, "--precision")
    hws = _names(hardware) or [DEFAULT_HARDWARE]
    for path, suffixes, opt in ((plot_path, (".png", ".svg", ".pdf"), "--plot"),
                                (emit_config, (".toml",), "--emit-config"),
                                (emit_launch, (".sh",), "--emit-launch")):
        if path is not None and not path.lower().endswith(suffixes):
            raise SpecError(f"{opt} {path!r}: the name must end in {' or '.join(suffixes)}")
    if plot_path is not None:
        from ..errors import require
        require("matplotlib", f"--plot {plot_path}", extra="plots")
    from ..output.files import check_target
    for path, opt in ((output, "--output"), (plot_path, "--plot"), (emit_config, "--emit-config")):
        if path is not None:
            check_target(path, option=opt)     # a bad name fails before the search runs
    searched = {"batch_size": DEFAULT_BATCHES, "draft_depth": None,
                "prefill_batch_size": DEFAULT_PREFILL_BATCHES, "overlap": None}
    refused = [k for k in axes if k in ("tp", "dp", "ep", "kv_len", "prompt_len", "final_len")
               or k.endswith("_precision")]
    if refused:
        k = refused[0]
        how = ("give shapes with --parallelism" if k in ("tp", "dp", "ep") else
               "use --precision" if k.endswith("_precision") else "it follows from --isl/--osl")
        raise SpecError(f"--axis {k}: plan sets it ({how})")
    grids = {k: list(axes.pop(k)) for k in list(axes) if k in searched}
    fixed = {k: (v[0] if len(v) == 1 else None) for k, v in axes.items()}
    lists = [k for k, v in fixed.items() if v is None]
    if lists:
        raise SpecError(f"--axis {lists[0]}: plan holds it at one value; give one")
    shapes = [dict(p) for p in parallelism] or None
    if shapes:
        check_shapes(model, hws, {}, shapes)
    if draft_model:
        fixed["draft_model"] = draft_model
    cost = CostModel(cost_basis=cost_basis, price_basis=price_basis,
                     power_basis=power_basis or "gpu-tdp-pue",
                     rental_usd_per_gpu_hour=rental_usd_per_gpu_hour,
                     capex_usd_per_gpu=capex_usd_per_gpu)
    result = plan(model, hws, gpus=gpus[1], max_instance_gpus=max_instance_gpus,
                  min_gpus=gpus[0], isl=isl, osl=osl, ttft_s=ttft,
                  tpot_s=tpot, price=price, cost=cost, objective=objective,
                  load_output_tokens_per_s=load, target_utilization=target_utilization,
                  modes=("aggregated", "disaggregated") if mode == "both" else (mode,),
                  shapes=shapes,
                  precision=profiles, uncertainty=True if uncertainty else None,
                  engine=engine, **{k: v for k, v in grids.items()}, **fixed)
    configs = _configs(result, emit_config, price) if emit_config is not None else []
    recs = result.recommendations
    head = (f"{result.request['model']}: plan with engine {result.request['engine']}; "
            f"{len(result.candidates):,} candidates\n"
            f"within {gpus[1]} GPUs in total "
            f"(instances of at most {result.request['max_instance_gpus']}), ISL {isl} / OSL {osl}, "
            f"TTFT {'<= ' + format(ttft, 'g') + ' s' if ttft else 'free'}, "
            f"TPOT {'<= ' + format(tpot * 1e3, 'g') + ' ms' if tpot else 'free'}\n"
            f"best {human_header(objective)[0]} ({cost_header(cost, hws)}"
            f"{', price ' + price if price else ''})")
    if fmt in ("table", "markdown"):
        shown = recs[[c for c in (recs.columns if wide else TABLE_COLUMNS) if c in recs]]
        if load is None:
            shown = shown.drop(columns=[c for c in ("gpus_for_load", "load_share_frac")
                                        if c in shown])
        if "reason" in shown and not shown["reason"].fillna("").astype(str).any():
            shown = shown.drop(columns="reason")       # every device has a recommendation
        text = (render(_transpose(shown, recs), fmt, header=head, width=10_000) if wide else
                render_blocks(_transpose(shown, recs, human=True), fmt, head))
        text += _band_note(recs) if wide else fit_lines(_band_note(recs))
        notes = [f"{h}: {n}" for h, ns in result.request.get("precision_notes", {}).items()
                 for n in ns]
        more = _footing_note(recs) + _launch_note(recs, wide) + _load_note(recs, result.request,
                                                                      gpus[1])
        if notes:
            more += "\n" + "\n".join(f"precision: {n}" for n in notes)
        text += more if wide else fit_lines(more)
        from ..analysis.plan.ranking import (FRONT_DROPPABLE, FRONT_LABELS, front_note,
                                             front_table)
        from .question_options import fit_columns, hidden_note
        front = result.front
        head = ("Pareto front (fits, meets TTFT): tokens/s per user against output tokens/s "
                "per GPU (agg: aggregated, P/D: disaggregated"
                + (")" if wide else "; prec: precision profile)"))
        # the engine's profile names its version (sglang-0.5.6, trtllm-1.3)
        table, hidden = ((render(front_table(front, short=False), fmt, header=head,
                                 width=10_000), []) if wide else
                         fit_columns(front_table(front, short=False), fmt, head, width=TABLE_WIDTH,
                                     labels=FRONT_LABELS, human=True, keep=[
                                         c for c in front if c not in FRONT_DROPPABLE]))
        text += "\n\n" + table + hidden_note(hidden, TABLE_WIDTH, "--wide or --json shows them")
        text += front_note(front) if wide else fit_lines(front_note(front, hidden))
    elif fmt == "json":
        from ..output.files import json_text
        from ..output.tables import records
        basis = cost_attrs(cost, hws)
        text = json_text({"recommendations": records(recs), "front": records(result.front),
                          "request": result.request, "price_basis": basis["price_basis"],
                          "power_basis": basis["power_basis"],
                          "usd_per_gpu_hour": basis["usd_per_gpu_hour"],
                          **({"emitted_configs": {hw: path for path, hw, _ in configs}}
                             if configs else {})})
    else:
        text = render(recs, fmt)
    # all or nothing: every target checked (an emitted config never replaces a file of the
    # user's without --force), then the plot (the write that can fail on its own), the
    # configs and the output; each write names its own option
    from ..output.files import write_text_atomic
    launches = _launches(result, emit_launch) if emit_launch is not None else []
    for path, _, _ in configs:
        check_target(path, option="--emit-config", overwrite=force)
    for path, _, _ in launches:
        check_target(path, option="--emit-launch", overwrite=force)
    if output is not None:
        check_target(output, option="--output")
    if plot_path is not None:
        plot_front(result, plot_path)
    for path, _, config_text in configs:
        write_text_atomic(path, config_text, option="--emit-config")
    for path, _, body in launches:
        write_text_atomic(path, body, option="--emit-launch")
    if output is not None:
        write_text_atomic(output, text + "\n")
    click.echo(text)
    if fmt in ("table", "markdown"):
        if plot_path is not None:
            click.echo(f"wrote {plot_path}: Pareto fronts")
        for path, hw, _ in configs:
            click.echo(f"wrote {path}: factory config of the {hw} recommendation "
                       f"(inference-factory simulate --config {path})")
        for path, hw, _ in launches:
            click.echo(f"wrote {path}: launch command of the {hw} recommendation")


def _configs(result, path: str, price: str | None) -> list[tuple[str, str, str]]:
    """(file, hardware, text) of each device's recommendation that meets the targets: one
    device writes FILE.toml, several FILE-<device>.toml
    (:func:`inference_factory.analysis.plan.config.config_path`)."""
    from ..analysis.plan import config_toml
    from ..analysis.plan.config import config_path

    recs = result.recommendations
    good = [str(h) for h, why in zip(recs["hardware"], recs["reason"].fillna(""))
            if not why]
    if not good:
        config_toml(result, price=price)      # raises: nothing meets the targets
    several = len(result.request["hardware"]) > 1
    return [(config_path(path, hw, several), hw, config_toml(result, hw, price=price))
            for hw in good]


def _launches(result, path: str) -> list[tuple[str, str, str]]:
    """(file, hardware, script) of each device's recommendation with a launch command."""
    from ..analysis.plan.config import config_path

    recs = result.recommendations
    several = len(result.request["hardware"]) > 1
    out = []
    for _, r in recs.iterrows():
        cmd = str(r.get("launch_command") or "")
        if cmd:
            hw = str(r["hardware"])
            head = (f"#!/bin/sh\n# {result.request['model']} on {hw}: {r['mode']}, engine "
                    f"{r.get('engine_label', r.get('engine'))} "
                    f"(inference-factory plan; docs/ENGINES.md)\n")
            if str(r.get("cuda_graph_note") or ""):
                head += f"# note: {r['cuda_graph_note']}\n"
            out.append((config_path(path, hw, several), hw, head + cmd + "\n"))
    if not out:
        raise SpecError("--emit-launch: no device has a recommendation that meets the targets")
    return out


def _launch_note(recs, wide: bool = False) -> str:
    """Under the table: each recommendation's engine and launch command (and whether its
    decode batch runs outside the engine's CUDA graphs), within 100 columns unless ``wide``."""
    if "launch_command" not in recs:
        return ""
    lines = [f"\nlaunch ({r['hardware']}, {r.get('engine_label', r.get('engine'))}):\n  "
             + _launch_lines(str(r["launch_command"]), None if wide else TABLE_WIDTH - 2).replace(
                 "\n", "\n  ")
             + (f"\n  note: {r['cuda_graph_note']}" if str(r.get("cuda_graph_note") or "")
                else "")
             for _, r in recs.iterrows() if str(r.get("launch_command") or "")]
    return "\n" + "\n".join(lines) if lines else ""


def _footing_note(recs) -> str:
    """One line under the table: what each device's costs stand on."""
    from ..analysis.plan.footing import measured_tables

    if "footing" not in recs:
        return ""
    parts = []
    for _, r in recs.iterrows():
        share = r.get("measured_share")
        pct = f" ({100 * share:.0f}% of GPU time on measured tables)" if (
            isinstance(share, float) and math.isfinite(share) and r["footing"] != "roofline-only"
        ) else ""
        tables = measured_tables(r["hardware"]) if r["footing"] != "roofline-only" else ""
        parts.append(f"{r['hardware']} {r['footing'] or 'unknown'}{pct}"
                     + (f" [tables: {tables}]" if tables else ""))
    return "\nfooting: " + "; ".join(parts) + ("; a roofline-only device ranks on its "
                                               "datasheet" if any(
                                                   recs["footing"] == "roofline-only") else "")


def _load_note(recs, request, budget: int) -> str:
    """One line under the table with --load: the share of the load each device's
    recommendation (within the --gpus budget) serves at the target utilisation, and the
    GPUs the whole load needs by the same rule."""
    load = request.get("load_output_tokens_per_s")
    if load is None or "load_share_frac" not in recs:
        return ""
    u = request["target_utilization"]
    parts = [f"{r['hardware']} {100 * r['load_share_frac']:.0f}% ({r['gpus_for_load']:,.0f} "
             "GPUs for all of it)" for _, r in recs.iterrows()
             if isinstance(r.get("load_share_frac"), float)
             and math.isfinite(r["load_share_frac"])]
    return (f"\n--load {load:,.0f} output tokens/s at {100 * u:g}% target utilisation: the "
            f"--gpus {budget} budget serves " + "; ".join(parts)) if parts else ""


def _band_note(recs) -> str:
    """One line under the table: what the bands are, per device."""
    if "band_structure_ln" not in recs:
        return ""
    parts = []
    for _, r in recs.iterrows():
        w = r.get("band_structure_ln")
        if isinstance(w, float) and math.isfinite(w):
            share = r.get("meets_slo_share")
            parts.append(f"{r['hardware']} model-structure x{math.exp(w):.3f} each side, "
                         f"{100 * share:.0f}% of draws meet the targets")
    return ("\n80% band [low-high]: component uncertainty at the recommended operating point "
            "(200 draws), widened by the model-structure term: " + "; ".join(parts)
            if parts else "")


def _cell(r, c, human: bool = False):
    """A recommendation's value, as ``value [low-high]`` text where it carries a band (TTFT
    and TPOT in ms, as the table shows them; ``human``: the band on a line under the value)."""
    from ..output.tables import value_band

    v = r[c]
    lo, hi = r.get(f"{c}_low"), r.get(f"{c}_high")
    if not (isinstance(lo, float) and math.isfinite(lo) and isinstance(v, float)
            and math.isfinite(v)):
        return v
    k = 1e3 if c in ("ttft_s", "tpot_s") else 1.0
    return value_band(v * k, lo * k, hi * k).replace(" [", "\n[" if human else " [")


def _transpose(df, recs=None, human: bool = False):
    """One column per hardware: a recommendation reads down, whatever the terminal width
    (a figure with a band as ``value [low-high]``, from ``recs``' ``_low`` / ``_high``);
    ``human``: rows labelled with the headers a person reads, values in their units."""
    import pandas as pd

    from ..output.tables import display_header, human_header

    rows = recs if recs is not None else df
    out = pd.DataFrame({str(r["hardware"]): [_cell(r, c, human) for c in df.columns[1:]]
                        for _, r in rows.iterrows()}, index=list(df.columns[1:]))
    heads = [human_header(c) if human else display_header(c) for c in df.columns[1:]]
    out.insert(0, "", [h for h, _ in heads])
    scaled = out.copy()
    for i, c in enumerate(df.columns[1:]):
        factor = 1e3 if c in ("ttft_s", "tpot_s") else heads[i][1]
        for col in out.columns[1:]:
            v = out.iloc[i][col]
            if factor != 1.0 and isinstance(v, float) and math.isfinite(v):
                scaled.iloc[i, list(out.columns).index(col)] = v * factor
    return scaled.reset_index(drop=True)
