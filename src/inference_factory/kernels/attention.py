"""Attention FLOPs and KV-cache traffic."""

import numpy as np


def causal_attended_positions(*, new_tokens, cached_tokens):
    r"""Sum over the new tokens of the number of positions each attends to, causally.

    .. math:: S = \sum_{i=1}^{n} (p + i) = n p + \frac{n (n + 1)}{2}

    for n new tokens appended after p cached ones. Decode of one token over a KV length L is
    the case n = 1, p = L - 1 (S = L). Evaluated as :math:`n (p + (n + 1)/2)` (exact for
    whole token counts below 2^53, like the expanded form).
    """
    return new_tokens * (cached_tokens + 0.5 * (new_tokens + 1.0))


def windowed_attended_positions(*, new_tokens, cached_tokens, window_tokens):
    r"""As :func:`causal_attended_positions`, for sliding-window layers: each query sees at
    most ``window_tokens`` positions.

    .. math:: S_w = \sum_{i=1}^{n} \min(p + i, w)

    Closed form: positions up to the window grow causally, the rest are capped at w.
    """
    p, n, w = cached_tokens, new_tokens, window_tokens
    # number of new tokens whose position p+i is still <= w
    k = np.clip(w - p, 0.0, n)
    return k * p + 0.5 * k * (k + 1.0) + (n - k) * w


def attention_core_flop(*, attended_positions, n_q_heads, head_dim_qk, head_dim_v):
    r"""FLOPs of the score and value products of one layer (softmax ignored).

    .. math:: F = 2 n_q (d_{qk} + d_v) S

    with S the summed attended positions. For MHA/GQA and for MLA in its non-absorbed
    (prefill) form, d_qk = d_nope + d_rope and d_v are per head.
    """
    return 2.0 * n_q_heads * (head_dim_qk + head_dim_v) * attended_positions


def mla_absorbed_core_flop(*, attended_positions, n_q_heads, kv_lora_rank, qk_rope_head_dim):
    r"""FLOPs of MLA attention in the weight-absorbed form used for decode.

    .. math:: F = 2 n_q \left[(r_{kv} + d_r) + r_{kv}\right] S

    Scores are taken against the 512-wide latent plus the 64-wide RoPE key; values are the
    latent itself (W_UV is applied after attention, counted with the linear layers). Source:
    DeepSeek-V3 report sec. 2.1.1 and FlashMLA deep-dive (h_q x s_q compute-bound threshold).
    """
    return 2.0 * n_q_heads * (2.0 * kv_lora_rank + qk_rope_head_dim) * attended_positions


def kv_read_bytes(*, sequences, kv_len_tokens, kv_bytes_per_token_full,
                  kv_bytes_per_token_window, window_tokens):
    r"""KV-cache bytes read by one decode step: each sequence's cache is read ONCE per step,
    however many query tokens (draft tokens) the step verifies.

    .. math:: B = N L\, b_{full} + N \min(L, w)\, b_{win}

    b_full, b_win: KV bytes of one token over the full-attention and the sliding-window layers
    read (per GPU: already divided by the GPUs a sequence's KV is split over); a window layer
    reads at most w tokens. One layer of one kind is the case b_win = 0 (full) or b_full = 0
    (window). Reading the cache twice per step (once for K, once "for V" on top of a K+V size)
    is a known defect of some calculators. Evaluated term by term, in the order the op graph
    always multiplied (sequences x tokens x bytes).
    """
    return (sequences * kv_len_tokens * kv_bytes_per_token_full
            + sequences * np.minimum(kv_len_tokens, window_tokens) * kv_bytes_per_token_window)


def kv_write_bytes(*, new_tokens, kv_bytes_per_token):
    r"""KV-cache bytes written by a pass: the new tokens' K and V (or MLA latent), once.

    .. math:: B_w = T\, b_{kv}
    """
    return new_tokens * kv_bytes_per_token


def straggler_kv_factor(*, context_cv, sequences_per_rank, n_ranks):
    r"""Busiest attention-DP rank's summed KV over the mean, for B sequences per rank whose
    context lengths have coefficient of variation c, assigned at random to R ranks.

    .. math:: f = 1 + \frac{c}{\sqrt{B}} \sqrt{2 \ln R}

    The summed context per rank has relative spread c / sqrt(B); the maximum of R such sums
    sits about sqrt(2 ln R) spreads above the mean (Gaussian extreme value, as the routing
    fluctuation of ``kernels.moe.routing_fluctuation_factor``). Equals 1 for one rank. A
    scheduler that balances KV across ranks does better: this is the random-assignment bound.
    """
    b = np.maximum(sequences_per_rank, 1.0)
    return 1.0 + context_cv / np.sqrt(b) * np.sqrt(2.0 * np.log(np.maximum(n_ranks, 1.0)))
