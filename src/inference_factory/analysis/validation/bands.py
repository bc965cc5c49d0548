"""Prediction bands: the spreads they are drawn from, the model-structure term and coverage.

The component band of an output comes from :mod:`..engine.uncertainty` (draws over the
measured spreads of ``configs/uncertainty.toml`` and the labelled assumption ranges). This
module holds what is computed *about* bands, not the physics:

* :func:`leave_one_out_residuals`: the signed ln error of a measured table's interpolation at
  its own left-out points (the measured spread of one op family on one device);
* :func:`robust_sigma_ln`: the normal standard deviation with the same median |residual|;
* :func:`conformal_widen_ln`: the model-structure term, split-conformal on how far the
  published figures of the development cases lie outside their component bands;
* :func:`coverage`: share of cases inside their band and the band's median width.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

#: median |x| / sigma of a normal variable (Phi^-1(0.75))
NORMAL_MAD = 0.6744897501960817


def leave_one_out_residuals(df: pd.DataFrame, fam) -> np.ndarray:
    """Signed ``ln(predicted / measured)`` of measured points predicted from their two
    neighbours along each interpolation axis (other coordinates fixed), the point itself left
    out: the engine's linear-in-ln interpolation of ln(measured / roofline) between shapes
    (the check of ``tests/engine/test_measured.py``, signed)."""
    keys = list(fam.exact) + list(fam.nearest) + list(fam.axes)
    df = df.groupby(keys, as_index=False)["log_ratio"].min()
    res = []
    for axis in fam.axes:
        others = [k for k in keys if k != axis]
        for _, grp in df.groupby(others) if others else [(None, df)]:
            if len(grp) < 3:
                continue
            grp = grp.sort_values(axis)
            x = np.log(grp[axis].to_numpy(dtype=float))
            y = grp["log_ratio"].to_numpy()
            w = (x[1:-1] - x[:-2]) / (x[2:] - x[:-2])
            res.append(y[:-2] + w * (y[2:] - y[:-2]) - y[1:-1])
    out = np.concatenate(res) if res else np.array([])
    return out[np.isfinite(out)]


def robust_sigma_ln(residuals: np.ndarray) -> float:
    """``median |r| / 0.6745``: the standard deviation of the normal variable with the same
    median absolute value (robust to the few kernel-choice jumps of a table)."""
    r = np.abs(np.asarray(residuals, dtype=float))
    return float(np.median(r) / NORMAL_MAD) if r.size else 0.0


def outside_ln(published, low, high) -> np.ndarray:
    """How far (ln) each published figure lies outside its band: 0 inside, else
    ``ln(low / y)`` below or ``ln(y / high)`` above (the conformity score)."""
    y, lo, hi = (np.asarray(a, dtype=float) for a in (published, low, high))
    return np.maximum(0.0, np.maximum(np.log(lo / y), np.log(y / hi)))


def conformal_widen_ln(scores, level: float = 0.8) -> float:
    """Split-conformal widening: the ``ceil((n + 1) level) / n`` empirical quantile of the
    scores (:func:`outside_ln`), so that a new case from the same population falls inside the
    band widened by it each side with probability >= ``level`` (exchangeability). With fewer
    than ``1 / (1 - level) - 1`` scores that quantile is beyond the data: the largest score is
    taken (labelled in the output: coverage not guaranteed)."""
    s = np.sort(np.asarray(scores, dtype=float))
    if s.size == 0:
        return 0.0
    k = math.ceil((s.size + 1) * level)
    return float(s[min(k, s.size) - 1])


def coverage(df: pd.DataFrame, low: str = "predicted_low", high: str = "predicted_high",
             truth: str = "published") -> dict[str, Any]:
    """Cases, share inside the band, median width ``high / low`` (and median ln width)."""
    y, lo, hi = (df[c].to_numpy(dtype=float) for c in (truth, low, high))
    inside = (y >= lo) & (y <= hi)
    width = hi / lo
    return {"n_cases": int(y.size), "coverage": float(np.mean(inside)) if y.size else math.nan,
            "median_width": float(np.median(width)) if y.size else math.nan}


def coverage_table(results: pd.DataFrame, groups: Mapping[str, str]) -> dict[str, dict]:
    """:func:`coverage` overall and per value of each grouping column (name -> column)."""
    out = {"all": {"component": coverage(results, "component_low", "component_high"),
                   "total": coverage(results)}}
    for name, col in groups.items():
        for k, g in results.groupby(col, sort=True):
            out[f"{name} {k}"] = {"component": coverage(g, "component_low", "component_high"),
                                  "total": coverage(g)}
    return out


# --------------------------------------------------------------------------------------------
# validation cases
# --------------------------------------------------------------------------------------------


def case_band(c: Mapping[str, Any], kw: Mapping[str, Any], res: Mapping[str, Any],
              uncertainty) -> dict[str, Any]:
    """The band of one validation case at the operating point its prediction chose
    (decode batch and prompts per pass held: ASSUMPTION, a slower draw would pick a smaller
    batch under a per-user SLO, so the band of an SLO case is slightly narrow): the case's
    metric over the draws (:func:`..engine.uncertainty.sample_arrays`), its quantiles, then
    widened by the model-structure term of the device's class unless "components"."""
    from ...engine import (band, evaluate_arrays, resolve_realism, resolve_uncertainty,
                           sample_arrays, tables_for, widen)
    from ...specs import load_hardware
    from .cases import metric_of

    u = resolve_uncertainty(uncertainty)
    kw = dict(kw)
    if np.isfinite(res.get("prompts_per_pass_used", np.nan)):
        kw["prefill_batch_size"] = float(res["prompts_per_pass_used"])
    if c["phase"] == "decode":
        kw["batch_size"] = float(res["batch_per_gpu_used"]) * int(c["tp"])
    draws, _ = sample_arrays(evaluate_arrays, c["model"], c["hardware"], u,
                             realism=resolve_realism(False, None), **kw)
    metric = np.ravel(metric_of(c, draws))
    lo, hi = band(metric, res["predicted"], u.quantiles)
    hw = load_hardware(c["hardware"])
    cls = "measured" if tables_for(hw) is not None else "roofline_only"
    w = 0.0 if uncertainty == "components" else u.conformal_ln[cls]
    plo, phi = widen(lo, hi, w)
    y = float(c["published"])
    return {"component_low": float(lo), "component_high": float(hi),
            "predicted_low": float(plo), "predicted_high": float(phi),
            "inside": bool(plo <= y <= phi), "vendor": hw.vendor, "device_class": cls,
            "structure_widen_ln": w}


def loo_conformal_inside(results: pd.DataFrame, level: float = 0.8) -> np.ndarray:
    """Whether each case falls inside its component band widened by the conformal term
    calibrated on the *other* cases of its device class (jackknife): the honest coverage of
    the model-structure term on the set it is calibrated on."""
    s = outside_ln(results["published"], results["component_low"], results["component_high"])
    cls = results["device_class"].to_numpy()
    inside = np.zeros(len(results), bool)
    for i in range(len(results)):
        others = (cls == cls[i]) & (np.arange(len(results)) != i)
        inside[i] = s[i] <= conformal_widen_ln(s[others], level)
    return inside


def band_summary(results: pd.DataFrame) -> dict[str, Any]:
    """Coverage and median width (high / low) of the component band and of the full band,
    overall, by vendor, by measured vs roofline-only and by phase; the full band's coverage
    with the conformal term left out case by case (``coverage_loo``)."""
    df = results.copy()
    df["inside_loo"] = loo_conformal_inside(df)
    out = coverage_table(df, {"vendor": "vendor", "device": "device_class", "phase": "phase"})
    out["all"]["coverage_loo"] = float(df["inside_loo"].mean())
    for col, name in (("vendor", "vendor"), ("device_class", "device"), ("phase", "phase")):
        for k, g in df.groupby(col, sort=True):
            out[f"{name} {k}"]["coverage_loo"] = float(g["inside_loo"].mean())
    return out
