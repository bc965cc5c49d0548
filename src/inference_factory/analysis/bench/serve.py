"""``bench``: what a closed-loop serving benchmark measures on one deployment, per concurrency.

A benchmark such as ``vllm bench serve --max-concurrency N`` (InferenceX's harness) keeps N
requests in flight: each client sends a prompt, waits for its last token and sends the next.
This module finds the steady state of that loop at every N at once (vectorized over
concurrency; no per-request event loop): how many sequences decode together, how many prompts
each prefill pass takes, how long prompts wait, and from those TTFT, TPOT, ITL, E2E latency
and throughput, with the keys and units ``vllm bench serve --save-result`` writes.

The loop itself (pools, step tables from the engine, the fixed point) is
:mod:`inference_factory.analysis.closed_loop`, which ``plan`` shares; the closed-loop formulas
are in :mod:`inference_factory.kernels.serving`; the serving engine's scheduling settings are a
profile of ``configs/serving_engines.toml`` (:mod:`inference_factory.specs.engines`);
the tails and the finite run are in :mod:`.metrics`. docs/MODEL.md section 12 states
every assumption and its bias.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from ..closed_loop import Pool, StepTable, solve_loop, step_table
from ...engine import architecture
from ...bounds import MAX_BAND_CONCURRENCIES
from ...errors import SpecError
from ...kernels import serving as ks
from ...specs import DEFAULT_HARDWARE, load_hardware, load_model
from ...specs.engines import ServingEngine, resolve_serving_engine

#: Default concurrencies (InferenceX's sweep: powers of two).
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def _pool(value: Pool | Mapping[str, Any] | None, where: str) -> Pool | None:
    if value is None or isinstance(value, Pool):
        return value
    d = dict(value)
    bad = sorted(set(d) - {"instances", "tp", "dp", "ep"})
    if bad:
        raise SpecError(f"{where}: unknown key {bad[0]!r}; allowed: "
                        "['instances', 'tp', 'dp', 'ep']")
    for k, v in d.items():
        if isinstance(v, bool) or not float(v).is_integer() or v < 1:
            raise SpecError(f"{where}: {k} = {v!r} must be a whole number >= 1")
    return Pool(**{k: int(v) for k, v in d.items()})


# ---- the public entry -----------------------------------------------------------------------

def bench(model: str = "DeepSeek-V3", hardware: str = DEFAULT_HARDWARE, *, tp: int = 1,
          dp: int = 1, ep: int = 1, prefill_pool: Pool | Mapping[str, Any] | None = None,
          decode_pool: Pool | Mapping[str, Any] | None = None,
          weight_precision: str | None = None, moe_precision: str | None = None,
          kv_precision: str | None = None, attention_precision: str | None = None,
          dispatch_precision: str | None = None, combine_precision: str | None = None,
          draft_depth: int = 0, acceptance_rate: float | None = None,
          draft_model: str | None = None, overlap: str = "none", isl: int = 1024,
          osl: int = 1024,
          range_ratio: float = 1.0, concurrency: Iterable[int] | int = DEFAULT_CONCURRENCY,
          num_prompts: int | None = None, engine: str | ServingEngine | None = None,
          engine_time: bool = True, realism: Any = None, seed: int = 0,
          uncertainty: Any = None, as_frame: bool = False, redundant_experts: int = 0):
    """Predict ``vllm bench serve`` on one deployment at each concurrency.

    Aggregated (one instance of ``tp`` x ``dp`` GPUs, experts over ``ep``) unless
    ``prefill_pool`` and ``decode_pool`` are given (``Pool(instances, tp, dp, ep)`` or a
    mapping): disaggregated, prompts prefilled on one pool and decoded on the other;
    ``overlap="two-batch"`` runs the two-micro-batch schedule (as ``roofline``). Lengths
    are uniform in ``[range_ratio x isl, isl]`` and ``[range_ratio x osl, osl]`` (InferenceX:
    0.8); ``num_prompts`` defaults to 10 x concurrency (InferenceX). ``engine`` names a profile
    of ``configs/serving_engines.toml`` (default SGLang 0.5.6 as InferenceX runs it);
    ``engine_time=False`` drops the engine's own time (poll waits, host time).
    ``uncertainty`` (True, "components" or an ``Uncertainty``) adds ``<name>_low`` and
    ``<name>_high`` (the 80 % band, :mod:`.bands`) beside each throughput and latency.
    ``redundant_experts``: extra expert replicas for load balance (``-p ...,
    redundant_experts=N``, as ``roofline`` and ``plan`` take it).

    Returns an ``xr.Dataset`` over ``concurrency`` whose variables carry
    ``vllm bench serve --save-result``'s keys and units (``median_ttft_ms``, ``output_throughput``,
    ...), plus ``num_gpus``, per-GPU throughputs, ``interactivity`` (1000 / median TPOT ms,
    InferenceX's definition), the binding resources and the state the loop settled on.
    ``as_frame=True`` returns its tidy frame instead (``ds.to_dataframe().reset_index()``
    with the attributes in ``df.attrs``), built without xarray (the command line's path).
    """
    from .metrics import DRAWS, run_metrics, to_dataset

    m, hw = load_model(model), load_hardware(hardware)
    # the engine's profile on this device (an engine without settings for it: one line)
    eng = resolve_serving_engine(engine, "engine", hardware=hw.name).with_draft(draft_depth)
    # the engine's kernels where its profile says (all-reduce + norm fusion on this device)
    from ...engine import resolve_realism
    realism = resolve_realism(False, realism).for_engine(eng)
    conc = _concurrency(concurrency)
    isl, osl = _whole("isl", isl), _whole("osl", osl)
    if not (0.0 <= float(range_ratio) <= 1.0):
        raise SpecError(f"range_ratio = {range_ratio!r} must be a fraction in [0, 1]")
    if isl + osl > m.max_position_embeddings:
        raise SpecError(f"isl + osl = {isl + osl} exceeds {m.name}'s context of "
                        f"{m.max_position_embeddings} tokens")
    if num_prompts is not None and _whole("num_prompts", num_prompts) < max(conc):
        raise SpecError(f"num_prompts = {num_prompts!r} must be at least the largest "
                        f"concurrency ({max(conc)}): fewer prompts never fill the clients")
    if uncertainty not in (None, False) and len(conc) > MAX_BAND_CONCURRENCIES:
        raise SpecError(f"uncertainty over {len(conc):,} concurrency values: the band solves "
                        "the closed loop once per value and draw (64 draws), so it is bounded "
                        f"to {MAX_BAND_CONCURRENCIES} values; give fewer, e.g. 1,2,4,...,2048 "
                        "(12 values), or drop --uncertainty")
    p_pool, d_pool = _pool(prefill_pool, "prefill_pool"), _pool(decode_pool, "decode_pool")
    if (p_pool is None) != (d_pool is None):
        raise SpecError("a disaggregated deployment needs both prefill_pool and decode_pool")
    colocated = p_pool is None
    agg = Pool(1, _whole("tp", tp), _whole("dp", dp), _whole("ep", ep))
    d_pool = agg if colocated else d_pool
    p_pool = agg if colocated else p_pool
    if eng.model_refusal(m):
        raise SpecError(f"engine {eng.name} {eng.model_refusal(m)}")
    for pool in {d_pool, p_pool}:
        why = eng.refusal(model=m, mode="aggregated" if colocated else "disaggregated",
                          tp=pool.tp,
                          dp=pool.dp, ep=pool.ep, draft_depth=draft_depth, overlap=overlap)
        if why:
            raise SpecError(f"engine {eng.label()} does not run {pool.label()}"
                            f"{'' if colocated else ' pools'}: {why} ({eng.source}); "
                            "see docs/ENGINES.md or name another --engine")

    i_mean, _ = ks.uniform_length_moments(max_tokens=isl, range_ratio=float(range_ratio))
    o_mean, o_sq = ks.uniform_length_moments(max_tokens=osl, range_ratio=float(range_ratio))
    i_mean, o_mean = float(i_mean), float(o_mean)
    context = i_mean + float(o_sq) / (2.0 * o_mean)    # token-weighted decode context
    axes = {k: v for k, v in dict(weight_precision=weight_precision, moe_precision=moe_precision,
                                  kv_precision=kv_precision,
                                  attention_precision=attention_precision,
                                  dispatch_precision=dispatch_precision,
                                  combine_precision=combine_precision).items() if v is not None}
    axes["draft_depth"] = _whole("draft_depth", draft_depth, lo=0)
    axes["overlap"] = overlap
    if _whole("redundant_experts", redundant_experts, lo=0):
        axes["redundant_experts"] = int(redundant_experts)
    if acceptance_rate is not None:
        axes["acceptance_rate"] = float(acceptance_rate)
    extra = {"draft_model": draft_model} if draft_model is not None else {}
    # an MTP draft's acceptance falls with its position as in plan and simulate
    from ...engine import with_mtp_acceptance
    axes = {k: v for k, v in with_mtp_acceptance(m, {**axes, **extra},
                                                 [axes["draft_depth"]]).items()
            if k != "draft_model"}
    pass_prompts = max(1.0, np.floor(eng.pass_tokens_per_rank(p_pool.dp) / i_mean))
    common = dict(mean_prompt=i_mean, decode_context=context, final_len=float(isl + osl),
                  realism=realism)
    d_tab = step_table(m, hw, d_pool, {**axes, **extra},
                       batch_cap=eng.requests_per_rank(d_pool.dp),
                       max_prompts=pass_prompts, **common)
    p_tab = d_tab if colocated else step_table(m, hw, p_pool, {**axes, **extra},
                                               batch_cap=pass_prompts, max_prompts=pass_prompts,
                                               **common)
    transfer = 0.0
    if not colocated:
        # a request's KV lives on its attention rank's tp GPUs: their NICs send it, at the
        # achieved scale-out fraction and latency of configs/realism.toml [links] (as the
        # engine's own collectives over the NIC)
        rl = realism
        link = hw.scale_out_bw_bytes_per_s * p_pool.tp * rl.out_frac
        # the whole cache of the mean prompt: every layer group's context and per-sequence
        # terms (a window's ring, a recurrent state), as bytes per prompt token
        sent = architecture(m).prefix_bytes(axes.get("kv_precision", "bf16"), i_mean)
        transfer = float(ks.kv_transfer_s(prompt_tokens=i_mean,
                                          kv_bytes_per_token=sent / i_mean,
                                          link_bytes_per_s=link, latency_s=rl.out_latency_s))
    prompts = (np.asarray([10 * c for c in conc], dtype=float) if num_prompts is None
               else np.full(len(conc), float(num_prompts)))

    def run(dt: StepTable, pt: StepTable, draws: int = DRAWS):
        st_ = solve_loop(conc, colocated=colocated, decode=dt, prefill=pt,
                         decode_ranks=d_pool.ranks, prefill_ranks=p_pool.ranks, engine=eng,
                         dp_attention=d_pool.dp > 1, mean_prompt=i_mean, mean_output=o_mean,
                         pass_prompts_max=pass_prompts, transfer_s=transfer,
                         engine_time=engine_time, decode_dp=d_pool.dp,
                         lengths=dict(isl=isl, osl=osl, range_ratio=float(range_ratio),
                                      draft_depth=float(axes["draft_depth"]), seed=seed))
        return st_, run_metrics(st_, np.asarray(conc, dtype=float), prompts, isl=isl, osl=osl,
                                range_ratio=float(range_ratio), engine=eng,
                                colocated=colocated, decode=dt, prefill=pt,
                                prefill_ranks=p_pool.ranks, pass_prompts_max=pass_prompts,
                                engine_time=engine_time, seed=seed, draws=draws)

    st, metrics = run(d_tab, p_tab)
    if uncertainty is not None and uncertainty is not False:
        from .bands import bench_bands
        metrics = bench_bands(metrics, run, uncertainty, m=m, hw=hw, pools=(d_pool, p_pool),
                              tables=(d_tab, p_tab), colocated=colocated,
                              axes={**axes, **extra}, realism=realism,
                              lengths=dict(kv_len=context, prompt_len=i_mean,
                                           final_len=float(isl + osl)))
    gpus = d_pool.gpus if colocated else d_pool.gpus + p_pool.gpus
    deployment = (agg.label() if colocated else
                  f"{p_pool.instances}p:{p_pool.label()} + {d_pool.instances}d:{d_pool.label()}")
    from ..footing import resolved_precisions
    from .footing import bench_footing

    resolved = resolved_precisions(m, hw, axes)
    footing = bench_footing(m, hw, decode_pool=d_pool, prefill_pool=p_pool,
                            axes={**axes, **extra}, state=st,
                            tokens_per_step=d_tab.tokens_per_step, prompt_tokens=i_mean,
                            concurrency=conc, isl=isl, osl=osl,
                            precisions={k: v for k, v in resolved.items() if k != "precision"})
    return to_dataset(metrics, st, conc, num_gpus=gpus, model=m.name, hardware=hw.name,
                      deployment=deployment, isl=isl, osl=osl, range_ratio=float(range_ratio),
                      engine=eng, engine_time=engine_time, decode=d_tab, prefill=p_tab,
                      precisions={**axes, **resolved}, footing=footing, as_frame=as_frame)


def _whole(name: str, v: Any, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not float(v).is_integer() or v < lo or v > 1e7:
        raise SpecError(f"{name} = {v!r} must be a whole number in [{lo}, 10000000]")
    return int(v)


def _concurrency(concurrency) -> list[int]:
    values = [concurrency] if np.ndim(concurrency) == 0 else list(concurrency)
    if not values:
        raise SpecError("concurrency: give at least one value, e.g. 1,2,4,...,512")
    out = [_whole("concurrency", v) for v in values]
    if len(set(out)) != len(out):
        raise SpecError(f"concurrency = {out}: each value once")
    return sorted(out)
