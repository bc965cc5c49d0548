"""Click commands for :mod:`inference_factory.analysis.questions` (thin: parse, call, print).

``best-draft``, ``max-batch``, ``cheapest``, ``pareto``, ``tornado`` and ``montecarlo``; each
prints a table, or with ``--json`` one JSON object. Registered on the root group at the bottom
of :mod:`inference_factory.cli`, whose ``main`` turns a SpecError into one stderr line and
exit status 2.

The shared option groups and parsing live in :mod:`.question_options`.
"""

from __future__ import annotations

from typing import Any, Sequence

import click

from . import params as p
from ..errors import SpecError
from ..output.tables import chosen_format
from .params import cost_words
from ..specs.hardware import DEFAULT_HARDWARE
from .question_options import (_as_kwargs, _economics_options, _emit,
                               _engine_kwargs, _engine_options, _names, _one, _pick, _slo,
                               _slo_options, _split_economics, _table_options, _tidy, _title,
                               _values_option, check_draft_model, check_shapes)


@click.command("best-draft")
@_engine_options
@_values_option("batch_size", "1,2,4,...,256", "Batch sizes (sequences per attention-DP rank)")
@_values_option("draft_depth", "0..4", "Draft depths to compare")
@click.option("--metric", type=click.Choice(["decode_tokens_per_s_per_gpu",
                                             "decode_tokens_per_s_per_user"]),
              default="decode_tokens_per_s_per_gpu", show_default=True, help="What to maximise.")
@click.option("--all", "include_unfit", is_flag=True,
              help="Also consider depths whose batch does not fit in HBM.")
@_table_options
def best_draft_cmd(model: str, hardware: Sequence[str], axes: dict, draft_model: str | None,
                   batch_size, draft_depth, metric: str, include_unfit: bool,
                   fmt: str | None, as_json: bool, output: str | None) -> None:
    """Best speculative draft depth per batch size (and any other axis given as a list)."""
    from ..analysis import questions as q

    fmt = chosen_format(fmt, as_json)
    batch = _pick("batch_size", batch_size, axes, "1,2,4,...,256")
    depth = _pick("draft_depth", draft_depth, axes, "0..4")
    hw, kw = _engine_kwargs(model, hardware, axes, draft_model)
    ds = q.best_draft_depth(model, hw, batch_size=batch, draft_depth=depth, metric=metric,
                            only_fitting=not include_unfit, **kw)
    df = _tidy(ds, ["best_draft_depth", f"best_{metric}", "best_decode_tokens_per_s_per_gpu",
                    "best_decode_tokens_per_s_per_user", "best_tpot_s", "speedup_over_no_draft"])
    _emit(df, fmt, f"{_title(model, hw)}: {ds.attrs['question']}", output=output)


@click.command("max-batch")
@_engine_options
@_slo_options
@click.option("--max-batch", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Top of the search grid.")
@click.option("--no-refine", is_flag=True, help="Answer on the geometric grid only.")
@_table_options
def max_batch_cmd(model: str, hardware: Sequence[str], axes: dict, draft_model: str | None,
                  max_batch: int, no_refine: bool, fmt: str | None, as_json: bool,
                  output: str | None, **options: Any) -> None:
    """Largest decode batch that fits and meets the TPOT / per-user SLOs (and largest prefill
    batch meeting a TTFT SLO)."""
    from ..analysis import questions as q

    fmt = chosen_format(fmt, as_json)
    slo = _slo(options)
    searched = "max-batch searches it; bound the search with --max-batch"
    hw, kw = _engine_kwargs(model, hardware, axes, draft_model,
                            forbid={"batch_size": searched, "prefill_batch_size": searched})
    ds = q.max_batch_meeting_slo(model, hw, **slo, max_batch=max_batch, refine=not no_refine,
                                 **kw)
    cols = ["max_batch_size_meeting_slo", "slo_binding_constraint", "tpot_s",
            "decode_tokens_per_s_per_user", "decode_tokens_per_s_per_gpu",
            "max_prefill_batch_size_meeting_slo", "prefill_slo_binding_constraint", "ttft_s",
            "prefill_tokens_per_s_per_gpu"]
    _emit(_tidy(ds, cols), fmt, f"{_title(model, hw)}; SLO: {ds.attrs['slo']}", output=output,
          keep=[*ds.dims, "max_batch_size_meeting_slo"], labels=MAX_BATCH_LABELS)


#: Short headers of the max-batch table (csv and JSON keep the API names).
MAX_BATCH_LABELS = {"max_batch_size_meeting_slo": "max batch",
                    "slo_binding_constraint": "binds",
                    "max_prefill_batch_size_meeting_slo": "max prefill batch",
                    "prefill_slo_binding_constraint": "prefill binds"}


#: Columns cheapest prints as a table (every column goes to csv/json).
_CHEAPEST_TABLE = ("rank", "hardware", "tp", "dp", "ep", "n_gpus", "batch_size")


@click.command("cheapest")
@_engine_options
@click.option("--parallelism", "-p", multiple=True, type=p.ShapeParam(),
              help="An instance shape to try (repeat for several), e.g. -p tp=8 -p dp=8,ep=8. "
                   "Default: every power-of-two tp and dp x ep shape up to one node.")
@click.option("--option", "choices", multiple=True, type=p.AxisParam(), callback=p.collect_axes,
              hidden=True, help="Old spelling of a structural list in --axis.")
@_slo_options
@click.option("--metric", type=click.Choice(["usd_per_mtok_output", "usd_per_mtok_input",
                                             "usd_per_mtok_blended"]),
              default="usd_per_mtok_output", show_default=True, help="What to minimise.")
@_economics_options
@_table_options
def cheapest_cmd(model: str, hardware: Sequence[str], axes: dict, draft_model: str | None,
                 parallelism: Sequence[dict], choices: dict, metric: str, fmt: str | None,
                 as_json: bool, output: str | None, **options: Any) -> None:
    """Rank hardware x parallelism x options by $/M tokens among those meeting the SLOs.

    A structural axis given as a list (-a kv_precision=bf16,fp8) is crossed as a choice.
    """
    from ..analysis import questions as q
    from ..axes import STRUCT_AXES

    fmt = chosen_format(fmt, as_json)
    slo = _slo(options)
    econ, _ = _split_economics(options, model)
    for k in choices:
        if k in axes:
            raise SpecError(f"{k} is given twice: --axis and --option; give it once")
    axes = {**axes, **choices}
    crossed = {k: list(v) for k, v in axes.items() if k in STRUCT_AXES and len(v) > 1}
    listed = [k for k, v in axes.items() if k not in STRUCT_AXES and len(v) > 1]
    if listed:
        raise SpecError(f"--axis {listed[0]}: cheapest picks one operating point per choice; "
                        f"give {listed[0]} one value (batch sizes are searched)")
    fixed = {k: v for k, v in axes.items() if k not in crossed}
    hws = _names(hardware) or [DEFAULT_HARDWARE]
    given = {**fixed, **{k: tuple(v) for k, v in crossed.items()}}
    if parallelism:
        shapes = [dict(p) for p in parallelism]
        for p in shapes:
            for k in p:
                if k in axes:
                    raise SpecError(f"{k} is given twice: --parallelism and --axis; give it once")
        check_shapes(model, hws, given, shapes)
    else:
        from ..specs import load_hardware, load_model
        check_shapes(model, hws, given)
        if any(k in fixed for k in ("tp", "dp", "ep")):
            shapes = [{}]
        else:   # searched shapes the engine refuses are reported as rows, not errors
            shapes = default_shapes(load_model(model), [load_hardware(h) for h in hws])
    kw = _as_kwargs(fixed)
    if draft_model:
        kw["draft_model"] = check_draft_model(draft_model)
    df = q.cheapest_meeting_slo(model, _one(hws), parallelism=shapes, options=crossed or None,
                                **slo, metric=metric, **econ, **kw)
    header = (f"{_title(model, _one(hws))}: {df.attrs.get('metric')} "
              f"({cost_words(df.attrs)}"
              f"{', price ' + df.attrs['price'] if df.attrs.get('price') else ''}); "
              f"SLO: {df.attrs.get('slo') or 'none'}")
    if fmt in ("table", "markdown"):
        keep = [c for c in _CHEAPEST_TABLE if c in df] + list(crossed) + [
            c for c in (metric, "decode_tokens_per_s_per_gpu", "decode_tokens_per_s_per_user",
                        "tpot_s", "ttft_s", "gross_margin_frac", "reason") if c in df]
        attrs = dict(df.attrs)
        df = df[list(dict.fromkeys(keep))]
        df.attrs = attrs
    _emit(df, fmt, header, output=output, keep=[*_CHEAPEST_TABLE, *crossed, metric])


def default_shapes(model, hardware) -> list[dict[str, int]]:
    """Instance shapes ``cheapest`` tries when none is given: tp = 1, 2, 4, 8 for a dense
    model; for a MoE model also attention-DP x EP (dp = ep = 2..8) within one node."""
    from ..engine import architecture

    node = min(h.gpus_per_node for h in hardware)
    sizes = [n for n in (1, 2, 4, 8, 16) if n <= node]
    tps = [n for n in sizes if architecture(model).tp_error(n) is None]   # whole heads
    shapes: list[dict[str, int]] = [{"tp": n} for n in tps]
    if model.is_moe:
        shapes += [{"tp": n, "ep": n} for n in tps if n > 1]
        shapes += [{"dp": n, "ep": n} for n in sizes if n > 1]
    return shapes


@click.command("pareto")
@_engine_options
@click.option("--x-var", "--x", "x", default="decode_tokens_per_s_per_user", show_default=True,
              metavar="VARIABLE", help="Variable on the x axis (maximised).")
@click.option("--y-var", "--y", "y", default="decode_tokens_per_s_per_gpu", show_default=True,
              metavar="VARIABLE", help="Variable on the y axis (maximised).")
@click.option("--all", "include_unfit", is_flag=True, help="Keep points that do not fit in HBM.")
@_table_options
def pareto_cmd(model: str, hardware: Sequence[str], axes: dict, draft_model: str | None,
               x: str, y: str, include_unfit: bool, fmt: str | None, as_json: bool,
               output: str | None) -> None:
    """Pareto front of tokens/s per GPU against tokens/s per user over the grid given with
    -a (e.g. -a batch_size=1,8,64,256 -a draft_depth=0,1,2)."""
    from ..analysis import questions as q
    from ..engine import evaluate

    fmt = chosen_format(fmt, as_json)
    hw, kw = _engine_kwargs(model, hardware, axes, draft_model)
    ds = evaluate(model, hw, **kw)
    front = q.pareto_front(ds, x=x, y=y, only_fitting=not include_unfit)
    dims = [d for d in ds.dims]
    df = front[[c for c in dims if c in front] + [x, y]]
    df.attrs = dict(front.attrs)
    _emit(df, fmt, f"{_title(model, hw)}: {front.attrs.get('pareto', '')}", output=output)


@click.command("tornado")
@_engine_options
@click.option("--range", "-r", "ranges", multiple=True, type=p.DistributionParam(False),
              callback=p.collect_axes,
              help="A lever or assumption and its low and high values (repeat), e.g. "
                   "-r acceptance_rate=0.6,0.9 -r usd_per_kwh=0.05,0.15 -r kv_precision=bf16,fp8.")
@click.option("--metric", "metrics", multiple=True,
              help="Result variable (repeat); default usd_per_mtok_blended and, with --price, "
                   "gross_margin_frac.")
@_economics_options
@_table_options
def tornado_cmd(model: str, hardware: Sequence[str], axes: dict, draft_model: str | None,
                ranges: dict, metrics: Sequence[str], fmt: str | None, as_json: bool,
                output: str | None, **options: Any) -> None:
    """One-at-a-time sensitivity of $/M tokens and margin, sorted by swing."""
    from ..analysis import questions as q

    fmt = chosen_format(fmt, as_json)
    if not ranges:
        raise SpecError("give at least one --range NAME=LOW,HIGH")
    econ, _ = _split_economics(options, model)
    hw, kw = _engine_kwargs(model, hardware, axes, draft_model, single=True)
    df = q.tornado(model, hw, ranges, metrics=list(metrics) or None, **econ, **kw)
    base = df.attrs["base"]
    labels = tornado_labels(df.columns)
    if fmt in ("table", "markdown"):      # the swing first: the column the table is sorted by
        attrs = dict(df.attrs)
        first = ["parameter", "kind", "base", "low", "high"]
        swings = [c for c in df.columns if c.endswith("_swing")]
        rest = [c for c in df.columns if c not in first and c not in swings]
        df = df[[c for c in first if c in df] + swings
                + [c for c in rest if not c.startswith("fits_")]
                + [c for c in rest if c.startswith("fits_")]]
        df.attrs = attrs
    _emit(df, fmt,
          f"{df.attrs['model']} on {df.attrs['hardware']} ({cost_words(df.attrs)}"
          f"{', price ' + df.attrs['price'] if df.attrs['price'] else ''}); at the operating "
          f"point: " + ", ".join(_point(k, v) for k, v in base.items()), output=output,
          keep=["parameter"], labels=labels)


def _point(name: str, value: float) -> str:
    """'gross margin 65.3 %', 'usd_per_mtok_blended = 0.1559' (a header's operating point)."""
    if name.endswith("_frac"):
        return f"{name[:-5]} = {value * 100:.3g} %"
    if name.startswith("usd_per_mtok_"):
        return f"$/Mtok {name[len('usd_per_mtok_'):]} = {value:.4g}"
    return f"{name} = {value:.4g}"


def tornado_labels(columns) -> dict[str, str]:
    """Table headers of a tornado's metric columns: ``gross_margin_frac_low`` becomes
    ``gross_margin_low_frac`` so that the table shows it in % (13.6, not 0.1362); dollar and
    rate columns keep their names (the renderer adds $/Mtok, tok/s)."""
    out = {}
    for c in columns:
        for end in ("_low", "_high", "_swing", "_base"):
            if c.endswith(end) and c[:-len(end)].endswith("_frac"):
                out[c] = f"{c[:-len(end)][:-5]}{end}_frac"
    return out


@click.command("montecarlo")
@_engine_options
@click.option("--range", "-r", "ranges", multiple=True, type=p.DistributionParam(True),
              callback=p.collect_axes,
              help="Uniform NAME=LOW,HIGH or triangular NAME=tri:LOW:MODE:HIGH (repeat).")
@click.option("--n", "n", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Samples.")
@click.option("--seed", type=click.INT, default=0, show_default=True, help="Random seed.")
@click.option("--method", type=click.Choice(["lhs", "random"]), default="lhs", show_default=True,
              help="Latin hypercube or plain random sampling.")
@click.option("--metric", "metrics", multiple=True,
              help="Result variable (repeat); default $/M output, $/M blended and, with "
                   "--price, gross_margin_frac.")
@_economics_options
@_table_options
def montecarlo_cmd(model: str, hardware: Sequence[str], axes: dict, draft_model: str | None,
                   ranges: dict, n: int, seed: int, method: str, metrics: Sequence[str],
                   fmt: str | None, as_json: bool, output: str | None, **options: Any) -> None:
    """Distribution (percentiles) of $/M tokens and margin over assumption ranges."""
    from ..analysis import questions as q

    fmt = chosen_format(fmt, as_json)
    if not ranges:
        raise SpecError("give at least one --range NAME=LOW,HIGH or NAME=tri:LOW:MODE:HIGH")
    econ, _ = _split_economics(options, model)
    hw, kw = _engine_kwargs(model, hardware, axes, draft_model, single=True)
    res = q.monte_carlo(model, hw, ranges, n=n, seed=seed, method=method,
                        metrics=list(metrics) or None, **econ, **kw)
    df = res.summary.reset_index()
    df.attrs = dict(res.summary.attrs)
    _emit(df, fmt, f"{df.attrs['model']} on {df.attrs['hardware']} ({cost_words(df.attrs)}): "
                   f"{n} samples ({method}, seed {seed}) of {df.attrs['ranges']}; statistics "
                   "over samples that fit",
          output=output)


COMMANDS = (best_draft_cmd, max_batch_cmd, cheapest_cmd, pareto_cmd, tornado_cmd, montecarlo_cmd)
