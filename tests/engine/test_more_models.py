"""Qwen3-Next-80B-A3B (models/Qwen3-Next-80B-A3B.toml) against its public config.

Reference values are hand computations from HF Qwen/Qwen3-Next-80B-A3B-Thinking/config.json
(the copy in ai-dynamo/aiconfigurator commit 1b7cfb10a, model_configs/
Qwen--Qwen3-Next-80B-A3B-Thinking_config.json): hidden 2048, 48 layers with
full_attention_interval 4 (36 Gated DeltaNet + 12 gated GQA), GDN 16 key / 32 value heads
x 128, linear_conv_kernel_dim 4; full attention 16 Q / 2 KV heads x 256 whose q_proj also
emits the output gate (transformers 5.24.0 modeling_qwen3_next.py line 241); 512 experts x
512, top-10, one 512-wide shared expert; vocab 151,936, untied head. The recurrent state is
FP32 (SGLang's default where the config names none), the conv state BF16.
"""

from __future__ import annotations

import math

import pytest

import inference_factory as inf
from inference_factory.engine.layer_mix import architecture

H, V = 2048, 151936
NK, NV, D = 16, 32, 128                        # GDN key heads, value heads, head dim (k = v)
CHANNELS = 2 * NK * D + NV * D                 # q, k, v through the short conv: 8,192
STATE = NV * D * D * 4                         # FP32 recurrent state of one GDN layer: 2 MiB
CONV = CHANNELS * (4 - 1) * 2                  # BF16 conv state, kernel 4: 48 KiB
KV_LAYER = 2 * (256 + 256) * 2                 # 2 KV heads x (k 256 + v 256) x 2 B = 2,048 B


def _hand_params():
    gdn = (H * (2 * NK * D + 2 * NV * D + 2 * NV)     # in_proj_qkvz, in_proj_ba
           + CHANNELS * 4 + 2 * NV + D              # conv1d (no bias), A_log + dt_bias, norm
           + NV * D * H)                            # out_proj
    gqa = H * (2 * 16 * 256 + 2 * 2 * 256) + 16 * 256 * H   # q and gate, k, v; o
    expert = 3 * H * 512                                    # gate, up, down
    dense_path = (36 * gdn + 12 * gqa + 48 * 2 * H          # two RMSNorms a layer
                  + 48 * (H * 512 + expert) + H)            # router + shared expert; final norm
    total = dense_path + 48 * 512 * expert + 2 * V * H
    active = dense_path + 48 * 10 * expert + 2 * V * H
    return total, active


def test_qwen3_next_params_against_the_config_and_the_published_size():
    arch = architecture(inf.load_model("Qwen3-Next-80B-A3B"))
    total, active = _hand_params()
    assert arch.total_params == pytest.approx(total, rel=1e-12)
    assert arch.active_params() == pytest.approx(active, rel=1e-12)
    # the model name's 80B total: the 0.1M of shared-expert gates and q/k norms left out
    # change nothing at this tolerance
    assert total == pytest.approx(80e9, rel=0.01)
    # "A3B" is a rounded name (Qwen3-30B-A3B's card says 3.3B for the same suffix); the
    # count without the input embedding and LM head (2 x 0.31B) is 3.25B
    assert active - 2 * V * H == pytest.approx(3e9, rel=0.10)
    assert active - 2 * V * H > 3e9


def test_qwen3_next_kv_per_token_and_state_per_sequence():
    arch = architecture(inf.load_model("Qwen3-Next-80B-A3B"))
    # KV only on the 12 full layers: 24,576 B (24 KiB) per token at BF16, half at FP8
    assert arch.kv_bytes_per_token("bf16") == 12 * KV_LAYER == 24576
    assert arch.kv_bytes_per_token("fp8") == 12 * KV_LAYER // 2
    # 36 x (2 MiB FP32 state + 48 KiB conv state) = 73.7 MiB, whatever the KV precision
    assert arch.state_bytes_per_sequence("bf16") == 36 * (STATE + CONV) == 77_266_944
    assert arch.state_bytes_per_sequence("fp8") == 36 * (STATE + CONV)
    # one GPU of TP4 holds 1/4 of the GDN heads' state and one of the 2 KV heads (each
    # replicated twice)
    L = 65536.0
    assert arch.sequence_bytes("bf16", L, 4) == pytest.approx(
        L * 12 * KV_LAYER / 2 + 36 * (STATE + CONV) / 4, rel=1e-12)


def test_qwen3_next_tp_limits_follow_its_heads():
    arch = architecture(inf.load_model("Qwen3-Next-80B-A3B"))
    assert arch.tp_error(8) is None and arch.tp_error(16) is None
    # 16 query heads and 16 GDN key heads: TP 32 splits neither
    assert arch.tp_error(32) is not None


@pytest.mark.parametrize("hw", ["B200", "MI355X"])
def test_qwen3_next_decode_runs_and_its_memory_counts_the_state(hw):
    ds = inf.evaluate("Qwen3-Next-80B-A3B", hw, tp=4, ep=4, batch_size=64, kv_len=8192)
    tps = float(ds.decode_tokens_per_s_per_gpu.values.ravel()[0])
    assert math.isfinite(tps) and tps > 0
    kv = float(ds.kv_bytes_per_gpu.values.ravel()[0])
    # KV and state of 64 sequences at 8,192 tokens on one GPU of TP4
    assert kv == pytest.approx(64 * (8192 * 12 * KV_LAYER / 2 + 36 * (STATE + CONV) / 4),
                               rel=1e-9)
