"""One option grammar for every command: axis values, ranges, durations, shapes.

Every command that takes an engine axis (``--axis NAME=VALUES``, ``--set``, ``--range``,
``--parallelism``) or a duration (``--tpot 50ms``) parses it here, (the command line's click
parameter types, :mod:`inference_factory.cli.params`, call it), so one spelling means one thing everywhere:

=======================  =========================================================
``1,2,4``                the listed values
``1,2,4,...,1024``       an arithmetic or geometric progression continued to the last
                         value (the step or ratio comes from the terms before ``...``)
``0:0.95:20``            ``numpy.linspace(0, 0.95, 20)``: ``n`` points, both ends included
``geom:1:1024:11``       ``numpy.geomspace(1, 1024, 11)``
``0..4`` / ``0..64..8``  integers from a to b inclusive (optional step)
``bf16,fp8``             names (hardware, models, precisions, overlap, cache tier)
``50ms`` / ``2s``        a duration (``us``, ``ms``, ``s``, ``min``)
``fp8-weights+fp8-kv``   a precision profile (``plan --precision``; see
                         :func:`parse_precision`, :mod:`.precision_profiles`)
=======================  =========================================================

Values are checked against the axis table of :mod:`inference_factory.axes` before anything
runs: unknown names, values outside an axis's domain, fractional values of whole-number axes
(batch sizes, draft depth, parallel degrees), unknown precisions, and an axis given twice are
one-line errors naming the option. This module imports neither numpy nor xarray at import
time, so ``--help`` stays fast.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping, Sequence

from ..axes import (CACHE_TIERS, NUMERIC_AXES, OVERLAPS, PRECISION_AXES, STRUCT_AXES,
                   STRUCT_NUMBERS, WHOLE_AXES)
from ..errors import SpecError, did_you_mean
# the precision-profile grammar (plan --precision) is its own module, spoken here too
from .precision_profiles import (PRECISION_BASES, PRECISION_PARTS, PrecisionProfile,  # noqa: F401
                                 parse_precision)

#: The longest axis a specification may expand to.
MAX_AXIS_LENGTH = 10_000_000

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_INT = re.compile(r"^[+-]?\d+$")


# --------------------------------------------------------------------------------------------
# values and ranges
# --------------------------------------------------------------------------------------------


def scalar(token: str) -> Any:
    """'4' -> 4, '0.5' -> 0.5, 'bf16' -> 'bf16'."""
    t = token.strip()
    if _INT.match(t):
        return int(t)
    if _NUMBER.match(t):
        return float(t)
    return t


def _number(token: str, where: str) -> float:
    v = scalar(token)
    if isinstance(v, str):
        raise SpecError(f"{where}: {token.strip()!r} is not a number")
    return v


def _count(token: str, where: str) -> int:
    t = token.strip()
    if not _INT.match(t):
        raise SpecError(f"{where}: the number of points {t!r} must be a whole number")
    n = int(t)
    if n < 1:
        raise SpecError(f"{where}: empty range ({n} points); give at least 1")
    if n > MAX_AXIS_LENGTH:
        raise SpecError(f"{where}: {n} points is more than {MAX_AXIS_LENGTH:,} on one axis")
    return n


def _tidy(values: "np.ndarray", integral: bool) -> tuple:
    """Python numbers rounded to 12 significant digits (0.3, not 0.30000000000000004):
    ints where every input was whole and every value is, else floats."""
    import numpy as np

    clean = np.array([float(f"{v:.12g}") for v in np.asarray(values, dtype=float)])
    if integral and np.all(clean == np.round(clean)):
        return tuple(int(v) for v in np.round(clean))
    return tuple(float(v) for v in clean)


def _continue(a: list[float], z: float, kind: str) -> "np.ndarray | None":
    """The progression of ``kind`` through the terms ``a`` continued to ``z``; None if the
    terms are not such a progression or it does not land on ``z``."""
    import numpy as np

    if kind == "arithmetic":
        diffs = np.diff(a)
        if diffs[0] == 0 or not np.allclose(diffs, diffs[0], rtol=1e-9, atol=0):
            return None
        n = (z - a[0]) / diffs[0]
        base = a[0] + diffs[0] * np.arange(max(round(n), 0) + 1)
    else:
        if any(x == 0 for x in a) or z == 0:
            return None
        ratios = np.array(a[1:]) / np.array(a[:-1])
        r = ratios[0]
        if r <= 0 or r == 1 or not np.allclose(ratios, r, rtol=1e-9) or z / a[0] <= 0:
            return None
        n = math.log(z / a[0]) / math.log(r)
        base = a[0] * r ** np.arange(max(round(n), 0) + 1, dtype=float)
    if n < 0 or not math.isclose(n, round(n), rel_tol=1e-9, abs_tol=1e-9) \
            or round(n) + 1 > MAX_AXIS_LENGTH:
        return None
    base[-1] = z
    return base


def _progression(terms: list[str], last: str, where: str) -> tuple:
    """'1,2,4,...,1024': continue an arithmetic or geometric progression to the last value."""
    if len(terms) < 2:
        raise SpecError(f"{where}: '...' needs at least two values before it to set the step")
    a = [_number(t, where) for t in terms]
    z = _number(last, where)
    integral = all(isinstance(x, int) for x in a) and isinstance(z, int)
    found = {k: v for k in ("arithmetic", "geometric") if (v := _continue(a, z, k)) is not None}
    if len(found) == 2 and len(a) == 2:
        raise SpecError(f"{where}: {a[0]:g},{a[1]:g},...,{z:g} is ambiguous (step or ratio); "
                        f"give a third value, e.g. {a[0]:g},{a[1]:g},{2 * a[1] - a[0]:g},... "
                        f"or {a[0]:g},{a[1]:g},{a[1] * a[1] / a[0]:g},...")
    if not found:
        raise SpecError(f"{where}: {', '.join(terms)}, ... is not an arithmetic or geometric "
                        f"progression that reaches {z:g} (empty range or a wrong last value)")
    values = next(iter(found.values()))
    return _tidy(values, integral)


def parse_values(spec: str, where: str = "axis") -> tuple:
    """Values of one axis specification (see the module docstring for the forms)."""
    import numpy as np

    text = spec.strip()
    if not text:
        raise SpecError(f"{where}: empty range (no values); give e.g. 1,2,4 or 0:0.9:10 or 0..4")
    if text.startswith("geom:"):
        parts = text.split(":")
        if len(parts) != 4:
            raise SpecError(f"{where}: {text!r} must be geom:START:STOP:N")
        lo, hi, n = _number(parts[1], where), _number(parts[2], where), _count(parts[3], where)
        if lo <= 0 or hi <= 0:
            raise SpecError(f"{where}: geometric range {text!r} needs START and STOP > 0")
        vals = np.geomspace(lo, hi, n)
        vals[0], vals[-1] = lo, hi
        return _tidy(vals, isinstance(lo, int) and isinstance(hi, int))
    if ":" in text and "," not in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise SpecError(f"{where}: {text!r} must be START:STOP:N (N points, both ends "
                            "included) or geom:START:STOP:N")
        lo, hi, n = _number(parts[0], where), _number(parts[1], where), _count(parts[2], where)
        return _tidy(np.linspace(lo, hi, n), integral=False)
    if ".." in text and "," not in text and "..." not in text:
        parts = text.split("..")
        if len(parts) not in (2, 3) or not all(_INT.match(p.strip()) for p in parts):
            raise SpecError(f"{where}: {text!r} must be A..B or A..B..STEP with whole numbers")
        a, b = int(parts[0]), int(parts[1])
        step = int(parts[2]) if len(parts) == 3 else 1
        if step <= 0:
            raise SpecError(f"{where}: step {step} of {text!r} must be a positive whole number")
        if b < a:
            raise SpecError(f"{where}: empty range {text!r} ({b} < {a})")
        if (b - a) // step + 1 > MAX_AXIS_LENGTH:
            raise SpecError(f"{where}: {text!r} is more than {MAX_AXIS_LENGTH:,} points")
        return tuple(range(a, b + 1, step))
    tokens = [t.strip() for t in text.split(",")]
    if any(not t for t in tokens):
        raise SpecError(f"{where}: {text!r} has an empty value between commas")
    if "..." in tokens:
        i = tokens.index("...")
        if tokens.count("...") != 1 or i != len(tokens) - 2:
            raise SpecError(f"{where}: '...' must come once, just before the last value "
                            "(e.g. 1,2,4,...,1024)")
        return _progression(tokens[:i], tokens[-1], where)
    return tuple(scalar(t) for t in tokens)




# --------------------------------------------------------------------------------------------
# checking an axis's values
# --------------------------------------------------------------------------------------------

#: Every name an ``--axis`` may take (model and hardware are lists of names).
ENGINE_AXES: tuple[str, ...] = (*STRUCT_AXES, *NUMERIC_AXES)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_values(name: str, values: Sequence[Any], where: str) -> tuple:
    """The values of axis ``name`` if each lies in the axis's domain, else a one-line
    SpecError: numbers in range (finite), whole numbers on whole-number axes, precisions among
    :data:`inference_factory.units.PRECISIONS`, each value once. Whole-number axes come back
    as ints, other numeric axes as floats."""
    from ..units import PRECISIONS

    out: list[Any] = []
    seen: set = set()
    for v in values:
        if name in TOKEN_AXES and isinstance(v, str):
            v = scalar(expand_k(v))     # --kv-len 8k
        if name in NUMERIC_AXES or name in STRUCT_NUMBERS:
            if name in NUMERIC_AXES:
                _, unit, lo, hi, whole = NUMERIC_AXES[name]
            else:
                (lo, hi), unit, whole = STRUCT_NUMBERS[name], "", False
            whole = whole or name in WHOLE_AXES
            if isinstance(v, str) and v.strip().lower().lstrip("+-") in ("inf", "infinity",
                                                                          "nan"):
                raise SpecError(f"{where}: {name} = {v} must be a finite number")
            if not _is_number(v):
                raise SpecError(f"{where}: {name} = {v!r} must be a number"
                                + (f" ({unit})" if unit else ""))
            if not math.isfinite(v):
                raise SpecError(f"{where}: {name} = {v!r} must be a finite number")
            top_open = name == "cache_hit_rate"
            if v < lo or v > hi or (top_open and v >= hi):
                top = f"{hi:g} (exclusive)]" if top_open else (
                    f"{hi:g}]" if math.isfinite(hi) else "inf)")
                raise SpecError(f"{where}: {name} = {v:g} is out of range; allowed "
                                f"[{lo:g}, {top}" + (f" ({unit})" if unit else ""))
            if whole:
                if float(v) != int(v):
                    raise SpecError(f"{where}: {name} = {v:g} must be a whole number (it "
                                    "counts whole units; use a..b, 1,2,4,...,N or a list)")
                v = int(v)
            elif name in NUMERIC_AXES:
                v = float(v)
        elif name in PRECISION_AXES:
            if v not in PRECISIONS:
                raise SpecError(f"{where}: {name} = {v!r} is not one of {list(PRECISIONS)}")
        elif name == "overlap":
            if v not in OVERLAPS:
                raise SpecError(f"{where}: overlap = {v!r} is not one of {list(OVERLAPS)}")
        elif name == "cache_tier":
            if v not in CACHE_TIERS:
                raise SpecError(f"{where}: cache_tier = {v!r} is not one of {list(CACHE_TIERS)}")
        if v in seen:
            raise SpecError(f"{where}: {name} lists {v!r} twice; give each value once")
        seen.add(v)
        out.append(v)
    return tuple(out)


def parse_assignment(text: str, where: str, *, allowed: Iterable[str] = ENGINE_AXES,
                     lists: bool = True) -> tuple[str, tuple]:
    """``"batch_size=1,2,4,...,64"`` -> ``("batch_size", (1, 2, 4, 8, 16, 32, 64))``, checked."""
    allowed = tuple(allowed)
    at = f"{where} {text}".strip()
    if "=" not in text:
        raise SpecError(f"{at}: expected NAME=VALUES, e.g. batch_size=1,2,4,...,256")
    name, spec = (s.strip() for s in text.split("=", 1))
    name = name.replace("-", "_")
    if name not in allowed and name.lower() in allowed:
        name = name.lower()             # TP=8 as the help's metavar writes it
    if name not in allowed:
        raise SpecError(f"{at}: unknown axis {name!r}{did_you_mean(name, allowed) or ';'} "
                        f"allowed: {list(allowed)}")
    if name in TOKEN_AXES:
        spec = expand_k(spec)           # kv_len=1k,8k, prompt_len=1k,2k,4k,...,128k
    values = parse_values(spec, at)
    if not lists and len(values) != 1:
        raise SpecError(f"{at}: give one value (this option does not take lists)")
    return name, check_values(name, values, at)


# --------------------------------------------------------------------------------------------
# token counts
# --------------------------------------------------------------------------------------------

_TOKENS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kK]?)\s*$")
#: Tokens per "k" in a token count: 1024, as the benchmark names its lengths ("1k1k" = ISL
#: 1024 / OSL 1024, "8k1k" = 8192 / 1024: seq_len_stoi in InferenceX's
#: utils/matrix_logic/generate_sweep_configs.py, IMAX_REPO).
TOKENS_PER_K = 1024
#: Largest token count a length option takes (far above any model's context).
MAX_TOKENS = 10_000_000


#: Axes that count tokens: their values read ``1k``/``8k`` (:data:`TOKENS_PER_K`) as the
#: length options do.
TOKEN_AXES = ("kv_len", "prompt_len", "final_len")
_K_TERM = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*[kK](?![\w])")


def expand_k(spec: str) -> str:
    """``"1k,8k"`` -> ``"1024,8192"``: every ``Nk`` term of a token axis's specification as
    its token count (a fraction such as 1.5k kept exact: 1536)."""
    def tokens(m) -> str:
        x = float(m.group(1)) * TOKENS_PER_K
        return str(int(x)) if x.is_integer() else repr(x)      # exact: no rounding to 6 digits
    return _K_TERM.sub(tokens, str(spec))


def parse_tokens(text: Any, where: str) -> int:
    """A token count: ``"1024"`` -> 1024, ``"1k"`` -> 1024, ``"8k"`` -> 8192, ``"1.5k"`` ->
    1536 (:data:`TOKENS_PER_K`); a whole number in [1, :data:`MAX_TOKENS`]."""
    if isinstance(text, int) and not isinstance(text, bool):
        n = text
    else:
        m = _TOKENS.match(str(text))
        if not m:
            raise SpecError(f"{where} {text!r}: expected a token count such as 1024, 1k or 8k "
                            f"(k = {TOKENS_PER_K} tokens)")
        x = float(m.group(1)) * (TOKENS_PER_K if m.group(2) else 1)
        if not x.is_integer():
            raise SpecError(f"{where} {text!r}: {x:g} tokens is not a whole number")
        n = int(x)
    if not 1 <= n <= MAX_TOKENS:
        raise SpecError(f"{where} {text!r}: a token count is a whole number in "
                        f"[1, {MAX_TOKENS:,}]")
    return n


# --------------------------------------------------------------------------------------------
# durations
# --------------------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-zµ]*)\s*$")
#: Seconds per unit of a duration.
DURATION_UNITS: dict[str, float] = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}


def parse_duration(text: str, where: str, *, bare_unit: str | None = None) -> float:
    """``"50ms"`` -> 0.05 (seconds); ``"2s"`` -> 2.0. A bare number is read in ``bare_unit``
    (the option's historical unit) or refused when there is none. Must be positive."""
    m = _DURATION.match(str(text))
    if not m:
        raise SpecError(f"{where} {text!r}: expected a duration such as 50ms or 2s "
                        f"(units: {', '.join(DURATION_UNITS)})")
    value, unit = float(m.group(1)), m.group(2) or bare_unit
    if unit is None:
        raise SpecError(f"{where} {text!r}: give a unit, e.g. {text}ms or {text}s")
    if unit not in DURATION_UNITS:
        raise SpecError(f"{where} {text!r}: unknown unit {unit!r}; allowed: "
                        f"{', '.join(DURATION_UNITS)}")
    seconds = value * DURATION_UNITS[unit]
    if not (math.isfinite(seconds) and seconds > 0):
        raise SpecError(f"{where} {text!r}: must be a positive duration")
    return seconds


def number(token: str, where: str) -> float:
    """A number token, else a one-line SpecError naming ``where``."""
    return _number(token, where)


def refuse_clashes(axes: Mapping[str, Any], option: str = "--axis", **given: Any) -> None:
    """An axis set both through ``option`` and its own option (``--batch-size``) is an error."""
    for name, value in given.items():
        if value is not None and name in axes:
            raise SpecError(f"{name} is given twice: {option} {name}=... and "
                            f"--{name.replace('_', '-')}; give it once")


SHAPE_KEYS = ("tp", "dp", "ep", "redundant_experts")
