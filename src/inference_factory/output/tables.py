"""One table renderer for every command: table, CSV, JSON or Markdown from a DataFrame.

Machine formats (``csv``, ``json``) carry the library's own columns and SI values, counts as
integers (``2048``, not ``2048.0``; output.metadata). The human
formats (``table``, ``markdown``) show units in the headers, seconds as milliseconds, fractions
as percentages, thousands separators and four significant digits without scientific
notation, long text wrapped so a row fits the terminal. Rendering is :mod:`tabulate`'s.
"""

from __future__ import annotations

import math
import shutil
from typing import Any, Callable, Mapping, Sequence

from .metadata import integer_counts, is_count, plain_number

FORMATS = ("table", "csv", "json", "markdown")
#: Widest a text column is drawn before it wraps (characters).
MAX_TEXT_WIDTH = 48


def format_number(x: Any) -> str:
    """Four significant digits, never scientific notation, thousands separators:
    17320.4 -> '17,320', 1927 -> '1,927', 52.31 -> '52.31', 0.2034 -> '0.2034', NaN -> '-'."""
    if x is None:
        return "-"
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if not isinstance(x, float):
        return str(x)
    if not math.isfinite(x):
        return "-" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if x == 0:
        return "0"
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    decimals = min(max(0, 3 - math.floor(math.log10(abs(x)))), 9)
    text = f"{x:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def value_band(value: Any, low: Any, high: Any, fmt: Callable[[Any], str] = format_number) -> str:
    """A figure with its band as text, ``value [low-high]``, each number through ``fmt``
    (default :func:`format_number`): ``value_band(52.31, 48.0, 57.5)`` -> '52.31 [48-57.5]'."""
    return f"{fmt(value)} [{fmt(low)}-{fmt(high)}]"


def display_header(name: str) -> tuple[str, float]:
    """Header with its unit, and the factor applied to the values: seconds are shown as
    ms, fractions as %, token rates and dollars with short units."""
    if name.endswith("_frac"):
        return f"{name[:-5]} %", 100.0
    if name.endswith("_s") and (name.endswith(("tpot_s", "ttft_s")) or name.endswith("step_s")):
        return f"{name[:-2]} ms", 1e3
    if name.startswith("usd_per_mtok_"):
        return f"$/Mtok {name[len('usd_per_mtok_'):]}", 1.0
    for suffix, unit in (("_tokens_per_s_per_gpu", "tok/s/GPU"),
                         ("_tokens_per_s_per_user", "tok/s/user")):
        if name.endswith(suffix):
            return f"{name[:-len(suffix)]} {unit}".strip(), 1.0
    return name, 1.0


def _cell(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if type(v).__name__ == "NAType":          # pandas.NA of a nullable integer column
        return None
    return v


def records(df) -> list[dict[str, Any]]:
    """Rows as plain JSON values (NaN -> null)."""
    return [{str(k): _cell(v) for k, v in r.items()} for r in df.to_dict("records")]


def render(df, fmt: str = "table", *, header: str = "", extra: Mapping[str, Any] | None = None,
           width: int | None = None) -> str:
    """``df`` (a DataFrame, or a list of dicts for commands that need no pandas) rendered as
    ``fmt`` (one of :data:`FORMATS`). ``header`` is a title line for the human formats;
    ``extra`` adds keys to the JSON object (``{"rows": [...], "attrs": {...}}``)."""
    if isinstance(df, list):
        columns = list(df[0]) if df else []
        table = {c: [r.get(c) for r in df] for c in columns}
        rows_json = [{str(k): _cell(v) for k, v in r.items()} for r in df]
        df_attrs: Mapping[str, Any] = {}
    else:
        if fmt in ("csv", "json"):    # counts as integers: 2048, not 2048.0 (same values)
            df = integer_counts(df)
        columns = list(df.columns)
        table = {c: list(df[c]) for c in columns}
        rows_json = records(df)
        df_attrs = df.attrs
    if fmt == "json":
        attrs = {k: v for k, v in df_attrs.items() if isinstance(v, (str, int, float, list, dict))}
        obj = {"rows": rows_json, "attrs": attrs}
        obj.update(extra or {})
        from .files import json_text

        return json_text(obj)
    if fmt == "csv":
        if not isinstance(df, list):
            return df.to_csv(index=False).rstrip("\n")
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows([["" if _cell(v) is None else
                      (plain_number(_cell(v)) if is_count(str(k)) else _cell(v))
                      for k, v in r.items()] for r in df])
        return buf.getvalue().rstrip("\n")
    if fmt not in ("table", "markdown"):
        raise ValueError(f"unknown table format {fmt!r}")
    from tabulate import tabulate

    heads, cols, numeric = [], [], []
    for c in columns:
        h, factor = display_header(str(c))
        values = table[c]
        is_num = all(isinstance(_cell(v), (int, float)) or _cell(v) is None for v in values) and \
            not all(isinstance(_cell(v), bool) for v in values if _cell(v) is not None)
        scaled = [(v * factor if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and factor != 1.0 else v) for v in map(_cell, values)]
        heads.append(h)
        cols.append([format_number(v) for v in scaled])
        numeric.append(is_num)
    rows = list(zip(*cols)) if cols else []
    align = ["right" if n else "left" for n in numeric]
    lines = []
    if header and fmt == "table":
        lines.append(header)
    elif header:
        lines.append(f"**{header}**\n")
    if not rows:
        lines.append("(no rows)")
        return "\n".join(lines)
    width = width or shutil.get_terminal_size((120, 24)).columns
    text_cols = [i for i, n in enumerate(numeric) if not n]
    maxw = [None] * len(heads)
    if fmt == "table":
        natural = sum(max(len(h), *(len(r[i]) for r in rows)) + 2 for i, h in enumerate(heads))
        if natural > width:
            for i in text_cols:
                maxw[i] = MAX_TEXT_WIDTH
    table = tabulate(rows, headers=heads, tablefmt="simple" if fmt == "table" else "github",
                     colalign=align, disable_numparse=True,
                     maxcolwidths=maxw if any(m for m in maxw) else None)
    lines.append(table)
    return "\n".join(lines)


def render_rows(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                right: Sequence[int] = (), fmt: str = "table") -> str:
    """Preformatted cells as a table (``table``: aligned columns under a dashed rule;
    ``markdown``: a GitHub table): the layout every command's table shares."""
    from tabulate import tabulate

    align = ["right" if i in right else "left" for i in range(len(headers))]
    return tabulate([list(map(str, r)) for r in rows], headers=list(headers),
                    tablefmt="simple" if fmt == "table" else "github", colalign=align,
                    disable_numparse=True)


def chosen_format(fmt: str | None, as_json: bool) -> str:
    if as_json and fmt not in (None, "json"):
        from ..errors import SpecError
        raise SpecError(f"--json and --format {fmt} disagree; give one")
    return "json" if as_json else (fmt or "table")


def columns_present(df, cols: Sequence[str]) -> list[str]:
    return [c for c in cols if c in df.columns]
