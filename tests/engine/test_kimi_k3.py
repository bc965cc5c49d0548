"""Kimi-K3 (models/Kimi-K3.toml) and the latent MoE ([moe] latent_hidden_size).

Reference values are hand computations from the public config (aiconfigurator
model_configs/moonshotai--Kimi-K3_config.json, text_config, commit 095f58a5): hidden 7168,
93 layers = 69 KDA (96 heads x 128, conv 4, full-rank output gate) + 24 MLA (96 heads,
q_lora 1536, kv_lora 512, nope 128 / rope 64, v 128, output gate); layer 1 dense SwiGLU
33,792 wide, 92 latent-MoE layers: router 7168 x 896, down 7168 -> 3584 + latent norm, 896
routed experts top-16 at 3584 x 3072, up 3584 -> 7168, 2 shared experts at 7168 x 3072;
vocab 163,840, untied head; MXFP4 routed experts (4.25 bits), BF16 elsewhere. The latent
MoE's op shapes follow aiconfigurator sdk/models/kimi_k3.py ``_ffn_ops``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine.cost import cost_op
from inference_factory.engine.geometry import main_layers, validate_struct
from inference_factory.engine.layer_mix import architecture
from inference_factory.engine.ops import layer_ops
from inference_factory.specs.realism import Realism, load_realism

H, V, R, F, E, K = 7168, 163840, 3584, 3072, 896, 16
MLA = (H * 1536 + 1536 + 1536 * 96 * 192            # q down, norm, up
       + H * (512 + 64) + 512 + 512 * 96 * (128 + 128)   # kv down + rope key, norm, kv up
       + 96 * 128 * H + H * 96 * 128)                # o_proj, output gate
KDA = (4 * H * 96 * 128                             # q, k, v and the full-rank output gate
       + H * 128 + 128 * 96 * 128 + H * 96         # forget gate h -> 128 -> 96 x 128, beta
       + 3 * 96 * 128 * 4 + 96 + 96 * 128 + 128    # conv q/k/v, A_log, dt_bias, norm
       + 96 * 128 * H)                             # o_proj
ROUTED = 3 * R * F                                  # one routed expert, in the latent
MOE_OTHER = H * E + 2 * 3 * H * F + (H * R + R + R * H)   # router, 2 shared, latent proj.
DENSE_PATH = 24 * MLA + 69 * KDA + 93 * 2 * H + 3 * H * 33792 + 92 * MOE_OTHER + H
STATE = 96 * 128 * 128 * 4 + 3 * (3 * 96 * 128) * 2   # FP32 state + BF16 conv (3 x 3 x 12,288)


def test_params_kv_and_state_against_the_config():
    arch = architecture(inf.load_model("Kimi-K3"))
    total = DENSE_PATH + 92 * E * ROUTED + 2 * V * H
    active = DENSE_PATH + 92 * K * ROUTED + 2 * V * H
    assert arch.total_params == total == 2_779_481_712_736
    assert arch.active_params() == active == 105_361_254_496
    # the published 2.8T (shared/reference/architectures_2026.md), given to 2 digits
    assert total == pytest.approx(2.8e12, abs=0.05e12)
    # KV only on the 24 MLA layers: 512 latent + 64 rope, x 2 B; FP8: vLLM's fp8_ds_mla
    # layout of 656 B per token and layer (architectures_2026.md)
    assert arch.kv_bytes_per_token("bf16") == 24 * 576 * 2 == 27_648
    assert arch.kv_bytes_per_token("fp8") == 24 * 656
    # 69 KDA layers hold 6.0 MiB of state + 216 KiB of conv state each
    assert arch.state_bytes_per_sequence("bf16") == 69 * STATE == 449_372_160
    # one GPU of TP8: the heads (and state) split 8 ways, the MLA latent whole; one state slot
    # is aiconfigurator's "~54 MB/rank" (kimi_k3.py KDA_STATE_SLOTS_PER_REQUEST note: MiB)
    assert 69 * STATE / 8 / 2**20 == pytest.approx(54, abs=0.5)
    L = 131072.0
    assert arch.sequence_bytes("bf16", L, 8) == pytest.approx(L * 27_648 + 69 * STATE / 8,
                                                              rel=1e-12)


def _geom(model="Kimi-K3", hw="B200", rl=None, **kw):
    s = dict(tp=1, dp=1, ep=1, redundant_experts=0, expert_skew=0.0, context_cv=0.0,
             weight_precision=None, moe_precision=None, kv_precision=None,
             attention_precision=None, dispatch_precision=None, combine_precision=None,
             overlap="none", cache_tier="dram")
    s.update(kw)
    m = model if not isinstance(model, str) else inf.load_model(model)
    return validate_struct(m, inf.load_hardware(hw), s, rl or load_realism())


def _decode_ops(g, tokens=1.0):
    return layer_ops(g, main_layers(g.m), seqs=tokens, new_tokens=1.0, cached_tokens=1023.0,
                     kv_len=np.asarray(1024.0), logit_tokens_per_seq=1.0, phase="decode")


MOE_OPS = ("router", "latent_down", "latent_up", "shared_gate_up", "shared_down", "moe")


def test_latent_moe_flops_and_bytes_per_token_against_hand_computation():
    g = _geom()
    ops = {op.name: op for op in _decode_ops(g)}
    assert all(ops[n].count == 92 for n in MOE_OPS)
    flop = sum(float(ops[n].flop) for n in MOE_OPS)
    nbytes = sum(float(ops[n].hbm_bytes) for n in MOE_OPS)
    # one token: router, down and up (7168 x 3584 each), 2 shared experts at 7168, and 16
    # routed experts at 3584 x 3072 (weights: BF16 but the MXFP4 experts, 4.25 bits)
    assert flop == 2 * (H * E + 2 * H * R + 3 * H * 2 * F + K * ROUTED)
    assert nbytes == pytest.approx(2 * (H * E + 2 * H * R + 3 * H * 2 * F)
                                   + K * ROUTED * 4.25 / 8, rel=1e-12)
    # the experts run in the latent: half the FLOPs of the same experts at 7168
    assert float(ops["moe"].flop) == 6 * R * F * K


def test_latent_projections_are_whole_on_every_tp_rank():
    ops1 = {op.name: op for op in _decode_ops(_geom())}
    ops8 = {op.name: op for op in _decode_ops(_geom(tp=8, ep=8))}
    for n in ("latent_down", "latent_up"):
        assert float(ops8[n].flop) == float(ops1[n].flop) == 2 * H * R
    assert float(ops8["shared_down"].flop) == float(ops1["shared_down"].flop) / 8
    # and their weights are counted whole on each GPU: 92 x (2 x 7168 x 3584 + 3584) x 2 B
    # beyond the 1/8 share
    from inference_factory.engine.geometry import weight_bytes_per_gpu
    m = inf.load_model("Kimi-K3")
    plain = dataclasses.replace(m, latent_hidden_size=0, expert_intermediate_size=F)
    g8, p8 = _geom(tp=8, ep=8), _geom(plain, tp=8, ep=8)
    extra = 92 * (2 * H * R + R) * 2
    routed_diff = 92 * E / 8 * (3 * R * F - 3 * H * F) * 4.25 / 8
    assert weight_bytes_per_gpu(g8, False) - weight_bytes_per_gpu(p8, False) == pytest.approx(
        extra + routed_diff, rel=1e-9)


def test_ep_all_to_all_carries_the_latent():
    """Attention DP 8 with EP 8: the dispatch and combine move the 3,584-wide latent, so in
    the pure roofline they take exactly 3584 / 7168 of the same model's time without it."""
    m = inf.load_model("Kimi-K3")
    plain = dataclasses.replace(m, latent_hidden_size=0)
    times = {}
    for name, model in (("latent", m), ("plain", plain)):
        g = _geom(model, rl=Realism.ideal(), dp=8, ep=8)
        ops = [op for op in _decode_ops(g, 64.0) if op.name in ("dispatch", "combine")]
        assert len(ops) == 2
        times[name] = [float(cost_op(g, op).time_s) for op in ops]
    assert np.allclose(np.array(times["latent"]) / np.array(times["plain"]), R / H, rtol=1e-12)
    assert all(t > 0 for t in times["latent"])


def test_without_a_latent_nothing_is_added():
    g = _geom("DeepSeek-V3")
    names = {op.name for op in _decode_ops(g)}
    assert not names & {"latent_down", "latent_up", "gate"}
    m = g.m
    assert m.expert_hidden_size == m.hidden_size and m.n_latent_params_per_layer == 0.0
    assert m.n_shared_expert_params == m.n_expert_params


def test_mla_output_gate_is_one_gemm_split_by_heads():
    ops = [op for op in _decode_ops(_geom(tp=8, ep=8)) if op.name == "gate"]
    assert len(ops) == 1 and ops[0].count == 24
    assert float(ops[0].flop) == 2 * 96 / 8 * 128 * H
