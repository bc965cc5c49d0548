"""Block-sparse attention (MiniMax Sparse Attention, "MSA"; MiniMax-M3 from layer 3 on): GQA
whose queries attend only to the ``topk_blocks`` blocks of ``block_tokens`` tokens an indexer
chooses, the local block among them (formulas and sources: :mod:`...kernels.block_sparse`).

Per layer and pass:

* ``qkv``: the GQA projections fused with the indexer's (vLLM ``MinimaxM3QKVParallelLinear
  WithIndexer``): ``index_heads`` query heads shard like the KV heads (one per GPU at most
  replicated), the one index key head is replicated on every GPU;
* ``indexer``: ``index_heads`` x ``index_head_dim`` scores against every cached token, reading
  the whole index key cache each decode step: 2 n_i d_i L FLOPs and k_i d_i 2 L bytes per
  query token, O(L);
* ``attention``: GQA over min(L, n b) tokens per query (2,048 for MiniMax-M3), reading the
  K and V of those tokens only;
* ``o_proj``.

The cache per token and layer is the GQA K and V of every KV head at the KV precision plus
the index key at ``index_cache_bits`` (BF16 in SGLang and vLLM whatever the KV precision);
tensor parallelism splits the former over min(tp, n_kv) GPUs and replicates the latter.

Costed on the roofline with the attention efficiency of ``configs/realism.toml`` (no measured
table family: aiconfigurator's ``msa_*_module_perf`` tables exist for NVIDIA devices but are
not extracted yet), so the footing labels these operations roofline.
"""

from __future__ import annotations

from ... import units
from ...errors import SpecError
from ...kernels import attention as katt
from ...kernels import block_sparse as kbs
from ...kernels import params as kparams
from ..op import Op, gemm, kv_read_bytes
from .base import AttentionKind, Memory, param


class BlockSparse(AttentionKind):
    name = "block_sparse"
    other_kernels_key = "block_sparse"
    param_keys = {
        "index_heads": "indexer query heads (config sparse_num_index_heads)",
        "index_k_heads": "indexer key heads cached per token (1: one shared index key)",
        "index_head_dim": "indexer head dimension (config sparse_index_dim)",
        "block_tokens": "tokens per selectable block (config sparse_block_size)",
        "topk_blocks": "blocks each query attends to, local ones included "
                       "(config sparse_topk_blocks)",
        "local_blocks": "most recent blocks always selected, among topk_blocks "
                        "(config sparse_local_block)",
        "index_cache_bits": "bits per element of the cached index keys (16: BF16)",
    }

    def check(self, m, at):
        if at.window:
            raise SpecError(f"{m.path}: a sliding window ({at.window} tokens) on kind "
                            "'block_sparse' is not modelled; allowed window = 0")
        if m.n_q_heads % m.n_kv_heads:
            raise SpecError(f"{m.path}: attention.n_kv_heads = {m.n_kv_heads} must divide "
                            f"n_q_heads = {m.n_q_heads}")
        for key in ("index_heads", "index_k_heads", "index_head_dim", "block_tokens",
                    "topk_blocks", "index_cache_bits"):
            param(m, at, key, minimum=1)
        if not 0 <= param(m, at, "local_blocks", minimum=0) <= param(m, at, "topk_blocks"):
            raise SpecError(f"{m.path}: attention.params.local_blocks = "
                            f"{at.get('local_blocks')!r} must be <= topk_blocks = "
                            f"{at.get('topk_blocks')!r} (the local blocks are among them)")

    # -- structure -----------------------------------------------------------------------------
    def params_per_layer(self, m, at):
        return kparams.gqa_attention_params(
            hidden_size=m.hidden_size, n_q_heads=m.n_q_heads, n_kv_heads=m.n_kv_heads,
            head_dim_qk=m.head_dim_qk, head_dim_v=m.head_dim_v, bias=m.attention_bias
        ) + kbs.block_sparse_index_params(
            hidden_size=m.hidden_size, n_index_heads=at.get("index_heads"),
            index_k_heads=at.get("index_k_heads"), index_head_dim=at.get("index_head_dim"))

    def _kv_bytes(self, m, kv_precision):
        return kparams.gqa_kv_bytes_per_token_per_layer(
            n_kv_heads=m.n_kv_heads, head_dim_k=m.head_dim_qk, head_dim_v=m.head_dim_v,
            kv_bytes_per_elem=units.BYTES_PER_ELEMENT[kv_precision])

    def _index_bytes(self, at):
        return kbs.block_sparse_index_bytes_per_token_per_layer(
            index_k_heads=at.get("index_k_heads"), index_head_dim=at.get("index_head_dim"),
            index_bytes_per_elem=at.get("index_cache_bits") / 8.0)

    def memory(self, m, kv_precision, at):
        return Memory(bytes_per_token=self._kv_bytes(m, kv_precision) + self._index_bytes(at))

    def kv_split(self, m, tp, at):
        # K and V split over min(tp, n_kv) GPUs, the index keys whole on each: the divisor
        # that gives one GPU's share of the sum
        kv, idx = self._kv_bytes(m, "bf16"), self._index_bytes(at)
        return (kv + idx) / (kv / min(tp, m.n_kv_heads) + idx)

    def describe(self, m, at):
        return [("index heads x dim", f"{at.get('index_heads')} x {at.get('index_head_dim')} "
                 f"({at.get('index_k_heads')} key head, {at.get('index_cache_bits')}-bit cache)"),
                ("selected blocks", f"{at.get('topk_blocks')} of {at.get('block_tokens')} "
                 f"tokens ({at.get('local_blocks')} local)")]

    # -- operations ----------------------------------------------------------------------------
    def ops(self, g, windows, p, at):
        m, tp = g.m, g.tp
        seqs, new_tokens, cached_tokens, kv_len, T = (p.seqs, p.new_tokens, p.cached_tokens,
                                                      p.kv_len, p.tokens)
        n = sum(c for _, c in windows)
        d = m.head_dim_qk
        heads = m.n_q_heads / tp
        kvh = max(m.n_kv_heads / tp, 1.0)
        n_i, k_i, d_i = at.get("index_heads"), at.get("index_k_heads"), at.get("index_head_dim")
        idx_heads = max(n_i / tp, 1.0)
        topk_tokens = at.get("topk_blocks") * at.get("block_tokens")
        kvb = self._kv_bytes(m, g.kvprec) / min(tp, m.n_kv_heads)   # one GPU's K and V
        idxb = self._index_bytes(at)                                  # replicated
        decode = p.phase == "decode"
        qkv_n = heads * d + kvh * (d + m.head_dim_v) + (idx_heads + k_i) * d_i
        ops = [gemm(g, "qkv", "attn0", n, T, qkv_n, m.hidden_size, g.wprec)]
        # the indexer scores every cached key causally; the attention reads the chosen ones
        scored = katt.causal_attended_positions(new_tokens=new_tokens,
                                                cached_tokens=cached_tokens)
        attended = katt.windowed_attended_positions(new_tokens=new_tokens,
                                                    cached_tokens=cached_tokens,
                                                    window_tokens=topk_tokens)
        write_idx = katt.kv_write_bytes(new_tokens=T, kv_bytes_per_token=idxb)
        write_kv = katt.kv_write_bytes(new_tokens=T, kv_bytes_per_token=kvb)
        read_ctx = kv_len if decode else cached_tokens
        ops.append(Op("indexer", "compute", "attn1", n, rate="attention", precision="bf16",
                      flop=seqs * kbs.block_sparse_index_flop(
                          scored_positions=scored, n_index_heads=idx_heads, index_head_dim=d_i),
                      hbm_bytes=kv_read_bytes(seqs, read_ctx, idxb, None) + write_idx))
        ops.append(Op("attention", "compute", "attn1", n, rate="attention", precision=g.aprec,
                      flop=seqs * katt.attention_core_flop(
                          attended_positions=attended, n_q_heads=heads, head_dim_qk=d,
                          head_dim_v=m.head_dim_v),
                      hbm_bytes=kv_read_bytes(seqs, read_ctx, kvb, topk_tokens) + write_kv))
        ops.append(gemm(g, "o_proj", "attn1", n, T, m.hidden_size,
                        m.n_q_heads * m.head_dim_v / tp, g.wprec))
        return ops


KIND = BlockSparse()
