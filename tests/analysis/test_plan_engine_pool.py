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
    # by hand: the engine's memory at batch 1 (weights, KV and activations per GPU)
    prec = {k: c[k].iloc[0] for k in ("weight_precision", "moe_precision", "kv_precision")}
    one = inf.evaluate("DeepSeek-V3", "H200-SXM", tp=8, **prec, batch_size=1, draft_depth=2,
                       prompt_len=ISL, kv_len=ISL + OSL / 2, final_len=ISL + OSL,
                       acceptance_by_position=[0.8, 0.576],
                       variables=["weight_bytes_per_gpu", "kv_bytes_per_gpu",
                                  "activation_bytes_per_gpu"])
    w = float(one["weight_bytes_per_gpu"])
    seq = float(one["kv_bytes_per_gpu"]) + float(one["activation_bytes_per_gpu"])
    hbm = load_hardware("H200-SXM").hbm_capacity_bytes
    held = math.floor((0.82 * hbm - w) / seq)     # SGLang 0.5.6 on H200: 0.82 (IMAX_SH)
    assert 48 <= held < 96                        # the case separates the two grid points
    sg = c[c["engine"] == "sglang-0.5.6"]
    assert set(sg["kv_pool_max_batch"]) == {float(held)}
    big = sg[sg["batch_size"] > held]
    assert len(big) and not big["fits"].any() and not big["meets_slo"].any()
    assert (big["reason"].str.contains("KV pool")
            | big["reason"].eq("does not fit in HBM")).all()
    assert sg.loc[sg["batch_size"] == 96, "reason"].str.contains(
        "sglang-0.5.6's KV pool").all()
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
    assert head[:3] == ["device", "engine", "mode"]
    rows = [x.split() for x in lines if x.startswith("B200 ")]
    # every row names its engine; a batch above TensorRT-LLM's 128 is starred as eager
    assert rows and all(r[1] == "trtllm-1.3" for r in rows)
    assert all(r[2].endswith("*") == (int(r[6]) > 128) for r in rows)
    assert "*: the decode batch per rank is above the engine's CUDA-graph limit" in front
    # the recommendation's batch per rank is above TensorRT-LLM's 128: said under its
    # command and in the script
    script = (tmp_path / "go.sh").read_text()
    assert ("# note: trtllm-1.3 on B200 runs a decode batch above 128 per rank"
            in script) == (int(out.split("\nbatch")[1].split()[0]) > 128)
