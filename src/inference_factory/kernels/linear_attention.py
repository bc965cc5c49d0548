r"""Linear attention with a gated delta rule (Gated DeltaNet, Kimi Delta Attention): its
recurrent state, its chunked prefill and its constant-cost decode step, per head.

Each head keeps a state matrix :math:`S \in \mathbb{R}^{d_k \times d_v}` updated per token
by the gated delta rule

.. math:: S_t = S_{t-1}\,\mathrm{diag}(\alpha_t)\,(I - \beta_t k_t k_t^\top)
          + \beta_t k_t v_t^\top, \qquad o_t = S_t^\top q_t

with one scalar decay per head and token in Gated DeltaNet (Yang, Kautz, Hatamizadeh,
arXiv:2412.06464, eq. 10) and one decay per key channel in Kimi Delta Attention (Kimi Linear
tech report, arXiv:2510.26692, eq. 1: ``diag(alpha_t)``). The finer gate changes the
projections (a gate of ``heads x d_k`` outputs per token instead of ``heads``) and the bytes
of the gate tensor the kernel reads, not the matrix work of the recurrence: both kinds run
the same chunked WY algorithm (fla ``chunk_gated_delta_rule`` / ``chunk_kda``).

Sources: flash-linear-attention (fla-org/flash-linear-attention, commit bc3b101d),
``fla/ops/common/chunk_delta_h.py`` (``chunk_size: int = 64``; the per-chunk states ``h =
k.new_empty(B, NT, HV, K, V)`` in the inputs' dtype), ``fla/ops/gated_delta_rule/chunk.py``;
the recurrent state is FP32 where the config says ``mamba_ssm_dtype: float32`` (Qwen3.5) and
in aiconfigurator's collectors (``collector/sglang/collect_gdn.py``: ``dtype=torch.float32``
for the state, BF16 conv state).
"""

from __future__ import annotations

import numpy as np

#: Tokens per chunk of the chunked prefill kernels (fla ``chunk_size: int = 64``, above).
CHUNK_TOKENS = 64


def recurrent_state_bytes(*, n_heads, head_dim_k, head_dim_v, state_bytes_per_elem):
    r"""Bytes of one layer's recurrent state for one sequence: a d_k x d_v matrix per
    (value) head, whatever the context.

    .. math:: b_{state} = H\, d_k\, d_v\, b_{elem}

    Qwen3.5-397B: 64 value heads x 128 x 128 x 4 B (FP32) = 4 MiB per layer, 180 MiB over
    its 45 linear layers (aiconfigurator ``sdk/models/qwen35.py`` ``_gdn_state_bytes_per_request``
    counts the same ``(nv // tp) * hk * hv * 4``).
    """
    return n_heads * head_dim_k * head_dim_v * state_bytes_per_elem


def conv_state_bytes(*, conv_channels, conv_kernel, bytes_per_elem):
    r"""Bytes of one layer's short-convolution state for one sequence: the last K - 1 inputs
    of every convolved channel (q, k and v).

    .. math:: b_{conv} = C\, (K - 1)\, b_{elem}, \qquad C = 2 H_k d_k + H_v d_v

    Source: aiconfigurator ``sdk/models/qwen35.py``: ``(2 * nk * hk + nv * hv) *
    (linear_conv_kernel_dim - 1) * 2``.
    """
    return conv_channels * (conv_kernel - 1) * bytes_per_elem


def decode_flop(*, tokens, n_heads, head_dim_k, head_dim_v):
    r"""FLOPs of the recurrent step of ``tokens`` tokens over ``n_heads`` heads: per token
    and head decay the state (d_k d_v), read it with k (2 d_k d_v), add the rank-one update
    (2 d_k d_v) and read it with q (2 d_k d_v). Independent of the context length.

    .. math:: F = 7\, T\, H\, d_k\, d_v

    Source: the fused recurrent kernel (fla ``fused_recurrent_gated_delta_rule``: ``b_h *=
    exp(b_g)``; ``b_v -= sum(b_h * b_k)``; ``b_h += b_k * b_v``; ``b_o = sum(b_h * b_q)``).
    Terms linear in d (gates, norms) are left out.
    """
    return 7.0 * tokens * n_heads * head_dim_k * head_dim_v


def chunk_prefill_flop(*, tokens, n_heads, head_dim_k, head_dim_v, chunk_tokens=CHUNK_TOKENS):
    r"""FLOPs of the chunked (WY) prefill of ``tokens`` tokens over ``n_heads`` heads, chunks
    of C tokens: per token and head

    .. math:: f = 6\, d_k d_v + C\,(6 d_k + 4 d_v) + C^2/3

    6 d_k d_v: the inter-chunk state work (W S, the state update K^T U, the output Q S);
    C(6 d_k + 4 d_v): the intra-chunk products of full C x C tiles (beta K K^T, W = A beta K,
    U = A beta V, Q K^T, (Q K^T) U); C^2/3: the triangular solve of (I + A). Source: the
    kernels of fla ``chunk_gated_delta_rule_fwd`` (``chunk_scaled_dot_kkt``, ``solve_tril``,
    ``recompute_w_u``, ``chunk_gated_delta_rule_fwd_h``, ``chunk_fwd_o``) and Yang et al.
    arXiv:2406.06484 sec. 3. Linear in the tokens: no term grows with the context.
    """
    c = chunk_tokens
    per = 6.0 * head_dim_k * head_dim_v + c * (6.0 * head_dim_k + 4.0 * head_dim_v) + c * c / 3.0
    return tokens * n_heads * per


def conv_flop(*, tokens, conv_channels, conv_kernel):
    r"""FLOPs of the depthwise causal convolution: :math:`F = 2\, T\, C\, K`."""
    return 2.0 * tokens * conv_channels * conv_kernel


def decode_bytes(*, sequences, new_tokens, state_bytes, conv_bytes, io_bytes_per_token):
    r"""HBM bytes of a decode step of the recurrence (one layer): each sequence's state and
    conv state read once and written after each of its new tokens, plus each token's inputs
    and output.

    .. math:: B = N\,(1 + t)\,(b_{state} + b_{conv}) + N\, t\, b_{io}

    With t = 1 (plain decode) the state is read and written once per step: a constant in the
    context length. ASSUMPTION for t > 1 (speculative verify): the state after every draft
    position is written, so the engine can roll back to the accepted one (vLLM / SGLang keep
    per-position states for hybrid models' speculative decoding); an engine that writes only
    the accepted state moves fewer bytes (this bias: pessimistic at t > 1).
    """
    return sequences * ((1.0 + new_tokens) * (state_bytes + conv_bytes)
                        + new_tokens * io_bytes_per_token)


def chunk_prefill_bytes(*, sequences, new_tokens, state_bytes, conv_bytes, io_bytes_per_token,
                        chunk_state_bytes, chunk_tokens=CHUNK_TOKENS):
    r"""HBM bytes of a chunked prefill (one layer): every token's inputs and output, the
    per-chunk states written by the state pass and read by the output pass, and each
    sequence's initial and final state (and conv state).

    .. math:: B = N t\, b_{io} + 2 \lceil t / C \rceil N\, b_{h} + 2 N (b_{state} + b_{conv})

    b_h: one chunk's states over the heads in the inputs' dtype (fla ``h = k.new_empty(B,
    NT, HV, K, V)``).
    """
    chunks = np.ceil(new_tokens / chunk_tokens)
    return sequences * (new_tokens * io_bytes_per_token + 2.0 * chunks * chunk_state_bytes
                        + 2.0 * (state_bytes + conv_bytes))
