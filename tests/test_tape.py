"""The fused compiled pass (engine.backends.tape + engine.backends.interp) against the reference numpy
evaluation: the same block code traced once and replayed per point must give every output
variable to 1e-9 relative, whatever the model, device, realism and structure; and its
compiled building blocks (exp, log, interp, searchsorted) must match numpy's."""

import numpy as np
import pytest
import xarray as xr

import inference_factory as inf
from inference_factory.engine import fused as F
from inference_factory.engine import xp
from inference_factory.engine.backends import tape as T
from inference_factory.engine.backends import interp as TE

N = 5_000          # above F.FUSED_MIN_POINTS: a list of points takes the fused pass


@pytest.fixture(autouse=True)
def _fresh_programs(monkeypatch):
    """Each test traces its own programs (none kept from another test)."""
    monkeypatch.setattr(F, "_FUSED_PROGRAMS", {})


def _points(seed, n=N, draft_max=0):
    """Random non-separable points over wide ranges: inside, below and above the measured
    tables (contexts and prompts to 200k tokens, batches to 2,048)."""
    rng = np.random.default_rng(seed)

    def da(v):
        return xr.DataArray(v, dims="point")
    grid = dict(batch_size=da(rng.integers(1, 2049, n).astype(float)),
                kv_len=da(np.exp(rng.uniform(np.log(16), np.log(200_000), n)).round()),
                prompt_len=da(np.exp(rng.uniform(np.log(16), np.log(200_000), n)).round()),
                prefill_batch_size=da(rng.integers(1, 17, n).astype(float)),
                acceptance_rate=da(rng.uniform(0.3, 0.99, n)),
                cache_hit_rate=da(rng.uniform(0.0, 0.95, n)))
    if draft_max:
        grid["draft_depth"] = da(rng.integers(0, draft_max + 1, n).astype(float))
    return grid


CASES = {
    "dsv3-ep-measured-mtp": (dict(model="DeepSeek-V3", hardware="H800-SXM", dp=32, ep=32,
                                  overlap="two-batch"), 3),
    "dsv3-gb200-nvlink-a2a": (dict(model="DeepSeek-V3", hardware="GB200", dp=16, ep=16,
                                   kv_precision="fp8"), 2),
    "llama70b-tp8": (dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8), 0),
    "llama70b-tp16-two-nodes": (dict(model="Llama-3.1-70B", hardware="H200-SXM", tp=16,
                                     cache_tier="dram"), 0),
    "llama70b-draft-8b": (dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8,
                               draft_model="Llama-3.1-8B"), 4),
    "gpt-oss-sliding-window-b200": (dict(model="gpt-oss-120b", hardware="B200", tp=2, ep=2), 0),
    "gpt-oss-roofline-realism": (dict(model="gpt-oss-120b", hardware="B200", tp=2, ep=2,
                                      realism="roofline"), 0),
    "qwen3-moe-mi355x-no-tables": (dict(model="Qwen3-235B-A22B", hardware="MI355X", tp=8,
                                        ep=8, weight_precision="fp8"), 0),
    "mixtral-ideal": (dict(model="Mixtral-8x7B", hardware="H100-SXM", tp=2, ideal=True), 0),
    "dsv3-acceptance-by-position": (dict(model="DeepSeek-V3", hardware="H200-SXM", dp=8, ep=8,
                                         acceptance_by_position=[0.9, 0.7, 0.5]), 3),
}


def _evaluate_both(kw, grid, monkeypatch):
    kw = dict(kw)
    model, hw = kw.pop("model"), kw.pop("hardware")
    monkeypatch.setattr(F, "FUSED_MIN_POINTS", 10**12)
    ref = inf.evaluate(model, hw, **kw, **grid)
    calls = []
    real_run = TE.run
    monkeypatch.setattr(TE, "run", lambda *a: calls.append(1) or real_run(*a))
    monkeypatch.setattr(F, "FUSED_MIN_POINTS", 1)
    fused = inf.evaluate(model, hw, **kw, **grid)
    return ref, fused, calls


def _assert_same(fused, ref):
    assert set(fused.data_vars) == set(ref.data_vars)
    for k in ref.data_vars:
        a, b = fused[k], ref[k]
        assert a.dims == b.dims, k
        assert a.dtype == b.dtype, k
        if b.dtype.kind == "f":
            np.testing.assert_allclose(a.values, b.values, rtol=1e-9, atol=0, err_msg=k)
        else:
            np.testing.assert_array_equal(a.values, b.values, err_msg=k)


@pytest.mark.parametrize("name", list(CASES))
def test_fused_pass_equals_numpy_evaluation(name, monkeypatch):
    kw, draft = CASES[name]
    ref, fused, calls = _evaluate_both(kw, _points(hash(name) % 2**32, draft_max=draft),
                                       monkeypatch)
    assert calls, "the fused pass was not taken"
    _assert_same(fused, ref)


def test_skipped_regions_with_small_blocks(monkeypatch):
    """Blocks of 16 points: most blocks have no point beyond a table, so the guarded
    corrections are skipped there and run in the others; the results do not change."""
    monkeypatch.setattr(TE, "BLOCK_POINTS", 16)
    kw, draft = CASES["dsv3-ep-measured-mtp"]
    grid = _points(3, draft_max=draft)
    grid["kv_len"][::50] = 400_000.0          # a few points far beyond the tables
    grid["batch_size"][::70] = 4096.0
    ref, fused, calls = _evaluate_both(kw, grid, monkeypatch)
    assert calls
    _assert_same(fused, ref)


def test_programs_skip_guarded_regions():
    tape = T.Tape()
    x = tape.input("x")
    mask = x > 2.0
    with xp.guarded(mask):
        g = np.log(x * 3.0) + 1.0
    out = np.where(mask, g, 0.0) + x
    prog = T.compile_outputs(tape, {"y": out})
    assert (prog.code[:, 0] == T.OP["skip"]).sum() == 1
    xs = np.array([0.5, 1.0, 3.0, 7.0] * 300)
    y = TE.run(prog, {"x": xs}, xs.size)["y"]
    np.testing.assert_allclose(y, np.where(xs > 2, np.log(xs * 3.0) + 1.0, 0.0) + xs,
                               rtol=1e-15)


def test_untraceable_code_falls_back_to_numpy(monkeypatch):
    """An operation the tape cannot record: the same result from the numpy passes."""
    kw, _ = CASES["llama70b-tp8"]
    grid = _points(5)
    monkeypatch.setattr(F, "FUSED_MIN_POINTS", 10**12)
    ref = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, **grid)

    def refuse(*a, **k):
        raise T.NotTraceable("test")
    monkeypatch.setattr(T.Tape, "emit", refuse)
    monkeypatch.setattr(F, "_FUSED_PROGRAMS", {})
    monkeypatch.setattr(F, "FUSED_MIN_POINTS", 1)
    _assert_same(inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, **grid), ref)


def test_tracer_refuses_what_it_cannot_record():
    tape = T.Tape()
    x = tape.input("x", np.array([1.0, 2.0]))
    with pytest.raises(T.NotTraceable):
        bool(x > 1.0)                       # a Python branch on a per-point value
    with pytest.raises(T.NotTraceable):
        x + np.arange(3.0)                  # an outer product with a concrete array
    with pytest.raises(T.NotTraceable):
        np.asarray(x)
    assert (x > 1.0).any() is True          # conservative: the caller takes its per-point form
    np.testing.assert_array_equal(xp.concrete(x), [1.0, 2.0])
    with pytest.raises(T.NotTraceable):
        xp.concrete(x + 1.0)                 # intermediate values are not known while tracing


def test_constants_fold_and_common_subexpressions_merge():
    tape = T.Tape()
    x = tape.input("x")
    a = np.log(x) * 2.0
    b = np.log(x) * 2.0                      # the same expression: one instruction
    c = (a + b) * 1.0 + 0.0                  # identities add nothing
    prog = T.compile_outputs(tape, {"c": c, "k": 3.0})
    assert prog.n_instructions == 3          # log, mul, add
    assert prog.outputs["k"] == ("const", 3.0)
    xs = np.linspace(0.5, 9.0, 1000)
    np.testing.assert_allclose(TE.run(prog, {"x": xs}, xs.size)["c"], 4.0 * np.log(xs),
                               rtol=1e-15)


def test_sums_of_nonnegative_terms_regroup():
    """(x-1)*3 + y + (x-1)*5 + 2 + 4: where the inputs' bounds show every term >= 0 (x >= 1)
    the compiler adds (x-1)*8 and 6 once, and ((x-1)*3 + y*2 + 4)*0.5 is (x-1)*1.5 + y + 2;
    where a term may be negative (x >= 0, or no bounds) the sums keep their written order
    (regrouping could change a cancellation). The same values either way (to rounding)."""
    xs = np.linspace(1.0, 10.0, 1000)
    ys = np.linspace(0.0, 3.0, 1000)
    for bounds, n_sum, n_scaled in (((1.0, 10.0), 3, 3), ((0.0, np.inf), 5, 5), (None, 5, 5)):
        tape = T.Tape()
        x, y = tape.input("x", bounds=bounds), tape.input("y", bounds=bounds)
        s = (x - 1.0) * 3.0 + y + (x - 1.0) * 5.0 + 2.0 + 4.0
        prog = T.compile_outputs(tape, {"s": s})
        assert prog.n_instructions == n_sum, bounds
        np.testing.assert_allclose(TE.run(prog, {"x": xs, "y": ys}, xs.size)["s"],
                                   (xs - 1.0) * 8.0 + ys + 6.0, rtol=1e-15)
        prog = T.compile_outputs(tape, {"s": ((x - 1.0) * 3.0 + y * 2.0 + 4.0) * 0.5})
        assert prog.n_instructions == n_scaled, bounds
        np.testing.assert_allclose(TE.run(prog, {"x": xs, "y": ys}, xs.size)["s"],
                                   (xs - 1.0) * 1.5 + ys + 2.0, rtol=1e-15)


def test_instructions_decided_by_the_inputs_bounds_fold():
    """With x in [1, 10]: max(x, 0.5) and min(x, 20) are x, the comparisons no x satisfies
    (either operand order) are 0 and a select on them takes its other value; those inside
    the range stay. The same values as without the bounds."""
    xs = np.linspace(1.0, 10.0, 1001)
    for bounds, n_instructions in (((1.0, 10.0), 5), (None, 19)):
        tape = T.Tape()
        x = tape.input("x", bounds=bounds)
        y = np.maximum(x, 0.5) + np.minimum(x, 20.0)
        never = (np.greater(x, 10.0) | np.less(10.0, x) | np.less(x, 1.0)
                 | np.greater(0.5, x) | np.greater_equal(0.5, x) | np.less_equal(11.0, x))
        inside = np.greater(x, 5.0) | np.less(5.0, x)
        prog = T.compile_outputs(tape, {"out": np.where(never, 100.0, y) + inside})
        assert prog.n_instructions == n_instructions, bounds
        np.testing.assert_array_equal(TE.run(prog, {"x": xs}, xs.size)["out"],
                                      2.0 * xs + (xs > 5.0))


# ---- the compiled building blocks against numpy ----------------------------------------------

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


@pytest.mark.parametrize("n", [50, N])       # numpy passes, fused pass
def test_selected_variables_equal_the_full_evaluation(n, monkeypatch):
    grid = _points(11, n=n, draft_max=2)
    kw = dict(dp=8, ep=8)
    full = inf.evaluate("DeepSeek-V3", "H200-SXM", **kw, **grid)
    programs = []
    real = T.compile_outputs
    monkeypatch.setattr(T, "compile_outputs",
                        lambda t, o: programs.append(real(t, o)) or programs[-1])
    keep = ["tpot_s", "ttft_s", "fits", "decode_binding_resource"]
    part = inf.evaluate("DeepSeek-V3", "H200-SXM", variables=keep, **kw, **grid)
    assert sorted(part.data_vars) == sorted(keep)
    for k in keep:
        xr.testing.assert_allclose(part[k], full[k], rtol=1e-9) if part[k].dtype.kind == "f" \
            else xr.testing.assert_equal(part[k], full[k])
    if n >= F.FUSED_MIN_POINTS:           # the rest of the work was dropped
        everything = real(*_trace_whole_block(grid))
        assert programs and programs[-1].n_instructions < everything.n_instructions
    with pytest.raises(inf.SpecError, match="variables = 'tpot' is not an output variable"):
        inf.evaluate("DeepSeek-V3", "H200-SXM", variables=["tpot"], **kw, **grid)


def _trace_whole_block(grid):
    """The whole DeepSeek-V3 block of the test above, traced (every output)."""
    from inference_factory.engine.block import evaluate_block
    from inference_factory.engine.geometry import validate_struct
    from inference_factory.specs.realism import load_realism
    from inference_factory.specs import load_hardware, load_model
    from inference_factory.axes import NUMERIC_AXES, STRUCT_AXES
    s = dict(STRUCT_AXES, dp=8, ep=8)
    g = validate_struct(load_model("DeepSeek-V3"), load_hardware("H200-SXM"), s, load_realism())
    tape = T.Tape()
    ax = {k: (tape.input(k, np.asarray(grid[k])) if k in grid else float(v[0]))
          for k, v in NUMERIC_AXES.items()}
    return tape, evaluate_block(g, ax)


@pytest.mark.parametrize("name", ["dsv3-ep-measured-mtp", "llama70b-draft-8b",
                                  "gpt-oss-roofline-realism", "mixtral-ideal"])
def test_one_point_calls_equal_the_numpy_list_evaluation(name):
    """A one-configuration call (numpy on scalars, nothing traced): equal calls give equal bits,
    and the values are those of the same points in a list (every variable, 1e-12)."""
    kw, draft = CASES[name]
    kw = dict(kw)
    model, hw = kw.pop("model"), kw.pop("hardware")
    for depth in sorted({0, draft}):
        point = dict(batch_size=48.0, kv_len=30_000.0, prompt_len=250_000.0, cache_hit_rate=0.3,
                     draft_depth=depth)
        first = inf.evaluate(model, hw, **kw, **point)
        again = inf.evaluate(model, hw, **kw, **point)
        other = inf.evaluate(model, hw, **kw, **dict(point, batch_size=7.0, kv_len=100.0))
        xr.testing.assert_identical(first, again)
        # the numpy passes at the same points (a two-point list is below the fused threshold)
        ref = inf.evaluate(model, hw, **kw, **dict(point, batch_size=[48.0, 7.0],
                                                    kv_len=xr.DataArray([30_000.0, 100.0],
                                                                        dims="batch_size")))
        for k in ref.data_vars:
            for got, i in ((first, 0), (other, 1)):
                want = ref[k].isel(batch_size=i) if "batch_size" in ref[k].dims else ref[k]
                assert got[k].dtype.kind == want.dtype.kind, k
                if want.dtype.kind == "f":
                    np.testing.assert_allclose(got[k].values, want.values, rtol=1e-12, err_msg=k)
                else:
                    np.testing.assert_array_equal(got[k].values, want.values, err_msg=k)


def test_outputs_in_chunks_keep_their_dtypes(monkeypatch):
    """Flags and codes go through a float buffer chunk by chunk (here 1,000 points, five
    chunks and a short one): the same values and dtypes as the numpy passes."""
    monkeypatch.setattr(TE, "CHUNK_POINTS", 1000)
    kw, draft = CASES["llama70b-tp8"]
    ref, fused, calls = _evaluate_both(kw, _points(13, n=5_300), monkeypatch)
    assert calls
    _assert_same(fused, ref)
    assert fused.fits.dtype == bool and fused.decode_binding_resource.dtype.kind == "U"


def test_point_lists_reuse_their_program_and_retrace_when_it_would_differ(monkeypatch):
    """A second list of the same structure replays the program traced for the first; other
    values of a fixed axis, or draft depths that are all zero (the block's one branch on the
    data), are traced anew; every result equals the numpy passes."""
    traced = []
    real = F._traced_program
    monkeypatch.setattr(F, "_traced_program", lambda *a: traced.append(1) or real(*a))
    kw, draft = CASES["dsv3-acceptance-by-position"]
    kw = dict(kw)
    model, hw = kw.pop("model"), kw.pop("hardware")

    def both(grid):
        got = inf.evaluate(model, hw, **kw, **grid)
        monkeypatch.setattr(F, "FUSED_MIN_POINTS", 10**12)
        ref = inf.evaluate(model, hw, **kw, **grid)
        monkeypatch.setattr(F, "FUSED_MIN_POINTS", 4096)
        _assert_same(got, ref)
    both(_points(21, draft_max=draft))
    both(_points(22, draft_max=draft))                     # same structure: replayed
    assert len(traced) == 1
    fixed = _points(23, draft_max=draft)
    fixed["prefill_batch_size"] = 4.0                       # a fixed axis, another value
    both(fixed)
    both(dict(fixed, prefill_batch_size=2.0))
    no_draft = _points(24, draft_max=draft)
    no_draft["draft_depth"] = no_draft["draft_depth"] * 0.0
    both(no_draft)
    assert len(traced) == 4
