"""FLOPs and HBM bytes of the operations a layer is made of (GEMM, batched GEMM, grouped
expert GEMM, elementwise kernels), and the pure roofline measured latencies are divided by.

These are the only places the shapes of the operations turn into work: the engine's op
graph and the reduction of NVIDIA's measured kernel tables both call them, so a measured
latency and a predicted one are always divided by the same roofline.
"""

import numpy as np


def gemm_flop(*, m, n, k):
    r"""FLOPs of one GEMM [m x k] x [k x n].

    .. math:: F = 2 m n k
    """
    return 2.0 * m * n * k


def gemm_bytes(*, m, n, k, input_bytes, weight_bytes, output_bytes):
    r"""HBM bytes of one GEMM: activations in, weights, activations out, each moved once.

    .. math:: B = m k\, b_a + k n\, b_w + m n\, b_o

    The weight term dominates decode (small m); the activation terms matter in prefill.
    """
    return m * k * input_bytes + k * n * weight_bytes + m * n * output_bytes


def grouped_expert_flop(*, routed_tokens, hidden_size, intermediate_size):
    r"""FLOPs of the routed-expert SwiGLU FFN for ``routed_tokens`` token-expert pairs.

    .. math:: F = 2 \cdot 3\, h\, i\, T_r

    (gate and up projections h -> i, down projection i -> h).
    """
    return 6.0 * hidden_size * intermediate_size * routed_tokens


def grouped_expert_bytes(*, distinct_experts, routed_tokens, hidden_size, intermediate_size,
                         weight_bytes, act_bytes):
    r"""HBM bytes of the routed-expert FFN: the weights of every expert touched, plus the
    routed activations in and out.

    .. math:: B = E_d \cdot 3 h i\, b_w + T_r (h + h)\, b_a

    Only experts that receive at least one token are read (E_d, expected distinct experts).
    """
    return (distinct_experts * 3.0 * hidden_size * intermediate_size * weight_bytes
            + routed_tokens * 2.0 * hidden_size * act_bytes)


def elementwise_bytes(*, tokens, width, passes, bytes_per_elem):
    r"""HBM bytes of elementwise kernels (norms, RoPE, activation, quantisation, KV write):
    each pass reads and writes one activation row per token.

    .. math:: B = 2\, p\, T\, w\, b
    """
    return 2.0 * passes * tokens * width * bytes_per_elem


def pure_roofline_s(*, flop, bytes_moved, peak_flop_per_s, peak_bytes_per_s):
    r"""Pure roofline time at the device's peaks (no efficiency): the reference that measured
    latencies are divided by.

    .. math:: t_0 = \max\left(\frac{F}{P_{peak}}, \frac{B}{W_{peak}}\right)
    """
    return np.maximum(flop / peak_flop_per_s, bytes_moved / peak_bytes_per_s)
