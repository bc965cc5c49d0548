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

Measured: the ``msa_decode`` / ``msa_prefill`` module tables (:mod:`..table_families_msa`; vLLM
0.24.0 on B200, B300, GB200, GB300, H100, H200) price ``indexer`` and ``attention``, each its
own pure roofline times the whole module's measured-over-roofline ratio at the shape (as the
DSA kind); ``qkv`` and ``o_proj`` go through the GEMM tables. A model whose dimensions are not
MiniMax-M3's, or a GEMM or KV format the tables lack, reads MiniMax-M3's rows labelled
extrapolated. Devices without MSA tables (AMD, A100): the realistic roofline (the device's
decode-attention fractions, ``rate = "attention"``), labelled roofline in the footing.
"""

from __future__ import annotations

from ... import units
from ...errors import SpecError
from ...kernels import block_sparse as kbs
from ...kernels import params as kparams
from .. import grid as G
from ..op import Op, attention_mode, gemm, roofline_key
from ..table_families_msa import (TABLE_MODELS, msa_core_work, msa_dims, part_roofline_s,
                                  qkv_width, table_dims)
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
    def _table_keys(self, g, d):
        """Exact keys of the MSA tables for this model and the best source label it may carry:
        measured where the model's dimensions are those of a table architecture, GEMM and KV
        formats the tables hold; else the nearest architecture's rows, labelled extrapolated."""
        best = next((a for a in TABLE_MODELS if table_dims(a) == d), None)
        cap = G.MEASURED if best is not None else G.EXTRAPOLATED
        if best is None:
            best = min(TABLE_MODELS, key=lambda a: abs(table_dims(a).index_heads
                                                       - d.index_heads))
        fmt = g.m.quant_format(g.wprec) if units.BYTES_PER_ELEMENT[g.wprec] < 2 else "bf16"
        gd = fmt if fmt in ("fp8_block", "bf16") else "fp8_block"
        kv = "fp8" if g.kvprec in ("fp8", "fp4") else "bf16"
        if gd != fmt or g.kvprec not in ("fp8", "bf16", "fp16"):
            cap = min(cap, G.EXTRAPOLATED)
        return {"architecture": best, "kv_dtype": kv, "gemm_dtype": gd}, cap

    def ops(self, g, windows, p, at):
        m, hw, tp = g.m, g.hw, g.tp
        d = msa_dims(m, dict(at.params))
        n = sum(c for _, c in windows)
        heads = m.n_q_heads / tp
        T = p.tokens
        kvb = self._kv_bytes(m, g.kvprec) / min(tp, m.n_kv_heads)   # one GPU's K and V
        decode = p.phase == "decode"
        new, cached = p.new_tokens, p.cached_tokens
        # the indexer scores every cached key causally; the attention reads the chosen ones;
        # decode reads the whole context, prefill its cached prefix (the new tokens' keys are
        # computed in the pass)
        read = p.kv_len if decode else cached
        work = msa_core_work(d, seqs=p.seqs, new_tokens=new, cached_tokens=cached,
                             read_tokens=read, heads=heads, kv_bytes_per_token=kvb)
        ops = [gemm(g, "qkv", "attn0", n, T, qkv_width(d, heads), m.hidden_size, g.wprec)]
        keys, cap = self._table_keys(g, d)
        fam = "msa_decode" if decode else "msa_prefill"
        # the tables' axes: (sequences, context length); each part's own pure roofline over
        # them, the point's split of the context into new, cached and read tokens kept
        kv_len = p.kv_len if decode else new + cached
        f_new, f_read = new / kv_len, read / kv_len
        for name in ("indexer", "attention"):
            flop, nbytes, prec = work[name]

            def pure(b_, L_, _name=name):
                w = msa_core_work(d, seqs=b_, new_tokens=L_ * f_new,
                                  cached_tokens=L_ * (1 - f_new), read_tokens=L_ * f_read,
                                  heads=heads, kv_bytes_per_token=kvb)
                return part_roofline_s(hw, w[_name])
            ops.append(Op(name, "compute", "attn1", n, flop=flop, hbm_bytes=nbytes,
                          precision=g.aprec if name == "attention" else prec,
                          rate="attention", family=fam, keys=keys, nearest={"num_heads": heads},
                          coords=(p.seqs, kv_len), pure_fn=pure, source_cap=cap,
                          pure_key=roofline_key(hw, fam, name, d, heads, kvb, decode,
                                                per_point=(f_new, f_read)),
                          roof_mode=attention_mode(f_new)))
        ops.append(gemm(g, "o_proj", "attn1", n, T, m.hidden_size,
                        m.n_q_heads * m.head_dim_v / tp, g.wprec))
        return ops


KIND = BlockSparse()
