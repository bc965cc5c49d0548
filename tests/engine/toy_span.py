"""A toy attention kind, written as a user would add one: every query attends to a fixed
span of ``span_tokens`` tokens of its sequence (a fixed ring; no cost grows with context).

It is one module (this one) and one registry line (``attention.register(KIND)`` in the test
that uses it); it reuses the shared op builders and the GQA projections' shapes. Costed on
the roofline only (no measured table family), as a new kind is until its tables exist.
"""

from __future__ import annotations

from inference_factory import units
from inference_factory.engine.attention import AttentionKind, Memory
from inference_factory.engine.attention.base import param
from inference_factory.engine.op import Op, gemm
from inference_factory.kernels import attention as katt
from inference_factory.kernels import params as kparams


class FixedSpan(AttentionKind):
    name = "fixed_span"
    other_kernels_key = "gqa"
    param_keys = {"span_tokens": "tokens every query attends to"}

    def check(self, m, at):
        param(m, at, "span_tokens", minimum=1)

    def params_per_layer(self, m, at):
        return kparams.gqa_attention_params(
            hidden_size=m.hidden_size, n_q_heads=m.n_q_heads, n_kv_heads=m.n_kv_heads,
            head_dim_qk=m.head_dim_qk, head_dim_v=m.head_dim_v, bias=m.attention_bias)

    def token_bytes(self, m, kv_precision):
        return kparams.gqa_kv_bytes_per_token_per_layer(
            n_kv_heads=m.n_kv_heads, head_dim_k=m.head_dim_qk, head_dim_v=m.head_dim_v,
            kv_bytes_per_elem=units.BYTES_PER_ELEMENT[kv_precision])

    def memory(self, m, kv_precision, at):
        # the ring of span_tokens tokens is held whatever the context: per sequence
        span = param(m, at, "span_tokens")
        return Memory(bytes_per_token=0.0, bytes_per_sequence=span * self.token_bytes(
            m, kv_precision))

    def kv_split(self, m, tp, at):
        return float(min(tp, m.n_kv_heads))

    def ops(self, g, windows, p, at):
        m, tp = g.m, g.tp
        n = sum(c for _, c in windows)
        span = param(m, at, "span_tokens")
        heads = m.n_q_heads / tp
        kvh = max(m.n_kv_heads / tp, 1.0)
        ring = p.seqs * span * self.token_bytes(m, g.kvprec) / self.kv_split(m, tp, at)
        return [
            gemm(g, "qkv", "attn0", n, p.tokens,
                 heads * m.head_dim_qk + kvh * (m.head_dim_qk + m.head_dim_v), m.hidden_size,
                 g.wprec),
            Op("attention", "compute", "attn1", n, rate="attention", precision=g.aprec,
               flop=p.seqs * katt.attention_core_flop(
                   attended_positions=p.new_tokens * span, n_q_heads=heads,
                   head_dim_qk=m.head_dim_qk, head_dim_v=m.head_dim_v),
               hbm_bytes=ring),
            gemm(g, "o_proj", "attn1", n, p.tokens, m.hidden_size,
                 m.n_q_heads * m.head_dim_v / tp, g.wprec),
        ]


KIND = FixedSpan()
