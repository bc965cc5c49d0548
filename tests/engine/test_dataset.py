"""The engine's results as Datasets (engine.dataset): the Dataset built directly equals what
xarray's public constructor gives, every result owns its attributes, binding labels name the
largest resource and are gathered (lazily, for long lists) as numpy's indexing gives them;
scalar structural choices are coordinates and invalid list combinations are masked."""

import numpy as np
import pytest
import xarray as xr

import inference_factory as inf
from inference_factory.engine import RESOURCES, dataset, inputs
from inference_factory.errors import SpecError

DS = "DeepSeek-V3"


def test_binding_label_is_the_largest_resource():
    ds = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, batch_size=[1, 512], kv_len=[128, 65536],
                      prompt_len=[64, 32768])
    for phase in ("decode", "prefill"):
        parts = xr.concat([ds[f"{phase}_{r}_s"] for r in RESOURCES], dim="r")
        expect = np.asarray(RESOURCES)[parts.argmax("r").values]
        np.testing.assert_array_equal(ds[f"{phase}_binding_resource"].broadcast_like(
            parts.isel(r=0)).values, expect)



# ---- the Dataset built directly (no merge) equals the public constructor's ----------------

_DATASET_CASES = [
    dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8, batch_size=64, kv_len=2048),
    dict(model="Llama-3.1-8B", hardware="H100", batch_size=[1, 8, 64], kv_len=[1024, 4096],
         prompt_len=512),
    dict(model="DeepSeek-V3", hardware="H800-SXM", dp=32, ep=32, overlap="two-batch",
         batch_size=[16, 128], draft_depth=[0, 1, 2], realism="roofline"),
    dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8, ideal=True,
         batch_size=xr.DataArray([1.0, 7.0, 30.0], dims="point"),
         kv_len=xr.DataArray([128.0, 900.0, 5000.0], dims="point"), prompt_len=[256, 1024]),
    # a caller's axis with its own index and a non-index coordinate (kept, with their attrs)
    dict(model="Llama-3.1-8B", hardware="H100-SXM",
         batch_size=xr.DataArray([1.0, 4.0], dims="b", name="batch_size",
                                 coords={"b": ("b", [10, 20], {"note": "mine"}),
                                         "lab": ("b", ["x", "y"])}),
         kv_len=[128.0, 512.0]),
    # a dimension coordinate without an index: the public constructor builds the default one
    dict(model="Llama-3.1-8B", hardware="H100-SXM",
         batch_size=xr.DataArray([1.0, 4.0], dims="b",
                                 coords=xr.Coordinates({"b": [10, 20]}, indexes={}))),
    # several blocks (combine_by_coords on top) and detail="ops" (variables added after)
    dict(model=["Llama-3.1-8B", "Llama-3.1-70B"], hardware="H100-SXM", tp=8, batch_size=[1, 32]),
    dict(model="Llama-3.1-8B", hardware="H100-SXM", batch_size=16, detail="ops"),
]


def _evaluate(case):
    kw = dict(case)
    return inf.evaluate(kw.pop("model"), kw.pop("hardware"), **kw)


@pytest.mark.parametrize("case", _DATASET_CASES, ids=range(len(_DATASET_CASES)))
def test_dataset_equals_the_plain_public_constructor(case, monkeypatch):
    """Variables made with ``fastpath`` (no conversion) give what xarray's public constructor
    gives from plain ``(dims, data, attrs)``: values, dtypes, attributes, coordinates,
    indexes, and the order of variables and dimensions, which DataFrames and reprs show."""
    fast = _evaluate(case)
    monkeypatch.setattr(dataset, "_variable", lambda dims, value, attrs: xr.Variable(
        dims, value, attrs))
    public = _evaluate(case)
    xr.testing.assert_identical(fast, public)
    assert list(fast.variables) == list(public.variables) and list(fast.sizes) == list(public.sizes)
    for k, v in public.variables.items():
        assert type(fast.variables[k]) is type(v) and fast.variables[k].dtype == v.dtype, k
        assert fast.variables[k].attrs is not v.attrs
    assert list(fast.xindexes) == list(public.xindexes)
    assert [type(i) for i in fast.xindexes.values()] == [type(i) for i in public.xindexes.values()]
    pd_ = pytest.importorskip("pandas")
    pd_.testing.assert_frame_equal(dataset.to_dataframe(fast), dataset.to_dataframe(public))


def test_every_result_owns_its_attributes():
    """A caller's axis is not modified through a result, and editing one result's attributes
    leaves the next call's alone."""
    axis = xr.DataArray([1.0, 2.0], dims="batch_size", coords={"batch_size": [1.0, 2.0]})
    ds = inf.evaluate("Llama-3.1-8B", "H100-SXM", batch_size=axis)
    assert ds.batch_size.attrs["units"] == "sequences"
    assert "units" not in axis.batch_size.attrs
    ds.batch_size.attrs["units"] = "changed"
    again = inf.evaluate("Llama-3.1-8B", "H100-SXM", batch_size=axis)
    assert again.batch_size.attrs["units"] == "sequences"
    ds.batch_size.attrs["units"] = "sequences"
    for k in ("decode_step_s", "tp", "model", "kv_len", "decode_binding_resource"):
        again[k].attrs["units"] = "edited"
    third = inf.evaluate("Llama-3.1-8B", "H100-SXM", batch_size=axis)
    xr.testing.assert_identical(third, ds)
    assert third.decode_step_s.attrs["units"] == "s" and third.tp.attrs["units"] == "GPUs"


def test_long_label_arrays_equal_numpy_indexing():
    """Binding labels of a long point list are gathered as rows of int64 words: the same
    strings as numpy's indexing of the label table."""
    codes = np.random.default_rng(0).integers(0, len(RESOURCES),
                                              inputs._PARALLEL_MIN + 7).astype(np.int8)
    got = dataset._labels(codes)
    want = dataset._RESOURCE_LABELS[codes]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(dataset._labels(codes[:100]), want[:100])


def test_binding_labels_of_long_lists_are_read_lazily(monkeypatch):
    """A long point list keeps its binding-resource codes until the labels are read (xarray's
    lazy backend array): evaluating looks up no label; the first read looks them up once and
    keeps them; the labels equal those of the same points evaluated in short lists (labels
    looked up at once), through .values, indexing, DataFrames and pickling."""
    import pickle
    import xarray as xr
    n = inputs._PARALLEL_MIN + 3
    r = np.random.default_rng(5)
    grid = dict(batch_size=r.integers(1, 400, n).astype(float),
                kv_len=r.integers(128, 30_000, n).astype(float))
    # the process's first Dataset is compared with xarray's public constructor (read once)
    inf.evaluate("Llama-3.1-8B", "H100-SXM", batch_size=xr.DataArray([1.0, 2.0], dims="p"))
    calls = []
    real = dataset._labels
    monkeypatch.setattr(dataset, "_labels", lambda codes: calls.append(codes.size) or real(codes))
    ds = inf.evaluate("Llama-3.1-8B", "H100-SXM",
                      **{k: xr.DataArray(v, dims="p") for k, v in grid.items()})
    assert all(size < inputs._PARALLEL_MIN for size in calls)      # a label held by all points
    long = [k for k in ("decode_binding_resource", "prefill_binding_resource") if ds[k].size == n]
    assert "decode_binding_resource" in long
    halves = [inf.evaluate("Llama-3.1-8B", "H100-SXM",
                           **{k: xr.DataArray(v[s], dims="p") for k, v in grid.items()})
              for s in (slice(0, n // 2), slice(n // 2, n))]
    calls.clear()
    for name in long:
        want = np.concatenate([h[name].values for h in halves])
        np.testing.assert_array_equal(ds[name].values, want)
        np.testing.assert_array_equal(ds[name].values, want)      # kept: not looked up again
        np.testing.assert_array_equal(ds[name].isel(p=slice(5, 9)).values, want[5:9])
        assert ds[name].dtype == want.dtype
    assert calls == [n] * len(long)
    lazy = inf.evaluate("Llama-3.1-8B", "H100-SXM",
                        **{k: xr.DataArray(v, dims="p") for k, v in grid.items()})
    back = pickle.loads(pickle.dumps(lazy))
    np.testing.assert_array_equal(back["decode_binding_resource"].values,
                                  ds["decode_binding_resource"].values)
    frame = lazy[["decode_binding_resource", "tpot_s"]].to_dataframe()
    assert frame["decode_binding_resource"].tolist()[:50] == ds[
        "decode_binding_resource"].values[:50].tolist()


# ---- results remember what they are ------------------------------------------------------


def test_evaluate_records_scalar_structural_choices_as_coordinates():
    import pandas as pd

    import inference_factory as inf

    a = inf.evaluate(DS, "H800-SXM", dp=32, ep=32, kv_precision="fp8", batch_size=[1, 8])
    b = inf.evaluate(DS, "H800-SXM", tp=8, batch_size=[1, 8])
    assert (int(a.tp), int(a.dp), int(a.ep)) == (1, 32, 32)
    assert str(a.kv_precision.values) == "fp8" and str(b.kv_precision.values) == "bf16"
    # defaults are recorded as resolved: the model's native weight precision, the skew used
    assert str(a.weight_precision.values) == inf.load_model(DS).weight_precision
    assert float(a.expert_skew) == inf.load_realism().default_expert_skew
    assert a.tp.dtype.kind == "i"                    # integer axes stay integers
    # two calls' frames stay apart
    both = pd.concat([inf.to_dataframe(a), inf.to_dataframe(b)])
    assert set(zip(both.tp, both.dp, both.ep)) == {(1, 32, 32), (8, 1, 1)}
    # a structural list is a dimension, not a scalar coordinate
    c = inf.evaluate(DS, "H800-SXM", dp=32, ep=32, kv_precision=["bf16", "fp8"])
    assert c.kv_precision.dims == ("kv_precision",) and c.tp.dims == ()



def test_list_axes_mask_invalid_combinations_instead_of_raising():
    import inference_factory as inf

    ds = inf.evaluate(DS, "H800-SXM", dp=[8, 32], ep=[8, 32], batch_size=[1, 64])
    valid = ds["valid"].transpose("dp", "ep").values
    # ep = 32 does not divide tp x dp = 8; every other pair is an instance
    assert valid.tolist() == [[True, False], [True, True]]
    bad = ds.sel(dp=8, ep=32)
    assert bad["decode_tokens_per_s_per_gpu"].isnull().all() and not bad["fits"].any()
    good = ds.sel(dp=32, ep=32)
    one = inf.evaluate(DS, "H800-SXM", dp=32, ep=32, batch_size=[1, 64])
    assert np.allclose(good["decode_tokens_per_s_per_gpu"], one["decode_tokens_per_s_per_gpu"])
    # scalars that are invalid still raise: nothing else to show
    with pytest.raises(SpecError, match="ep = 32 must divide"):
        inf.evaluate(DS, "H800-SXM", dp=8, ep=32)
