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


def sequence_line(bytes_at_half, bytes_at_final, final_tokens):
    r"""A sequence's bytes per GPU as a line :math:`a + b L` through its bytes at half its
    final length and at the final length: (b, the bytes a token takes; a / b, its fixed
    bytes in tokens, at least 0). A windowed layer's ring is exact between the two where
    both pass the window. b 0 where the bytes do not grow (then a / b is 0). Arrays
    broadcast."""
    half = 0.5 * float(final_tokens)
    lo, hi = np.asarray(bytes_at_half, float), np.asarray(bytes_at_final, float)
    b = (hi - lo) / half
    grows = b > 0
    b = np.where(grows, b, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(grows, np.maximum(lo - b * half, 0.0) / b, 0.0)
    return (float(b), float(a)) if np.ndim(b) == 0 else (b, a)


def sequence_memory(m, hw, common, final_len: float):
    """(the memory model's pool in tokens, a sequence's fixed bytes in tokens, the bytes a
    token takes per GPU, the weight bytes per GPU) of one deployment (engine keywords
    ``common``), from the engine's HBM use at batches 1 and 2 and two sequence lengths (the
    second batch's sequence costs ``a + b L``, :func:`sequence_line`; the pool is what
    weights and reserve leave, over b). The lengths are the final length and half of it.
    ``common``'s ``draft_depth`` may be a list: each is an array over it (``plan``), else
    floats (``bench``'s step table). No growth: an infinite pool, 0, 0."""
    from ..engine import evaluate_arrays

    lengths = np.array([0.5 * final_len, final_len])
    depth = np.asarray(common.get("draft_depth", 0.0), dtype=float)
    d = depth.reshape(-1, 1)
    r = evaluate_arrays(m, hw, batch_size=np.array([1.0, 2.0])[:, None, None],
                        variables=["hbm_used_bytes_per_gpu", "weight_bytes_per_gpu"],
                        **{**common, "draft_depth": d, "kv_len": lengths[None, None, :],
                           "final_len": lengths[None, None, :]})
    shape = (2, d.shape[0], 2)
    used = np.broadcast_to(np.asarray(r["hbm_used_bytes_per_gpu"], dtype=float), shape)
    weights = np.broadcast_to(np.asarray(r["weight_bytes_per_gpu"], dtype=float), shape)
    per_seq = used[1] - used[0]                       # a + b L at the two lengths
    per_token, overhead = sequence_line(per_seq[:, 0], per_seq[:, 1], final_len)
    fixed = used[0, :, 1] - per_seq[:, 1]             # weights + reserve
    grows = per_token > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        pool = np.where(grows, (hw.hbm_capacity_bytes - fixed) / per_token, np.inf)
    out = (pool, np.where(grows, overhead, 0.0), np.where(grows, per_token, 0.0),
           weights[0, :, 1])
    return tuple(float(x[0]) for x in out) if depth.ndim == 0 else out


def pool_memory_fraction(memory_fraction, pool, context_tokens):
    """The engine's pool share of the GPU where the engine's context is ``context_tokens``:
    ``kv_memory_fraction`` times ``kv_pool.memory_fraction_factor`` where the context is
    above ``kv_pool.memory_fraction_factor_above_context`` (SGLang's aiter attention
    backend, 0.85 above 8192: SGL056 server_args.py lines 1420-1422, SGL0512 lines
    2805-2807, _handle_attention_backend_compatibility, applied after the user's
    --mem-fraction-static); None stays None."""
    if memory_fraction is None:
        return None
    above = float(context_tokens) > pool.memory_fraction_factor_above_context
    return memory_fraction * (pool.memory_fraction_factor if above else 1.0)


def engine_pool(engine: ServingEngine, *, context_tokens, hbm_bytes, weight_bytes,
                bytes_per_token, draft_weight_bytes=0.0, draft_bytes_per_token=0.0,
                model_pool_tokens=np.inf):
    """A DP rank's KV pool in tokens under ``engine``'s profile, in whole KV pages
    (``kv_pool.page_tokens``; SGLang, vLLM): :func:`engine_pool_tokens` at the share
    :func:`pool_memory_fraction` gives, less the draft's weights and bytes a token where
    the draft is not in the pool (``kv_pool.draft_in_pool`` false: SGLang sizes the
    target's pool alone). ``bench``'s full-memory loop and ``plan``'s feasibility both
    size the pool here. Arrays broadcast."""
    pool = engine.kv_pool
    weights = np.asarray(weight_bytes, float)
    per_token = np.asarray(bytes_per_token, float)
    if not pool.draft_in_pool:
        weights = weights - np.asarray(draft_weight_bytes, float)
        per_token = per_token - np.asarray(draft_bytes_per_token, float)
    k = engine_pool_tokens(pool_memory_fraction(engine.kv_memory_fraction, pool,
                                                context_tokens),
                           hbm_bytes=hbm_bytes, weight_bytes=weights,
                           bytes_per_token=per_token, model_pool_tokens=model_pool_tokens)
    page = float(pool.page_tokens)
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        k = np.where(np.isfinite(k), np.floor(k / page) * page, k)
    return float(k) if np.ndim(k) == 0 else k


def engine_overhead_tokens(engine: ServingEngine, overhead_tokens, *, bytes_per_token,
                           draft_bytes_per_token=0.0):
    r"""A sequence's fixed bytes in the tokens of ``engine``'s pool (:func:`engine_pool`):
    ``overhead_tokens`` is :math:`a / b` (:func:`sequence_line`, b the bytes a token takes
    with the draft's); where the draft is not in the pool (``kv_pool.draft_in_pool``
    false) the pool counts target tokens of :math:`b_t = b - b_d` bytes, so the same bytes
    are :math:`a / b_t = (a / b)\, b / b_t` of them. Unchanged where the draft is in the pool
    or the target's tokens take no bytes. Arrays broadcast."""
    over = np.asarray(overhead_tokens, float)
    if not engine.kv_pool.draft_in_pool:
        b = np.asarray(bytes_per_token, float)
        b_t = b - np.asarray(draft_bytes_per_token, float)
        with np.errstate(divide="ignore", invalid="ignore"):
            over = np.where(b_t > 0, over * b / b_t, over)
    return float(over) if np.ndim(over) == 0 else over


def engine_sequences_held(engine: ServingEngine, pool_tokens, *, final_tokens,
                          overhead_tokens):
    """Requests ``engine``'s pool of ``pool_tokens`` holds at once at ``final_tokens``
    each: whole pages of the final length plus the sequence's fixed bytes in tokens
    (:func:`sequences_held`)."""
    held = kp.paged_tokens(float(final_tokens), float(engine.kv_pool.page_tokens))
    return sequences_held(pool_tokens, held + np.asarray(overhead_tokens, float))


def full_memory_state(requests_per_rank, *, table, engine: ServingEngine, draft_depth: float,
                      dp_attention: bool, isl: int = 0, osl: int = 0, range_ratio: float = 1.0,
                      prompt_tokens=None, output_tokens=None,
                      request_cap: float, pass_tokens: float, host_s_per_decode_step: float = 0.0,
                      host_s_per_prefill_pass: float = 0.0, prompts_per_client: int = 10,
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Per concurrency (requests per rank, an array): ``full`` (whether the pool binds) and
    the steady state the simulation gives where it does (module docstring; NaN batch, zeros
    elsewhere), and ``held``, the requests the pool holds at the final length
    (:func:`engine_sequences_held`, what ``plan`` bounds a decode batch by). The requests
    are drawn as InferenceX's random dataset (``isl``, ``osl``, ``range_ratio``) or, where
    ``prompt_tokens`` and ``output_tokens`` are given (a trace's turns), from those
    pairs."""
    n = np.atleast_1d(np.asarray(requests_per_rank, dtype=float))
    pool = engine.kv_pool
    page = float(pool.page_tokens)
    tokens = engine_pool(engine, context_tokens=table.context_tokens,
                         hbm_bytes=table.hbm_bytes, weight_bytes=table.weight_bytes,
                         bytes_per_token=table.bytes_per_token,
                         draft_weight_bytes=table.draft_weight_bytes,
                         draft_bytes_per_token=table.draft_bytes_per_token,
                         model_pool_tokens=table.pool_tokens)
    final = float(isl + osl) if prompt_tokens is None else float(
        np.max(np.asarray(prompt_tokens) + np.asarray(output_tokens)))
    overhead = engine_overhead_tokens(engine, table.seq_overhead_tokens,
                                      bytes_per_token=table.bytes_per_token,
                                      draft_bytes_per_token=table.draft_bytes_per_token)
    holds = engine_sequences_held(engine, tokens, final_tokens=final,
                                  overhead_tokens=overhead)
    full = (pool.admission != "guaranteed") & (np.minimum(n, request_cap) > holds)
    out = dict(full=full, batch=np.full(n.shape, np.nan), recompute_frac=np.zeros(n.shape),
               retracted_share=np.zeros(n.shape), retractions_per_request=np.zeros(n.shape),
               held=np.full(n.shape, float(holds)))
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
            float(overhead), float(table.tokens_per_step), check,
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
