"""Prefix-cache hits in prefill: what is computed, what is restored."""


def prefill_computed_tokens(*, prompt_tokens, cache_hit_rate):
    r"""Prompt tokens that prefill must compute when a fraction h is restored from cache.

    .. math:: n = (1 - h) P

    The hit rate is the fraction of input TOKENS restored (DeepSeek's published metric), not
    of requests. The computed tokens still attend over the cached prefix (see
    :func:`inference_factory.kernels.attention.causal_attended_positions` with p = hP).
    """
    return (1.0 - cache_hit_rate) * prompt_tokens


def kv_restore_s(*, restored_tokens, kv_bytes_per_token, tier_bytes_per_s):
    r"""Time to move the KV of the cached prefix from its tier into HBM.

    .. math:: t = \frac{h P\, b_{kv}}{W_{tier}}

    Restoration is prefetched ahead of compute (never a synchronous read per decode step), so
    the engine overlaps it with the prefill step rather than adding it.
    """
    return restored_tokens * kv_bytes_per_token / tier_bytes_per_s
