"""The factory layer: configs, compare/simulate, determinism, conservation, CLI."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import inference_factory as inf
from inference_factory.cli import cli
from inference_factory.factory import compare as fcompare
from inference_factory.factory.config import LEVERS, load_config
from inference_factory.factory.simulate import simulate, static_batch_efficiency
from inference_factory.factory.workload import generate_trace

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
N = 3000


def _small(path="factory.toml", n=N):
    cfg = load_config(CONFIGS / path)
    wl = dataclasses.replace(cfg.workload, n_requests=n)
    base = dataclasses.replace(cfg.baseline, workload=wl) if cfg.baseline else None
    return dataclasses.replace(cfg, workload=wl, baseline=base)


@pytest.fixture(scope="module")
def result():
    return fcompare.compare(_small())


def test_bundled_configs_load():
    for name in ("factory.toml", "baseline.toml", "static-baseline.toml", "conservative.toml",
                 "deepseek-day.toml"):
        cfg = load_config(CONFIGS / name)
        assert cfg.model == "DeepSeek-V3"
    f = load_config(CONFIGS / "factory.toml")
    # the generic baseline batches continuously and has no factory lever
    assert f.baseline is not None and f.baseline.levers.continuous_batching
    assert not any(getattr(f.baseline.levers, k) for k in LEVERS if k != "continuous_batching")
    assert (f.baseline.decode.tp, f.baseline.decode.ep) == (16, 1)
    s = load_config(CONFIGS / "static-baseline.toml")
    assert not any(getattr(s.levers, k) for k in LEVERS)
    assert all(getattr(f.levers, k) for k in LEVERS)
    c = load_config(CONFIGS / "conservative.toml")
    assert c.economics.cost_basis == "rental" and c.levers.cache_tiers == ("hbm", "dram")
    assert c.workload == f.workload          # inherited through `extends`


def test_same_config_and_seed_give_byte_identical_json():
    a = fcompare.to_json(fcompare.compare(_small(n=1500), attribution=False))
    b = fcompare.to_json(fcompare.compare(_small(n=1500), attribution=False))
    assert a == b
    cfg = _small(n=1500)
    other = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, seed=1))
    other = dataclasses.replace(other, baseline=dataclasses.replace(cfg.baseline,
                                                                     workload=other.workload))
    assert fcompare.to_json(fcompare.compare(other, attribution=False)) != a


def test_tokens_in_trace_equal_tokens_served(result):
    cfg = _small()
    trace = generate_trace(cfg.workload)
    for side in ("baseline", "factory"):
        m = result[side]
        assert m["input_tokens"] == int(trace.input_tokens.sum())
        assert m["output_tokens"] == int(trace.output_tokens.sum())
    side = simulate(cfg, trace)
    hits = side.per_request["hit_tokens"]
    assert np.all(hits >= 0) and np.all(hits <= trace.input_tokens)
    assert side.metrics["cache_hit_rate"] == pytest.approx(hits.sum() / trace.input_tokens.sum())


def test_factory_beats_baseline_and_reports_every_headline(result):
    b, f = result["baseline"], result["factory"]
    for key, _, _ in fcompare.HEADLINE:
        assert key in b and key in f, key
    assert f["decode_tokens_per_s_per_gpu"] > b["decode_tokens_per_s_per_gpu"]
    assert f["gpu_seconds_vs_baseline"] < 1.0 == b["gpu_seconds_vs_baseline"]
    assert f["cache_hit_rate"] > 0 == b["cache_hit_rate"]
    assert 1.0 <= f["speculative_tokens_per_pass"] <= 4.0 and b["speculative_tokens_per_pass"] == 1.0
    assert 0 < f["expert_efficiency"] <= 1.0
    assert f["gross_margin"] > b["gross_margin"]
    for side in (b, f):
        assert side["ttft_p50_s"] <= side["ttft_p99_s"] and side["tpot_p50_s"] <= side["tpot_p99_s"]
        assert 0.0 <= side["goodput_frac"] <= 1.0
        assert side["gpus_avg"] <= side["gpus_peak"]
        assert side["gross_margin"] == pytest.approx(
            (side["revenue_usd_per_day"] - side["cost_usd_per_day"]) / side["revenue_usd_per_day"])


def test_attribution_switches_each_lever_once(result):
    levers = [r["lever"] for r in result["attribution"]]
    # every lever, then the pool shapes (TP16 vs DP/EP144) as the pseudo-lever "parallelism"
    assert levers == list(LEVERS) + ["parallelism"]
    rows = {r["lever"]: r for r in result["attribution"]}
    f = result["factory"]
    # switching the prefix cache off the factory can only cost GPU time
    assert rows["prefix_cache"]["factory_without"]["gpu_seconds"] > f["gpu_seconds"]
    # the generic baseline has continuous batching: it is measured by switching it off there
    cb = rows["continuous_batching"]
    assert "baseline_with" not in cb
    assert (cb["baseline_without"]["decode_tokens_per_s_per_gpu"]
            < result["baseline"]["decode_tokens_per_s_per_gpu"])
    for lever in LEVERS[1:]:
        assert "baseline_with" in rows[lever] and "baseline_without" not in rows[lever]


def test_draft_depth_pays_at_small_batch_and_not_when_verify_is_compute_bound():
    """MTP on DeepSeek-V3 (EP32, 5k context): at a small batch a draft adds tokens almost for
    free (weights and KV are read once per step); at a large batch the verify step's MLA
    attention is compute-bound and every draft token costs as much as it brings."""
    ds = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=32, ep=32, redundant_experts=32,
                      kv_precision="fp8", batch_size=[8, 256], kv_len=5000,
                      draft_depth=[0, 1, 2, 3], acceptance_rate=0.85)
    rate = (ds.tokens_per_step / ds.decode_step_s).transpose("batch_size", "draft_depth").values
    assert rate[0].argmax() >= 1
    assert rate[1].argmax() == 0


def test_static_batch_efficiency_is_mean_over_max():
    assert static_batch_efficiency(np.array([10, 10, 10, 10]), 2) == 1.0
    # batches [1, 3] and [2, 2]: useful 8 slot-steps of 2x3 + 2x2 = 10
    assert static_batch_efficiency(np.array([1, 3, 2, 2]), 2) == pytest.approx(0.8)
    # batches [4, 1] and a ragged last [1], which counts its own size only: 6 of 2x4 + 1x1
    assert static_batch_efficiency(np.array([4, 1, 1]), 2) == pytest.approx(6 / 9)


def test_levers_are_independent_switches():
    cfg = _small(n=1000)
    trace = generate_trace(cfg.workload)
    full = simulate(cfg, trace).metrics
    no_spec = simulate(cfg.with_levers(cfg.levers.switched(speculative=False)), trace).metrics
    assert no_spec["speculative_tokens_per_pass"] == 1.0
    assert no_spec["cache_hit_rate"] == full["cache_hit_rate"]
    no_cache = simulate(cfg.with_levers(cfg.levers.switched(prefix_cache=False)), trace).metrics
    assert no_cache["cache_hit_rate"] == 0.0
    assert no_cache["speculative_tokens_per_pass"] == full["speculative_tokens_per_pass"]


def _write(tmp_path, text, name="bad.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("edit,expect", [
    (("[fleet]\ntarget_utilization = 0.8", "[fleet]\ntarget_utilization = 1.5"),
     "fleet.target_utilization = 1.5"),
    (("[levers]\n", "[levers]\nturbo = true\n"), "levers.turbo"),
    (("n_requests = 200000", "n_requests = \"many\""), "workload.n_requests"),
    (("price = \"deepseek-chat-2025-02\"", "price = \"free\""), "model.price = 'free'"),
    (("hardware = \"H800-SXM\"\ntp = 1\ndp = 144", "hardware = \"H9000\"\ntp = 1\ndp = 144"),
     "decode.hardware"),
    (("cache_tiers = [\"hbm\", \"dram\", \"nvme\"]", "cache_tiers = [\"tape\"]"), "levers.cache_tiers"),
    (("acceptance_rate = 0.80", "acceptance_rate = 1.80"), "acceptance_rate = 1.8"),
])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, edit, expect):
    text = (CONFIGS / "factory.toml").read_text()
    assert edit[0] in text
    text = text.replace(edit[0], edit[1], 1).replace('baseline = "baseline.toml"', "")
    path = _write(tmp_path, text)
    with pytest.raises(inf.SpecError) as ei:
        load_config(path)
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg and expect in msg


def test_cli_compare_json_and_output_file(tmp_path):
    out = tmp_path / "cmp.json"
    r = CliRunner().invoke(cli, ["compare", "--config", str(CONFIGS / "factory.toml"),
                                 "--requests", "800", "--no-attribution", "--json",
                                 "--output", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert json.loads(out.read_text()) == data
    assert set(data) >= {"baseline", "factory", "trace"}
    r = CliRunner().invoke(cli, ["compare", "--config", str(CONFIGS / "factory.toml"),
                                 "--requests", "800", "--no-attribution"])
    assert r.exit_code == 0 and "decode tokens/s per GPU" in r.output


def test_cli_simulate_and_errors(tmp_path):
    r = CliRunner().invoke(cli, ["simulate", "--config", str(CONFIGS / "conservative.toml"),
                                 "--requests", "800"])
    assert r.exit_code == 0, r.output
    assert "gross margin" in r.output
    missing = tmp_path / "nope.toml"
    r = CliRunner().invoke(cli, ["compare", "--config", str(missing)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    target = tmp_path / "sub" / "x.json"
    r = CliRunner().invoke(cli, ["simulate", "--config", str(CONFIGS / "factory.toml"),
                                 "--requests", "500", "--output", str(target)])
    assert r.exit_code == 2 and not target.exists()


@pytest.mark.parametrize("dims", [("draft_depth", "batch_size"), ("batch_size", "draft_depth"),
                                  ("batch_size",), ("draft_depth",), ()])
def test_on_grid_equals_xarray_broadcast(dims):
    """decode_grid reads engine outputs with _on_grid; it must give what xarray's transpose +
    broadcast_like give (its earlier code), for every dimension subset and order."""
    import xarray as xr
    from inference_factory.factory.simulate import _on_grid

    sizes = {"draft_depth": 3, "batch_size": 5}
    rng = np.random.default_rng(0)
    ref = xr.DataArray(np.zeros((3, 5)), dims=("draft_depth", "batch_size"))
    for values in (rng.random([sizes[d] for d in dims]),
                   np.array(["hbm", "compute", "net"] * 5)[:int(np.prod([sizes[d] for d in dims]))]
                   .reshape([sizes[d] for d in dims])):
        da = xr.DataArray(values, dims=dims)
        want = da.broadcast_like(ref).transpose("draft_depth", "batch_size").values
        np.testing.assert_array_equal(_on_grid(da, ("draft_depth", "batch_size"), (3, 5)), want)


def test_weighted_percentiles():
    from inference_factory.factory.simulate import _weighted_percentiles

    v = np.array([3.0, 1.0, 2.0, 4.0])
    assert _weighted_percentiles(v, np.ones(4), (50, 100)) == (2.0, 4.0)
    # weight concentrated on one value moves every percentile onto it
    assert _weighted_percentiles(v, np.array([0.0, 0.0, 0.0, 1.0]), (1, 50, 99)) == (4.0, 4.0, 4.0)
    # weights act as repetition counts
    w = np.array([1, 3, 1, 1])
    rep = np.repeat(v, w)
    assert _weighted_percentiles(v, w.astype(float), (50,))[0] == np.percentile(rep, 50, method="lower")


def test_tpot_percentiles_cover_the_day(result):
    f = result["factory"]
    # under a diurnal load the TPOT spread comes from the hours, even for a short trace
    assert f["tpot_p99_s"] >= f["tpot_p50_s"]
    assert f["tpot_p99_s"] <= load_config(CONFIGS / "factory.toml").tpot_slo_s * 1.0001
