"""Compressed attention (DeepSeek-V4: CSA at ratio 4 with an indexer, HCA at ratio 128).

One 512-wide KV head (keys = values) is cached twice: the last ``window_tokens`` tokens
uncompressed (a ring, per sequence) and one compressed entry per ``compress_ratio`` tokens
(per token of context: 1/r of an entry). A decode query attends the window plus the
compressed entries: with ``indexer = true`` (CSA) the ``index_topk`` entries a lightning
indexer picks after scoring every compressed entry with its own FP4 K cache; without (HCA)
every compressed entry. Ratio 0 is a pure sliding-window layer. The query is low-rank
(``q_lora_rank``), the output a grouped low-rank projection (``o_groups`` x ``o_lora_rank``).

Per layer and sequence (``kernels.compressed_attention``):

- bytes per token of context: (entry + indexer entry) / r, an entry 584 B in FP8
  (FlashMLA's V4 layout) or 1,024 B in BF16, an indexer entry 64 B (FP4);
- bytes per sequence: the window ring (w entries) and the compressors' FP32 state;
- decode: window + min(L/r, k) (CSA) or L/r (HCA) entries read and attended, plus the
  indexer's L/r scores and its cache read; prefill: the same per query, causal.

The per-layer ratios are the model file's ``[[layers]]`` groups (``params.compress_ratio``),
from the config's ``compress_ratios``. Costed on the roofline with the decode-attention
efficiencies where no table times the module. Where the device's measured tables do
(aiconfigurator's V4 tables time one layer's whole ``self_attn``: projections, norms, RoPE,
cache store, compressor, indexer and top-k, FlashMLA; :mod:`..table_families_v4`), the split
is costed as that module instead: two operations, ``module_in`` (the projections from the
hidden state, stage attn0) and ``module_out`` (the rest, attn1), each its own pure roofline
times the module's measured-over-roofline ratio, with the FLOPs and bytes of the split
operations they stand for; the small kernels the module times
(configs/realism.toml [other_kernels] ``compressed_in_module`` and the attention's
activation quantisation) leave the layer's other kernels. Sources: see
:mod:`inference_factory.kernels.compressed_attention`.
"""

from __future__ import annotations

from ...errors import SpecError
from ...kernels import compressed_attention as kca
from ...kernels import memory as kmem
from ..op import (Op, attention_mode, gemm, gemm_dtype, has_curve, prefill_roofline_fn,
                  quantization_kernels, roofline_key)
from ..precision import compute_precision
from ..table_families_v4 import module_roofline_s
from .base import AttentionKind, Memory, param


class Compressed(AttentionKind):
    name = "compressed"
    other_kernels_key = "compressed"
    param_keys = {
        "compress_ratio": "tokens pooled into one compressed entry (0: window only)",
        "window_tokens": "uncompressed sliding window, tokens",
        "indexer": "a lightning indexer picks index_topk compressed entries (CSA)",
        "index_n_heads": "indexer heads", "index_head_dim": "indexer head dimension",
        "index_topk": "compressed entries an indexed query attends",
        "o_lora_rank": "rank of each output group", "o_groups": "output projection groups",
    }

    # -- shape ---------------------------------------------------------------------------------
    @staticmethod
    def _p(m, at):
        ratio = int(param(m, at, "compress_ratio", minimum=0))
        indexer = bool(dict(at.params).get("indexer", False))
        return dict(
            ratio=ratio, window=param(m, at, "window_tokens", minimum=0), indexer=indexer,
            inh=param(m, at, "index_n_heads", minimum=1) if indexer else 0,
            ihd=param(m, at, "index_head_dim", minimum=1) if indexer else 0,
            topk=param(m, at, "index_topk", minimum=1) if indexer else 0,
            olr=param(m, at, "o_lora_rank", minimum=1), og=param(m, at, "o_groups", minimum=1))

    def check(self, m, at):
        p = self._p(m, at)
        if p["indexer"] and p["ratio"] == 0:
            raise SpecError(f"{m.path}: attention.params.indexer = true needs compress_ratio "
                            "> 0 for kind 'compressed' (it picks compressed entries)")
        if m.n_kv_heads != 1 or m.head_dim_qk != m.head_dim_v:
            raise SpecError(f"{m.path}: attention.n_kv_heads = {m.n_kv_heads}, head_dim_qk = "
                            f"{m.head_dim_qk}, head_dim_v = {m.head_dim_v}: kind 'compressed' "
                            "has one KV head with keys = values; allowed n_kv_heads = 1, "
                            "head_dim_qk = head_dim_v")
        if at.window or m.q_lora_rank <= 0 or m.qk_rope_head_dim <= 0:
            raise SpecError(f"{m.path}: kind 'compressed' needs attention.q_lora_rank > 0 and "
                            f"qk_rope_head_dim > 0 (got {m.q_lora_rank}, {m.qk_rope_head_dim})"
                            f" and no layers.window (got {at.window}; its window is "
                            "params.window_tokens)")

    def params_per_layer(self, m, at):
        p = self._p(m, at)
        return kca.compressed_attention_params(
            hidden_size=m.hidden_size, n_q_heads=m.n_q_heads, head_dim=m.head_dim_qk,
            q_lora_rank=m.q_lora_rank, o_lora_rank=p["olr"], o_groups=p["og"],
            ratio=p["ratio"], index_n_heads=p["inh"], index_head_dim=p["ihd"],
            has_indexer=p["indexer"])

    def _entry(self, m, kv_precision):
        return kca.kv_entry_bytes(head_dim=m.head_dim_qk, rope_head_dim=m.qk_rope_head_dim,
                                  fp8=kv_precision in ("fp8", "fp4"))

    def memory(self, m, kv_precision, at):
        p = self._p(m, at)
        entry = self._entry(m, kv_precision)
        idx = kca.indexer_entry_bytes(index_head_dim=p["ihd"]) if p["indexer"] else 0.0
        per_token = (entry + idx) / p["ratio"] if p["ratio"] else 0.0
        return Memory(bytes_per_token=per_token, bytes_per_sequence=(
            p["window"] * entry + kca.compressor_state_bytes(
                ratio=p["ratio"], head_dim=m.head_dim_qk, index_head_dim=p["ihd"],
                has_indexer=p["indexer"])))

    def _down_width(self, m, p):
        """Output width of the projections from the hidden state every TP rank holds whole:
        the query latent, the KV head, the compressors (and the indexer's, and its head
        weights)."""
        return kca.down_projection_width(q_lora_rank=m.q_lora_rank, head_dim=m.head_dim_qk,
                                         ratio=p["ratio"], has_indexer=p["indexer"],
                                         index_n_heads=p["inh"], index_head_dim=p["ihd"])

    def replicated_weight_bytes(self, m, at, *, n_layers, tp, bytes_per_param):
        if tp <= 1:
            return 0.0
        # the same term as MLA's latent down-projections, over this kind's widths
        return kmem.mla_replicated_latent_bytes(
            n_layers=n_layers, hidden_size=m.hidden_size, q_lora_rank=0,
            kv_lora_rank=self._down_width(m, self._p(m, at)), qk_rope_head_dim=0,
            bytes_per_param=bytes_per_param, tp=tp)

    def describe(self, m, at):
        p = self._p(m, at)
        kind = "CSA" if p["indexer"] else "HCA" if p["ratio"] else "window only"
        out = [("compression", f"1/{p['ratio']} ({kind}), window {p['window']} tokens"
                if p["ratio"] else f"none, window {p['window']} tokens")]
        if p["indexer"]:
            out.append(("indexer", f"{p['inh']} heads x {p['ihd']}, top-{p['topk']}"))
        out.append(("output", f"{p['og']} groups x rank {p['olr']}"))
        return out

    # -- operations ----------------------------------------------------------------------------
    def ops(self, g, windows, p, at):
        m, tp = g.m, g.tp
        q = self._p(m, at)
        n = sum(c for _, c in windows)
        h, wp, hd, r = m.hidden_size, g.wprec, m.head_dim_qk, q["ratio"]
        heads = m.n_q_heads / tp
        T = p.tokens
        entry = self._entry(m, g.kvprec)
        idx = kca.indexer_entry_bytes(index_head_dim=q["ihd"]) if q["indexer"] else 0.0
        ops = [gemm(g, "q_a_kv", "attn0", n, T, self._down_width(m, q), h, wp),
               gemm(g, "q_b", "attn0", n, T, heads * hd, m.q_lora_rank, wp)]
        if q["indexer"]:
            ops.append(gemm(g, "indexer_q", "attn0", n, T, q["inh"] * q["ihd"],
                            m.q_lora_rank, wp))
        # every new token enters the window ring; every r-th closes a compressed entry
        write = T * entry + (T * (entry + idx) / r if r else 0.0)
        decode = p.phase == "decode"
        if decode:
            att = p.new_tokens * kca.decode_attended_entries(
                kv_len_tokens=p.kv_len, ratio=r, window_tokens=q["window"], top_k=q["topk"])
            read = kca.decode_attended_entries(kv_len_tokens=p.kv_len, ratio=r,
                                               window_tokens=q["window"], top_k=q["topk"])
            scored = p.new_tokens * kca.compressed_entries(tokens=p.kv_len, ratio=r)
            idx_read = kca.compressed_entries(tokens=p.kv_len, ratio=r) * idx
        else:
            att = kca.prefill_attended_entries(new_tokens=p.new_tokens,
                                               cached_tokens=p.cached_tokens, ratio=r,
                                               window_tokens=q["window"], top_k=q["topk"])
            read, idx_read = 0.0, 0.0        # keys are on chip or freshly written
            scored = kca.prefill_attended_entries(new_tokens=p.new_tokens,
                                                  cached_tokens=p.cached_tokens, ratio=r,
                                                  window_tokens=0, top_k=0)
        fam = "compressed_decode" if decode else "compressed_prefill"
        ops.append(Op("attention", "compute", "attn1", n, rate="attention", precision=g.aprec,
                      flop=p.seqs * kca.attention_core_flop(attended_entries=att,
                                                            n_q_heads=heads, head_dim=hd),
                      hbm_bytes=p.seqs * read * entry + write, family=fam,
                      keys={"compress_ratio": r}))
        if q["indexer"]:
            ops.append(Op("indexer", "compute", "attn1", n, rate="attention",
                          precision=compute_precision(g.hw, "fp8") or "fp8",
                          flop=p.seqs * kca.compressed_indexer_score_flop(
                              query_tokens=1.0, entries=scored, index_n_heads=q["inh"],
                              index_head_dim=q["ihd"]),
                          hbm_bytes=p.seqs * idx_read,
                          family="compressed_indexer_" + ("decode" if decode else "prefill")))
        og = q["og"] / tp
        ops.append(gemm(g, "o_a", "attn1", n, T, og * q["olr"], m.n_q_heads * hd / q["og"],
                        "bf16"))
        ops.append(gemm(g, "o_b", "attn1", n, T, h, og * q["olr"], wp))
        return self._module(g, p, q, ops, n)

    def _module(self, g, p, q, split, n):
        """``split`` as the measured module (``module_in``, ``module_out``) where the device's
        tables time this module at the model's ratio, projection format, KV format, width and
        rank-local heads; else ``split``."""
        m, hw = g.m, g.hw
        fam = f"compressed_module_{p.phase}"
        dtype = gemm_dtype(m.quant_format(g.wprec), hw)
        keys = {"compress_ratio": q["ratio"], "gemm_type": dtype, "kv_dtype": g.kvprec}
        near = {"hidden_size": m.hidden_size, "num_heads": m.n_q_heads / g.tp}
        if not has_curve(g, fam, keys, near):
            return split
        dims = dict(phase=p.phase, gemm_dtype=dtype, kv_fp8=True, ratio=q["ratio"],
                    indexer=q["indexer"], hidden=m.hidden_size, n_heads=m.n_q_heads,
                    heads=m.n_q_heads / g.tp, head_dim=m.head_dim_qk,
                    rope_head_dim=m.qk_rope_head_dim, q_lora=m.q_lora_rank, o_lora=q["olr"],
                    o_groups=q["og"], index_heads=q["inh"], index_dim=q["ihd"],
                    topk=q["topk"], window=q["window"], attention_precision=g.aprec)
        name = tuple(sorted(dims.items()))
        out = []
        for part, stage in (("in", "attn0"), ("out", "attn1")):
            members = [o for o in split if o.stage == stage]
            if p.phase == "decode":
                coords = (p.seqs, p.kv_len)
                pure = (lambda b_, L_, part=part: module_roofline_s(
                    hw, **dims, batch=b_, new_tokens=p.new_tokens, kv_len=L_, part=part))
                key = roofline_key(hw, fam, part, name, per_point=(p.new_tokens,))
                mode = attention_mode(p.new_tokens)
            else:
                coords = (p.seqs, p.new_tokens + p.cached_tokens)
                pure = prefill_roofline_fn(
                    lambda b_, n_, c_, part=part: module_roofline_s(
                        hw, **dims, batch=b_, new_tokens=n_, cached_tokens=c_, part=part),
                    (), p.new_tokens, p.cached_tokens)
                key = roofline_key(hw, fam, part, name,
                                   per_point=(p.new_tokens, p.cached_tokens))
                mode = attention_mode(p.new_tokens / (p.new_tokens + p.cached_tokens))
            out.append(Op(
                f"module_{part}", "compute", stage, n, flop=sum(o.flop for o in members),
                hbm_bytes=sum(o.hbm_bytes for o in members), precision=members[0].precision,
                m_tokens=p.tokens, family=fam, keys=keys, nearest=near, coords=coords,
                pure_fn=pure, pure_key=key, roof_mode=mode,
                covers_kernels=(g.rl.other_kernels["compressed_in_module"]
                                + quantization_kernels(g, 2)) if part == "out" else 0.0))
        return out


KIND = Compressed()
