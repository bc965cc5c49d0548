"""The numba interpreter (engine.backends.interp): its compiled building blocks (exp, log,
power, interp, searchsorted) against numpy's, in place too, and its output memory pool."""

import numpy as np

import inference_factory as inf
from inference_factory.engine import fused
from inference_factory.engine.backends import interp as TE


def _edge_values():
    return np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 5e-324, 2.2250738585072014e-308,
                     1.0, 1e-300, 1e300, 709.7, 709.0, 708.9, -708.0, -707.9, -745.2, -800.0])


def test_compiled_exp_and_log_match_numpy():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-745, 709, 200_000), rng.uniform(-1, 1, 100_000),
                        _edge_values()])
    o, keep = np.empty_like(x), np.empty_like(x)
    TE._exp_block(x, o, keep, x.size)
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    normal = np.isfinite(ref) & (ref > 2.2250738585072014e-308)
    np.testing.assert_allclose(o[normal], ref[normal], rtol=4 * 2.2e-16, atol=0)
    # subnormal, zero, infinite, NaN: numpy's values (libm's, to the last subnormal unit)
    np.testing.assert_allclose(o[~normal], ref[~normal], rtol=0, atol=1e-323)
    inplace = x.copy()                  # output register = operand register
    TE._exp_block(inplace, inplace, keep, x.size)
    np.testing.assert_array_equal(inplace, o)
    y = np.concatenate([np.exp(rng.uniform(-700, 700, 200_000)), rng.uniform(0.5, 2.0, 100_000),
                        _edge_values()])
    TE._log_block(y, o[:y.size], keep, y.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = np.log(y)
    ok = np.isfinite(ref)
    # absolute near ln 1 = 0 (the series is exact there), relative elsewhere
    np.testing.assert_allclose(o[:y.size][ok], ref[ok], rtol=4 * 2.2e-16, atol=2.3e-16)
    np.testing.assert_array_equal(o[:y.size][~ok], ref[~ok])
    inplace = y.copy()
    TE._log_block(inplace, inplace, keep, y.size)
    np.testing.assert_array_equal(inplace, o[:y.size])


def test_compiled_power_matches_numpy():
    """e^(b ln a) where that is safe, numpy's power elsewhere (negative bases, zero, overflow)."""
    rng = np.random.default_rng(2)
    a = np.concatenate([rng.uniform(0, 1, 50_000), np.exp(rng.uniform(-50, 50, 50_000)),
                        [0.0, -2.0, -2.0, 2.0, np.inf, np.nan, 1.0, 5e-324]])
    b = np.concatenate([rng.uniform(0, 5, 50_000), rng.uniform(-10, 10, 50_000),
                        [3.0, 3.0, 0.5, 2000.0, 2.0, 1.0, np.nan, 0.5]])
    o, keep = np.empty_like(a), np.empty_like(a)
    TE._pow_block(a, b, o, keep, a.size)
    with np.errstate(all="ignore"):
        ref = a ** b
    # |b ln a| <= 500 here: e^(b ln a) within ~500 ulp of the correctly rounded power
    np.testing.assert_allclose(o, ref, rtol=2e-13, atol=0)
    inplace = a.copy()
    TE._pow_block(inplace, b, inplace, keep, a.size)
    np.testing.assert_array_equal(inplace, o)


def test_compiled_interp_and_search_match_numpy():
    """Also in place (output register = operand register), as the allocator may assign."""
    rng = np.random.default_rng(1)
    xp = np.sort(rng.uniform(-5, 10, 23))
    fp = rng.uniform(-3, 3, 23)
    x = np.concatenate([rng.uniform(-8, 13, 50_000), xp, [np.nan, -np.inf, np.inf]])
    tab = np.concatenate([xp, fp])
    o = np.empty_like(x)
    TE._interp_block(tab, 0, xp.size, xp.size, x, o, np.empty_like(x), x.size)
    np.testing.assert_allclose(o, np.interp(x, xp, fp), rtol=1e-15, atol=1e-15)
    inplace = x.copy()
    TE._interp_block(tab, 0, xp.size, xp.size, inplace, inplace, np.empty_like(x), x.size)
    np.testing.assert_array_equal(inplace, o)
    TE._count_le(tab, 0, xp.size, x, o, x.size)
    np.testing.assert_array_equal(o, np.searchsorted(xp, x, side="right"))


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
    assert any(TE._POOL._unused(i) for i in range(len(TE._POOL.blocks)))   # some to poison
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
    assert TE._POOL.blocks
    assert all(b.size >= 3 * n for b in TE._POOL.blocks)
    assert sum(b.nbytes for b in TE._POOL.blocks) <= TE.POOL_BYTES
    del longer
    monkeypatch.setattr(TE, "POOL_BYTES", 8 * n - 8)   # one output is larger than the cap
    TE.release_buffers()
    call(5)
    assert TE._POOL.blocks == []

