"""Issue 30, "every answer states its footing": ``roofline`` and ``simulate`` print, like
``plan`` and ``bench``, the share of GPU time on measured tables, the precisions run with any
weight-only fallback, and the engine profile with what it was written for (one mechanism,
analysis/footing.py over plan's footing_of).

Reference values: the shares are recomputed by hand from the per-op times and sources the
same run prints (``--ops --json``), and simulate's overall share from its two phases weighted
by their GPU-seconds per request (output tokens / decode rate, input tokens / prefill rate),
the weighting plan's footing states."""

from __future__ import annotations

import json

from click.testing import CliRunner

from inference_factory.cli import cli

from tests.cli_helpers import ok


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


def test_roofline_footing_is_the_share_of_op_time_per_source():
    out = json.loads(ok(run("roofline", "-m", "Llama-3.1-8B", "-H", "H200", "--batch-size",
                            "32", "--ops", "--json")))
    for phase in ("decode", "prefill"):
        t, src = out[f"{phase}_op_time_s"], out[f"{phase}_op_source"]
        total = sum(x for x in t if x is not None and x > 0)
        by_hand = {}
        for x, s in zip(t, src):
            if x is not None and x > 0:
                by_hand[s] = by_hand.get(s, 0.0) + x / total
        got = {k: v for k, v in out["footing"][phase].items() if k != "footing"}
        assert got.keys() == by_hand.keys()
        assert all(abs(got[k] - by_hand[k]) < 1e-12 for k in got)
    f = out["footing"]
    assert f["precisions"] == {"weight_precision": "bf16", "kv_precision": "bf16",
                               "attention_precision": "bf16"}      # the model's own
    assert f["tables"] == "nccl, sglang, trtllm, vllm" and f["engine"].startswith("none")
    # the one-point report (no --ops) prints the same section, within 100 columns
    text = ok(run("roofline", "-m", "Llama-3.1-8B", "-H", "H200", "--batch-size", "32"))
    sec = text[text.index("footing (each pass's op time by cost source)"):]
    assert "  decode " in sec and "  tables              nccl, sglang, trtllm, vllm" in sec
    assert "precisions          weights bf16, KV cache bf16, attention bf16" in sec
    assert max(len(x) for x in sec.splitlines()) <= 100


def test_roofline_footing_names_a_weight_only_fallback_and_a_device_without_tables():
    text = ok(run("roofline", "-m", "DeepSeek-V3", "-H", "H200", "--tp", "8", "--ep", "8",
                  "--moe-precision", "fp4"))
    flat = " ".join(text.split())
    assert "experts stored in fp4 and computed at bf16 on H200-SXM (weight-only: no fp4 " \
           "tensor cores)" in flat
    # H20 has no measured tables of its own nor a sibling's: every op on the roofline
    out = json.loads(ok(run("roofline", "-m", "Llama-3.1-8B", "-H", "H20", "--json")))
    assert out["footing"]["decode"] == {"footing": "roofline-only", "roofline": 1.0}
    assert out["footing"]["tables"] == ""


def test_simulate_states_its_footing_weighted_by_gpu_time():
    res = json.loads(ok(run("simulate", "-c", "configs/deepseek-day.toml", "--requests", "300",
                            "--json")))
    f, s = res["footing"], res["scenario"]
    n = s["requests"]
    w_d = (s["output_tokens"] / n) / s["decode_tokens_per_s_per_gpu"]
    w_p = (s["input_tokens"] / n) / s["prefill_tokens_per_s_per_gpu"]
    # footing_of rounds the mean lengths to whole tokens: within 1 token of ~thousands
    hand = (w_d * f["decode_measured_share"] + w_p * f["prefill_measured_share"]) / (w_d + w_p)
    assert abs(f["measured_share"] - hand) < 2e-3
    assert 0 < f["measured_share"] <= 1 and f["footing"] in ("measured", "partly measured",
                                                             "extrapolated")
    # H800 reads H100's tables ([measured] kernel_tables = "H100-SXM")
    assert f["tables"] == {"H800-SXM": "nccl, sglang, trtllm, vllm"}
    assert f["precisions"]["kv_precision"] == "fp8"       # the config's low-precision lever
    text = ok(run("simulate", "-c", "configs/deepseek-day.toml", "--requests", "300"))
    flat = " ".join(text.split())
    assert f"footing: {f['footing']} ({100 * f['measured_share']:.0f}% of GPU time on " \
           "measured tables" in flat
    from inference_factory.specs.engines import resolve_serving_engine
    desc = resolve_serving_engine("sglang-0.5.6", "engine").description
    assert f"engine: sglang-0.5.6 ({' '.join(desc.split())}" in flat
    assert max(len(x) for x in text[text.index("footing: "):].splitlines()) <= 100


def test_compare_states_each_sides_footing():
    """compare runs two different deployments (the generic baseline: small decode batches,
    a BF16 cache; the factory: large batches, FP8 cache): each side states its own footing,
    by the same weighting as simulate, and the engine once."""
    res = json.loads(ok(run("compare", "-c", "configs/factory.toml", "--requests", "300",
                            "--no-attribution", "--json")))
    flat = " ".join(ok(run("compare", "-c", "configs/factory.toml", "--requests", "300",
                           "--no-attribution")).split())
    for side in ("baseline", "factory"):
        f, s = res["footing"][side], res[side]
        n = s["requests"]
        w_d = (s["output_tokens"] / n) / s["decode_tokens_per_s_per_gpu"]
        w_p = (s["input_tokens"] / n) / s["prefill_tokens_per_s_per_gpu"]
        hand = (w_d * f["decode_measured_share"] + w_p * f["prefill_measured_share"]) / (w_d + w_p)
        assert abs(f["measured_share"] - hand) < 2e-3, side
        assert f["precisions"] == {k: v for k, v in s["precisions"].items()
                                   if k.endswith("_precision")}
        assert (f"{side} footing: {f['footing']} ({100 * f['measured_share']:.0f}% of GPU time "
                f"on measured tables at decode batch {s['decode_batch_per_gpu']:.0f} per GPU"
                in flat), side
    # the baseline's KV cache is BF16, the factory's FP8 (its low_precision lever)
    assert res["footing"]["baseline"]["precisions"]["kv_precision"] == "bf16"
    assert res["footing"]["factory"]["precisions"]["kv_precision"] == "fp8"
    assert flat.count("engine: sglang-0.5.6 (") == 1 and "compare uses its policy only" in flat
