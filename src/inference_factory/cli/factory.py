"""Click commands of the factory layer: ``compare`` and ``simulate`` (thin; no formulas)."""

from __future__ import annotations

import click

from ..output.files import check_target, write_text_atomic
from ..bounds import MAX_REQUESTS
from .params import FiniteRange, engine_option, price_basis_options

# the factory's modules (numpy, pandas, the engine) are imported when a command runs, so the
# command line's --help stays fast


def _emit(result: dict, as_json: bool, output: str | None, text: str) -> None:
    from ..factory.compare import to_json

    js = to_json(result)
    if output:
        write_text_atomic(output, js + "\n")
    click.echo(js if as_json else text)


@click.command("compare")
@click.option("--config", "-c", "config", required=True, type=click.Path(dir_okay=False),
              help="Factory config TOML (e.g. configs/factory.toml); it names its baseline.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@click.option("--output", "-o", default=None, help="Also write the JSON result to this file.")
@click.option("--no-attribution", is_flag=True, help="Skip the per-lever attribution runs.")
@click.option("--report", "report", default=None, type=click.Path(dir_okay=False),
              help="Also write a Markdown report (table, attribution, lever studies) to this "
                   ".md file, with its PNG figures beside it.")
@click.option("--progress/--no-progress", default=None,
              help="One line per simulated side on stderr (default: when stderr is a terminal).")
@click.option("--requests", "n_requests", type=click.IntRange(1, MAX_REQUESTS), default=None,
              help="Override workload.n_requests; with a loaded trace, keep its first N requests.")
@click.option("--uncertainty", is_flag=True,
              help="Add the 80% band of the baseline's and the factory's headline figures "
                   "(JSON <name>_low/_high; 64 re-simulations per side).")
@engine_option(config=True, note="The factory uses its policy (a colocated side is modelled "
                                  "prefill-first) and names it; not its limits, intervals or "
                                  "host times.")
@price_basis_options
def compare_cmd(config: str, as_json: bool, output: str | None, no_attribution: bool,
                report: str | None, progress: bool | None, n_requests: int | None,
                uncertainty: bool, engine, price_basis: str | None,
                power_basis: str | None) -> None:
    """Run the generic baseline and the factory on one deterministic trace, side by side,
    with a per-lever attribution and when speculation and expert balancing pay.

    The serving-engine profile (--engine, else the config's engine, else the default) is
    named in the output; the factory uses its policy only (a colocated side is modelled
    prefill-first), not its limits, poll and stream intervals or host times (docs/CONFIG.md)."""
    import sys

    from ..factory.compare import compare, format_compare

    if report is not None and not report.lower().endswith(".md"):
        raise click.BadParameter(f"{report!r} must end in .md", param_hint="--report")
    if report is not None:
        check_target(report, option="--report")   # a bad folder fails before the run
    cfg = _load(config, n_requests, output, price_basis, power_basis, engine)
    show = sys.stderr.isatty() if progress is None else progress
    result = compare(cfg, attribution=not no_attribution,
                     progress=(lambda msg: click.echo(msg, err=True)) if show else None,
                     uncertainty=True if uncertainty else None)
    if report is not None:
        from ..factory.report import write_report

        for path in write_report(result, report):
            click.echo(f"wrote {path}", err=True)
    from ..analysis.footing import compare_footing

    result["footing"] = compare_footing(cfg, result)
    _emit(result, as_json, output, format_compare(result) + _compare_footing_text(result)
          + "".join(f"\n{side}:" + _band_lines(result[side])
                    for side in ("baseline", "factory") if uncertainty))


@click.command("simulate")
@click.option("--config", "-c", "config", required=True, type=click.Path(dir_okay=False),
              help="Scenario config TOML.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@click.option("--output", "-o", default=None, help="Also write the JSON result to this file.")
@click.option("--requests", "n_requests", type=click.IntRange(1, MAX_REQUESTS), default=None,
              help="Override workload.n_requests; with a loaded trace, keep its first N requests.")
@click.option("--uncertainty", is_flag=True,
              help="Add the 80% band of the headline figures (tokens/s per GPU, TTFT, TPOT, "
                   "$/M, GPUs; JSON <name>_low/_high): the scenario re-simulated on 64 draws "
                   "of the component uncertainty, widened by the model-structure term.")
@engine_option(config=True, note="The factory uses its policy (a colocated side is modelled "
                                  "prefill-first) and names it; not its limits, intervals or "
                                  "host times.")
@price_basis_options
@click.option("--target-utilization", type=FiniteRange(0, 1, min_open=True), default=None,
              metavar="U", help="Busy share of the GPUs the fleet is sized for (default: the "
              "config's [fleet] target_utilization, else 0.8 of configs/provisioning.toml; "
              "plan --load applies the same rule).")
def simulate_cmd(config: str, as_json: bool, output: str | None, n_requests: int | None,
                 uncertainty: bool, engine, price_basis: str | None,
                 power_basis: str | None, target_utilization: float | None) -> None:
    """Run one scenario on its trace.

    The serving-engine profile (--engine, else the config's engine, else the default) is
    named in the output; the factory uses its policy only (a colocated side is modelled
    prefill-first), not its limits, poll and stream intervals or host times (docs/CONFIG.md)."""
    from ..factory.compare import format_simulate, simulate_one

    from ..analysis.footing import simulate_footing
    from ..factory.plan_check import format_plan_check, plan_check

    cfg = _load(config, n_requests, output, price_basis, power_basis, engine)
    if target_utilization is not None:
        import dataclasses
        cfg = dataclasses.replace(cfg, target_utilization=target_utilization)
        if cfg.baseline is not None:
            cfg = dataclasses.replace(cfg, baseline=dataclasses.replace(
                cfg.baseline, target_utilization=target_utilization))
    result = simulate_one(cfg, uncertainty=True if uncertainty else None)
    check = plan_check(cfg, result["scenario"])   # a config from 'plan --emit-config'
    if check is not None:
        result["plan_check"] = {k: v for k, v in check.items() if k != "plan"}
    result["footing"] = simulate_footing(cfg, result["scenario"])
    _emit(result, as_json, output, format_simulate(result) + _footing_text(result)
          + (_band_lines(result["scenario"]) if uncertainty else "")
          + ("\n" + format_plan_check(check) if check is not None else ""))


def _footing_text(result: dict) -> str:
    """What the scenario stands on (:func:`~inference_factory.analysis.footing.footing_lines`,
    as bench and roofline print it), within 100 columns."""
    from ..output.tables import fit_lines

    return "\n" + fit_lines("\n".join(_side_footing(result["footing"], result["scenario"],
                                                     result["engine"], "simulate")))


def _compare_footing_text(result: dict) -> str:
    """Each side's footing (as ``simulate`` prints it, indented under the side's name), then
    the serving engine once: both sides use its policy."""
    from ..output.tables import TABLE_WIDTH, fit_lines

    text = ""
    for side in ("baseline", "factory"):
        lines = _side_footing(result["footing"][side], result[side], result["engine"],
                              "compare")
        text += f"\n{side}\n" + "\n".join(
            "  " + s for s in fit_lines("\n".join(lines[:-1]), TABLE_WIDTH - 2).splitlines())
    return "\n" + text + "\n" + fit_lines(lines[-1])


def _side_footing(f: dict, s: dict, engine: str, command: str) -> list[str]:
    """One simulated side's footing lines, the engine's last."""
    from ..analysis.footing import engine_words, footing_lines

    return footing_lines(
        footing=f["footing"], measured_share=f["measured_share"],
        where=f" at decode batch {s['decode_batch_per_gpu']:.0f} per GPU, the mean request",
        precisions=f["precisions"], notes=[f["precision_note"]],
        engine=engine_words(engine) + f"; {command} uses its policy only")


def _band_lines(metrics: dict) -> str:
    """The headline figures with their 80 % band, ``value [low-high]``."""
    import math

    from ..factory.bands import SIMULATE_BANDED
    from ..output.tables import value_band

    w = metrics.get("band_structure_ln", 0.0)
    lines = [f"80% band ({metrics.get('band_draws')} draws of the component uncertainty, "
             f"model-structure term x{math.exp(w):.3f} each side):"]
    for k in SIMULATE_BANDED:
        scale, unit = (1e3, " ms") if k.endswith("_s") else (1.0, "")
        name = k[:-2] if k.endswith("_s") else k
        band = value_band(metrics[k] * scale, metrics[k + "_low"] * scale,
                          metrics[k + "_high"] * scale)
        lines.append(f"  {name:<30} {band}{unit}")
    return "\n" + "\n".join(lines)


def _load(config: str, n_requests: int | None, output: str | None = None,
          price_basis: str | None = None, power_basis: str | None = None, engine=None):
    import dataclasses

    from ..factory.config import load_config, with_engine, with_price_basis

    if output:
        check_target(output)        # a bad --output fails before the simulation runs
    cfg = with_engine(with_price_basis(load_config(config), price_basis, power_basis), engine)
    if n_requests is None:
        return cfg
    if cfg.trace_path:   # a loaded trace: keep its first n requests
        change = dict(trace_head=n_requests)
    else:
        change = dict(workload=dataclasses.replace(cfg.workload, n_requests=n_requests))
    cfg = dataclasses.replace(cfg, **change)
    if cfg.baseline is not None:
        cfg = dataclasses.replace(cfg, baseline=dataclasses.replace(cfg.baseline, **change))
    return cfg
