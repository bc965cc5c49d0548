"""The factory's story: a fair generic baseline, levers whose sign is physically explained,
traces that size the fleet at their own rate, and DeepSeek's day as a scenario."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from inference_factory.cli import cli
from inference_factory.factory import compare as fcompare
from inference_factory.factory.config import load_config
from inference_factory.factory.levers import NO_CHANGE_REL, no_change_reasons
from inference_factory.factory.simulate import simulate, static_fill_time_s
from inference_factory.factory.workload import generate_trace, load_trace
from inference_factory.kernels import speculative as kspec
from inference_factory.specs.realism import load_realism

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
N = 2500


def _small(path="factory.toml", n=N, **workload):
    cfg = load_config(CONFIGS / path)
    wl = dataclasses.replace(cfg.workload, n_requests=n, **workload)
    base = dataclasses.replace(cfg.baseline, workload=wl) if cfg.baseline else None
    return dataclasses.replace(cfg, workload=wl, baseline=base)


@pytest.fixture(scope="module")
def result():
    return fcompare.compare(_small())


@pytest.fixture(scope="module")
def rows(result):
    return {r["lever"]: r for r in result["attribution"]}


# ---- the generic baseline -------------------------------------------------------------------

def test_generic_baseline_meets_its_slos(result):
    cfg = _small()
    b = result["baseline"]
    assert b["ttft_p99_s"] <= cfg.ttft_slo_s
    assert b["tpot_p99_s"] <= cfg.tpot_slo_s
    assert b["goodput_frac"] > 0.95
    # continuous batching lifts it far above the static one (whose batch idles on stragglers)
    assert b["static_batch_efficiency"] == 1.0


def test_static_baseline_batch_is_the_largest_meeting_the_slos():
    cfg = _small("static-baseline.toml")
    side = simulate(cfg)
    m, g = side.metrics, side.decode_grid
    assert m["ttft_p99_s"] <= cfg.ttft_slo_s and m["tpot_p99_s"] <= cfg.tpot_slo_s
    b = m["decode_batch_per_instance"] / cfg.decode.dp
    i = int(np.flatnonzero(g.batch == b)[0])
    # the static batch idles on its longest request: efficiency = mean / max output
    assert 0 < m["static_batch_efficiency"] < 0.5
    # independently: the next larger grid batch breaks the TPOT SLO (step of the output-share
    # mix, without drafts, stretched by prefill interference), the fill budget or HBM
    nxt = i + 1
    step = float(g.out_share @ g.step_s[:, 0, nxt]) * m["colocated_interference"]
    fill = static_fill_time_s(batch_sequences=g.batch[nxt] * cfg.decode.dp,
                              arrival_rate_per_s=m["arrival_rate_per_s"])
    assert step > cfg.tpot_slo_s or g.batch[nxt] > g.fits_batch_max or fill > cfg.ttft_slo_s


def test_continuous_batching_is_measured_against_the_generic_baseline(rows, result):
    cb = rows["continuous_batching"]["baseline_without"]
    # switching it off the baseline (static batches) costs throughput and money
    assert cb["decode_tokens_per_s_per_gpu"] < result["baseline"]["decode_tokens_per_s_per_gpu"] / 2
    assert cb["usd_per_mtok_output"] > result["baseline"]["usd_per_mtok_output"]


# ---- each lever's sign, physically explained ------------------------------------------------

def test_prefix_cache_lowers_gpu_seconds(rows, result):
    assert rows["prefix_cache"]["factory_without"]["gpu_seconds"] > result["factory"]["gpu_seconds"]
    assert rows["prefix_cache"]["baseline_with"]["gpu_seconds"] < result["baseline"]["gpu_seconds"]


def test_pd_split_raises_goodput_per_gpu(rows, result):
    """Colocated, prefill passes interleave with decode steps and stretch TPOT, so the
    decode batch must shrink to hold the SLO: SLO-meeting tokens/s per GPU (goodput, as
    DistServe defines it) fall without the split."""
    f = result["factory"]
    assert (rows["pd_split"]["factory_without"]["goodput_tokens_per_s_per_gpu"]
            < f["goodput_tokens_per_s_per_gpu"])
    assert f["colocated_interference"] == 1.0


def test_mtp_pays_at_tight_tpot_and_at_light_load(result):
    sp = result["lever_effects"]["speculative"]
    at30 = next(r for r in sp["tpot_curve"] if r["tpot_target_s"] == pytest.approx(0.030))
    # at 30 ms the verify step must be short: drafting multiplies the tokens per step
    assert at30["tokens_per_s_per_gpu_best_depth"] is not None
    assert (at30["tokens_per_s_per_gpu_no_draft"] is None
            or at30["tokens_per_s_per_gpu_best_depth"] > at30["tokens_per_s_per_gpu_no_draft"])
    # at a loose target the engine can grow the batch instead: the gain shrinks
    loose = sp["tpot_curve"][-1]
    assert loose["gain"] is not None and loose["gain"] < 1.1
    # at batch 1 the step reads weights once whatever the depth: per-user speed rises
    assert sp["light_load"]["speedup"] > 1.3
    assert all(d >= 1 for d in sp["light_load"]["depth_by_class"])


def test_acceptance_decay_reproduces_trtllm_mtp_accepted_lengths():
    """TensorRT-LLM DeepSeek-R1: 1.92 accepted tokens per step at MTP-1, 2.82 at MTP-3
    (serving_facts.md); the decay in realism.toml is the geometric per-position fit."""
    decay = load_realism().acceptance_decay_per_position
    acc = kspec.acceptance_by_position(first_position_acceptance=0.92, decay_per_position=decay,
                                       depth=3)
    e = kspec.expected_tokens_per_step_sequence(draft_depth=np.array([1, 3]),
                                                acceptance_by_position=acc)
    assert e[0] == pytest.approx(1.92)
    assert e[1] == pytest.approx(2.82, abs=0.01)   # decay given to two digits
    # constant acceptance would overstate MTP-3 by ~25 %
    flat = kspec.expected_tokens_per_step(draft_depth=3, acceptance_rate=0.92)
    assert flat > 3.4


def test_eplb_pays_under_the_default_skew(rows, result):
    cfg = _small()
    assert all(c.expert_skew == load_realism().default_expert_skew > 0 for c in cfg.workload.classes)
    eb = result["lever_effects"]["expert_balancing"]
    assert eb["with"]["busiest_rank_load_over_mean"] < eb["without"]["busiest_rank_load_over_mean"]
    assert eb["step_time_ratio"] < 1.0
    assert (rows["expert_balancing"]["factory_without"]["decode_tokens_per_s_per_gpu"]
            < result["factory"]["decode_tokens_per_s_per_gpu"])
    # the generic baseline has no expert parallelism: redundant experts cannot help there
    assert (rows["expert_balancing"]["baseline_with"]["decode_tokens_per_s_per_gpu"]
            == pytest.approx(result["baseline"]["decode_tokens_per_s_per_gpu"]))


def test_a_lever_that_changes_nothing_gets_one_line_naming_the_binding_resource(result):
    fake = dict(result)
    f = result["factory"]
    fake["attribution"] = [{"lever": "speculative", "factory_without": dict(
        f, usd_per_mtok_output=f["usd_per_mtok_output"] * (1 + NO_CHANGE_REL / 2))},
        {"lever": "overlap", "factory_without": dict(
            f, usd_per_mtok_output=f["usd_per_mtok_output"] * 1.5)}]
    lines = no_change_reasons(fake)
    assert len(lines) == 1 and lines[0].startswith("speculative changes $/M output by")
    assert f"decode binds on {f['decode_binding_resource']}" in lines[0]
    assert "\n" not in lines[0]


# ---- traces ---------------------------------------------------------------------------------

def _write_csv(trace, path, rate_per_s=None):
    """The trace as CSV; with ``rate_per_s`` its arrival times are rescaled to that rate."""
    names = np.array(trace.class_names)[trace.class_id]
    t = trace.arrival_s - trace.arrival_s[0]
    if rate_per_s:
        t = t * ((trace.n_requests - 1) / t[-1]) / rate_per_s
    with open(path, "w") as fh:
        fh.write("arrival_s,input_tokens,output_tokens,class\n")
        for a, i, o, c in zip(t, trace.input_tokens, trace.output_tokens, names):
            fh.write(f"{float(a)!r},{i},{o},{c}\n")


def test_loaded_trace_sizes_the_fleet_at_its_own_rate(tmp_path):
    """A trace at 20 req/s, loaded from CSV, sizes the same fleet as the synthetic trace of
    the same rate and mix, whatever the config's arrival_rate_per_s says. (The file is the
    synthetic trace's requests with arrivals at exactly 20 req/s: a short synthetic trace's
    own span is stretched by its conversations' think times.)"""
    synth_cfg = _small(n=4000, arrival_rate_per_s=20.0, diurnal_amplitude=0.0)
    synth_cfg = synth_cfg.with_levers(synth_cfg.levers.switched(prefix_cache=False))
    trace = generate_trace(synth_cfg.workload)
    csv = tmp_path / "t.csv"
    _write_csv(trace, csv, rate_per_s=20.0)
    loaded = load_trace(csv)
    own_rate = (loaded.n_requests - 1) / loaded.duration_s
    assert own_rate == pytest.approx(20.0, rel=1e-9)
    loaded_cfg = dataclasses.replace(synth_cfg, trace_path=str(csv), workload=dataclasses.replace(
        synth_cfg.workload, arrival_rate_per_s=1000.0))  # must not matter for a loaded trace
    a = simulate(synth_cfg, trace).metrics
    b = simulate(loaded_cfg).metrics
    assert b["arrival_rate_per_s"] == pytest.approx(own_rate)
    assert a["arrival_rate_per_s"] == 20.0
    for key in ("gpus_avg", "gpus_peak", "revenue_usd_per_day"):
        assert b[key] == pytest.approx(a[key], rel=1e-6), key
    # energy follows the busy time, which moves slightly with the rescaled arrival hours
    assert b["cost_usd_per_day"] == pytest.approx(a["cost_usd_per_day"], rel=1e-3)


def test_requests_keeps_the_head_of_a_loaded_trace(tmp_path):
    trace = generate_trace(_small(n=50, arrival_rate_per_s=5.0).workload)
    csv = tmp_path / "t.csv"
    _write_csv(trace, csv)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'extends = "{CONFIGS / "factory.toml"}"\nbaseline = "{CONFIGS / "baseline.toml"}"\n'
                   f'[workload]\ntrace = "{csv}"\n')
    r = CliRunner().invoke(cli, ["compare", "-c", str(cfg), "--requests", "7", "--no-attribution",
                                 "--json"])
    assert r.exit_code == 0, r.output
    import json
    data = json.loads(r.output)
    assert data["trace"]["n_requests"] == 7
    assert data["factory"]["arrival_rate_source"].startswith("the trace's own")


def test_bundled_trace_examples_load():
    for name in ("example_mooncake.jsonl", "example.csv"):
        t = load_trace(CONFIGS / "traces" / name)
        assert t.n_requests >= 5 and t.output_tokens.sum() > 0


# ---- DeepSeek's day -------------------------------------------------------------------------

def test_deepseek_day_is_driven_by_the_published_workload_facts():
    cfg = _small("deepseek-day.toml", n=3000)
    m = simulate(cfg).metrics
    assert m["cache_hit_rate"] == pytest.approx(0.563, abs=1e-3)
    assert m["cache_hit_rate_source"] == "fixed by the scenario"
    assert m["output_tokens_per_day"] == pytest.approx(168e9)
    # the class mix is an assumption: its KV tokens per output token is checked against
    # DeepSeek's 4,989, not fitted to it
    assert m["kv_tokens_per_output_token"] == pytest.approx(4989, rel=0.25)
    # rental at $2/GPU-hour covers everything
    assert m["cost_usd_per_day"] == pytest.approx(m["gpus_avg"] * 24 * 2.0)
    assert m["nodes_avg"] == pytest.approx(m["gpus_avg"] / 8)
    assert m["nodes_peak"] >= m["nodes_avg"]


# ---- the report -----------------------------------------------------------------------------

def test_report_writes_markdown_and_figures(tmp_path):
    pytest.importorskip("matplotlib")
    from inference_factory.factory.report import write_report

    cfg = _small(n=800)
    res = fcompare.compare(cfg)
    paths = write_report(res, tmp_path / "r.md")
    names = sorted(p.name for p in paths)
    assert names == ["r.md", "r_speculation.png", "r_waterfall.png"]
    text = (tmp_path / "r.md").read_text()
    assert "| metric | baseline | factory |" in text and "## Attribution" in text
    assert "tok/s/GPU" in text                         # the attribution has column headers
    for p in paths[1:]:
        assert p.read_bytes()[:4] == b"\x89PNG"


def test_cumulative_path_runs_from_the_generic_baseline_to_the_factory(result):
    """Adding the factory's shapes and levers to the generic baseline one at a time ends at
    the factory itself (the bundled pair differs in nothing else), so the path's steps are
    exact and its waterfall has no residual."""
    from inference_factory.factory.levers import lever_waterfall

    path = result["path"]
    assert [p["step"] for p in path] == list(fcompare.PATH_ORDER)
    for key in ("usd_per_mtok_output", "gpu_seconds", "decode_tokens_per_s_per_gpu"):
        assert path[-1][key] == pytest.approx(result["factory"][key], rel=1e-9)
    w = lever_waterfall(result, "usd_per_mtok_output", basis="path", log=True)
    assert w.set_index("step").loc["interactions", "change"] == pytest.approx(1.0)
    assert w.step.iloc[0] == "baseline without continuous_batching"
    assert w.after.iloc[-1] == result["factory"]["usd_per_mtok_output"]
