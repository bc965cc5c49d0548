"""Measured serving-benchmark results in, predicted vs measured out (``bench --compare``).

Two file formats are read (one JSON object per run; a file may also hold a JSON list of them,
or be JSON Lines; a folder means every ``*.json`` and ``*.jsonl`` in it):

- **vLLM** ``vllm bench serve --save-result`` (and InferenceX's copy,
  ``utils/bench_serving/benchmark_serving.py``, ``IMAX_REPO``): throughputs in req/s and tok/s,
  latency statistics ``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`` in ms, ``--metadata
  KEY=VALUE`` pairs at the top level (strings; ``num_gpus``, ``hardware``, ``isl``, ``osl``,
  ``tp``, ``ep``... are read from them). The file does not say how many GPUs served it:
  ``num_gpus`` comes from its metadata or the ``num_gpus`` argument, else it is unknown (NaN).
- **InferenceX processed** (``agg_*.json``, written by ``utils/process_result.py``). Its lines
  that define the fields read here::

      num_gpus = tp_size * pp * pcp_size                                   # single node
      'tput_per_gpu': float(bmk_result['total_token_throughput']) / num_gpus,
      'output_tput_per_gpu': float(bmk_result['output_throughput']) / num_gpus,
      total_gpus = prefill_gpus + decode_gpus                              # multinode
      output_tput_denominator = decode_gpus if decode_gpus > 0 else total_gpus
      'tput_per_gpu': float(bmk_result['total_token_throughput']) / total_gpus,
      'output_tput_per_gpu': float(bmk_result['output_throughput']) / output_tput_denominator,
      'input_tput_per_gpu': (... total - output ...) / prefill_gpus,
      for key, value in bmk_result.items():
          if key.endswith('ms'):
              data[key.replace('_ms', '')] = float(value) / 1000.0
          if 'tpot' in key:
              data[key.replace('_ms', '').replace('tpot', 'intvty')] = 1000.0 / float(value)

  So its latencies (``median_ttft``...) are in **seconds**, ``median_intvty`` = 1000 /
  ``median_tpot_ms`` (tok/s/user), throughput is stored per GPU only, and a multinode
  ``output_tput_per_gpu`` is per *decode* GPU. Older files (before ``pp``/``pcp_size``
  existed) divided by ``tp`` alone, which the same formula gives with pp = pcp = 1.

The frame :func:`read_bench_results` returns uses vLLM's names and units (ms, tok/s, req/s);
``total_token_throughput_per_gpu`` and ``output_throughput_per_gpu`` divide by *all* GPUs
(InferenceX's ``tput_per_gpu``; a multinode run also gets ``output_throughput_per_decode_gpu``,
InferenceX's ``output_tput_per_gpu``); ``interactivity`` = 1000 / ``median_tpot_ms``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...errors import SpecError, show

#: Columns every frame of :func:`read_bench_results` has, in order (NaN/None where unknown).
COLUMNS = ("source", "format", "model", "hardware", "framework", "precision", "deployment",
           "isl", "osl", "max_concurrency", "num_gpus", "num_prompts", "completed", "duration",
           "request_throughput", "output_throughput", "total_token_throughput",
           "total_input_tokens", "total_output_tokens", "total_token_throughput_per_gpu",
           "output_throughput_per_gpu", "interactivity",
           *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
             for s in ("mean", "median", "std", "p99")))
#: Identifying fields copied when a record carries them (after the columns above).
IDENTITY = ("range_ratio", "backend", "date", "spec_decoding", "disagg", "is_multinode", "tp", "pp", "ep",
            "dp_attention", "dcp_size", "pcp_size", "prefill_num_workers", "prefill_tp",
            "prefill_ep", "prefill_dp_attention", "num_prefill_gpu", "decode_num_workers",
            "decode_tp", "decode_ep", "decode_dp_attention", "num_decode_gpu",
            "output_throughput_per_decode_gpu", "request_rate", "burstiness", "request_goodput")
_STAT = r"(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)"
_VLLM_STAT = re.compile(_STAT + r"_ms$")
_IFX_STAT = re.compile(_STAT + r"$")
_VLLM_NEEDS = ("completed", "duration", "output_throughput", "total_token_throughput",
               "max_concurrency", "median_ttft_ms")
_IFX_NEEDS = ("conc", "tput_per_gpu", "output_tput_per_gpu", "median_ttft")
_WHY_CONCURRENCY = (" (vllm bench serve --max-concurrency N: a prediction is matched on the "
                    "number of requests in flight; an open-loop --request-rate run without it "
                    "has no closed-loop counterpart)")


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------


#: Largest whole number a result file may give (2**53: every integer up to it is exact as a
#: float, and far beyond any count of tokens, prompts or GPUs a benchmark reports).
MAX_WHOLE = 2 ** 53
#: Fields that count GPUs or parallel degrees: whole numbers >= 1 where a file states them
#: (``tp = 0`` divides the throughput by zero GPUs).
AT_LEAST_ONE = ("num_gpus", "tp", "pp", "ep", "dcp_size", "pcp_size", "prefill_tp",
                "prefill_ep", "decode_tp", "decode_ep", "max_concurrency", "conc")
#: Measured figures a comparison scores: positive where a file states them (a zero
#: throughput or TTFT is a failed run, not a measurement).
POSITIVE = ("output_throughput", "total_token_throughput", "tput_per_gpu",
            "output_tput_per_gpu", "median_ttft_ms", "median_ttft")


def _num(rec: dict, key: str, where: str, *, required: bool = False, integer: bool = False,
         text_ok: bool = False, why: str = "") -> float:
    """``rec[key]`` as a finite float >= 0 (> 0 for :data:`POSITIVE`, a whole number >= 1 for
    :data:`AT_LEAST_ONE`; NaN when absent or null and not ``required``); a string is read as a
    number only where ``text_ok`` (``--metadata`` values are strings)."""
    v = rec.get(key)
    if v is None:
        if required:
            raise SpecError(f"{where}: field {key!r} is missing{why or ''}; a result needs "
                            f"{', '.join(_VLLM_NEEDS if 'conc' not in rec else _IFX_NEEDS)}")
        return math.nan
    x = v
    if isinstance(v, str) and (text_ok or v.strip().lower() == "inf"):
        try:
            x = float(v)
        except ValueError:
            x = None
    lo = 1 if key in AT_LEAST_ONE else 0
    kind = (f"a whole number in [{lo}, {MAX_WHOLE}]" if integer else
            "a number > 0" if key in POSITIVE else "a number >= 0")
    try:
        f = float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
    except OverflowError:          # an integer too large for a float
        f = None
    if f is None or math.isnan(f) or f < lo or (key in POSITIVE and f <= 0) or (
            math.isinf(f) and key != "request_rate") or (
            integer and (not f.is_integer() or f > MAX_WHOLE or (
                isinstance(x, int) and x > MAX_WHOLE))):
        raise SpecError(f"{where}: field {key!r} = {show(v)} must be {kind}")
    return f


def _range_ratio(rec: dict, where: str) -> float:
    """The run's range ratio where it states one (``--metadata range_ratio=0.8``, or
    ``random_range_ratio`` as vLLM's ``--random-range-ratio``), else NaN."""
    for key in ("range_ratio", "random_range_ratio"):
        if rec.get(key) is not None:
            x = _num(rec, key, where, text_ok=True)
            if x > 1:
                raise SpecError(f"{where}: field {key!r} = {show(rec[key])} must be a fraction "
                                "in [0, 1]")
            return x
    return math.nan


def _flag(v: Any) -> Any:
    """InferenceX's DP_ATTENTION / DISAGG strings ('true'/'false') as booleans."""
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0"):
        return v.strip().lower() in ("true", "1")
    return v


def _shape(tp: float, ep: float, dp_attention: Any, pp: float = 1.0) -> str:
    """``tp4 ep4``; attention data-parallel over the TP group reads ``dp8 ep8``."""
    if not np.isfinite(tp):
        return ""
    parts = [f"dp{int(tp)}" if _flag(dp_attention) is True else f"tp{int(tp)}"]
    parts += [f"pp{int(pp)}"] if np.isfinite(pp) and pp > 1 else []
    parts += [f"ep{int(ep)}"] if np.isfinite(ep) and ep > 1 else []
    return " ".join(parts)


def _vllm_row(rec: dict, where: str) -> dict[str, Any]:
    row: dict[str, Any] = {"format": "vllm", "model": rec.get("model_id"),
                           "hardware": rec.get("hardware", rec.get("hw"))}
    for k in _VLLM_NEEDS[:4]:
        row[k] = _num(rec, k, where, required=True, integer=k == "completed")
    for k in ("request_throughput", "total_input_tokens", "total_output_tokens", "burstiness",
              "request_rate"):
        row[k] = _num(rec, k, where, integer=k.startswith("total_"))
    row["num_prompts"] = _num(rec, "num_prompts", where, integer=True)
    row["max_concurrency"] = _num(rec, "max_concurrency", where, required=True, integer=True,
                                  why=_WHY_CONCURRENCY)
    _num(rec, "median_ttft_ms", where, required=True)
    row["range_ratio"] = _range_ratio(rec, where)
    # InferenceX's copy writes the key with a stray colon ("request_goodput:")
    row["request_goodput"] = _num({"request_goodput": rec.get(
        "request_goodput", rec.get("request_goodput:"))}, "request_goodput", where)
    for k in rec:
        if _VLLM_STAT.match(k):
            row[k] = _num(rec, k, where)
    for k in ("framework", "precision", "backend", "date"):
        if isinstance(rec.get(k), str):
            row[k] = rec[k]
    for k in ("num_gpus", "isl", "osl", "tp", "ep", "pp"):      # --metadata KEY=VALUE
        if rec.get(k) is not None:
            row[k] = _num(rec, k, where, integer=True, text_ok=True)
    if "dp_attention" in rec:
        row["dp_attention"] = _flag(rec["dp_attention"])
    if "tp" in row:
        row["deployment"] = _shape(row["tp"], row.get("ep", math.nan), row.get("dp_attention"),
                                   row.get("pp", 1.0))
    return row


def _ifx_row(rec: dict, where: str) -> dict[str, Any]:
    row: dict[str, Any] = {"format": "inferencex", "model": rec.get("model"),
                           "hardware": rec.get("hw")}
    for k in ("framework", "precision", "spec_decoding", "image"):
        if isinstance(rec.get(k), str):
            row[k] = rec[k]
    for k in ("disagg", "is_multinode", "dp_attention", "prefill_dp_attention",
              "decode_dp_attention"):
        if k in rec:
            row[k] = _flag(rec[k])
    row["max_concurrency"] = _num(rec, "conc", where, required=True, integer=True)
    row["range_ratio"] = _range_ratio(rec, where)
    for k in ("isl", "osl", "tp", "pp", "ep", "dcp_size", "pcp_size", "prefill_num_workers",
              "prefill_tp", "prefill_ep", "num_prefill_gpu", "decode_num_workers", "decode_tp",
              "decode_ep", "num_decode_gpu"):
        if k in rec:
            row[k] = _num(rec, k, where, integer=True)
    tput = _num(rec, "tput_per_gpu", where, required=True)
    out = _num(rec, "output_tput_per_gpu", where, required=True)
    _num(rec, "median_ttft", where, required=True)
    if row.get("is_multinode") is True or "num_decode_gpu" in row:
        p, d = row.get("num_prefill_gpu", math.nan), row.get("num_decode_gpu", math.nan)
        n = p + d
        out_gpus = d if d > 0 else n
        row["output_throughput_per_decode_gpu"] = out
        row["deployment"] = " x ".join(
            f"{int(row.get(f'{r}_num_workers', 1))}{r[0]}:" + _shape(
                row.get(f"{r}_tp", math.nan), row.get(f"{r}_ep", math.nan),
                row.get(f"{r}_dp_attention")) for r in ("prefill", "decode"))
    else:
        tp = row.get("tp", math.nan)
        n = tp * row.get("pp", 1.0) * row.get("pcp_size", 1.0)
        out_gpus = n
        row["deployment"] = _shape(tp, row.get("ep", math.nan), row.get("dp_attention"),
                                   row.get("pp", 1.0))
    row["num_gpus"] = n
    row["total_token_throughput"] = tput * n
    row["output_throughput"] = out * out_gpus
    for k in rec:
        m = _IFX_STAT.match(k)
        if m:
            row[f"{k}_ms"] = _num(rec, k, where) * 1000.0
    if "median_intvty" in rec:
        row["interactivity"] = _num(rec, "median_intvty", where)
    return row


def _record(rec: Any, where: str, num_gpus: float) -> dict[str, Any] | None:
    """One run as a row; None for a JSON object of neither format (skipped in folders)."""
    if not isinstance(rec, dict):
        raise SpecError(f"{where}: a result is a JSON object; got {type(rec).__name__} "
                        f"{show(rec, 40)}")
    if "tput_per_gpu" in rec or "conc" in rec:
        row = _ifx_row(rec, where)
    elif "total_token_throughput" in rec:
        row = _vllm_row(rec, where)
    else:
        return None
    if row["format"] == "vllm" and not np.isfinite(row.get("num_gpus", math.nan)) and num_gpus:
        row["num_gpus"] = float(num_gpus)
    n = row.get("num_gpus", math.nan)
    if np.isfinite(n) and n <= 0:
        raise SpecError(f"{where}: num_gpus = {show(n)} must be a whole number >= 1")
    row["total_token_throughput_per_gpu"] = row["total_token_throughput"] / n
    row["output_throughput_per_gpu"] = row["output_throughput"] / n
    tpot = row.get("median_tpot_ms", math.nan)
    if "interactivity" not in row:
        row["interactivity"] = 1000.0 / tpot if tpot > 0 else math.nan
    return row


#: Deepest nesting of arrays and objects a result file may have (vLLM's and InferenceX's
#: records nest two levels; Python's parser would exhaust its stack near 1,000).
MAX_DEPTH = 64


def _json(text: str, where: str) -> Any:
    """``json.loads(text)``, refusing (one line) nesting deeper than :data:`MAX_DEPTH` and
    integers too long to read, which the parser would answer with a RecursionError or a
    ValueError."""
    depth = top = 0
    for ch in re.findall(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        if ch in "[{":
            depth += 1
            top = max(top, depth)
            if top > MAX_DEPTH:
                raise SpecError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels; a "
                                "result is a flat JSON object (or a list of them)")
        elif ch in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        raise SpecError(f"{where}: a number in the file is out of range ({exc}); result "
                        "fields are numbers below 2**53") from None


def _load(path: Path) -> list[tuple[Any, str]]:
    """(object, where) for each run in one file: a JSON object or list, or JSON Lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") \
            from None
    lines = [(i + 1, s) for i, s in enumerate(text.splitlines()) if s.strip()]
    try:
        obj = _json(text, str(path))
    except json.JSONDecodeError as exc:
        if path.suffix.lower() != ".jsonl" and len(lines) < 2:
            raise SpecError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column "
                            f"{exc.colno}); a result file is vLLM's --save-result JSON, "
                            "InferenceX's processed JSON, a list of them or JSON Lines") from None
        out = []
        for n, s in lines:
            try:
                out.append((_json(s, f"{path} line {n}"), f"{path} line {n}"))
            except json.JSONDecodeError as e:
                raise SpecError(f"{path} line {n}: not valid JSON ({e.msg} at column "
                                f"{e.colno})") from None
        return out
    if isinstance(obj, list):
        return [(o, f"{path} item {i}") for i, o in enumerate(obj)]
    return [(obj, str(path))]


def _files(paths: Iterable[str | os.PathLike]) -> list[tuple[Path, bool]]:
    """(file, named explicitly) for each path; a folder gives its *.json/*.jsonl, sorted."""
    out = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(q for q in p.iterdir()
                           if q.is_file() and q.suffix.lower() in (".json", ".jsonl"))
            if not found:
                raise SpecError(f"--compare {p}: the folder holds no *.json or *.jsonl file")
            out += [(q, False) for q in found]
        elif p.is_file():
            out.append((p, True))
        else:
            raise SpecError(f"--compare {p}: no such file or folder")
    return out


def read_bench_results(paths: str | os.PathLike | Iterable[str | os.PathLike], *,
                       num_gpus: int | None = None) -> pd.DataFrame:
    """Measured benchmark runs, one row each, from vLLM ``--save-result`` files and
    InferenceX processed files (formats: module docstring).

    ``paths``: a file, a folder (its ``*.json``/``*.jsonl``) or a list of them. ``num_gpus``
    fills in the GPU count of runs whose file does not give it (vLLM files). Columns:
    :data:`COLUMNS` always, then those of :data:`IDENTITY` and the further latency
    percentiles (``p90_ttft_ms``, ``p99.9_itl_ms``...) that some run carries. In a folder, a
    JSON file of neither format (e.g. InferenceX's ``power_validation_*.json``) is skipped and
    named in ``df.attrs["skipped"]``, and a vLLM file ``NAME.json`` beside its processed
    ``agg_NAME.json`` is read once, from the processed file (which knows the GPU count).
    A bad file is a one-line :class:`SpecError` naming the file, the field and the value."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if num_gpus is not None and (isinstance(num_gpus, bool) or not isinstance(num_gpus, int)
                                 or num_gpus < 1):
        raise SpecError(f"--num-gpus {show(num_gpus)} must be a whole number >= 1")
    files = _files(paths)
    processed = {q.name.removeprefix("agg_") for q, _ in files if q.name.startswith("agg_")}
    rows, skipped = [], []
    for path, named in files:
        if not named and path.name in processed and not path.name.startswith("agg_"):
            skipped.append(str(path))
            continue
        for obj, where in _load(path):
            row = _record(obj, where, num_gpus or 0)
            if row is None:
                if named:
                    raise SpecError(f"{where}: neither a vLLM --save-result record (needs "
                                    f"{', '.join(_VLLM_NEEDS)}) nor an InferenceX processed "
                                    f"record (needs {', '.join(_IFX_NEEDS)})")
                skipped.append(where)
                continue
            row["source"] = where
            rows.append(row)
    if not rows:
        raise SpecError(f"--compare {', '.join(str(p) for p, _ in files)}: no benchmark result "
                        "found (vLLM --save-result or InferenceX processed JSON)")
    extra = sorted({k for r in rows for k in r if _VLLM_STAT.match(k)} - set(COLUMNS),
                   key=_stat_order)
    ident = [k for k in IDENTITY if any(k in r for r in rows)]
    df = pd.DataFrame(rows).reindex(columns=[*COLUMNS, *ident, *extra])
    df.attrs["skipped"] = skipped
    return df


def _stat_order(name: str) -> tuple:
    s, m = _VLLM_STAT.match(name).groups()
    return (("ttft", "tpot", "itl", "e2el").index(m), float(s[1:]) if s[0] == "p" else -1.0, s)

