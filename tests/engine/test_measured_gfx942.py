"""gfx942 (MI300X / MI325X) measured components beyond AITER's GEMM tables.

Reference values: AMD's published rccl-tests all_reduce_perf run on 8 MI300X (github ROCm/ROCm
e396b4898, docs/how-to/rocm-for-ai/training/prerequisite-system-validation.rst and its image
rccl-tests-1-mpi-process-per-gpu.png), transcribed in
calibration/data/rccl_tests_all_reduce_8x_mi300x.txt; AITER's DeepSeek-V3 fused-MoE rows at 304
CUs (ROCm/aiter e4048607a5, aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_ds_v3.csv,
tuned on MI325X in commit 84493f0e5b); AMD's MoE benchmarking run on an 'mi300' (ROCm/aiter
6f7d20bc55, tag archive/benchmarking,
op_tests/moe_benchmarking_profiling/results/mi300_benchmark_best_kernels.csv); AITER's measured causal BF16 prefill attention on MI300X
(ROCm/aiter e4048607a5, op_tests/cpp/mha/README.md, FWD TFLOPS table, MI300X column; FLOP count
of op_tests/cpp/mha/benchmark_mha_fwd.cpp), and its MI355X column beside it (gfx950, same table).
"""

import importlib.util

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import measured as M
from pathlib import Path

from inference_factory.specs import data_dir

from .test_measured import _leave_one_out

ROOT = Path(__file__).resolve().parents[2]      # the repository (calibration/ is not installed)
LOG = ROOT / "calibration" / "data" / "rccl_tests_all_reduce_8x_mi300x.txt"


def _extractor():
    spec = importlib.util.spec_from_file_location(
        "extract_rccl_tests", ROOT / "calibration" / "extract_rccl_tests.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rccl_transcription_reproduces_the_printed_bandwidths():
    """The hand transcription of AMD's screenshot is checked against itself: per row and per
    mode, algbw = size / time and busbw = algbw x 2 (n-1)/n (rccl-tests' all-reduce factor, n
    = 8) within the printed 0.01 GB/s rounding, and the mean busbw over all 62 values is the
    'Avg bus bandwidth : 111.38' the run prints."""
    rows = _extractor().parse_log(LOG.read_text())
    assert len(rows) == 31 and rows[0]["size"] == 8 and rows[-1]["size"] == 8589934592
    bus = []
    for r in rows:
        for t, alg, busbw in (r["oop"], r["ip"]):
            want = r["size"] / (t * 1e-6) / 1e9
            assert alg == pytest.approx(want, abs=0.006 + 2e-3 * want), r
            assert busbw == pytest.approx(want * 2 * 7 / 8, abs=0.006 + 3e-3 * want), r
            bus.append(busbw)
    assert np.mean(bus) == pytest.approx(111.38, abs=0.005)


def test_mi300x_allreduce_table_is_the_log():
    """The written table: sizes >= 512 B, the faster of out-of-place / in-place per size."""
    mod = _extractor()
    rows = mod.table_rows(mod.parse_log(LOG.read_text()), 8, "rccl-tests ae3e635")
    df = M.tables_for(inf.load_hardware("MI300X")).rows("allreduce").to_frame()
    assert len(df) == len(rows) == 25
    assert list(df.message_bytes.astype(int)) == [r[2] for r in rows]
    assert np.allclose(df.latency_us.astype(float), [float(r[4]) for r in rows])
    assert set(df.kernel) == {"nccl"} and set(df.num_gpus.astype(int)) == {8}
    # 16 KB: 13.41 us out-of-place, 15.18 in-place
    assert float(df[df.message_bytes == 16384].latency_us.iloc[0]) == 13.41


def test_mi300x_allreduce_leave_one_out():
    """Component check: the RCCL curve predicts each left-out size from its neighbours with
    median |ln(pred/measured)| <= 0.15 (the bar of every measured family)."""
    tabs = M.DeviceTables(data_dir("hardware") / "measured" / "MI300X",
                          inf.load_hardware("MI300X"))
    errs = _leave_one_out(tabs.rows("allreduce").to_frame(), M.FAMILIES["allreduce"])
    assert errs.size >= 20
    assert float(np.median(errs)) <= 0.15, float(np.median(errs))


@pytest.mark.parametrize("device", ["MI300X", "MI325X"])
def test_tp8_allreduce_at_a_measured_size_is_the_rccl_time(device):
    """Llama-3.1-70B decode at batch 1, TP8: each all-reduce moves 8192 x 2 B = 16 KB, a
    measured size: 80 layers x 13.41 us per all-reduce op, source 'measured'. MI325X has the
    same xGMI links (448 GB/s) and reads MI300X's tables: the same time."""
    ds = inf.evaluate("Llama-3.1-70B", device, tp=8, batch_size=1, kv_len=2048, detail="ops")
    for op in ("allreduce_attn", "allreduce_ffn"):
        assert float(ds.decode_op_time_s.sel(op=op)) == pytest.approx(80 * 13.41e-6, rel=1e-9)
        assert set(np.unique(ds.decode_op_source.sel(op=op).values)) == {"measured"}


def test_nvidia_allreduce_still_reads_custom_rows():
    """The collective-library fallback is read only where a device has no custom all-reduce
    rows: H200 at TP8 keeps SGLang's custom all-reduce at 16 KB: 3.511 us (its table's 3.488 us
    there, lifted to the 4 KB row's 3.511 by the non-decreasing latency envelope), not NCCL's
    18.3 us."""
    ds = inf.evaluate("Llama-3.1-70B", "H200-SXM", tp=8, batch_size=1, kv_len=2048,
                      detail="ops")
    assert float(ds.decode_op_time_s.sel(op="allreduce_attn")) == pytest.approx(
        80 * 3.511e-6, rel=1e-9)


def test_deepseek_moe_rows_at_304_cus_are_aiters():
    """AITER's DeepSeek-V3 fused MoE at 304 CUs (33 local experts = 32 + the fused shared
    expert, top-9, inter_dim 2048, the EP8 rank) is in the MI300X table (its stored stage errors,
    17-25 %, no longer drop it), written for EP8 as 264 experts and 8 x token tokens: token 1 =
    99.21 us (us1 60.1451 + us2 39.0649 in the AITER row)."""
    df = M.tables_for(inf.load_hardware("MI300X")).rows("moe").to_frame()
    row = df[(df.hidden_size == 7168) & (df.num_experts == 264) & (df.moe_ep == 8)
             & (df.num_tokens == 8)]
    assert len(row) == 1 and float(row.latency_us.iloc[0]) == pytest.approx(99.21)
    ds3 = df[df.hidden_size == 7168]
    assert (ds3.version == "e4048607a5").sum() == 15 * 7    # 15 token counts x 7 partitions
    # and AMD's MoE benchmarking run: TP8 and top-9 at 11 token counts, TP4 at 7, x 7 partitions
    assert (ds3.version == "6f7d20bc55").sum() == (11 + 11 + 7) * 7


def test_deepseek_ep8_moe_reads_the_deepseek_rows():
    """DeepSeek-V3 at TP8 / EP8 on MI300X, batch 8 (8 tokens entering the EP group, the row's
    token = 1 per rank): the MoE op's nearest measured shape is AITER's DeepSeek row (99.21 us
    for 9 experts per token: 8 routed + the fused shared one), scaled by the roofline ratio of
    the op's own shape (8 routed experts per token, 256 experts; the engine costs the shared
    expert as its own GEMMs): ~8/9 x 99.21 = 88.2 us per layer (within 5 %: the roofline's
    distinct-expert count is not exactly linear), labelled extrapolated (nearest keys differ)."""
    m = inf.load_model("DeepSeek-V3")
    ds = inf.evaluate(m, "MI300X", tp=8, ep=8, batch_size=8, kv_len=2048, detail="ops",
                      expert_skew=0.0)
    per_layer = float(ds.decode_op_time_s.sel(op="moe")) / m.n_moe_layers
    assert per_layer == pytest.approx(99.21e-6 * 8 / 9, rel=0.05)
    assert set(np.unique(ds.decode_op_source.sel(op="moe").values)) == {"extrapolated"}


def test_footing_names_the_amd_tables():
    """What plan's footing line and roofline's 'tables' row print: the backends that measured
    each device's tables (the AMD ones by name), with versions and tables in detail."""
    from inference_factory.analysis.plan.footing import measured_tables

    assert measured_tables("MI300X") == "aiter, rccl"
    assert measured_tables("MI325X") == "aiter, rccl"        # MI300X's tables
    assert measured_tables("MI355X") == "aiter"
    assert measured_tables("H20-96GB") == ""
    assert measured_tables("MI300X", detail=True) == (
        "aiter 0.1.7.post2.dev18/6f7d20bc55/e4048607a5 (attention_prefill, gemm, moe); rccl "
        "rccl-tests ae3e635 (allreduce)")


# ---- prefill attention: AITER's CK MHA benchmark README (MI300X and MI355X columns) ----------

def _prefill_rows(device="MI300X"):
    return M.tables_for(inf.load_hardware(device)).rows("attention_prefill").to_frame()


@pytest.mark.parametrize("device,tflops_small,tflops_large", [
    ("MI300X", 130.62, 552.78),
    # the README's MI355X column of the same two rows (233.12 and, at batch 8, 64 / 4 heads,
    # seqlen 8192 causal, 1318.92; its non-causal row is 1324)
    ("MI355X", 233.12, 1318.92),
])
def test_prefill_attention_rows_are_the_readme_tflops(device, tflops_small, tflops_large):
    """Each row is benchmark_mha_fwd.cpp's FLOP count over the README's TFLOPS, by hand:
    batch 1, 32 / 8 heads, seqlen 1024, hdim 128, causal: 1 x 32 x (2 x 1024^2 x 128 x 2) / 2
    = 8.59e9 FLOP at 130.62 TFLOPS = 65.76 us on MI300X (233.12: 36.85 us on MI355X); batch
    8, 64 / 4 heads, seqlen 8192 at 552.78 TFLOPS: 8 x 64 x 4 x 8192^2 x 128 / 2 / 552.78e12
    = 15.91 ms (583.23 is its non-causal row, not kept). Only causal rows are kept: 15 in each
    of 3 head groups (batch 1, 4, 8 x seqlen 1024-10240) and 2 at 16384 tokens, 47."""
    df = _prefill_rows(device)
    assert len(df) == 47 and set(df.head_dim) == {128} and set(df.kv_dtype) == {"bf16"}

    def at(b, s, hq, hk):
        r = df[(df.batch_size == b) & (df.isl == s) & (df.num_heads == hq)
               & (df.num_kv_heads == hk)]
        assert len(r) == 1
        return float(r.latency_us.iloc[0])
    assert at(1, 1024, 32, 8) == pytest.approx(
        1 * 32 * 4 * 1024**2 * 128 / 2 / tflops_small / 1e12 * 1e6, rel=5e-4)
    assert at(8, 8192, 64, 4) == pytest.approx(
        8 * 64 * 4 * 8192**2 * 128 / 2 / tflops_large / 1e12 * 1e6, rel=5e-4)


@pytest.mark.parametrize("device", ["MI300X", "MI355X"])
def test_prefill_attention_leave_one_out(device):
    """Component check: each left-out measured point predicted from its neighbours along batch
    and seqlen: median |ln(pred/measured)| <= 0.15 (the bar of every measured family; it is
    0.036 over 44 points on MI300X, the worst 0.36, and 0.047 on MI355X, the worst 0.47, at
    the smallest shapes, where the kernel is latency-bound and its efficiency moves fastest)."""
    errs = _leave_one_out(_prefill_rows(device), M.FAMILIES["attention_prefill"])
    assert errs.size >= 40
    assert float(np.median(errs)) <= 0.15, float(np.median(errs))


def test_prefill_attention_at_a_measured_shape_is_aiters_time():
    """Llama-3.1-8B at TP1 has 32 query / 8 KV heads of 128 per GPU, a measured group: its
    prefill attention for one 1024-token prompt costs AMD's 65.76 us per layer, source
    'measured'; MI325X reads the same (compute-bound) table. Llama-3.1-70B at TP8 (8 / 1 heads,
    not measured) takes the nearest head group: 'extrapolated', never the roofline."""
    for device, us in (("MI300X", 65.76), ("MI325X", 65.76), ("MI355X", 36.85)):
        ds = inf.evaluate("Llama-3.1-8B", device, tp=1, batch_size=1, kv_len=2048,
                          prompt_len=1024, detail="ops")
        t = float(ds.prefill_op_time_s.sel(op="attention")) / 32
        assert t == pytest.approx(us * 1e-6, rel=1e-3)
        assert set(np.unique(ds.prefill_op_source.sel(op="attention").values)) == {"measured"}
    ds = inf.evaluate("Llama-3.1-70B", "MI300X", tp=8, batch_size=1, kv_len=2048,
                      prompt_len=1024, detail="ops")
    assert set(np.unique(ds.prefill_op_source.sel(op="attention").values)) == {"extrapolated"}


@pytest.mark.parametrize("device", ["MI300X", "MI355X"])
def test_mla_prefill_does_not_read_the_mha_rows(device):
    """The README's rows are MHA/GQA with QK and V head dim 128 (asm fmha_fwd_v3). DeepSeek's
    MLA prefill (QK 192, V 128) is its own family, mla_prefill, which no AMD folder has: on
    ROCm it runs other kernels (SGLang 0.5.12 on gfx950: FP8 mla_prefill_ps_asm_fwd; ATOM on
    gfx950: the OPUS hd192/v128 kernel; docs/MODEL.md), so it stays on the roofline."""
    tabs = M.tables_for(inf.load_hardware(device))
    assert tabs.has("attention_prefill") and not tabs.has("mla_prefill")
    ds = inf.evaluate("DeepSeek-V3", device, tp=8, batch_size=1, kv_len=2048, prompt_len=8192,
                      detail="ops")
    assert set(np.unique(ds.prefill_op_source.sel(op="attention").values)) == {"roofline"}


# ---- DeepSeek-V3 routed experts at TP8: AMD's MoE benchmarking run ('mi300') ----------------

@pytest.mark.parametrize("batch,per_layer_us", [
    # config 0, token 1: stage 1 asm 40.3084 + stage 2 ck 10.0729 (block_m 16) = 50.3813
    (1, 40.3084 + 10.0729),
    # config 108, token 32: stage 1 ck 165.2117 + stage 2 ck 88.9229 (block_m 16) = 254.1346,
    # faster than the best 1-stage kernel of the shape (asm, 261.507 us, config 107)
    (32, 165.2117 + 88.9229),
])
def test_deepseek_tp8_moe_is_amds_measurement(batch, per_layer_us):
    """DeepSeek-V3 at TP8 on MI300X: every rank runs all 256 experts at inter 2048 / 8 = 256
    for every token: AMD's benchmark shape (7168, 256, 256 experts, top-8, 1x128 FP8), so the
    MoE op per layer is the file's time (sum of the best stages of one block_m, by hand above;
    written %.4g), source 'measured' where it was the GLM-5.1 proxy, 'extrapolated', before."""
    m = inf.load_model("DeepSeek-V3")
    ds = inf.evaluate(m, "MI300X", tp=8, batch_size=batch, kv_len=2048, detail="ops")
    t = float(ds.decode_op_time_s.sel(op="moe")) / m.n_moe_layers
    assert t == pytest.approx(per_layer_us * 1e-6, rel=1e-3)
    assert set(np.unique(ds.decode_op_source.sel(op="moe").values)) == {"measured"}


def test_deepseek_tp8_moe_line_leave_one_out():
    """Component check on the new line alone (fp8_block, 7168 x 2048 / TP8, 256 experts,
    top-8, 1-1024 tokens): each interior token count predicted from its neighbours, median
    |ln| <= 0.15 (0.076 over 9 points)."""
    df = M.tables_for(inf.load_hardware("MI300X")).rows("moe").to_frame()
    line = df[(df.dtype == "fp8_block") & (df.hidden_size == 7168) & (df.inter_size == 2048)
              & (df.num_experts == 256) & (df.topk == 8) & (df.moe_tp == 8)]
    assert len(line) == 11
    errs = _leave_one_out(line, M.FAMILIES["moe"])
    assert errs.size == 9 and float(np.median(errs)) <= 0.15, errs
