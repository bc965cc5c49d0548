"""``inference-factory sweep``: evaluate a grid of named axes and write it (and/or plot it).

Thin: options become a :class:`~inference_factory.analysis.sweep.SweepSpec`; the library
evaluates (:func:`~inference_factory.analysis.sweep.run_sweep`), writes
(:func:`~inference_factory.analysis.sweep.write_result`) and draws (:func:`~inference_factory.sweep_plot.plot_sweep`). Every bad input is a
:class:`~inference_factory.SpecError`, which the root group prints as one line with exit
status 2; all checks run before anything is written, so a bad sweep leaves no file.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from typing import Any

import click

from ..axes import COST_BASES, DEFAULT_CHUNK_POINTS
from ..axes import SWEEP_FORMATS as FORMATS
from ..errors import SpecError
from ..output.tables import fit_lines
from ..bounds import MAX_SWEEP_POINTS
from ..specs.grammar import ENGINE_AXES
from .params import AxisParam, collect_axes, engine_option, price_basis_options

#: Grids up to this many points are evaluated in memory unless --chunk-size is given.
AUTO_CHUNK_POINTS = 2_000_000


def _names(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated and comma-separated names, in order."""
    return tuple(n.strip() for v in values for n in v.split(",") if n.strip())


def build_spec(config: str | None, models: tuple[str, ...], hardware: tuple[str, ...],
               axes: tuple[str, ...], settings: tuple[str, ...], *, ideal: bool,
               draft_model: str | None, price: str | None, cost_basis: str | None,
               price_basis: str | None = None, power_basis: str | None = None,
               engine=None):
    """The sweep described by a sweep file and/or command-line options (options win)."""
    from ..analysis.economics import CostModel
    from ..analysis.sweep import SweepSpec, load_sweep_file, parse_axis, parse_setting

    models, hardware = _names(models), _names(hardware)
    if config is not None:
        spec = load_sweep_file(config)
        if models:
            spec = spec.with_axis("model", models)
        if hardware:
            spec = spec.with_axis("hardware", hardware)
    else:
        if not models or not hardware:
            raise SpecError("give a sweep file (--config FILE.toml) or both --model and "
                            "--hardware")
        spec = SweepSpec(models=models, hardware=hardware)
    for name, values in _parsed(axes, "--axis", parse_axis).items():
        spec = spec.with_axis(name, values)
    for name, value in _parsed(settings, "--set", parse_setting).items():
        if name in axes if isinstance(axes, dict) else False:
            raise SpecError(f"{name} is given twice: --axis and --set; give it once")
        spec = spec.with_fixed(name, value)
    changes: dict[str, Any] = {}
    if ideal:
        changes["ideal"] = True
    if draft_model is not None:
        changes["draft_model"] = draft_model
    if price is not None:
        changes["price"] = price
    if engine is not None:   # a name or a resolved profile (--engine)
        from ..specs.engines import resolve_serving_engine
        changes["engine"] = resolve_serving_engine(engine, "--engine").name
    given = {k: v for k, v in (("cost_basis", cost_basis), ("price_basis", price_basis),
                               ("power_basis", power_basis)) if v is not None}
    if given:
        changes["cost"] = replace(spec.cost or CostModel(), **given)
    return replace(spec, **changes) if changes else spec


def _parsed(items, option: str, parse) -> dict[str, Any]:
    """``--axis`` / ``--set`` values: already parsed by the option grammar (a dict), or
    strings (library callers); numeric axes as floats, as in sweep files."""
    from ..analysis.sweep import coerce_values

    if isinstance(items, dict):
        return {k: (coerce_values(k, v, f"{option} {k}") if isinstance(v, tuple)
                    else coerce_values(k, (v,), f"{option} {k}")[0]) for k, v in items.items()}
    out: dict[str, Any] = {}
    for text in items:
        name, value = parse(text)
        if name in out:
            raise SpecError(f"{option} {name} is given twice; give each axis once")
        out[name] = value
    return out


def _shape(ds) -> str:
    dims = " x ".join(f"{d} {n}" for d, n in ds.sizes.items())
    n = 1
    for v in ds.sizes.values():
        n *= v
    return f"{n:,} point{'s' if n != 1 else ''}" + (f" ({dims})" if dims else "")


@click.command("sweep")
@click.option("--config", "-c", metavar="FILE.toml",
              help="Sweep file (e.g. configs/sweeps/decode_grid.toml); options below override it.")
@click.option("--model", "-m", "models", multiple=True, metavar="NAME[,NAME...]",
              help="Model(s); repeat or comma-separate. Several add a 'model' dimension.")
@click.option("--hardware", "-H", "hardware", multiple=True, metavar="NAME[,NAME...]",
              help="Hardware; repeat or comma-separate. Several add a 'hardware' dimension.")
@click.option("--axis", "-a", "axes", multiple=True, callback=collect_axes,
              type=AxisParam(("model", "hardware", *ENGINE_AXES)),
              help="A swept axis (repeatable): 1,2,4 | 1,2,4,...,1024 | 0:0.95:20 (n points) "
                   "| geom:1:1024:11 | 0..4 | bf16,fp8.")
@click.option("--set", "-s", "settings", multiple=True, callback=collect_axes,
              type=AxisParam(ENGINE_AXES, lists=False),
              help="Hold an axis at one value (repeatable), e.g. --set kv_len=4096 --set dp=32.")
@click.option("--draft-model", default=None, help="Separate draft model for draft_depth > 0.")
@click.option("--ideal", is_flag=True, help="Pure roofline: realism terms off.")
@engine_option(note="Named in the result's attrs; the per-step engine a sweep evaluates "
                    "uses none of its settings (bench and plan do).")
@click.option("--price", default=None, metavar="ID",
              help="Price id of configs/prices.toml: adds revenue, margin and payback.")
@price_basis_options
@click.option("--cost-basis", type=click.Choice(COST_BASES), default=None,
              help="How a GPU-hour is charged (adds $/Mtok; default rental with --price).")
@click.option("--output", "-o", default=None, metavar="FILE",
              help=f"Result file; the suffix picks the format: {', '.join(FORMATS)}.")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png",
              help="Draw --var over --x (heatmap with --y; one subplot per --facet value).")
@click.option("--x", "x", default=None, metavar="DIM", help="Plot: dimension on the x axis.")
@click.option("--y", "y", default=None, metavar="DIM", help="Plot: dimension on the y axis "
              "(heatmap); without it, one line per value of the remaining dimension.")
@click.option("--var", "var", default=None, metavar="VARIABLE",
              help="Plot: the variable, e.g. decode_tokens_per_s_per_gpu.")
@click.option("--facet", default=None, metavar="DIM", help="Plot: one subplot per value.")
@click.option("--size", default="8x5", show_default=True, metavar="WxH",
              help="Plot: figure size in inches.")
@click.option("--dpi", type=click.IntRange(10, 600), default=100, show_default=True,
              help="Plot: pixels per inch (the PNG is size x dpi pixels).")
@click.option("--logx/--linx", "logx", default=None,
              help="Plot: log (or linear) x axis (default: log where the values are geometric).")
@click.option("--logy/--liny", "logy", default=None,
              help="Plot: log (or linear) y axis of a heatmap (default as --logx).")
@click.option("--log-color", is_flag=True,
              help="Plot: log colour scale (heatmap) or log value axis (line plot).")
@click.option("--chunk-size", type=click.IntRange(min=0), default=None, metavar="N",
              help=f"Evaluate in blocks of at most N points with dask (bounded memory). Default: "
                   f"in memory up to {AUTO_CHUNK_POINTS:,} points, else blocks of "
                   f"{DEFAULT_CHUNK_POINTS:,}; 0: never chunk.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="dask.distributed scheduler (e.g. tcp://10.0.0.1:8786); workers write the "
                   "output, so its folder must be on a filesystem they share.")
@click.option("--max-points", type=click.IntRange(min=1), default=MAX_SWEEP_POINTS,
              show_default=True, metavar="N",
              help="Refuse a grid of more points (a guard against a typo that would run for "
                   "days); raise it to run a larger sweep.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary line.")
def sweep_cmd(config: str | None, models: tuple[str, ...], hardware: tuple[str, ...],
              axes: tuple[str, ...], settings: tuple[str, ...], draft_model: str | None,
              ideal: bool, engine, price: str | None, cost_basis: str | None,
              price_basis: str | None, power_basis: str | None, output: str | None,
              plot_path: str | None, x: str | None, y: str | None, var: str | None,
              facet: str | None, size: str, dpi: int, logx: bool | None, logy: bool | None,
              log_color: bool, chunk_size: int | None,
              scheduler: str | None, max_points: int, quiet: bool) -> None:
    """Evaluate a grid of named axes; write it (.nc, .zarr, .csv, .parquet) and/or plot it.

    \b
    inference-factory sweep --config configs/sweeps/decode_grid.toml -o grid.nc
    inference-factory sweep -m DeepSeek-V3 -H H800-SXM --set dp=32 --set ep=32 \\
        --axis batch_size=1,2,4,...,256 --axis draft_depth=0..3 -o grid.parquet \\
        --plot grid.png --x batch_size --y draft_depth --var decode_tokens_per_s_per_gpu
    """
    from ..analysis.sweep import check_size, dask_scheduler, output_format, run_sweep, write_result
    from ..output.sweep_plot import check_plot, parse_size, plot_sweep

    t0 = time.perf_counter()
    spec = build_spec(config, models, hardware, axes, settings, ideal=ideal,
                      draft_model=draft_model, price=price, cost_basis=cost_basis,
                      price_basis=price_basis, power_basis=power_basis, engine=engine)
    check_size(spec, max_points)
    if output is None and plot_path is None:
        raise SpecError(f"nothing to write: give --output FILE ({', '.join(FORMATS)}) "
                        "and/or --plot FILE.png")
    if output is not None:
        output_format(output)
    if plot_path is not None:
        size_in = parse_size(size)
        if x is None or var is None:
            raise SpecError(f"--plot {plot_path} needs --x DIMENSION and --var VARIABLE "
                            "(and --y for a heatmap)")
    elif any(v is not None for v in (x, y, var, facet, logx, logy)) or log_color:
        raise SpecError("--x, --y, --var, --facet and the log options describe a plot: give "
                        "--plot FILE.png")
    if output is not None and plot_path is not None and \
            os.path.abspath(output) == os.path.abspath(plot_path):
        raise SpecError(f"--output and --plot are the same file {output!r}")

    if chunk_size == 0:
        if scheduler is not None:
            raise SpecError("--scheduler runs blocks on a cluster: give --chunk-size N > 0")
        chunks = None
    elif chunk_size is not None:
        chunks = chunk_size
    elif scheduler is not None or spec.n_points > AUTO_CHUNK_POINTS:
        chunks = DEFAULT_CHUNK_POINTS
    else:
        chunks = None
    progress = not quiet and sys.stderr.isatty()

    with dask_scheduler(scheduler) as client:
        ds = run_sweep(spec, chunks=chunks, lazy=True, max_points=max_points)
        if plot_path is not None:
            check_plot(ds, plot_path, x=x, var=var, y=y, facet=facet)
        if output is not None:
            write_result(ds, output, scheduler=client, progress=progress)
            if not quiet:
                click.echo(fit_lines(f"wrote {output}: {_shape(ds)}, {len(ds.data_vars)} "
                                     f"variables, in {time.perf_counter() - t0:.1f} s"))
        if plot_path is not None:
            assert x is not None and var is not None
            plot_sweep(ds, plot_path, x=x, var=var, y=y, facet=facet, size=size_in, dpi=dpi,
                       logx=logx, logy=logy, log_color=log_color)
            if not quiet:
                click.echo(fit_lines(f"wrote {plot_path}: {var} over {x}"
                                     + (f" x {y}" if y else "") + (f" by {facet}" if facet else "")
                                     + f" ({round(size_in[0] * dpi)}x{round(size_in[1] * dpi)} px)"))
        if "payback_months" in ds.attrs and not quiet:
            click.echo(fit_lines(f"note: {ds.attrs['payback_months']}"))
