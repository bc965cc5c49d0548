"""Tests of sweeps: axis specifications, sweep files, in-memory and dask-chunked evaluation,
a dask.distributed cluster, output formats, provenance, plots and the ``sweep`` command.

The command line's ``.nc`` equals the library call; CSV and Parquet hold exactly
``inference_factory.to_dataframe``; a chunked sweep equals the in-memory one; every bad
input exits with status 2, one ``error:`` line and no output file (not even a temporary one).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner

import inference_factory as inf
from inference_factory import SpecError
from inference_factory.cli import cli
from inference_factory.analysis.economics import CostModel, add_economics
from inference_factory.analysis.sweep import (SweepSpec, load_sweep_file, open_result, parse_axis,
                                     parse_setting, parse_values, run_sweep, write_result)

from tests.cli_helpers import fails, ok

REPO = Path(__file__).resolve().parents[2]
DECODE_GRID = REPO / "configs" / "sweeps" / "decode_grid.toml"

# DeepSeek's decode deployment shape, shared by the small grids below
DS_FIXED = {"dp": 32, "ep": 32, "redundant_experts": 32, "overlap": "two-batch",
            "kv_precision": "fp8", "kv_len": 4096.0}


def small_spec(**changes) -> SweepSpec:
    """2 hardware x 2 KV precisions x 5 batch sizes x 3 draft depths x 3 cache-hit rates."""
    kw = dict(models=("DeepSeek-V3",), hardware=("H800-SXM", "H200-SXM"),
              axes={"batch_size": parse_values("1,4,16,...,256"),
                    "draft_depth": parse_values("0..2"),
                    "kv_precision": ("fp8", "bf16"),
                    "cache_hit_rate": parse_values("0:0.9:3")},
              fixed={k: v for k, v in DS_FIXED.items() if k != "kv_precision"})
    kw.update(changes)
    return SweepSpec(**kw)


@pytest.fixture
def run():
    runner = CliRunner()

    def _run(*args: str):
        return runner.invoke(cli, ["sweep", *args], prog_name="inference-factory")

    return _run


# ============================================================================================
# axis specifications
# ============================================================================================


@pytest.mark.parametrize("text, expected", [
    ("1,2,4", (1, 2, 4)),
    ("1,2,4,...,1024", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)),
    ("0,8,16,...,64", (0, 8, 16, 24, 32, 40, 48, 56, 64)),
    ("0.1,0.2,...,0.5", (0.1, 0.2, 0.3, 0.4, 0.5)),
    ("8,4,2,...,1", (8, 4, 2, 1)),
    ("0:0.95:20", tuple(round(0.05 * i, 2) for i in range(20))),
    ("0:1:1", (0.0,)),
    ("geom:1:1024:11", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)),
    ("geom:0.5:8:5", (0.5, 1.0, 2.0, 4.0, 8.0)),
    ("0..4", (0, 1, 2, 3, 4)),
    ("0..64..16", (0, 16, 32, 48, 64)),
    ("bf16,fp8", ("bf16", "fp8")),
    ("none, two-batch", ("none", "two-batch")),
])
def test_parse_values_forms(text, expected):
    assert parse_values(text) == expected


@pytest.mark.parametrize("text, message", [
    ("", r"axis: empty range \(no values\)"),
    ("4..1", r"axis: empty range '4\.\.1' \(1 < 4\)"),
    ("0:1:0", r"axis: empty range \(0 points\)"),
    ("geom:1:8:0", r"axis: empty range \(0 points\)"),
    ("1,3,...,0", r"1, 3, \.\.\. is not an arithmetic or geometric progression that reaches 0"),
    ("1,2,4,...,1000", r"reaches 1000"),
    ("1024,2048,...,32768", r"ambiguous.*1024,2048,3072,\.\.\. or 1024,2048,4096"),
    ("1,...,8", r"'\.\.\.' needs at least two values"),
    ("1,2,...,8,9", r"'\.\.\.' must come once, just before the last value"),
    ("1,,2", r"'1,,2' has an empty value"),
    ("0:1:2.5", r"the number of points '2\.5' must be a whole number"),
    ("geom:0:8:4", r"needs START and STOP > 0"),
    ("0..3..0", r"step 0 of '0\.\.3\.\.0'"),
    ("a:b:3", r"'a' is not a number"),
])
def test_parse_values_errors_name_the_value(text, message):
    with pytest.raises(SpecError, match=message):
        parse_values(text)


def test_parse_axis_types_and_names():
    assert parse_axis("batch_size=1,2,4") == ("batch_size", (1.0, 2.0, 4.0))
    assert all(isinstance(v, float) for v in parse_axis("draft_depth=0..3")[1])
    assert parse_axis("tp=1,2,8") == ("tp", (1, 2, 8))
    assert parse_axis("kv_precision=bf16,fp8") == ("kv_precision", ("bf16", "fp8"))
    assert parse_axis("hardware=H800-SXM,B200") == ("hardware", ("H800-SXM", "B200"))
    assert parse_setting("kv_len=4096") == ("kv_len", 4096.0)
    assert parse_setting("overlap=two-batch") == ("overlap", "two-batch")
    with pytest.raises(SpecError, match=r"--axis bach_size=1: unknown axis 'bach_size'; "
                                        r"allowed: \['model', 'hardware', 'tp',.*'batch_size'"):
        parse_axis("bach_size=1")
    with pytest.raises(SpecError, match=r"batch_size = 'x' must be a number \(sequences"):
        parse_axis("batch_size=1,x")
    with pytest.raises(SpecError, match=r"expected NAME=VALUES"):
        parse_axis("batch_size")
    with pytest.raises(SpecError, match=r"--set model=X: unknown axis 'model'.*--model/--hardware"):
        parse_setting("model=X")


# ============================================================================================
# sweep files
# ============================================================================================


def test_bundled_sweep_file_loads():
    spec = load_sweep_file(DECODE_GRID)
    assert spec.models == ("DeepSeek-V3",)
    assert spec.hardware == ("H800-SXM", "H200-SXM", "B200")
    assert spec.axes["batch_size"] == (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
    assert spec.axes["draft_depth"] == (0.0, 1.0, 2.0, 3.0)
    assert spec.fixed["dp"] == 32 and spec.fixed["kv_len"] == 4096.0
    assert spec.price == "deepseek-chat-2025-02" and spec.cost.cost_basis == "rental"
    assert spec.n_points == 3 * 9 * 4


@pytest.mark.parametrize("body, message", [
    ('[sweep]\nmodel = "DeepSeek-V3"\nhardware = "H800"\ncolour = 1\n',
     r"sweep\.colour = 1 is not a known key; allowed: \["),
    ('[sweep]\nmodel = "DeepSeek-V3"\nhardware = "H800"\n[axes]\nbach_size = [1, 2]\n',
     r"axes\.bach_size: unknown axis 'bach_size'; allowed"),
    ('[sweep]\nmodel = "DeepSeek-V3"\nhardware = "H800"\n[axes]\nbatch_size = []\n',
     r"axes\.batch_size: empty range \(empty list\)"),
    ('[sweep]\nmodel = "DeepSeek-V3"\nhardware = "H800"\n[axes]\nbatch_size = "4..1"\n',
     r"axes\.batch_size: empty range '4\.\.1'"),
    ('[sweep]\nmodel = "DeepSeek-V3"\nhardware = "H800"\n[axes]\ndp = [1]\n[fixed]\ndp = 2\n',
     r"fixed\.dp: dp is also an axis in \[axes\]"),
    ('[sweep]\nmodel = "DeepSeek-V3"\nhardware = "H800"\n[fixed]\nkv_len = [1, 2]\n',
     r"fixed\.kv_len = \[1, 2\] must be one value \(lists go in \[axes\]\)"),
    ('[sweep]\nmodel = "DeepSeek-V3"\n', r"sweep\.hardware is missing \(required\)"),
    ('[sweep]\nmodel = "DeepSeek-V3"\nhardware = "H800"\n[economics]\ncost_basis = "free"\n',
     r"economics\.cost_basis = 'free' is not one of \['capex', 'rental', 'tco'\]"),
    ('[sweep]\nmodel = "DeepSeek-V3"\nhardware = "H800"\n[output]\nfile = "x.nc"\n',
     r"output = .* is not a known key"),
])
def test_sweep_file_errors_name_file_and_key(tmp_path, body, message):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(SpecError, match=rf"{tmp_path}.*bad\.toml: .*{message}"):
        load_sweep_file(path)


# ============================================================================================
# evaluation: in memory, chunked, on a cluster
# ============================================================================================


def test_in_memory_sweep_is_the_library_call():
    spec = small_spec()
    ds = run_sweep(spec)
    ref = inf.evaluate("DeepSeek-V3", ["H800-SXM", "H200-SXM"], kv_precision=["fp8", "bf16"],
                       batch_size=[1, 4, 16, 64, 256], draft_depth=[0, 1, 2],
                       cache_hit_rate=[0.0, 0.45, 0.9],
                       **{k: v for k, v in DS_FIXED.items() if k != "kv_precision"})
    xr.testing.assert_identical(ds.drop_attrs(deep=False), ref.drop_attrs(deep=False))
    assert {k: ds.attrs[k] for k in ref.attrs} == ref.attrs


@pytest.mark.parametrize("chunks", [40, {"batch_size": 2, "hardware": 1}, {"draft_depth": 1}])
def test_chunked_sweep_equals_in_memory(chunks):
    spec = small_spec(price="deepseek-chat-2025-02", cost=CostModel("rental"))
    mem = run_sweep(spec)
    lazy = run_sweep(spec, chunks=chunks, lazy=True)
    assert lazy.decode_step_s.chunks is not None
    assert lazy.decode_tokens_per_s_per_gpu.data.npartitions > 1
    xr.testing.assert_identical(lazy.compute(), mem)
    xr.testing.assert_identical(run_sweep(spec, chunks=chunks), mem)


def test_chunked_weights_match_when_only_some_blocks_draft():
    # the engine sizes weights with the MTP module when any grid point drafts; blocks whose
    # draft depths are all 0 must give the same weights as the whole-grid call
    spec = small_spec(axes={"draft_depth": (0.0, 1.0), "batch_size": (1.0, 8.0)})
    mem = run_sweep(spec)
    xr.testing.assert_identical(run_sweep(spec, chunks={"draft_depth": 1}), mem)


def test_chunked_sweep_rejects_values_outside_the_domain():
    for axis, values, message in (
            ("cache_hit_rate", (0.0, 0.5, 1.5), r"cache_hit_rate = 1\.5 is out of range; "
                                                r"allowed \[0, 1 \(exclusive\)\]"),
            ("draft_depth", (0.0, 0.5, 1.0, 2.0), r"draft_depth = 0\.5 must be a whole number")):
        spec = small_spec(axes={axis: values})
        with pytest.raises(SpecError, match=message):
            run_sweep(spec, chunks=2, lazy=True)


def test_progress_bar_goes_to_stderr(capsys):
    spec = small_spec(axes={"batch_size": (1.0, 2.0, 4.0)})
    run_sweep(spec, chunks=1, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "sweep" in captured.err


def test_each_axis_value_once():
    with pytest.raises(SpecError, match=r"axis hardware lists 'H800-SXM' more than once"):
        run_sweep(small_spec(hardware=("H800-SXM", "h800")))
    with pytest.raises(SpecError, match=r"axis batch_size lists 4\.0 more than once"):
        run_sweep(small_spec(axes={"batch_size": (1.0, 4.0, 4.0)}))


def test_sweep_on_a_distributed_local_cluster():
    distributed = pytest.importorskip("distributed")
    spec = small_spec(axes={"batch_size": parse_values("1,2,4,...,256"),
                            "draft_depth": parse_values("0..3")})
    mem = run_sweep(spec)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        out = run_sweep(spec, chunks=12, scheduler=cluster.scheduler_address)
    xr.testing.assert_identical(out, mem)


def test_cli_scheduler_writes_the_same_netcdf(run, tmp_path):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "grid.nc"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        ok(run("--config", str(DECODE_GRID), "--scheduler", cluster.scheduler_address,
               "--chunk-size", "12", "-o", str(out), "--quiet"))
    xr.testing.assert_identical(open_result(out), run_sweep(load_sweep_file(DECODE_GRID)))


# ============================================================================================
# outputs
# ============================================================================================


def test_cli_netcdf_equals_library_call(run, tmp_path):
    out = tmp_path / "grid.nc"
    text = ok(run("--config", str(DECODE_GRID), "-o", str(out)))
    assert " ".join(text.split()).startswith(          # wrapped within 100 columns
        f"wrote {out}: 108 points (hardware 3 x batch_size 9 x draft_depth 4)")
    got = open_result(out)
    # the library's sweep, provenance included
    xr.testing.assert_identical(got, run_sweep(load_sweep_file(DECODE_GRID)))
    # and the plain engine + economics calls it stands for
    ref = add_economics(
        inf.evaluate("DeepSeek-V3", ["H800-SXM", "H200-SXM", "B200"],
                     batch_size=[1, 2, 4, 8, 16, 32, 64, 128, 256], draft_depth=[0, 1, 2, 3],
                     dp=32, ep=32, redundant_experts=32, kv_precision="fp8",
                     overlap="two-batch", kv_len=4096, acceptance_rate=0.8),
        price="deepseek-chat-2025-02", cost=CostModel("rental"))
    xr.testing.assert_identical(got.drop_attrs(deep=False), ref.drop_attrs(deep=False))
    assert got.decode_binding_resource.dtype.kind == "U"
    assert set(np.unique(got.decode_binding_resource)) <= {"compute", "memory", "comm",
                                                           "overhead"}


def test_cli_axes_from_the_command_line_equal_the_library(run, tmp_path):
    out = tmp_path / "grid.nc"
    ok(run("-m", "DeepSeek-V3", "-H", "H800-SXM,H200-SXM", "--set", "dp=32", "--set", "ep=32",
           "--axis", "batch_size=1,2,4,...,64", "--axis", "cache_hit_rate=0:0.9:4",
           "--axis", "kv_precision=bf16,fp8", "--ideal", "-o", str(out), "-q"))
    ref = inf.evaluate("DeepSeek-V3", ["H800-SXM", "H200-SXM"], dp=32, ep=32, ideal=True,
                       batch_size=[1, 2, 4, 8, 16, 32, 64], cache_hit_rate=[0, 0.3, 0.6, 0.9],
                       kv_precision=["bf16", "fp8"])
    xr.testing.assert_identical(open_result(out).drop_attrs(deep=False),
                                ref.drop_attrs(deep=False))


@pytest.mark.parametrize("chunk_size", [None, "30"])
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_csv_and_parquet_are_the_tidy_frame(run, tmp_path, suffix, chunk_size):
    out = tmp_path / f"grid{suffix}"
    extra = ["--chunk-size", chunk_size] if chunk_size else []
    ok(run("--config", str(DECODE_GRID), "-o", str(out), "-q", *extra))
    ref = inf.to_dataframe(run_sweep(load_sweep_file(DECODE_GRID)))
    got = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    assert len(got) == 108 and list(got.columns) == list(ref.columns)
    pd.testing.assert_frame_equal(got, ref, check_dtype=suffix == ".parquet", rtol=1e-15)
    if suffix == ".parquet":
        assert got.attrs == ref.attrs
        assert got.attrs["units"]["decode_tokens_per_s_per_gpu"] == "tokens/s/GPU"
        assert "sha256" in got.attrs["model_specs"]


def test_single_point_frame_is_one_row(run, tmp_path):
    ok(run("-m", "DeepSeek-V3", "-H", "H800-SXM", "--set", "dp=32", "--set", "ep=32",
           "-o", str(tmp_path / "one.csv"), "-q"))
    df = pd.read_csv(tmp_path / "one.csv")
    ref = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=32, ep=32)
    assert len(df) == 1
    assert df.decode_step_s[0] == pytest.approx(float(ref.decode_step_s), rel=1e-15)
    assert df.hardware[0] == "H800-SXM"


def test_chunked_frame_parts_keep_the_row_order(tmp_path):
    spec = small_spec()
    lazy = run_sweep(spec, chunks=25, lazy=True)
    write_result(lazy, tmp_path / "a.parquet", max_rows=7)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a.parquet"),
                                  inf.to_dataframe(run_sweep(spec)))


@pytest.mark.parametrize("chunks", [None, 30])
def test_zarr_round_trip(tmp_path, chunks):
    spec = small_spec()
    ds = run_sweep(spec, chunks=chunks, lazy=True)
    out = write_result(ds, tmp_path / "grid.zarr")
    assert out.is_dir()
    xr.testing.assert_identical(open_result(out), run_sweep(spec))
    # overwriting an existing store replaces it whole
    write_result(run_sweep(spec), out)
    xr.testing.assert_identical(open_result(out), run_sweep(spec))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.zarr"]


def test_failed_write_leaves_no_output(tmp_path):
    import dask
    import dask.array as da

    def boom():
        raise RuntimeError("block failed")

    bad = xr.Dataset({"x_s": ("i", da.from_delayed(dask.delayed(boom)(), (3,), float))})
    for name in ("a.nc", "a.zarr", "a.csv", "a.parquet"):
        with pytest.raises(RuntimeError, match="block failed"):
            write_result(bad, tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_provenance_attributes(tmp_path):
    spec = load_sweep_file(DECODE_GRID)
    ds = run_sweep(spec)

    def sha(path) -> str:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    assert ds.attrs["inference_factory_version"] == inf.__version__
    assert ds.attrs["sweep_config"] == f"{DECODE_GRID} (sha256 {sha(DECODE_GRID)})"
    assert ds.attrs["sweep_name"] == "decode_grid"
    for name in ("H800-SXM", "H200-SXM", "B200"):
        path = inf.load_hardware(name).path
        assert f"{name} ({path}; sha256 {sha(path)})" in ds.attrs["hardware_specs"]
    path = inf.load_model("DeepSeek-V3").path
    assert ds.attrs["model_specs"] == f"DeepSeek-V3 ({path}; sha256 {sha(path)})"
    realism = inf.load_realism().source
    assert ds.attrs["realism_config"] == f"{realism} (sha256 {sha(realism)})"
    assert "prices.toml (sha256 " in ds.attrs["price_config"]
    assert json.loads(ds.attrs["sweep_axes"])["batch_size"] == list(spec.axes["batch_size"])
    assert json.loads(ds.attrs["sweep_fixed"])["overlap"] == "two-batch"
    assert ds.attrs["price"].startswith("deepseek-chat-2025-02")
    # flat strings: they survive netCDF
    write_result(ds, tmp_path / "a.nc")
    assert open_result(tmp_path / "a.nc").attrs == ds.attrs
    assert run_sweep(small_spec()).attrs["sweep_config"] == "command line"


# ============================================================================================
# plots
# ============================================================================================


@pytest.mark.parametrize("args, size, dpi", [
    (["--x", "batch_size", "--y", "draft_depth", "--facet", "hardware",
      "--var", "decode_tokens_per_s_per_gpu"], (8, 5), 100),
    (["--x", "batch_size", "--var", "tpot_s", "--set", "draft_depth=1"], (6, 4), 80),
    (["--x", "batch_size", "--y", "draft_depth", "--facet", "hardware",
      "--var", "decode_binding_resource"], (9, 3.5), 120),
])
def test_plot_writes_an_image_of_the_requested_size(run, tmp_path, args, size, dpi):
    mpimg = pytest.importorskip("matplotlib.image")
    png = tmp_path / "plot.png"
    out = ok(run("--config", str(DECODE_GRID), "--plot", str(png), "--size",
                 f"{size[0]}x{size[1]}", "--dpi", str(dpi), *args))
    assert f"wrote {png}" in out
    img = mpimg.imread(png)
    assert img.shape[:2] == (round(size[1] * dpi), round(size[0] * dpi))
    assert img.std() > 0.05                          # not a blank canvas
    assert list(tmp_path.iterdir()) == [png]


# ============================================================================================
# bad input: one line, status 2, no output file
# ============================================================================================


BASE = ["-m", "DeepSeek-V3", "-H", "H800-SXM", "--set", "dp=32", "--set", "ep=32"]


@pytest.mark.parametrize("args, message", [
    (["--axis", "bach_size=1,2"], r"--axis bach_size=1,2: unknown axis 'bach_size'; did you mean "
     r"'batch_size'\? allowed: "),
    (["--axis", "batch_size=4..1"], r"--axis batch_size=4\.\.1: empty range '4\.\.1' \(1 < 4\)"),
    (["--axis", "batch_size="], r"--axis batch_size=: empty range \(no values\)"),
    (["--axis", "cache_hit_rate=0,0.5,1.5"],
     r"cache_hit_rate = 1\.5 is out of range; allowed \[0, 1 \(exclusive\)\]"),
    (["--axis", "cache_hit_rate=0,0.5,1.5", "--chunk-size", "1"],
     r"cache_hit_rate = 1\.5 is out of range"),
    (["--axis", "kv_precision=bf16,fp7"], r"kv_precision = 'fp7' is not one of \["),
    (["--axis", "batch_size=1,2", "--plot", "PLOT", "--x", "batch_size", "--var", "nope"],
     r"--var 'nope' is not a variable of the sweep; available: \['activation_bytes_per_gpu'"),
    (["--axis", "batch_size=1,2", "--plot", "PLOT", "--x", "kv_len", "--var", "tpot_s"],
     r"--x 'kv_len' is not a swept dimension; dimensions: \['batch_size'\]"),
    (["--axis", "batch_size=1,2", "--axis", "kv_len=1,2", "--axis", "draft_depth=0,1",
      "--plot", "PLOT", "--x", "batch_size", "--var", "tpot_s"],
     r"--var tpot_s varies along \['kv_len', 'draft_depth'\] besides --x batch_size"),
    (["--axis", "batch_size=1,2", "--price", "nope"], r"price = 'nope' is not a price id"),
    (["--axis", "batch_size=1,2", "--chunk-size", "0", "--scheduler", "tcp://x:1"],
     r"--scheduler runs blocks on a cluster: give --chunk-size N > 0"),
])
def test_bad_sweeps_fail_in_one_line_without_output(run, tmp_path, args, message):
    out = tmp_path / "grid.nc"
    args = [str(tmp_path / "plot.png") if a == "PLOT" else a for a in args]
    line = fails(run(*BASE, *args, "-o", str(out)))
    assert re.search(message, line), line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, message", [
    ([], r"nothing to write: give --output FILE"),
    (["-o", "OUT.txt"], r"--output .*/o\.txt: the name must end in one of \['\.nc', '\.zarr'"),
    (["-o", "NOWHERE/a.nc"], r"--output .*/no/a\.nc: folder .* does not exist"),
    (["--plot", "OUT.png"], r"--plot .*/o\.png needs --x DIMENSION and --var VARIABLE"),
    (["-o", "OUT.nc", "--x", "batch_size"], r"describe a plot: give --plot FILE\.png"),
])
def test_bad_outputs_fail_in_one_line(run, tmp_path, args, message):
    args = [a.replace("OUT", str(tmp_path / "o")).replace("NOWHERE", str(tmp_path / "no"))
            for a in args]
    line = fails(run(*BASE, "--axis", "batch_size=1,2", *args))
    assert re.search(message, line), line
    assert list(tmp_path.iterdir()) == []


def test_sweep_needs_a_model_and_hardware(run):
    assert "give a sweep file (--config FILE.toml) or both --model and --hardware" in fails(
        run("-m", "DeepSeek-V3", "-o", "x.nc"))


def test_an_output_naming_an_existing_folder_never_deletes_it(tmp_path):
    """`-o` naming a folder of the user's: a one-line error, exit 2, the folder untouched
    (it used to be deleted and replaced by the file)."""
    folder = tmp_path / "out.csv"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    cases = REPO / "validation" / "dev_cases.csv"
    for args in (["validate", "--cases", str(cases), "-o", str(folder)],
                 ["sweep", "-m", "Llama-3.1-8B", "-H", "H100-SXM", "-a", "batch_size=1,8",
                  "-o", str(folder)]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2, res.output
        assert "existing folder" in res.output and "Traceback" not in res.output
        assert (folder / "keep.txt").read_text() == "mine"
    # a .zarr output may replace an earlier store, never a plain folder
    plain = tmp_path / "plain.zarr"
    plain.mkdir()
    (plain / "keep.txt").write_text("mine")
    with pytest.raises(SpecError, match="existing folder"):
        write_result(run_sweep(small_spec()), plain)
    assert (plain / "keep.txt").read_text() == "mine"
