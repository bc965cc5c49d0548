"""``bench``: the closed-loop benchmark model against the engine's own step times (independent
calls of evaluate_arrays), Little's law, monotonicity, pool bounds and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from inference_factory.analysis.bench import Pool, bench
from inference_factory.engine.arrays import evaluate_arrays
from inference_factory.errors import SpecError
from inference_factory.specs.engines import resolve_serving_engine
from inference_factory.specs.realism import load_realism

LLAMA = dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8, weight_precision="fp8")
DS = dict(model="DeepSeek-V3", hardware="B200", tp=4, ep=4, weight_precision="fp4",
          moe_precision="fp4", kv_precision="fp8")
CONC = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@pytest.fixture(scope="module")
def llama():
    return bench(**LLAMA, isl=1024, osl=1024, concurrency=CONC)


@pytest.fixture(scope="module")
def ds():
    return bench(**DS, isl=8192, osl=1024, range_ratio=0.8, concurrency=CONC)


def test_concurrency_one_is_one_prefill_then_batch_one_steps():
    isl, osl = 2048, 512
    r = bench(**LLAMA, isl=isl, osl=osl, concurrency=[1])
    shape = {k: LLAMA[k] for k in ("tp", "weight_precision")}
    # the step times of the default engine's kernels on the device (SGLang 0.5.6 on H100 runs
    # the RMSNorms outside the all-reduce: configs/serving_engines.toml fused_allreduce_norm)
    rl = load_realism().for_engine(resolve_serving_engine(None, "e", hardware="H100-SXM"))
    assert rl.fused_allreduce_norm is False
    ref = evaluate_arrays(LLAMA["model"], LLAMA["hardware"], **shape, batch_size=1,
                          prefill_batch_size=1, prompt_len=isl, kv_len=isl + osl / 2,
                          final_len=isl + osl, realism=rl)
    # the default engine adds no host time per prefill pass or decode step (an ASSUMPTION in
    # configs/serving_engines.toml); the poll wait is zero when no one else is decoding
    assert float(r.median_ttft_ms[0]) == pytest.approx(float(ref["prefill_step_s"]) * 1e3,
                                                       rel=1e-9)
    assert float(r.median_tpot_ms[0]) == pytest.approx(float(ref["decode_step_s"]) * 1e3,
                                                       rel=1e-9)
    assert float(r.decode_stall_frac[0]) == 0.0 and float(r.poll_wait_ms[0]) == 0.0


@pytest.mark.parametrize("name", ["llama", "ds"])
def test_littles_law_holds_on_every_result(name, request):
    r = request.getfixturevalue(name)
    little = r.request_throughput * r.mean_e2el_ms / 1e3
    np.testing.assert_allclose(little, r.concurrency, rtol=0.02)


@pytest.mark.parametrize("name", ["llama", "ds"])
def test_throughput_rises_and_interactivity_falls_with_concurrency(name, request):
    r = request.getfixturevalue(name)
    tput, inter = r.total_token_throughput_per_gpu.values, r.interactivity.values
    assert np.all(np.diff(tput) > 0)
    assert np.all(np.diff(inter) < 0)
    assert np.all(np.diff(r.median_ttft_ms.values) >= -1e-9)


def test_saturated_engine_stops_gaining_throughput():
    # once the decode batch is at the request cap (256 per rank in the SGLang profile), more
    # clients only wait for a slot: the same throughput, a TTFT that grows with the queue
    r = bench(**LLAMA, isl=1024, osl=256, concurrency=[1024, 2048])
    assert np.all(r.decode_batch_per_rank.values == 256)
    t = r.request_throughput.values
    # 2 %: the first wave (a tenth of the run) fills the cap in a different order
    assert t[1] == pytest.approx(t[0], rel=0.02)
    assert r.median_ttft_ms.values[1] > 1.8 * r.median_ttft_ms.values[0]


def test_vllm_keys_and_units():
    r = bench(**LLAMA, isl=512, osl=128, concurrency=[4])
    for key in ("max_concurrency", "completed", "duration", "request_throughput",
                "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
                "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
                "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
                "num_gpus", "total_token_throughput_per_gpu", "output_throughput_per_gpu",
                "interactivity", "decode_binding_resource", "prefill_binding_resource"):
        assert key in r, key
    assert r.median_ttft_ms.attrs["units"] == "ms" and "long_name" in r.median_ttft_ms.attrs
    assert float(r.completed[0]) == 40                           # 10 x concurrency
    assert float(r.interactivity[0]) == pytest.approx(1e3 / float(r.median_tpot_ms[0]))
    tot = r.total_token_throughput / r.num_gpus
    np.testing.assert_allclose(tot, r.total_token_throughput_per_gpu)
    # vLLM: throughput = tokens of the run / duration
    assert float(r.output_throughput[0]) == pytest.approx(
        float(r.total_output_tokens[0] / r.duration[0]))


def test_disaggregated_throughput_is_bounded_by_the_slower_pool():
    common = dict(model="Llama-3.1-70B", hardware="H100-SXM", weight_precision="fp8",
                  isl=8192, osl=256, concurrency=[8, 64, 512])
    one_p = bench(prefill_pool=Pool(1, tp=8), decode_pool=Pool(1, tp=8), **common)
    four_p = bench(prefill_pool=Pool(4, tp=8), decode_pool=Pool(1, tp=8), **common)
    assert int(one_p.num_gpus[0]) == 16 and int(four_p.num_gpus[0]) == 40
    # prefill bound: one instance's prompts per second at its largest pass
    ref = evaluate_arrays("Llama-3.1-70B", "H100-SXM", tp=8, weight_precision="fp8",
                          prompt_len=np.floor(8192 * 1.0), prefill_batch_size=np.arange(1, 3),
                          batch_size=1, kv_len=8192 + 128, final_len=8192 + 256)
    prefill_cap = max(np.arange(1, 3) / np.asarray(ref["prefill_step_s"]).reshape(-1))
    assert np.all(one_p.request_throughput.values <= prefill_cap * 1.001)
    # with one prefill instance it binds at high concurrency; four lift the bound
    assert float(one_p.request_throughput[-1]) > 0.9 * prefill_cap
    assert float(four_p.request_throughput[-1]) > 1.5 * float(one_p.request_throughput[-1])
    assert np.all(four_p.kv_transfer_ms.values > 0)


def test_engine_time_is_switchable_and_only_adds_time(ds):
    off = bench(**DS, isl=8192, osl=1024, range_ratio=0.8, concurrency=CONC, engine_time=False)
    # below the request cap the poll wait only adds time; at the cap (c = 256 here) polling
    # every 30 steps also gathers more prompts per pass, which can shorten the queue
    low = ds.concurrency.values <= 128
    assert np.all(off.median_ttft_ms.values[low] <= ds.median_ttft_ms.values[low] + 1e-9)
    # throughput: from c = 32 the gathered passes (1.8 prompts each) outweigh the wait
    few = ds.concurrency.values <= 16
    assert np.all(off.total_token_throughput_per_gpu.values[few]
                  >= ds.total_token_throughput_per_gpu.values[few] * (1 - 1e-9))
    assert np.all(off.prefill_prompts_per_pass.values <= ds.prefill_prompts_per_pass.values)
    # what remains is the residual of the step in progress: half a step at most
    assert np.all(off.poll_wait_ms.values <= off.decode_step_ms.values / 2 + 1e-9)
    assert np.all(ds.poll_wait_ms.values[1:] > off.poll_wait_ms.values[1:])


def test_results_are_deterministic(ds):
    again = bench(**DS, isl=8192, osl=1024, range_ratio=0.8, concurrency=CONC)
    np.testing.assert_array_equal(again.p99_ttft_ms.values, ds.p99_ttft_ms.values)


@pytest.mark.parametrize("kwargs, message", [
    (dict(concurrency=[0]), "concurrency = 0"),
    (dict(concurrency=[2, 2]), "each value once"),
    (dict(range_ratio=1.5), "range_ratio"),
    (dict(isl=200_000), "exceeds"),
    (dict(prefill_pool=Pool(1, tp=8)), "needs both"),
    (dict(prefill_pool={"tp": 8, "pp": 2}, decode_pool={"tp": 8}), "unknown key 'pp'"),
    (dict(engine="sglang-9"), "not a profile"),
    (dict(tp=2.5), "tp = 2.5"),
])
def test_bad_input_is_one_clear_error(kwargs, message):
    with pytest.raises(SpecError, match=message):
        bench(**{**LLAMA, **kwargs})


def test_a_deployment_that_does_not_fit_says_so():
    with pytest.raises(SpecError, match="does not fit"):
        bench("DeepSeek-V3", "H100-SXM", tp=1, concurrency=[1])


def test_bands_hold_the_point_and_the_structure_term_only_widens():
    kw = dict(**LLAMA, isl=1024, osl=256, concurrency=[4, 64])
    full = bench(**kw, uncertainty=True)
    comp = bench(**kw, uncertainty="components")
    for name in ("total_token_throughput_per_gpu", "median_tpot_ms", "median_ttft_ms",
                 "interactivity"):
        lo, p, hi = (full[f"{name}_low"].values, full[name].values, full[f"{name}_high"].values)
        assert np.all(lo <= p) and np.all(p <= hi) and np.all(hi > lo)
        # the point is the point without bands; the structure term widens the components'
        np.testing.assert_allclose(p, bench(**kw)[name].values)
        assert np.all(full[f"{name}_low"].values <= comp[f"{name}_low"].values + 1e-12)
        assert np.all(full[f"{name}_high"].values >= comp[f"{name}_high"].values - 1e-12)
    # interactivity's band is the TPOT band inverted
    np.testing.assert_allclose(full.interactivity_low, 1e3 / full.median_tpot_ms_high)
    again = bench(**kw, uncertainty=True)
    np.testing.assert_array_equal(again.p99_ttft_ms_high.values, full.p99_ttft_ms_high.values)


def test_a_saturated_prefill_pool_bounds_the_run_at_any_concurrency():
    common = dict(model="Llama-3.1-70B", hardware="H100-SXM", weight_precision="fp8",
                  isl=8192, osl=256, concurrency=[512, 2048, 8192])
    r = bench(prefill_pool=Pool(1, tp=8), decode_pool=Pool(1, tp=8), **common)
    ref = evaluate_arrays("Llama-3.1-70B", "H100-SXM", tp=8, weight_precision="fp8",
                          prompt_len=8192.0, prefill_batch_size=np.arange(1, 3),
                          batch_size=1, kv_len=8192 + 128, final_len=8192 + 256)
    prefill_cap = max(np.arange(1, 3) / np.asarray(ref["prefill_step_s"]).reshape(-1))
    assert np.all(r.request_throughput.values <= prefill_cap * 1.001)
    assert np.all(r.prefill_busy_frac.values < 1.0)
    # the surplus clients wait: TTFT grows with them
    assert np.all(np.diff(r.median_ttft_ms.values) > 0)
    # no poll wait on a prefill-only server (it polls after every pass and when idle)
    one = bench(prefill_pool=Pool(1, tp=8), decode_pool=Pool(1, tp=8),
                **{**common, "concurrency": [1]})
    assert float(one.poll_wait_ms[0]) == 0.0


def test_dp_attention_divides_the_request_cap_and_the_pass_budget():
    # SGLang: max_running_requests // dp_size and chunked_prefill_size // dp_size under DP
    # attention (tp_worker.py, server_args._handle_data_parallelism)
    r = bench("DeepSeek-V3", "H200", dp=8, ep=8, isl=1024, osl=1024, concurrency=[4096])
    assert float(r.decode_batch_per_rank[0]) <= 256 / 8 + 1e-9
    assert float(r.prefill_prompts_per_pass[0]) <= (32768 / 8) / 1024 + 1e-9


def test_itl_is_a_streamed_chunk_of_steps():
    # concurrency 1, no stalls: SGLang's --stream-interval 10 streams every 10 steps, so the
    # median ITL is 10 decode steps, with or without a draft (then 10 x tau tokens a chunk)
    for depth in (0, 2):
        r = bench(**DS, isl=1024, osl=512, concurrency=[1], draft_depth=depth)
        assert float(r.median_itl_ms[0]) == pytest.approx(10 * float(r.decode_step_ms[0]),
                                                          rel=1e-9)


def test_fewer_prompts_than_clients_is_refused():
    with pytest.raises(SpecError, match="num_prompts = 5 must be at least the largest"):
        bench(**LLAMA, concurrency=[4, 64], num_prompts=5)
