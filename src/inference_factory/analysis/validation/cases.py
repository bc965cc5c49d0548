"""Validation case files: the CSV contract of ``docs/VALIDATION.md`` read and checked.

:func:`load_cases` reads a case file and checks every row (types and ranges by the pydantic
row schema, :class:`inference_factory.specs.schema.CaseRow`; the defaults and cross-column
rules here) before anything is predicted (:func:`.predictions.predict`). Every problem raises
one :class:`SpecError` naming the file, the spreadsheet row, the case and the column.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ... import units
from ...engine import NUMERIC_AXES, architecture
from ...errors import SpecError
from ...specs import load_hardware, load_model, schema

#: The case-file contract: exactly these column names, in any order (extra columns ignored).
COLUMNS: tuple[str, ...] = (
    "case_id", "model", "hardware", "phase", "n_gpus", "tp", "dp", "ep", "redundant_experts",
    "batch_per_gpu", "tokens_per_gpu", "input_len", "output_len", "kv_len", "cache_hit_rate",
    "draft_depth", "acceptance_rate", "weight_precision", "moe_precision",
    "attention_precision", "kv_precision", "overlap", "min_user_tokens_per_s", "max_ttft_s",
    "metric", "published", "unit", "source",
)

PHASES = ("prefill", "decode")
OVERLAPS = ("none", "two-batch")

#: metric -> (phase it belongs to, allowed units; the first is the default for a blank unit)
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "prefill_tokens_per_s_per_gpu": ("prefill", ("tokens/s/GPU", "computed tokens/s/GPU")),
    "ttft_s": ("prefill", ("s",)),
    "decode_tokens_per_s_per_gpu": ("decode", ("tokens/s/GPU",)),
    "decode_tokens_per_s_per_user": ("decode", ("tokens/s/user",)),
    "tpot_s": ("decode", ("s",)),
}


_MAX_DRAFT = int(NUMERIC_AXES["draft_depth"][3])


@dataclass
class _Row:
    path: str
    row: int                      # spreadsheet row number: the header is row 1
    raw: Mapping[str, str]
    case_id: str = ""

    def fail(self, column: str, message: str) -> SpecError:
        case = f" (case {self.case_id!r})" if self.case_id else ""
        value = self.raw.get(column, "")
        shown = f" = {value!r}" if value != "" else ""
        return SpecError(f"{self.path}: row {self.row}{case}, column {column!r}{shown}: "
                         f"{message}")

    def text(self, column: str) -> str:
        return self.raw.get(column, "").strip()

    def blank(self, column: str) -> bool:
        return self.text(column) == ""

    def required(self, column: str) -> str:
        v = self.text(column)
        if v == "":
            raise self.fail(column, "is required and blank")
        return v

    def number(self, column: str, default: float | None = None, *, lo: float = -math.inf,
               hi: float = math.inf, lo_open: bool = False, hi_open: bool = False,
               integer: bool = False, required: bool = False) -> float | None:
        v = self.text(column)
        if v == "":
            if required:
                raise self.fail(column, "is required and blank")
            return default
        try:
            x = float(v)
        except ValueError:
            raise self.fail(column, "is not a number") from None
        if not math.isfinite(x):
            raise self.fail(column, "must be a finite number")
        below = x <= lo if lo_open else x < lo
        above = x >= hi if hi_open else x > hi
        if below or above:
            left = "(" if lo_open else "["
            right = ")" if hi_open else "]"
            raise self.fail(column, f"is out of range; allowed {left}{lo:g}, {hi:g}{right}")
        if integer and x != round(x):
            raise self.fail(column, "must be a whole number")
        return int(round(x)) if integer else x

    def choice(self, column: str, allowed, default: str | None = None) -> str | None:
        v = self.text(column)
        if v == "":
            return default
        if v not in allowed:
            raise self.fail(column, f"is not one of {sorted(allowed)}")
        return v


def _read_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header: list[str] | None = None
            rows: list[tuple[int, list[str]]] = []
            spreadsheet_row = 0
            for cells in reader:
                spreadsheet_row += 1
                if header is None:
                    if not any(c.strip() for c in cells):
                        raise SpecError(f"{path}: row {spreadsheet_row}: the header is blank")
                    header = [c.strip() for c in cells]
                    continue
                if not any(c.strip() for c in cells):
                    continue                        # blank line between cases
                rows.append((spreadsheet_row, cells))
    except FileNotFoundError:
        raise SpecError(f"{path}: case file not found") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a folder, not a case file") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    except csv.Error as exc:
        raise SpecError(f"{path}: malformed CSV: {exc}") from None
    if header is None:
        raise SpecError(f"{path}: empty case file; the header row must name the columns "
                        f"{list(COLUMNS)}")
    return header, rows


def load_cases(path: str | os.PathLike) -> pd.DataFrame:
    """Read and check a case file; return one row per case with every default resolved.

    Every problem (missing column, unknown value, unknown model or hardware, a blank required
    field, an inconsistent parallel layout) raises :class:`SpecError` naming the file, the
    spreadsheet row (the header is row 1), the case and the column, before anything is
    predicted. Blank fields take the defaults stated in ``docs/VALIDATION.md``.

    Returns
    -------
    pandas.DataFrame
        One row per case: the contract columns with defaults resolved (model and hardware as
        canonical spec names, ``batch_per_gpu`` as a number or NaN with ``batch_max``
        True for ``max``), plus ``row`` (spreadsheet row), ``colocated`` (the instance also
        runs prefill) and ``prompts_per_pass`` (prefill prompts per attention-DP rank).
    """
    p = Path(path)
    header, rows = _read_rows(p)
    dupes = sorted({c for c in header if c and header.count(c) > 1})
    if dupes:
        raise SpecError(f"{p}: row 1: column {dupes[0]!r} appears more than once in the header")
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise SpecError(f"{p}: row 1: column {missing[0]!r} is missing from the header; a case "
                        f"file has the columns {list(COLUMNS)} (blank values take defaults)")
    if not rows:
        raise SpecError(f"{p}: no cases below the header")

    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for line, cells in rows:
        if len(cells) > len(header):
            extra = [c for c in cells[len(header):] if c.strip()]
            if extra:
                raise SpecError(f"{p}: row {line}: {len(cells)} fields but the header names "
                                f"{len(header)} columns")
        raw = {h: (cells[i] if i < len(cells) else "") for i, h in enumerate(header) if h}
        r = _Row(str(p), line, raw)
        case_id = r.required("case_id")
        r.case_id = case_id
        if case_id in seen:
            raise r.fail("case_id", f"duplicates the case of row {seen[case_id]}")
        seen[case_id] = line
        _check_cells(r)
        out.append(_check_row(r))
    df = pd.DataFrame(out)
    df.attrs["path"] = str(p)
    return df


def _check_cells(r: _Row) -> None:
    """Types and ranges of the row's cells (:class:`~inference_factory.specs.schema.CaseRow`);
    a blank cell is absent and takes its default later."""
    cells = {k: v.strip() for k, v in r.raw.items() if v.strip()}
    if cells.get("batch_per_gpu", "").lower() == "max":
        del cells["batch_per_gpu"]
    bad = schema.violation(schema.CaseRow, cells)
    if bad is not None:
        column, _, need = bad
        raise r.fail(column.split(".")[0].split("[")[0],
                     need.replace("is missing (required)", "is required and blank"))


def _load_spec(r: _Row, column: str, loader):
    name = r.required(column)
    try:
        return loader(name)
    except SpecError as exc:
        raise r.fail(column, str(exc)) from None


def _check_row(r: _Row) -> dict[str, Any]:
    m = _load_spec(r, "model", load_model)
    hw = _load_spec(r, "hardware", load_hardware)
    phase = r.choice("phase", PHASES)
    if phase is None:
        raise r.fail("phase", f"is required and blank; one of {list(PHASES)}")
    metric = r.choice("metric", METRICS)
    if metric is None:
        raise r.fail("metric", f"is required and blank; one of {list(METRICS)}")
    metric_phase, metric_units = METRICS[metric]
    if metric_phase != phase:
        raise r.fail("metric", f"is a {metric_phase} metric but the case's phase is {phase!r}")
    unit = r.text("unit") or metric_units[0]
    if unit not in metric_units:
        raise r.fail("unit", f"does not fit metric {metric!r}; allowed {list(metric_units)} "
                             "(convert per-node or per-system figures to per GPU first)")
    published = r.number("published", lo=0.0, lo_open=True, required=True)
    source = r.required("source")

    # parallel layout: tp x dp GPUs per instance, ep ranks for the routed experts
    n_gpus = r.number("n_gpus", None, lo=1, integer=True)
    tp = r.number("tp", 1, lo=1, integer=True)
    dp_default = None
    if n_gpus is not None:
        if n_gpus % tp:
            raise r.fail("n_gpus", f"is not a multiple of tp = {tp}")
        dp_default = n_gpus // tp
    dp = r.number("dp", dp_default if dp_default is not None else 1, lo=1, integer=True)
    if n_gpus is None:
        n_gpus = tp * dp
    elif n_gpus != tp * dp:
        raise r.fail("n_gpus", f"must equal tp x dp = {tp} x {dp} = {tp * dp}")
    ep = r.number("ep", 1, lo=1, integer=True)
    redundant = r.number("redundant_experts", 0, lo=0, integer=True)
    if not m.is_moe and ep != 1:
        raise r.fail("ep", f"model {m.name!r} is dense: ep must be 1 (or blank)")
    if not m.is_moe and redundant != 0:
        raise r.fail("redundant_experts", f"model {m.name!r} is dense: must be 0 (or blank)")
    why = architecture(m).tp_error(tp)       # each attention kind's heads split whole
    if why:
        raise r.fail("tp", why.removeprefix(f"tp = {tp} "))
    if n_gpus % ep:
        raise r.fail("ep", f"must divide the instance's GPUs tp x dp = {n_gpus}")
    if m.is_moe and redundant > m.n_routed_experts:
        raise r.fail("redundant_experts", f"exceeds the {m.n_routed_experts} routed experts of "
                                          f"{m.name!r} (at most one extra replica per expert)")
    if m.is_moe and ep > m.n_routed_experts + redundant:
        raise r.fail("ep", f"exceeds the {m.n_routed_experts + redundant} routed experts "
                           f"(+ redundant) of {m.name!r}")

    # precisions: defaults are the model's own weights, BF16 attention math and KV cache
    precs = units.PRECISIONS
    wprec = r.choice("weight_precision", precs, m.weight_precision)
    default_moe = m.expert_precision if r.blank("weight_precision") else wprec
    mprec = r.choice("moe_precision", precs, default_moe)
    aprec = r.choice("attention_precision", precs, "bf16")
    kvprec = r.choice("kv_precision", precs, "bf16")
    checks = [("weight_precision", wprec), ("attention_precision", aprec)]
    if m.is_moe:
        checks.append(("moe_precision", mprec))
    for column, prec in checks:
        try:
            hw.flop_per_s(prec)
        except SpecError:
            raise r.fail(column, f"{prec!r} has no tensor-core rate on {hw.name!r}; it lists "
                                 f"{sorted(hw.dense_flop_per_s)}") from None
    overlap = r.choice("overlap", OVERLAPS, "none")
    # optional column: routed-expert skew (blank or absent = the engine's sourced default)
    skew = r.number("expert_skew", None, lo=0.0, hi=4.0)

    # workload
    input_len = r.number("input_len", None, lo=1)
    output_len = r.number("output_len", None, lo=1)
    hit = r.number("cache_hit_rate", 0.0, lo=0.0, hi=1.0, hi_open=True)
    draft = r.number("draft_depth", 0, lo=0, hi=_MAX_DRAFT, integer=True)
    if draft > 0 and m.n_mtp_modules == 0:
        raise r.fail("draft_depth", f"model {m.name!r} has no MTP module to draft with; use 0")
    acceptance = r.number("acceptance_rate", None, lo=0.0, hi=1.0)
    if draft > 0 and acceptance is None:
        raise r.fail("acceptance_rate", f"is required when draft_depth = {draft}")
    if acceptance is None:
        acceptance = float(NUMERIC_AXES["acceptance_rate"][0])   # unused at draft_depth 0
    min_user = r.number("min_user_tokens_per_s", None, lo=0.0, lo_open=True)
    max_ttft = r.number("max_ttft_s", None, lo=0.0, lo_open=True)

    batch = math.nan
    batch_max = False
    tokens = r.number("tokens_per_gpu", None, lo=0.0, lo_open=True)
    kv_len = r.number("kv_len", None, lo=1)
    colocated = False
    if phase == "prefill":
        if input_len is None:
            raise r.fail("input_len", "is required for a prefill case (prompt length)")
        for column in ("batch_per_gpu", "kv_len", "min_user_tokens_per_s"):
            if not r.blank(column):
                raise r.fail(column, "applies to decode cases only; leave it blank")
        if draft > 0:
            raise r.fail("draft_depth", "applies to decode cases only; leave it blank or 0")
        kv_len = None
    else:
        b = r.text("batch_per_gpu")
        if b == "" or b.lower() == "max":
            batch_max = True
        else:
            batch = r.number("batch_per_gpu", lo=0.0, lo_open=True)
            if batch * tp < 1:
                raise r.fail("batch_per_gpu", f"gives {batch * tp:g} sequences per attention-DP "
                                              f"rank (batch_per_gpu x tp); at least 1 is needed")
        colocated = tokens is not None
        if colocated and (input_len is None or output_len is None):
            column = "input_len" if input_len is None else "output_len"
            raise r.fail(column, "is required when tokens_per_gpu is set on a decode case (the "
                                 "instance also runs prefill; see docs/VALIDATION.md)")
        if max_ttft is not None and not colocated:
            raise r.fail("max_ttft_s", "applies to prefill cases, or to decode cases whose "
                                       "instance also runs prefill (tokens_per_gpu set)")
        if kv_len is None:
            if input_len is None or output_len is None:
                column = "input_len" if input_len is None else "output_len"
                raise r.fail("kv_len", f"is blank and cannot default to input_len + "
                                       f"output_len / 2: {column} is blank too")
            kv_len = input_len + output_len / 2.0

    prompts = math.nan
    if phase == "prefill" or colocated:
        computed = input_len * (1.0 - hit)
        if tokens is None:                          # one prompt per attention-DP rank
            tokens = computed / tp
        prompts = tokens * tp / computed
        if prompts < 1.0 - 1e-9:
            raise r.fail("tokens_per_gpu", f"gives {prompts:.3g} prompts per attention-DP rank "
                                           f"per pass (tokens_per_gpu x tp / computed prompt "
                                           f"tokens); chunked prefill of less than one prompt "
                                           f"is not modelled")
        prompts = max(prompts, 1.0)

    return {
        "case_id": r.case_id, "row": r.row, "model": m.name, "hardware": hw.name,
        "phase": phase, "n_gpus": n_gpus, "tp": tp, "dp": dp, "ep": ep,
        "redundant_experts": redundant, "batch_per_gpu": batch, "batch_max": batch_max,
        "tokens_per_gpu": np.nan if tokens is None else tokens,
        "input_len": np.nan if input_len is None else input_len,
        "output_len": np.nan if output_len is None else output_len,
        "kv_len": np.nan if kv_len is None else kv_len,
        "cache_hit_rate": hit, "draft_depth": draft, "acceptance_rate": acceptance,
        "weight_precision": wprec, "moe_precision": mprec, "attention_precision": aprec,
        "kv_precision": kvprec, "overlap": overlap,
        "expert_skew": np.nan if skew is None else skew,
        "min_user_tokens_per_s": np.nan if min_user is None else min_user,
        "max_ttft_s": np.nan if max_ttft is None else max_ttft,
        "metric": metric, "published": published, "unit": unit, "source": source,
        "colocated": colocated, "prompts_per_pass": prompts,
    }


def metric_of(c: Mapping[str, Any], res: Mapping[str, np.ndarray]) -> np.ndarray:
    """The case's metric from the engine's outputs at its chosen operating point (every
    array along the draws of a band: :func:`.bands.case_band`); the mapping
    :func:`.predictions.predict` applies case by case. A colocated case's decode figures are the
    engine's :func:`~inference_factory.engine.decode_outputs` with the same GPUs prefilling
    every request."""
    from ...engine import decode_outputs

    if c["phase"] == "prefill":
        if c["metric"] == "ttft_s":
            return res["ttft_s"]
        if c["unit"] == "computed tokens/s/GPU":
            return res["prefill_computed_tokens_per_s_per_gpu"]
        return res["prefill_tokens_per_s_per_gpu"]
    if c["colocated"]:
        res = decode_outputs(res, prefill_tokens_per_s_per_gpu=res["prefill_tokens_per_s_per_gpu"],
                             input_per_output_token=float(c["input_len"]) / float(c["output_len"]))
    user = res["decode_tokens_per_s_per_user"]
    return {"decode_tokens_per_s_per_gpu": res["decode_tokens_per_s_per_gpu"],
            "decode_tokens_per_s_per_user": user, "tpot_s": 1.0 / user}[c["metric"]]
