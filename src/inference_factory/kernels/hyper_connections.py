"""Manifold-constrained hyper-connections (mHC, DeepSeek-V4): the residual stream is
``hc_mult`` copies of the hidden vector; around each attention and each feed-forward block
("sites", two per layer) a *pre* step mixes the streams into the block's input and a *post*
step writes the block's output back into every stream through a doubly-stochastic residual
mix (Sinkhorn-normalised).

Per site and token (n = hc_mult, H = hidden size, n H the stream width, m = (2 + n) n mixing
coefficients): *pre* projects the flattened stream onto the m coefficients (a GEMM of
n H x m), normalises, runs ``sinkhorn_iters`` iterations on the n x n residual matrix and
sums the n streams into one input; *post* applies the n x n mix to the streams and adds the
weighted output to each.

Source: the analytic roofline of ai-dynamo/aiconfigurator 095f58a5,
``aic-core/rust/aiconfigurator-core/src/operators/mhc.rs`` lines 60-71 (parameters) and
99-132 (``sol_ms``: operations and bytes of ``pre`` and ``post``); DeepSeek-V4 configs
(``hc_mult`` 4, ``hc_sinkhorn_iters`` 20). Measured as one fused kernel each (SGLang
``sglang_tilelang_mhc_pre`` / ``_post``, aiconfigurator ``systems/data/*/mhc``).
"""

from __future__ import annotations

#: attention and feed-forward: the blocks each layer wraps (mhc.rs ``sites = 2``)
SITES_PER_LAYER = 2


def mhc_params_per_layer(*, hidden_size, hc_mult):
    r"""Parameters of one layer's hyper-connections (both sites):

    .. math:: P = 2\,(m\, n H + m + 3), \quad m = (2 + n) n

    (mhc.rs l. 60-71: the projection, its bias and three scalars per site)."""
    m = (2 + hc_mult) * hc_mult
    return float(SITES_PER_LAYER * (m * hc_mult * hidden_size + m + 3))


def mhc_flop(*, tokens, hidden_size, hc_mult, sinkhorn_iters):
    r"""Operations of one layer's pre and post steps (both sites) over ``tokens`` tokens:

    .. math:: F = 2T \big[\, 2 n H m + 3 n H + (n^2 + 2n) s + 2 n H \;+\; 2 n^2 H + 2 n H \big]

    (mhc.rs l. 108-113; s Sinkhorn iterations)."""
    n, h, s = hc_mult, hidden_size, sinkhorn_iters
    m = (2 + n) * n
    pre = 2 * n * h * m + n * h * 3 + (n * n + 2 * n) * s + 2 * n * h
    post = 2 * n * n * h + 2 * n * h
    return SITES_PER_LAYER * tokens * float(pre + post)


def mhc_bytes(*, tokens, hidden_size, hc_mult, bytes_per_elem=2.0):
    r"""HBM bytes of one layer's pre and post steps (both sites): the parameters read once
    per step, the n H-wide stream read and written by each step, and the FP32 mixing
    coefficients (2n + n^2 per token) pre writes:

    .. math:: B = 2 \cdot 2\, P_{site}\, b + 2 \cdot 2\, T\, n H\, b \cdot 2 + 2\, T (2n + n^2) \cdot 4

    (mhc.rs l. 120-126, pre and post each; b = 2 for BF16)."""
    n, h = hc_mult, hidden_size
    m = (2 + n) * n
    params = SITES_PER_LAYER * (m * n * h + m + 3) * bytes_per_elem
    stream = SITES_PER_LAYER * tokens * n * h * bytes_per_elem * 2.0
    coeffs = SITES_PER_LAYER * tokens * (2 * n + n * n) * 4.0
    return 2.0 * params + 2.0 * stream + coeffs
