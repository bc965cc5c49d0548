"""``bench``: what a closed-loop serving benchmark measures on one deployment, per concurrency.

A benchmark such as ``vllm bench serve --max-concurrency N`` (InferenceX's harness) keeps N
requests in flight: each client sends a prompt, waits for its last token and sends the next.
This module finds the steady state of that loop at every N at once (vectorized over
concurrency; no per-request event loop): how many sequences decode together, how many prompts
each prefill pass takes, how long prompts wait, and from those TTFT, TPOT, ITL, E2E latency
and throughput, with the keys and units ``vllm bench serve --save-result`` writes.

The engine (:func:`~inference_factory.engine.arrays.evaluate_arrays`) gives the step times
at the batch and context mix the loop implies; the closed-loop formulas are in
:mod:`inference_factory.kernels.serving`; the serving engine's scheduling settings are a
profile of ``configs/serving_engines.toml`` (:mod:`inference_factory.specs.engines`);
the tails and the finite run are in :mod:`.bench_metrics`. docs/MODEL.md section 12 states
every assumption and its bias.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import SpecError
from ..kernels import serving as ks
from ..specs import load_hardware, load_model
from ..specs.engines import ServingEngine, load_serving_engine

#: Bisection steps of the fixed point (the bracket shrinks 2^-60: far below any unit).
_BISECT_STEPS = 60
#: Default concurrencies (InferenceX's sweep: powers of two).
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class Pool:
    """``instances`` copies of one instance shape (tensor, attention-data and expert
    parallel degrees); an instance has tp x dp GPUs and dp attention ranks."""

    instances: int = 1
    tp: int = 1
    dp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.instances * self.tp * self.dp

    @property
    def ranks(self) -> int:
        return self.instances * self.dp

    @property
    def shape(self) -> dict[str, int]:
        return {"tp": self.tp, "dp": self.dp, "ep": self.ep}

    def label(self) -> str:
        parts = [f"{k}{v}" for k, v in self.shape.items() if v > 1] or ["tp1"]
        return " ".join(parts)


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


# ---- step times from the engine ------------------------------------------------------------

@dataclass(frozen=True)
class StepTable:
    """One pool's step times on a grid: decode step at each batch node (at the loop's mean
    context), prefill pass at each prompts-per-pass node (at the mean prompt)."""

    batch: np.ndarray                # decode batch nodes, sequences per DP rank
    decode_step_s: np.ndarray
    tokens_per_step: float
    decode_binding: np.ndarray
    prompts: np.ndarray              # prefill prompts-per-pass nodes
    pass_s: np.ndarray
    prefill_binding: np.ndarray
    max_batch: float                 # sequences per DP rank that fit at ISL + OSL

    def decode_s(self, b):
        return np.interp(np.maximum(b, 1.0), self.batch, self.decode_step_s)

    def prefill_pass_s(self, k):
        return np.interp(np.maximum(k, 1.0), self.prompts, self.pass_s)

    def decode_resource(self, b):
        return self.decode_binding[np.abs(np.log(np.maximum(b, 1.0))[..., None]
                                          - np.log(self.batch)).argmin(-1)]

    def prefill_resource(self, k):
        return self.prefill_binding[np.abs(np.log(np.maximum(k, 1.0))[..., None]
                                           - np.log(self.prompts)).argmin(-1)]


def step_table(m, hw, pool: Pool, axes: Mapping[str, Any], *, mean_prompt: float,
               decode_context: float, final_len: float, batch_cap: float, max_prompts: float,
               realism=None) -> StepTable:
    """Evaluate one pool's decode steps over a batch grid and its prefill passes over a
    prompts-per-pass grid in one engine call."""
    from ..engine.arrays import evaluate_arrays

    def grid(top):
        top = max(float(top), 1.0)
        return np.unique(np.concatenate([np.round(np.geomspace(1.0, top, 24)), [top]]))

    common = dict(pool.shape, **axes, kv_len=decode_context, prompt_len=mean_prompt,
                  final_len=final_len, realism=realism)
    probe = evaluate_arrays(m, hw, batch_size=1.0, variables=["max_batch_size", "fits",
                                                              "weight_bytes_per_gpu"], **common)
    max_batch = float(np.asarray(probe["max_batch_size"]).reshape(-1)[0])
    if max_batch < 1:
        raise SpecError(
            f"{m.name} does not fit on {hw.name} at {pool.label()}: "
            f"{float(np.asarray(probe['weight_bytes_per_gpu']).reshape(-1)[0]) / 1e9:.1f} GB of "
            f"weights per GPU leave no room for one sequence of {final_len:g} tokens; use "
            "more GPUs per instance or a lower precision")
    b = grid(min(batch_cap, max_batch))
    k = grid(min(max_prompts, b[-1]))
    r = evaluate_arrays(m, hw, batch_size=b[:, None], prefill_batch_size=k[None, :],
                        variables=["decode_step_s", "tokens_per_step", "decode_binding_resource",
                                   "prefill_step_s", "prefill_binding_resource"], **common)
    col = lambda v: np.broadcast_to(np.asarray(v), (b.size, k.size))  # noqa: E731
    return StepTable(batch=b, decode_step_s=col(r["decode_step_s"])[:, 0].astype(float),
                     tokens_per_step=float(np.asarray(r["tokens_per_step"]).reshape(-1)[0]),
                     decode_binding=col(r["decode_binding_resource"])[:, 0],
                     prompts=k, pass_s=col(r["prefill_step_s"])[0, :].astype(float),
                     prefill_binding=col(r["prefill_binding_resource"])[0, :],
                     max_batch=max_batch)


# ---- the fixed point ------------------------------------------------------------------------

@dataclass
class LoopState:
    """The steady state per concurrency (arrays), per DP rank where it says so."""

    decoding: np.ndarray             # B: sequences decoding per decode rank
    in_service: np.ndarray           # M: requests in service per rank (colocated)
    request_rate_per_s: np.ndarray   # X of the whole deployment
    decode_step_s: np.ndarray
    tpot_s: np.ndarray               # mean, stalls included
    stall_frac: np.ndarray
    prompts_per_pass: np.ndarray
    pass_s: np.ndarray
    prefill_utilization: np.ndarray
    poll_wait_s: np.ndarray
    busy_probability: np.ndarray
    queue_wait_s: np.ndarray
    cap_wait_s: np.ndarray           # wait for a free slot beyond the request cap
    transfer_s: np.ndarray
    ttft_s: np.ndarray               # mean steady-state TTFT (first wave apart)
    passes_per_s: np.ndarray         # others' prefill passes per second a sequence sees


def _colocated_round(b, m, x, *, td, tau, pass_s_of, max_prompts, recv, out_tokens,
                     mixed_budget_tokens=None, mean_prompt=0.0) -> dict:
    """One round of a colocated rank's loop at decode batch ``b`` with ``m`` requests in
    service and request rate ``x`` (per rank) from the round before: the prompts the poll
    window gathers, the pass, the others' stalls and the request rate they leave, then
    TPOT and TTFT (poll, queue, own prefill). :func:`solve_loop` (``m`` given by the
    concurrency) and :func:`loop_at_batch` (``m`` implied by the batch) iterate it."""
    k = ks.prompts_per_pass(request_rate_per_s=x, gather_window_s=recv * td, in_service=m,
                            max_prompts=max_prompts)
    t_pass = pass_s_of(k)
    tp1 = t_pass / k
    s = ks.others_prefill_stall_frac(request_rate_per_s=1.0, prefill_s_per_request=tp1,
                                     in_service=m)
    x = ks.closed_loop_request_rate_per_s(decoding_sequences=b, decode_step_s=td,
                                          tokens_per_step=tau, decode_tokens_per_request=out_tokens,
                                          stall_s_per_request=s)
    f = x * s
    # a prompt queues behind the others' passes only (none at concurrency 1)
    rho = x * tp1 * (np.maximum(m, 1.0) - 1.0) / np.maximum(m, 1.0)
    # the poll window applies to arrivals during decode steps: one arriving during another's
    # pass is taken right after it (SGLang's skipper resets after a prefill)
    busy = ks.others_busy_probability(decode_share=b / np.maximum(m, 1e-9),
                                      in_service=m) * (1.0 - rho)
    poll = ks.poll_wait_s(recv_interval_steps=recv, decode_step_s=td, busy_probability=busy)
    if mixed_budget_tokens is not None:
        # prompt chunks ride on decode steps: the prompt advances (budget - B tau) tokens a step
        steps = mean_prompt / np.maximum(mixed_budget_tokens - b * tau, 1.0)
        own = steps * td + tp1
    else:
        own = t_pass
    queue = ks.pass_queue_wait_s(utilization=rho, pass_s=own)
    return dict(x=x, k=k, t_pass=t_pass, tp1=tp1, s=s, f=f, rho=rho, busy=busy, poll=poll,
                queue=queue, ttft=poll + queue + own,
                tpot=ks.colocated_tpot_s(decode_step_s=td, tokens_per_step=tau, stall_frac=f))


def solve_loop(concurrency, *, colocated: bool, decode: StepTable, prefill: StepTable,
               decode_ranks: int, prefill_ranks: int, engine: ServingEngine, dp_attention: bool,
               mean_prompt: float, mean_output: float, pass_prompts_max: float,
               transfer_s: float = 0.0, engine_time: bool = True,
               decode_dp: int = 1) -> LoopState:
    """Steady state of the closed loop at each concurrency: the decode batch B per rank
    solving Little's law, ``B + X TTFT(X, B) = N`` per rank (requests are decoding or on
    their way to their first token), by bisection on B (the left side rises with B). The
    decode batch is capped by the request cap per rank and the memory fit and, on a
    disaggregated deployment, where the prefill pool's capacity binds (99 % of its largest
    passes back to back: the M/D/1 wait diverges there); clients beyond a cap wait for a
    slot (``cap_wait_s``, Little's law on the waiting room)."""
    c = np.asarray(concurrency, dtype=float)
    active = np.minimum(float(decode_ranks), c)              # ranks with work
    n = c / active                                            # requests per rank
    cap = min(engine.requests_per_rank(decode_dp), decode.max_batch)
    hi_b = np.minimum(n, cap)
    tau = decode.tokens_per_step
    out_tokens = max(mean_output - 1.0, 1e-9)
    recv = engine.recv_interval(c, dp_attention) if engine_time else np.ones_like(c)
    host_d = engine.host_s_per_decode_step if engine_time else 0.0
    host_p = engine.host_s_per_prefill_pass if engine_time else 0.0
    prank = (active if colocated else float(prefill_ranks))   # prefill ranks with work
    mixed = (engine.pass_tokens_per_rank(decode_dp) if engine.policy == "mixed" else None)

    def pass_s_of(k):
        return prefill.prefill_pass_s(k) + host_p

    def state(b):
        td = decode.decode_s(b) + host_d
        x = ks.closed_loop_request_rate_per_s(decoding_sequences=b, decode_step_s=td,
                                              tokens_per_step=tau,
                                              decode_tokens_per_request=out_tokens)
        if colocated:
            for _ in range(3):                                # k <-> X settle in a few rounds
                r = _colocated_round(b, hi_b, x, td=td, tau=tau, pass_s_of=pass_s_of,
                                     max_prompts=pass_prompts_max, recv=recv,
                                     out_tokens=out_tokens, mixed_budget_tokens=mixed,
                                     mean_prompt=mean_prompt)
                x = r["x"]
            return dict(r, td=td, ttft=r["ttft"] + transfer_s)
        # disaggregated: the decode pool does not stall; a prefill-only server gathers the
        # arrivals during its own pass and polls after every pass (no poll window)
        xp = x * active / prank
        k = np.ones_like(c)
        for _ in range(3):
            k = ks.prompts_per_pass(request_rate_per_s=xp, gather_window_s=pass_s_of(k),
                                    in_service=c / prank, max_prompts=pass_prompts_max)
        t_pass = pass_s_of(k)
        n_p = np.maximum(c / prank, 1.0)
        rho = xp * t_pass / k * (n_p - 1.0) / n_p
        queue = ks.pass_queue_wait_s(utilization=rho, pass_s=t_pass)
        zero = np.zeros_like(c)
        return dict(x=x, td=td, k=k, t_pass=t_pass, s=zero, f=zero, rho=rho, busy=zero,
                    poll=zero, queue=queue, ttft=queue + t_pass + transfer_s,
                    tpot=ks.colocated_tpot_s(decode_step_s=td, tokens_per_step=tau,
                                             stall_frac=zero))

    def excess(b):
        st = state(b)
        return b + st["x"] * st["ttft"] - n, st

    if not colocated:      # the decode batch the prefill pool can feed
        x_cap = 0.99 * prank * pass_prompts_max / pass_s_of(
            np.full_like(c, pass_prompts_max)) / active
        lo_f, hi_f = np.zeros_like(c), hi_b.copy()
        for _ in range(_BISECT_STEPS):
            mid = 0.5 * (lo_f + hi_f)
            fast = state(np.maximum(mid, 1e-12))["x"] > x_cap
            hi_f, lo_f = np.where(fast, mid, hi_f), np.where(fast, lo_f, mid)
        hi_b = np.minimum(hi_b, np.where(state(hi_b)["x"] > x_cap, lo_f, hi_b))
    lo, hi = np.zeros_like(c), hi_b.copy()
    g_hi, _ = excess(hi)
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        g, _ = excess(np.maximum(mid, 1e-12))
        up = g > 0
        hi, lo = np.where(up, mid, hi), np.where(up, lo, mid)
    # where even a full cap leaves requests over (g(cap) < 0) they queue for a slot
    b = np.where(g_hi < 0, hi_b, 0.5 * (lo + hi))
    g, st = excess(np.maximum(b, 1e-12))
    x = st["x"]
    cap_wait = np.where(g < 0, -g / np.maximum(x, 1e-300), 0.0)
    rate = x * active
    return LoopState(decoding=b, in_service=hi_b, request_rate_per_s=rate,
                     decode_step_s=st["td"], tpot_s=st["tpot"], stall_frac=st["f"],
                     prompts_per_pass=st["k"], pass_s=st["t_pass"],
                     prefill_utilization=st["rho"], poll_wait_s=st["poll"],
                     busy_probability=st["busy"], queue_wait_s=st["queue"],
                     cap_wait_s=cap_wait, transfer_s=np.full_like(c, transfer_s),
                     ttft_s=st["ttft"] + cap_wait,
                     passes_per_s=(x * np.asarray(st["s"]) / np.maximum(st["t_pass"], 1e-300)
                                   if colocated else np.zeros_like(c)))


def loop_at_batch(decoding, *, tpot0_s, decode_step_s, pass_s_of, max_prompts,
                  decode_tokens_per_request, recv_interval_steps, mixed_budget_tokens=None,
                  mean_prompt: float = 0.0, rounds: int = 8) -> dict:
    """The colocated closed loop of one DP rank at a GIVEN decode batch (the inverse of
    :func:`solve_loop`, which finds the batch for a concurrency), by the same round
    (:func:`_colocated_round`) with the requests in service that batch implies,
    ``M = B + X TTFT``. ``pass_s_of(k)`` is the prefill pass of k prompts (arrays
    broadcast). ``plan`` reads its aggregated candidates through it, so a plan row and
    ``bench`` at the row's ``concurrency`` are one steady state. Where prefill cannot keep
    up with the decode batch (stall share or prefill utilisation reaching 1) the values are
    NaN."""
    b = np.asarray(decoding, dtype=float)
    tau = decode_step_s / tpot0_s
    m = np.maximum(b, 1.0)
    x = ks.closed_loop_request_rate_per_s(decoding_sequences=b, decode_step_s=decode_step_s,
                                          tokens_per_step=tau,
                                          decode_tokens_per_request=decode_tokens_per_request)
    for _ in range(rounds):            # M, k <-> X: (M - 1)/M and k settle in a few rounds
        r = _colocated_round(b, m, x, td=decode_step_s, tau=tau, pass_s_of=pass_s_of,
                             max_prompts=max_prompts, recv=recv_interval_steps,
                             out_tokens=decode_tokens_per_request,
                             mixed_budget_tokens=mixed_budget_tokens, mean_prompt=mean_prompt)
        x = r["x"]
        m = b + x * r["ttft"]
    ok = (r["f"] < 1.0) & (x * r["tp1"] < 1.0)
    nan = lambda a: np.where(ok, a, np.nan)  # noqa: E731
    return dict(request_rate_per_s=nan(x), in_service=nan(m), ttft_s=nan(r["ttft"]),
                tpot_s=nan(r["tpot"]), prompts_per_pass=r["k"], pass_s=r["t_pass"],
                stall_frac=nan(r["f"]), poll_wait_s=nan(r["poll"]),
                queue_wait_s=nan(r["queue"]))


# ---- the public entry -----------------------------------------------------------------------

def bench(model: str = "DeepSeek-V3", hardware: str = "B200", *, tp: int = 1, dp: int = 1,
          ep: int = 1, prefill_pool: Pool | Mapping[str, Any] | None = None,
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
          uncertainty: Any = None, as_frame: bool = False):
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
    ``<name>_high`` (the 80 % band, :mod:`.bench_bands`) beside each throughput and latency.

    Returns an ``xr.Dataset`` over ``concurrency`` whose variables carry
    ``vllm bench serve --save-result``'s keys and units (``median_ttft_ms``, ``output_throughput``,
    ...), plus ``num_gpus``, per-GPU throughputs, ``interactivity`` (1000 / median TPOT ms,
    InferenceX's definition), the binding resources and the state the loop settled on.
    ``as_frame=True`` returns its tidy frame instead (``ds.to_dataframe().reset_index()``
    with the attributes in ``df.attrs``), built without xarray (the command line's path).
    """
    from .bench_metrics import DRAWS, run_metrics, to_dataset

    m, hw = load_model(model), load_hardware(hardware)
    eng = load_serving_engine(engine)
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
    p_pool, d_pool = _pool(prefill_pool, "prefill_pool"), _pool(decode_pool, "decode_pool")
    if (p_pool is None) != (d_pool is None):
        raise SpecError("a disaggregated deployment needs both prefill_pool and decode_pool")
    colocated = p_pool is None
    agg = Pool(1, _whole("tp", tp), _whole("dp", dp), _whole("ep", ep))
    d_pool = agg if colocated else d_pool
    p_pool = agg if colocated else p_pool

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
    if acceptance_rate is not None:
        axes["acceptance_rate"] = float(acceptance_rate)
    extra = {"draft_model": draft_model} if draft_model is not None else {}
    # an MTP draft's acceptance falls with its position as in plan and simulate
    from .plan import with_mtp_acceptance
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
        from ..engine.arrays import _realism
        rl = _realism(False, realism)
        link = hw.scale_out_bw_bytes_per_s * p_pool.tp * rl.out_frac
        transfer = float(ks.kv_transfer_s(prompt_tokens=i_mean,
                                          kv_bytes_per_token=m.kv_bytes_per_token(
                                              axes.get("kv_precision", "bf16")),
                                          link_bytes_per_s=link, latency_s=rl.out_latency_s))
    prompts = (np.asarray([10 * c for c in conc], dtype=float) if num_prompts is None
               else np.full(len(conc), float(num_prompts)))

    def run(dt: StepTable, pt: StepTable, draws: int = DRAWS):
        st_ = solve_loop(conc, colocated=colocated, decode=dt, prefill=pt,
                         decode_ranks=d_pool.ranks, prefill_ranks=p_pool.ranks, engine=eng,
                         dp_attention=d_pool.dp > 1, mean_prompt=i_mean, mean_output=o_mean,
                         pass_prompts_max=pass_prompts, transfer_s=transfer,
                         engine_time=engine_time, decode_dp=d_pool.dp)
        return st_, run_metrics(st_, np.asarray(conc, dtype=float), prompts, isl=isl, osl=osl,
                                range_ratio=float(range_ratio), engine=eng,
                                colocated=colocated, decode=dt, prefill=pt,
                                prefill_ranks=p_pool.ranks, pass_prompts_max=pass_prompts,
                                engine_time=engine_time, seed=seed, draws=draws)

    st, metrics = run(d_tab, p_tab)
    if uncertainty is not None and uncertainty is not False:
        from .bench_bands import bench_bands
        metrics = bench_bands(metrics, run, uncertainty, m=m, hw=hw, pools=(d_pool, p_pool),
                              tables=(d_tab, p_tab), colocated=colocated,
                              axes={**axes, **extra}, realism=realism,
                              lengths=dict(kv_len=context, prompt_len=i_mean,
                                           final_len=float(isl + osl)))
    gpus = d_pool.gpus if colocated else d_pool.gpus + p_pool.gpus
    deployment = (agg.label() if colocated else
                  f"{p_pool.instances}p:{p_pool.label()} + {d_pool.instances}d:{d_pool.label()}")
    return to_dataset(metrics, st, conc, num_gpus=gpus, model=m.name, hardware=hw.name,
                      deployment=deployment, isl=isl, osl=osl, range_ratio=float(range_ratio),
                      engine=eng, engine_time=engine_time, decode=d_tab, prefill=p_tab,
                      precisions=axes, as_frame=as_frame)


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
