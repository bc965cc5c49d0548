"""Whether the TP all-reduce runs fused with the residual add and RMSNorm comes from the
serving engine's profile where a command names one (configs/serving_engines.toml
[engines.X.fused_allreduce_norm]); the library keeps reading the device's all-reduce table.

Reference values: the sources beside that block (SGLang 0.5.6 fuses only with
--enable-flashinfer-allreduce-fusion, which InferenceX's B200/B300 recipes pass and its H200
recipe does not; SGLang 0.5.12 on ROCm off by default; ATOM on by default), the hand count of
a Llama layer's small kernels (GQA 4 + SiLU 1, 2 norms inside a fused all-reduce) and the
fastest GEMM of hardware/measured/H200-SXM/gemm.csv (the kernel floor), read here with csv.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.analysis.bench import bench
from inference_factory.axes import STRUCT_AXES
from inference_factory.engine.geometry import main_layers, validate_struct
from inference_factory.engine.ops import other_kernel_count
from inference_factory.specs import data_dir
from inference_factory.specs.engines import resolve_serving_engine


@pytest.mark.parametrize("engine,device,fused", [
    ("sglang", "B200", True), ("sglang", "B300", True), ("sglang", "GB200", True),
    ("sglang", "H200-SXM", False), ("sglang", "H100-SXM", False), ("sglang", "MI300X", False),
    ("trtllm", "H200-SXM", True), ("vllm", "H200-SXM", True), ("vllm", "MI300X", False),
    ("atom", "MI355X", True), ("ideal", "B200", None)])
def test_profile_states_the_fusion_per_device(engine, device, fused):
    assert resolve_serving_engine(engine, "e", hardware=device).fused_allreduce_norm is fused


def _count(device, realism):
    m, hw = inf.load_model("Llama-3.1-70B"), inf.load_hardware(device)
    g = validate_struct(m, hw, dict(STRUCT_AXES, tp=8, weight_precision="fp8"), realism)
    return float(np.asarray(other_kernel_count(g, main_layers(m), np.asarray(1.0))))


def test_the_profile_overrides_the_table_and_the_library_keeps_it():
    """H200's all-reduce table holds SGLang's and TRT-LLM's kernels: the library fuses (4 - 2
    + 1 = 3 kernels a layer); SGLang 0.5.6's profile there does not (4 + 1 = 5); a profile
    that states nothing leaves the realism as it is (the same object)."""
    rl = inf.load_realism()
    assert _count("H200-SXM", rl) == 3.0
    sgl = rl.for_engine(resolve_serving_engine("sglang", "e", hardware="H200-SXM"))
    assert sgl.fused_allreduce_norm is False and _count("H200-SXM", sgl) == 5.0
    assert sgl is rl.for_engine(resolve_serving_engine("sglang", "e", hardware="H100-SXM"))
    assert rl.for_engine(resolve_serving_engine("ideal", "e", hardware="B200")) is rl
    # ATOM fuses on MI355X, whose RCCL-only table would not say so
    atom = rl.for_engine(resolve_serving_engine("atom", "e", hardware="MI355X"))
    assert _count("MI355X", atom) == _count("MI355X", rl) - 2.0


def test_bench_runs_the_engines_kernels():
    """Llama-3.1-70B FP8 TP8 on H200 at one client: SGLang's decode step is TRT-LLM's plus the
    two unfused RMSNorms of each of the 80 layers, each one kernel floor (2.844 us)."""
    path = data_dir("hardware") / "measured" / "H200-SXM" / "gemm.csv"
    rows = csv.DictReader(line for line in path.open() if not line.startswith("#"))
    floor_ms = min(float(r["latency_us"]) for r in rows) / 1000.0
    step = {e: float(bench("Llama-3.1-70B", "H200-SXM", tp=8, weight_precision="fp8",
                           kv_precision="fp8", isl=1024, osl=1024, concurrency=[1], engine=e,
                           as_frame=True)["decode_step_ms"].iloc[0])
            for e in ("sglang", "trtllm")}
    assert step["sglang"] - step["trtllm"] == pytest.approx(2 * 80 * floor_ms, rel=1e-9)
