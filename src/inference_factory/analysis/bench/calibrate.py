"""``bench --calibrate``: a serving-engine profile's free engine-time terms fitted to a user's
own benchmark runs of one deployment.

Only the profile's host times are free: ``host_s_per_decode_step`` (CPU time a decode step
adds to its GPU time) and ``host_s_per_prefill_pass`` (the same per prefill pass); nothing in
the physics (kernel tables, rooflines, links) moves. The fit minimises the squared log
errors of the median TPOT and median TTFT at every measured concurrency,

.. math:: \\min_{h_d, h_p \\ge 0} \\sum_i \\ln^2(\\mathrm{TPOT}_i(h) / \\mathrm{TPOT}^m_i)
          + \\ln^2(\\mathrm{TTFT}_i(h) / \\mathrm{TTFT}^m_i)

by damped Gauss-Newton on the closed loop itself (:func:`.serve.bench`, Jacobian by forward
differences: each iteration runs the loop three times). The leave-one-out error refits
without each run and predicts it. Runs must be of one deployment (model, hardware, shape,
GPUs, prompt and output lengths where the files say them), the one ``bench`` is told;
others are refused. The project's own validation never calls this.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from ...errors import SpecError

#: the profile's free terms, their floor and starting steps (seconds)
TERMS = ("host_s_per_decode_step", "host_s_per_prefill_pass")
_STEP_S = (1e-4, 1e-3)
_ITERATIONS = 8


def check_one_deployment(measured: pd.DataFrame, *, hardware: str, num_gpus: int,
                         deployment: str, isl: int, osl: int) -> None:
    """Refuse runs of more than one deployment, or of another one than ``bench``'s (each
    field compared where the files state it)."""
    told = {"hardware": hardware, "num_gpus": float(num_gpus), "deployment": deployment,
            "isl": float(isl), "osl": float(osl)}
    for col in ("model", "hardware", "deployment", "num_gpus", "isl", "osl", "framework"):
        if col not in measured:
            continue
        vals = sorted({str(v) for v in measured[col].dropna() if str(v) != ""})
        if len(vals) > 1:
            raise SpecError(f"--calibrate: the runs are of more than one deployment: {col} = "
                            f"{vals}; give the runs of one deployment")
        if vals and col in told:
            got = measured[col].dropna().iloc[0]
            want = told[col]
            same = (float(got) == want if isinstance(want, float) else
                    _norm(got) == _norm(want) or _norm(want).startswith(_norm(got)))
            if not same:
                raise SpecError(f"--calibrate: the runs are of {col} = {got!r}, bench is told "
                                f"{want!r}; calibrate on runs of the deployment you bench")


def _norm(v: Any) -> str:
    return str(v).lower().replace("-sxm", "").replace("_", "-").strip()


def fit_host_times(predict, measured: pd.DataFrame) -> dict[str, Any]:
    """Fit :data:`TERMS` so ``predict(h_d, h_p)`` (a frame over concurrency with
    ``median_tpot_ms``, ``median_ttft_ms``) matches ``measured`` (one row per run with
    ``max_concurrency``); returns the terms, the per-run errors before and after and the
    leave-one-out errors."""
    m = measured.dropna(subset=["max_concurrency"]).sort_values("max_concurrency")
    conc = m["max_concurrency"].astype(int).to_numpy()
    meas = np.column_stack([m["median_tpot_ms"].to_numpy(float),
                            m["median_ttft_ms"].to_numpy(float)])
    if len(m) < 2 or not np.isfinite(meas).all() or (meas <= 0).any():
        raise SpecError("--calibrate: needs at least 2 runs, each with median_tpot_ms and "
                        "median_ttft_ms > 0")

    def resid(h, rows=slice(None)):
        p = predict(*h).set_index("concurrency").loc[conc]
        pred = np.column_stack([p["median_tpot_ms"].to_numpy(float),
                                p["median_ttft_ms"].to_numpy(float)])
        return np.log(pred / meas)[rows]

    def solve(rows, start):
        h = np.array(start, float)
        r = resid(h, rows)
        lam = 1e-3
        for _ in range(_ITERATIONS):
            steps = np.maximum(_STEP_S, 0.05 * h)
            jac = np.stack([((resid(h + np.eye(2)[j] * steps[j], rows) - r) / steps[j]).ravel()
                            for j in range(2)], axis=1)
            a, g = jac.T @ jac, jac.T @ r.ravel()
            dh = -np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), g)
            new = np.maximum(h + dh, 0.0)
            rn = resid(new, rows)
            if np.sum(rn ** 2) < np.sum(r ** 2):
                h, r, lam = new, rn, lam / 10
            else:
                lam *= 10
            if np.all(np.abs(dh) < 1e-7 + 1e-4 * h):
                break
        return h

    base = resid(np.zeros(2))
    h = solve(slice(None), np.zeros(2))
    after = resid(h)
    loo = np.empty_like(after)
    for i in range(len(conc)):
        keep = np.arange(len(conc)) != i
        hi = solve(keep, h)
        loo[i] = resid(hi, slice(i, i + 1))[0]
    return {"terms": dict(zip(TERMS, map(float, h))), "concurrency": conc.tolist(),
            "abs_ln_before": np.abs(base), "abs_ln_after": np.abs(after),
            "abs_ln_loo": np.abs(loo)}


def summary_rows(fit: dict[str, Any]) -> list[dict[str, Any]]:
    """Median |ln| error of TPOT and TTFT: the profile as it was, fitted on every run, and
    leave-one-out (each run predicted from a fit without it)."""
    out = []
    for j, metric in enumerate(("median_tpot_ms", "median_ttft_ms")):
        out.append({"metric": metric, "runs": len(fit["concurrency"]),
                    "median |ln| before": float(np.median(fit["abs_ln_before"][:, j])),
                    "median |ln| fitted": float(np.median(fit["abs_ln_after"][:, j])),
                    "median |ln| leave-one-out": float(np.median(fit["abs_ln_loo"][:, j]))})
    return out


def profile_toml(eng, terms: dict[str, float], *, sources: list[str]) -> str:
    """A serving-engines file of one profile: ``eng`` (resolved for its device) with the
    fitted terms, named ``<profile>-calibrated``, the file's default; ``--engine FILE``
    reads it."""
    name = f"{eng.name}-calibrated"
    fields = {f.name: getattr(eng, f.name) for f in dataclasses.fields(eng)}
    sched = ("policy", "prefill_tokens_per_pass", "prefill_tokens_per_pass_dp_attention",
             "max_running_requests", "recv_interval_steps", "recv_interval_steps_high",
             "recv_interval_high_from_concurrency", "recv_interval_steps_dp_attention",
             "stream_interval_tokens", "dp_attention_divides_limits")
    lines = ["# Written by inference-factory bench --calibrate: the profile "
             f"{eng.label()} with its host times fitted to the runs",
             *[f"#   {s}" for s in sources],
             f"default = {_v(name)}", "", f"[engines.{_v(name)}]",
             f"description = {_v(eng.description + ' (host times fitted by bench --calibrate)')}",
             f"engine = {_v(eng.engine)}", f"version = {_v(eng.version)}",
             *[f"{k} = {_v(fields[k])}" for k in sched],
             *([f"max_running_requests_speculative = {eng.max_running_requests_speculative}"]
               if eng.max_running_requests_speculative else []),
             *[f"{k} = {_v(terms[k])}  # fitted" for k in TERMS],
             "search_by_default = false", "", f"[engines.{_v(name)}.supports]"]
    sup = dataclasses.asdict(eng.supports) if eng.supports else {}
    lines += [f"{k} = {_v(v)}" for k, v in sup.items()]
    if eng.launch:
        lines += ["", f"[engines.{_v(name)}.launch]",
                  *[f"{k} = {_v(v)}" for k, v in eng.launch.items() if v]]
    lines += ["", f"[engines.{_v(name)}.devices.{_v(eng.device)}]",
              f"source = {_v('bench --calibrate on ' + str(len(sources)) + ' file(s); ' + eng.source)}",
              *([f"flags = {_v(eng.flags)}"] if eng.flags else [])]
    return "\n".join(lines) + "\n"


def _v(v: Any) -> str:
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return repr(float(v)) if isinstance(v, float) and math.isfinite(v) else str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_v(x) for x in v) + "]"
    return json.dumps(str(v))


def calibrate(paths, *, model: str, hardware: str, engine=None, num_gpus: int | None = None,
              **bench_kwargs) -> dict[str, Any]:
    """Read the runs (:func:`.results.read_bench_results`), refuse runs of another
    deployment, fit the host times of the engine's profile on the device and return
    ``{"fit", "summary", "engine", "profile_toml"}``."""
    from ...specs import load_hardware
    from ...specs.engines import resolve_serving_engine
    from .results import read_bench_results
    from .serve import bench

    measured = read_bench_results(list(paths), num_gpus=num_gpus)
    hw = load_hardware(hardware)
    eng = resolve_serving_engine(engine, "--engine", hardware=hw.name)
    conc = sorted({int(c) for c in measured["max_concurrency"].dropna()})
    probe = bench(model, hw.name, engine=eng, concurrency=conc[:1], as_frame=True,
                  **bench_kwargs)
    check_one_deployment(measured, hardware=hw.name, num_gpus=int(probe["num_gpus"][0]),
                         deployment=probe.attrs["deployment"],
                         isl=int(bench_kwargs.get("isl", 1024)),
                         osl=int(bench_kwargs.get("osl", 1024)))

    def predict(h_d, h_p):
        e = dataclasses.replace(eng, host_s_per_decode_step=float(h_d),
                                host_s_per_prefill_pass=float(h_p))
        return bench(model, hw.name, engine=e, concurrency=conc, as_frame=True,
                     **bench_kwargs)

    fit = fit_host_times(predict, measured)
    sources = sorted({str(s) for s in measured["source"].dropna()})
    fitted = dataclasses.replace(eng, **fit["terms"])
    return {"fit": fit, "summary": summary_rows(fit), "engine": fitted,
            "profile_toml": profile_toml(eng, fit["terms"], sources=sources)}
