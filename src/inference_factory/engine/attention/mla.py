"""Multi-head latent attention (MLA; DeepSeek-V2/V3, Kimi-K2): keys and values compressed
into one latent of ``kv_lora_rank`` plus a decoupled RoPE key, cached once per token
(``kernels.params.mla_kv_bytes_per_token_per_layer``: 70,272 B/token at BF16 over
DeepSeek-V3's 61 layers).

Decode runs the weight-absorbed form: W_UK and W_UV become batched matmuls around an
attention over the latent (``mla_bmm_pre`` / ``mla_bmm_post`` and ``mla_decode`` tables,
FlashMLA); prefill expands the latent of every position through W_UKV (``kv_b``) and runs
ordinary attention (``mla_prefill``). The latent is shared by all heads, so TP replicates
the cache and the down-projections (hence DP attention for MLA models). Source: DeepSeek-V3
technical report (arXiv:2412.19437) sec. 2.1.1; FlashMLA.
"""

from __future__ import annotations

from ... import units
from ...errors import SpecError
from ...kernels import attention as katt
from ...kernels import memory as kmem
from ...kernels import ops as kops
from ...kernels import params as kparams
from .. import measured as M
from ..op import (Op, attention_mode, bmm_roofline_fn, gemm, kv_read_bytes, kv_write_covered,
                  prefill_roofline_fn, roofline_key)
from ..precision import compute_precision
from .base import AttentionKind, Memory


class MLA(AttentionKind):
    name = "mla"
    other_kernels_key = "mla"
    param_keys = {"output_gate": "a sigmoid gate h -> heads x v_head_dim on the attention "
                                 "output (mla_use_output_gate)"}

    def check(self, m, at):
        # a key the file leaves out reads as 0 (ModelSpec), refused here by value
        if m.kv_lora_rank <= 0:
            raise SpecError(f"{m.path}: attention.kv_lora_rank = {m.kv_lora_rank} must be > 0 "
                            "for kind 'mla' (required)")
        for key in ("qk_nope_head_dim", "qk_rope_head_dim"):
            if getattr(m, key) <= 0:
                raise SpecError(f"{m.path}: attention.{key} = {getattr(m, key)} must be an "
                                "integer >= 1 for kind 'mla' (query/key head = non-rotary + "
                                "rotary part)")
        if m.qk_nope_head_dim + m.qk_rope_head_dim != m.head_dim_qk:
            raise SpecError(f"{m.path}: attention.qk_nope_head_dim + qk_rope_head_dim = "
                            f"{m.qk_nope_head_dim} + {m.qk_rope_head_dim} must equal "
                            f"head_dim_qk = {m.head_dim_qk} for kind 'mla'")

    def params_per_layer(self, m, at):
        return kparams.mla_attention_params(
            hidden_size=m.hidden_size, n_q_heads=m.n_q_heads, q_lora_rank=m.q_lora_rank,
            kv_lora_rank=m.kv_lora_rank, qk_nope_head_dim=m.qk_nope_head_dim,
            qk_rope_head_dim=m.qk_rope_head_dim, v_head_dim=m.head_dim_v,
            output_gate=bool(at.get("output_gate", False)))

    def memory(self, m, kv_precision, at):
        if at.window:
            raise SpecError(f"{m.path}: a sliding window ({at.window} tokens) on kind 'mla' is "
                            "not modelled; allowed window = 0")
        b = units.BYTES_PER_ELEMENT[kv_precision]
        return Memory(bytes_per_token=kparams.mla_kv_bytes_per_token_per_layer(
            kv_lora_rank=m.kv_lora_rank, qk_rope_head_dim=m.qk_rope_head_dim,
            latent_bytes_per_elem=b, rope_bytes_per_elem=max(b, 2.0),
            # FlashMLA FP8 layout: four FP32 scales per 512-wide latent; MXFP4's 4.25 bits
            # per element already include its block scales
            scale_bytes_per_token=(4.0 * m.kv_lora_rank / 128.0 if kv_precision == "fp8"
                                   else 0.0)))

    def replicated_weight_bytes(self, m, at, *, n_layers, tp, bytes_per_param):
        if tp <= 1:
            return 0.0
        return kmem.mla_replicated_latent_bytes(
            n_layers=n_layers, hidden_size=m.hidden_size, q_lora_rank=m.q_lora_rank,
            kv_lora_rank=m.kv_lora_rank, qk_rope_head_dim=m.qk_rope_head_dim,
            bytes_per_param=bytes_per_param, tp=tp)

    def describe(self, m, at):
        return [("q LoRA rank", str(m.q_lora_rank)), ("KV LoRA rank", str(m.kv_lora_rank)),
                ("qk nope / rope head dim", f"{m.qk_nope_head_dim} / {m.qk_rope_head_dim}")]

    def ops(self, g, windows, p, at):
        m, hw, tp = g.m, g.hw, g.tp
        seqs, new_tokens, cached_tokens, kv_len, T = (p.seqs, p.new_tokens, p.cached_tokens,
                                                      p.kv_len, p.tokens)
        n_layers = sum(n for _, n in windows)
        h, wp = m.hidden_size, g.wprec
        heads = m.n_q_heads / tp
        kv_dtype = "fp8" if g.kvprec in ("fp8", "fp4") else "bf16"
        kvl = self.memory(m, g.kvprec, at).bytes_per_token
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        # the latent down-projections are replicated on every GPU of a TP group (SGLang,
        # vLLM); without a query latent the query projection is split by heads
        fused_n = (m.q_lora_rank or heads * qk) + m.kv_lora_rank + m.qk_rope_head_dim
        ops = [gemm(g, "q_a_kv_a", "attn0", n_layers, T, fused_n, h, wp)]
        if m.q_lora_rank:
            ops.append(gemm(g, "q_b", "attn0", n_layers, T, heads * qk, m.q_lora_rank, wp))
        pos = katt.causal_attended_positions(new_tokens=new_tokens, cached_tokens=cached_tokens)
        if p.phase == "decode":
            ops += absorbed_bmm_ops(g, n_layers, T, heads)
            flop = seqs * katt.mla_absorbed_core_flop(attended_positions=pos, n_q_heads=heads,
                                                      kv_lora_rank=m.kv_lora_rank,
                                                      qk_rope_head_dim=m.qk_rope_head_dim)
            ops.append(Op("attention", "compute", "attn1", n_layers, flop=flop,
                          hbm_bytes=(kv_read_bytes(seqs, kv_len, kvl, None)
                                     + katt.kv_write_bytes(new_tokens=T, kv_bytes_per_token=kvl)),
                          precision=g.aprec, rate="attention", family="mla_decode",
                          keys={"kv_dtype": kv_dtype}, nearest={"num_heads": heads},
                          covers_kernels=kv_write_covered(g, "mla_decode", {"kv_dtype": kv_dtype},
                                                          {"num_heads": heads}),
                          coords=(seqs, kv_len),
                          pure_fn=lambda b_, L_: M.mla_decode_roofline_s(
                              hw, kv_dtype, heads, b_, L_, new_tokens, dims=M.mla_dims(m)),
                          pure_key=roofline_key(hw, "mla_decode", kv_dtype, heads, M.mla_dims(m),
                                                per_point=(new_tokens,)),
                          roof_mode=attention_mode(new_tokens)))
        else:
            prefix = seqs * cached_tokens
            ops.append(gemm(g, "kv_b", "attn0", n_layers, T + prefix,
                            heads * (m.qk_nope_head_dim + m.head_dim_v), m.kv_lora_rank, wp))
            flop = seqs * katt.attention_core_flop(attended_positions=pos, n_q_heads=heads,
                                                   head_dim_qk=m.head_dim_qk,
                                                   head_dim_v=m.head_dim_v)
            write = katt.kv_write_bytes(new_tokens=T, kv_bytes_per_token=kvl)
            ops.append(Op("attention", "compute", "attn1", n_layers, flop=flop, hbm_bytes=write,
                          precision=g.aprec, rate="attention", family="mla_prefill",
                          keys={"kv_dtype": kv_dtype}, nearest={"num_heads": heads},
                          covers_kernels=kv_write_covered(g, "mla_prefill", {"kv_dtype": kv_dtype},
                                                          {"num_heads": heads}),
                          coords=(seqs, new_tokens + cached_tokens),
                          pure_fn=prefill_roofline_fn(M.mla_prefill_roofline_s,
                                                      (hw, kv_dtype, heads), new_tokens,
                                                      cached_tokens, dims=M.mla_dims(m)),
                          pure_key=roofline_key(hw, "mla_prefill", kv_dtype, heads, M.mla_dims(m),
                                                per_point=(new_tokens, cached_tokens)),
                          roof_mode=attention_mode(new_tokens / (new_tokens + cached_tokens))))
        if at.get("output_gate", False):     # its columns split by heads, like o_proj's rows
            ops.append(gemm(g, "gate", "attn1", n_layers, T, heads * m.head_dim_v, h, wp))
        ops.append(gemm(g, "o_proj", "attn1", n_layers, T, h, heads * m.head_dim_v, wp))
        return ops


def absorbed_bmm_ops(g, n_layers, T, heads) -> list[Op]:
    """The weight-absorbed form's batched GEMMs around the latent attention: W_UK (query
    nope part -> latent) before it, W_UV (latent -> value head) after it, per head over
    ``T`` tokens (``mla_bmm_pre`` / ``mla_bmm_post`` tables).

    An FP8 checkpoint's BMMs run FP8 where the device has FP8 tensor cores; elsewhere
    (A100) the weights are dequantised at load and the BMMs run at 16 bits
    (:func:`~inference_factory.engine.precision.compute_precision`, the weight-only rule every
    GEMM follows), reading 16-bit weights: TensorRT-LLM's absorption BMM wrapper
    dequantises at load where it runs no FP8 BMM (aiconfigurator
    collector/trtllm/collect_mla_bmm.py, lines 5-15) and AIConfigurator measures only BF16
    BMM rows on A100 (hardware/measured/A100-80GB-SXM/mla_bmm.csv)."""
    m, hw = g.m, g.hw
    bdt = (compute_precision(hw, "fp8") or "bf16") if g.wprec == "fp8" else "bf16"
    wb = units.BYTES_PER_ELEMENT[bdt]
    ops = []
    for name, k_dim, n_dim, fam, stage in (
            ("w_uk", m.qk_nope_head_dim, m.kv_lora_rank, "mla_bmm_pre", "attn0"),
            ("w_uv", m.kv_lora_rank, m.head_dim_v, "mla_bmm_post", "attn1")):
        ops.append(Op(name, "compute", stage, n_layers,
                      flop=heads * kops.gemm_flop(m=T, n=n_dim, k=k_dim),
                      hbm_bytes=heads * kops.gemm_bytes(m=0.0, n=n_dim, k=k_dim, input_bytes=0.0,
                                                        weight_bytes=wb, output_bytes=0.0),
                      precision=bdt, m_tokens=T, family=fam, keys={"dtype": bdt},
                      fixed={"num_heads": heads}, coords=(T,),
                      pure_fn=bmm_roofline_fn(hw, bdt, heads, k_dim, n_dim),
                      pure_key=roofline_key(hw, fam, bdt, heads, k_dim, n_dim)))
    return ops


KIND = MLA()
