"""The fast paths of evaluate against the reference evaluation: a list of non-separable points
evaluated tile by tile (on threads) equals the same points evaluated as one block, for every
output variable; binding labels restored from integer codes."""

import numpy as np
import pytest
import xarray as xr

import inference_factory as inf
from inference_factory.engine import RESOURCES, dataset, fused, inputs


def _points(rng, n, draft):
    def da(v):
        return xr.DataArray(v, dims="point")
    grid = dict(batch_size=da(rng.integers(1, 513, n).astype(float)),
                kv_len=da(rng.integers(16, 200_000, n).astype(float)),
                prompt_len=da(rng.integers(16, 200_000, n).astype(float)),
                prefill_batch_size=da(rng.integers(1, 9, n).astype(float)),
                acceptance_rate=da(rng.uniform(0.5, 0.95, n)),
                cache_hit_rate=da(rng.uniform(0.0, 0.9, n)))
    if draft:
        d = rng.integers(0, 4, n).astype(float)
        d[:150] = 0.0                 # whole tiles without a draft pass (a branch of the block)
        grid["draft_depth"] = da(d)
    return grid


@pytest.mark.parametrize("case", [
    dict(model="DeepSeek-V3", hardware="H800-SXM", dp=32, ep=32, overlap="two-batch"),
    dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8),
    dict(model="gpt-oss-120b", hardware="B200", tp=2, ep=2, realism="roofline"),
], ids=lambda c: c["model"])
def test_tiled_equals_one_block(case, monkeypatch):
    kw = dict(case)
    model, hw = kw.pop("model"), kw.pop("hardware")
    grid = _points(np.random.default_rng(7), 1003, draft=model == "DeepSeek-V3")
    monkeypatch.setattr(fused, "TILE_POINTS", 10**9)
    ref = inf.evaluate(model, hw, **kw, **grid)
    monkeypatch.setattr(fused, "TILE_POINTS", 64)      # 15 tiles + a short last one
    tiled = inf.evaluate(model, hw, **kw, **grid)
    assert set(tiled.data_vars) == set(ref.data_vars)
    for k in ref.data_vars:
        a, b = tiled[k], ref[k]
        assert a.dims == b.dims, k
        if b.dtype.kind in "fi":
            np.testing.assert_allclose(a.values, b.values, rtol=1e-9, atol=0, err_msg=k)
        else:
            np.testing.assert_array_equal(a.values, b.values, err_msg=k)
    labels = set(np.unique(ref.decode_binding_resource.values))
    assert labels <= {"compute", "memory", "comm", "overhead"} and ref.decode_binding_resource.dtype.kind == "U"


def test_binding_label_is_the_largest_resource():
    ds = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, batch_size=[1, 512], kv_len=[128, 65536],
                      prompt_len=[64, 32768])
    for phase in ("decode", "prefill"):
        parts = xr.concat([ds[f"{phase}_{r}_s"] for r in RESOURCES], dim="r")
        expect = np.asarray(RESOURCES)[parts.argmax("r").values]
        np.testing.assert_array_equal(ds[f"{phase}_binding_resource"].broadcast_like(
            parts.isel(r=0)).values, expect)


def test_tiled_outer_product_with_a_long_axis_equals_one_block(monkeypatch):
    """A long list axis crossed with short ones and a point list of another dimension: tiles
    run along the longest dimension; variables that do not vary along it (prefill here) are
    kept once."""
    kw = dict(batch_size=[float(b) for b in range(1, 1001)], kv_len=[512.0, 4096.0, 70000.0],
              prompt_len=xr.DataArray([100.0, 5000.0], dims="p"), draft_depth=[0, 2])
    monkeypatch.setattr(fused, "TILE_POINTS", 10**9)
    ref = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=8, ep=8, **kw)
    monkeypatch.setattr(fused, "TILE_POINTS", 50)
    tiled = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=8, ep=8, **kw)
    assert "batch_size" not in tiled.prefill_step_s.dims
    for k in ref.data_vars:
        assert tiled[k].dims == ref[k].dims, k
        if ref[k].dtype.kind in "fi":
            np.testing.assert_allclose(tiled[k].values, ref[k].values, rtol=1e-9, atol=0,
                                       err_msg=k)
        else:
            np.testing.assert_array_equal(tiled[k].values, ref[k].values, err_msg=k)


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
    assert ds.batch_size.attrs["units"] == "sequences per DP rank"
    assert "units" not in axis.batch_size.attrs
    ds.batch_size.attrs["units"] = "changed"
    again = inf.evaluate("Llama-3.1-8B", "H100-SXM", batch_size=axis)
    assert again.batch_size.attrs["units"] == "sequences per DP rank"
    ds.batch_size.attrs["units"] = "sequences per DP rank"
    for k in ("decode_step_s", "tp", "model", "kv_len", "decode_binding_resource"):
        again[k].attrs["units"] = "edited"
    third = inf.evaluate("Llama-3.1-8B", "H100-SXM", batch_size=axis)
    xr.testing.assert_identical(third, ds)
    assert third.decode_step_s.attrs["units"] == "s" and third.tp.attrs["units"] == "GPUs"


@pytest.mark.parametrize("name", sorted(inputs.NUMERIC_AXES))
def test_scalar_axis_checks_equal_the_array_checks(name):
    """A number is checked in plain Python, a list with numpy: same rules, same messages."""
    _, _, lo, hi, _ = inputs.NUMERIC_AXES[name]
    for v in (lo - 1.0, lo - 1e-9, lo, (lo + min(hi, lo + 8)) / 2 + 0.25, hi, hi + 1.0,
              float("nan"), float("inf"), -float("inf"), 1e300):
        try:
            one = inputs._as_axis(name, v)
        except inf.SpecError as exc:
            with pytest.raises(inf.SpecError) as arr_exc:
                inputs._as_axis(name, [v])
            assert str(arr_exc.value) == str(exc), (name, v)
        else:
            arr = inputs._as_axis(name, [v])
            assert isinstance(one, float) and arr.values.tolist() == [one], (name, v)


@pytest.mark.parametrize("name", sorted(inputs.NUMERIC_AXES))
def test_long_axis_checks_equal_the_short_checks(name):
    """A long point list is checked in one compiled pass (min, max, whole numbers): the same
    verdicts and messages as numpy's checks on a short one, whatever the bad value and
    wherever it sits."""
    import xarray as xr
    _, _, lo, hi, _ = inputs.NUMERIC_AXES[name]
    n = inputs._PARALLEL_MIN + 3
    good = np.full(n, lo + (1.0 if hi - lo > 2 else (hi - lo) / 2))
    for v in (lo - 1.0, lo + 0.25, hi, hi + 1.0, float("nan"), float("inf"), -float("inf")):
        for at in (0, n // 2, n - 1):
            long = good.copy()
            long[at] = v
            try:
                short = inputs._as_axis(name, xr.DataArray(long[at:at + 1], dims="point"))
            except inf.SpecError as exc:
                with pytest.raises(inf.SpecError) as long_exc:
                    inputs._as_axis(name, xr.DataArray(long, dims="point"))
                assert str(long_exc.value) == str(exc), (name, v, at)
            else:
                got = inputs._as_axis(name, xr.DataArray(long, dims="point"))
                assert got.values[at] == short.values[0], (name, v, at)


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


def test_long_point_lists_evaluated_from_several_threads_at_once():
    """Two threads evaluating long point lists at once (the compiled pass, lazy labels):
    each gets what it gets alone."""
    from concurrent.futures import ThreadPoolExecutor
    import xarray as xr
    n = inputs._PARALLEL_MIN + 11

    def grid(seed):
        r = np.random.default_rng(seed)
        return dict(batch_size=xr.DataArray(r.integers(1, 300, n).astype(float), dims="p"),
                    kv_len=xr.DataArray(r.integers(128, 9000, n).astype(float), dims="p"))
    grids = [grid(s) for s in (1, 2)]
    alone = [inf.evaluate("Llama-3.1-8B", "H100-SXM", **g, variables=[
        "tpot_s", "decode_binding_resource"]) for g in grids]
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda g: inf.evaluate("Llama-3.1-8B", "H100-SXM", **g, variables=[
            "tpot_s", "decode_binding_resource"]), grids * 2))
    for got, want in zip(both, alone * 2):
        xr.testing.assert_allclose(got.tpot_s, want.tpot_s, rtol=1e-12)
        xr.testing.assert_equal(got.decode_binding_resource, want.decode_binding_resource)


def test_realism_variants_are_one_object_each():
    """The engine keys its compiled one-point programs on the realism object: the same
    variant asked for twice is the same object, in any order of its terms."""
    from inference_factory.specs.realism import TERMS, Realism, load_realism
    base = load_realism()
    a, b = TERMS[0], TERMS[-1]
    assert base.without(a, b) is base.without(b, a) is base.without(a, b, a)
    assert base.without(a) is not base.without(b)
    assert Realism.ideal() is Realism.ideal()
    assert not any(getattr(Realism.ideal(), t) for t in TERMS)


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


def test_output_memory_is_reused_only_once_no_result_refers_to_it(monkeypatch):
    """Point lists write their float outputs into pooled arrays (engine.tape_exec._Pool): a
    dropped result's arrays serve the next call (every value written again: poisoned with
    NaN first, the outputs equal an unpooled run's), while a result, or any view of one of
    its arrays, keeps its values; a longer call lets go of the unused shorter arrays; an
    array larger than the pool's cap is never kept."""
    import xarray as xr
    from inference_factory.engine.backends import interp as TE
    TE.release_buffers()
    n = fused.FUSED_MIN_POINTS + 100

    def call(seed, n=n):
        r = np.random.default_rng(seed)
        return inf.evaluate("Llama-3.1-8B", "H100-SXM",
                            batch_size=xr.DataArray(r.integers(1, 300, n).astype(float),
                                                    dims="p"),
                            kv_len=xr.DataArray(r.integers(128, 9000, n).astype(float),
                                                dims="p"))
    monkeypatch.setattr(TE, "POOL_BYTES", 0)
    unpooled = call(2)
    monkeypatch.setattr(TE, "POOL_BYTES", 384 << 20)
    first = call(1)
    kept = first["tpot_s"].values[10:20]          # a view outlives its Dataset
    want = kept.copy()
    del first
    for i in range(len(TE._POOL.blocks)):         # the free arrays poisoned
        if TE._POOL._unused(i):
            TE._POOL.blocks[i][:] = np.nan
    second = call(2)
    np.testing.assert_array_equal(kept, want)     # not written over while the view lives
    for k in ("tpot_s", "ttft_s", "decode_tokens_per_s_per_gpu"):
        np.testing.assert_array_equal(second[k].values, unpooled[k].values)
    assert any(np.shares_memory(b, second["tpot_s"].values) for b in TE._POOL.blocks)
    third = call(3)                               # second is alive: arrays of its own
    assert not np.shares_memory(second["tpot_s"].values, third["tpot_s"].values)
    np.testing.assert_array_equal(second["tpot_s"].values, unpooled["tpot_s"].values)
    del second, third, kept
    longer = call(4, 3 * n)                       # no free array fits: the short ones go
    assert all(b.size >= 3 * n for b in TE._POOL.blocks)
    assert sum(b.nbytes for b in TE._POOL.blocks) <= TE.POOL_BYTES
    del longer
    monkeypatch.setattr(TE, "POOL_BYTES", 8 * n - 8)   # one output is larger than the cap
    TE.release_buffers()
    call(5)
    assert TE._POOL.blocks == []
