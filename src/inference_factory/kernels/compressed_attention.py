"""Compressed attention (DeepSeek-V4's CSA and HCA): the cache, the entries a query attends
and the work of one layer, as pure functions of the layer's shape.

A V4 layer keeps one 512-wide KV head (keys = values, as MLA's latent) in two caches: the
last ``window`` tokens uncompressed (a sliding-window ring) and one *compressed* entry per
``ratio`` tokens (a learned gated pooling of the tokens' projections; ratio 0: no compressed
cache, a pure sliding-window layer). With ratio 4 (CSA) a lightning indexer (its own FP4 K
cache over the compressed entries, ``index_n_heads`` x ``index_head_dim``) picks the top
``index_topk`` entries a query attends; with ratio 128 (HCA) a query attends every
compressed entry. Until ``ratio`` tokens are pooled, a compressor keeps their FP32
projections and scores per sequence.

Sources: DeepSeek-V4-Flash/-Pro ``config.json`` (``compress_ratios``, ``sliding_window``,
``index_topk``, ``head_dim``), as copied in ai-dynamo/aiconfigurator 095f58a5
``aic-core/src/aiconfigurator_core/model_configs/``; the attention roofline of
aiconfigurator's Rust engine, ``aic-core/rust/aiconfigurator-core/src/perf_database/dsv4.rs``
lines 1188-1309 (``dsv4_attention_sol_ms``: window and compressed pairs, indexer pairs, the
compressor's operations); its KV-cache size, ``sdk/models/deepseek_v4.py`` lines 376-395;
the FP8 entry layout of deepseek-ai/FlashMLA 9241ae3 ``csrc/api/sparse_decode.h`` line 295.
"""

from __future__ import annotations

import numpy as np


def kv_entry_bytes(*, head_dim, rope_head_dim, fp8):
    r"""Bytes of one cache entry (a window token or a compressed entry) of the 512-wide head.

    FP8 (FlashMLA's "MODEL1" layout): the non-rotary dims in FP8 with one UE8M0 scale byte
    per 64 of them, the rotary dims in BF16, and one pad byte:

    .. math:: b = (d - d_r) + 2 d_r + (d - d_r)/64 + 1

    = 448 + 128 + 7 + 1 = 584 B for d = 512, d_r = 64 (FlashMLA ``sparse_decode.h`` l. 295).
    Otherwise BF16, 2 d bytes (1,024 B).
    """
    nope = head_dim - rope_head_dim
    if fp8:
        return nope + 2.0 * rope_head_dim + nope / 64.0 + 1.0
    return 2.0 * head_dim


def indexer_entry_bytes(*, index_head_dim):
    """Bytes of one compressed entry of the CSA indexer's K cache: FP4, half a byte per dim
    (64 B at 128 dims; aiconfigurator ``common.deepseek_v4_indexer_cache_entry_bytes``).
    ASSUMPTION: the FP4 block scales are not counted (aiconfigurator's convention); at one
    byte per 32 dims they would add 4 B (6 %) of the indexer cache."""
    return 0.5 * index_head_dim


def compressed_entries(*, tokens, ratio):
    r"""Compressed entries of ``tokens`` tokens: :math:`\lfloor T / r \rfloor` (0 at r = 0)."""
    if ratio <= 0:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    return np.floor(np.asarray(tokens, dtype=float) / ratio)


def decode_attended_entries(*, kv_len_tokens, ratio, window_tokens, top_k):
    r"""Entries one decode query attends: the window's and the compressed ones chosen.

    .. math:: A = \min(L, w) + \begin{cases} \min(\lfloor L/r \rfloor, k) &
              \text{indexer (CSA)} \\ \lfloor L/r \rfloor & \text{no indexer (HCA)}
              \end{cases}

    ``top_k`` 0 = no indexer (every compressed entry). aiconfigurator dsv4.rs l. 1252-1258.
    """
    L = np.asarray(kv_len_tokens, dtype=float)
    c = compressed_entries(tokens=L, ratio=ratio)
    if top_k > 0:
        c = np.minimum(c, top_k)
    return np.minimum(L, window_tokens) + c


def prefill_attended_entries(*, new_tokens, cached_tokens, ratio, window_tokens, top_k):
    r"""Entries the ``new_tokens`` queries of one prompt attend in all, after ``cached_tokens``
    (causal): each query at position p attends min(p, w) window tokens and
    min(p/r, k) compressed entries (p/r without an indexer); the sums in closed form
    (continuous in p: the floor's ≤ 1 entry per query is dropped).

    .. math:: \sum_{p=c+1}^{c+n} \min(p, w) + \sum_{p=c+1}^{c+n} \min(p/r, k)
    """
    n = np.asarray(new_tokens, dtype=float)
    c = np.asarray(cached_tokens, dtype=float)
    return (_capped_sum(c, c + n, 1.0, window_tokens)
            + (0.0 if ratio <= 0 else
               _capped_sum(c, c + n, 1.0 / ratio, top_k if top_k > 0 else np.inf)))


def _capped_sum(a, b, slope, cap):
    """sum_{p=a+1}^{b} min(slope p, cap), exact for whole a, b below the cap."""
    if not np.isfinite(cap):
        return slope * (b * (b + 1.0) - a * (a + 1.0)) / 2.0
    e = np.clip(cap / slope, a, b)
    return slope * (e * (e + 1.0) - a * (a + 1.0)) / 2.0 + cap * (b - e)


def down_projection_width(*, q_lora_rank, head_dim, ratio, has_indexer, index_n_heads,
                          index_head_dim):
    r"""Output width of the projections a layer takes from the hidden state (every TP rank
    holds them whole): the query latent, the KV head, the compressors' KV and gate
    projections (r > 0; twice for CSA's overlapping windows) and the CSA indexer's
    compressor and head weights:

    .. math:: W = r_q + d + [r > 0]\, 2 c d + [\text{CSA}]\,(4 d_I + h_I)

    (c = 2 for CSA, else 1; the same widths as :func:`compressed_attention_params`)."""
    c = 2 if has_indexer else 1
    return (q_lora_rank + head_dim + (2 * c * head_dim if ratio else 0)
            + (4 * index_head_dim + index_n_heads if has_indexer else 0))


def attention_core_flop(*, attended_entries, n_q_heads, head_dim):
    r"""Score and value products of the single shared head (keys = values, width d):

    .. math:: F = 4 n_q d A

    aiconfigurator dsv4.rs l. 1263 (``attention_ops = 4 nh hd pairs``)."""
    return 4.0 * n_q_heads * head_dim * attended_entries


def compressed_indexer_score_flop(*, query_tokens, entries, index_n_heads, index_head_dim):
    r"""Lightning-indexer scores of CSA over compressed entries (FP8 MQA logits):

    .. math:: F = 2\, Q\, E\, h_I d_I

    with Q queries and E compressed entries each scores (DeepGEMM ``fp8_paged_mqa_logits``;
    aiconfigurator dsv4.rs l. 1270-1272). The DSA indexer of V3.2 is the same product over
    every token instead of every compressed entry."""
    return 2.0 * query_tokens * entries * index_n_heads * index_head_dim


def compressor_state_bytes(*, ratio, head_dim, index_head_dim, has_indexer):
    r"""FP32 state a layer's compressors keep per sequence until ``ratio`` tokens pool
    into one entry: projections and scores of ``ratio`` tokens (twice as many for CSA, whose
    pooling windows overlap), and the same for the indexer's own compressor:

    .. math:: S = 2 \cdot r \cdot c \cdot d \cdot 4 + [\text{CSA}]\, 2 \cdot r \cdot 2 \cdot d_I \cdot 4

    c = 2 for CSA, 1 for HCA; 0 at r = 0. aiconfigurator ``deepseek_v4.py`` l. 386-394
    ("Compressor decode state keeps FP32 kv_state and score_state buffers")."""
    if ratio <= 0:
        return 0.0
    overlap = 2.0 if has_indexer else 1.0
    out = 2.0 * ratio * overlap * head_dim * 4.0
    if has_indexer:
        out += 2.0 * ratio * 2.0 * index_head_dim * 4.0
    return out


def compressed_attention_params(*, hidden_size, n_q_heads, head_dim, q_lora_rank, o_lora_rank,
                                o_groups, ratio, index_n_heads, index_head_dim, has_indexer):
    r"""Parameters of one compressed-attention block (aiconfigurator dsv4.rs l. 202-232):

    - query: :math:`H r_q + r_q n_q d` (low rank), the single KV head :math:`H d`;
    - grouped low-rank output: :math:`n_q d\, r_o + g\, r_o H`; a sink per head :math:`n_q`;
    - norms of the query latent and the KV head: :math:`r_q + d`;
    - compressor (r > 0): KV and gate projections :math:`2 H c d` and a positional bias
      :math:`r c d` (c = 2 for CSA's overlapping windows, else 1);
    - CSA indexer: query :math:`r_q h_I d_I`, its compressor :math:`2 H \cdot 2 d_I` and bias
      :math:`r \cdot 2 d_I`, head weights :math:`H h_I`.
    """
    p = (hidden_size * q_lora_rank + q_lora_rank * n_q_heads * head_dim
         + hidden_size * head_dim + n_q_heads * head_dim * o_lora_rank
         + o_groups * o_lora_rank * hidden_size + n_q_heads + q_lora_rank + head_dim)
    if ratio > 0:
        c = 2.0 if has_indexer else 1.0
        p += 2.0 * hidden_size * c * head_dim + ratio * c * head_dim
    if has_indexer:
        p += (q_lora_rank * index_n_heads * index_head_dim + 2.0 * hidden_size * 2.0
              * index_head_dim + ratio * 2.0 * index_head_dim + hidden_size * index_n_heads)
    return float(p)
