"""The fast paths of evaluate against the reference evaluation: a list of non-separable points
evaluated tile by tile (on threads) equals the same points evaluated as one block, for every
output variable; binding labels restored from integer codes."""

import numpy as np
import pytest
import xarray as xr

import inference_factory as inf
from inference_factory.engine import RESOURCES, core


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
    monkeypatch.setattr(core, "TILE_POINTS", 10**9)
    ref = inf.evaluate(model, hw, **kw, **grid)
    monkeypatch.setattr(core, "TILE_POINTS", 64)      # 15 tiles + a short last one
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
    monkeypatch.setattr(core, "TILE_POINTS", 10**9)
    ref = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=8, ep=8, **kw)
    monkeypatch.setattr(core, "TILE_POINTS", 50)
    tiled = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=8, ep=8, **kw)
    assert "batch_size" not in tiled.prefill_step_s.dims
    for k in ref.data_vars:
        assert tiled[k].dims == ref[k].dims, k
        if ref[k].dtype.kind in "fi":
            np.testing.assert_allclose(tiled[k].values, ref[k].values, rtol=1e-9, atol=0,
                                       err_msg=k)
        else:
            np.testing.assert_array_equal(tiled[k].values, ref[k].values, err_msg=k)
