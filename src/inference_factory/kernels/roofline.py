"""Roofline time of an operation, GEMM efficiency, and how the parts of a step combine."""

import numpy as np


def op_time_s(*, flop, bytes_moved, flop_per_s, bytes_per_s):
    r"""Roofline time of one operation (or a group of them run back to back).

    .. math:: t = \max\left(\frac{F}{P}, \frac{B}{W}\right)

    P and W are the *achieved* rates: peak x efficiency, or the peaks in ideal mode.
    Source: Williams, Waterman & Patterson, "Roofline", CACM 52(4), 2009.
    """
    return np.maximum(flop / flop_per_s, bytes_moved / bytes_per_s)


def roofline_time_s(*, compute_s, memory_s):
    r"""The same roofline from the two times already divided out.

    .. math:: t = \max(t_F, t_B), \quad t_F = F/P,\ t_B = B/W
    """
    return np.maximum(compute_s, memory_s)


def gemm_efficiency_frac(*, m_tokens, large_gemm_frac, tile_m_tokens):
    r"""Achieved fraction of dense peak for a GEMM whose M (token) dimension is m.

    .. math:: \eta(m) = \eta_\infty \frac{m}{t \lceil m / t \rceil}

    Tensor cores work on tiles of t rows (Hopper ``wgmma`` instructions have M = 64); a GEMM
    with m < t rows pays for a full tile, so small decode-sized M wastes compute. eta_inf is
    the large-GEMM fraction (measured maximum achievable matmul / dense peak). With t = 0 the
    padding term is off. This only binds where the GEMM is compute-bound: a memory-bound
    small-M GEMM is limited by the bandwidth term of :func:`op_time_s`.
    """
    m = np.maximum(m_tokens, 1e-9)
    if np.ndim(tile_m_tokens) == 0 and tile_m_tokens <= 0:   # padding term switched off
        return large_gemm_frac + 0.0 * m
    t = np.maximum(tile_m_tokens, 1e-300)
    return large_gemm_frac * m / np.maximum(np.ceil(m / t) * t, m)


def step_time_ideal_s(*, compute_s, memory_s, comm_s):
    r"""Pure roofline: every resource overlaps perfectly with every other.

    .. math:: t = \max(t_F, t_B, t_{comm})

    with t_F = total FLOPs / peak, t_B = total HBM bytes / peak bandwidth. This is the hand
    roofline's lower bound (peer_roofline_cases.csv, "hand-roofline (reference)").
    """
    return np.maximum(np.maximum(compute_s, memory_s), comm_s)


def tokens_per_s_per_gpu(*, seqs_per_rank, tokens_per_seq, step_s, tp):
    r"""Tokens/s per GPU of an instance whose every attention-DP rank advances
    ``seqs_per_rank`` sequences by ``tokens_per_seq`` tokens in a step of ``step_s`` seconds.

    .. math:: r = \frac{b \, n}{t_{step} \, tp}

    Decode: b sequences each emitting E tokens per verify step. Prefill: b prompts of n
    tokens (or of the n computed after the prefix cache) per prefill step. An attention-DP
    rank spans ``tp`` GPUs (the instance's dp ranks and tp x dp GPUs cancel).
    """
    return seqs_per_rank * tokens_per_seq / (step_s * tp)
