"""What a serving engine does when its KV pool is full: one DP rank's closed loop simulated
over scheduler iterations (admission, growth, retraction, prefill again).

N clients each keep one request in flight (``vllm bench serve --max-concurrency N``); a
request of I prompt and O output tokens occupies :math:`p\\lceil (I + g)/p\\rceil + s_0` tokens of
the rank's pool of K tokens after g generated tokens: whole pages of p tokens (the attention
backend's page or block size) and s0, the per-sequence bytes (activations, state) in tokens.
Every iteration is one of:

* a **prefill pass** (prefill-first: whenever a waiting request is admitted), taking waiting
  requests in queue order while the pass budget P, the request cap R and the admission rule
  allow; a request that was retracted is prefilled again over its prompt and the tokens it
  had generated (recomputation);
* a **decode step** of the B running requests, each gaining tau tokens (the step's mean
  accepted tokens), after checking that the pool holds the pages the step may take (the
  engine's decode check, :func:`decode_need_tokens`: a request of length s needs pages where
  its next w tokens cross a page boundary); where it does not, requests are retracted (their
  KV freed) until it does, and go back to the waiting queue with their generated tokens kept.

Admission rules (``admission``), each from the engine's scheduler code (cited in
``configs/serving_engines.toml``):

* ``ADMIT_RATIO`` (SGLang with its radix cache): admit if
  :math:`I + \\min(O - g, c) < F - r \\sum_{run} \\min(O_j - g_j, c) - \\sum_{pass}(I_j + \\min(O_j - g_j, c))`,
  F the free tokens, r the new-token ratio (init r0, down by ``ratio_decay`` per decode
  step to ``ratio_min``; after a retraction
  :math:`r = \\min(1, (\\sum g + s_r B) / (\\sum O + 1))`), c the clip of the estimate;
* ``ADMIT_EXACT`` (SGLang with ``--ignore-eos`` and no radix cache): the running requests,
  the pass's and the candidate, sorted by tokens left, must keep
  :math:`F' + \\sum_{k<i} (I_k + g_k) - (O_i - g_i)(n - i) > e\\,(n - i)` at each finish in
  lockstep (F' the free tokens less the pass's prompts, e the reserve per request);
* ``ADMIT_PROMPT`` (vLLM V1): admit if the prompt's tokens are free; no admission in an
  iteration that preempted.

Retraction order (``retract_newest``): the request admitted last (vLLM; SGLang with a
draft) or the one with the fewest generated tokens, longest prompt first (SGLang); the
retracted request goes to the back (SGLang) or the front (vLLM, ``requeue_front``) of the
queue. Iterations take the decode step time at batch B and the prefill pass time at the
pass's prompt tokens over the mean prompt, from the tables given (``b_grid, b_time_s,
k_grid, k_time_s``). ASSUMPTIONS: a prompt longer than the pass budget runs whole in one
pass (chunking only moves the work between passes); arrivals are seen at once (no poll
window); a request's draft slots are held only within a step (the decode check's window).

Statistics are kept from the ``steady_after``-th completion (``bench``: N, the first wave's
lockstep start left out) until the last of the stream's requests is sent.
"""

import numpy as np
from numba import njit

ADMIT_RATIO, ADMIT_EXACT, ADMIT_PROMPT = 0, 1, 2
CHECK_BOUNDARY, CHECK_COVER = 0, 1

#: indices of :func:`simulate_kv_pool`'s result
(T_S, RUNNING_S, WAIT_NEW_S, WAIT_RETRACTED_S, COMPLETED, FRESH_PREFILL_TOKENS,
 RECOMPUTE_TOKENS, RETRACTIONS, DECODE_STEPS, PREFILL_PASSES, ADMISSIONS) = range(11)
N_STATS = 11


@njit(cache=True)
def exact_admission_fits(left, occ, n, cur_free, reserve):
    """SGLang's ``add_one_req_ignore_eos`` check over n requests (tokens ``left`` to
    generate, tokens ``occ`` held): sorted by tokens left, the free tokens ``cur_free`` plus
    those the earlier finishers free, less the growth of the n - i still running, must exceed
    ``reserve`` per running request at every finish."""
    order = np.argsort(left[:n])
    freed = 0.0
    for i in range(n):
        k = order[i]
        bs = n - i
        if cur_free + freed - left[k] * bs <= reserve * bs:
            return False
        freed += occ[k]
    return True


@njit(cache=True)
def paged_tokens(tokens, page):
    """Tokens that whole pages of ``page`` tokens take to hold ``tokens`` (SGLang
    ``PrefillAdder.ceil_paged_tokens``; vLLM's blocks)."""
    return np.ceil(tokens / page - 1e-9) * page


@njit(cache=True)
def decode_need_tokens(length, page, window, pages, check):
    r"""Free tokens the engine's decode check asks for a request of ``length`` tokens before a
    step. ``CHECK_BOUNDARY`` (SGLang ``ScheduleBatch.check_decode_mem``): ``pages`` pages where
    a multiple of ``page`` lies in [s, s + window] (every request where ``page`` is 1);
    ``CHECK_COVER`` (vLLM ``allocate_slots``): the pages that cover ``window`` more tokens,
    :math:`p(\lceil (s + w)/p\rceil - \lceil s/p\rceil)`."""
    s = np.floor(length + 1e-9)
    if check == CHECK_BOUNDARY:
        crosses = np.floor((s + window) / page) - np.floor((s - 1.0) / page) > 0.5
        return pages * page if crosses else 0.0
    return (np.ceil((s + window) / page - 1e-9) - np.ceil(s / page - 1e-9)) * page


@njit(cache=True)
def running_need_tokens(state, inp, gen, n, page, window, pages, check):
    """:func:`decode_need_tokens` over the running requests."""
    need = 0.0
    for c in range(n):
        if state[c] == 1:
            need += decode_need_tokens(inp[c] + gen[c], page, window, pages, check)
    return need


@njit(cache=True)
def _retract(state, adm, gen, inp, queue, qs, n, running, used, pool_tokens, overhead, check,
             retract_newest, requeue_front):
    """Retract running requests until the decode check (``check`` = page, window, pages,
    rule: :func:`decode_need_tokens`) passes (at least one; never the last). ``qs`` = [head,
    tail, queue size]. Returns (running, used, retracted)."""
    count = 0
    page, window, pages, rule = check[0], check[1], check[2], int(check[3])
    while running > 1 and (count == 0 or pool_tokens - used < running_need_tokens(
            state, inp, gen, n, page, window, pages, rule)):
        victim = -1
        for c in range(n):
            if state[c] != 1:
                continue
            if victim < 0:
                victim = c
            elif retract_newest:
                if adm[c] > adm[victim]:
                    victim = c
            elif gen[c] < gen[victim] or (gen[c] == gen[victim] and (
                    inp[c] > inp[victim] or (inp[c] == inp[victim] and adm[c] > adm[victim]))):
                victim = c              # ties: the later in the batch (a stable sort's pop)
        state[victim] = 0
        running -= 1
        used -= paged_tokens(inp[victim] + gen[victim], page) + overhead
        if requeue_front:
            qs[0] = (qs[0] - 1) % qs[2]
            queue[qs[0]] = victim
        else:
            queue[qs[1]] = victim
            qs[1] = (qs[1] + 1) % qs[2]
        count += 1
    return running, used, count


@njit(cache=True)
def simulate_kv_pool(prompt_tokens, output_tokens, n_clients, pool_tokens, seq_overhead_tokens,
                     tokens_per_step, check, admission, retract_newest, requeue_front,
                     ratio_init, ratio_min, ratio_decay, retract_steps, clip_tokens,
                     reserve_tokens, max_running, pass_tokens, b_grid, b_time_s, k_grid,
                     k_time_s, mean_prompt_tokens, steady_after):
    """One DP rank's closed loop over scheduler iterations (module docstring) until the last
    of ``prompt_tokens`` is sent; returns the statistics kept from the ``steady_after``-th
    completion on, an array indexed by ``T_S`` .. ``ADMISSIONS``. ``check``: the page size in
    tokens, the decode check's window and pages and its rule (:func:`decode_need_tokens`);
    ``pool_tokens`` whole pages."""
    page, window, pages, rule = check[0], check[1], check[2], int(check[3])
    n = n_clients
    n_total = prompt_tokens.size
    inp = np.zeros(n)
    out = np.zeros(n)
    gen = np.zeros(n)
    state = np.zeros(n, np.int64)           # 0 waiting, 1 running, 2 done (stream ended)
    adm = np.zeros(n, np.int64)             # admission order
    queue = np.zeros(n + 1, np.int64)
    qs = np.array([0, 0, n + 1])            # head, tail, size of the ring
    for c in range(n):
        inp[c], out[c] = prompt_tokens[c], output_tokens[c]
        queue[qs[1]] = c
        qs[1] += 1
    sent = n
    used = 0.0
    running = 0
    ratio = ratio_init
    adm_counter = 0
    completed = 0
    stats = np.zeros(N_STATS)
    left = np.zeros(n)
    occ = np.zeros(n)
    guard = 0
    while sent < n_total and guard < 50_000_000:
        guard += 1
        steady = completed >= steady_after
        retracted = 0
        need = running_need_tokens(state, inp, gen, n, page, window, pages, rule)
        if admission == ADMIT_PROMPT and running > 0 and pool_tokens - used < need:
            # vLLM: the running requests are scheduled first and preempt; no admission then
            running, used, retracted = _retract(state, adm, gen, inp, queue, qs, n, running,
                                                used, pool_tokens, seq_overhead_tokens,
                                                check, retract_newest, requeue_front)
            need = running_need_tokens(state, inp, gen, n, page, window, pages, rule)
        # ---- a prefill pass, where a waiting request is admitted ----
        pass_tok = 0.0
        pass_out = 0.0
        admitted = 0
        reserved = 0.0
        if admission != ADMIT_PROMPT:
            for c in range(n):
                if state[c] == 1:
                    reserved += min(out[c] - gen[c], clip_tokens) * ratio
        while qs[0] != qs[1] and running < max_running and retracted == 0:
            c = queue[qs[0]]
            need_in = inp[c] + gen[c]
            held = paged_tokens(need_in, page)      # whole pages for the prompt
            rem_out = out[c] - gen[c]
            free = pool_tokens - used
            if admitted > 0 and pass_tok + need_in >= pass_tokens:
                break
            if running == 0 and admitted == 0:
                ok = held + seq_overhead_tokens <= free   # an empty pool takes the head
            elif admission == ADMIT_RATIO:
                # its prompt and clipped output within the free tokens less the running
                # requests' estimate and the pass's outputs (its prompts are in `used`)
                ok = need_in + min(rem_out, clip_tokens) < free - reserved - pass_out
            elif admission == ADMIT_EXACT:
                # the early exit (the prompt within the free tokens and the estimate), then
                # the lockstep check of every request's finish
                ok = held <= free - max(reserved + pass_out, 0.0)
                if ok:
                    m = 0
                    for j in range(n):
                        if state[j] == 1:
                            left[m] = out[j] - gen[j]
                            occ[m] = inp[j] + gen[j] + seq_overhead_tokens
                            m += 1
                    left[m] = rem_out
                    occ[m] = need_in + seq_overhead_tokens
                    m += 1
                    ok = exact_admission_fits(left, occ, m, free - held - seq_overhead_tokens,
                                              reserve_tokens)
            else:
                # the prompt's pages, after the running requests' next pages
                ok = held + seq_overhead_tokens <= free - need
            if not ok:
                break
            qs[0] = (qs[0] + 1) % qs[2]
            state[c] = 1
            adm[c] = adm_counter
            adm_counter += 1
            running += 1
            admitted += 1
            used += held + seq_overhead_tokens
            pass_tok += need_in
            pass_out += min(rem_out, clip_tokens)
            if steady:
                stats[ADMISSIONS] += 1
                if gen[c] > 0:
                    stats[RECOMPUTE_TOKENS] += need_in
                else:
                    stats[FRESH_PREFILL_TOKENS] += need_in
        if admitted > 0:
            dt = np.interp(max(pass_tok / mean_prompt_tokens, 1.0), k_grid, k_time_s)
        else:
            if running == 0:
                break
            # ---- a decode step: retract until the decode check passes ----
            if pool_tokens - used < running_need_tokens(state, inp, gen, n, page, window,
                                                        pages, rule):
                running, used, k = _retract(state, adm, gen, inp, queue, qs, n, running, used,
                                            pool_tokens, seq_overhead_tokens, check,
                                            retract_newest, requeue_front)
                retracted += k
            if retracted > 0:
                decoded, max_new = 0.0, 0.0
                for c in range(n):
                    if state[c] == 1:
                        decoded += gen[c]
                        max_new += out[c]
                ratio = min(1.0, (decoded + retract_steps * running) / (max_new + 1.0))
            else:
                ratio = max(ratio - ratio_decay, ratio_min)
            dt = np.interp(float(running), b_grid, b_time_s)
        if steady:
            waiting, waiting_retracted = 0, 0
            for c in range(n):
                if state[c] == 0:
                    waiting += 1
                    if gen[c] > 0:
                        waiting_retracted += 1
            stats[RETRACTIONS] += retracted
            stats[T_S] += dt
            stats[RUNNING_S] += running * dt
            stats[WAIT_NEW_S] += (waiting - waiting_retracted) * dt
            stats[WAIT_RETRACTED_S] += waiting_retracted * dt
            stats[PREFILL_PASSES if admitted > 0 else DECODE_STEPS] += 1
        if admitted > 0:
            continue
        for c in range(n):
            if state[c] != 1:
                continue
            step = min(tokens_per_step, out[c] - gen[c])
            before = paged_tokens(inp[c] + gen[c], page)
            gen[c] += step
            used += paged_tokens(inp[c] + gen[c], page) - before
            if gen[c] >= out[c] - 1e-9:
                used -= paged_tokens(inp[c] + gen[c], page) + seq_overhead_tokens
                running -= 1
                completed += 1
                if steady:
                    stats[COMPLETED] += 1
                if sent < n_total:
                    inp[c], out[c], gen[c] = prompt_tokens[sent], output_tokens[sent], 0.0
                    sent += 1
                    state[c] = 0
                    queue[qs[1]] = c
                    qs[1] = (qs[1] + 1) % qs[2]
                else:
                    state[c] = 2
    return stats
