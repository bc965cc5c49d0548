"""CF and pint conventions of every output (issue 23, item 3).

Every numeric variable and coordinate of ``evaluate`` (detail off and on, structural lists),
its economics, the questions, a sweep (in memory and chunked) and ``bench`` has a ``units``
attribute that pint parses with the package's registry, and every variable a ``long_name``;
labels and flags carry no units (CF section 3.1). ``ds.pint.quantify`` works. Counts (batch
sizes, GPUs, tokens, requests) are integers in Datasets and round-trip as integers through
CSV, JSON, Parquet and NetCDF. The reference values are the engine's own float results:
integer dtypes must hold the same numbers.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import inference_factory as inf
from inference_factory import units
from inference_factory.analysis.economics import add_economics
from inference_factory.analysis.questions import best_draft_depth
from inference_factory.analysis.questions.slo import max_batch_meeting_slo
from inference_factory.analysis.sweep import SweepSpec, parse_values, run_sweep
from inference_factory.output.files import json_text
from inference_factory.output.metadata import COUNTS, cf_attrs, integer_counts
from inference_factory.output.tables import render

pint = pytest.importorskip("pint")
pytest.importorskip("pint_xarray")

DS_SHAPE = {"dp": 8, "ep": 8, "kv_len": 2048}


def _check_cf(ds: xr.Dataset) -> None:
    """Every numeric variable's units parse; labels and flags have none; all have a long name;
    quantify gives pint quantities for the numeric ones."""
    for name, var in ds.variables.items():
        assert var.attrs.get("long_name"), f"{name}: no long_name"
        if var.dtype.kind in "fiu":
            assert "units" in var.attrs, f"{name}: no units"
            units.parse_units(var.attrs["units"])      # raises on an unknown unit
        else:
            assert "units" not in var.attrs, f"{name} ({var.dtype}): a label carries units"
    q = units.quantify(ds)
    for name in ds.data_vars:
        if ds[name].dtype.kind in "fiu":
            assert isinstance(q[name].data, pint.Quantity), name


def _counts_are_integers(ds: xr.Dataset) -> None:
    for name in COUNTS & set(ds.variables):
        v = ds[name].values
        if v.dtype.kind == "f":        # only where a count is missing (invalid combination)
            assert np.isnan(v).any(), f"{name} is float without a missing value"
        else:
            assert v.dtype.kind in "iu", f"{name}: {v.dtype}"


@pytest.fixture(scope="module")
def results() -> dict[str, xr.Dataset]:
    ev = inf.evaluate("DeepSeek-V3", "H200", batch_size=[1, 64], **DS_SHAPE)
    spec = SweepSpec(models=("DeepSeek-V3",), hardware=("H800-SXM", "H200-SXM"),
                     axes={"batch_size": parse_values("1,4,16"),
                           "kv_precision": ("fp8", "bf16")}, fixed={"dp": 8, "ep": 8})
    return {
        "evaluate": ev,
        "evaluate ops": inf.evaluate("DeepSeek-V3", "H200", batch_size=[1, 64], detail="ops",
                                     **DS_SHAPE),
        "evaluate lists": inf.evaluate("DeepSeek-V3", ["H200", "H800"], tp=[4, 8], ep=[8, 16],
                                       batch_size=[1, 64], kv_len=2048),
        "evaluate points": inf.evaluate(
            "Llama-3.1-8B", "H100", batch_size=xr.DataArray([1, 8, 64], dims="point"),
            kv_len=xr.DataArray([512, 1024, 4096], dims="point")),
        "economics": add_economics(ev, price="deepseek-chat-2025-02"),
        "max batch": max_batch_meeting_slo("Llama-3.1-8B", "H100", tpot_s=0.02, ttft_s=1.0),
        "best draft depth": best_draft_depth("DeepSeek-V3", "H200", batch_size=[16, 64],
                                             acceptance_rate=0.8, **DS_SHAPE),
        "sweep": run_sweep(spec),
        "sweep chunked": run_sweep(spec, chunks=4).load(),
        "bench": inf.bench("DeepSeek-V3", "B200", tp=8, ep=8, concurrency=[4, 16], isl=1024,
                           osl=256),
    }


@pytest.mark.parametrize("which", ["evaluate", "evaluate ops", "evaluate lists",
                                   "evaluate points", "economics", "max batch",
                                   "best draft depth", "sweep", "sweep chunked", "bench"])
def test_every_variable_has_pint_units_and_a_long_name(results, which):
    ds = results[which]
    ds = getattr(ds, "dataset", ds)
    _check_cf(ds)
    _counts_are_integers(ds)


def test_the_registry_defines_the_output_units_once():
    """``USD/Mtoken`` is a millionth of ``USD/token``; token rates per GPU convert to per
    hour; counts are their own dimensions (tokens are not sequences)."""
    reg = units.unit_registry()
    assert reg.Quantity(2.0, "USD/Mtoken").to("USD/token").magnitude == pytest.approx(2e-6)
    assert reg.Quantity(1.0, "tokens/s/GPU").to("tokens/hour/GPU").magnitude == 3600.0
    assert reg.Quantity(3.0, "USD/GPU/hour").to("USD/GPU/s").magnitude == pytest.approx(3 / 3600)
    with pytest.raises(pint.DimensionalityError):
        reg.Quantity(1.0, "tokens").to("sequences")
    assert units.unit_registry() is reg


def test_quantified_results_convert_to_cost_per_token(results):
    """A user's conversion through pint equals the value's own arithmetic (x 1e-6)."""
    e = results["economics"]
    q = units.quantify(e)
    per_token = q.usd_per_mtok_output.pint.to("USD/token")
    np.testing.assert_allclose(per_token.pint.magnitude, e.usd_per_mtok_output.values * 1e-6,
                               rtol=1e-12)


def test_old_prose_units_map_to_pint_ones():
    assert cf_attrs("foo_usd_per_hour", "USD/GPU-hour")["units"] == "USD/GPU/hour"
    assert cf_attrs("x", "label") == {"long_name": "x"}
    assert cf_attrs("y_s")["units"] == "s"


# ---- counts through every file format -------------------------------------------------------


def test_counts_round_trip_as_integers_through_every_format(results, tmp_path):
    ds = results["evaluate"]
    assert ds.batch_size.dtype.kind == "i" and ds.kv_len.dtype.kind == "i"
    assert ds.max_batch_size.dtype.kind == "i"
    # NetCDF
    ds.drop_vars(["decode_binding_resource", "prefill_binding_resource"]).to_netcdf(
        tmp_path / "r.nc", engine="netcdf4")
    with xr.open_dataset(tmp_path / "r.nc", engine="netcdf4") as back:
        for k in ("batch_size", "kv_len", "tp", "max_batch_size"):
            assert back[k].dtype.kind == "i", k
            np.testing.assert_array_equal(back[k].values, ds[k].values)
    df = inf.to_dataframe(ds)
    # Parquet
    df.to_parquet(tmp_path / "r.parquet")
    back = pd.read_parquet(tmp_path / "r.parquet")
    for k in ("batch_size", "kv_len", "dp", "max_batch_size"):
        assert back[k].dtype.kind == "i", k
    # CSV (the table renderer and pandas)
    text = render(df, "csv")
    head, first = text.splitlines()[:2]
    row = dict(zip(head.split(","), first.split(",")))
    assert row["batch_size"] == "1" and row["kv_len"] == "2048" and "." not in row["max_batch_size"]
    assert pd.read_csv(io.StringIO(text))["kv_len"].dtype.kind == "i"
    # JSON
    rows = json.loads(render(df, "json"))["rows"]
    assert [type(r["batch_size"]) for r in rows] == [int, int]
    assert rows[1]["batch_size"] == 64 and isinstance(rows[0]["max_batch_size"], int)


def test_a_count_with_a_missing_value_is_written_without_a_decimal_point(tmp_path):
    """A count that is NaN at an invalid structural combination stays float in the Dataset;
    files show whole numbers and a blank/null, and Parquet a nullable integer column."""
    df = pd.DataFrame({"gpus": [384.0, np.nan], "batch_size": [2048.0, 16.0],
                       "tpot_s": [0.05, 1.0]})
    out = integer_counts(df)
    assert str(out["gpus"].dtype) == "Int64" and out["batch_size"].dtype == np.int64
    assert out["tpot_s"].dtype == np.float64             # not a count: untouched
    text = render(df, "csv")
    assert text.splitlines()[1:] == ["384,2048,0.05", ",16,1.0"]
    obj = json.loads(render(df, "json"))
    assert obj["rows"] == [{"gpus": 384, "batch_size": 2048, "tpot_s": 0.05},
                           {"gpus": None, "batch_size": 16, "tpot_s": 1.0}]
    assert json_text({"gpus": 384.0, "share": 1.0}) == '{\n  "gpus": 384,\n  "share": 1.0\n}'
    out.to_parquet(tmp_path / "n.parquet")
    back = pd.read_parquet(tmp_path / "n.parquet")
    assert str(back["gpus"].dtype) == "Int64" and back["gpus"].iloc[0] == 384

