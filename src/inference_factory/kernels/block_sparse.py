"""Block-sparse attention (MiniMax Sparse Attention, "MSA", MiniMax-M3): the work and bytes of
its indexer and of its sparse attention, as pure functions.

What the engines run (sources, read 2026-08):

* **Indexer ("dense proxy")**: ``n_i`` index query heads of ``d_i`` dims score *every* cached
  token against one index key per token (FlashInfer ``msa_ops/proxy_score.py``: "per-KV-block
  max of unscaled causal Q K^T logits"; its benchmark counts ``2 s_q s_kv H_q d`` FLOPs and
  reads the index K "one kv_head wide"; vLLM 0.24.0 ``MinimaxM3QKVParallelLinearWithIndexer``:
  "index_k is a single head replicated to every rank", as quoted by aiconfigurator
  ``collector/vllm/collect_msa_module.py``), then takes the maximum per block of ``b`` tokens
  (config ``sparse_score_type = "max"``). The index K is cached per token at the model dtype
  (SGLang ``kv_cache_configurator.py:1246 index_dtype=model_dtype``; vLLM "128 elems/token,
  always bf16"), beside the K and V of the GQA heads.
* **Selection**: the top ``n`` blocks per query and index head, *including* the forced local
  block(s) (FlashInfer ``msa_topk_select``: ``force_begin_blocks + force_end_blocks <= topk``,
  "force_end_blocks: ... (local window) to always include"); MiniMax-M3: n = 16, b = 128, one
  local block, so each query attends to at most n b = 2,048 tokens (aiconfigurator
  ``sdk/models/minimax_m3.py``: ``index_topk = SPARSE_TOPK_BLOCKS * SPARSE_BLOCK_SIZE``).
* **Sparse attention**: ordinary GQA over the selected tokens (FlashInfer
  ``benchmarks/routines/sparse_attention.py``: ``4 total_q topk 128 H_q 128`` FLOPs, K and V
  read ``total_q H_kv topk 128 d`` elements each). Per query position p the attended count is
  min(p, n b): the same count as a sliding window of n b tokens, so the windowed closed form
  (:func:`.attention.windowed_attended_positions`) counts it.
"""

from __future__ import annotations

import numpy as np


def block_sparse_attended_tokens(*, context_tokens, topk_blocks, block_tokens):
    r"""Tokens one decode query attends to in a block-sparse layer.

    .. math:: T = \min(L, n\,b)

    ``n`` selected blocks of ``b`` tokens (the local block among them). A partly filled last
    block makes the true count slightly smaller; ignored (at most b - 1 tokens)."""
    return np.minimum(context_tokens, topk_blocks * block_tokens)


def block_sparse_index_flop(*, scored_positions, n_index_heads, index_head_dim):
    r"""FLOPs of the indexer's scores (one multiply-add per index head, dimension and scored
    (query, key) pair).

    .. math:: F_{idx} = 2\, n_i\, d_i\, S

    ``S`` the summed scored positions: every cached key, causally
    (:func:`.attention.causal_attended_positions`; one decode token over L keys: S = L).
    The block maximum and top-n selection are not counted (no tensor-core work)."""
    return 2.0 * n_index_heads * index_head_dim * scored_positions


def block_sparse_index_bytes_per_token_per_layer(*, index_k_heads, index_head_dim,
                                                 index_bytes_per_elem):
    r"""Bytes of the indexer's key cache per token of context and layer.

    .. math:: B_{idx} = k_i\, d_i\, \beta_{idx}

    MiniMax-M3: one index key head (k_i = 1) of 128 dims at BF16: 256 B."""
    return float(index_k_heads * index_head_dim * index_bytes_per_elem)


def block_sparse_index_params(*, hidden_size, n_index_heads, index_k_heads, index_head_dim):
    r"""Parameters of a block-sparse layer's index projections (query and key).

    .. math:: P_{idx} = h\, (n_i + k_i)\, d_i

    The checkpoint's ``self_attn.index_q_proj`` and ``index_k_proj`` (NVIDIA's MiniMax-M3
    NVFP4 quantisation config lists both on layers 3..59); their norms are not counted."""
    return float(hidden_size * (n_index_heads + index_k_heads) * index_head_dim)
