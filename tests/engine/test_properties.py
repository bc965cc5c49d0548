"""Property tests: the physics every evaluation must respect (hypothesis)."""

import dataclasses

import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st

import inference_factory as inf
from inference_factory.kernels import speculative

# (model, hardware, structural kwargs): dense, GQA, MoE with TP, MLA MoE with DP+EP across nodes
SETUPS = [
    ("Llama-3.1-8B", "H100-SXM", dict()),
    ("Llama-3.1-70B", "H200-SXM", dict(tp=4)),
    ("Mixtral-8x7B", "H100-SXM", dict(tp=4)),
    ("Qwen3-30B-A3B", "B200", dict(tp=2, weight_precision="fp8")),
    ("gpt-oss-120b", "B200", dict()),
    ("DeepSeek-V3", "H800-SXM", dict(dp=32, ep=32, redundant_experts=32, expert_skew=0.8,
                                     overlap="two-batch")),
]
setup = st.sampled_from(SETUPS)
ideal = st.booleans()
sizes = st.lists(st.integers(1, 4096), min_size=2, max_size=8, unique=True).map(sorted)


@given(setup, ideal, sizes, st.integers(1, 32768))
def test_decode_step_never_falls_as_batch_grows(s, ideal, batch, ctx):
    ds = inf.evaluate(s[0], s[1], **s[2], batch_size=batch, kv_len=ctx, ideal=ideal)
    t = ds.decode_step_s.values
    assert np.all(np.diff(t) >= -1e-12 * t[:-1])


@given(setup, ideal, st.integers(1, 512), sizes)
def test_decode_step_never_falls_as_context_grows(s, ideal, batch, ctx):
    ds = inf.evaluate(s[0], s[1], **s[2], batch_size=batch, kv_len=ctx, ideal=ideal)
    t = ds.decode_step_s.values
    assert np.all(np.diff(t) >= -1e-12 * t[:-1])


@given(setup, ideal, st.integers(1, 1024), st.integers(1, 32768), st.integers(0, 3),
       st.integers(1, 16), st.integers(1, 32768))
def test_throughput_never_exceeds_rooflines(s, ideal, batch, ctx, depth, pbatch, prompt):
    m = inf.load_model(s[0])
    if depth and not m.n_mtp_modules:
        depth = 0
    hw = inf.load_hardware(s[1])
    ds = inf.evaluate(m, hw, **s[2], batch_size=batch, kv_len=ctx, draft_depth=depth,
                      prefill_batch_size=pbatch, prompt_len=prompt, ideal=ideal)
    peak = max(hw.dense_flop_per_s.values())
    for phase in ("decode", "prefill"):
        step = float(ds[f"{phase}_step_s"])
        assert step >= float(ds[f"{phase}_flop_per_gpu"]) / peak * (1 - 1e-9)
        assert step >= float(ds[f"{phase}_hbm_bytes_per_gpu"]) / hw.hbm_bw_bytes_per_s * (1 - 1e-9)


@given(st.integers(0, 12), st.floats(0, 1))
def test_tokens_per_verify_step_between_1_and_d_plus_1(d, a):
    e = speculative.expected_tokens_per_step(draft_depth=d, acceptance_rate=a)
    assert 1.0 - 1e-12 <= e <= d + 1 + 1e-9


@given(st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_tokens_per_step_sequence_bounds_and_constant_case(acc):
    d = np.arange(len(acc) + 1)
    e = speculative.expected_tokens_per_step_sequence(draft_depth=d, acceptance_by_position=acc)
    assert np.all(e >= 1) and np.all(e <= d + 1 + 1e-12) and np.all(np.diff(e) >= 0)
    const = speculative.expected_tokens_per_step_sequence(
        draft_depth=d, acceptance_by_position=[acc[0]] * len(acc))
    np.testing.assert_allclose(const, speculative.expected_tokens_per_step(
        draft_depth=d, acceptance_rate=acc[0]), rtol=1e-7)


def _scaled(hw, k):
    return dataclasses.replace(
        hw, dense_flop_per_s={p: v * k for p, v in hw.dense_flop_per_s.items()},
        measured_matmul_flop_per_s={p: v * k for p, v in hw.measured_matmul_flop_per_s.items()},
        hbm_bw_bytes_per_s=hw.hbm_bw_bytes_per_s * k,
        scale_up_bw_bytes_per_s=hw.scale_up_bw_bytes_per_s * k,
        scale_out_bw_bytes_per_s=hw.scale_out_bw_bytes_per_s * k,
        host_dram_bw_bytes_per_s=hw.host_dram_bw_bytes_per_s * k,
        nvme_bw_bytes_per_s=hw.nvme_bw_bytes_per_s * k)


@given(setup, st.integers(1, 512), st.integers(1, 16384), st.integers(1, 8192))
def test_doubling_all_rates_halves_ideal_step(s, batch, ctx, prompt):
    hw = inf.load_hardware(s[1])
    kw = dict(s[2], batch_size=batch, kv_len=ctx, prompt_len=prompt, ideal=True)
    one = inf.evaluate(s[0], hw, **kw)
    two = inf.evaluate(s[0], _scaled(hw, 2.0), **kw)
    for v in ("decode_step_s", "prefill_step_s", "ttft_s"):
        assert float(two[v]) == pytest.approx(float(one[v]) / 2, rel=1e-9)


@given(setup, ideal, st.integers(1, 8), st.integers(1, 65536),
       st.lists(st.floats(0, 0.99), min_size=2, max_size=6, unique=True).map(sorted),
       st.sampled_from(["hbm", "dram", "nvme"]))
def test_more_cache_hits_never_slow_prefill(s, ideal, pbatch, prompt, hits, tier):
    ds = inf.evaluate(s[0], s[1], **s[2], prefill_batch_size=pbatch, prompt_len=prompt,
                      cache_hit_rate=hits, cache_tier=tier, ideal=ideal)
    t = ds.prefill_step_s.values
    assert np.all(np.diff(t) <= 1e-12 * t[:-1])


@given(setup, ideal)
def test_float_ndarray_and_dataarray_inputs_agree(s, ideal):
    batch = [1, 7, 64, 300]
    kw = dict(s[2], kv_len=3000, ideal=ideal)
    as_list = inf.evaluate(s[0], s[1], batch_size=batch, **kw)
    as_array = inf.evaluate(s[0], s[1], batch_size=np.array(batch), **kw)
    as_da = inf.evaluate(s[0], s[1], batch_size=xr.DataArray(batch, dims="batch_size",
                                                             coords={"batch_size": batch}), **kw)
    for i, b in enumerate(batch):
        as_float = inf.evaluate(s[0], s[1], batch_size=float(b), **kw)
        for v in ("decode_step_s", "decode_tokens_per_s_per_gpu", "tpot_s", "max_batch_size"):
            ref = float(as_float[v])
            for ds in (as_list, as_array, as_da):
                got = ds[v].broadcast_like(ds.batch_size).values[i]
                # numpy's vectorised exp/log may differ from the scalar ones by an ulp
                assert float(got) == pytest.approx(ref, rel=1e-13, abs=0)
