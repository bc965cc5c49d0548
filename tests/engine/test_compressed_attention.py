"""DeepSeek-V4's compressed attention (kind ``compressed``) and hyper-connections (op ``mhc``)
against hand computations from the public configs.

Config values (HF ``config.json`` as copied in ai-dynamo/aiconfigurator 095f58a5,
``model_configs/deepseek-ai--DeepSeek-V4-{Pro,Flash}_config.json``), written out here as
literals so the references do not come from the model files under test:

- Pro: hidden 7168, 61 layers (compress_ratios: 30 x 4, 31 x 128), 128 heads, head_dim 512
  (rope 64), q_lora 1536, o_lora 1024 x 16 groups, indexer 64 x 128 top-1024, window 128,
  384 experts top-6 + 1 shared x 3072, vocab 129280, hc_mult 4, Sinkhorn 20;
- Flash: hidden 4096, 43 layers (2 x 0, 21 x 4, 20 x 128), 64 heads, q_lora 1024, o_lora
  1024 x 8, indexer top-512, 256 experts top-6 + 1 shared x 2048.

Cache entry: FP8 448 + 2 x 64 + 448/64 + 1 = 584 B (FlashMLA ``sparse_decode.h`` l. 295),
BF16 2 x 512; indexer entry 128 / 2 = 64 B (FP4).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import STRUCT_AXES
from inference_factory.engine import attention as A
from inference_factory.engine import geometry as Gm
from inference_factory.engine import ops as O
from inference_factory.engine.layer_mix import architecture
from inference_factory.errors import SpecError
from inference_factory.kernels import compressed_attention as kca

PRO = dict(h=7168, L=61, c4=30, c128=31, c0=0, nq=128, qlr=1536, og=16, topk=1024, E=384,
           inter=3072)
FLASH = dict(h=4096, L=43, c4=21, c128=20, c0=2, nq=64, qlr=1024, og=8, topk=512, E=256,
             inter=2048)
HD, ROPE, OLR, INH, IHD, W, V, HC = 512, 64, 1024, 64, 128, 128, 129280, 4
E_FP8, E_BF16, E_IDX = 448 + 2 * 64 + 448 / 64 + 1, 2 * 512, 64.0


def _hand_params(c):
    """Total and active parameters, hand-summed per component (aiconfigurator dsv4.rs
    l. 202-232 and mhc.rs l. 60-71 for the attention and mHC shapes)."""
    h, nq, qlr, og = c["h"], c["nq"], c["qlr"], c["og"]
    base = (h * qlr + qlr * nq * HD + h * HD + nq * HD * OLR + og * OLR * h
            + nq + qlr + HD)                                   # sinks, two norms
    c4 = base + 2 * h * 2 * HD + 4 * 2 * HD + qlr * INH * IHD + 2 * h * 2 * IHD \
        + 4 * 2 * IHD + h * INH
    c128 = base + 2 * h * HD + 128 * HD
    attn = c["c4"] * c4 + c["c128"] * c128 + c["c0"] * base
    mhc = 2 * ((2 + HC) * HC * HC * h + (2 + HC) * HC + 3)
    expert = 3 * h * c["inter"]
    per_layer = 2 * h + mhc + h * c["E"] + expert              # norms, mHC, router, shared
    total = attn + c["L"] * per_layer + c["L"] * c["E"] * expert + 2 * V * h + h
    active = attn + c["L"] * per_layer + c["L"] * 6 * expert + 2 * V * h + h
    return total, active


@pytest.mark.parametrize("name, c", [("DeepSeek-V4-Pro", PRO), ("DeepSeek-V4-Flash", FLASH)])
def test_parameters_match_a_hand_count_from_the_config(name, c):
    arch = architecture(inf.load_model(name))
    total, active = _hand_params(c)
    assert arch.total_params == pytest.approx(total, rel=1e-12)
    assert arch.active_params() == pytest.approx(active, rel=1e-12)


def test_pro_total_is_the_published_1_6t():
    # "DeepSeek-V4-Pro 1.6T" (InferenceX MODELS.md l. 29): two significant digits, so any
    # count in [1.55T, 1.65T) rounds to it; the count leaves out the hash layers' routers
    # being absent (-8M) and the final mHC head (< 1M)
    total = architecture(inf.load_model("DeepSeek-V4-Pro")).total_params
    assert 1.55e12 <= total < 1.65e12                          # 1.573e12


@pytest.mark.parametrize("name, c", [("DeepSeek-V4-Pro", PRO), ("DeepSeek-V4-Flash", FLASH)])
def test_kv_bytes_per_token_and_state_per_sequence_match_the_config(name, c):
    arch = architecture(inf.load_model(name))
    for prec, entry in (("fp8", E_FP8), ("bf16", E_BF16)):
        per_token = c["c4"] * (entry + E_IDX) / 4 + c["c128"] * entry / 128
        assert arch.kv_bytes_per_token(prec) == pytest.approx(per_token, rel=1e-12)
        # window ring on every layer; FP32 compressor state (aiconfigurator deepseek_v4.py
        # l. 386-394): CSA 2 x 4 x 2 x 512 x 4 + indexer 2 x 4 x 2 x 128 x 4, HCA 2 x 128 x 512 x 4
        state = (c["L"] * W * entry + c["c4"] * (2 * 4 * 2 * 512 * 4 + 2 * 4 * 2 * 128 * 4)
                 + c["c128"] * 2 * 128 * 512 * 4)
        assert arch.state_bytes_per_sequence(prec) == pytest.approx(state, rel=1e-12)
        L = np.array([1e3, 1.3e5, 1e6])
        np.testing.assert_allclose(arch.sequence_bytes(prec, L, 8), per_token * L + state,
                                   rtol=1e-12)          # one KV head: TP replicates it
    assert E_FP8 == 584


def _pass(m, L, phase="decode"):
    """A pass on B200 with the measured tables off: the split operations (with them on, the
    device's V4 module table stands for them, tests/engine/test_v4_tables.py)."""
    hw = inf.load_hardware("B200")
    rl = dataclasses.replace(inf.load_realism(), measured=False)
    g = Gm.validate_struct(m, hw, dict(STRUCT_AXES, kv_precision="fp8"), rl)
    return g, A.Pass(seqs=1.0, new_tokens=1.0, cached_tokens=L - 1.0, kv_len=L, tokens=1.0,
                     phase=phase)


LENS = np.array([2048.0, 32768.0, 131072.0, 1048576.0])


@pytest.mark.parametrize("ratio, attended, scored", [
    # CSA: window 128 + min(L/4, 1024) chosen of L/4 scored
    (4, [128 + 512, 128 + 1024, 128 + 1024, 128 + 1024], [512, 8192, 32768, 262144]),
    # HCA: window 128 + every one of L/128 entries, no indexer
    (128, [128 + 16, 128 + 256, 128 + 1024, 128 + 8192], None)])
def test_decode_flops_and_bytes_per_token_of_one_layer(ratio, attended, scored):
    m = inf.load_model("DeepSeek-V4-Pro")
    at = next(at for at, _ in architecture(m).groups() if at.get("compress_ratio") == ratio)
    g, p = _pass(m, LENS)
    ops = {o.name: o for o in A.attention_ops(g, [(at, 1)], p)}
    att = np.array(attended, float)
    np.testing.assert_allclose(ops["attention"].flop, 4 * 128 * 512 * att, rtol=1e-12)
    idx = E_IDX if scored else 0.0
    write = E_FP8 + (E_FP8 + idx) / ratio          # the ring and 1/r of an entry
    np.testing.assert_allclose(ops["attention"].hbm_bytes, att * E_FP8 + write, rtol=1e-12)
    if scored is None:
        assert "indexer" not in ops
        return
    s = np.array(scored, float)
    np.testing.assert_allclose(ops["indexer"].flop, 2 * s * 64 * 128, rtol=1e-12)
    np.testing.assert_allclose(ops["indexer"].hbm_bytes, s * 64, rtol=1e-12)
    # past ~8K tokens of context the indexer's scores outgrow the sparse core's FLOPs
    assert ops["indexer"].flop[-1] > ops["attention"].flop[-1]


def test_prefill_entries_are_the_causal_sum():
    for n, c, r, w, k in ((300, 0, 4, 128, 50), (64, 1000, 128, 128, 0), (10, 5, 4, 128, 1)):
        brute = sum(min(p, w) + (min(p / r, k) if k else p / r) for p in range(c + 1, c + n + 1))
        got = kca.prefill_attended_entries(new_tokens=n, cached_tokens=c, ratio=r,
                                           window_tokens=w, top_k=k)
        assert got == pytest.approx(brute, rel=1e-12)


def test_mhc_op_matches_the_hand_count_and_other_models_have_none():
    m = inf.load_model("DeepSeek-V4-Flash")
    hw = inf.load_hardware("B200")
    g = Gm.validate_struct(m, hw, dict(STRUCT_AXES), inf.load_realism())
    T = np.array([1.0, 4096.0])
    ops = O.layer_ops(g, Gm.main_layers(m), seqs=T, new_tokens=1.0, cached_tokens=100.0,
                      kv_len=101.0, logit_tokens_per_seq=1.0, phase="decode")
    (op,) = [o for o in ops if o.name == "mhc"]
    h, n, s, sites = 4096, 4, 20, 2
    mix, dim = (2 + n) * n, n * h
    pre = sites * (2 * T * dim * mix + T * dim * 3 + T * (n * n + 2 * n) * s + 2 * T * n * h)
    post = sites * (2 * T * n * n * h + 2 * T * n * h)
    par = sites * (mix * dim + mix + 3) * 2.0
    act = sites * T * dim * 2.0 * 2.0
    assert op.count == 43
    np.testing.assert_allclose(op.flop, pre + post, rtol=1e-12)
    np.testing.assert_allclose(op.hbm_bytes, (par + act + sites * T * (2 * n + n * n) * 4.0)
                               + (par + act), rtol=1e-12)
    v3 = inf.load_model("DeepSeek-V3")
    g3 = Gm.validate_struct(v3, hw, dict(STRUCT_AXES), inf.load_realism())
    names = [o.name for o in O.layer_ops(g3, Gm.main_layers(v3), seqs=1.0, new_tokens=1.0,
                                         cached_tokens=1.0, kv_len=2.0,
                                         logit_tokens_per_seq=1.0, phase="decode")]
    assert "mhc" not in names and v3.n_hyper_connection_params_per_layer == 0


def test_an_indexer_without_compression_is_refused_naming_the_file(tmp_path):
    src = (architecture(inf.load_model("DeepSeek-V4-Flash")).spec.path)
    text = open(src).read().replace("params = { compress_ratio = 0 }",
                                    "params = { compress_ratio = 0, indexer = true }")
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(SpecError, match=r"bad\.toml: attention\.params\.indexer = true needs"):
        inf.load_model(str(p))
