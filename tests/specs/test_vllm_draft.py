"""vLLM's speculative decoding (issue 31 item 3): the vllm-v1 profile runs an MTP draft on the
devices where an InferenceX vLLM recipe runs one, launches it with vLLM's own
--speculative-config, and counts every draft token against a mixed step's token budget.

References: InferenceX (843c6254f) benchmarks/single_node/fixed_seq_len/dsv4_fp8_h200_mtp.sh
line 78 (--speculative-config '{"method":"mtp","num_speculative_tokens":2}'),
dsv4_fp4_b200_vllm_mtp.sh line 92, dsv4_fp4_b300_vllm_mtp.sh line 89, dsv4_fp8_mi300x_mtp.sh
line 106, dsv4_fp8_mi325x_mtp.sh line 99, dsv4_fp4_mi355x_vllm_mtp.sh line 81; no vLLM MTP
recipe on H100 (deprecated/minimaxm3_fp8_h100_mtp.sh runs an EAGLE3 head). vllm 0.22.0
v1/core/sched/scheduler.py lines 385-389, 498 (a running request's num_tokens_with_spec -
num_computed_tokens, drafts included, is taken from token_budget)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest
from click.testing import CliRunner

from inference_factory.analysis.bench import bench
from inference_factory.analysis.closed_loop import loop_at_batch
from inference_factory.cli.main import cli
from inference_factory.errors import SpecError
from inference_factory.specs.engines import resolve_serving_engine


def vllm(hw):
    return resolve_serving_engine("vllm", "--engine", hardware=hw)


@pytest.mark.parametrize("hw", ["H200-SXM", "B200", "B300", "MI300X", "MI325X", "MI355X"])
def test_vllm_runs_mtp_where_a_recipe_runs_it(hw):
    eng = vllm(hw)
    assert "mtp" in eng.supports.speculative
    assert eng.refusal(tp=1, dp=8, ep=8, draft_depth=2) == ""
    assert eng.refusal(tp=8, draft_depth=3) == ""


def test_vllm_refuses_a_draft_on_h100_where_no_recipe_runs_mtp():
    h100 = vllm("H100-SXM")
    assert h100.refusal(tp=8, ep=8) == ""
    assert h100.refusal(tp=8, ep=8, draft_depth=2) == "no speculative decoding"


def test_vllm_launch_carries_its_speculative_config():
    cmd = vllm("H200-SXM").launch_command("deepseek-ai/DeepSeek-V3", tp=1, dp=8, ep=8,
                                          draft_depth=2)
    words = shlex.split(cmd)                       # the shell's reading of the command
    assert words[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V3"]
    spec = json.loads(words[words.index("--speculative-config") + 1])
    assert spec == {"method": "mtp", "num_speculative_tokens": 2}
    assert "--speculative-config" not in vllm("H200-SXM").launch_command("m", tp=8)


def test_bench_runs_a_vllm_draft_on_h200_and_refuses_it_on_h100():
    kw = dict(tp=8, concurrency=[4], isl=1024, osl=256)
    off = bench("DeepSeek-V3", "H200-SXM", engine="vllm", **kw)
    on = bench("DeepSeek-V3", "H200-SXM", engine="vllm", draft_depth=2, **kw)
    assert on.attrs["engine"] == "vllm-v1"
    # a draft accepted at the bundled rate emits more than one token a step: faster per user
    assert float(on["median_tpot_ms"][0]) < float(off["median_tpot_ms"][0])
    # MiniMax-M3 (its own MTP modules) runs with vLLM on H100 (minimaxm3-fp8-h100-vllm), only
    # without a draft
    kw = dict(tp=8, ep=8, concurrency=[4], isl=1024, osl=256, weight_precision="fp8",
              moe_precision="fp8")
    assert bench("MiniMax-M3", "H100-SXM", engine="vllm", **kw).attrs["engine"] == "vllm-v1"
    with pytest.raises(SpecError, match="no speculative decoding"):
        bench("MiniMax-M3", "H100-SXM", engine="vllm", draft_depth=2, **kw)
    r = CliRunner().invoke(cli, ["bench", "-m", "MiniMax-M3", "-H", "H100-SXM", "--engine",
                                 "vllm", "-p", "tp=8,ep=8", "--weight-precision", "fp8",
                                 "--moe-precision", "fp8", "--draft-depth", "2", "-c", "4"])
    assert r.exit_code == 2 and "no speculative decoding" in r.output


def test_a_mixed_step_budget_counts_every_draft_token():
    """A decoding request takes 1 + d tokens of the step's budget whatever the acceptance:
    d = 2 at budget T is the loop of d = 0 at budget T - 2B (B = 100 decoding requests)."""
    b, budget = np.array([100.0]), 2000.0
    common = dict(tpot0_s=0.01, decode_step_s=0.025, pass_s_of=lambda k: 0.2 * np.asarray(k),
                  max_prompts=4.0, decode_tokens_per_request=255.0,
                  recv_interval_steps=np.array([1.0]), mean_prompt=4000.0)
    d2 = loop_at_batch(b, mixed_budget_tokens=budget, draft_depth=2.0, **common)
    d0 = loop_at_batch(b, mixed_budget_tokens=budget - 2 * 100.0, draft_depth=0.0, **common)
    assert float(d2["ttft_s"][0]) == pytest.approx(float(d0["ttft_s"][0]), rel=1e-12)
    # tau = 2.5 accepted tokens a step would leave 1750 prompt tokens a step, not 1700
    tau = loop_at_batch(b, mixed_budget_tokens=budget - 1.5 * 100.0, **common)
    assert float(tau["ttft_s"][0]) < float(d2["ttft_s"][0])
