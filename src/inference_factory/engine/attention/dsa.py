"""DeepSeek Sparse Attention (DSA; DeepSeek-V3.2, GLM-5, GLM-5.2): MLA whose core attends
only to the ``index_topk`` tokens a lightning indexer selects.

Per layer and query token (:mod:`inference_factory.kernels.sparse_attention`):

- the **indexer**: ``index_n_heads`` x ``index_head_dim`` FP8 scores against the index key of
  every cached token (2 n_I d_I L FLOPs; its keys, 132 B per token at d_I = 128, read once per
  sequence and step), FP32 logits written and read by the **top-k** selection;
- the **sparse core**: in decode MLA's weight-absorbed (MQA) form over min(L, k) gathered
  latents (2 h (2 r_kv + d_r) min(L, k) FLOPs, 656 B per gathered token with the FP8
  ``fp8_ds_mla`` layout), with the W_UK/W_UV batched GEMMs around it (DeepSeek-V3.2 report
  sec. 2.1: DSA is instantiated in MLA's MQA mode); in prefill MLA's MHA form over min(pos, k)
  positions per query (``kv_b`` expansion, 2 h (d_qk + d_v) FLOPs per position), as SGLang
  runs prompts up to 2,048 tokens (its dense ragged prefill, aiconfigurator sdk/operations/
  dsa.py). ASSUMPTION: longer prompts, which SGLang runs through the absorbed sparse kernel,
  are priced in the same MHA form (fewer FLOPs per position, an expansion of every cached
  latent);
- the projections: MLA's, plus the indexer's key and head-weight projections (fused into
  ``q_a_kv_a`` here: they read the same hidden state) and its query projection
  (``indexer_q``, from the query latent). The indexer is not split by heads over TP (its
  weights count as replicated).

Memory per token and layer: the MLA latent at the KV precision plus the indexer key (FP8
with its FP32 scale, whatever the latent's precision): 656 + 132 = 788 B at FP8.

**IndexShare** (GLM-5.2, ``index_topk_freq`` 4): layers with ``indexer = false`` reuse the
top-k of the previous full layer: no indexer weights (the GLM-5.2-FP8 checkpoint has
``self_attn.indexer.*`` and ``indexers_proj`` only on its ``indexer_types`` = "full" layers,
config.json ``quantization_config.modules_to_not_convert``), no indexer operations and no
index-key cache (aiconfigurator dsa.rs: "Skip layers never store the index-K cache (the
indexer never runs)"; its SGLang collector patches out "mqa logits + topk + index-K store" on
them, collect_mla_module.py). Such layers form their own ``[[layers]]`` group.

Measured: the ``dsa_decode`` / ``dsa_prefill`` module tables (:mod:`..table_families_dsa`)
price ``indexer``, ``topk`` and ``attention``; the projections go through the GEMM tables
and the BMMs through ``mla_bmm`` as for MLA. Devices without DSA tables: the realistic
roofline (decode-attention fractions of the device, ``rate = "attention"``).
"""

from __future__ import annotations

from ... import units
from ...errors import SpecError
from ...kernels import memory as kmem
from ...kernels import sparse_attention as ksa
from .. import grid as G
from ..op import Op, attention_mode, gemm, roofline_key
from ..precision import compute_precision
from ..table_families_dsa import TABLE_MODELS, dsa_core_work, dsa_dims, part_roofline_s, table_dims
from .base import Memory, param
from .mla import MLA, absorbed_bmm_ops


class DSA(MLA):
    name = "dsa"
    other_kernels_key = "dsa"
    param_keys = {
        "index_n_heads": "indexer heads (config index_n_heads)",
        "index_head_dim": "indexer head dimension (config index_head_dim)",
        "index_topk": "tokens the sparse core attends to (config index_topk)",
        "indexer": "whether these layers run their own indexer (false: IndexShare layers "
                   "reusing another layer's top-k; config indexer_types)",
    }

    def check(self, m, at):
        super().check(m, at)
        for key in ("index_n_heads", "index_head_dim", "index_topk"):
            v = param(m, at, key, minimum=1)
            if int(v) != v:
                raise SpecError(f"{m.path}: attention.params.{key} = {v!r} must be an integer "
                                "for kind 'dsa'")
        if not isinstance(at.get("indexer", True), bool):
            raise SpecError(f"{m.path}: attention.params.indexer = {at.get('indexer')!r} must be "
                            "true or false for kind 'dsa'")

    def _dims(self, m, at):
        return dsa_dims(m, dict(at.params))

    def _indexer_params(self, m, at):
        d = self._dims(m, at)
        return ksa.indexer_params(hidden_size=m.hidden_size, q_lora_rank=m.q_lora_rank,
                                  index_n_heads=d.index_heads, index_head_dim=d.index_dim)

    def params_per_layer(self, m, at):
        own = self._indexer_params(m, at) if self._dims(m, at).indexer else 0.0
        return super().params_per_layer(m, at) + own

    def latent_bytes_per_token(self, m, kv_precision, at) -> float:
        return super().memory(m, kv_precision, at).bytes_per_token

    def memory(self, m, kv_precision, at):
        d = self._dims(m, at)
        index_k = ksa.indexer_k_bytes_per_token(index_head_dim=d.index_dim) if d.indexer else 0.0
        return Memory(bytes_per_token=self.latent_bytes_per_token(m, kv_precision, at) + index_k)

    def replicated_weight_bytes(self, m, at, *, n_layers, tp, bytes_per_param):
        out = super().replicated_weight_bytes(m, at, n_layers=n_layers, tp=tp,
                                              bytes_per_param=bytes_per_param)
        if tp > 1 and self._dims(m, at).indexer:
            out += kmem.sharded_weight_bytes(n_params=n_layers * self._indexer_params(m, at),
                                             bytes_per_param=bytes_per_param,
                                             n_shards=1.0) * (1.0 - 1.0 / tp)
        return out

    def describe(self, m, at):
        d = self._dims(m, at)
        return super().describe(m, at) + [
            ("DSA indexer", (f"{d.index_heads} heads x {d.index_dim}, FP8, top-k {d.topk}"
                             if d.indexer else f"none (reuses another layer's top-{d.topk})"))]

    # -- operations ----------------------------------------------------------------------------
    def _table_keys(self, g, d):
        """Exact keys of the DSA tables for this model, and the best source label: the table
        architecture whose dimensions are the model's (else the nearest in indexer heads,
        labelled extrapolated)."""
        best, cap = None, G.EXTRAPOLATED
        for arch in TABLE_MODELS:
            td = table_dims(arch)
            if (td.hidden, td.q_lora, td.kv_lora, td.nope, td.rope, td.v, td.index_heads,
                    td.index_dim, td.topk) == (d.hidden, d.q_lora, d.kv_lora, d.nope, d.rope, d.v,
                                               d.index_heads, d.index_dim, d.topk):
                best, cap = arch, G.MEASURED
                break
        if best is None:
            best = min(TABLE_MODELS, key=lambda a: abs(table_dims(a).index_heads
                                                       - d.index_heads))
        fmt = g.m.quant_format(g.wprec) if units.BYTES_PER_ELEMENT[g.wprec] < 2 else "bf16"
        gd = fmt if fmt in ("fp8_block", "bf16") else "fp8_block"
        if gd != fmt:
            cap = min(cap, G.EXTRAPOLATED)
        kv = "fp8" if g.kvprec in ("fp8", "fp4") else "bf16"
        return {"architecture": best, "kv_dtype": kv, "gemm_dtype": gd}, cap

    def ops(self, g, windows, p, at):
        m, hw, tp = g.m, g.hw, g.tp
        d = self._dims(m, at)
        n_layers = sum(n for _, n in windows)
        h, wp, T = m.hidden_size, g.wprec, p.tokens
        heads = m.n_q_heads / tp
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        idx_n = d.index_dim + d.index_heads if d.indexer else 0
        ops = [gemm(g, "q_a_kv_a", "attn0", n_layers, T,
                    m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim + idx_n, h, wp),
               gemm(g, "q_b", "attn0", n_layers, T, heads * qk, m.q_lora_rank, wp)]
        if d.indexer:
            ops.append(gemm(g, "indexer_q", "attn0", n_layers, T, d.index_heads * d.index_dim,
                            m.q_lora_rank, wp))
        decode = p.phase == "decode"
        new, cached = p.new_tokens, p.cached_tokens
        if decode:
            ops += absorbed_bmm_ops(g, n_layers, T, heads)
        else:       # MHA form: every position's keys and values expanded from the latent
            ops.append(gemm(g, "kv_b", "attn0", n_layers, T + p.seqs * cached,
                            heads * (m.qk_nope_head_dim + m.head_dim_v), m.kv_lora_rank, wp))
        latent = self.latent_bytes_per_token(m, g.kvprec, at)
        kv_len = p.kv_len if decode else new + cached
        work = dsa_core_work(d, seqs=p.seqs, new_tokens=new, cached_tokens=cached, heads=heads,
                             latent_bytes_per_token=latent, kv_len=kv_len, absorbed=decode)
        keys, cap = self._table_keys(g, d)
        fam = "dsa_decode" if decode else "dsa_prefill"
        # each part's own pure roofline over (sequences, tokens of context), the point's split
        # of the context into new and cached tokens kept
        f_new = new / kv_len
        for name, stage in (("indexer", "attn0"), ("topk", "attn0"), ("attention", "attn1")):
            if name not in work:
                continue
            flop, nbytes, prec = work[name]

            def pure(b_, L_, _name=name):
                w = dsa_core_work(d, seqs=b_, new_tokens=L_ * f_new,
                                  cached_tokens=L_ * (1 - f_new), heads=heads,
                                  latent_bytes_per_token=latent, absorbed=decode)
                return part_roofline_s(hw, w[_name])
            ops.append(Op(name, "compute", stage, n_layers, flop=flop, hbm_bytes=nbytes,
                          precision=(g.aprec if name == "attention"
                                     else compute_precision(hw, prec) or "bf16"),
                          rate="attention",
                          family=fam, keys=keys, nearest={"num_heads": heads},
                          coords=(p.seqs, kv_len), pure_fn=pure, source_cap=cap,
                          pure_key=roofline_key(hw, fam, name, d, heads, latent, decode,
                                                per_point=(f_new,)),
                          roof_mode=attention_mode(f_new)))
        ops.append(gemm(g, "o_proj", "attn1", n_layers, T, h, heads * m.head_dim_v, wp))
        return ops


KIND = DSA()
