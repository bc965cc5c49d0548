"""Parameter counts and KV-cache bytes of transformer blocks, from the architecture."""


def gqa_attention_params(*, hidden_size, n_q_heads, n_kv_heads, head_dim_qk, head_dim_v,
                         bias=False, output_gate=False):
    r"""Parameters of one MHA/GQA attention block (Q, K, V, O projections).

    .. math:: P = h(n_q d_{qk} + n_{kv} d_{qk} + n_{kv} d_v) + n_q d_v h
              \;[+\; n_q d_v h \text{ output gate}]
              \;[+\; n_q d_{qk} + n_{kv}(d_{qk}+d_v) + h \text{ biases}]

    MHA is the case n_kv = n_q. Source: the Q/K/V/O projection shapes of the Hugging Face
    ``LlamaAttention`` / ``GptOssAttention`` modules (config.json fields); the output gate
    (``attn_output_gate``) widens ``q_proj`` to query and gate, HF ``Qwen3NextAttention``.
    """
    p = hidden_size * (n_q_heads * head_dim_qk + n_kv_heads * (head_dim_qk + head_dim_v))
    p = p + n_q_heads * head_dim_v * hidden_size
    if output_gate:
        p = p + n_q_heads * head_dim_v * hidden_size
    if bias:
        p = p + n_q_heads * head_dim_qk + n_kv_heads * (head_dim_qk + head_dim_v) + hidden_size
    return p


def mla_attention_params(*, hidden_size, n_q_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                         qk_rope_head_dim, v_head_dim, output_gate=False):
    r"""Parameters of one multi-head latent attention (MLA) block.

    .. math::
        P = h r_q + r_q + r_q n_q (d_n + d_r)          \quad\text{(q down, norm, up)}
          + h (r_{kv} + d_r) + r_{kv}                  \quad\text{(kv down + rope key, norm)}
          + r_{kv} n_q (d_n + d_v)                     \quad\text{(kv up: K nope and V)}
          + n_q d_v h                                  \quad\text{(output)}
          \;[+\; h\, n_q d_v \text{ output gate}]

    With q_lora_rank = 0 the query is a plain projection h x n_q(d_n + d_r).
    Source: DeepSeek-V3 technical report (arXiv:2412.19437) sec. 2.1.1, eqs. 1-11; the
    output gate (Kimi-K3 config ``mla_use_output_gate``) is a sigmoid gate h -> n_q d_v on
    the attention output, aiconfigurator ``sdk/models/kimi_k3.py`` (``mla_gate_gemm``,
    commit 095f58a5).
    """
    qk = qk_nope_head_dim + qk_rope_head_dim
    if q_lora_rank:
        q = hidden_size * q_lora_rank + q_lora_rank + q_lora_rank * n_q_heads * qk
    else:
        q = hidden_size * n_q_heads * qk
    kv = hidden_size * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank
    kv = kv + kv_lora_rank * n_q_heads * (qk_nope_head_dim + v_head_dim)
    gate = hidden_size * n_q_heads * v_head_dim if output_gate else 0
    return q + kv + n_q_heads * v_head_dim * hidden_size + gate


def swiglu_ffn_params(*, hidden_size, intermediate_size, bias=False):
    r"""Parameters of one SwiGLU feed-forward block (gate, up and down projections).

    .. math:: P = 3 h f \;[+\; 2f + h \text{ biases}]
    """
    p = 3 * hidden_size * intermediate_size
    if bias:
        p = p + 2 * intermediate_size + hidden_size
    return p


def latent_moe_projection_params(*, hidden_size, latent_size):
    r"""Parameters of the projections a latent MoE puts around its routed experts, per layer.

    .. math:: P = h r + r + r h   \quad\text{(down h -> r, latent RMSNorm, up r -> h)}

    The routed experts of a latent MoE (Kimi-K3: config ``routed_expert_hidden_size`` r =
    3584 of hidden h = 7168) read and write a width-r latent: a down projection before the
    dispatch, an RMSNorm of the latent (``latent_moe_use_norm``) and an up projection after
    the combine; router and shared experts stay at width h. Source: aiconfigurator
    ``sdk/models/kimi_k3.py`` ``_ffn_ops`` (latent_down_gemm h -> r, latent_norm, latent_up_gemm
    r -> h) and ``common.KimiK3Config`` docstring (commit 095f58a5). Zero without a latent.
    """
    if not latent_size:
        return 0.0
    return 2.0 * hidden_size * latent_size + latent_size


def gqa_kv_bytes_per_token_per_layer(*, n_kv_heads, head_dim_k, head_dim_v, kv_bytes_per_elem):
    r"""KV-cache bytes of one token in one MHA/GQA layer: K and V for every KV head.

    .. math:: b = n_{kv} (d_k + d_v) \, b_{elem}

    KV heads, not query heads (a known defect of some calculators is to use n_q).
    """
    return n_kv_heads * (head_dim_k + head_dim_v) * kv_bytes_per_elem


def mla_kv_bytes_per_token_per_layer(*, kv_lora_rank, qk_rope_head_dim, latent_bytes_per_elem,
                                     rope_bytes_per_elem, scale_bytes_per_token=0.0):
    r"""KV-cache bytes of one token in one MLA layer: the compressed latent and the decoupled
    RoPE key, stored ONCE (not as separate K and V).

    .. math:: b = r_{kv} b_{lat} + d_r b_{rope} + b_{scales}

    At BF16: (512 + 64) x 2 = 1,152 B; 61 layers give 70,272 B/token (DeepSeek ISCA'25,
    Table 1). FlashMLA's FP8 format keeps the RoPE part in BF16 and adds four FP32 scales
    (one per 128 latent elements): 512 + 16 + 128 = 656 B (FlashMLA README).
    """
    return (kv_lora_rank * latent_bytes_per_elem + qk_rope_head_dim * rope_bytes_per_elem
            + scale_bytes_per_token)
