"""``plan`` per engine: the decode batch an engine's KV pool holds (its pool share of HBM
less the weights, the rule ``bench``'s full-memory loop applies), one row per deployment on
the Pareto front, each naming its engine, and decode batches above an engine's CUDA-graph
limit flagged as running eager.

The pool is checked against a hand computation from the engine's own memory figures
(``evaluate``: weights, KV and activations per GPU) and the profile's cited share
(``configs/serving_engines.toml``: SGLang on H200 ``--mem-fraction-static 0.82``, IMAX_SH
dsr1_fp8_h200.sh); the graph limit against the profile's cited value (TensorRT-LLM
``cuda_graph_config max_batch_size 128``, IMAX_SH dsr1_fp8_h200_trt.sh).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from click.testing import CliRunner

import inference_factory as inf
from inference_factory.analysis.full_memory import engine_pool_tokens, sequences_held
from inference_factory.analysis.plan import plan
from inference_factory.analysis.plan.engines import eager_note
from inference_factory.cli import cli
from inference_factory.specs import load_hardware
from inference_factory.specs.engines import resolve_serving_engine

from tests.cli_helpers import ok

ISL, OSL = 8192, 1024


def test_pool_rule_by_hand():
    # (0.85 x 180 GB - 100 GB) / 100 kB a token = 530,000 tokens; 530,000 / 9,216 -> 57
    k = engine_pool_tokens(0.85, hbm_bytes=180e9, weight_bytes=100e9, bytes_per_token=1e5,
                           model_pool_tokens=5.0)
    assert k == pytest.approx(530_000.0, rel=1e-12)
    assert sequences_held(k, 9216.0) == 57.0
    # no share stated: the memory model's pool; weights above the share: an empty pool
    assert engine_pool_tokens(None, hbm_bytes=180e9, weight_bytes=100e9, bytes_per_token=1e5,
                              model_pool_tokens=5.0) == 5.0
    assert engine_pool_tokens(0.5, hbm_bytes=180e9, weight_bytes=100e9,
                              bytes_per_token=1e5, model_pool_tokens=5.0) == 0.0
    assert sequences_held(np.inf, 9216.0) == np.inf


@functools.lru_cache(maxsize=None)
def _h200_plan():
    return plan("DeepSeek-V3", "H200-SXM", gpus=8, isl=ISL, osl=OSL, tpot_s=0.03,
                shapes=[{"tp": 8, "dp": 1, "ep": 1}], precision="low", draft_depth=(2,),
                batch_size=(48, 64, 96, 192, 192), modes=("aggregated",),
                engine=["sglang", "trtllm"])


def test_sglang_pool_share_bounds_the_batch():
    c = _h200_plan().candidates
    # by hand: the engine's memory at batch 1 (weights, KV and activations per GPU) with the
    # draft (depth 2) and without it (depth 0: the target alone)
    prec = {k: c[k].iloc[0] for k in ("weight_precision", "moe_precision", "kv_precision")}
    got = {d: inf.evaluate("DeepSeek-V3", "H200-SXM", tp=8, **prec, batch_size=1,
                           draft_depth=d, prompt_len=ISL, kv_len=ISL + OSL / 2,
                           final_len=ISL + OSL, acceptance_by_position=[0.8, 0.576],
                           variables=["weight_bytes_per_gpu", "kv_bytes_per_gpu",
                                      "activation_bytes_per_gpu"]) for d in (0, 2)}
    hbm = load_hardware("H200-SXM").hbm_capacity_bytes
    # SGLang 0.5.6 on H200: 0.82 (IMAX_SH) of HBM less the target's weights, over the
    # target's KV a token (the MTP draft's weights and KV come from the rest: SGL056
    # scheduler.py lines 316-347), in one-token pages; a request holds its final length
    # plus its activations in tokens (at the bytes a token takes with the draft)
    per_token = {d: float(got[d]["kv_bytes_per_gpu"]) / (ISL + OSL) for d in (0, 2)}
    pool = math.floor((0.82 * hbm - float(got[0]["weight_bytes_per_gpu"])) / per_token[0])
    overhead = float(got[2]["activation_bytes_per_gpu"]) / per_token[2]
    held = math.floor(pool / (ISL + OSL + overhead))
    assert 48 <= held < 96                        # the case separates the two grid points
    sg = c[c["engine"] == "sglang-0.5.6"]
    assert set(sg["kv_pool_max_batch"]) == {float(held)}
    big = sg[sg["batch_size"] > held]
    assert len(big) and not big["fits"].any() and not big["meets_slo"].any()
    assert (big["reason"].str.contains("KV pool")
            | big["reason"].eq("does not fit in HBM")).all()
    assert sg.loc[sg["batch_size"] == 96, "reason"].str.contains(
        "sglang-0.5.6's KV pool").all()
    # the draft in the pool (the rule before) holds fewer
    both = math.floor((0.82 * hbm - float(got[2]["weight_bytes_per_gpu"])) / per_token[2])
    assert math.floor(both / (ISL + OSL + overhead)) < held
    # TensorRT-LLM states no share: the memory model's fit (HBM less its 10 % reserve) holds,
    # so its batch of 96 still fits where SGLang's does not
    tr = c[c["engine"] == "trtllm-1.3"]
    assert tr.loc[tr["batch_size"] == 96, "fits"].all()
    assert (tr["kv_pool_max_batch"] == tr["max_batch_size"]).all()


def test_front_one_row_per_deployment_each_naming_its_engine():
    r = _h200_plan()
    f = r.front
    assert f["engine"].notna().all() and f["engine_version"].notna().all()
    key = ["engine", "mode", "tp", "dp", "ep", "precision", "batch_size", "draft_depth"]
    # the search lists batch 192 twice: the candidates carry both, the front one
    assert not f[key].astype(str).duplicated().any()


def test_graph_limit_flags_eager_batches():
    eng = resolve_serving_engine("trtllm", "engine", hardware="H200-SXM")
    assert eng.supports.cuda_graph_max_batch == 128    # IMAX_SH dsr1_fp8_h200_trt.sh
    assert list(eng.runs_eager([1, 128, 129, 512])) == [False, False, True, True]
    assert eager_note(eng, [64, 128]) == ""
    assert "above 128 per rank (up to 192)" in eager_note(eng, [64, 192])
    # ATOM states no limit: never flagged
    atom = resolve_serving_engine("atom", "engine", hardware="MI355X")
    assert not atom.runs_eager([4096]).any()
    c = _h200_plan().candidates
    tr = c[c["engine"] == "trtllm-1.3"]
    assert (tr["runs_eager"] == (tr["batch_size"] > 128)).all()


def test_cli_front_names_engine_and_eager(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = ok(CliRunner().invoke(cli, [
        "plan", "-m", "gpt-oss-120b", "-H", "B200", "--gpus", "8", "--isl", "1024", "--osl",
        "1024", "--tpot", "30ms", "--engine", "trtllm", "-p", "tp=4,ep=4",
        "--emit-launch", "go.sh"]))
    front = out.split("Pareto front")[1]
    lines = front.splitlines()
    head = next(x for x in lines if x.startswith("device")).split()
    assert head[:4] == ["device", "engine", "mode", "prec"]
    rows = [x.split() for x in lines if x.startswith("B200 ")]
    # every row names its engine; a batch above TensorRT-LLM's 128 is starred as eager
    assert rows and all(r[1] == "trtllm-1.3" for r in rows)
    assert all(r[2].endswith("*") == (int(r[7]) > 128) for r in rows)
    assert "*: the decode batch per rank is above the engine's CUDA-graph limit" in front
    # the recommendation's batch per rank is above TensorRT-LLM's 128: said under its
    # command and in the script
    script = (tmp_path / "go.sh").read_text()
    assert ("# note: trtllm-1.3 on B200 runs a decode batch above 128 per rank"
            in script) == (int(out.split("\nbatch")[1].split()[0]) > 128)


def _bench_held(monkeypatch, hardware, **deployment):
    """The requests ``bench``'s full-memory state says the engine's pool holds (its
    ``held``, captured from the closed loop's call)."""
    import inference_factory.analysis.full_memory as fm

    seen = []
    real = fm.full_memory_state

    def spy(*a, **k):
        out = real(*a, **k)
        seen.append(out["held"])
        return out
    monkeypatch.setattr(fm, "full_memory_state", spy)
    inf.bench("DeepSeek-V3", hardware, tp=8, isl=ISL, osl=OSL, range_ratio=0.8,
              concurrency=[16], as_frame=True, **deployment)
    assert seen
    return float(seen[-1][0])


@pytest.mark.parametrize("hardware,engine,draft", [
    ("H200-SXM", "sglang", 2),      # draft outside the pool, one-token pages
    ("B200", "sglang", 2),          # 64-token pages (trtllm_mla)
    ("MI300X", "sglang", 0),        # aiter: 0.8 x 0.85 above a context of 8192
])
def test_plan_pool_is_bench_pool(monkeypatch, hardware, engine, draft):
    # one deployment, two commands, one rule: plan's kv_pool_max_batch is what bench's
    # full-memory state says the pool holds
    r = plan("DeepSeek-V3", hardware, gpus=8, isl=ISL, osl=OSL, tpot_s=0.03,
             shapes=[{"tp": 8, "dp": 1, "ep": 1}], precision="low", draft_depth=(draft,),
             batch_size=(32,), modes=("aggregated",), engine=[engine], overlap=["none"])
    row = r.candidates.iloc[0]
    assert row["kv_pool_max_batch"] < row["max_batch_size"]      # the engine's pool binds
    prec = {k: row[k] for k in ("weight_precision", "moe_precision", "kv_precision")}
    held = _bench_held(monkeypatch, hardware, engine=engine, draft_depth=draft, **prec)
    assert row["kv_pool_max_batch"] == held


def test_aiter_shrinks_the_rocm_pool_above_8k_context():
    # SGL0512 server_args.py lines 2805-2807: aiter x 0.85 where the context is above 8192
    from inference_factory.analysis.full_memory import pool_memory_fraction

    eng = resolve_serving_engine("sglang", "engine", hardware="MI300X")
    pool = eng.kv_pool
    assert (eng.kv_memory_fraction, pool.memory_fraction_factor,
            pool.memory_fraction_factor_above_context) == (0.8, 0.85, 8192)
    assert pool_memory_fraction(0.8, pool, 163840) == pytest.approx(0.68, rel=1e-15)
    assert pool_memory_fraction(0.8, pool, 8192) == 0.8
    assert pool_memory_fraction(None, pool, 163840) is None
    # SGLang on CUDA and vLLM state none
    for name, hw in (("sglang", "H200-SXM"), ("vllm", "MI300X")):
        e = resolve_serving_engine(name, "engine", hardware=hw)
        assert pool_memory_fraction(0.9, e.kv_pool, 163840) == 0.9
