"""What each engine profile runs on which device (configs/serving_engines.toml ``supports``):
vLLM's attention DP and expert parallelism (issue 31 item 3), read from vLLM 0.22.0's code and
InferenceX's vLLM recipes, and the model families an engine runs per device.

References: vllm 0.22.0 vllm/model_executor/layers/fused_moe/config.py lines 1177-1209 (with
--enable-expert-parallel, ep = tp x dp); vllm/v1/engine/core.py line 148 (one scheduler per DP
rank, each with the whole --max-num-seqs); InferenceX (843c6254f) dsv4-fp8-h200-vllm
({tp: 8, ep: 8, dp-attn: true}), dsv4_fp8_h200.sh lines 43-50 (--tensor-parallel-size 1
--data-parallel-size 8 --enable-expert-parallel)."""

from __future__ import annotations

import pytest

from inference_factory.analysis.bench import bench
from inference_factory.errors import SpecError
from inference_factory.specs.engines import resolve_serving_engine


def vllm(hw):
    return resolve_serving_engine("vllm", "--engine", hardware=hw)


def test_vllm_runs_attention_dp_and_expert_parallel_where_a_recipe_runs_them():
    h200 = vllm("H200-SXM")
    assert h200.refusal(tp=1, dp=8, ep=8) == ""
    assert h200.refusal(tp=8, ep=8) == ""           # TP attention, EP experts (TEP)
    assert h200.refusal(tp=2, dp=4) == ""           # DP attention, MoE TP over the instance
    assert h200.supports.all_to_all == "allgather_reducescatter"
    # vLLM has no EP size of its own: the experts span tp x dp GPUs
    assert "ep = tp x dp = 8, not 4" in h200.refusal(tp=1, dp=8, ep=4)
    # H100: only tp8 ep8 in a recipe (minimaxm3-fp8-h100-vllm), no attention DP
    h100 = vllm("H100-SXM")
    assert h100.refusal(tp=8, ep=8) == "" and h100.refusal(tp=1, dp=8, ep=8) == "no attention DP"
    assert vllm("B300").refusal(tp=1, dp=4, ep=4) == ""


def test_vllm_dp_ep_launch_command_is_vllms_own():
    cmd = vllm("H200-SXM").launch_command("deepseek-ai/DeepSeek-V3", tp=1, dp=8, ep=8)
    assert "--tensor-parallel-size 1 " in cmd
    assert "--data-parallel-size 8" in cmd and "--enable-expert-parallel" in cmd
    assert "--data-parallel-size" not in vllm("H200-SXM").launch_command("m", tp=8, ep=8)


def test_bench_prices_a_vllm_dp_ep_deployment_with_the_vllm_profile():
    """vLLM: each DP rank's scheduler takes the whole --max-num-seqs (256), so 1024 clients
    over 8 ranks are all in service, 128 a rank; SGLang divides its cap of 256 among the 8
    ranks (32 a rank: server_args._handle_data_parallelism)."""
    kw = dict(tp=1, dp=8, ep=8, concurrency=[1024], isl=1024, osl=256)
    v = bench("DeepSeek-V3", "H200-SXM", engine="vllm", **kw)
    s = bench("DeepSeek-V3", "H200-SXM", engine="sglang", **kw)
    assert v.attrs["engine"] == "vllm-v1"
    assert float(v["decode_batch_per_rank"][0]) == pytest.approx(1024 / 8, rel=0.02)
    assert float(s["decode_batch_per_rank"][0]) <= 256 / 8 + 1e-9
    with pytest.raises(SpecError, match="expert parallelism spans the instance"):
        bench("DeepSeek-V3", "H200-SXM", engine="vllm", tp=1, dp=8, ep=4, concurrency=[4])
