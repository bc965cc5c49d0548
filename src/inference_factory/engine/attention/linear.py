"""Linear attention with a gated delta rule: Gated DeltaNet (kind ``gdn``; Qwen3-Next,
Qwen3.5) and Kimi Delta Attention (kind ``kda``; Kimi Linear, Kimi-K3).

A layer keeps no KV per token: each sequence holds a recurrent state of ``d_k x d_v`` per
value head at ``state_precision`` (FP32 where the config says ``mamba_ssm_dtype: float32``)
and the last ``conv_kernel - 1`` inputs of its short causal convolution (BF16, the model's
dtype), whatever its context (``kernels.linear_attention``). Prefill runs the chunked
kernel (chunks of 64 tokens, fla); decode one recurrent step per token, reading and writing
the state: a cost constant in the context length. Tensor parallelism splits the heads (and
the state with them); ``tp`` must divide the key and value heads (aiconfigurator
``sdk/models/qwen35.py``; vLLM / SGLang shard them the same way).

Projections (config fields ``linear_num_key_heads`` H_k, ``linear_num_value_heads`` H_v,
``linear_key_head_dim`` d_k, ``linear_value_head_dim`` d_v; hidden h):

- ``gdn`` (HF ``Qwen3NextGatedDeltaNet``, aiconfigurator ``qwen35.py``: ``in_proj_qkvz`` and
  ``in_proj_ba``): q, k (H_k d_k each), v and the output gate z (H_v d_v each), beta and
  alpha (one each per value head); ``out_proj`` H_v d_v -> h; per-head ``A_log``, ``dt_bias``
  and a gated RMSNorm of d_v.
- ``kda`` (fla ``fla/layers/kda.py``; aiconfigurator ``sdk/models/kimi_k3.py``): q, k, v
  (H d each), the forget gate per key channel through a rank-d_k bottleneck (``f_proj``:
  h -> d_k -> H d_k) and beta (H), the output gate full rank (h -> H d_v, config
  ``use_full_rank_gate``) or through a rank-d_v bottleneck with bias (fla default);
  ``A_log`` (H), ``dt_bias`` (H d_k), the same norm; three short convolutions (q, k, v).
  The finer gate costs projections and gate bytes (H d_k FP32 per token instead of H), not
  recurrence FLOPs or state (Kimi Linear report, arXiv:2510.26692, sec. 3).
Measured tables: ``gdn_prefill``/``gdn_decode``, ``kda_prefill``/``kda_decode``
(:mod:`..table_families_linear`).
"""

from __future__ import annotations

from ... import units
from ...kernels import linear_attention as klin
from ..op import Op, attention_mode, gemm, roofline_key
from ..table_families_linear import linear_roofline_s, shapes
from .base import AttentionKind, Memory, param

_PARAMS = {
    "linear_num_key_heads": "key (and query) heads of the linear layers",
    "linear_num_value_heads": "value heads (one state matrix each)",
    "linear_key_head_dim": "key head dimension d_k",
    "linear_value_head_dim": "value head dimension d_v",
    "conv_kernel": "short causal convolution width (linear_conv_kernel_dim)",
    "state_precision": "precision of the recurrent state (mamba_ssm_dtype)",
}
#: the conv state is kept in the model's activation dtype (aiconfigurator qwen35.py: x 2 B)
CONV_STATE_PRECISION = "bf16"


class LinearAttention(AttentionKind):
    other_kernels_key = "linear"

    def __init__(self, variant: str):
        self.name = variant
        self.param_keys = dict(_PARAMS, **({"full_rank_gate": "KDA output gate is full rank "
                                            "(use_full_rank_gate)"} if variant == "kda" else {}))

    # -- the layer's dimensions ------------------------------------------------------------------
    def dims(self, m, at):
        nk = param(m, at, "linear_num_key_heads", minimum=1)
        nv = param(m, at, "linear_num_value_heads", minimum=1)
        return (nk, nv, param(m, at, "linear_key_head_dim", minimum=1),
                param(m, at, "linear_value_head_dim", minimum=1),
                param(m, at, "conv_kernel", minimum=1))

    def check(self, m, at):
        nk, nv, *_ = self.dims(m, at)
        if nv % nk:
            raise self._error(m, "linear_num_value_heads", nv,
                              f"a multiple of linear_num_key_heads = {nk}")
        prec = param(m, at, "state_precision")
        if prec not in units.BYTES_PER_ELEMENT:
            raise self._error(m, "state_precision", prec, f"one of {list(units.PRECISIONS)}")

    def _error(self, m, key, value, allowed):
        from ...errors import SpecError
        return SpecError(f"{m.path}: attention.params.{key} = {value!r} must be {allowed} for "
                         f"kind {self.name!r}")

    def params_per_layer(self, m, at):
        nk, nv, dk, dv, K = self.dims(m, at)
        h = m.hidden_size
        channels = 2 * nk * dk + nv * dv
        if self.name == "gdn":
            proj = h * (2 * nk * dk + 2 * nv * dv + 2 * nv)          # in_proj_qkvz, in_proj_ba
            extra = 2 * nv                                           # A_log, dt_bias
        else:
            gate_o = (h * nv * dv if at.get("full_rank_gate", False)
                      else h * dv + dv * nv * dv + nv * dv)
            proj = h * channels + (h * dk + dk * nk * dk) + h * nv + gate_o
            extra = nv + nk * dk                                     # A_log, dt_bias
        return proj + channels * K + extra + dv + nv * dv * h       # conv, norm, out_proj

    def memory(self, m, kv_precision, at):
        nk, nv, dk, dv, K = self.dims(m, at)
        state = klin.recurrent_state_bytes(
            n_heads=nv, head_dim_k=dk, head_dim_v=dv,
            state_bytes_per_elem=units.BYTES_PER_ELEMENT[param(m, at, "state_precision")])
        conv = klin.conv_state_bytes(conv_channels=2 * nk * dk + nv * dv, conv_kernel=K,
                                     bytes_per_elem=units.BYTES_PER_ELEMENT[CONV_STATE_PRECISION])
        return Memory(bytes_per_token=0.0, bytes_per_sequence=state + conv)

    def kv_split(self, m, tp, at):
        return float(tp)

    def tp_error(self, m, tp, at):
        nk, nv, *_ = self.dims(m, at)
        if nk % tp or nv % tp:
            return (f"tp = {tp} must divide the {nk} key and {nv} value heads of the "
                    f"{self.name} layers of {m.name!r}")
        return None

    def describe(self, m, at):
        nk, nv, dk, dv, K = self.dims(m, at)
        mem = self.memory(m, "bf16", at)
        return [(f"{self.name} heads (k / v) x dim", f"{nk} / {nv} x {dk} / {dv}"),
                (f"{self.name} conv kernel, state precision",
                 f"{K}, {param(m, at, 'state_precision')}"),
                (f"{self.name} state bytes/sequence/layer", f"{mem.bytes_per_sequence:,.0f}")]

    # -- operations ------------------------------------------------------------------------------
    def ops(self, g, windows, p, at):
        m, hw, tp = g.m, g.hw, g.tp
        n = sum(c for _, c in windows)
        nk, nv, dk, dv, K = self.dims(m, at)
        h, T = m.hidden_size, p.tokens
        full_gate = at.get("full_rank_gate", False)
        if self.name == "gdn":
            ops = [gemm(g, "in_proj", "attn0", n, T, (2 * nk * dk + 2 * nv * dv + 2 * nv) / tp,
                        h, g.wprec)]
        else:
            # q, k, v (and a full-rank output gate) split by heads; the gates' first
            # low-rank factors and beta are small and replicated (aiconfigurator kimi_k3.py)
            ops = [gemm(g, "in_proj", "attn0", n, T,
                        (2 * nk * dk + nv * dv + (nv * dv if full_gate else 0)) / tp, h, g.wprec),
                   gemm(g, "gate_a", "attn0", n, T, dk + nv + (0 if full_gate else dv), h,
                        g.wprec),
                   gemm(g, "gate_b", "attn0", n, T, (nk * dk + (0 if full_gate else nv * dv)) / tp,
                        dk, g.wprec)]
        sb = units.BYTES_PER_ELEMENT[param(m, at, "state_precision")]
        shard = (self.name, nk / tp, nv / tp, dk, dv, K)
        state, conv, io, chunk_h = shapes(*shard, state_bytes_per_elem=sb)
        channels = (2 * nk * dk + nv * dv) / tp
        flop = klin.conv_flop(tokens=T, conv_channels=channels, conv_kernel=K)
        decode = p.phase == "decode"
        if decode:
            flop = flop + klin.decode_flop(tokens=T, n_heads=nv / tp, head_dim_k=dk, head_dim_v=dv)
            nbytes = klin.decode_bytes(sequences=p.seqs, new_tokens=p.new_tokens, state_bytes=state,
                                       conv_bytes=conv, io_bytes_per_token=io)
            fam, coords = f"{self.name}_decode", (p.seqs,)
            pure = (lambda b_, nt=p.new_tokens: linear_roofline_s(
                hw, shard[0], "decode", *shard[1:], b_, nt, state_bytes_per_elem=sb))
            key = roofline_key(hw, fam, shard, sb, per_point=(p.new_tokens,))
            mode = attention_mode(p.new_tokens)
        else:
            flop = flop + klin.chunk_prefill_flop(tokens=T, n_heads=nv / tp, head_dim_k=dk,
                                                  head_dim_v=dv)
            nbytes = klin.chunk_prefill_bytes(sequences=p.seqs, new_tokens=p.new_tokens,
                                              state_bytes=state, conv_bytes=conv,
                                              io_bytes_per_token=io, chunk_state_bytes=chunk_h)
            fam, coords = f"{self.name}_prefill", (p.seqs, p.new_tokens)
            pure = (lambda b_, s_: linear_roofline_s(hw, shard[0], "prefill", *shard[1:], b_, s_,
                                                     state_bytes_per_elem=sb))
            key, mode = roofline_key(hw, fam, shard, sb), "separable"
        ops.append(Op("attention", "compute", "attn1", n, flop=flop, hbm_bytes=nbytes,
                      precision="bf16", rate="attention", family=fam,
                      keys={"head_k_dim": dk, "head_v_dim": dv, "d_conv": K},
                      nearest={"num_k_heads": nk / tp, "num_v_heads": nv / tp},
                      coords=coords, pure_fn=pure, pure_key=key, roof_mode=mode))
        ops.append(gemm(g, "o_proj", "attn1", n, T, h, nv * dv / tp, g.wprec))
        return ops


GDN = LinearAttention("gdn")
KDA = LinearAttention("kda")
