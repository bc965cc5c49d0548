"""The questions users ask of the engine, as library functions.

Each function is a thin layer over :func:`inference_factory.evaluate` and
:func:`inference_factory.analysis.economics.add_economics`: every number comes from the engine and
the economics layer; nothing here adds physics. SciPy does the searching and sampling
(``optimize.brentq`` for SLO boundaries, ``stats.qmc`` and ``stats.triang`` for Monte Carlo).

* :func:`best_draft_depth` - the speculative draft depth with the most decode tokens/s per GPU,
  per batch size (and any other axis).
* :func:`max_batch_meeting_slo` - the largest decode batch that fits in HBM and meets TPOT /
  per-user-rate SLOs, and the largest prefill batch meeting a TTFT SLO.
* :func:`cheapest_meeting_slo` - hardware x parallelism x precision options ranked by
  $/M tokens among those meeting the SLOs, with the reason each other option fails.
* :func:`pareto_front` - the non-dominated points of tokens/s per GPU against tokens/s per user.
* :func:`lever_waterfall` - the baseline-to-factory steps of a ``compare`` attribution.
* :func:`tornado` - one-at-a-time sensitivity of $/M tokens and margin to levers and assumptions.
* :func:`monte_carlo` - the distribution of $/M tokens and margin over assumption ranges,
  with the engine evaluated once, vectorized along a ``sample`` dimension.

The package (:mod:`inference_factory.analysis.questions`) re-exports them all, where users
import them; the searches and samplers live in their own modules: :mod:`.slo` (max batch and
cheapest meeting SLOs), :mod:`.sensitivity` (tornado, Monte Carlo, cost_model), :mod:`.args`
(shared constants and argument checks). This module holds :func:`best_draft_depth` and the
Pareto front.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal, Sequence

import numpy as np
import pandas as pd
import xarray as xr
# scipy (brentq, qmc, triang) is imported where it is used: importing this module for
# pareto_mask or the waterfall does not pay scipy's import time

from ...engine import evaluate, to_dataframe
from ...errors import SpecError
from ...output.metadata import annotate
from ...specs import HardwareSpec, ModelSpec
from .args import _check_kwargs, _int_list, default_batch_grid
from ..pareto import pareto_mask

__all__ = ["best_draft_depth", "pareto_front"]


# --------------------------------------------------------------------------------------------
# best draft depth per batch
# --------------------------------------------------------------------------------------------


def best_draft_depth(model: str | ModelSpec | Sequence, hardware: str | HardwareSpec | Sequence, *,
                     batch_size, draft_depth: Iterable[int] = range(0, 5),
                     metric: Literal["decode_tokens_per_s_per_gpu",
                                     "decode_tokens_per_s_per_user"] = "decode_tokens_per_s_per_gpu",
                     only_fitting: bool = True, **kwargs: Any) -> xr.Dataset:
    """The draft depth that maximises ``metric`` at each batch size (and every other axis).

    Parameters
    ----------
    model, hardware : as for :func:`~inference_factory.evaluate` (lists add dimensions)
    batch_size : number or list
        Sequences per attention-DP rank.
    draft_depth : whole numbers
        Depths to compare (0 = no speculation).
    metric : str
        What "best" maximises: decode tokens/s per GPU (throughput; default) or per user.
    only_fitting : bool
        Ignore depths whose batch does not fit in HBM (draft activations and MTP weights).
    **kwargs
        Any other engine axis or option (``acceptance_rate``, ``kv_len``, ``tp``...).

    Returns
    -------
    xr.Dataset
        ``best_draft_depth`` (NaN where no depth fits), ``best_<metric>``, ``best_tpot_s``,
        ``best_decode_tokens_per_s_per_user``, ``speedup_over_no_draft`` (when 0 is among the
        depths) and ``fits_any_depth``, over every dimension but ``draft_depth``.
    """
    if metric not in ("decode_tokens_per_s_per_gpu", "decode_tokens_per_s_per_user"):
        raise SpecError(f"metric = {metric!r} is not one of ['decode_tokens_per_s_per_gpu', "
                        "'decode_tokens_per_s_per_user']")
    _check_kwargs(kwargs, "best_draft_depth")
    depths = _int_list("draft_depth", draft_depth, 0)
    ds = evaluate(model, hardware, batch_size=batch_size, draft_depth=depths, **kwargs)
    if "draft_depth" not in ds.dims:      # one depth: make it a dimension of length 1
        ds = ds.expand_dims(draft_depth=[float(depths[0])])
    value = ds[metric]
    ok = ds["fits"] if only_fitting else xr.ones_like(ds["fits"])
    value, ok = xr.broadcast(value, ok)
    masked = value.where(ok)
    any_ok = masked.notnull().any("draft_depth")
    idx = masked.fillna(-np.inf).argmax("draft_depth")

    def at_best(da: xr.DataArray) -> xr.DataArray:
        da = da.broadcast_like(value)
        return da.isel(draft_depth=idx).drop_vars("draft_depth", errors="ignore").where(any_ok)

    out = xr.Dataset({
        "best_draft_depth": at_best(ds["draft_depth"]),
        f"best_{metric}": at_best(value),
        "best_tpot_s": at_best(ds["tpot_s"]),
        "best_decode_tokens_per_s_per_user": at_best(ds["decode_tokens_per_s_per_user"]),
        "fits_any_depth": any_ok,
    })
    if metric != "decode_tokens_per_s_per_gpu":
        out["best_decode_tokens_per_s_per_gpu"] = at_best(ds["decode_tokens_per_s_per_gpu"])
    if 0 in depths:
        out["speedup_over_no_draft"] = out[f"best_{metric}"] / value.sel(draft_depth=0.0)
    units = {"best_draft_depth": "draft tokens per verify step", "best_tpot_s": "s",
             "best_decode_tokens_per_s_per_user": "tokens/s/user",
             "best_decode_tokens_per_s_per_gpu": "tokens/s/GPU", "fits_any_depth": "bool",
             "speedup_over_no_draft": "1"}
    for k in out.data_vars:
        out[k].attrs["units"] = units.get(k, ds[metric].attrs.get("units", ""))
    annotate(out)            # CF: units pint parses and a long name on every variable
    out.attrs.update(ds.attrs)
    out.attrs["question"] = f"draft depth maximising {metric} among {depths}"
    return out


# --------------------------------------------------------------------------------------------
# Pareto front
# --------------------------------------------------------------------------------------------


def pareto_front(data: xr.Dataset | pd.DataFrame, *, x: str = "decode_tokens_per_s_per_user",
                 y: str = "decode_tokens_per_s_per_gpu", only_fitting: bool = True) -> pd.DataFrame:
    """Non-dominated points of ``y`` against ``x`` (both maximised) across every dimension.

    The capacity planner's view: each point is a configuration (batch, draft depth, hardware,
    parallelism...); the front is the best tokens/s per GPU available at each tokens/s per user.

    Parameters
    ----------
    data : xr.Dataset or pandas.DataFrame
        An engine result (any dimensions) or its :func:`~inference_factory.to_dataframe`.
    x, y : str
        Variables to maximise.
    only_fitting : bool
        Drop points that do not fit in HBM (``fits`` False) before taking the front.

    Returns
    -------
    pandas.DataFrame
        The front's rows (every column of the tidy frame), sorted by ``x`` ascending.
    """
    df = to_dataframe(data) if isinstance(data, xr.Dataset) else data.copy()
    for col in (x, y):
        if col not in df.columns:
            raise SpecError(f"pareto_front: {col!r} is not a variable of the data; numeric "
                            f"columns: {sorted(df.select_dtypes('number').columns)}")
    if only_fitting and "fits" in df.columns:
        df = df[df["fits"].astype(bool)]
    mask = pareto_mask(df[x].to_numpy(), df[y].to_numpy())
    front = df[mask].sort_values([x, y], ascending=[True, False], kind="stable").reset_index(drop=True)
    front.attrs.update(df.attrs)
    front.attrs["pareto"] = f"maximise {x} and {y}; {int(mask.sum())} of {len(df)} points"
    return front


