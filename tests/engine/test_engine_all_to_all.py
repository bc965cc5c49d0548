"""The EP dispatch / combine follows the serving engine's stated all-to-all
(configs/serving_engines.toml ``supports.all_to_all``): DeepEP's tables for SGLang, NCCL
all-gather + reduce-scatter for TensorRT-LLM off NVL72 and vLLM (aiconfigurator git 095f58a5,
aic-core/rust/aiconfigurator-core/src/operators/moe_dispatch.rs, TrtllmAlltoall), TRT-LLM's
NVLink all-to-all on GB200. Reference values: NCCL 2.29.2 rows of hardware/measured/B200/nccl.csv
(all_gather 8 GPUs 524288 B: 19.17 us; reduce_scatter 8 GPUs 1048576 B: 20.37 us)."""

import json

import pytest
from click.testing import CliRunner

import inference_factory as inf
from inference_factory.cli.main import cli
from inference_factory.engine import resolve_realism
from inference_factory.errors import SpecError
from inference_factory.kernels import comm as kcomm
from inference_factory.specs import engines as E
from inference_factory.specs.engines import resolve_serving_engine

# Mixtral-8x7B (H = 4096, 32 MoE layers), 16 tokens per DP rank, DP 8 x EP 8: the all-gather
# buffer is 16 x 8 x 4096 x 1 B (fp8) = 524288 B and the reduce-scatter's x 2 B (bf16)
# = 1048576 B, both measured rows
POINT = dict(tp=1, dp=8, ep=8, batch_size=16, kv_len=1024)


def _decode_ops(engine, hardware="B200", model="Mixtral-8x7B", **kw):
    rl = resolve_realism(False, "measured")
    if engine:
        rl = rl.for_engine(resolve_serving_engine(engine, "engine", hardware=hardware))
    ds = inf.evaluate(model, hardware, realism=rl, detail="ops", **{**POINT, **kw})
    t = ds["decode_op_time_s"]
    return {str(o): float(t.sel(op=o)) for o in ds.op.values}


def test_ring_allgather_and_gather_buffer_by_hand():
    # (n-1)/n M / W + alpha: 7/8 x 8 MB / 800 GB/s + 5 us = 8.75 + 5 us
    assert kcomm.ring_allgather_s(message_bytes=8e6, n_ranks=8, link_bytes_per_s=800e9,
                                  latency_s=5e-6) == pytest.approx(13.75e-6, rel=1e-12)
    assert kcomm.ring_allgather_s(message_bytes=8e6, n_ranks=1, link_bytes_per_s=800e9,
                                  latency_s=5e-6) == 0.0
    # half a ring all-reduce of the same buffer, latency aside
    assert 2 * kcomm.ring_allgather_s(message_bytes=8e6, n_ranks=8, link_bytes_per_s=800e9,
                                      latency_s=0.0) == pytest.approx(
        kcomm.ring_allreduce_s(message_bytes=8e6, n_ranks=8, link_bytes_per_s=800e9,
                               latency_s=0.0), rel=1e-12)
    assert kcomm.ep_gather_scatter_bytes(tokens_per_rank=16, dp_ranks=8, hidden_size=4096,
                                         bytes_per_elem=1.0) == 524288


def test_trtllm_on_b200_gathers_with_nccl_at_the_measured_rows():
    ops = _decode_ops("trtllm")
    # at a measured message the interpolation returns the row (the latency envelope along the
    # message size can only raise a node: a smaller message measured slower)
    assert ops["dispatch"] / 32 == pytest.approx(19.17e-6, rel=0.02)
    assert ops["combine"] / 32 == pytest.approx(20.37e-6, rel=0.02)


def test_vllm_gathers_too_and_sglang_runs_deepep_as_without_an_engine():
    none, sgl, vllm, trt = (_decode_ops(e) for e in (None, "sglang", "vllm", "trtllm"))
    assert sgl["dispatch"] == none["dispatch"] and sgl["combine"] == none["combine"]
    assert vllm["dispatch"] == pytest.approx(trt["dispatch"], rel=1e-12)
    assert trt["dispatch"] != pytest.approx(none["dispatch"], rel=0.02)


def test_gb200_trtllm_keeps_the_nvlink_table_and_sglang_takes_deepep():
    kw = dict(hardware="GB200", model="DeepSeek-V3", batch_size=64)
    none, trt, sgl = (_decode_ops(e, **kw) for e in (None, "trtllm", "sglang"))
    assert trt["dispatch"] == none["dispatch"] and trt["combine"] == none["combine"]
    assert sgl["dispatch"] != pytest.approx(none["dispatch"], rel=1e-3)


def test_roofline_takes_the_engine():
    args = ["roofline", "-m", "Mixtral-8x7B", "-H", "B200", "--tp", "1", "--dp", "8", "--ep", "8",
            "--batch-size", "16", "--kv-len", "1024", "--ops", "--json"]
    out = CliRunner().invoke(cli, args + ["--engine", "trtllm"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    i = d["op"].index("dispatch")
    assert d["decode_op_time_s"][i] == pytest.approx(_decode_ops("trtllm")["dispatch"], rel=1e-12)
    assert d["inputs"]["engine"] == "trtllm"


def test_an_unknown_all_to_all_is_one_line(tmp_path):
    src = open(E.data_dir("configs") / "serving_engines.toml").read()
    bad = tmp_path / "engines.toml"
    bad.write_text(src.replace('all_to_all = "DeepEP"', 'all_to_all = "DeepEPP"', 1))
    with pytest.raises(SpecError, match="all_to_all"):
        E.list_serving_engines(bad)
