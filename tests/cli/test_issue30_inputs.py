"""Issue 30, "nothing wrong accepted, nothing lost" (rest): token counts on the token axes,
targets nothing can meet said so, price tables in another encoding, bench's redundant
experts, a failed netCDF write, swapped cache files, bounded band work, an empty hardware
folder, assumption ranges outside their quantity's domain, traces without output, pools whose
deployment unit cannot hold an instance.

Reference values: 1k = 1024 tokens (grammar.TOKENS_PER_K, InferenceX's seq_len_stoi); the
rest are properties of the messages and files, checked directly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from inference_factory.cli import cli

from tests.cli_helpers import fails, ok

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, **env):
    return CliRunner(env=env or None).invoke(cli, list(args), prog_name="inference-factory")


def test_token_counts_on_the_token_axes():
    a = json.loads(ok(run("roofline", "-m", "Llama-3.1-8B", "-H", "H200", "--kv-len", "8k",
                          "--prompt-len", "2k", "--json")))
    b = json.loads(ok(run("roofline", "-m", "Llama-3.1-8B", "-H", "H200", "--kv-len", "8192",
                          "--prompt-len", "2048", "--json")))
    assert a["tpot_s"] == b["tpot_s"] and a["ttft_s"] == b["ttft_s"]
    from inference_factory.specs.grammar import parse_assignment
    assert parse_assignment("kv_len=1k,2k,4k,...,16k", "--axis") == (
        "kv_len", (1024.0, 2048.0, 4096.0, 8192.0, 16384.0))
    assert parse_assignment("prompt_len=1.5k", "--axis") == ("prompt_len", (1536.0,))
    assert "batch_size" in fails(run("roofline", "--batch-size", "1k"))   # not a token axis


def test_targets_nothing_can_meet_are_said_so(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'extends = "{ROOT / "configs" / "factory.toml"}"\nname = "s"\n'
                   "[slo]\ntpot_s = 1e-9\nttft_s = 1e-9\n")
    res = json.loads(ok(run("simulate", "-c", str(cfg), "--requests", "200", "--json")))
    s = res["scenario"]
    assert res["notes"][0].startswith("nothing meets the TPOT target 1e-06 ms (slo.tpot_s): "
                                      f"the fastest decode step gives TPOT p50 "
                                      f"{s['tpot_p50_s'] * 1e3:.4g} ms")
    assert "misses the TTFT target 1e-09 s" in res["notes"][1]
    assert "note: nothing meets the TPOT target" in ok(run("simulate", "-c", str(cfg),
                                                           "--requests", "200"))
    out = json.loads(ok(run("plan", "-m", "Llama-3.1-8B", "-H", "H200", "--gpus", "8",
                            "--tpot", "1e-9s", "--json")))
    why = out["recommendations"][0]["reason"]
    assert why.startswith("nothing meets the targets: misses TPOT (") and "; fastest " in why


@pytest.mark.parametrize("encoding,suffix", [("utf-16", ".csv"), ("latin-1", ".csv"),
                                             ("utf-16", ".toml")])
def test_a_price_table_in_another_encoding_is_one_line(tmp_path, encoding, suffix):
    f = tmp_path / f"rates{suffix}"
    f.write_text("hardware,usd_per_gpu_hour\nH200-SXM,2.0\n# café\n" if suffix == ".csv" else
                 'name = "café"\n', encoding=encoding)
    assert "not a UTF-8 text file" in fails(run("plan", "-m", "Llama-3.1-8B", "-H", "H200",
                                                "--gpus", "8", "--price-basis", str(f)))


def test_bench_takes_redundant_experts_as_plan_and_roofline_do():
    base = ("bench", "-m", "DeepSeek-V3", "-H", "H200", "-c", "64", "--json")
    a = json.loads(ok(run(*base, "-p", "tp=8,ep=8")))["points"][0]
    b = json.loads(ok(run(*base, "-p", "tp=8,ep=8,redundant_experts=32")))["points"][0]
    # replicas of the hot experts lighten the busiest rank: a faster step, never slower
    assert b["median_tpot_ms"] < a["median_tpot_ms"]
    assert "exceeds the 256 routed experts" in fails(run(*base, "-p",
                                                         "tp=8,ep=8,redundant_experts=300"))


def test_a_failed_netcdf_write_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    import xarray as xr

    def full_disk(self, *a, **k):
        raise RuntimeError("NetCDF: HDF error")         # what netCDF4 raises on ENOSPC/EFBIG
    monkeypatch.setattr(xr.Dataset, "to_netcdf", full_disk)
    out = tmp_path / "grid.nc"
    msg = fails(run("sweep", "-m", "Llama-3.1-8B", "-H", "H200", "--axis", "batch_size=1,2",
                    "-o", str(out)))
    assert "--output" in msg and "cannot write the netCDF file (NetCDF: HDF error" in msg
    assert list(tmp_path.iterdir()) == []


def test_swapped_cache_files_are_parsed_again(tmp_path, monkeypatch):
    from inference_factory.engine.table_files import read_table

    monkeypatch.setenv("INFERENCE_FACTORY_CACHE_DIR", str(tmp_path))
    folder = ROOT / "hardware" / "measured" / "H200-SXM"
    gemm, moe = read_table(folder / "gemm.csv"), read_table(folder / "moe.csv")
    a, b = sorted((tmp_path / "tables").glob("gemm-*")), sorted((tmp_path / "tables").glob("moe-*"))
    tmp = a[0].with_name("x")
    a[0].rename(tmp), b[0].rename(a[0]), tmp.rename(b[0])          # swap the two caches
    again = read_table(folder / "gemm.csv")
    assert again.keys() == gemm.keys() and all((again[k] == gemm[k]).all() for k in gemm)
    assert read_table(folder / "moe.csv").keys() == moe.keys()


def test_band_work_is_bounded_up_front():
    import time

    t = time.perf_counter()
    msg = fails(run("bench", "-m", "DeepSeek-V3", "-H", "H200", "-p", "tp=8,ep=8", "-c",
                    "1..2000", "--uncertainty"))
    assert "uncertainty over 2,000 concurrency values" in msg and "128" in msg
    assert time.perf_counter() - t < 10      # said before the work (it took minutes)


def test_an_empty_hardware_folder_is_said(tmp_path):
    r = run("hardware", "list", INFERENCE_FACTORY_HARDWARE_DIR=str(tmp_path))
    assert r.exit_code == 0
    assert r.stderr.strip() == (f"warning: {tmp_path}: the hardware folder holds no .toml "
                                "file; only the bundled hardware are used")


def test_assumption_ranges_stay_in_their_domain(tmp_path):
    from inference_factory.errors import SpecError
    from inference_factory.specs.uncertainty import load_uncertainty

    src = (ROOT / "configs" / "uncertainty.toml").read_text()
    at = src.index("[assumptions.acceptance_rate]")
    block = src[at:src.index("\n[", at + 1)]
    f = tmp_path / "u.toml"
    f.write_text(src.replace(block, block.replace("high = 0.9", "high = 1.2")))
    with pytest.raises(SpecError, match=r"assumptions.acceptance_rate.high = 1.2 is outside "
                                        r"the quantity's own domain; allowed \[0, 1\]"):
        load_uncertainty(f)


def test_traces_without_output_and_units_that_hold_no_instance(tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text('{"timestamp": 0, "input_length": 10, "output_length": 0}\n')
    cfg = tmp_path / "c.toml"
    base = f'extends = "{ROOT / "configs" / "factory.toml"}"\nname = "c"\n'
    cfg.write_text(base + f'[workload]\ntrace = "{t}"\n')
    assert "every request has output_length 0" in fails(run("simulate", "-c", str(cfg)))
    cfg.write_text(base + "[decode]\nunit_gpus = 3\n")
    assert "decode.unit_gpus = 3 must be a multiple of the instance's tp x dp = 144" in fails(
        run("simulate", "-c", str(cfg)))
