"""Click commands of the factory layer: ``compare`` and ``simulate`` (thin; no formulas)."""

from __future__ import annotations

import click

from .._io import write_text_atomic
from .compare import compare, format_compare, format_simulate, simulate_one, to_json
from .config import load_config


def _emit(result: dict, as_json: bool, output: str | None, text: str) -> None:
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
@click.option("--requests", "n_requests", type=click.IntRange(min=1), default=None,
              help="Override workload.n_requests.")
def compare_cmd(config: str, as_json: bool, output: str | None, no_attribution: bool,
                n_requests: int | None) -> None:
    """Run the baseline and the factory on one deterministic trace, side by side."""
    cfg = _load(config, n_requests)
    result = compare(cfg, attribution=not no_attribution)
    _emit(result, as_json, output, format_compare(result))


@click.command("simulate")
@click.option("--config", "-c", "config", required=True, type=click.Path(dir_okay=False),
              help="Scenario config TOML.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
@click.option("--output", "-o", default=None, help="Also write the JSON result to this file.")
@click.option("--requests", "n_requests", type=click.IntRange(min=1), default=None,
              help="Override workload.n_requests.")
def simulate_cmd(config: str, as_json: bool, output: str | None, n_requests: int | None) -> None:
    """Run one scenario on its trace."""
    cfg = _load(config, n_requests)
    result = simulate_one(cfg)
    _emit(result, as_json, output, format_simulate(result))


def _load(config: str, n_requests: int | None):
    import dataclasses

    cfg = load_config(config)
    if n_requests is not None:
        cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload,
                                                                    n_requests=n_requests))
        if cfg.baseline is not None:
            cfg = dataclasses.replace(cfg, baseline=dataclasses.replace(
                cfg.baseline, workload=cfg.workload))
    return cfg
