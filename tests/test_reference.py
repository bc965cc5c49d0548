"""Ideal mode against the hand roofline of shared/reference/peer_roofline_cases.csv.

Reference: rows of peer "hand-roofline (reference)" (ideal TP, no communication, no
efficiency terms, MoE weights = expected distinct experts). Values copied here so CI does
not need the shared folder. Tolerance 3% (the issue's bound): our prefill computes the
lm_head for the last prompt position only, where the hand roofline computes it for every
prompt token (about 2% of prefill FLOPs for Llama-2-7B).

Llama-3-70B has the architecture of Llama-3.1-70B (RoPE scaling and context differ; FLOPs
and bytes do not).
"""

import pytest

from inference_factory.engine.layer_mix import architecture
import inference_factory as inf

# (model, hardware, tp, context, precision, phase, batch, latency_ms)
HAND = [
    ("Llama-2-7B", "A100-80GB-SXM", 1, 1024, "fp16", "decode", 1, 6.744),
    ("Llama-2-7B", "A100-80GB-SXM", 1, 1024, "fp16", "decode", 8, 8.5871),
    ("Llama-2-7B", "A100-80GB-SXM", 1, 1024, "fp16", "decode", 32, 14.9063),
    ("Llama-2-7B", "A100-80GB-SXM", 1, 1024, "fp16", "decode", 128, 40.1832),
    ("Llama-2-7B", "A100-80GB-SXM", 1, 1024, "fp16", "prefill", 1, 44.2506),
    ("Llama-3.1-70B", "H100-SXM", 8, 2048, "bf16", "decode", 1, 5.2117),
    ("Llama-3.1-70B", "H100-SXM", 8, 2048, "bf16", "decode", 64, 6.7893),
    ("Llama-3.1-70B", "H100-SXM", 8, 2048, "bf16", "decode", 256, 11.5971),
    ("Llama-3.1-70B", "H100-SXM", 8, 2048, "bf16", "prefill", 1, 36.6755),
    ("Mixtral-8x7B", "H100-SXM", 4, 4096, "bf16", "decode", 1, 1.9427),
    ("Mixtral-8x7B", "H100-SXM", 4, 4096, "bf16", "decode", 64, 9.515),
    ("Mixtral-8x7B", "H100-SXM", 4, 4096, "bf16", "decode", 256, 17.2074),
]


def _ideal(model, hw, tp, ctx, prec, batch):
    return inf.evaluate(model, hw, tp=tp, batch_size=batch, kv_len=ctx, prompt_len=ctx,
                        weight_precision=prec, kv_precision=prec, attention_precision=prec,
                        ideal=True)


@pytest.mark.parametrize("model,hw,tp,ctx,prec,phase,batch,ref_ms", HAND,
                         ids=[f"{c[0]}-{c[5]}-b{c[6]}" for c in HAND])
def test_ideal_matches_hand_roofline(model, hw, tp, ctx, prec, phase, batch, ref_ms):
    ds = _ideal(model, hw, tp, ctx, prec, batch)
    got_ms = float(ds[f"{phase}_step_s"]) * 1e3
    assert got_ms == pytest.approx(ref_ms, rel=0.03)


@pytest.mark.parametrize("model,hw,tp,ctx,prec,batch,binding", [
    ("Llama-2-7B", "A100-80GB-SXM", 1, 1024, "fp16", 128, "memory"),
    ("Mixtral-8x7B", "H100-SXM", 4, 4096, "bf16", 256, "memory"),
])
def test_hand_cases_bound_as_reported(model, hw, tp, ctx, prec, batch, binding):
    ds = _ideal(model, hw, tp, ctx, prec, batch)
    assert str(ds.decode_binding_resource.values) == binding
    assert str(ds.prefill_binding_resource.values) == "compute"


def test_gqa_kv_uses_kv_heads_not_query_heads():
    """Defect of some peers: GQA KV sized with query heads. Llama-3.1-70B has 8 KV heads of
    64 query heads: KV per token = 2 x 80 x 8 x 128 x 2 B = 327,680 B (models.csv)."""
    ds = _ideal("Llama-3.1-70B", "H100-SXM", 8, 2048, "bf16", [1, 2])
    # one more sequence adds its KV read once: 2048 tokens x 327,680 B / 8 GPUs
    extra = float(ds.decode_hbm_bytes_per_gpu.sel(batch_size=2)
                  - ds.decode_hbm_bytes_per_gpu.sel(batch_size=1))
    kv_read = 2048 * 327_680 / 8
    kv_write = 327_680 / 8
    embedding_row = 8192 * 2 / 8     # the new token's row of the vocab-parallel embedding
    assert extra == pytest.approx(kv_read + kv_write + embedding_row, rel=1e-9)


def test_mla_kv_is_latent_not_k_and_v():
    """MLA KV = (512 + 64) x 61 x 2 B = 70,272 B/token (DeepSeek ISCA'25 Table 1), stored once,
    not as K and V. The latent is shared by all heads, so tensor parallelism replicates it: a
    GPU of a TP group holds the whole sequence's latent (why DeepSeek serves MLA with DP)."""
    for tp in (1, 4):
        ds = inf.evaluate("DeepSeek-V3", "H800-SXM", tp=tp, dp=8 // tp, ep=8, batch_size=3,
                          kv_len=4096, ideal=True)
        assert float(ds.kv_bytes_per_gpu) == pytest.approx(3 * 4096 * 70_272, rel=1e-12)
    ds = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=8, ep=8, batch_size=3, kv_len=4096,
                      kv_precision="fp8", ideal=True)
    assert float(ds.kv_bytes_per_gpu) == pytest.approx(3 * 4096 * 40_016, rel=1e-12)


def test_embedding_table_not_read_every_step():
    """Defect of some peers: the whole input embedding table read each decode step. Only the
    rows of the step's tokens are read: Llama-2-7B decode bytes at batch 1 = all weights
    except the 32000 x 4096 embedding, plus 1024 tokens of KV (hand roofline)."""
    ds = _ideal("Llama-2-7B", "A100-80GB-SXM", 1, 1024, "fp16", 1)
    m = inf.load_model("Llama-2-7B")
    expect = (architecture(m).total_params - m.n_embedding_params) * 2 + 1024 * 524_288 + 524_288 + 4096 * 2
    assert float(ds.decode_hbm_bytes_per_gpu) == pytest.approx(expect, rel=1e-6)


def test_moe_weights_follow_expected_distinct_experts():
    """Defect of some peers: MoE weights read for top-k experts only, or for all experts,
    whatever the batch. Mixtral (8 experts, top-2) at batch 1 reads 2 experts per layer, at
    batch 256 effectively all 8: E (1 - (1 - k/E)^T)."""
    m = inf.load_model("Mixtral-8x7B")
    ds = inf.evaluate(m, "H100-SXM", tp=4, batch_size=[1, 2, 256], kv_len=1, ideal=True,
                      expert_skew=0.0)      # uniform routing: the closed form below
    per_expert_gpu = m.n_expert_params * 2 / 4 * m.n_moe_layers
    b = ds.decode_hbm_bytes_per_gpu
    kv = lambda n: n * 2 * 131_072 / 4   # noqa: E731  KV read + write per sequence per GPU
    d12 = float(b.sel(batch_size=2) - b.sel(batch_size=1)) - (kv(2) - kv(1))
    # distinct experts 2 -> 8 (1 - 0.75^2) = 3.5: 1.5 more experts per layer
    assert d12 == pytest.approx(1.5 * per_expert_gpu, rel=1e-3)
    dense = float(b.sel(batch_size=256)) - kv(256)
    assert dense == pytest.approx(float(b.sel(batch_size=1)) - kv(1) + 6 * per_expert_gpu,
                                  rel=1e-3)
