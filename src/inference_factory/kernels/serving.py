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


def p99_ttft_s(*, pass_s, mean_wait_s, utilization):
    r"""99th percentile of the time to first token of a prompt served in one prefill pass.

    .. math:: T_{99} = 2\, t_{pass} + \frac{W}{\rho} \ln\big(\max(100 \rho,\ 1)\big)

    The wait for the next pass (at most one pass) plus the pass itself, plus the p99 of the
    queueing delay: zero with probability 1 - ρ, else exponential with mean W/ρ (the M/M/1
    waiting-time shape, whose p-quantile is (W/ρ) ln(ρ/(1-p))). An ASSUMPTION: the shape is
    M/M/1's, the mean :func:`prompt_queue_wait_s`'s.
    """
    return 2.0 * pass_s + mean_wait_s / utilization * np.log(np.maximum(100.0 * utilization, 1.0))


def conditional_wait_s(*, mean_wait_s, utilization):
    r"""Mean queueing delay of the prompts that wait at all: :math:`W / \rho`.

    With probability 1 - ρ a prompt finds the server free (M/M/1 shape); the mean over all
    prompts is W, so over those that wait it is W/ρ (ρ floored at 1e-9).
    """
    return mean_wait_s / np.maximum(utilization, 1e-9)


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


def gpus_for_load(*, tokens_per_s, tokens_per_s_per_gpu, instance_gpus):
    r"""GPUs to serve a token rate with whole instances.

    .. math:: n = \left\lceil \frac{L}{r \, g} \right\rceil g

    L tokens/s to serve, r tokens/s per GPU of the pool, g GPUs per instance (the quotient
    less 1e-9 before the ceiling, so an exact fit takes no extra instance).
    """
    return np.ceil(tokens_per_s / (tokens_per_s_per_gpu * instance_gpus) - 1e-9) * instance_gpus
