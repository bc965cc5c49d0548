"""DeepSeek Sparse Attention (DSA; DeepSeek-V3.2, GLM-5): the lightning indexer's parameters,
cache, FLOPs and bytes, and the sparse MLA core's attended positions and gathered bytes.

DSA adds to MLA an *indexer*: per query token t, ``n_I`` index heads of width ``d_I`` score
every cached token s, :math:`I_{t,s} = \\sum_j w_{t,j}\\,\\mathrm{ReLU}(q_{t,j} \\cdot k_s)`, in
FP8; the top ``k`` scores choose the tokens the MLA core (its MQA, weight-absorbed form)
attends to. The indexer caches one key of ``d_I`` per token and layer (FP8 with one FP32
scale per 128 values). Sources: DeepSeek-V3.2 technical report (DeepSeek-AI 2025, "DeepSeek-V3.2:
Pushing the Frontier of Open LLMs", sec. 2.1: indexer, MQA mode of MLA); DeepSeek-V3.2 config.json
(index_n_heads 64, index_head_dim 128, index_topk 2048); the index-K entry size
``index_head_dim + index_head_dim // 128 * 4`` of SGLang/vLLM as ported in aiconfigurator
(aic-core/rust/aiconfigurator-core/src/perf_database/dsa.rs ``indexer_cache_entry_bytes``,
commit 095f58a5).
"""

from __future__ import annotations

import numpy as np


def indexer_params(*, hidden_size, q_lora_rank, index_n_heads, index_head_dim):
    r"""Parameters of one layer's lightning indexer.

    .. math:: P_I = r_q\, n_I d_I + h\, d_I + 2 d_I + h\, n_I

    the query up-projection from the query latent (``wq_b``), the key projection from the
    hidden state (``wk``), the key LayerNorm (weight and bias) and the per-head weights
    (``weights_proj``). Source: DeepSeek-V3.2 inference code ``Indexer`` (wq_b, wk, k_norm,
    weights_proj); the GLM-5.2-FP8 config lists ``self_attn.indexer.k_norm(.bias)`` and
    ``self_attn.indexers_proj`` per layer.
    """
    return (q_lora_rank * index_n_heads * index_head_dim + hidden_size * index_head_dim
            + 2.0 * index_head_dim + hidden_size * index_n_heads)


def indexer_k_bytes_per_token(*, index_head_dim, key_bytes_per_elem=1.0, scale_block=128,
                              scale_bytes=4.0):
    r"""Bytes of one token's indexer key in one layer.

    .. math:: b_I = d_I\, b_k + \lceil d_I / 128 \rceil \cdot 4

    FP8 keys with one FP32 scale per 128 values: 132 B at d_I = 128 (SGLang/vLLM
    ``index_head_dim + index_head_dim // 128 * 4``; see the module docstring).
    """
    return index_head_dim * key_bytes_per_elem + np.ceil(index_head_dim / scale_block) * scale_bytes


def indexer_score_flop(*, scored_pairs, index_n_heads, index_head_dim):
    r"""FLOPs of the indexer's scores over ``scored_pairs`` (query, cached token) pairs.

    .. math:: F_I = 2\, n_I d_I\, S

    the FP8 dot products of every index head with every scored key; the ReLU and the
    weighted sum over heads (2 n_I per pair, about 1/d_I of this on CUDA cores) are left out,
    as in aiconfigurator's module roofline (dsa.rs ``indexer_logits_ops``). Decode of one
    token over L cached tokens scores S = L pairs.
    """
    return 2.0 * index_n_heads * index_head_dim * scored_pairs


def indexer_logit_bytes(*, scored_pairs, logit_bytes=4.0):
    r"""Bytes of the indexer's scores (FP32 logits) over ``scored_pairs`` pairs, once.

    .. math:: B_\ell = 4 S

    written by the score kernel and read once by the top-k selection (DeepGEMM
    ``fp8_mqa_logits`` / ``fp8_paged_mqa_logits`` return FP32 logits that SGLang's top-k
    kernel reads). ASSUMPTION: no fusion of scoring and selection.
    """
    return logit_bytes * scored_pairs


def sparse_gather_bytes(*, attended_positions, kv_bytes_per_token):
    r"""Latent-cache bytes the sparse MLA core reads: every query gathers its own selected
    tokens' latents (one MQA group of all heads per query token). The attended positions
    are :math:`S_k = \sum_{i=1}^{n} \min(p + i, k)` for n queries after p cached tokens,
    the sliding-window sum of ``kernels.attention.windowed_attended_positions`` with w = k
    (min(L, k) for one decode token over L).

    .. math:: B_s = S_k\, b_{kv}

    Unlike dense attention, queries of one sequence (draft tokens, prompt tokens) select
    different tokens, so the read is per query, not per sequence. ASSUMPTION: no reuse of
    overlapping selections through the L2 cache (an upper bound for prefill).
    """
    return attended_positions * kv_bytes_per_token
