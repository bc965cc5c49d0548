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


# ---- model families per engine and device ------------------------------------------------
# InferenceX (843c6254f) runs gpt-oss on MI300X only with vLLM (gptoss-fp4-mi300x-vllm), on
# MI355X with vLLM and ATOM (gptoss-fp4-mi355x-vllm, gptoss-fp4-mi355x-atom), never with
# SGLang on ROCm; vLLM's gpt-oss recipes are tensor-parallel only (tp 1-8, no ep, no dp-attn).

@pytest.mark.parametrize("hw, engines", [("MI300X", {"vllm-v1"}),
                                         ("MI355X", {"vllm-v1", "atom-0.1"})])
def test_plan_offers_gpt_oss_only_with_engines_that_run_it_there(hw, engines):
    from inference_factory.analysis.plan import plan

    c = plan("gpt-oss-120b", hw, gpus=8, isl=1024, osl=1024, tpot_s=0.03).candidates
    assert set(c["engine"]) == engines
    assert (c["dp"] == 1).all() and (c["ep"] == 1).all()      # TP only, as the recipes
    # a DeepSeek model on the same device is run by SGLang there (dsr1 recipes) and vLLM's
    # DP/EP is offered for it
    sg = resolve_serving_engine("sglang", "--engine", hardware=hw)
    assert sg.refusal(model="DeepSeek-V3", tp=8) == ""
    assert "family gpt-oss" in sg.refusal(model="gpt-oss-120b", tp=8)
    assert vllm(hw).refusal(model="DeepSeek-R1", tp=1, dp=8, ep=8) == ""    # an alias
    assert "(family deepseek-v3)" in vllm("H100-SXM").refusal(model="DeepSeek-R1", tp=8)


def test_bench_refuses_an_engine_that_does_not_run_the_model_in_one_line():
    from click.testing import CliRunner

    from inference_factory.cli import cli

    r = CliRunner().invoke(cli, ["bench", "-m", "gpt-oss-120b", "-H", "MI300X", "--engine",
                                 "sglang", "-p", "tp=8", "-c", "4"])
    msg = r.output.strip()
    assert r.exit_code == 2 and len(msg.splitlines()) == 1 and "Traceback" not in msg
    assert "serving_engines.toml: engines.sglang-0.5.12-rocm.models has no gpt-oss" in msg
    assert "the families it runs there: deepseek-v3, qwen3-5" in msg
    r = CliRunner().invoke(cli, ["bench", "-m", "gpt-oss-120b", "-H", "MI300X", "--engine",
                                 "vllm", "-p", "tp=1,dp=8,ep=8", "-c", "4"])
    assert r.exit_code == 2 and "engines.vllm-v1.model_supports.gpt-oss" in r.output


def test_a_model_in_no_family_and_a_like_device_are_not_refused():
    assert resolve_serving_engine("sglang", "--engine", hardware="MI300X").refusal(
        model="Llama-3.1-70B", tp=8) == ""
    # H800 has no recipe and takes H200-SXM's settings, so the families run on H200-SXM
    assert resolve_serving_engine("sglang", "--engine", hardware="H800-SXM").refusal(
        model="DeepSeek-V3", tp=8) == ""


@pytest.mark.parametrize("edit, says", [
    (('deepseek-v4 = ["MI355X"]', 'deepseek-v9 = ["MI355X"]'),
     "engines.sglang-0.5.12-rocm.models.deepseek-v9: not a family of [model_families]"),
    (('deepseek-v4 = ["MI355X"]', 'deepseek-v4 = ["B200"]'),
     "engines.sglang-0.5.12-rocm.models.deepseek-v4 = 'B200' is not a device of the profile"),
])
def test_a_bad_model_table_is_one_line_naming_file_and_field(tmp_path, edit, says):
    from inference_factory.specs.files import data_dir

    text = (data_dir("configs") / "serving_engines.toml").read_text()
    assert edit[0] in text
    p = tmp_path / "engines.toml"
    p.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(SpecError, match="engines.toml: ") as exc:
        resolve_serving_engine("sglang", "--engine", path=p, hardware="MI355X")
    assert says in str(exc.value) and "\n" not in str(exc.value)
