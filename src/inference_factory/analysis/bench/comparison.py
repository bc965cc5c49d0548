"""Predicted vs measured benchmark runs (``bench --compare``): like with like only.

A measured run is scored against the prediction only where every identifying field the run's
file states agrees with the prediction: the concurrency (always stated: the reader requires
it), ISL and OSL, the range ratio, the model, the device, the precision, the GPU count and
the deployment shape (tp/dp/ep, pools). A field the file does not state is not checked (a
vLLM file says nothing of its device unless ``--metadata hardware=...`` was given), except the
GPU count, which a comparison needs (``--num-gpus`` or ``--metadata num_gpus=N``). A run that
differs is listed with its reasons (``reason``) and never scored: its predicted and error
cells are empty and the summary leaves it out (docs/BENCH.md).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pandas as pd

from ...errors import SpecError
from ...units import PRECISIONS

#: Metrics :func:`compare_results` compares (the first: per GPU, or total when GPUs unknown).
METRICS = ("total_token_throughput_per_gpu", "output_throughput", "median_ttft_ms",
           "median_tpot_ms", "interactivity")
#: Identity a prediction carries in its ``attrs`` (bench's frame and Dataset) and checks.
IDENTITY = ("model", "hardware", "isl", "osl", "range_ratio", "precision", "deployment")


def _points(df: Any, what: str) -> pd.DataFrame:
    """A frame of points with a ``max_concurrency`` column: ``ds.to_dataframe()`` carries
    the concurrency as its index."""
    if not isinstance(df, pd.DataFrame):
        if hasattr(df, "to_dataframe"):
            attrs = dict(getattr(df, "attrs", {}))
            df = df.to_dataframe()
            df.attrs.update(attrs)
        elif isinstance(df, list):
            df = pd.DataFrame(df)
        else:
            raise SpecError(f"{what}: expected a DataFrame, a Dataset or a list of points; "
                            f"got {type(df).__name__}")
    attrs = dict(df.attrs)
    if "max_concurrency" not in df.columns:
        if "concurrency" not in df.columns and "concurrency" in (df.index.names or []):
            df = df.reset_index()
        if "concurrency" not in df.columns:
            raise SpecError(f"{what}: no max_concurrency (or concurrency) column; columns: "
                            f"{list(df.columns)[:12]}")
        df = df.assign(max_concurrency=df["concurrency"])
    df = df.reset_index(drop=True)
    df.attrs.update(attrs)
    return df


def abs_ln_error(predicted: Any, measured: Any) -> np.ndarray:
    """|ln(predicted / measured)|: the symmetric error of a ratio (0 = equal; 0.1 ~ 10 %);
    NaN where either side is missing, zero or negative."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    ok = (p > 0) & (m > 0) & np.isfinite(p) & np.isfinite(m)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(ok, np.abs(np.log(p / m)), np.nan)


# ---- like with like ------------------------------------------------------------------------

def _stated(v: Any) -> bool:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return False
    return not (isinstance(v, str) and not v.strip())


def _spec_name(name: str, load: Callable[[str], Any], prefix: bool) -> str | None:
    """The catalogue's name for a file's model or device string: the string itself, its last
    path part (``deepseek-ai/DeepSeek-R1-0528``, ``/models/Llama-3.1-70B``) or, for a device,
    its part before the first dash (InferenceX's runner names: ``b200-dgxc``, ``h200-multinode``);
    None where none of those is known."""
    s = str(name).strip()
    tries = [s, s.rstrip("/").rsplit("/", 1)[-1]]
    if prefix:
        tries.append(tries[-1].split("-")[0].split("_")[0])
    for t in dict.fromkeys(tries):
        if not t:
            continue
        try:
            return load(t).name
        except SpecError:
            continue
    return None


def _precision(s: str) -> str:
    """A file's precision label as this project's name (``nvfp4``/``mxfp4`` -> ``fp4``)."""
    t = str(s).strip().lower()
    for pre in ("nv", "mx", "e4m3", "w"):
        if t.startswith(pre) and t[len(pre):] in PRECISIONS:
            return t[len(pre):]
    return t


def _shape(label: str) -> str:
    """A deployment label in one spelling: InferenceX's pools join with `` x ``, bench's
    with `` + ``; ``tp1`` and ``pp1`` say nothing."""
    parts = str(label).replace(" x ", " + ").split(" + ")
    return " + ".join(" ".join(t for t in p.split() if t not in ("tp1", "pp1")) for p in parts)


def _number(v: float) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def mismatch(row: pd.Series, ident: dict[str, Any], pred_gpus: float) -> list[str]:
    """Why a measured run (a row of :func:`read_bench_results`) is not like the prediction
    (``ident``: its ``attrs``; ``pred_gpus`` its GPU count): one phrase per field the run
    states differently, empty when alike."""
    from ...specs import load_hardware, load_model

    out = []
    for key, label in (("isl", "ISL"), ("osl", "OSL")):
        if _stated(row.get(key)) and _stated(ident.get(key)) \
                and float(row[key]) != float(ident[key]):
            out.append(f"{label} {_number(row[key])} (predicted {_number(ident[key])})")
    rr = row.get("range_ratio")
    if _stated(rr) and _stated(ident.get("range_ratio")) \
            and abs(float(rr) - float(ident["range_ratio"])) > 1e-9:
        out.append(f"range ratio {_number(rr)} (predicted {_number(ident['range_ratio'])})")
    for key, load, prefix in (("model", load_model, False), ("hardware", load_hardware, True)):
        if _stated(row.get(key)) and _stated(ident.get(key)):
            got = _spec_name(row[key], load, prefix)
            what = "device" if key == "hardware" else key
            if got is None:
                out.append(f"{what} {row[key]!r} not in the catalogue (predicted "
                           f"{ident[key]})")
            elif got != ident[key]:
                out.append(f"{what} {got} (predicted {ident[key]})")
    if _stated(row.get("precision")) and _stated(ident.get("precision")) \
            and _precision(row["precision"]) != ident["precision"]:
        out.append(f"precision {row['precision']} (predicted {ident['precision']})")
    n = row.get("num_gpus")
    if _stated(n) and np.isfinite(pred_gpus) and float(n) != pred_gpus:
        out.append(f"{_number(n)} GPUs (predicted {_number(pred_gpus)})")
    if _stated(row.get("deployment")) and _stated(ident.get("deployment")) \
            and _shape(row["deployment"]) != _shape(ident["deployment"]):
        out.append(f"deployment {row['deployment']} (predicted {ident['deployment']})")
    return out


# ---- the comparison ------------------------------------------------------------------------

def compare_results(predicted: Any, measured: pd.DataFrame) -> pd.DataFrame:
    """Predicted vs measured per benchmark point, one row per measured run.

    ``predicted`` is one deployment's prediction (``bench(..., as_frame=True)``, its Dataset
    or its list of points; a key given twice there is a SpecError); its ``attrs`` (model,
    hardware, isl, osl, range_ratio, precision, deployment) are what a measured run must
    agree with where the run states them (module docstring). Rows match on
    ``max_concurrency``, and on ``isl``/``osl`` where both frames carry them for every row.
    Columns: the key columns, ``matched``, ``reason`` (why a run is not scored: empty when
    matched), ``source``, ``model``, ``hardware``, ``framework``, ``precision`` and
    ``deployment`` of the measured run where it has them, then for each metric ``M`` of
    :data:`METRICS` ``M_predicted``, ``M_measured``, ``M_abs_ln`` (empty on an unmatched
    row). The throughput metric is ``total_token_throughput_per_gpu`` when both sides know
    it, else ``total_token_throughput`` (``df.attrs["throughput_metric"]``).

    A measured run without a GPU count, compared with a prediction that has one, is a
    SpecError naming the field (the per-GPU throughput and the deployment cannot be told)."""
    pred, meas = _points(predicted, "predicted"), _points(measured, "measured")
    ident = {k: pred.attrs.get(k) for k in IDENTITY}
    keys = ["max_concurrency"] + [k for k in ("isl", "osl") if k in pred and k in meas
                                  and pred[k].notna().all() and meas[k].notna().all()]
    if pred.duplicated(keys).any():
        dup = pred.loc[pred.duplicated(keys), keys].iloc[0].to_dict()
        raise SpecError(f"predicted: the point {dup} appears twice; compare one deployment "
                        "at a time")
    pred_gpus = (float(pred["num_gpus"].iloc[0]) if "num_gpus" in pred and len(pred)
                 else math.nan)
    if np.isfinite(pred_gpus) and "num_gpus" in meas and meas["num_gpus"].isna().any():
        src = meas.loc[meas["num_gpus"].isna()].iloc[0].get("source", "measured")
        raise SpecError(f"{src}: field 'num_gpus' is missing: the run's GPU count is needed to "
                        f"compare it with a prediction on {pred_gpus:g} GPUs; give --num-gpus "
                        "N or run vllm bench serve with --metadata num_gpus=N")
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
    shown = [c for c in ("source", "model", "hardware", "framework", "precision",
                         "deployment") if c in meas]
    carried = [c for c in ("isl", "osl", "range_ratio", "num_gpus") if c in meas and c not in keys]
    base = pd.concat([m_keys, meas[shown], meas[carried]], axis=1)
    for m in metrics:
        base[m] = meas[m].astype(float) if m in meas else np.nan
    merged = base.merge(p, on=keys, how="left", suffixes=("_measured", "_predicted"),
                        indicator=True)
    found = (merged["_merge"] == "both").to_numpy()
    concs = set(p["max_concurrency"])
    reasons = []
    for i, row in merged.iterrows():
        why = mismatch(row, ident, pred_gpus)
        if not found[i]:
            c = row["max_concurrency"]
            why = ([f"concurrency {c:g} not predicted"] if c not in concs else []) + (
                why or [f"{k} {_number(row[k])} not predicted" for k in keys[1:]])
        reasons.append("; ".join(why))
    out = merged[keys].copy()
    out["matched"] = np.array([not r for r in reasons])
    out["reason"] = reasons
    for c in shown:
        out[c] = merged[c]
    for m in metrics:
        out[f"{m}_predicted"] = merged[f"{m}_predicted"].where(out["matched"])
        out[f"{m}_measured"] = merged[f"{m}_measured"]
        out[f"{m}_abs_ln"] = abs_ln_error(out[f"{m}_predicted"], out[f"{m}_measured"])
    out = out.sort_values(keys, kind="stable").reset_index(drop=True)
    out.attrs["throughput_metric"] = thr
    out.attrs["keys"] = keys
    out.attrs["prediction"] = {k: v for k, v in ident.items() if _stated(v)}
    return out


def summarize_comparison(df: pd.DataFrame) -> dict[str, Any]:
    """Summary of :func:`compare_results`: ``{"n_points": matched rows, "n_unmatched": int,
    "unmatched_concurrency": [...], "unmatched": [{"source", "max_concurrency", "reason"}], "throughput_metric": name, "metrics": {M: {"n",
    "median_abs_ln", "worst_abs_ln", "worst_at_concurrency", "geomean_ratio"}}}`` where
    ``geomean_ratio`` = exp(mean ln(predicted / measured)) (> 1: the model is optimistic for
    a throughput, pessimistic for a latency). Each metric counts the matched rows where both
    sides are positive numbers; NaN where there are none."""
    matched = df[df["matched"]] if "matched" in df else df
    unmatched = df[~df["matched"]] if "matched" in df else df.iloc[:0]
    out: dict[str, Any] = {
        "n_points": len(matched), "n_unmatched": len(unmatched),
        "unmatched_concurrency": [float(v) for v in unmatched.get("max_concurrency", [])],
        "unmatched": [{"source": r.get("source"), "max_concurrency": float(r["max_concurrency"]),
                       "reason": r.get("reason", "")} for _, r in unmatched.iterrows()],
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
