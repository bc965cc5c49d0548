"""The closed loop of a serving deployment, shared by ``bench`` and ``plan``.

N clients keep N requests in flight: each sends a prompt, waits for its last token and sends
the next. Here are the pools (:class:`Pool`), one pool's step times on a batch grid from the
engine (:class:`StepTable`, :func:`step_table`) and the steady state of the loop:
:func:`solve_loop` finds the decode batch for each concurrency (``bench``),
:func:`loop_at_batch` the concurrency a given decode batch implies (``plan``'s aggregated
candidates); both iterate one colocated round (:func:`_colocated_round`), so a plan row and
``bench`` at the row's concurrency are one steady state. The closed-loop formulas are in
:mod:`inference_factory.kernels.serving`; the serving engine's scheduling settings are a
profile of ``configs/serving_engines.toml`` (:mod:`inference_factory.specs.engines`).
docs/MODEL.md section 12 states every assumption and its bias.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..errors import SpecError
from ..kernels import serving as ks
from ..specs.engines import ServingEngine

#: Bisection steps of the fixed point (the bracket shrinks 2^-60: far below any unit).
_BISECT_STEPS = 60


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
    pool_tokens: float = np.inf      # a DP rank's KV pool in tokens (HBM left / bytes a token)
    seq_overhead_tokens: float = 0.0  # a sequence's own bytes (activations, state) in tokens
    weight_bytes: float = 0.0        # per GPU, and the GPU's memory and the bytes a token
    hbm_bytes: float = 0.0           # takes per GPU (an engine's own pool share:
    bytes_per_token: float = 0.0     # :func:`.full_memory.engine_pool`)
    draft_weight_bytes: float = 0.0  # the draft's share of weight_bytes and bytes_per_token
    draft_bytes_per_token: float = 0.0
    context_tokens: float = 0.0      # the engine's context length (the model's)
    draft_depth: float = 0.0         # draft tokens per decode step (0: no draft)

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
    from ..engine import evaluate_arrays
    from .full_memory import sequence_memory

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
    # the pool at the run's depth and the draft's share against depth 0 (the target alone),
    # over one depth axis as plan's candidates take them (plan/candidates.py _pool_vars)
    pool, over, tok, wts = sequence_memory(
        m, hw, dict(common, draft_depth=[0.0, float(np.max(np.asarray(
            axes.get("draft_depth", 0.0))))]), final_len)
    pool_tok, overhead, per_token = float(pool[1]), float(over[1]), float(tok[1])
    draft_w, draft_b = float(wts[1] - wts[0]), float(tok[1] - tok[0])
    weights = float(np.asarray(probe["weight_bytes_per_gpu"]).reshape(-1)[0])
    b = grid(min(batch_cap, max_batch))
    k = grid(min(max_prompts, b[-1]))
    # an engine that overcommits its pool (analysis/full_memory.py) runs batches past the
    # final-length fit, up to the prompts alone filling it: nodes beyond, the grid below kept
    most = min(float(batch_cap), pool_tok / max(mean_prompt + overhead, 1.0))
    if np.isfinite(most) and most > b[-1] * 1.01:
        b = np.unique(np.concatenate([b, np.round(np.geomspace(b[-1], most, 6)[1:])]))
    r = evaluate_arrays(m, hw, batch_size=b[:, None], prefill_batch_size=k[None, :],
                        variables=["decode_step_s", "tokens_per_step", "decode_binding_resource",
                                   "prefill_step_s", "prefill_binding_resource"], **common)
    col = lambda v: np.broadcast_to(np.asarray(v), (b.size, k.size))  # noqa: E731
    return StepTable(batch=b, decode_step_s=col(r["decode_step_s"])[:, 0].astype(float),
                     tokens_per_step=float(np.asarray(r["tokens_per_step"]).reshape(-1)[0]),
                     decode_binding=col(r["decode_binding_resource"])[:, 0],
                     prompts=k, pass_s=col(r["prefill_step_s"])[0, :].astype(float),
                     prefill_binding=col(r["prefill_binding_resource"])[0, :],
                     max_batch=max_batch, pool_tokens=pool_tok, seq_overhead_tokens=overhead,
                     weight_bytes=weights, hbm_bytes=float(hw.hbm_capacity_bytes),
                     bytes_per_token=per_token, draft_weight_bytes=draft_w,
                     draft_bytes_per_token=draft_b,
                     context_tokens=float(m.max_position_embeddings),
                     draft_depth=float(np.max(np.asarray(axes.get("draft_depth", 0.0)))))


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
    # where the KV pool is full (analysis/full_memory.py): whether it is, retractions and
    # prompt tokens prefilled again per request, the retracted requests' wait (mean over all
    # requests: it counts in their TPOT, not in tpot_s; the rest of the wait for a slot, in
    # cap_wait_s, in TTFT)
    kv_full: np.ndarray | None = None
    retractions_per_request: np.ndarray | None = None
    recompute_frac: np.ndarray | None = None
    retracted_wait_s: np.ndarray | None = None


def _colocated_round(b, m, x, *, td, tau, pass_s_of, max_prompts, recv, out_tokens,
                     mixed_budget_tokens=None, mean_prompt=0.0, recompute=0.0,
                     step_tokens_per_request=1.0) -> dict:
    """One round of a colocated rank's loop at decode batch ``b`` with ``m`` requests in
    service and request rate ``x`` (per rank) from the round before: the prompts the poll
    window gathers, the pass, the others' stalls and the request rate they leave, then
    TPOT and TTFT (poll, queue, own prefill). :func:`solve_loop` (``m`` given by the
    concurrency) and :func:`loop_at_batch` (``m`` implied by the batch) iterate it.
    ``recompute``: prompt tokens prefilled again per fresh one (a full KV pool's retracted
    requests), which the others' stalls and the passes' utilisation carry.
    ``step_tokens_per_request``: the tokens a decoding request takes of a mixed step's
    budget, 1 + draft depth: every draft is scheduled and verified, accepted or not (vLLM
    0.22.0 v1/core/sched/scheduler.py lines 385-389: num_tokens_with_spec - num_computed_tokens
    counted against token_budget, line 498), not the accepted tokens per step ``tau``."""
    k = ks.prompts_per_pass(request_rate_per_s=x, gather_window_s=recv * td, in_service=m,
                            max_prompts=max_prompts)
    t_pass = pass_s_of(k)
    tp1 = t_pass / k * (1.0 + recompute)
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
        # prompt chunks ride on decode steps: the prompt advances (budget - B (1 + d)) tokens
        steps = mean_prompt / np.maximum(mixed_budget_tokens - b * step_tokens_per_request, 1.0)
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
               decode_dp: int = 1, lengths: Mapping[str, Any] | None = None) -> LoopState:
    """Steady state of the closed loop at each concurrency: the decode batch B per rank
    solving Little's law, ``B + X TTFT(X, B) = N`` per rank (requests are decoding or on
    their way to their first token), by bisection on B (the left side rises with B). The
    decode batch is capped by the request cap per rank and the memory fit and, on a
    disaggregated deployment, where the prefill pool's capacity binds (99 % of its largest
    passes back to back: the M/D/1 wait diverges there); clients beyond a cap wait for a
    slot (``cap_wait_s``, Little's law on the waiting room). ``lengths`` (isl, osl and
    range_ratio or a trace's prompt_tokens and output_tokens; draft_depth, seed) turns on the full KV pool of a colocated deployment
    (:func:`.full_memory.full_memory_state`): where the pool binds, the decode batch bound
    is the simulated engine's and retracted requests' prefill again and wait enter."""
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
    mixed = engine.mixed_pass_tokens(decode_dp)   # None: prefill passes run on their own
    fm = None
    if lengths is not None and colocated:
        from .full_memory import full_memory_state
        fm = full_memory_state(n, table=decode, engine=engine, dp_attention=dp_attention,
                               request_cap=engine.requests_per_rank(decode_dp),
                               pass_tokens=engine.pass_tokens_per_rank(decode_dp),
                               host_s_per_decode_step=host_d, host_s_per_prefill_pass=host_p,
                               **lengths)
        hi_b = np.where(fm["full"], np.minimum(np.minimum(n, engine.requests_per_rank(
            decode_dp)), fm["batch"]), hi_b)
    recompute = fm["recompute_frac"] if fm is not None else 0.0

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
                                     mean_prompt=mean_prompt, recompute=recompute,
                                     step_tokens_per_request=1.0 + decode.draft_depth)
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
    retracted_wait = cap_wait * fm["retracted_share"] if fm is not None else np.zeros_like(c)
    cap_wait = cap_wait - retracted_wait
    rate = x * active
    return LoopState(decoding=b, in_service=hi_b, request_rate_per_s=rate,
                     decode_step_s=st["td"], tpot_s=st["tpot"], stall_frac=st["f"],
                     prompts_per_pass=st["k"], pass_s=st["t_pass"],
                     prefill_utilization=st["rho"], poll_wait_s=st["poll"],
                     busy_probability=st["busy"], queue_wait_s=st["queue"],
                     cap_wait_s=cap_wait, transfer_s=np.full_like(c, transfer_s),
                     ttft_s=st["ttft"] + cap_wait,
                     passes_per_s=(x * np.asarray(st["s"]) / np.maximum(st["t_pass"], 1e-300)
                                   if colocated else np.zeros_like(c)),
                     kv_full=fm["full"] if fm is not None else np.zeros(c.shape, bool),
                     retractions_per_request=(fm["retractions_per_request"] if fm is not None
                                              else np.zeros_like(c)),
                     recompute_frac=np.broadcast_to(recompute, c.shape).astype(float),
                     retracted_wait_s=retracted_wait)


def loop_at_batch(decoding, *, tpot0_s, decode_step_s, pass_s_of, max_prompts,
                  decode_tokens_per_request, recv_interval_steps, mixed_budget_tokens=None,
                  mean_prompt: float = 0.0, rounds: int = 8, draft_depth=0.0) -> dict:
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
                             mixed_budget_tokens=mixed_budget_tokens, mean_prompt=mean_prompt,
                             step_tokens_per_request=1.0 + np.asarray(draft_depth, dtype=float))
        x = r["x"]
        m = b + x * r["ttft"]
    ok = (r["f"] < 1.0) & (x * r["tp1"] < 1.0)
    nan = lambda a: np.where(ok, a, np.nan)  # noqa: E731
    return dict(request_rate_per_s=nan(x), in_service=nan(m), ttft_s=nan(r["ttft"]),
                tpot_s=nan(r["tpot"]), prompts_per_pass=r["k"], pass_s=r["t_pass"],
                stall_frac=nan(r["f"]), poll_wait_s=nan(r["poll"]),
                queue_wait_s=nan(r["queue"]))
