"""The closed loop where a DP rank's KV pool is full: the engine's admission, retraction and
prefill again (:mod:`inference_factory.factory.kv_pool`), simulated on one rank's pool and
step times, read by :func:`.closed_loop.solve_loop`.

Where every request in service fits at its final length in the engine's pool (its
``kv_memory_fraction`` of the GPU less the weights, else the memory model's pool:
``min(N, cap) <= max_batch``, the bound the loop has always used) or the engine reserves
every request's whole output (``admission = "guaranteed"``), nothing is simulated and the
loop is as before. Elsewhere
the simulation of the benchmark's own request stream (lengths drawn as InferenceX's random
dataset, ``prompts_per_client`` requests per client) gives, over its steady window:

* ``batch``: the time-mean number of running requests, the loop's decode batch bound in
  place of ``max_batch`` (an overcommitting engine holds more than fit at final length; one
  that retracts, fewer);
* ``recompute_frac``: prompt tokens prefilled again (a retracted request's prompt and the
  tokens it had generated) per fresh prompt token, the extra prefill work every
  request's share of the passes carries;
* ``retracted_share``: the share of the waiting requests that are retracted ones: their
  wait counts in their TPOT (they had their first token), the rest in TTFT;
* ``retractions_per_request``.
"""

from __future__ import annotations

import numpy as np

from ..factory import kv_pool as kp
from ..specs.engines import ServingEngine

_ADMISSION = {"ratio": kp.ADMIT_RATIO, "exact": kp.ADMIT_EXACT, "prompt": kp.ADMIT_PROMPT}


def _decode_check(rule: str, page: float, draft_depth: float) -> np.ndarray:
    """The decode check's (page, window, pages, rule) for :func:`.kv_pool.decode_need_tokens`
    with a draft of ``draft_depth`` steps (top-k 1, so depth + 1 draft tokens). ``boundary``
    (SGLang 0.5.6 scheduler.py decode_mem_cache_buf_multiplier, schedule_batch.py
    new_page_count_next_decode): window and pages both num_draft_tokens + topk x num_steps
    = 2 d + 1 with a draft; without one, window 0 and one page. ``cover`` (vLLM 0.11.0
    kv_cache_manager.allocate_slots from scheduler.py): the step's 1 + d tokens and d
    lookahead slots, window 1 + 2 d."""
    if rule == "cover":
        return np.array([page, 1.0 + 2.0 * draft_depth, 1.0, kp.CHECK_COVER])
    buffer = 1.0 + 2.0 * draft_depth if draft_depth > 0 else 0.0
    return np.array([page, buffer, max(buffer, 1.0), kp.CHECK_BOUNDARY])


def engine_pool_tokens(memory_fraction, *, hbm_bytes, weight_bytes, bytes_per_token,
                       model_pool_tokens):
    r"""A DP rank's KV pool in tokens under an engine's pool share (``bench``'s full-memory
    loop and ``plan``'s feasibility: one rule).

    .. math:: K = \frac{\max(f\,C - W,\ 0)}{b}

    f the engine's ``kv_memory_fraction`` (SGLang's --mem-fraction-static: weights and KV
    together take f of the GPU's memory C; SGL056 model_runner.py profile_max_num_token), W
    the weight bytes per GPU, b the bytes a token takes per GPU. Where the engine states no
    share (None) or tokens take no bytes: ``model_pool_tokens``, the memory model's pool
    (HBM less weights and the runtime reserve). Arrays broadcast."""
    if memory_fraction is None:
        return model_pool_tokens
    b = np.asarray(bytes_per_token, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.maximum(memory_fraction * np.asarray(hbm_bytes, float)
                       - np.asarray(weight_bytes, float), 0.0) / b
    k = np.where(b > 0, k, model_pool_tokens)
    return float(k) if np.ndim(k) == 0 else k


def sequences_held(pool_tokens, sequence_tokens):
    r"""Requests a pool of ``pool_tokens`` holds at once, each at ``sequence_tokens`` (its
    final length plus its fixed bytes in tokens): :math:`\lfloor K / L \rfloor`, infinite
    where the pool is. Arrays broadcast."""
    k = np.asarray(pool_tokens, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.where(np.isfinite(k), np.floor(k / np.asarray(sequence_tokens, float)), np.inf)
    return float(n) if np.ndim(n) == 0 else n


def full_memory_state(requests_per_rank, *, table, engine: ServingEngine, draft_depth: float,
                      dp_attention: bool, isl: int = 0, osl: int = 0, range_ratio: float = 1.0,
                      prompt_tokens=None, output_tokens=None,
                      request_cap: float, pass_tokens: float, host_s_per_decode_step: float = 0.0,
                      host_s_per_prefill_pass: float = 0.0, prompts_per_client: int = 10,
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Per concurrency (requests per rank, an array): ``full`` (whether the pool binds) and
    the steady state the simulation gives where it does (module docstring; NaN batch, zeros
    elsewhere). The requests are drawn as InferenceX's random dataset (``isl``, ``osl``,
    ``range_ratio``) or, where ``prompt_tokens`` and ``output_tokens`` are given (a trace's
    turns), from those pairs."""
    n = np.atleast_1d(np.asarray(requests_per_rank, dtype=float))
    pool = engine.kv_pool
    page = float(pool.page_tokens)
    tokens = table.engine_pool_tokens(engine.kv_memory_fraction, pool.draft_in_pool)
    if np.isfinite(tokens):
        tokens = np.floor(tokens / page) * page          # whole pages (SGLang, vLLM)
    final = float(isl + osl) if prompt_tokens is None else float(
        np.max(np.asarray(prompt_tokens) + np.asarray(output_tokens)))
    held = kp.paged_tokens(final, page) + table.seq_overhead_tokens
    holds = sequences_held(tokens, held)
    full = (pool.admission != "guaranteed") & (np.minimum(n, request_cap) > holds)
    out = dict(full=full, batch=np.full(n.shape, np.nan), recompute_frac=np.zeros(n.shape),
               retracted_share=np.zeros(n.shape), retractions_per_request=np.zeros(n.shape))
    if not full.any():
        return out
    r0, r_min, decay = pool.ratio(dp_attention)
    newest = (pool.retract_speculative if draft_depth > 0 else pool.retract) == "newest"
    check = _decode_check(pool.decode_check, page, float(draft_depth))
    given = prompt_tokens is not None
    mean_prompt = (float(np.mean(prompt_tokens)) if given
                   else float(np.floor(range_ratio * isl) + isl) / 2.0)
    for i in np.flatnonzero(full):
        clients = max(int(round(n[i])), 1)
        rng = np.random.default_rng(seed)
        total = prompts_per_client * clients
        if given:
            pick = rng.integers(0, len(prompt_tokens), total)
            prompt = np.asarray(prompt_tokens, dtype=float)[pick]
            output = np.asarray(output_tokens, dtype=float)[pick]
        else:
            prompt = rng.integers(int(np.floor(range_ratio * isl)), isl + 1, total).astype(float)
            output = rng.integers(int(np.floor(range_ratio * osl)), osl + 1, total).astype(float)
        s = kp.simulate_kv_pool(
            prompt, np.maximum(output, 1.0), clients, float(tokens),
            float(table.seq_overhead_tokens), float(table.tokens_per_step), check,
            _ADMISSION[pool.admission], newest, pool.requeue == "front", r0, r_min, decay,
            float(pool.retract_decode_steps), float(pool.clip_max_new_tokens),
            float(pool.reserve_tokens_per_request), float(request_cap),
            float(pass_tokens),
            table.batch.astype(float), table.decode_step_s + host_s_per_decode_step,
            table.prompts.astype(float), table.pass_s + host_s_per_prefill_pass, mean_prompt,
            clients)
        t, done = s[kp.T_S], s[kp.COMPLETED]
        if not (t > 0 and done > 0):
            continue
        waiting = s[kp.WAIT_NEW_S] + s[kp.WAIT_RETRACTED_S]
        out["batch"][i] = s[kp.RUNNING_S] / t
        out["recompute_frac"][i] = s[kp.RECOMPUTE_TOKENS] / max(s[kp.FRESH_PREFILL_TOKENS], 1.0)
        out["retracted_share"][i] = s[kp.WAIT_RETRACTED_S] / waiting if waiting > 0 else 0.0
        out["retractions_per_request"][i] = s[kp.RETRACTIONS] / done
    out["full"] = full & np.isfinite(out["batch"])
    return out
