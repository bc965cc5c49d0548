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
IDENTITY = ("backend", "date", "spec_decoding", "disagg", "is_multinode", "tp", "pp", "ep",
            "dp_attention", "dcp_size", "pcp_size", "prefill_num_workers", "prefill_tp",
            "prefill_ep", "prefill_dp_attention", "num_prefill_gpu", "decode_num_workers",
            "decode_tp", "decode_ep", "decode_dp_attention", "num_decode_gpu",
            "output_throughput_per_decode_gpu", "request_rate", "burstiness", "request_goodput")
#: Metrics :func:`compare_results` compares (the first: per GPU, or total when GPUs unknown).
METRICS = ("total_token_throughput_per_gpu", "output_throughput", "median_ttft_ms",
           "median_tpot_ms", "interactivity")
_STAT = r"(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)"
_VLLM_STAT = re.compile(_STAT + r"_ms$")
_IFX_STAT = re.compile(_STAT + r"$")
_VLLM_NEEDS = ("completed", "duration", "output_throughput", "total_token_throughput")
_IFX_NEEDS = ("conc", "tput_per_gpu", "output_tput_per_gpu")


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------


def _num(rec: dict, key: str, where: str, *, required: bool = False, integer: bool = False,
         text_ok: bool = False) -> float:
    """``rec[key]`` as a float >= 0 (NaN when absent or null and not ``required``); a string
    is read as a number only where ``text_ok`` (``--metadata`` values are strings)."""
    v = rec.get(key)
    if v is None:
        if required:
            raise SpecError(f"{where}: field {key!r} is missing; a result needs "
                            f"{', '.join(_VLLM_NEEDS if 'conc' not in rec else _IFX_NEEDS)}")
        return math.nan
    x = v
    if isinstance(v, str) and (text_ok or v.strip().lower() == "inf"):
        try:
            x = float(v)
        except ValueError:
            x = None
    kind = "a whole number" if integer else "a number"
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x) or x < 0 or (
            math.isinf(x) and key != "request_rate") or (integer and x != int(x)):
        raise SpecError(f"{where}: field {key!r} = {show(v)} must be {kind} >= 0")
    return float(x)


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
    for k in _VLLM_NEEDS:
        row[k] = _num(rec, k, where, required=True, integer=k == "completed")
    for k in ("request_throughput", "total_input_tokens", "total_output_tokens", "burstiness",
              "request_rate"):
        row[k] = _num(rec, k, where, integer=k.startswith("total_"))
    row["num_prompts"] = _num(rec, "num_prompts", where, integer=True)
    row["max_concurrency"] = _num(rec, "max_concurrency", where, integer=True)
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
    for k in ("isl", "osl", "tp", "pp", "ep", "dcp_size", "pcp_size", "prefill_num_workers",
              "prefill_tp", "prefill_ep", "num_prefill_gpu", "decode_num_workers", "decode_tp",
              "decode_ep", "num_decode_gpu"):
        if k in rec:
            row[k] = _num(rec, k, where, integer=True)
    tput = _num(rec, "tput_per_gpu", where, required=True)
    out = _num(rec, "output_tput_per_gpu", where, required=True)
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


def _load(path: Path) -> list[tuple[Any, str]]:
    """(object, where) for each run in one file: a JSON object or list, or JSON Lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") \
            from None
    lines = [(i + 1, s) for i, s in enumerate(text.splitlines()) if s.strip()]
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        if path.suffix.lower() != ".jsonl" and len(lines) < 2:
            raise SpecError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column "
                            f"{exc.colno}); a result file is vLLM's --save-result JSON, "
                            "InferenceX's processed JSON, a list of them or JSON Lines") from None
        out = []
        for n, s in lines:
            try:
                out.append((json.loads(s), f"{path} line {n}"))
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


# --------------------------------------------------------------------------------------------
# comparing
# --------------------------------------------------------------------------------------------


def _points(df: pd.DataFrame, what: str) -> pd.DataFrame:
    """A frame of points with a ``max_concurrency`` column: ``ds.to_dataframe()`` carries
    the concurrency as its index."""
    if not isinstance(df, pd.DataFrame):
        if hasattr(df, "to_dataframe"):
            df = df.to_dataframe()
        elif isinstance(df, list):
            df = pd.DataFrame(df)
        else:
            raise SpecError(f"{what}: expected a DataFrame, a Dataset or a list of points; "
                            f"got {type(df).__name__}")
    if "max_concurrency" not in df.columns:
        if "concurrency" not in df.columns and "concurrency" in (df.index.names or []):
            df = df.reset_index()
        if "concurrency" not in df.columns:
            raise SpecError(f"{what}: no max_concurrency (or concurrency) column; columns: "
                            f"{list(df.columns)[:12]}")
        df = df.assign(max_concurrency=df["concurrency"])
    return df.reset_index(drop=True)


def abs_ln_error(predicted: Any, measured: Any) -> np.ndarray:
    """|ln(predicted / measured)|: the symmetric error of a ratio (0 = equal; 0.1 ~ 10 %);
    NaN where either side is missing, zero or negative."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    ok = (p > 0) & (m > 0) & np.isfinite(p) & np.isfinite(m)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(ok, np.abs(np.log(p / m)), np.nan)


def compare_results(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Predicted vs measured per benchmark point, one row per measured run.

    Rows match on ``max_concurrency``, and on ``isl``/``osl`` where both frames carry them
    for every row. ``predicted`` is one deployment's prediction (``ds.to_dataframe()`` of
    ``bench``, or its list of points): a key given twice there is a SpecError. Columns: the
    key columns, ``matched`` (False: no predicted point at this key; its predicted and |ln|
    cells are NaN, the row is kept), ``source``, ``model``, ``hardware``, ``framework`` and
    ``deployment`` of the measured run where it has them, then for each metric ``M`` of
    :data:`METRICS` ``M_predicted``, ``M_measured``, ``M_abs_ln``. The throughput metric is
    ``total_token_throughput_per_gpu`` when both sides know it for every measured row, else
    ``total_token_throughput`` (named in ``df.attrs["throughput_metric"]``)."""
    pred, meas = _points(predicted, "predicted"), _points(measured, "measured")
    keys = ["max_concurrency"] + [k for k in ("isl", "osl") if k in pred and k in meas
                                  and pred[k].notna().all() and meas[k].notna().all()]
    if pred.duplicated(keys).any():
        dup = pred.loc[pred.duplicated(keys), keys].iloc[0].to_dict()
        raise SpecError(f"predicted: the point {dup} appears twice; compare one deployment "
                        "at a time")
    if "interactivity" not in pred and "median_tpot_ms" in pred:
        pred = pred.assign(interactivity=1000.0 / pred["median_tpot_ms"].where(
            pred["median_tpot_ms"] > 0))
    per_gpu = "total_token_throughput_per_gpu"
    thr = per_gpu if per_gpu in pred and per_gpu in meas and meas[per_gpu].notna().all() \
        else "total_token_throughput"
    metrics = [thr, *METRICS[1:]]
    p = pred[keys].copy()
    for k in keys:
        p[k] = p[k].astype(float)
    for m in metrics:
        p[m] = pred[m].astype(float) if m in pred else np.nan
    m_keys = meas[keys].astype(float)
    ident = [c for c in ("source", "model", "hardware", "framework", "deployment") if c in meas]
    base = pd.concat([m_keys, meas[ident]], axis=1)
    for m in metrics:
        base[m] = meas[m].astype(float) if m in meas else np.nan
    merged = base.merge(p, on=keys, how="left", suffixes=("_measured", "_predicted"),
                        indicator=True)
    out = merged[keys].copy()
    out["matched"] = (merged["_merge"] == "both").to_numpy()
    for c in ident:
        out[c] = merged[c]
    for m in metrics:
        out[f"{m}_predicted"] = merged[f"{m}_predicted"]
        out[f"{m}_measured"] = merged[f"{m}_measured"]
        out[f"{m}_abs_ln"] = abs_ln_error(out[f"{m}_predicted"], out[f"{m}_measured"])
    out = out.sort_values(keys, kind="stable").reset_index(drop=True)
    out.attrs["throughput_metric"] = thr
    out.attrs["keys"] = keys
    return out


def summarize_comparison(df: pd.DataFrame) -> dict[str, Any]:
    """Summary of :func:`compare_results`: ``{"n_points": matched rows, "n_unmatched": int,
    "unmatched_concurrency": [...], "throughput_metric": name, "metrics": {M: {"n",
    "median_abs_ln", "worst_abs_ln", "worst_at_concurrency", "geomean_ratio"}}}`` where
    ``geomean_ratio`` = exp(mean ln(predicted / measured)) (> 1: the model is optimistic for
    a throughput, pessimistic for a latency). Each metric counts the matched rows where both
    sides are positive numbers; NaN where there are none."""
    matched = df[df["matched"]] if "matched" in df else df
    unmatched = df[~df["matched"]] if "matched" in df else df.iloc[:0]
    out: dict[str, Any] = {
        "n_points": len(matched), "n_unmatched": len(unmatched),
        "unmatched_concurrency": [float(v) for v in unmatched.get("max_concurrency", [])],
        "throughput_metric": df.attrs.get("throughput_metric"), "metrics": {}}
    for col in [c for c in df.columns if c.endswith("_abs_ln")]:
        m = col.removesuffix("_abs_ln")
        err = matched[col].to_numpy(dtype=float)
        ok = np.isfinite(err)
        ln = np.log(matched[f"{m}_predicted"].to_numpy(dtype=float)[ok]
                    / matched[f"{m}_measured"].to_numpy(dtype=float)[ok])
        worst = int(np.argmax(err[ok])) if ok.any() else None
        out["metrics"][m] = {
            "n": int(ok.sum()),
            "median_abs_ln": float(np.median(err[ok])) if ok.any() else math.nan,
            "worst_abs_ln": float(err[ok][worst]) if ok.any() else math.nan,
            "worst_at_concurrency": (float(matched["max_concurrency"].to_numpy()[ok][worst])
                                     if ok.any() else math.nan),
            "geomean_ratio": float(np.exp(ln.mean())) if ok.any() else math.nan}
    return out
