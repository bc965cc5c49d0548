"""click parameter types: the one value grammar (:mod:`inference_factory.specs.grammar`) on
every command, its errors as click usage errors."""

from __future__ import annotations

from typing import Any, Iterable

import click

from ..axes import WHOLE_AXES
from ..errors import SpecError
from ..output.tables import FORMATS
from ..specs.grammar import (ENGINE_AXES, SHAPE_KEYS, check_values, number, parse_assignment,
                             parse_duration, parse_values, scalar)


def _opt(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    names = sorted(getattr(param, "opts", []) or [param.name or "value"], key=len)
    return names[-1]


class AxisParam(click.ParamType):
    """``NAME=VALUES`` in the range grammar, checked against the axis table.

    Converts to ``(name, values)``; ``lists=False`` (``--set``) converts to ``(name, value)``.
    Use with ``multiple=True`` and :func:`collect_axes` as the callback, which refuses an
    axis given twice.
    """

    name = "NAME=VALUES"

    def __init__(self, allowed: Iterable[str] = ENGINE_AXES, lists: bool = True):
        self.allowed = tuple(allowed)
        self.lists = lists
        if not lists:
            self.name = "NAME=VALUE"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            name, values = parse_assignment(value, _opt(param), allowed=self.allowed,
                                            lists=self.lists)
        except SpecError as exc:
            raise click.UsageError(str(exc), ctx) from None
        return (name, values) if self.lists else (name, values[0])


def collect_axes(ctx, param, value) -> dict[str, Any]:
    """Callback: the ``(name, values)`` pairs of a repeated option as a dict; an axis given
    twice is a usage error."""
    out: dict[str, Any] = {}
    for name, values in value or ():
        if name in out:
            raise click.UsageError(f"{_opt(param)} {name} is given twice; give each axis once",
                                   ctx)
        out[name] = values
    return out


class DurationParam(click.ParamType):
    """A positive duration with a unit (``50ms``, ``2s``) -> seconds. ``bare_unit`` reads a bare
    number in that unit (for options that historically took plain milliseconds)."""

    name = "DURATION"

    def __init__(self, bare_unit: str | None = None):
        self.bare_unit = bare_unit

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return parse_duration(value, _opt(param), bare_unit=self.bare_unit)
        except SpecError as exc:
            raise click.UsageError(str(exc), ctx) from None


#: Keys of one parallelism shape.
class ShapeParam(click.ParamType):
    """One instance shape: ``tp=8`` or ``dp=8,ep=8`` -> ``{"dp": 8, "ep": 8}`` (whole numbers)."""

    name = "tp=8|dp=8,ep=8"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        out: dict[str, int] = {}
        for part in str(value).split(","):
            try:
                if "=" not in part:
                    raise SpecError(f"{_opt(param)} {value}: expected NAME=N[,NAME=N...] with NAME in "
                                    f"{list(SHAPE_KEYS)}, e.g. dp=8,ep=8")
                name, (v,) = parse_assignment(part, _opt(param), allowed=SHAPE_KEYS,
                                              lists=False)
            except SpecError as exc:
                raise click.UsageError(str(exc), ctx) from None
            if name in out:
                raise click.UsageError(f"{_opt(param)} {value}: {name} is given twice", ctx)
            out[name] = v
        return out


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that refuses NaN and infinities: click's range compares, and NaN
    passes every comparison (``--acceptance-rate nan`` was accepted)."""

    def convert(self, value, param, ctx):
        import math

        x = super().convert(value, param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return x


#: A finite float (NaN and infinities refused), for options without a range.
FINITE = FiniteRange()


class TokensParam(click.ParamType):
    """A token count: ``1024``, ``1k`` or ``8k`` (:func:`~inference_factory.specs.grammar.
    parse_tokens`, the one parser of lengths)."""

    name = "TOKENS"

    def convert(self, value, param, ctx):
        from ..specs.grammar import parse_tokens

        return parse_tokens(value, _opt(param))


class PoolParam(click.ParamType):
    """A pool of instances: ``N:SHAPE`` (``2:tp=8`` or ``1:dp=8,ep=8``) -> ``{"instances": 2,
    "tp": 8}``."""

    name = "N:tp=8|N:dp=8,ep=8"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        text_ = str(value)
        count, sep, shape = text_.partition(":")
        if not sep or not count.strip().isdigit() or int(count) < 1:
            raise click.UsageError(f"{_opt(param)} {value}: expected N:SHAPE with N a whole "
                                   "number >= 1, e.g. 2:tp=8 or 1:dp=8,ep=8", ctx)
        return {"instances": int(count), **ShapeParam().convert(shape, param, ctx)}


class DistributionParam(click.ParamType):
    """A lever's range for ``tornado`` (``NAME=LOW,HIGH``) or a distribution for
    ``montecarlo`` (``NAME=LOW,HIGH`` uniform, ``NAME=tri:LOW:MODE:HIGH`` triangular).

    The values follow the shared grammar (``kv_precision=bf16,fp8`` is two values);
    ``a:b:c`` means START:STOP:N points everywhere, so it is refused here with a hint.
    Converts to ``(name, tuple)``: (low, high) or (low, mode, high).
    """

    def __init__(self, triangular: bool):
        self.triangular = triangular
        self.name = "NAME=LOW,HIGH" + ("|NAME=tri:LOW:MODE:HIGH" if triangular else "")

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        form = self.name.replace("|", " or ")
        try:
            if "=" not in value:
                raise SpecError(f"{value!r}: expected {form}")
            name, spec = (s.strip() for s in value.split("=", 1))
            name = name.replace("-", "_")
            if not name:
                raise SpecError(f"{value!r}: expected {form}")
            if spec.startswith("tri:") and self.triangular:
                parts = spec[4:].split(":")
                if len(parts) != 3:
                    raise SpecError(f"{value!r}: a triangular distribution is tri:LOW:MODE:HIGH")
                return name, tuple(number(p, value) for p in parts)
            if ":" in spec:
                hint = (" or tri:LOW:MODE:HIGH" if self.triangular else "")
                raise SpecError(f"{value!r}: a:b:c means START:STOP:N points in every command; "
                                f"write the range as {name}=LOW,HIGH{hint}")
            values = parse_values(spec, value)
            if len(values) != 2:
                raise SpecError(f"{value!r}: give two values, LOW,HIGH (got {len(values)})")
            if name in ENGINE_AXES:
                values = check_values(name, values, value)
            return name, values
        except SpecError as exc:
            raise click.UsageError(f"{_opt(param)} {exc}", ctx) from None


class ValueParam(click.ParamType):
    """One value of one named axis (``--batch-size 64``, ``--tp 8``), checked like ``--axis``:
    range, whole numbers where the axis counts whole units."""

    def __init__(self, axis: str):
        self.axis = axis
        self.name = "INTEGER" if axis in WHOLE_AXES else "NUMBER"

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        try:
            v = scalar(value)
            return check_values(self.axis, (v,), f"{_opt(param)} {value}")[0]
        except SpecError as exc:
            raise click.UsageError(str(exc), ctx) from None


#: One option per precision axis of the engine: (option, help). ``roofline`` and ``bench``
#: take the same names; each defaults to the engine's (unset).
PRECISION_OPTIONS = (
    ("--weight-precision", "Non-expert weights (default: the model's)."),
    ("--moe-precision", "Routed-expert weights (default: the model's)."),
    ("--kv-precision", "KV cache (default bf16)."),
    ("--attention-precision", "Attention core math (default bf16)."),
    ("--dispatch-precision", "MoE all-to-all dispatch (default fp8)."),
    ("--combine-precision", "MoE all-to-all combine (default bf16)."),
)


def precision_options(func):
    """The engine's precision options (:data:`PRECISION_OPTIONS`), as ``roofline`` takes them."""
    from .. import units

    choice = click.Choice(list(units.PRECISIONS))
    for opt, text_ in reversed(PRECISION_OPTIONS):
        func = click.option(opt, type=choice, default=None, help=text_)(func)
    return func


def _engine(ctx, param, value):
    """``--engine NAME`` checked (:func:`..specs.engines.resolve_serving_engine`; an unknown
    name is one line naming the option, the value and the allowed names) and kept as given:
    an engine (``sglang``, ``trtllm@1.3``) picks its profile per device where the command
    knows the device."""
    if value is None:
        return None
    from ..specs.engines import resolve_serving_engine

    resolve_serving_engine(value, "--engine")
    return value


def engine_option(func=None, *, config: bool = False, note: str = ""):
    """``--engine PROFILE``: the serving-engine profile every command takes, resolved once
    (a :class:`~inference_factory.specs.engines.ServingEngine`, None when not given).
    ``config=True``: the help says the option wins over the config's ``engine``; ``note``
    ends the help (what the command uses of the profile)."""
    def deco(f):
        where = ("overrides the config's engine = \"...\"; default: the config's, else "
                 if config else "default ")
        return click.option(
            "--engine", default=None, metavar="PROFILE", callback=_engine,
            help=f"Serving engine: an engine (sglang, vllm, trtllm, atom; NAME@VERSION picks "
                 f"a version) whose profile for the device runs, a profile of "
                 f"configs/serving_engines.toml (sglang-0.5.6, sglang-0.5.12-rocm, vllm-v1, "
                 f"trtllm-1.3, atom-0.1, ideal) or a profile file (bench --calibrate writes "
                 f"one) ({where}sglang; docs/ENGINES.md).{' ' + note if note else ''}")(f)
    return deco if func is None else deco(func)


def format_option(func):
    """``--format table|csv|json|markdown`` and its shorthand ``--json``."""
    func = click.option("--json", "as_json", is_flag=True,
                        help="Same as --format json.")(func)
    func = click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                        help="Output format (default table).")(func)
    return func


def price_basis_options(func):
    """``--price-basis`` and ``--power-basis``: every command that prints costs prices every
    device from one named basis (:class:`~inference_factory.analysis.economics.CostModel`)."""
    func = click.option(
        "--power-basis", type=click.Choice(["gpu-tdp-pue", "all-in-provisioned"]),
        default=None,
        help="Power tokens/s per MW divides by: gpu-tdp-pue (GPU phase power x PUE, default) "
             "or all-in-provisioned (InferenceX's provisioned kW per GPU).")(func)
    func = click.option(
        "--price-basis", default=None, metavar="BASIS[,FALLBACK]",
        help="Where every device's $/GPU-hour comes from: rental-3yr, owning-hyperscaler, "
             "owning-neocloud (SemiAnalysis via InferenceX, 2026-04), hardware-file (each "
             "file's own, mixed dates) or a .toml/.csv table; ',FALLBACK' prices devices the "
             "first lacks, said per device. Default rental-3yr,hardware-file (tco: "
             "owning-hyperscaler).")(func)
    return func


def cost_words(attrs) -> str:
    """The cost part of a table header from a result's attrs: ``rental cost, price basis
    rental-3yr (IMAX_TCO, 2026-04), power basis gpu-tdp-pue``."""
    words = f"{attrs.get('cost_basis', 'rental')} cost"
    if attrs.get("price_basis"):
        words += f", price basis {attrs['price_basis']}"
    if attrs.get("power_basis"):
        words += f", power basis {str(attrs['power_basis']).split(' ')[0]}"
    return words
