"""Shared parsing and click options of the question commands (:mod:`.questions`): name
lists, the engine/table/economics/SLO option groups, the kwargs they become, and the
parallelism-shape check that :mod:`.plan` also uses."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import click

from ..specs import grammar as g
from . import params as p
from ..errors import SpecError
from ..output.tables import TABLE_WIDTH, fit_lines, render
from .params import FiniteRange, format_option
from ..specs.hardware import DEFAULT_HARDWARE


# --------------------------------------------------------------------------------------------
# parsing (display and syntax only; the grammar lives in grammar.py)
# --------------------------------------------------------------------------------------------


def _names(items: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        out += [p.strip() for p in item.split(",") if p.strip()]
    return out


def _one(names: list[str]) -> Any:
    return names[0] if len(names) == 1 else names


def _as_kwargs(axes: dict[str, tuple]) -> dict[str, Any]:
    """Axis values as evaluate() keywords: one value is a scalar, several a list."""
    return {k: (list(v) if len(v) > 1 else v[0]) for k, v in axes.items()}


def _title(model: str, hardware: Any) -> str:
    """'DeepSeek-V3 on H800-SXM, B200' (the spec names, not the aliases typed)."""
    from ..specs import load_hardware, load_model

    hws = hardware if isinstance(hardware, list) else [hardware]
    return f"{load_model(model).name} on {', '.join(load_hardware(h).name for h in hws)}"


# --------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------


#: Terminal width tables are fitted to when the terminal does not say (``COLUMNS`` unset, output
#: not a terminal): the table width (:data:`..output.tables.TABLE_WIDTH`, 100 columns).
DEFAULT_WIDTH = TABLE_WIDTH


def _wide_callback(ctx, param, value):
    ctx.meta["inference_factory.wide"] = bool(value)
    return value


def terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def fit_columns(df, fmt: str, header: str = "", *, width: int | None = None,
                keep: Sequence[str] = (), labels: dict[str, str] | None = None,
                human: bool = False):
    """A human table (``table``/``markdown``) that fits ``width`` characters: its title
    wrapped (:func:`~inference_factory.output.tables.fit_lines`), columns renamed for people
    (``labels``: API name -> shown name, whose suffix ``_frac`` or ``_s``
    :func:`~inference_factory.output.tables.render` turns into % or ms), then dropped from the
    right, never those in ``keep`` (the identifying ones) or the first, until the table fits.
    ``human``: the headers a person reads (output.tables.human_header).
    Returns ``(text, hidden)``: the rendered table and the API names of the dropped columns."""
    width = width or terminal_width()
    labels = labels or {}
    attrs = dict(df.attrs)
    cols = list(df.columns)
    hidden: list[str] = []
    title = ((fit_lines(header, width) if fmt == "table" else f"**{header}**\n") + "\n"
             if header else "")
    while True:
        shown = df[cols].rename(columns=labels)
        shown.attrs = attrs
        text = render(shown, fmt, width=width, human=human)
        droppable = [c for c in cols[1:] if c not in keep]
        if max(len(x) for x in text.splitlines() or [""]) <= width or not droppable:
            return title + text, hidden
        hidden.insert(0, droppable[-1])
        cols.remove(droppable[-1])


def hidden_note(hidden: Sequence[str], width: int,
                where: str = "--wide shows every column, --format csv or --json every value"
                ) -> str:
    """The line under a table that :func:`fit_columns` narrowed, naming the dropped columns
    and ``where`` to get them ('' when none was dropped)."""
    import textwrap

    if not hidden:
        return ""
    note = (f"({len(hidden)} more column{'s' if len(hidden) > 1 else ''}: "
            f"{', '.join(hidden)}; {where})")
    return "\n" + textwrap.fill(note, width=width)


def _emit(df, fmt: str, header: str = "", extra: dict | None = None,
          output: str | None = None, *, keep: Sequence[str] = (),
          labels: dict[str, str] | None = None) -> None:
    """Print (and with ``--output`` write) ``df`` as ``fmt``. A human table fits the terminal
    (:func:`fit_columns`; a note names the hidden columns) unless ``--wide`` is given; a file
    and the machine formats carry every column under its API name."""
    full = render(df, fmt, header=header, extra=extra)
    text = full
    if fmt in ("table", "markdown"):
        ctx = click.get_current_context(silent=True)
        wide = bool(ctx and ctx.meta.get("inference_factory.wide"))
        if labels:
            shown = df.rename(columns=labels)
            shown.attrs = dict(df.attrs)
            text = full = render(shown, fmt, header=header)
        if not wide:
            text, hidden = fit_columns(df, fmt, header, keep=keep, labels=labels)
            text += hidden_note(hidden, terminal_width())
    if output is not None:
        from ..output.files import write_text_atomic

        write_text_atomic(output, full + "\n")
    click.echo(text)


def _tidy(ds, cols: Sequence[str]):
    from ..engine import to_dataframe

    df = to_dataframe(ds)
    dims = [d for d in ds.dims]
    keep = [c for c in dims if c in df.columns] + [c for c in cols if c in df.columns]
    keep = list(dict.fromkeys(keep))
    out = df[keep].copy()
    out.attrs = {k: v for k, v in ds.attrs.items() if isinstance(v, str)}
    return out


# --------------------------------------------------------------------------------------------
# shared options
# --------------------------------------------------------------------------------------------


def _engine_options(func: Callable) -> Callable:
    func = click.option("--draft-model", default=None,
                        help="Separate draft model (default: the model's MTP module).")(func)
    func = click.option("--axis", "-a", "axes", multiple=True, type=p.AxisParam(),
                        callback=p.collect_axes,
                        help="Any engine axis or structural choice in the range grammar, e.g. "
                             "-a kv_len=4096 -a dp=32 -a kv_precision=bf16,fp8 -a "
                             "batch_size=1,2,4,...,256 (a list adds a dimension).")(func)
    func = click.option("--hardware", "-H", "hardware", multiple=True,
                        help="Hardware name, alias or TOML path (repeat or comma-separate for "
                             f"several; default {DEFAULT_HARDWARE}, the one default of every "
                             "command).")(func)
    func = click.option("--model", "-m", default="DeepSeek-V3", show_default=True,
                        help="Model name, alias or TOML path.")(func)
    return func


def _table_options(func: Callable) -> Callable:
    func = click.option("--wide", is_flag=True, expose_value=False, callback=_wide_callback,
                        help="Print every column (a table is otherwise fitted to the "
                             "terminal, 100 characters when it does not say).")(func)
    func = click.option("--output", "-o", "output", default=None, metavar="FILE",
                        help="Also write the table to FILE in the chosen --format.")(func)
    return format_option(func)


def _economics_options(func: Callable) -> Callable:
    opts = [
        click.option("--price", default=None, metavar="ID",
                     help="Price id (see 'inference-factory prices list'; needed for margins)."),
        click.option("--cost-basis", type=click.Choice(["rental", "capex", "tco"]), default=None,
                     help="How a GPU-hour is charged (default rental)."),
        click.option("--rental-usd-per-gpu-hour", type=click.FLOAT, default=None,
                     help="Override the hardware file's rental price."),
        click.option("--capex-usd-per-gpu", type=click.FLOAT, default=None,
                     help="Override the hardware file's purchase price."),
        click.option("--depreciation-years", type=click.FLOAT, default=None, help="Default 4."),
        click.option("--pue", type=click.FLOAT, default=None, help="Default 1.3."),
        click.option("--usd-per-kwh", type=click.FLOAT, default=None, help="Default 0.08."),
        click.option("--utilization", type=click.FLOAT, default=None,
                     help="Busy share of the GPU-hour, (0, 1] (default 1)."),
        click.option("--input-per-output", "input_tokens_per_output_token", type=click.FLOAT,
                     default=None,
                     help="Input tokens per output token (default: DeepSeek's published day, "
                          "608B input / 168B output)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return p.price_basis_options(func)


def _slo_options(func: Callable, ttft: bool = True) -> Callable:
    """--tpot / --ttft as durations with units (50ms, 2s); --tpot-ms / --ttft-ms kept, hidden,
    for scripts written before (bare milliseconds)."""
    opts = [click.option("--tpot", type=p.DurationParam(), default=None,
                         help="TPOT SLO, a duration: 50ms, 0.05s."),
            click.option("--tpot-ms", type=p.DurationParam(bare_unit="ms"), default=None,
                         hidden=True)]
    if ttft:
        opts += [click.option("--ttft", type=p.DurationParam(), default=None,
                              help="TTFT SLO, a duration: 500ms, 2s."),
                 click.option("--ttft-ms", type=p.DurationParam(bare_unit="ms"), default=None,
                              hidden=True)]
    opts.append(click.option("--min-user-tps", type=FiniteRange(min=0, min_open=True),
                             default=None, help="Minimum decode tokens/s per user."))
    for opt in reversed(opts):
        func = opt(func)
    return func


def _slo(options: dict[str, Any]) -> dict[str, float | None]:
    """tpot_s / ttft_s from --tpot or --tpot-ms (not both)."""
    out = {}
    for name in ("tpot", "ttft"):
        a, b = options.pop(name, None), options.pop(f"{name}_ms", None)
        if a is not None and b is not None:
            raise SpecError(f"--{name} and --{name}-ms give the same SLO; give --{name} once")
        out[f"{name}_s"] = a if a is not None else b
    out["min_user_tokens_per_s"] = options.pop("min_user_tps", None)
    return out


_COST_KEYS = ("cost_basis", "price_basis", "power_basis", "rental_usd_per_gpu_hour", "capex_usd_per_gpu", "depreciation_years",
              "pue", "usd_per_kwh", "utilization")


def warn_other_models_price(model: str | None, price_id: str | None) -> None:
    """One warning line when ``--price`` is a list price of another model than ``--model``."""
    if model is None or price_id is None:
        return
    from ..errors import warn
    from ..specs import load_model
    from ..specs.prices import resolve_price

    m, pr = load_model(model).name, resolve_price(price_id)
    if pr.model != m:
        warn(f"--price {price_id}: a list price of {pr.model!r}, not of --model {m!r}; margins "
             "compare another model's price")


def _split_economics(options: dict[str, Any], model: str | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    from ..analysis import questions as q
    from ..analysis.economics import INPUT_TOKENS_PER_OUTPUT_TOKEN

    warn_other_models_price(model, options.get("price"))

    cost = {k: options.pop(k) for k in _COST_KEYS if k in options}
    cost = q.cost_model(**{k: v for k, v in cost.items() if v is not None})
    ratio = options.pop("input_tokens_per_output_token", None)
    if ratio is not None:
        from ..analysis.questions.args import check_ratio

        ratio = check_ratio("--input-per-output", ratio)
    econ = {"price": options.pop("price", None), "cost": cost,
            "input_tokens_per_output_token": INPUT_TOKENS_PER_OUTPUT_TOKEN if ratio is None
            else ratio}
    return econ, options


def _engine_kwargs(model: str, hardware: Sequence[str], axes: dict[str, tuple],
                   draft_model: str | None, *, single: bool = False,
                   forbid: dict[str, str] | None = None) -> tuple[Any, dict[str, Any]]:
    """Hardware argument and evaluate() keywords; the instance shape is checked against the
    model here (a shape the engine refuses is a usage error, not a result row)."""
    hws = _names(hardware) or [DEFAULT_HARDWARE]
    if single and len(hws) != 1:
        raise SpecError(f"--hardware: give one device for this command (got {hws})")
    for name, why in (forbid or {}).items():
        if name in axes:
            raise SpecError(f"--axis {name}: {why}")
    kw = _as_kwargs(axes)
    check_shapes(model, hws, axes)
    if draft_model:
        kw["draft_model"] = check_draft_model(draft_model)
    return _one(hws), kw


def check_draft_model(name: str) -> str:
    """``--draft-model``: a model spec that loads (an unknown name was accepted and turned
    into an 'invalid' row)."""
    from ..specs import load_model

    try:
        load_model(name)
    except SpecError as exc:
        raise SpecError(f"--draft-model {name!r}: {exc}") from None
    return name


def check_shapes(model: str, hardware: Sequence[str], axes: dict[str, tuple],
                 shapes: Sequence[dict[str, int]] = ({},)) -> None:
    """Every combination of the structural values given must be a valid instance of the model
    on the hardware (tp dividing the heads, ep dividing tp x dp, a precision the device
    computes in...): else a one-line SpecError naming the options."""
    import itertools

    from ..axes import STRUCT_AXES
    from ..engine import validate_struct
    from ..specs.realism import load_realism
    from ..specs import load_hardware, load_model

    m = load_model(model)
    rl = load_realism()
    struct = {k: v for k, v in axes.items() if k in STRUCT_AXES}
    for h in hardware:
        hw = load_hardware(h)
        for shape in shapes:
            for combo in itertools.product(*struct.values()):
                s = dict(STRUCT_AXES)
                s.update(dict(zip(struct, combo)))
                s.update(shape)
                try:
                    validate_struct(m, hw, s, rl)
                except SpecError as exc:
                    given = {k: s[k] for k in (*struct, *shape)}
                    where = " ".join(f"{k}={v}" for k, v in given.items()) or "the defaults"
                    raise SpecError(f"{where}: {exc}") from None


# --------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------


def _values_option(name: str, default: str, help: str):
    """An option taking one axis's values in the range grammar (``--batch-size 1,2,...,256``)."""
    def convert(ctx, param, value):
        if value is None:
            return None
        try:
            return list(g.parse_assignment(f"{name}={value}", param.opts[0])[1])
        except SpecError as exc:
            raise click.UsageError(str(exc), ctx) from None
    return click.option(f"--{name.replace('_', '-')}", name, default=None, callback=convert,
                        metavar="VALUES", help=f"{help} (range grammar; default {default}).")


def _pick(name: str, option_value, axes: dict[str, tuple], default: str) -> list:
    """The values of ``name`` from its own option or from -a (not both), else the default."""
    g.refuse_clashes(axes, **{name: option_value})
    if option_value is not None:
        return option_value
    if name in axes:
        return list(axes.pop(name))
    return list(g.parse_values(default))
