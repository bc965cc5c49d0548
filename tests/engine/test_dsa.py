"""DeepSeek Sparse Attention (engine/attention/dsa.py) on DeepSeek-V3.2, GLM-5 and GLM-5.2.

Reference values are independent hand computations from the config.json fields (the copies
in ai-dynamo/aiconfigurator model_configs, commit 095f58a5), written out here in plain
arithmetic:

- DeepSeek-V3.2: hidden 7168, 128 heads, q_lora 1536, kv_lora 512, qk_nope 128, rope 64,
  v 128, index_n_heads 64, index_head_dim 128, index_topk 2048, 61 layers.
- GLM-5 / GLM-5.2: hidden 6144, 64 heads, q_lora 2048, kv_lora 512, qk_nope 192, rope 64,
  v 256, index_n_heads 32, index_head_dim 128, index_topk 2048, 78 layers; GLM-5.2's
  indexer_types: 21 "full", 57 "shared".

Cache per token and layer: FP8 latent 512 B + four FP32 scales 16 B + BF16 RoPE key 128 B =
656 B (vLLM ``fp8_ds_mla``); BF16 latent (512 + 64) x 2 = 1,152 B; indexer key 128 B FP8 +
one FP32 scale = 132 B.
"""

from __future__ import annotations

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import STRUCT_AXES
from inference_factory.engine import geometry as Gm
from inference_factory.engine import ops as O
from inference_factory.engine.layer_mix import architecture
from inference_factory.errors import SpecError

V32 = dict(h=7168, nq=128, rq=1536, rkv=512, dn=128, dr=64, dv=128, ni=64, di=128, k=2048)
GLM = dict(h=6144, nq=64, rq=2048, rkv=512, dn=192, dr=64, dv=256, ni=32, di=128, k=2048)
LATENT_FP8, LATENT_BF16, INDEX_K = 512 + 16 + 128, (512 + 64) * 2, 128 + 4


def indexer_params(c):
    # wq_b (q latent -> heads x dim), wk (hidden -> dim), k_norm weight + bias, weights_proj
    return c["rq"] * c["ni"] * c["di"] + c["h"] * c["di"] + 2 * c["di"] + c["h"] * c["ni"]


def mla_params(c):
    q = c["h"] * c["rq"] + c["rq"] + c["rq"] * c["nq"] * (c["dn"] + c["dr"])
    kv = c["h"] * (c["rkv"] + c["dr"]) + c["rkv"] + c["rkv"] * c["nq"] * (c["dn"] + c["dv"])
    return q + kv + c["nq"] * c["dv"] * c["h"]


def test_parameters_against_the_config():
    v3, v32 = (architecture(inf.load_model(n)) for n in ("DeepSeek-V3", "DeepSeek-V3.2"))
    # V3.2 = V3 + an indexer on each of its 61 layers: 13.96 M each, 0.85 B in all
    assert v32.total_params - v3.total_params == 61 * indexer_params(V32)
    assert v32.active_params() - v3.active_params() == 61 * indexer_params(V32)
    # GLM-5, from scratch: embedding and head (untied), 78 x (MLA + indexer + 2 norms),
    # 3 dense SwiGLU 12288, 75 MoE layers of 256 routed + 1 shared 2048-wide experts and a
    # router, the final norm
    h, V = 6144, 154880
    expert = 3 * h * 2048
    layer = mla_params(GLM) + 2 * h
    total = (2 * V * h + 78 * layer + 78 * indexer_params(GLM) + 3 * 3 * h * 12288
             + 75 * (257 * expert + 256 * h) + h)
    active = total - 75 * (256 - 8) * expert
    glm5 = architecture(inf.load_model("GLM-5"))
    assert glm5.total_params == total                       # 743.91 B
    assert glm5.active_params() == active                   # 41.78 B
    # GLM-5.2: the 57 shared layers carry no indexer weights (GLM-5.2-FP8 config)
    glm52 = architecture(inf.load_model("GLM-5.2"))
    assert glm5.total_params - glm52.total_params == 57 * indexer_params(GLM)
    # secondary: "about 753B" for GLM-5.2 (reference/architectures_2026.md), which matches
    # the main model and its MTP layer together
    assert glm52.total_params + glm52.n_mtp_params_per_module == pytest.approx(753e9, rel=0.005)


@pytest.mark.parametrize("name, layers, full, fp8, bf16", [
    ("DeepSeek-V3.2", 61, 61, 48_068, 78_324),
    ("GLM-5", 78, 78, 61_464, 100_152),
    ("GLM-5.2", 78, 21, 53_940, 92_628),
])
def test_kv_bytes_per_token_latent_plus_indexer_keys(name, layers, full, fp8, bf16):
    a = architecture(inf.load_model(name))
    assert layers * LATENT_FP8 + full * INDEX_K == fp8
    assert layers * LATENT_BF16 + full * INDEX_K == bf16
    assert a.kv_bytes_per_token("fp8") == fp8
    assert a.kv_bytes_per_token("bf16") == bf16
    assert a.state_bytes_per_sequence("fp8") == 0.0
    # the latent is shared by every head: TP replicates the whole cache
    L = 131072.0
    assert a.sequence_bytes("fp8", L, 8) == pytest.approx(fp8 * L, rel=1e-12)


def test_models_show_prints_kv_and_state_bytes():
    d = architecture(inf.load_model("GLM-5.2")).derived()
    assert d["kv_bytes_per_token_fp8"] == 53_940
    assert d["state_bytes_per_sequence_bf16"] == 0.0


def test_deepseek_v31_is_the_v3_architecture():
    assert inf.load_model("DeepSeek-V3.1").name == "DeepSeek-V3"


def _decode_ops(name, L, kv="fp8"):
    m, hw = inf.load_model(name), inf.load_hardware("H800-SXM")
    s = dict(STRUCT_AXES, tp=1, weight_precision="fp8", kv_precision=kv, expert_skew=0.0)
    g = Gm.validate_struct(m, hw, s, inf.load_realism())
    L = np.asarray(L, dtype=float)
    return {o.name: o for o in O.layer_ops(g, Gm.main_layers(m), seqs=1.0, new_tokens=1.0,
                                           cached_tokens=L - 1, kv_len=L,
                                           logit_tokens_per_seq=1.0, phase="decode")}


LS = np.array([2048.0, 32768.0, 131072.0, 1048576.0])


def test_decode_flops_and_bytes_per_token_on_one_layer():
    """One decode token over L tokens on one V3.2 layer: the indexer scores all L tokens
    (2 x 64 x 128 FLOPs each, 132 B of key read each, 4 B of FP32 logit written and read),
    the sparse core attends min(L, 2048) latents (2 x 128 x (512 + 64 + 512) FLOPs each,
    656 B gathered each) and writes one latent."""
    ops = _decode_ops("DeepSeek-V3.2", LS)
    n = 61
    k = np.minimum(LS, 2048)
    np.testing.assert_allclose(ops["indexer"].flop, 2 * 64 * 128 * LS, rtol=1e-12)
    np.testing.assert_allclose(ops["indexer"].hbm_bytes, 132 * LS + 4 * LS + 132, rtol=1e-12)
    np.testing.assert_allclose(ops["topk"].hbm_bytes, 4 * LS, rtol=1e-12)
    np.testing.assert_allclose(ops["attention"].flop, 2 * 128 * 1088 * k, rtol=1e-12)
    np.testing.assert_allclose(ops["attention"].hbm_bytes, 656 * k + 656, rtol=1e-12)
    assert ops["attention"].count == ops["indexer"].count == n
    # hand values at 128K: indexer 17.8 MB and 2.15 GFLOP, core 1.34 MB and 0.57 GFLOP
    assert float(ops["indexer"].hbm_bytes[2]) == 136 * 131072 + 132
    assert float(ops["attention"].hbm_bytes[2]) == 656 * 2049
    # the dense MLA of V3 reads all L latents: at 128K 64x the sparse core's bytes
    v3 = _decode_ops("DeepSeek-V3", LS)
    np.testing.assert_allclose(v3["attention"].hbm_bytes, 656 * LS + 656, rtol=1e-12)
    np.testing.assert_allclose(v3["attention"].flop, 2 * 128 * 1088 * LS, rtol=1e-12)
    # at 2K the sparse core does the dense core's work: no saving below the top-k
    assert float(ops["attention"].flop[0]) == float(v3["attention"].flop[0])


def test_index_share_layers_run_no_indexer():
    """GLM-5.2: the indexer (and its projections) on 21 of 78 layers, the sparse core on all."""
    ops = _decode_ops("GLM-5.2", LS)
    assert ops["indexer"].count == ops["topk"].count == ops["indexer_q"].count == 21
    core = [o for o in ops.values() if o.name.endswith("attention") and o.name != "attention"]
    assert ops["attention"].count + sum(o.count for o in core) == 78
    np.testing.assert_allclose(ops["indexer"].flop, 2 * 32 * 128 * LS, rtol=1e-12)
    # shared layers' core is GLM-5's core: 64 heads x (512 + 64 + 512) over min(L, 2048)
    k = np.minimum(LS, 2048)
    for o in [ops["attention"]] + core:
        np.testing.assert_allclose(o.flop, 2 * 64 * 1088 * k, rtol=1e-12)
    # indexer FLOPs at 1M: GLM-5 runs 78 indexers, GLM-5.2 21 (3.7x fewer)
    glm5 = _decode_ops("GLM-5", LS)
    assert glm5["indexer"].count == 78


def test_a_bad_dsa_parameter_is_one_line(tmp_path):
    src = (inf.specs.data_dir("models") / "DeepSeek-V3.2.toml").read_text()
    p = tmp_path / "Bad.toml"
    p.write_text(src.replace("index_topk = 2048", "index_topk = 0"))
    with pytest.raises(SpecError) as e:
        inf.load_model(str(p))
    assert "attention.params.index_topk = 0" in str(e.value) and "\n" not in str(e.value)


def test_v32_against_v3_on_h800_at_128k_and_2k():
    """The price-cut question's core: decode step time per token of V3.2 over V3 (V3.1's
    architecture) on H800, FP8 KV, 8 GPUs (DP8 attention, EP8 experts), 32 sequences per
    rank. At 128K the sparse core and the indexer replace a dense MLA read; at 2K the
    indexer only adds work."""
    kw = dict(dp=8, ep=8, batch_size=32, kv_len=[2048, 131072], kv_precision="fp8")
    v3 = inf.evaluate("DeepSeek-V3", "H800-SXM", **kw)
    v32 = inf.evaluate("DeepSeek-V3.2", "H800-SXM", **kw)
    r = (v32.decode_step_s / v3.decode_step_s).values
    assert 1.0 <= r[0] < 1.15         # 2K: slightly slower (indexer, its projections)
    assert r[1] < 0.6                 # 128K: much faster


@pytest.mark.parametrize("device", ["H200-SXM", "B200"])
def test_composed_dsa_block_against_the_measured_module(device):
    """The op graph against the measured whole module (dsa_decode.csv, DeepSeek-V3.2, FP8 KV,
    block-FP8 GEMMs, TP 1-8): projections from the GEMM tables, W_UK/W_UV from the BMM
    tables, indexer/top-k/core at their own rooflines times the module's ratio, plus the
    nine small kernels of configs/realism.toml's ``dsa``. Today: median ln(composed /
    module) -0.10 (H200), +0.05 (B200); median |.| 0.10 both."""
    import pandas as pd

    from inference_factory.engine import cost as C
    from inference_factory.engine import measured as M

    hw, m = inf.load_hardware(device), inf.load_model("DeepSeek-V3.2")
    tabs = M.tables_for(hw)
    df = pd.read_csv(tabs.folder / "dsa_decode.csv", comment="#")
    df = df[(df.kv_dtype == "fp8") & (df.gemm_dtype == "fp8_block")
            & (df.architecture == "DeepseekV32ForCausalLM")]
    block = ("q_a_kv_a", "q_b", "indexer_q", "w_uk", "w_uv", "indexer", "topk", "attention",
             "o_proj")
    logs = []
    for tp, heads in ((1, 128), (2, 64), (4, 32), (8, 16)):
        s = dict(STRUCT_AXES, tp=tp, weight_precision="fp8", kv_precision="fp8", expert_skew=0.0)
        g = Gm.validate_struct(m, hw, s, inf.load_realism())
        d = df[df.num_heads == heads]
        B, L = d.batch_size.to_numpy(float), d.kv_len.to_numpy(float)
        ops = O.layer_ops(g, Gm.main_layers(m), seqs=B, new_tokens=1.0, cached_tokens=L - 1,
                          kv_len=L, logit_tokens_per_seq=1.0, phase="decode")
        t = sum(C.cost_op(g, o).time_s for o in ops if o.name in block)
        t = t + g.rl.other_kernels["dsa"] * tabs.kernel_floor_s()
        logs.append(np.log(t / (d.latency_us.to_numpy() * 1e-6)))
    logs = np.concatenate(logs)
    assert logs.size > 100
    assert abs(float(np.median(logs))) <= 0.2
    assert float(np.median(np.abs(logs))) <= 0.2
