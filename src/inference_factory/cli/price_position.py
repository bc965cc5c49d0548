"""The ``price-by-position`` command (thin: parse, call
:func:`inference_factory.analysis.price_by_position.price_by_position`, print): cost per
million tokens by token position, prefill and decode, with the split by operation group, for
one or more models on one or more devices; where the indexer starts to dominate."""

from __future__ import annotations

import math
from typing import Any, Sequence

import click

from . import params as p
from ..errors import SpecError
from ..output.tables import chosen_format
from ..specs.hardware import DEFAULT_HARDWARE
from .question_options import _emit, _names, _table_options, check_shapes

#: Engine axes the command's operating-point rules set themselves (not given with --axis).
_RULED = {"batch_size": "--decode-batch / --max-decode-batch",
          "kv_len": "--positions", "prompt_len": "--positions",
          "cache_hit_rate": "the marginal-prefill rule (--prefill-chunk)",
          "prefill_batch_size": "the marginal-prefill rule (one prompt per rank)",
          "tp": "--parallelism", "dp": "--parallelism", "ep": "--parallelism"}

#: Short headers of the human table (csv and JSON keep the API names).
LABELS = {"usd_per_mtok": "$/Mtok", "vs_first": "vs first",
          "tokens_per_step": "batch|chunk", "prefill_mean_usd_per_mtok": "mean prompt $/Mtok"}


def _positions(ctx, param, value):
    from ..specs import grammar as g

    try:
        return [float(x) for x in g.parse_values(value, "--positions")]
    except SpecError as exc:
        raise click.UsageError(str(exc), ctx) from None


def _dominance_text(dom) -> str:
    def k(x):
        return "beyond the grid" if not math.isfinite(x) else f"{x / 1024:.3g}K"
    lines = ["", "where the indexer starts to dominate (first grid L; interpolated on log L):"]
    for r in dom.itertuples():
        lines.append(f"  {r.model} on {r.hardware}, {r.phase}: over its core at "
                     f"{k(r.over_core)} (~{k(r.over_core_interp)}), over all other attention "
                     f"at {k(r.over_attention)} (~{k(r.over_attention_interp)})")
    from ..output.tables import fit_lines

    return fit_lines("\n".join(lines))


@click.command("price-by-position")
@click.option("--model", "-m", "models", multiple=True,
              help="Models to compare, comma-separated or repeated; the first is the "
                   "reference of 'vs first' (default DeepSeek-V3.1,DeepSeek-V3.2).")
@click.option("--hardware", "-H", "hardware", multiple=True,
              help=f"Devices, comma-separated or repeated (default {DEFAULT_HARDWARE}).")
@click.option("--parallelism", "-p", type=p.ShapeParam(), default="dp=16,ep=16",
              show_default=True, help="The instance shape, e.g. dp=16,ep=16 or tp=8.")
@click.option("--positions", default="1024,2048,4096,...,131072", show_default=True,
              callback=_positions, metavar="VALUES",
              help="Token positions L (range grammar).")
@click.option("--price-per-gpu-hour", type=click.FloatRange(min=0, min_open=True),
              default=None, help="All-in $ per GPU-hour (default: the price basis's rate).")
@click.option("--cost-basis", type=click.Choice(["rental", "tco"]), default=None,
              help="How a GPU-hour is charged (default rental).")
@p.price_basis_options
@p.engine_option(note="Sets the decode batch cap (running requests per rank) and the "
                      "prefill chunk (prompt tokens per pass per rank).")
@click.option("--decode-batch", type=click.IntRange(min=1), default=None,
              help="Fixed decode batch per attention-DP rank (default: the largest that "
                   "fits at L, capped by the engine's running requests per rank).")
@click.option("--max-decode-batch", type=click.IntRange(min=1), default=None,
              help="Cap of the fitted decode batch per rank (default: the engine's).")
@click.option("--prefill-chunk", type=click.IntRange(min=1), default=None,
              help="Tokens of the marginal prefill chunk (default: the engine's prompt "
                   "tokens per pass per rank).")
@click.option("--axis", "-a", "axes", multiple=True, type=p.AxisParam(),
              callback=p.collect_axes,
              help="Other engine choices, one value each, e.g. -a kv_precision=fp8 "
                   "-a overlap=two-batch.")
@click.option("--realism", type=click.Choice(["measured", "roofline"]), default="measured",
              show_default=True, help="Measured kernel tables where they cover an op, or the "
                                      "realistic roofline throughout.")
@click.option("--plot", "plot_path", default=None, metavar="FILE",
              help="Also draw the cost curves and the stacked split (.png/.svg/.pdf).")
@_table_options
def price_by_position_cmd(models: Sequence[str], hardware: Sequence[str], parallelism: dict,
                          positions: list, price_per_gpu_hour: float | None,
                          cost_basis: str | None, price_basis: str | None,
                          power_basis: str | None, engine, decode_batch: int | None,
                          max_decode_batch: int | None, prefill_chunk: int | None,
                          axes: dict, realism: str, plot_path: str | None, fmt: str | None,
                          as_json: bool, output: str | None) -> None:
    """Cost per million tokens by token position, prefill and decode, with the bytes, FLOPs
    and $ split by operation group that explain the gap between models (issue 28: the
    explained price cut), and where the indexer starts to dominate.

    Prefill: the marginal cost of a token at position L (a chunk computed after L cached
    tokens). Decode: a token at context L, batch per rank = min(engine cap, largest that
    fits). Every sequence at context L (context_cv 0).
    """
    from ..analysis.price_by_position import indexer_dominance, price_by_position, price_table
    from ..analysis.questions import cost_model

    fmt = chosen_format(fmt, as_json)
    names = _names(models) or ["DeepSeek-V3.1", "DeepSeek-V3.2"]
    hws = _names(hardware) or [DEFAULT_HARDWARE]
    choices: dict[str, Any] = {}
    for k, v in axes.items():
        if k in _RULED:
            raise SpecError(f"--axis {k}: set by {_RULED[k]}, not --axis")
        if len(v) != 1:
            raise SpecError(f"--axis {k}: give one value (the grid is the positions)")
        choices[k] = v[0]
    for m in names:
        check_shapes(m, hws, {}, [parallelism])
    cost = cost_model(**{k: v for k, v in (("cost_basis", cost_basis),
                                           ("price_basis", price_basis),
                                           ("power_basis", power_basis),
                                           ("rental_usd_per_gpu_hour", price_per_gpu_hour))
                         if v is not None})
    if price_per_gpu_hour is not None and cost.cost_basis != "rental":
        raise SpecError("--price-per-gpu-hour is a rental rate; drop --cost-basis tco")
    ds = price_by_position(names, hws, positions=positions, parallelism=parallelism,
                           cost=cost, engine=engine, decode_batch=decode_batch,
                           max_decode_batch=max_decode_batch, prefill_chunk=prefill_chunk,
                           realism=realism, **choices)
    df = price_table(ds)
    dom = indexer_dominance(ds)
    a = ds.attrs
    title = (f"{', '.join(names)} on {', '.join(ds.hardware.values)}, {a['parallelism']}; "
             f"{a['cost_basis']} cost, price basis {a['price_basis']}")
    header = "\n".join([title, f"prefill: {a['prefill_rule']}", f"decode: {a['decode_rule']}",
                        f"engine choices: {a['choices']}; $ split: {a['split']}"])
    if fmt in ("table", "markdown"):
        shown = df[[c for c in df.columns if not c.startswith(("bytes_", "flop_"))]]
        shown.attrs = df.attrs
        _emit(shown, fmt, header, output=None, keep=["phase", "position", "model"],
              labels=LABELS)
        if not dom.empty:
            click.echo(_dominance_text(dom))
        if output is not None:
            from ..output.files import write_text_atomic
            from ..output.tables import render

            write_text_atomic(output, render(df, fmt, header=header) + "\n"
                              + (_dominance_text(dom) + "\n" if not dom.empty else ""))
    else:
        extra = {"indexer_dominance": dom.to_dict(orient="records")} if fmt == "json" else None
        _emit(df, fmt, header, extra=extra, output=output)
    if plot_path is not None:
        from ..output.price_plot import plot_price_by_position

        plot_price_by_position(df, plot_path, title=title)
