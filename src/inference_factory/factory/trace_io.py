"""Trace loaders: Mooncake JSONL (``hash_ids`` blocks become the prefix chain) and
Vidur/Splitwise-style CSV files, each row validated with a one-line error naming the file,
line, field and value; and the bundled example trace's path.

Re-exported by :mod:`inference_factory.factory.workload`, where users import them."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..specs import schema
from ..errors import SpecError
from .trace import Trace, _check_int, _is_int, _is_num

MOONCAKE_BLOCK_TOKENS = 512          # block size of the hash_ids in Mooncake's public traces


# --------------------------------------------------------------------------------------------
# loaders
# --------------------------------------------------------------------------------------------

def example_trace_path() -> Path:
    """The bundled Mooncake-format example (``configs/traces/example_mooncake.jsonl``)."""
    from ..specs import data_dir

    return data_dir("configs") / "traces" / "example_mooncake.jsonl"


class _Rows:
    """Accumulates validated rows; errors name the file, line, field and value."""

    def __init__(self, path: Path):
        self.path = path
        self.arrival: list[float] = []
        self.inp: list[int] = []
        self.out: list[int] = []
        self.cls: list[str] = []
        self.hashes: list[list[int]] = []

    def fail(self, line: int, fieldname: str, value: Any, must: str) -> SpecError:
        return SpecError(f"{self.path}: line {line}: field {fieldname!r} = "
                         f"{schema.show(value)} {must}")

    def _float(self, line: int, fieldname: str, value: Any) -> float:
        """A number or a numeric string (CSV cells are strings)."""
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise self.fail(line, fieldname, value, "is not a number") from None
        if _is_int(value):
            try:
                return float(value)
            except OverflowError:
                return math.inf
        if _is_num(value):
            return float(value)
        raise self.fail(line, fieldname, value, "is not a number")

    def number(self, line: int, fieldname: str, value: Any, minimum: float,
               maximum: float) -> float:
        value_f = self._float(line, fieldname, value)
        if not math.isfinite(value_f) or not minimum <= value_f <= maximum:
            raise self.fail(line, fieldname, value,
                            f"must be a finite number in [{minimum:g}, {maximum:g}]")
        return value_f

    def integer(self, line: int, fieldname: str, value: Any, minimum: int, maximum: int) -> int:
        value_f = self._float(line, fieldname, value)
        if not math.isfinite(value_f) or value_f != int(value_f) \
                or not minimum <= value_f <= maximum:
            raise self.fail(line, fieldname, value,
                            f"must be a whole number in [{minimum}, {maximum:,}]")
        return int(value_f)

    def add(self, line: int, arrival_s: float, inp: int, out: int, cls: str,
            hashes: list[int], block_tokens: int, hash_field: str) -> None:
        if len(hashes) > -(-inp // block_tokens):
            raise self.fail(line, hash_field, f"<{len(hashes)} ids>",
                            f"has more blocks than ceil(input / {block_tokens}) = "
                            f"{-(-inp // block_tokens)}; is the block size right?")
        self.arrival.append(arrival_s)
        self.inp.append(inp)
        self.out.append(out)
        self.cls.append(cls)
        self.hashes.append(hashes)

    def trace(self, block_tokens: int) -> Trace:
        if not self.arrival:
            raise SpecError(f"{self.path}: no requests in file")
        if not any(self.out):       # nothing to decode: every per-token figure is 0 / 0
            raise SpecError(f"{self.path}: every request has output_length 0; a trace "
                            "needs output tokens to decode (give at least one request > 0)")
        n = len(self.arrival)
        arrival = np.asarray(self.arrival, np.float64)
        inp = np.asarray(self.inp, np.int64)
        names = list(dict.fromkeys(self.cls))
        code = {c: i for i, c in enumerate(names)}
        cid = np.fromiter((code[c] for c in self.cls), np.int16, n)
        # reusable chain: the FULL blocks only; the last partial block is the request's own
        lengths = np.fromiter((len(h) for h in self.hashes), np.int64, n)
        lengths = np.minimum(lengths, inp // block_tokens)
        flat = np.fromiter((x for h, k in zip(self.hashes, lengths.tolist()) for x in h[:k]),
                           np.int64, int(lengths.sum()))
        uniq, items = np.unique(flat, return_inverse=True)
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        perm = np.argsort(arrival, kind="stable")
        new_len = lengths[perm]
        new_off = np.concatenate(([0], np.cumsum(new_len)))
        src = np.repeat(offsets[:-1][perm] - new_off[:-1], new_len) + np.arange(new_off[-1])
        k = len(names)
        return Trace(arrival_s=arrival[perm], class_id=cid[perm], class_names=tuple(names),
                     input_tokens=inp[perm], output_tokens=np.asarray(self.out, np.int64)[perm],
                     chain_offsets=new_off, chain_items=items.reshape(-1)[src],
                     item_tokens=np.full(uniq.shape[0], block_tokens, np.int64),
                     own_item=np.full(n, -1, np.int64),
                     acceptance_rate=np.full(k, np.nan), expert_skew=np.full(k, np.nan),
                     source=str(self.path))


def _load_jsonl(path: Path, block_tokens: int) -> Trace:
    rows = _Rows(path)
    with open(path, encoding="utf-8") as fh:
        for line_no, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SpecError(f"{path}: line {line_no}: not valid JSON ({exc.msg} at column "
                                f"{exc.colno})") from None
            if not isinstance(obj, dict):
                raise SpecError(f"{path}: line {line_no}: expected a JSON object, got "
                                f"{type(obj).__name__}")
            row, bad = schema.parse(schema.TraceRow, obj)
            if bad is not None:
                key, value, need = bad
                if need.startswith("is missing"):
                    raise SpecError(f"{path}: line {line_no}: field {key!r} is missing "
                                    "(required: timestamp [ms], input_length, output_length)")
                raise rows.fail(line_no, key.split("[")[0], value, need)
            rows.add(line_no, row.timestamp / 1000.0, row.input_length, row.output_length,
                     row.class_, list(row.hash_ids), block_tokens, "hash_ids")
    return rows.trace(block_tokens)


_CSV_COLUMNS = {"arrival": ("arrival_s", "arrived_at"),
                "input": ("input_tokens", "num_prefill_tokens"),
                "output": ("output_tokens", "num_decode_tokens")}


def _load_csv(path: Path, block_tokens: int) -> Trace:
    rows = _Rows(path)
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise SpecError(f"{path}: line 1: empty file; expected a header with arrival_s, "
                            "input_tokens, output_tokens")
        header = [h.strip() for h in header]
        col: dict[str, int] = {}
        for role, names in _CSV_COLUMNS.items():
            found = [h for h in names if h in header]
            if not found:
                raise SpecError(f"{path}: line 1: column {names[0]!r} (or {names[1]!r}) is "
                                f"missing; the header has {header}")
            col[role] = header.index(found[0])
        names_used = {role: header[i] for role, i in col.items()}
        cls_i = header.index("class") if "class" in header else None
        hash_i = header.index("hash_ids") if "hash_ids" in header else None
        width = len(header)
        for rec in reader:
            line_no = reader.line_num
            if not rec or all(not x.strip() for x in rec):
                continue
            if len(rec) != width:
                raise SpecError(f"{path}: line {line_no}: {len(rec)} fields, expected {width} "
                                f"as in the header {header}")

            def cell(i: int, name: str) -> str:
                v = rec[i].strip()
                if v == "":
                    raise SpecError(f"{path}: line {line_no}: field {name!r} is empty")
                return v

            arrival = rows.number(line_no, names_used["arrival"],
                                  cell(col["arrival"], names_used["arrival"]), 0.0,
                                  schema.MAX_TRACE_MS / 1000.0)
            inp = rows.integer(line_no, names_used["input"],
                               cell(col["input"], names_used["input"]), 1, schema.MAX_TOKENS)
            out = rows.integer(line_no, names_used["output"],
                               cell(col["output"], names_used["output"]), 0, schema.MAX_TOKENS)
            cls = "default"
            if cls_i is not None:
                cls = cell(cls_i, "class")
            hashes: list[int] = []
            if hash_i is not None and rec[hash_i].strip():
                for tok in rec[hash_i].split():
                    try:
                        hashes.append(int(tok))
                        if not -2**63 <= hashes[-1] < 2**63:
                            raise ValueError(tok)
                    except ValueError:
                        raise rows.fail(line_no, "hash_ids", rec[hash_i].strip(),
                                        "must be space-separated 64-bit integers") from None
            rows.add(line_no, arrival, inp, out, cls, hashes, block_tokens, "hash_ids")
    return rows.trace(block_tokens)


def load_trace(path: str | os.PathLike, *, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Trace:
    """Read a request trace file into a :class:`Trace` (sorted by arrival).

    ``.jsonl``: the public Mooncake format, one object per line with ``timestamp`` [ms],
    ``input_length``, ``output_length``, ``hash_ids`` (KV block ids, optional) and optionally
    ``class``. ``.csv``: columns ``arrival_s`` or ``arrived_at`` [s], ``input_tokens`` or
    ``num_prefill_tokens``, ``output_tokens`` or ``num_decode_tokens`` (Vidur/Splitwise),
    optional ``class`` and ``hash_ids`` (space-separated).

    Chain items are the FULL blocks of ``hash_ids`` (``block_tokens`` each; 512 in Mooncake's
    traces); tokens past the last full block are the request's own and never reusable;
    ``own_item`` is -1. A malformed file raises :class:`SpecError` naming the file, line,
    field and value. Per-class acceptance rate and expert skew are NaN: set them with
    :meth:`Trace.with_class_params`.
    """
    _check_int("load_trace", "block_tokens", block_tokens, 1)
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise SpecError(f"{p}: unknown trace format {p.suffix!r}; use .jsonl (Mooncake) or "
                        ".csv (arrival_s, input_tokens, output_tokens)")
    if not p.is_file():
        raise SpecError(f"{p}: {'is a folder, not a trace file' if p.is_dir() else 'file not found'}")
    try:
        return _load_jsonl(p, block_tokens) if suffix == ".jsonl" else _load_csv(p, block_tokens)
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: not a UTF-8 text file (byte {exc.start}: {exc.reason})") from None
    except csv.Error as exc:
        raise SpecError(f"{p}: malformed CSV ({exc})") from None
