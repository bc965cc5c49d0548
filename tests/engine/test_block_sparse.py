"""Block-sparse attention (MiniMax-M3's MSA) and the MiniMax models, against hand computations
from their config.json (aiconfigurator model_configs copies, commit 095f58a5).

MiniMax-M3: hidden 6144, 64 Q / 4 KV heads x 128, 60 layers (3 dense GQA + dense FFN 12288;
57 block-sparse + MoE: 128 experts of 3072, top-4, 1 shared), vocab 200064 untied; indexer
4 heads x 128 with one cached 128-dim BF16 index key per token, 16 blocks of 128 tokens.
MiniMax-M2.5: hidden 3072, 48 Q / 8 KV x 128, 62 GQA + MoE layers (256 experts of 1536,
top-8, no shared), vocab 200064 untied.
"""

from __future__ import annotations

import numpy as np
import pytest

from inference_factory.engine.attention import AttentionGroup, Pass, kind
from inference_factory.engine.geometry import Geom
from inference_factory.engine.layer_mix import architecture
from inference_factory.errors import SpecError
from inference_factory.specs import load_hardware, load_model
from inference_factory.specs.realism import load_realism


def _m3_hand():
    h, v = 6144, 200064
    attn = h * (64 * 128 + 4 * 2 * 128) + 64 * 128 * h          # q, k, v, o
    index = h * (4 + 1) * 128                                    # index_q (4 heads), index_k (1)
    norms = 2 * h
    dense_ffn = 3 * h * 12288
    expert = 3 * h * 3072
    router = h * 128
    common = 60 * attn + 57 * index + 60 * norms + h + 3 * dense_ffn + 57 * (router + expert)
    total = common + 57 * 128 * expert + 2 * v * h
    active = common + 57 * 4 * expert + 2 * v * h
    return total, active


def test_minimax_m3_params_and_cache_per_token_from_the_config():
    arch = architecture(load_model("MiniMax-M3"))
    total, active = _m3_hand()
    assert arch.total_params == pytest.approx(total, rel=1e-12)
    assert arch.active_params() == pytest.approx(active, rel=1e-12)
    # 60 layers of K and V (4 heads x 128 x 2), 57 of them with a 128-dim BF16 index key
    for prec, b in (("bf16", 2), ("fp8", 1)):
        assert arch.kv_bytes_per_token(prec) == 60 * 4 * 128 * 2 * b + 57 * 128 * 2
    assert arch.state_bytes_per_sequence("bf16") == 0


def test_minimax_m25_params_and_cache_per_token_from_the_config():
    arch = architecture(load_model("MiniMax-M2.5"))
    h, v = 3072, 200064
    attn = h * (48 * 128 + 8 * 2 * 128) + 48 * 128 * h
    expert, router = 3 * h * 1536, h * 256
    common = 62 * (attn + 2 * h + router) + h + 2 * v * h
    assert arch.total_params == pytest.approx(common + 62 * 256 * expert, rel=1e-12)
    assert arch.active_params() == pytest.approx(common + 62 * 8 * expert, rel=1e-12)
    assert arch.kv_bytes_per_token("bf16") == 62 * 8 * 128 * 2 * 2       # 253,952 B
    assert arch.kv_bytes_per_token("fp8") == 62 * 8 * 128 * 2
    assert architecture(load_model("MiniMax-M2.5")).state_bytes_per_sequence("bf16") == 0


def _one_layer_decode_ops(L: float, tp: int = 1):
    m = load_model("MiniMax-M3")
    g = Geom(m=m, hw=load_hardware("B200"), rl=load_realism(), tp=tp, dp=1, ep=1,
             redundant=0, skew=0.0, wprec="bf16", eprec="bf16", kvprec="bf16", aprec="bf16",
             dispatch_b=1.0, combine_b=2.0, overlap="none", tier="hbm")
    at = AttentionGroup("block_sparse", 0, m.attention_params)
    p = Pass(seqs=1.0, new_tokens=1.0, cached_tokens=L - 1.0, kv_len=L, tokens=1.0,
             phase="decode")
    return {op.name: op for op in kind("block_sparse").ops(g, [(0, 1)], p, at)}


@pytest.mark.parametrize("L", [2048.0, 32768.0, 131072.0, 1048576.0])
def test_block_sparse_decode_flops_and_bytes_per_token_on_one_layer(L):
    ops = _one_layer_decode_ops(L)
    # indexer: 4 heads x 128 dims against every one of the L cached index keys (one 128-dim
    # BF16 key per token: 256 B), plus writing the new token's key
    assert ops["indexer"].flop == pytest.approx(2 * 4 * 128 * L, rel=1e-12)
    assert ops["indexer"].hbm_bytes == pytest.approx(256 * L + 256, rel=1e-12)
    # attention: 64 heads over min(L, 16 x 128) tokens, K and V of 4 heads x 128 x 2 B
    att = min(L, 2048.0)
    assert ops["attention"].flop == pytest.approx(2 * 64 * (128 + 128) * att, rel=1e-12)
    assert ops["attention"].hbm_bytes == pytest.approx(2048 * att + 2048, rel=1e-12)


def test_block_sparse_indexer_overtakes_the_sparse_attention_in_bytes_past_16k():
    # 256 L > 2048 x 2048 from L = 16,384: the O(L) index read passes the capped K/V read
    for L, indexer_more in ((8192.0, False), (32768.0, True)):
        ops = _one_layer_decode_ops(L)
        assert bool(ops["indexer"].hbm_bytes > ops["attention"].hbm_bytes) is indexer_more


def test_tensor_parallel_splits_kv_heads_and_replicates_the_index_key():
    ops = _one_layer_decode_ops(131072.0, tp=8)
    # TP 8: one of the 4 KV heads per GPU (replicated beyond 4), the index key whole
    assert ops["attention"].hbm_bytes == pytest.approx((2048 / 4) * 2049, rel=1e-12)
    assert ops["indexer"].hbm_bytes == pytest.approx(256 * 131073, rel=1e-12)
    arch = architecture(load_model("MiniMax-M3"))
    per_gpu = arch.sequence_bytes("bf16", np.array([1000.0]), 8)
    assert per_gpu[0] == pytest.approx(1000 * (60 * 2048 / 4 + 57 * 256), rel=1e-12)


def test_local_blocks_beyond_topk_are_refused(tmp_path):
    src = load_model("MiniMax-M3").path
    text = open(src).read().replace("local_blocks = 1", "local_blocks = 17")
    p = tmp_path / "M3-bad.toml"
    p.write_text(text)
    with pytest.raises(SpecError, match="local_blocks = 17 must be <= topk_blocks = 16"):
        architecture(load_model(str(p))).total_params
