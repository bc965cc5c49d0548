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
#: Widest line of a default table (characters): a terminal's 100 columns; ``--wide`` lifts it.
TABLE_WIDTH = 100
#: Headers a person reads, with units, for the library's column names (the machine formats
#: keep the names): column -> (header, factor applied to the values). Columns not listed
#: fall back to :func:`display_header`. A header breaks over two lines at " / " in a table's
#: columns (one line where it labels a row).
HUMAN_HEADERS: dict[str, tuple[str, float]] = {
    "concurrency": ("conc", 1.0), "max_concurrency": ("conc", 1.0),
    "total_token_throughput_per_gpu": ("tok/s/GPU / all", 1.0),
    "output_throughput_per_gpu": ("tok/s/GPU / output", 1.0),
    "output_throughput": ("out tok/s", 1.0), "total_token_throughput": ("tok/s", 1.0),
    "interactivity": ("tok/s / /user", 1.0), "tokens_per_s_per_user": ("tok/s/user", 1.0),
    "median_ttft_ms": ("TTFT ms / p50", 1.0), "p99_ttft_ms": ("TTFT ms / p99", 1.0),
    "median_tpot_ms": ("TPOT ms / p50", 1.0), "p99_tpot_ms": ("TPOT ms / p99", 1.0),
    "median_e2el_ms": ("E2E s / p50", 1e-3), "decode_batch_per_rank": ("batch / /rank", 1.0),
    "prefill_tokens_per_pass": ("prefill / tok/pass", 1.0),
    "decode_binding_resource": ("decode / bound", 1.0),
    "prefill_binding_resource": ("prefill / bound", 1.0),
    "hardware": ("device", 1.0), "batch_size": ("batch", 1.0), "draft_depth": ("draft", 1.0),
    "prefill_tp": ("prefill tp", 1.0), "prefill_dp": ("prefill dp", 1.0),
    "prefill_ep": ("prefill ep", 1.0), "decode_instances": ("decode instances", 1.0),
    "prefill_instances": ("prefill instances", 1.0), "weight_precision": ("weights", 1.0),
    "moe_precision": ("experts", 1.0), "kv_precision": ("KV cache", 1.0),
    "output_tokens_per_s": ("out tok/s", 1.0),
    "output_tokens_per_s_per_gpu": ("out tok/s/GPU", 1.0),
    "ttft_s": ("TTFT ms", 1e3), "tpot_s": ("TPOT ms", 1e3),
    "usd_per_mtok_output": ("$/M out", 1.0), "usd_per_mtok_input": ("$/M in", 1.0),
    "usd_per_mtok_output_all_in": ("$/M out all-in", 1.0),
    "usd_per_gpu_hour": ("$/GPU-h", 1.0), "facility_w_per_gpu": ("facility W/GPU", 1.0),
    "output_tokens_per_s_per_mw": ("out tok/s per MW", 1.0),
    "j_per_output_token": ("J per out token", 1.0),
    "gpus_for_load": ("GPUs for --load", 1.0), "load_share_frac": ("--load served %", 100.0),
    "measured_share": ("on measured tables %", 100.0), "reason": ("why not", 1.0),
    "hbm_gb": ("HBM / GB", 1.0), "hbm_tb_per_s": ("HBM / TB/s", 1.0),
    "bf16_tflop_per_s": ("BF16 / TFLOP/s", 1.0), "fp8_tflop_per_s": ("FP8 / TFLOP/s", 1.0),
    "fp4_tflop_per_s": ("FP4 / TFLOP/s", 1.0), "scale_up_gpus": ("scale-up / GPUs", 1.0),
    "rental_usd_per_gpu_hour": ("rental / $/GPU-h", 1.0),
    # session replays (bench --trace, plan --trace)
    "engine_version": ("engine version", 1.0), "kv_offload": ("KV tiers", 1.0),
    "total_tokens_per_s_per_gpu": ("tok/s/GPU / all", 1.0),
    "e2e_normalized_interactivity_p90": ("E2E int. / P90 tok/s", 1.0),
    "prefix_hit_rate": ("hit %", 100.0), "prefix_hit_rate_dram": ("hit DRAM %", 100.0),
    "ttft_p90_s": ("TTFT ms / p90", 1e3), "e2e_p90_s": ("E2E s / p90", 1.0),
    "usd_per_mtok_total_all_in": ("$/M all tok all-in", 1.0),
    "cached_input_tokens_per_s_per_gpu": ("tok/s/GPU / cached in", 1.0),
    "time_to_first_token_p50_ms": ("TTFT ms / p50", 1.0),
    "time_to_first_token_p90_ms": ("TTFT ms / p90", 1.0),
    "inter_token_latency_p50_ms": ("ITL ms / p50", 1.0),
    "request_latency_p50_ms": ("E2E s / p50", 1e-3),
    "request_latency_p90_ms": ("E2E s / p90", 1e-3),
    "request_latency_p99_ms": ("E2E s / p99", 1e-3),
    "prefix_hit_rate_hbm": ("hit HBM %", 100.0), "prefix_hit_rate_nvme": ("hit NVMe %", 100.0),
    "kv_peak_occupancy_hbm": ("KV peak / HBM %", 100.0),
    "kv_peak_occupancy_dram": ("KV peak / DRAM %", 100.0),
    "requests_in_flight": ("in / flight", 1.0),
    "revenue_usd_per_gpu_hour": ("revenue / $/GPU-h", 1.0),
    "cost_usd_per_mtok_output": ("$/M out", 1.0), "cost_usd_per_mtok_total": ("$/M all tok", 1.0),
    # validate: cases, summary and 80% bands
    "case_id": ("case", 1.0), "abs_log_error": ("|ln / err|", 1.0), "n_cases": ("cases", 1.0),
    "median_abs_log_error": ("median / |ln err|", 1.0),
    "worst_abs_log_error": ("worst / |ln err|", 1.0), "geomean_ratio": ("geomean / ratio", 1.0),
    "worst_case": ("worst case", 1.0),
    "component_coverage_frac": ("component / coverage %", 100.0),
    "component_median_width": ("component / width x", 1.0),
    "total_coverage_frac": ("coverage %", 100.0), "total_median_width": ("width x", 1.0),
    "coverage_loo_frac": ("coverage % / (LOO term)", 100.0),
}


def human_header(name: str, lines: int = 1) -> tuple[str, float]:
    """The header a person reads for a column (:data:`HUMAN_HEADERS`, else
    :func:`display_header`) and the factor applied to its values; ``lines=2`` breaks it at
    " / " (a table column's header), else one line."""
    h, factor = HUMAN_HEADERS.get(name) or display_header(name)
    if lines == 2:
        return h.replace(" / ", "\n"), factor
    return h.replace(" / /", "/").replace(" / ", " "), factor


def fit_lines(text: str, width: int = TABLE_WIDTH, indent: str = "  ") -> str:
    """Each line of a title or note wrapped at ``width``, continuations indented by
    ``indent`` (two spaces; a key-value list passes its value column). Words are never split:
    a number, a path or a URL stays whole (one longer than the line stands alone on its own)."""
    import textwrap

    return "\n".join(textwrap.fill(s, width, subsequent_indent=indent, break_on_hyphens=False,
                                    break_long_words=False)
                     if len(s) > width else s for s in text.splitlines())


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
           width: int | None = None, human: bool = False) -> str:
    """``df`` (a DataFrame, or a list of dicts for commands that need no pandas) rendered as
    ``fmt`` (one of :data:`FORMATS`). ``header`` is a title line for the human formats;
    ``extra`` adds keys to the JSON object (``{"rows": [...], "attrs": {...}}``).
    ``human``: the headers a person reads (:func:`human_header`), the title wrapped and text
    columns wrapped to fit ``width`` (default :data:`TABLE_WIDTH`)."""
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
        h, factor = (human_header(str(c), 2 if fmt == "table" else 1) if human
                     else display_header(str(c)))
        values = table[c]
        is_num = all(isinstance(_cell(v), (int, float)) or _cell(v) is None for v in values) and \
            not all(isinstance(_cell(v), bool) for v in values if _cell(v) is not None)
        scaled = [(v * factor if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and factor != 1.0 else v) for v in map(_cell, values)]
        heads.append(h)
        cols.append([format_number(v) if fmt == "table" else  # a Markdown cell is one line
                     format_number(v).replace("\n", " ") for v in scaled])
        numeric.append(is_num)
    rows = list(zip(*cols)) if cols else []
    align = ["right" if n else "left" for n in numeric]
    lines = []
    if header and fmt == "table":
        lines.append(fit_lines(header, width or TABLE_WIDTH) if human else header)
    elif header:
        lines.append(f"**{header}**\n")
    if not rows:
        lines.append("(no rows)")
        return "\n".join(lines)
    width = width or (TABLE_WIDTH if human else shutil.get_terminal_size((120, 24)).columns)
    text_cols = [i for i, n in enumerate(numeric) if not n]
    maxw = [None] * len(heads)
    if fmt == "table":
        def wide(i, h):
            return max(len(s) for c in (h, *(r[i] for r in rows)) for s in c.split("\n")) + 2

        natural = sum(wide(i, h) for i, h in enumerate(heads)) - 2   # no gap after the last
        if natural > width:
            # a person's table wraps its long text (a description, a reason), not its names
            long = [i for i in text_cols if wide(i, heads[i]) > 18] if human else text_cols
            room = width + 2 - sum(wide(i, h) for i, h in enumerate(heads) if i not in long)
            # the narrower long columns keep their width where their share allows it; the
            # widest share what is left (each at least 12, at most MAX_TEXT_WIDTH)
            for n, i in enumerate(sorted(long, key=lambda i: wide(i, heads[i]))):
                share = room // (len(long) - n)
                maxw[i] = (min(MAX_TEXT_WIDTH, max(12, min(wide(i, heads[i]), share) - 2))
                           if human else MAX_TEXT_WIDTH)
                room -= maxw[i] + 2
    if any(maxw):       # wrapped here at spaces (and between words' hyphens), never inside a
        import textwrap  # number or a name, nor by tabulate, which casts '1,042' with int()

        rows = [tuple("\n".join(w for line in c.split("\n") for w in textwrap.wrap(
            line, m, break_long_words=False) or [""]) if m else c for c, m in zip(r, maxw))
            for r in rows]
    import tabulate as tabulate_module

    padding = tabulate_module.MIN_PADDING
    tabulate_module.MIN_PADDING = 0 if human else padding   # headers no wider than they are
    try:
        table = tabulate(rows, headers=heads, tablefmt="simple" if fmt == "table" else "github",
                         colalign=align, disable_numparse=True)
    finally:
        tabulate_module.MIN_PADDING = padding
    lines.append(table)
    return "\n".join(lines)


def render_blocks(df, fmt: str = "table", header: str = "", width: int = TABLE_WIDTH) -> str:
    """A person's table whose columns after the first are answers side by side (one per
    device): :func:`render` (``human``) in blocks of consecutive columns that each fit
    ``width``, the first column repeated in each, so no answer is dropped or cut."""
    cols, blocks, i = list(df.columns[1:]), [], 0
    while i < len(cols) or not blocks:
        j = len(cols)
        while j > i + 1 and max(map(len, render(df[[df.columns[0], *cols[i:j]]], fmt, human=True,
                                                width=width).splitlines())) > width:
            j -= 1
        blocks.append(render(df[[df.columns[0], *cols[i:j]]], fmt, human=True, width=width))
        i = j
    title = (fit_lines(header, width) if fmt == "table" else f"**{header}**\n") if header else ""
    return "\n".join(([title] if title else []) + ["\n\n".join(blocks)])


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
