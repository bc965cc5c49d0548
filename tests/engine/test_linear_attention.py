"""Linear attention (engine/attention/linear.py, kinds gdn and kda) and Qwen3.5-397B-A17B.

Reference values are hand computations from the public config (aiconfigurator
model_configs/Qwen--Qwen3.5-397B-A17B_config.json, text_config): hidden 4096, 60 layers
(45 linear_attention + 15 full_attention), GDN 16 key / 64 value heads x 128, conv 4,
mamba_ssm_dtype float32; full attention 32 Q / 2 KV heads x 256 with attn_output_gate;
512 experts x 1024, top-10, one 1024-wide shared expert; vocab 248,320, untied head.
KDA uses Kimi-K3's KDA dimensions (moonshotai--Kimi-K3_config.json linear_attn_config:
96 heads x 128, short_conv_kernel_size 4, use_full_rank_gate) on the same model.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import measured as M
from inference_factory.engine.attention import Pass, groups_of, kind
from inference_factory.engine.geometry import Geom
from inference_factory.engine.layer_mix import architecture
from inference_factory.specs import data_dir
from inference_factory.specs.realism import load_realism

H, V = 4096, 248320
STATE = 64 * 128 * 128 * 4                   # FP32 state of one GDN layer: 4 MiB
CONV = (2 * 16 * 128 + 64 * 128) * 3 * 2     # BF16 conv state: 12,288 channels x 3 x 2 B
QWEN = data_dir("models") / "Qwen3.5-397B-A17B.toml"
K3_KDA = ("linear_num_key_heads = 96, linear_num_value_heads = 96, linear_key_head_dim = 128, "
          "linear_value_head_dim = 128, conv_kernel = 4, state_precision = \"fp32\", "
          "full_rank_gate = true")


def test_qwen35_params_kv_and_state_against_the_config():
    arch = architecture(inf.load_model("Qwen3.5-397B-A17B"))
    gdn = H * (2 * 16 * 128 + 2 * 64 * 128 + 2 * 64) + 12288 * 4 + 2 * 64 + 128 + 64 * 128 * H
    gqa = H * (2 * 32 * 256 + 2 * 2 * 256) + 32 * 256 * H        # q and gate, k, v; o
    expert = 3 * H * 1024
    dense_path = (45 * gdn + 15 * gqa + 60 * 2 * H + 60 * (H * 512 + expert) + H)
    total = dense_path + 60 * 512 * expert + 2 * V * H
    active = dense_path + 60 * 10 * expert + 2 * V * H
    assert arch.total_params == pytest.approx(total, rel=1e-12)
    assert arch.active_params() == pytest.approx(active, rel=1e-12)
    # the model name's 397B / 17B (its vision tower, ~0.4B, is not counted here)
    assert total == pytest.approx(397e9, rel=0.005) and active == pytest.approx(17e9, rel=0.03)
    # KV only on the 15 full layers: 2 KV heads x (256 + 256) x 2 B = 2,048 B each
    assert arch.kv_bytes_per_token("bf16") == 15 * 2048 == 30720
    assert arch.kv_bytes_per_token("fp8") == 15 * 1024
    # 45 x (4 MiB FP32 state + 72 KiB conv state) = 183.2 MiB, whatever the KV precision
    assert arch.state_bytes_per_sequence("bf16") == 45 * (STATE + CONV) == 192_061_440
    assert arch.state_bytes_per_sequence("fp8") == 45 * (STATE + CONV)
    # one GPU of TP8 holds 1/8 of the state and one of the 2 KV heads (replicated 4 times)
    L = 65536.0
    assert arch.sequence_bytes("bf16", L, 8) == pytest.approx(
        L * 15 * 2048 / 2 + 45 * (STATE + CONV) / 8, rel=1e-12)


def _geom(model, hw="B200", tp=1):
    m = inf.load_model(str(model))
    return Geom(m=m, hw=inf.load_hardware(hw), rl=load_realism(), tp=tp, dp=1, ep=1, redundant=0,
                skew=0.0, wprec="bf16", eprec="bf16", kvprec="bf16", aprec="bf16",
                dispatch_b=1.0, combine_b=2.0, overlap="none", tier="dram")


def _decode_op(g, name, L):
    at = next(at for at, _ in groups_of(g.m) if at.kind == name)
    p = Pass(seqs=1.0, new_tokens=1.0, cached_tokens=L - 1.0, kv_len=np.asarray(L), tokens=1.0,
             phase="decode")
    ops = kind(name).ops(g, [(0, 1)], p, at)
    return next(op for op in ops if op.name == "attention")


@pytest.mark.parametrize("name,flop,nbytes", [
    # GDN: 7 x 64 heads x 128 x 128 + conv 2 x 12,288 x 4; state + conv read and written,
    # q/k/v through the conv (3 x 12,288 x 2 B), o (64 x 128 x 2 B), FP32 alpha and beta
    ("gdn", 7 * 64 * 128 * 128 + 2 * 12288 * 4,
     2 * (STATE + CONV) + 2 * (3 * 12288 + 64 * 128) + 4 * 2 * 64),
    # KDA (K3 dims): 7 x 96 x 128 x 128 + 2 x 36,864 x 4; state 96 x 128 x 128 x 4 B,
    # conv 36,864 x 3 x 2 B; FP32 gate per key channel (96 x 128) and beta (96)
    ("kda", 7 * 96 * 128 * 128 + 2 * 36864 * 4,
     2 * (96 * 128 * 128 * 4 + 36864 * 3 * 2) + 2 * (3 * 36864 + 96 * 128) + 4 * (96 * 128 + 96)),
])
def test_decode_flops_and_bytes_per_token_are_constant_in_context(tmp_path, name, flop, nbytes):
    path = QWEN
    if name == "kda":
        path = tmp_path / "Qwen3.5-kda.toml"
        text = QWEN.read_text()
        i = text.index('attention = "gdn"')
        head, tail = text[:i], text[i:]
        params = tail[tail.index("params = {"):tail.index("}") + 1]
        path.write_text(head + tail.replace('attention = "gdn"', 'attention = "kda"')
                        .replace(params, "params = { " + K3_KDA + " }"))
    g = _geom(path)
    for L in (2048.0, 32768.0, 131072.0, 1048576.0):
        op = _decode_op(g, name, L)
        assert float(op.flop) == pytest.approx(flop, rel=1e-12), L
        assert float(op.hbm_bytes) == pytest.approx(nbytes, rel=1e-12), L
    # the full layers' decode attention, by contrast, reads 2,048 B x L
    gq = next(at for at, _ in groups_of(g.m) if at.kind == "gqa")
    reads = [float(next(o for o in kind("gqa").ops(g, [(0, 1)], Pass(
        1.0, 1.0, L - 1, np.asarray(L), 1.0, "decode"), gq) if o.name == "attention").hbm_bytes)
        for L in (2048.0, 1048576.0)]
    assert reads[1] - reads[0] == pytest.approx((1048576 - 2048) * 2048, rel=1e-12)


def test_the_output_gate_widens_the_query_projection_only():
    g = _geom(QWEN, tp=8)
    gq = next(at for at, _ in groups_of(g.m) if at.kind == "gqa")
    p = Pass(1.0, 1.0, 0.0, np.asarray(1.0), 1.0, "decode")
    qkv = next(o for o in kind("gqa").ops(g, [(0, 15)], p, gq) if o.name == "qkv")
    # per GPU of TP8: 4 query heads x 256 x 2 (query and gate) + 1 replicated KV head x 512
    assert qkv.fixed["n"] == 4 * 256 * 2 + 512


def test_tp_must_divide_the_linear_heads():
    arch = architecture(inf.load_model("Qwen3.5-397B-A17B"))
    assert arch.tp_error(8) is None and arch.tp_error(16) is None
    # 32 query heads split over 32, but not the 16 GDN key heads
    assert "16 key and 64 value heads" in arch.tp_error(32)


def test_decode_at_a_measured_shape_is_the_measured_latency():
    """B200, Qwen3.5 at TP8 (2 key / 8 value heads per GPU), 64 sequences: vLLM 0.24.0's
    conv update + fused recurrent step, 15.56 us (hardware/measured/B200/gdn.csv)."""
    hw = inf.load_hardware("B200")
    tabs = M.tables_for(hw)
    curve = tabs.curve("gdn_decode", {"head_k_dim": 128, "head_v_dim": 128, "d_conv": 4},
                       {"num_k_heads": 2.0, "num_v_heads": 8.0})
    g = _geom(QWEN, tp=8)
    op = _decode_op(g, "gdn", 8192.0)
    log_ratio, src = curve.log_ratio(64.0)
    t = op.pure_fn(64.0) * math.exp(float(log_ratio))
    assert t == pytest.approx(15.56e-6, rel=0.01)
    ds = inf.evaluate("Qwen3.5-397B-A17B", "B200", tp=8, ep=8, batch_size=64,
                      kv_len=[2048, 131072], detail="ops")
    op_t = ds.decode_op_time_s.sel(op="gdn_attention").values
    assert op_t[0] == op_t[1] and str(ds.decode_op_source.sel(op="gdn_attention").values[0]) \
        == "measured"
    # 45 layers of it
    assert float(op_t[0]) == pytest.approx(45 * t, rel=0.01)


def test_prefix_restore_brings_back_kv_and_one_state_snapshot():
    hw = inf.load_hardware("H200-SXM")
    ds = inf.evaluate("Qwen3.5-397B-A17B", hw, tp=8, ep=8, prefill_batch_size=2,
                      prompt_len=8192, cache_hit_rate=0.5, cache_tier="dram")
    per_gpu = 2 * (4096 * 15 * 2048 / 2 + 45 * (STATE + CONV) / 8)
    assert float(ds.prefill_restore_s) == pytest.approx(per_gpu / hw.host_dram_bw_bytes_per_s,
                                                        rel=1e-9)
