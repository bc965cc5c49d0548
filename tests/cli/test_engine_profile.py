"""The serving-engine profile is one object every command takes: ``--engine`` on ``plan``,
``bench``, ``simulate``, ``compare`` and ``sweep`` (one shared option), ``engine = "..."`` in
a factory config and a sweep file; named in every output; an unknown name is one line naming
the option or field, the value and the allowed names (status 2). And one default hardware
for every command, stated in its ``--help``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from inference_factory.cli import cli
from inference_factory.specs import DEFAULT_HARDWARE
from inference_factory.specs.engines import list_serving_engines, load_serving_engine

from tests.cli_helpers import fails, ok

ALLOWED = ", ".join(list_serving_engines())
PLAN = ["plan", "-m", "Llama-3.1-8B", "-H", "H100-SXM", "--gpus", "1", "--isl", "1024",
        "--osl", "256", "--mode", "aggregated", "--precision", "native", "-a",
        "batch_size=8,32,128"]
BENCH = ["bench", "-m", "Llama-3.1-70B", "-H", "H100-SXM", "-p", "tp=8", "--weight-precision",
         "fp8", "--isl", "1024", "--osl", "256", "-c", "4"]
SIMULATE = ["simulate", "--config", "deepseek-day", "--requests", "2000"]
COMPARE = ["compare", "--config", "factory", "--requests", "2000", "--no-attribution"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="inference-factory")


# ---- bad input: one line naming the option or field, the value and the allowed names ------

@pytest.mark.parametrize("base", [PLAN, BENCH, SIMULATE, COMPARE,
                                  ["sweep", "-m", "Llama-3.1-8B", "-H", "H100-SXM", "-o",
                                   "never.nc"]],
                         ids=lambda b: b[0])
def test_an_unknown_engine_is_one_line_naming_option_value_and_names(base):
    line = fails(run(*base, "--engine", "sglang-9"))
    assert "--engine = 'sglang-9'" in line and ALLOWED in line


def test_an_unknown_engine_in_a_factory_config_names_the_file_and_field(tmp_path):
    cfg = tmp_path / "x.toml"
    cfg.write_text('extends = "%s"\nengine = "trt-llm"\n' % _bundled("deepseek-day.toml"))
    line = fails(run("simulate", "--config", str(cfg)))
    assert f"{cfg}: engine = 'trt-llm'" in line and ALLOWED in line


def test_an_unknown_engine_in_a_sweep_file_names_the_file_and_field(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\nmodel = "Llama-3.1-8B"\nhardware = "H100-SXM"\nengine = "nope"\n'
                 '[axes]\nbatch_size = "1,8"\n')
    line = fails(run("sweep", "--config", str(f), "-o", str(tmp_path / "s.nc")))
    assert f"{f}: sweep.engine = 'nope'" in line and ALLOWED in line
    assert not (tmp_path / "s.nc").exists()


def _bundled(name: str) -> str:
    from inference_factory.specs.files import bundled_dir

    return str(bundled_dir("configs") / name)


# ---- named in every output --------------------------------------------------------------

def test_plan_names_its_engine_in_the_header_json_and_attrs():
    # default: every bundled engine that runs on the device, each row naming its engine
    head = ok(run(*PLAN)).splitlines()[0]
    assert "engine sglang-0.5.6,trtllm-1.3,vllm-v1;" in head, head
    rec = json.loads(ok(run(*PLAN, "--json")))["recommendations"][0]
    assert rec["engine"] in ("sglang-0.5.6", "trtllm-1.3", "vllm-v1") and rec["launch_command"]
    out = json.loads(ok(run(*PLAN, "--engine", "ideal", "--json")))
    assert out["request"]["engine"] == "ideal"
    from inference_factory.analysis.plan import plan
    r = plan("Llama-3.1-8B", "H100-SXM", gpus=1, isl=1024, osl=256, modes=("aggregated",),
             low_precision=(False,), batch_size=(8,), engine="vllm-v1")
    assert r.recommendations.attrs["engine"] == r.candidates.attrs["engine"] == "vllm-v1"


def test_bench_names_its_engine_in_the_header_and_attrs():
    assert "engine ideal" in ok(run(*BENCH, "--engine", "ideal")).splitlines()[0]
    assert json.loads(ok(run(*BENCH, "--engine", "vllm-v1", "--json")))["attrs"]["engine"] \
        == "vllm-v1"


def test_simulate_names_the_configs_engine_and_the_option_wins(tmp_path):
    default = load_serving_engine().name
    text = ok(run(*SIMULATE))
    assert f"engine {default}" in text.splitlines()[0]
    out = json.loads(ok(run(*SIMULATE, "--engine", "ideal", "--json")))
    assert out["engine"] == out["scenario"]["engine"] == "ideal"
    cfg = tmp_path / "x.toml"
    cfg.write_text('extends = "%s"\nengine = "ideal"\n' % _bundled("deepseek-day.toml"))
    assert json.loads(ok(run("simulate", "--config", str(cfg), "--requests", "2000",
                             "--json")))["engine"] == "ideal"


def test_the_engine_changes_no_simulated_number_where_the_factory_does_not_model_it():
    """The factory takes the profile's name and policy only: a prefill-first profile other
    than the default gives the same figures (its limits, intervals and host times are the
    pools' own, or not modelled)."""
    a = json.loads(ok(run(*SIMULATE, "--json")))["scenario"]
    b = json.loads(ok(run(*SIMULATE, "--engine", "ideal", "--json")))["scenario"]
    assert {k: v for k, v in a.items() if k != "engine"} == \
        {k: v for k, v in b.items() if k != "engine"}


def test_compare_names_its_engine_and_refuses_a_mixing_one_on_a_colocated_side():
    default = load_serving_engine().name
    out = json.loads(ok(run(*COMPARE, "--json")))
    assert out["engine"] == out["baseline"]["engine"] == out["factory"]["engine"] == default
    assert f"engine {default}" in ok(run(*COMPARE)).splitlines()[0]
    # the generic baseline is colocated; the factory models colocation prefill-first only
    line = fails(run(*COMPARE, "--engine", "vllm-v1"))
    assert "engine = 'vllm-v1' mixes prompt chunks" in line and "pd_split" in line


def test_sweep_names_its_engine_in_attrs():
    from inference_factory.analysis.sweep import SweepSpec, run_sweep

    spec = SweepSpec(models=("Llama-3.1-8B",), hardware=("H100-SXM",),
                     axes={"batch_size": (1.0, 8.0)})
    assert run_sweep(spec).attrs["engine"] == load_serving_engine().name
    from dataclasses import replace
    assert run_sweep(replace(spec, engine="vllm-v1")).attrs["engine"] == "vllm-v1"


# ---- plan honours the profile ------------------------------------------------------------

def test_plan_runs_its_closed_loop_on_the_chosen_engine():
    """The ideal profile polls for new requests every decode step (SGLang's InferenceX flags
    on B200: every 10 or 30), so at each aggregated candidate's batch the poll wait, hence
    TTFT and the requests in flight, fall; the disaggregated candidates do not depend on it."""
    from inference_factory.analysis.plan import plan

    kw = dict(gpus=1, isl=1024, osl=256, low_precision=(False,), batch_size=(8, 32, 128))
    base = plan("Llama-3.1-8B", "B200", modes=("aggregated",), engine="sglang-0.5.6",
                **kw).candidates
    ideal = plan("Llama-3.1-8B", "B200", modes=("aggregated",), engine="ideal",
                 **kw).candidates
    assert (ideal["ttft_s"] < base["ttft_s"]).all()
    assert (ideal["concurrency"] < base["concurrency"]).all()
    kw.update(gpus=2, batch_size=(32,))
    # on B200, where SGLang's profile fuses the all-reduce with the norms as the device's
    # table says (on H100 it does not: its kernels, hence its steps, differ from ideal's)
    d0 = plan("Llama-3.1-8B", "B200", modes=("disaggregated",), engine="sglang",
              **kw).candidates
    d1 = plan("Llama-3.1-8B", "B200", modes=("disaggregated",), engine="ideal",
              **kw).candidates
    assert len(d0)
    # the engine's own KV pool is its (SGLang: 0.85 of HBM less the weights; ideal: the
    # memory model's), the figures are not
    named = ["engine", "engine_version", "engine_label", "kv_pool_max_batch"]
    assert (d0["kv_pool_max_batch"] < d1["kv_pool_max_batch"]).all()
    assert d0.drop(columns=named).equals(d1.drop(columns=named))


# ---- one default hardware -----------------------------------------------------------------

@pytest.mark.parametrize("command", ["plan", "bench", "roofline", "cheapest", "pareto",
                                     "best-draft", "max-batch", "tornado", "montecarlo"])
def test_every_command_states_the_one_default_hardware(command):
    text = " ".join(ok(run(command, "--help")).split())
    assert DEFAULT_HARDWARE in text
    for other in ("B200", "H100-SXM"):
        assert f"default: {other}" not in text and f"default {other}" not in text


def test_the_default_hardware_is_the_bundled_factory_configs():
    from inference_factory.factory.config import load_config

    cfg = load_config("factory")
    assert cfg.decode.hardware == cfg.prefill.hardware == DEFAULT_HARDWARE
    assert "on H800-SXM" in ok(run("bench", "-m", "Llama-3.1-8B", "-c", "1", "--isl", "128",
                                   "--osl", "16")).splitlines()[0]
