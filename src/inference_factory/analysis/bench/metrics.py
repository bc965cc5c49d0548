"""What a finite benchmark run reports, from the closed loop's steady state
(:mod:`..closed_loop`, solved by :mod:`.serve`).

Per concurrency, requests are drawn (seeded, deterministic) with the benchmark's length
distribution, and each gets its own TTFT (poll wait, queue wait, its pass, its KV transfer),
TPOT (the steps plus the prefill passes of others that fall in its decode, a Poisson count)
and E2E latency; the first wave (the N requests that start together on an idle engine, as
the measured run begins after the warm-ups drain) waits for the passes ahead of it. Means,
medians and 99th percentiles are then those of the draws, as ``vllm bench serve`` computes
them over its requests; the duration follows from Little's law on the closed loop
(N in flight throughout: duration = num_prompts x mean E2E / N).
"""

from __future__ import annotations

import numpy as np

from ...kernels import serving as ks
from ...output.metadata import COUNTS

#: Requests drawn per concurrency for the distributions (p99 of 4,096 draws: +-0.3 % rank).
DRAWS = 4096

#: Output variables: name -> (units, long name). vLLM's keys and units first. Units are pint
#: expressions of the package registry (units_registry.txt; "1" is dimensionless, as in CF);
#: the binding resources are labels (no units).
VARIABLES: dict[str, tuple[str, str]] = {
    "max_concurrency": ("requests", "requests in flight (--max-concurrency)"),
    "completed": ("requests", "requests completed in the measured run"),
    "duration": ("s", "measured run duration"),
    "total_input_tokens": ("tokens", "prompt tokens of the run"),
    "total_output_tokens": ("tokens", "output tokens of the run"),
    "request_throughput": ("requests/s", "requests per second"),
    "output_throughput": ("tokens/s", "output tokens per second"),
    "total_token_throughput": ("tokens/s", "input + output tokens per second"),
    **{f"{s}_{m}_ms": ("ms", f"{s} {label}") for m, label in (
        ("ttft", "time to first token"), ("tpot", "time per output token (excl. first)"),
        ("itl", "inter-token latency (between streamed chunks)"),
        ("e2el", "end-to-end request latency")) for s in ("mean", "median", "p99")},
    "num_gpus": ("GPUs", "GPUs of the deployment"),
    "total_token_throughput_per_gpu": ("tokens/s/GPU", "input + output tokens per second per GPU"),
    "output_throughput_per_gpu": ("tokens/s/GPU", "output tokens per second per GPU"),
    "interactivity": ("tokens/s/user", "output tokens per second per user: 1000 / median_tpot_ms"),
    "decode_batch_per_rank": ("sequences", "sequences decoding together per DP rank (mean)"),
    "prefill_prompts_per_pass": ("prompts", "prompts per prefill pass per rank (mean)"),
    "prefill_tokens_per_pass": ("tokens", "prompt tokens per prefill pass per rank (mean)"),
    "decode_step_ms": ("ms", "one decode step at the settled batch"),
    "prefill_pass_ms": ("ms", "one prefill pass at the settled prompts per pass"),
    "prefill_busy_frac": ("1", "share of prefill-rank time spent in prefill passes"),
    "decode_stall_frac": ("1", "share of a sequence's decode time waiting for others' prefills"),
    "poll_wait_ms": ("ms", "mean wait for the scheduler to poll for a new request"),
    "queue_wait_ms": ("ms", "mean wait for a prefill pass or a free request slot"),
    "kv_transfer_ms": ("ms", "KV transfer from prefill to decode pool (disaggregated)"),
    "kv_retractions_per_request": ("1", "running requests retracted (preempted) per request "
                                   "when the KV pool is full"),
    "kv_recompute_frac": ("1", "prompt tokens prefilled again per fresh prompt token "
                          "(retracted requests)"),
    "decode_binding_resource": ("", "binding resource of the decode step"),
    "prefill_binding_resource": ("", "binding resource of the prefill pass"),
}


def _poisson_quantile(mean: np.ndarray, q: float, top: int = 64) -> np.ndarray:
    """Smallest count n with P(Poisson(mean) <= n) >= q (per element)."""
    mean = np.asarray(mean, dtype=float)
    pmf = np.exp(-mean)
    cdf = pmf.copy()
    out = np.zeros(mean.shape)
    for n in range(1, top + 1):
        out = np.where(cdf < q, n, out)
        pmf = pmf * mean / n
        cdf = cdf + pmf
    return out


def run_metrics(st, conc: np.ndarray, prompts: np.ndarray, *, isl: int, osl: int,
                range_ratio: float, engine, colocated: bool, decode, prefill,
                prefill_ranks: int, pass_prompts_max: float, engine_time: bool,
                seed: int, draws: int = DRAWS) -> dict[str, np.ndarray]:
    """vLLM's metrics per concurrency from draws of requests (same draws at every
    concurrency, so the curves are smooth)."""
    rng = np.random.default_rng(seed)
    n = int(draws)
    lo_i, lo_o = int(np.floor(isl * range_ratio)), int(np.floor(osl * range_ratio))
    inp = rng.integers(lo_i, isl + 1, n).astype(float)[None, :]
    out = np.maximum(rng.integers(lo_o, osl + 1, n), 1).astype(float)[None, :]
    u_poll, u_busy, u_queue, u_wait = (rng.random(n)[None, :] for _ in range(4))
    u_wave, u_first = rng.random(n)[None, :], rng.random(n)[None, :]
    i_mean = inp.mean()
    col = lambda a: np.asarray(a, dtype=float).reshape(-1, 1)  # noqa: E731

    td = col(st.decode_step_s)
    tau = decode.tokens_per_step
    scale = inp / i_mean                                      # a pass grows with its prompt
    # steady state: poll wait (uniform in the window when others decode), queue wait
    # (zero with probability 1 - rho, else exponential), the pass, the KV transfer
    window = col(2.0 * st.poll_wait_s / np.maximum(st.busy_probability, 1e-12))
    poll = np.where(u_busy < col(st.busy_probability), u_poll * window, 0.0)
    rho = np.clip(col(st.prefill_utilization), 1e-12, 0.999)
    queue = np.where(u_queue < rho, -np.log1p(-u_wait) * col(st.queue_wait_s) / rho, 0.0)
    ttft_ss = poll + queue + col(st.pass_s) * scale + col(st.transfer_s) + col(st.cap_wait_s)
    if engine.prefill_mixes_with_decode(colocated):
        ttft_ss = poll + queue + col(st.ttft_s - st.poll_wait_s - st.queue_wait_s
                                      - st.cap_wait_s) * scale + col(st.cap_wait_s)
    # first wave: the N prompts of the run's start, prefilled back to back in full passes
    ranks = np.minimum(float(prefill_ranks), conc)
    wave_n = col(conc / ranks)
    k1 = np.minimum(wave_n, pass_prompts_max)
    passes = np.ceil(wave_n / k1)
    t1 = col(prefill.prefill_pass_s(k1[:, 0]))
    # (those beyond the request cap also wait for a slot, as in the steady state)
    ttft_wave = ((np.floor(u_first * passes) + 1.0) * t1 * scale + col(st.transfer_s)
                 + col(st.cap_wait_s))
    in_wave = u_wave < col(np.minimum(conc, prompts) / prompts)
    # never below the steady state: where a saturated queue makes the steady state slower,
    # the run's start (an empty queue) is offset by its end (the queue draining with fewer
    # than N in flight), which this model does not follow either
    ttft = np.where(in_wave, np.maximum(ttft_wave, ttft_ss), ttft_ss)
    # TPOT: the steps plus the passes of others during the request's decode (Poisson count)
    base = td / tau
    decode_s = (out - 1.0) * col(st.tpot_s)
    lam = col(st.passes_per_s) * decode_s
    stall = rng.poisson(np.maximum(lam, 0.0)) * col(st.pass_s)
    tpot = np.where(out > 1, base + stall / np.maximum(out - 1.0, 1.0), 0.0)
    if st.retracted_wait_s is not None and np.any(st.retracted_wait_s > 0):
        # a full KV pool's retracted requests wait again after their first token
        back = ks.retracted_wait_s(mean_wait_s=col(st.retracted_wait_s),
                                   retractions_per_request=col(st.retractions_per_request),
                                   draw=rng.random(n)[None, :])
        tpot = tpot + np.where(out > 1, back / np.maximum(out - 1.0, 1.0), 0.0)
    e2el = ttft + (out - 1.0) * tpot
    # ITL: one streamed chunk, plus the passes that fall inside it (a Poisson count). SGLang
    # streams when the output length hits the interval's residue, checked once per step, so
    # a chunk lasts s steps (s x tau tokens with a draft), not s tokens
    # (scheduler_output_processor_mixin: len(output_ids) % stream_interval == 1)
    s_steps = float(engine.stream_interval_tokens) if engine_time else 1.0
    chunk = s_steps * td[:, 0]
    p_stall = col(st.passes_per_s)[:, 0] * chunk
    itl_mean = s_steps * tau * (((out - 1.0) * tpot).sum(1) / (out - 1.0).sum(1))
    itl_med = chunk + _poisson_quantile(p_stall, 0.5) * st.pass_s
    itl_p99 = chunk + _poisson_quantile(p_stall, 0.99) * st.pass_s

    mean_e2e = e2el.mean(axis=1)
    duration = prompts * mean_e2e / conc                      # Little's law, N in flight
    tot_in, tot_out = prompts * inp.mean(), prompts * out.mean()
    ms = 1e3
    res = {
        "max_concurrency": conc, "completed": prompts, "duration": duration,
        "total_input_tokens": tot_in, "total_output_tokens": tot_out,
        "request_throughput": prompts / duration, "output_throughput": tot_out / duration,
        "total_token_throughput": (tot_in + tot_out) / duration,
    }
    for name, a in (("ttft", ttft), ("tpot", np.where(out > 1, tpot, np.nan)), ("e2el", e2el)):
        res[f"mean_{name}_ms"] = np.nanmean(a, axis=1) * ms
        res[f"median_{name}_ms"] = np.nanpercentile(a, 50, axis=1) * ms
        res[f"p99_{name}_ms"] = np.nanpercentile(a, 99, axis=1) * ms
    res["mean_itl_ms"], res["median_itl_ms"], res["p99_itl_ms"] = (itl_mean * ms, itl_med * ms,
                                                                   itl_p99 * ms)
    return res


def _variable(xr, dim: str, value, attrs):
    """``xr.Variable((dim,), value, attrs)``; a 1-D numpy array of a plain dtype (numbers,
    flags, fixed-width text) is taken as it is (``fastpath``), as the engine's Datasets take
    theirs (engine/dataset.py): xarray's conversion would check nothing more and, on its
    first use in a process, imports dask.array where dask is installed (~0.3 s of a bench
    answer)."""
    arr = np.asarray(value)
    if arr.dtype.kind in "OMm" or arr.ndim != 1:
        return xr.Variable((dim,), value, attrs)
    return xr.Variable((dim,), arr, attrs, fastpath=True)


def to_dataset(res, st, conc, *, num_gpus, model, hardware, deployment, isl, osl, range_ratio,
               engine, engine_time, decode, prefill, precisions, as_frame: bool = False, footing=None):
    """The Dataset over ``concurrency`` with each variable's units and long name.

    ``as_frame``: its tidy frame instead (``ds.to_dataframe().reset_index()``, the
    Dataset's attributes in ``df.attrs``), built without the Dataset: pandas only, no
    xarray (whose index coordinate imports dask, pint and sparse where installed: ~0.3 s of
    the command line's answer)."""
    res = dict(res)
    res["num_gpus"] = np.full(len(conc), int(num_gpus))
    res["total_token_throughput_per_gpu"] = res["total_token_throughput"] / num_gpus
    res["output_throughput_per_gpu"] = res["output_throughput"] / num_gpus
    res["interactivity"] = 1e3 / res["median_tpot_ms"]
    for side, other in (("low", "high"), ("high", "low")):
        if f"total_token_throughput_{side}" in res:
            for k in ("total_token_throughput", "output_throughput"):
                res[f"{k}_per_gpu_{side}"] = res[f"{k}_{side}"] / num_gpus
            res[f"interactivity_{side}"] = 1e3 / res[f"median_tpot_ms_{other}"]
    res["decode_batch_per_rank"] = st.decoding
    res["prefill_prompts_per_pass"] = st.prompts_per_pass
    res["prefill_tokens_per_pass"] = st.prompts_per_pass * float(
        ks.uniform_length_moments(max_tokens=isl, range_ratio=range_ratio)[0])
    res["decode_step_ms"] = st.decode_step_s * 1e3
    res["prefill_pass_ms"] = st.pass_s * 1e3
    res["prefill_busy_frac"] = st.prefill_utilization
    res["decode_stall_frac"] = st.stall_frac
    res["poll_wait_ms"] = st.poll_wait_s * 1e3
    res["queue_wait_ms"] = (st.queue_wait_s + st.cap_wait_s) * 1e3
    res["kv_transfer_ms"] = st.transfer_s * 1e3
    zero = np.zeros(len(conc))
    res["kv_retractions_per_request"] = (zero if st.retractions_per_request is None
                                         else st.retractions_per_request)
    res["kv_recompute_frac"] = zero if st.recompute_frac is None else st.recompute_frac
    res["decode_binding_resource"] = decode.decode_resource(st.decoding)
    res["prefill_binding_resource"] = prefill.prefill_resource(st.prompts_per_pass)
    data = {}
    for name, (unit, long) in VARIABLES.items():
        attrs = {"long_name": long}
        if unit:
            attrs["units"] = unit
        arr = np.asarray(res[name])
        if name in COUNTS and arr.dtype.kind == "f" and np.all(np.isfinite(arr)) \
                and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)           # counts as integers (same values)
        data[name] = ("concurrency", arr, attrs)
        for side, q in (("low", "10"), ("high", "90")):    # bands (bench(uncertainty=...))
            if f"{name}_{side}" in res:
                data[f"{name}_{side}"] = ("concurrency", np.asarray(res[f"{name}_{side}"]),
                                          {**attrs, "long_name": f"{long}, {q}th percentile "
                                           "of the prediction band"})
    coord = np.asarray(conc, dtype=np.int64)
    attrs = {"model": model, "hardware": hardware, "deployment": deployment,
             "isl": isl, "osl": osl, "range_ratio": range_ratio,
             "engine": engine.name, "engine_description": engine.description,
             "engine_label": engine.label(), "engine_version": engine.version,
             "engine_time": int(engine_time), **{k: str(v) for k, v in precisions.items()},
             **dict(footing or {})}
    if as_frame:
        import pandas as pd

        df = pd.DataFrame({"concurrency": coord, **{k: t[1] for k, t in data.items()}})
        df.attrs.update(attrs)
        return df
    import xarray as xr

    data = {k: _variable(xr, *t) for k, t in data.items()}
    conc_var = _variable(xr, "concurrency", coord,
                         {"units": "requests", "long_name": "requests in flight"})
    return xr.Dataset(data, coords={"concurrency": conc_var}, attrs=attrs)
