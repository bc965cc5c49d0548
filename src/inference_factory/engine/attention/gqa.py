"""Multi-head and grouped-query attention (MHA is GQA with as many KV heads as query heads),
over the whole context or a sliding window, with or without attention sinks (a sink is one
learned logit per head: no bytes and no FLOPs the roofline sees), with or without an output
gate (``params.output_gate``, config ``attn_output_gate``: the query projection also gives a
sigmoid gate of n_q x d_v per token, HF ``Qwen3NextAttention``; Qwen3-Next / Qwen3.5's full
layers).

Per layer and token the cache holds K and V of every KV head,
``kernels.params.gqa_kv_bytes_per_token_per_layer``; a window layer keeps at most its window.
Tensor parallelism splits the KV heads (and the cache with them) over min(tp, n_kv) GPUs;
beyond that the KV heads are replicated. Prefill and decode attention read the
``attention_prefill`` / ``attention_decode`` tables (FlashInfer / TRT-LLM kernels, NVIDIA's
measured tables, docs/MODEL.md section 4).
"""

from __future__ import annotations

import numpy as np

from ... import units
from ...errors import SpecError
from ...kernels import attention as katt
from ...kernels import params as kparams
from .. import measured as M
from ..op import (Op, attention_mode, gemm, kv_read_bytes, kv_write_covered, prefill_roofline_fn,
                  roofline_key)
from .base import AttentionKind, Memory


class GQA(AttentionKind):
    name = "gqa"
    other_kernels_key = "gqa"
    param_keys = {"output_gate": "the query projection also gives a sigmoid output gate "
                                 "(attn_output_gate)"}

    def check(self, m, at):
        if m.n_q_heads % m.n_kv_heads:
            raise SpecError(f"{m.path}: attention.n_kv_heads = {m.n_kv_heads} must divide "
                            f"n_q_heads = {m.n_q_heads}")

    def params_per_layer(self, m, at):
        return kparams.gqa_attention_params(
            hidden_size=m.hidden_size, n_q_heads=m.n_q_heads, n_kv_heads=m.n_kv_heads,
            head_dim_qk=m.head_dim_qk, head_dim_v=m.head_dim_v, bias=m.attention_bias,
            output_gate=bool(at.get("output_gate", False)))

    def memory(self, m, kv_precision, at):
        window = at.window
        b = kparams.gqa_kv_bytes_per_token_per_layer(
            n_kv_heads=m.n_kv_heads, head_dim_k=m.head_dim_qk, head_dim_v=m.head_dim_v,
            kv_bytes_per_elem=units.BYTES_PER_ELEMENT[kv_precision])
        return Memory(bytes_per_token=b, span_tokens=float(window) if window else np.inf)

    def kv_split(self, m, tp, at):
        return float(min(tp, m.n_kv_heads))

    def ops(self, g, windows, p, at):
        m, hw, tp = g.m, g.hw, g.tp
        seqs, new_tokens, cached_tokens, kv_len, T = (p.seqs, p.new_tokens, p.cached_tokens,
                                                      p.kv_len, p.tokens)
        n_layers = sum(n for _, n in windows)
        heads = m.n_q_heads / tp
        kv_dtype = "fp8" if g.kvprec in ("fp8", "fp4") else "bf16"
        d = m.head_dim_qk
        kvh = max(m.n_kv_heads / tp, 1.0)
        # KV heads are replicated where TP exceeds their count
        qkv_n = m.n_q_heads * m.head_dim_qk / tp + kvh * (m.head_dim_qk + m.head_dim_v)
        if at.get("output_gate", False):        # the gate's columns, split by query heads
            qkv_n = qkv_n + m.n_q_heads * m.head_dim_v / tp
        ops = [gemm(g, "qkv", "attn0", n_layers, T, qkv_n, m.hidden_size, g.wprec)]
        kvb_layer = self.memory(m, g.kvprec, at).bytes_per_token / self.kv_split(m, tp, at)
        decode = p.phase == "decode"
        seen_window = False
        for window, count in windows:
            # "attention" for full context, "attention_window" for the first window size
            # (gpt-oss has one), "attention_window_<w>" for any further one
            name = ("attention" if not window else
                    f"attention_window_{window}" if seen_window else "attention_window")
            seen_window = seen_window or bool(window)
            window = window or None
            if decode:
                ctx = kv_len if window is None else np.minimum(kv_len, window)
                fam, coords = "attention_decode", (seqs, ctx)
                pure = (lambda b_, L_, nt=new_tokens:
                        M.gqa_decode_roofline_s(hw, kv_dtype, heads, kvh, d, b_, L_, nt))
                key = roofline_key(hw, fam, kv_dtype, heads, kvh, d, per_point=(new_tokens,))
                mode = attention_mode(new_tokens)
                nbytes = (kv_read_bytes(seqs, kv_len, kvb_layer, window)
                          + katt.kv_write_bytes(new_tokens=T, kv_bytes_per_token=kvb_layer))
            else:
                # efficiency of a causal kernel over the whole prompt: with a cached prefix
                # the same kernel runs fewer queries against the same keys
                fam, coords = "attention_prefill", (seqs, new_tokens + cached_tokens)
                pure = prefill_roofline_fn(M.gqa_prefill_roofline_s,
                                           (hw, kv_dtype, heads, kvh, d),
                                           new_tokens, cached_tokens, window=window)
                key = roofline_key(hw, fam, kv_dtype, heads, kvh, d, window,
                                   per_point=(new_tokens, cached_tokens))
                mode = attention_mode(new_tokens / (new_tokens + cached_tokens))
                nbytes = (katt.kv_write_bytes(new_tokens=T, kv_bytes_per_token=kvb_layer)
                          + kv_read_bytes(seqs, cached_tokens, kvb_layer, window))
            pos = (katt.causal_attended_positions(new_tokens=new_tokens,
                                                  cached_tokens=cached_tokens)
                   if window is None else katt.windowed_attended_positions(
                       new_tokens=new_tokens, cached_tokens=cached_tokens, window_tokens=window))
            flop = seqs * katt.attention_core_flop(attended_positions=pos, n_q_heads=heads,
                                                   head_dim_qk=m.head_dim_qk,
                                                   head_dim_v=m.head_dim_v)
            keys = {"kv_dtype": kv_dtype, "head_dim": d}
            if not decode:     # the prefill tables hold BF16 and FP8 attention math
                keys["attn_dtype"] = "fp8" if g.aprec in ("fp8", "fp4") else "bf16"
            near = {"num_heads": heads, "num_kv_heads": kvh}
            ops.append(Op(name, "compute", "attn1", count, flop=flop, hbm_bytes=nbytes,
                          precision=g.aprec, rate="attention", family=fam, keys=keys,
                          nearest=near, covers_kernels=kv_write_covered(g, fam, keys, near),
                          coords=coords, pure_fn=pure, pure_key=key, roof_mode=mode))
        ops.append(gemm(g, "o_proj", "attn1", n_layers, T, m.hidden_size,
                        m.n_q_heads * m.head_dim_v / tp, g.wprec))
        return ops


KIND = GQA()
