"""Serving arithmetic over engine results: queueing, occupancy, fleet sizing, colocation."""

import numpy as np


def token_weighted_decode_context_tokens(*, input_tokens, output_tokens):
    r"""Mean KV length a decode step sees, weighted by the output tokens each request decodes.

    .. math:: \bar L = \frac{\sum_r O_r (I_r + O_r / 2)}{\sum_r O_r}

    A request of I prompt and O output tokens decodes O tokens at contexts I .. I + O; their
    mean is I + O/2 (the cache grows linearly).
    """
    return (output_tokens * (input_tokens + output_tokens / 2)).sum() / output_tokens.sum()


def token_weighted_prompt_tokens(*, input_tokens):
    r"""Mean prompt length seen by a prefill token: :math:`\bar P = \sum I_r^2 / \sum I_r`.

    A prompt of I tokens contributes I tokens of prefill work, each in a prompt of length I.
    """
    return (input_tokens * input_tokens).sum() / input_tokens.sum()


def prompt_queue_wait_s(*, utilization, tokens_per_s, mean_tokens, mean_sq_tokens):
    r"""Mean wait of a prompt for a prefill instance (M/G/1, Pollaczek-Khinchine).

    .. math:: W = \frac{\rho \, E[S^2]}{2 (1 - \rho) E[S]}, \qquad S = c / R

    Jobs are prompts of c computed tokens served at the instance's R tokens/s (a deployment
    unit's GPUs together), at utilisation ρ. Prompts, not passes, are the jobs: a pass
    serves many prompts at once. Source: Kleinrock, Queueing Systems I (1975), eq. 5.105.
    """
    es = mean_tokens / tokens_per_s
    es2 = mean_sq_tokens / tokens_per_s ** 2
    return utilization * es2 / (2.0 * (1.0 - utilization) * np.maximum(es, 1e-300))


def prefill_busy_share(*, prefill_s_per_request, decode_s_per_request):
    r"""Share of a colocated pool's busy GPU time spent in prefill.

    .. math:: s_p = \frac{g_p}{g_p + g_d}

    g_p, g_d: GPU-seconds per request of prefill and decode. With prefill-first scheduling a
    prompt waits only for other prompts: its queue's utilisation is ρ s_p.
    """
    return prefill_s_per_request / (prefill_s_per_request + decode_s_per_request)


def colocated_tpot_stretch(*, prefill_share):
    r"""Factor by which prefill passes interleaved with decode steps stretch every TPOT of a
    colocated pool.

    .. math:: f = \frac{1}{1 - s_p}

    s_p the prefill share of busy time (:func:`prefill_busy_share`); 1 - s_p is floored at
    1e-9. Decode runs only in the time prefill leaves (chunked prefill's interference, as the
    factory and ``plan`` model aggregated serving).
    """
    return 1.0 / np.maximum(1.0 - prefill_share, 1e-9)


def static_fill_time_s(*, batch_sequences, arrival_rate_per_s):
    r"""Time for a static batch of B sequences to fill from arrivals at rate λ.

    .. math:: t_{fill} = \frac{B - 1}{\lambda}

    Requests are routed to the one instance whose batch is filling; the first waits the whole
    fill, the last none (a request's wait is uniform on [0, t_fill]). Queueing for a free
    instance is the same M/D/1 term as with continuous batching.
    """
    return np.maximum(batch_sequences - 1.0, 0.0) / arrival_rate_per_s


def static_batch_efficiency(*, output_tokens, batch_size):
    r"""Useful share of slot-steps when requests are served in static batches of
    ``batch_size`` consecutive arrivals: a batch runs until its longest request ends.

    .. math:: \eta = \frac{\sum_i L_i}{\sum_b |b| \max_{i \in b} L_i}

    ``output_tokens`` is the 1-D sequence of output lengths in arrival order; the last batch
    may be partial.
    """
    n = output_tokens.size
    batch = max(int(batch_size), 1)
    pad = (-n) % batch
    x = np.concatenate([output_tokens.astype(float), np.zeros(pad)]).reshape(-1, batch)
    sizes = np.full(x.shape[0], batch, dtype=float)
    if pad:
        sizes[-1] = batch - pad
    return float(output_tokens.sum() / (x.max(axis=1) * sizes).sum())


def diurnal_load_factor(*, hour_of_day, amplitude):
    r"""Load in an hour of the day relative to the daily mean.

    .. math:: r_h = 1 + A \sin\left(\frac{2 \pi h}{24} - \frac{\pi}{2}\right)

    h the hour's midpoint (0.5 .. 23.5): lowest at midnight, highest at noon, mean 1 over a
    day. A (``diurnal_amplitude``) is a property of the traffic the user states.
    """
    return 1.0 + amplitude * np.sin(2 * np.pi * hour_of_day / 24 - np.pi / 2)


def busy_gpus(*, arrival_rate_per_s, gpu_s_per_request, load_factor=1.0):
    r"""GPUs busy on average serving a request stream (Little's law for servers).

    .. math:: n = \lambda\, r_h\, \bar g

    λ requests/s at the daily mean, r_h the hour's load factor, g-bar the busy GPU-seconds of
    one request. Source: Little, Operations Research 9(3), 1961.
    """
    return arrival_rate_per_s * gpu_s_per_request * load_factor


def provisioned_gpus(*, busy_gpus, target_utilization, unit_gpus):
    r"""GPUs provisioned for a busy load at a target utilisation, in whole deployment units.

    .. math:: N = \left\lceil \frac{\max(n / u,\ 10^{-12})}{U} \right\rceil U

    u the target utilisation (headroom for bursts), U the GPUs of one deployment unit; at
    least one unit.
    """
    return np.ceil(np.maximum(busy_gpus / target_utilization, 1e-12) / unit_gpus) * unit_gpus


def decode_occupancy_sequences(*, operating_batch, busy_frac, target_utilization):
    r"""Sequences per attention-DP rank actually in a decode batch in an hour, given the
    batch the fleet was sized for.

    .. math:: b_h = \mathrm{clip}\left(b \frac{\beta_h}{u},\ 1,\ b\right)

    beta_h the hour's busy fraction of the decode GPUs, u the target utilisation at which a
    rank runs the operating batch b.
    """
    return np.clip(operating_batch * busy_frac / target_utilization, 1.0, operating_batch)


def concurrency(*, arrival_rate_per_s, mean_time_in_system_s):
    r"""Requests in the system on average (Little's law): :math:`L = \lambda W`.

    For decode, W is a request's decode time, E[O_r TPOT_r]. Source: Little (1961).
    """
    return arrival_rate_per_s * mean_time_in_system_s


def output_tokens_per_s_per_gpu_all_in(*, isl_tokens, osl_tokens, prefill_tokens_per_s_per_gpu,
                                       decode_tokens_per_s_per_gpu):
    r"""Output tokens per second per GPU of a whole deployment, prefill included.

    .. math:: R = \frac{o}{i / P + o / D}

    i prompt and o output tokens per request; P, D the prefill (input) and decode (output)
    tokens/s per GPU. The denominator is the GPU-seconds one request takes, summed over the
    phases: it holds for a P/D split whose pools are sized to each other and for a colocated
    pool that time-shares the phases.
    """
    return osl_tokens / (isl_tokens / prefill_tokens_per_s_per_gpu
                         + osl_tokens / decode_tokens_per_s_per_gpu)


def gpus_for_load(*, tokens_per_s, tokens_per_s_per_gpu, instance_gpus, target_utilization=1.0):
    r"""GPUs to serve a token rate with whole instances, busy ``u`` of the time.

    .. math:: n = \left\lceil \frac{L}{u \, r \, g} \right\rceil g

    L tokens/s to serve, r tokens/s per GPU of the pool flat out, g GPUs per instance, u the
    target utilisation (the provisioning rule :func:`provisioned_gpus` states with busy GPUs
    L / r; the quotient less 1e-9 before the ceiling, so an exact fit takes no extra
    instance).
    """
    return np.ceil(tokens_per_s / (target_utilization * tokens_per_s_per_gpu * instance_gpus)
                   - 1e-9) * instance_gpus


# ---- the closed loop of a serving benchmark (``bench``) ------------------------------------
# N clients each send a request, wait for its last token and send the next (vllm bench serve
# --max-concurrency N, zero think time). Per DP rank: M requests in service, B of them
# decoding, the other M - B waiting for or in their prefill.

def uniform_length_moments(*, max_tokens, range_ratio):
    r"""Mean and mean square of a length drawn uniformly from the integers
    :math:`\lfloor rL \rfloor .. L` (vLLM's and InferenceX's random dataset).

    .. math:: \mu = \frac{a + L}{2}, \qquad E[X^2] = \mu^2 + \frac{(L - a + 1)^2 - 1}{12}

    with :math:`a = \lfloor rL \rfloor`. Source: ``sample_random_requests`` in InferenceX's
    ``utils/bench_serving/benchmark_serving.py`` (``np.random.randint(lower, upper + 1)``).
    """
    lo = np.floor(np.asarray(max_tokens, dtype=float) * range_ratio)
    hi = np.asarray(max_tokens, dtype=float)
    mean = (lo + hi) / 2.0
    return mean, mean ** 2 + ((hi - lo + 1.0) ** 2 - 1.0) / 12.0


def closed_loop_request_rate_per_s(*, decoding_sequences, decode_step_s, tokens_per_step,
                                   decode_tokens_per_request, stall_s_per_request=0.0):
    r"""Requests per second one DP rank completes with B sequences decoding.

    .. math:: X = \frac{B \tau}{(\bar O - 1)\, t_d + B \tau\, s}

    Little's law on the decode phase, :math:`B = X (\bar O - 1)\, TPOT`, solved for X with
    :math:`TPOT = t_d / (\tau (1 - X s))` (:func:`colocated_tpot_s` with the stall share
    :math:`f = X s` of :func:`others_prefill_stall_frac`, :math:`s = t_p (M-1)/M`; s = 0 on a
    decode-only pool). Each request decodes :math:`\bar O - 1` tokens after the first (its
    prefill makes that one), τ per step of :math:`t_d` s.
    """
    return (decoding_sequences * tokens_per_step
            / (decode_tokens_per_request * decode_step_s
               + decoding_sequences * tokens_per_step * stall_s_per_request))


def colocated_tpot_s(*, decode_step_s, tokens_per_step, stall_frac):
    r"""Mean time per output token of a sequence on an engine that also prefills.

    .. math:: TPOT = \frac{t_d}{\tau\,(1 - f)}

    While f of the time goes to the prompts of other requests (a prefill pass, or the prompt
    chunks of mixed steps), the sequence's decode steps wait. This is vLLM's TPOT,
    (E2E - TTFT) / (O - 1), which counts those stalls.
    """
    return decode_step_s / (tokens_per_step * (1.0 - stall_frac))


def others_prefill_stall_frac(*, request_rate_per_s, prefill_s_per_request, in_service):
    r"""Share of a decoding sequence's time spent waiting for the prefills of the others.

    .. math:: f = X\, t_p \, \frac{M - 1}{M}

    X requests per second, each costing :math:`t_p` s of prefill; a request's own prefill
    comes before its decode, so only the other M - 1 of the M in service stall it.
    """
    m = np.maximum(in_service, 1.0)
    return request_rate_per_s * prefill_s_per_request * (m - 1.0) / m


def retracted_wait_s(*, mean_wait_s, retractions_per_request, draw):
    r"""A request's wait after being retracted (its KV freed when the pool ran out; it waits
    in the queue, then is prefilled again), drawn per request.

    .. math:: w = \begin{cases} \bar W / p & u < p \\ 0 & \text{else} \end{cases},
              \qquad p = \min(r, 1)

    :math:`\bar W` the mean over all requests, r the retractions per request, u a uniform
    draw: a share p of the requests is retracted and carries the whole wait. The wait counts
    in the request's TPOT (it had its first token). An ASSUMPTION: one retraction per
    retracted request, its wait the same for all.
    """
    p = np.minimum(np.asarray(retractions_per_request, dtype=float), 1.0)
    return np.where((draw < p) & (p > 0), mean_wait_s / np.maximum(p, 1e-300), 0.0)


def poll_wait_s(*, recv_interval_steps, decode_step_s, busy_probability):
    r"""Mean time a new request waits for the scheduler to poll for it.

    .. math:: W_{poll} = p_{busy}\, \frac{k\, t_d}{2}

    SGLang polls for new requests every k decode steps (``--scheduler-recv-interval``; its
    ``SchedulerRecvSkipper`` counts one per decode step and resets after each prefill) and at
    once when idle; an arrival lands uniformly within the window. :math:`p_{busy}` is the
    chance that other sequences are decoding when it arrives (:func:`others_busy_probability`).
    """
    return busy_probability * recv_interval_steps * decode_step_s / 2.0


def others_busy_probability(*, decode_share, in_service):
    r"""Chance that at least one of the other M - 1 requests in service is decoding.

    .. math:: p = 1 - (1 - d)^{M - 1}

    d the share of a request's life spent decoding; requests taken as independent (an
    ASSUMPTION: a closed loop desynchronises them after a few requests).
    """
    return 1.0 - (1.0 - np.clip(decode_share, 0.0, 1.0)) ** np.maximum(in_service - 1.0, 0.0)


def pass_queue_wait_s(*, utilization, pass_s):
    r"""Mean wait of a prompt for a prefill pass to start (M/D/1, Pollaczek-Khinchine).

    .. math:: W = \frac{\rho\, t}{2\,(1 - \rho)}

    Passes of t s at utilisation ρ < 1 (clipped at 0.999); arrivals during a pass join the
    next one. Poisson arrivals are an ASSUMPTION: a closed loop's arrivals are smoother, so W
    is biased high. Source: Kleinrock, Queueing Systems I (1975), eq. 5.105 with
    :math:`E[S^2] = t^2`.
    """
    rho = np.clip(utilization, 0.0, 0.999)
    return rho * pass_s / (2.0 * (1.0 - rho))


def prompts_per_pass(*, request_rate_per_s, gather_window_s, in_service, max_prompts):
    r"""Prompts one prefill pass takes: those that arrived in the window since the last poll,
    given that at least one did (the one that makes the pass).

    .. math:: k = \mathrm{clip}\Big(\frac{\lambda}{1 - e^{-\lambda}},\ 1,\ \min(M, k_{max})\Big),
              \qquad \lambda = X w

    the mean of a Poisson count of mean λ conditioned on being at least one (1 + λ/2 for a
    small λ); w the gathering window (the poll interval while decoding; a pass on a
    prefill-only pool), :math:`k_{max}` the pass's token budget over the prompt length.
    Poisson arrivals are an ASSUMPTION (a closed loop's are smoother).
    """
    lam = np.maximum(np.asarray(request_rate_per_s * gather_window_s, dtype=float), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(lam > 1e-9, lam / -np.expm1(-np.maximum(lam, 1e-300)), 1.0 + lam / 2.0)
    return np.clip(k, 1.0, np.maximum(np.minimum(in_service, max_prompts), 1.0))


def kv_transfer_s(*, prompt_tokens, kv_bytes_per_token, link_bytes_per_s, latency_s):
    r"""Time to move a prompt's KV cache from a prefill to a decode instance.

    .. math:: t = \frac{I\, b_{kv}}{W} + t_0

    I prompt tokens of :math:`b_{kv}` bytes each over the W bytes/s the prefill instance's
    NICs give together (each GPU sends its shard), plus one scale-out latency.
    """
    return prompt_tokens * kv_bytes_per_token / link_bytes_per_s + latency_s
