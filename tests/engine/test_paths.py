"""The engine's evaluation paths against the numpy reference: one equality suite, by path.

``inf.evaluate`` takes one of four paths (``engine/fused.py``), and each must give what the
reference gives:

* ``numpy``, the reference: one numpy pass of ``engine.block.evaluate_block`` over the grid;
* ``fused``: a list of points as one compiled pass, the block traced once on stand-ins for the
  per-point axes (``engine.backends.tape``) and replayed per point by the numba interpreter
  (``engine.backends.interp``);
* ``tiled``: a long grid cut into tiles along its longest dimension, a numpy pass per tile, on
  threads;
* ``one-point``: a single configuration, numpy on scalars, nothing traced.

Equal means: the same variables, dims and dtypes; floats within :data:`RTOL` of the path
(relative, no absolute slack); flags, codes and labels identical. Every test also asserts
that the path it names was taken (the ``taken`` spy), so a change of a threshold cannot turn
a test into a comparison of the reference with itself.
"""

import zlib

import numpy as np
import pytest
import xarray as xr

import inference_factory as inf
from inference_factory.engine import fused as F
from inference_factory.engine.backends import interp as TE
from inference_factory.engine.backends import program as P
from inference_factory.engine.backends import tape as T

#: Relative tolerance of each path against the numpy reference (floats; 0 absolute).
RTOL = {"fused": 1e-9, "tiled": 1e-9, "one-point": 1e-12}
PATHS = list(RTOL)

N = 5_000          # above F.FUSED_MIN_POINTS: a list of points takes the fused pass
TILE = 512         # tiles of the tiled path over N points: 9 full tiles and a short one
ONE_POINTS = 6     # points of each list evaluated one at a time on the one-point path


def test_the_sizes_reach_their_paths():
    """The preconditions of the tests below, explicit: N points are a fused list by default,
    and N points cut in tiles of TILE give several tiles and a short last one."""
    assert N >= F.FUSED_MIN_POINTS
    assert N >= 4 * TILE and N % TILE


@pytest.fixture(autouse=True)
def _fresh_programs(monkeypatch):
    """Each test traces its own programs (none kept from another test)."""
    monkeypatch.setattr(F, "_FUSED_PROGRAMS", {})


class Taken:
    """What the evaluations since the last :meth:`clear` did: the numpy block passes (points
    of each), the blocks traced for a program, and the compiled runs."""

    def __init__(self):
        self.clear()

    def clear(self):
        self.blocks, self.traced, self.runs = [], 0, 0

    def assert_path(self, path, tiles=None):
        if path == "fused":
            assert self.runs >= 1, "the fused pass was not taken"
        elif path == "tiled":
            assert self.runs == 0 and self.traced == 0
            assert len(self.blocks) >= 2, f"not tiled: {len(self.blocks)} block(s)"
            if tiles is not None:
                assert len(self.blocks) == tiles, self.blocks
        elif path == "one-point":
            assert self.runs == 0 and self.traced == 0
            assert self.blocks and set(self.blocks) == {1}, self.blocks
        else:
            assert path == "numpy", path
            assert self.runs == 0 and self.traced == 0
            assert len(self.blocks) == 1, self.blocks


@pytest.fixture
def taken(monkeypatch):
    spy = Taken()
    real_block = F.evaluate_block

    def block(g, raw, *a, **k):
        if any(isinstance(v, T.Traced) for v in raw.values()):
            spy.traced += 1
        else:
            spy.blocks.append(max([np.size(v) for v in raw.values()] or [1]))
        return real_block(g, raw, *a, **k)
    monkeypatch.setattr(F, "evaluate_block", block)
    real_run = TE.run

    def run(*a, **k):
        spy.runs += 1
        return real_run(*a, **k)
    monkeypatch.setattr(TE, "run", run)
    return spy


def _use(path, monkeypatch, tile=TILE):
    """Route the next evaluations of lists through ``path`` (the thresholds of fused.py)."""
    fused_min, tile_points = {"numpy": (10**12, 10**9), "fused": (1, 10**9),
                              "tiled": (10**12, tile)}[path]
    monkeypatch.setattr(F, "FUSED_MIN_POINTS", fused_min)
    monkeypatch.setattr(F, "TILE_POINTS", tile_points)


def _assert_same(got, ref, rtol, kind_only=False):
    assert set(got.data_vars) == set(ref.data_vars)
    for k in ref.data_vars:
        a, b = got[k], ref[k]
        assert a.dims == b.dims, k
        assert (a.dtype.kind == b.dtype.kind) if kind_only else (a.dtype == b.dtype), k
        if b.dtype.kind == "f":
            np.testing.assert_allclose(a.values, b.values, rtol=rtol, atol=0, err_msg=k)
        else:
            np.testing.assert_array_equal(a.values, b.values, err_msg=k)


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


def _split(kw):
    kw = dict(kw)
    return kw.pop("model"), kw.pop("hardware"), kw


_REFERENCES: dict[str, tuple] = {}


def _case(name, taken):
    """The case's points and their numpy reference (evaluated once per case and process)."""
    if name not in _REFERENCES:
        kw, draft = CASES[name]
        model, hw, kw = _split(kw)
        grid = _points(zlib.crc32(name.encode()), draft_max=draft)
        taken.clear()
        with pytest.MonkeyPatch.context() as mp:
            _use("numpy", mp)
            ref = inf.evaluate(model, hw, **kw, **grid)
        taken.assert_path("numpy")
        _REFERENCES[name] = grid, ref
    taken.clear()
    return _REFERENCES[name]


# ---- every path, every case --------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("path", PATHS)
def test_path_equals_the_numpy_reference(path, name, monkeypatch, taken):
    """Every output variable of N random non-separable points, whatever the model, device,
    realism and structure: the fused pass and the tiled numpy passes over the whole list,
    and the one-point path at a few of the points."""
    grid, ref = _case(name, taken)
    model, hw, kw = _split(CASES[name][0])
    if path == "one-point":
        for i in np.linspace(0, N - 1, ONE_POINTS).astype(int):
            point = {k: float(v.values[i]) for k, v in grid.items()}
            taken.clear()
            got = inf.evaluate(model, hw, **kw, **point)
            taken.assert_path(path)
            _assert_same(got, ref.isel(point=i), RTOL[path], kind_only=True)
        return
    _use(path, monkeypatch)
    got = inf.evaluate(model, hw, **kw, **grid)
    taken.assert_path(path, tiles=-(-N // TILE) if path == "tiled" else None)
    _assert_same(got, ref, RTOL[path])


@pytest.mark.parametrize("path", ["tiled", "fused"])
@pytest.mark.parametrize("case", [
    dict(model="DeepSeek-V3", hardware="H800-SXM", dp=32, ep=32, overlap="two-batch"),
    dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8),
    dict(model="gpt-oss-120b", hardware="B200", tp=2, ep=2, realism="roofline"),
], ids=lambda c: c["model"])
def test_a_short_list_with_whole_tiles_without_a_draft(case, path, monkeypatch, taken):
    """1,003 points in tiles of 64 (15 tiles and a short last one), the first 150 without a
    draft pass (a branch of the block): the same as one numpy block; labels restored from
    integer codes."""
    model, hw, kw = _split(case)
    rng = np.random.default_rng(7)
    n = 1003

    def da(v):
        return xr.DataArray(v, dims="point")
    grid = dict(batch_size=da(rng.integers(1, 513, n).astype(float)),
                kv_len=da(rng.integers(16, 200_000, n).astype(float)),
                prompt_len=da(rng.integers(16, 200_000, n).astype(float)),
                prefill_batch_size=da(rng.integers(1, 9, n).astype(float)),
                acceptance_rate=da(rng.uniform(0.5, 0.95, n)),
                cache_hit_rate=da(rng.uniform(0.0, 0.9, n)))
    if model == "DeepSeek-V3":
        d = rng.integers(0, 4, n).astype(float)
        d[:150] = 0.0                 # whole tiles without a draft pass (a branch of the block)
        grid["draft_depth"] = da(d)
    _use("numpy", monkeypatch)
    ref = inf.evaluate(model, hw, **kw, **grid)
    taken.assert_path("numpy")
    taken.clear()
    _use(path, monkeypatch, tile=64)
    got = inf.evaluate(model, hw, **kw, **grid)
    taken.assert_path(path, tiles=16 if path == "tiled" else None)
    _assert_same(got, ref, RTOL[path])
    labels = set(np.unique(ref.decode_binding_resource.values))
    assert labels <= {"compute", "memory", "comm", "overhead"} and ref.decode_binding_resource.dtype.kind == "U"


def test_tiled_outer_product_with_a_long_axis_equals_one_block(monkeypatch, taken):
    """A long list axis crossed with short ones and a point list of another dimension: tiles
    run along the longest dimension; variables that do not vary along it (prefill here) are
    kept once."""
    kw = dict(batch_size=[float(b) for b in range(1, 1001)], kv_len=[512.0, 4096.0, 70000.0],
              prompt_len=xr.DataArray([100.0, 5000.0], dims="p"), draft_depth=[0, 2])
    _use("numpy", monkeypatch)
    ref = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=8, ep=8, **kw)
    taken.assert_path("numpy")
    taken.clear()
    _use("tiled", monkeypatch, tile=50)
    tiled = inf.evaluate("DeepSeek-V3", "H800-SXM", dp=8, ep=8, **kw)
    taken.assert_path("tiled", tiles=20)
    assert "batch_size" not in tiled.prefill_step_s.dims
    _assert_same(tiled, ref, RTOL["tiled"])


# ---- the fused pass --------------------------------------------------------------------------

def test_fused_skipped_regions_with_small_blocks(monkeypatch, taken):
    """Blocks of 16 points: most blocks have no point beyond a table, so the guarded
    corrections are skipped there and run in the others; the results do not change."""
    monkeypatch.setattr(TE, "BLOCK_POINTS", 16)
    kw, draft = CASES["dsv3-ep-measured-mtp"]
    model, hw, kw = _split(kw)
    grid = _points(3, draft_max=draft)
    grid["kv_len"][::50] = 400_000.0          # a few points far beyond the tables
    grid["batch_size"][::70] = 4096.0
    _use("numpy", monkeypatch)
    ref = inf.evaluate(model, hw, **kw, **grid)
    _use("fused", monkeypatch)
    got = inf.evaluate(model, hw, **kw, **grid)
    taken.assert_path("fused")
    _assert_same(got, ref, RTOL["fused"])


def test_untraceable_code_falls_back_to_numpy(monkeypatch, taken):
    """An operation the tape cannot record: the same result from the numpy passes."""
    grid = _points(5)
    _use("numpy", monkeypatch)
    ref = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, **grid)
    refused = []

    def refuse(*a, **k):
        refused.append(1)
        raise T.NotTraceable("test")
    monkeypatch.setattr(T.Tape, "emit", refuse)
    monkeypatch.setattr(F, "_FUSED_PROGRAMS", {})
    _use("fused", monkeypatch)
    taken.clear()
    got = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, **grid)
    assert refused, "the fused pass was not tried"
    assert taken.traced == 1 and taken.runs == 0 and len(taken.blocks) == 1   # fell back
    _assert_same(got, ref, RTOL["fused"])


@pytest.mark.parametrize("path", ["numpy", "fused", "tiled"])
def test_selected_variables_equal_the_full_evaluation(path, monkeypatch, taken):
    """``variables=``: the selected variables equal those of the full evaluation (on each
    path of a list); on the fused pass the rest of the work is dropped from the program."""
    n = 50 if path == "numpy" else N        # 50 points: numpy's passes by default
    grid = _points(11, n=n, draft_max=2)
    kw = dict(dp=8, ep=8)
    if path != "numpy":
        _use(path, monkeypatch)
    full = inf.evaluate("DeepSeek-V3", "H200-SXM", **kw, **grid)
    programs = []
    real = P.compile_outputs
    monkeypatch.setattr(P, "compile_outputs",
                        lambda t, o: programs.append(real(t, o)) or programs[-1])
    keep = ["tpot_s", "ttft_s", "fits", "decode_binding_resource"]
    taken.clear()
    part = inf.evaluate("DeepSeek-V3", "H200-SXM", variables=keep, **kw, **grid)
    taken.assert_path(path, tiles=-(-N // TILE) if path == "tiled" else None)
    assert sorted(part.data_vars) == sorted(keep)
    for k in keep:
        xr.testing.assert_allclose(part[k], full[k], rtol=1e-9) if part[k].dtype.kind == "f" \
            else xr.testing.assert_equal(part[k], full[k])
    if path == "fused":                     # the rest of the work was dropped
        everything = real(*_trace_whole_block(grid))
        assert programs and programs[-1].n_instructions < everything.n_instructions
    else:
        assert programs == []
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


def test_fused_outputs_in_chunks_keep_their_dtypes(monkeypatch, taken):
    """Flags and codes go through a float buffer chunk by chunk (here 1,000 points, five
    chunks and a short one): the same values and dtypes as the numpy passes."""
    monkeypatch.setattr(TE, "CHUNK_POINTS", 1000)
    model, hw, kw = _split(CASES["llama70b-tp8"][0])
    grid = _points(13, n=5_300)
    _use("numpy", monkeypatch)
    ref = inf.evaluate(model, hw, **kw, **grid)
    _use("fused", monkeypatch)
    got = inf.evaluate(model, hw, **kw, **grid)
    taken.assert_path("fused")
    _assert_same(got, ref, RTOL["fused"])
    assert got.fits.dtype == bool and got.decode_binding_resource.dtype.kind == "U"


def test_fused_point_lists_reuse_their_program_and_retrace_when_it_would_differ(monkeypatch,
                                                                                taken):
    """A second list of the same structure replays the program traced for the first; other
    values of a fixed axis, or draft depths that are all zero (the block's one branch on the
    data), are traced anew; every result equals the numpy passes."""
    traced = []
    real = F._traced_program
    monkeypatch.setattr(F, "_traced_program", lambda *a: traced.append(1) or real(*a))
    model, hw, kw = _split(CASES["dsv3-acceptance-by-position"][0])
    draft = CASES["dsv3-acceptance-by-position"][1]

    def both(grid):
        taken.clear()
        got = inf.evaluate(model, hw, **kw, **grid)
        taken.assert_path("fused")
        monkeypatch.setattr(F, "FUSED_MIN_POINTS", 10**12)
        ref = inf.evaluate(model, hw, **kw, **grid)
        monkeypatch.setattr(F, "FUSED_MIN_POINTS", 4096)
        _assert_same(got, ref, RTOL["fused"])
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


def test_long_point_lists_evaluated_from_several_threads_at_once(taken):
    """Two threads evaluating long point lists at once (the compiled pass, lazy labels):
    each gets what it gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    from inference_factory.engine import inputs
    n = inputs._PARALLEL_MIN + 11
    assert n >= F.FUSED_MIN_POINTS          # a fused list

    def grid(seed):
        r = np.random.default_rng(seed)
        return dict(batch_size=xr.DataArray(r.integers(1, 300, n).astype(float), dims="p"),
                    kv_len=xr.DataArray(r.integers(128, 9000, n).astype(float), dims="p"))
    grids = [grid(s) for s in (1, 2)]
    alone = [inf.evaluate("Llama-3.1-8B", "H100-SXM", **g, variables=[
        "tpot_s", "decode_binding_resource"]) for g in grids]
    taken.assert_path("fused")
    taken.clear()
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda g: inf.evaluate("Llama-3.1-8B", "H100-SXM", **g, variables=[
            "tpot_s", "decode_binding_resource"]), grids * 2))
    assert taken.runs == 4
    assert len(both) == 4
    for got, want in zip(both, alone * 2):
        xr.testing.assert_allclose(got.tpot_s, want.tpot_s, rtol=1e-12)
        xr.testing.assert_equal(got.decode_binding_resource, want.decode_binding_resource)


# ---- one point ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dsv3-ep-measured-mtp", "llama70b-draft-8b",
                                  "gpt-oss-roofline-realism", "mixtral-ideal"])
def test_one_point_calls_equal_the_numpy_list_evaluation(name, taken):
    """A one-configuration call (numpy on scalars, nothing traced): equal calls give equal bits,
    and the values are those of the same points in a list (every variable, 1e-12)."""
    kw, draft = CASES[name]
    model, hw, kw = _split(kw)
    depths = sorted({0, draft})
    assert depths
    for depth in depths:
        point = dict(batch_size=48.0, kv_len=30_000.0, prompt_len=250_000.0, cache_hit_rate=0.3,
                     draft_depth=depth)
        taken.clear()
        first = inf.evaluate(model, hw, **kw, **point)
        again = inf.evaluate(model, hw, **kw, **point)
        other = inf.evaluate(model, hw, **kw, **dict(point, batch_size=7.0, kv_len=100.0))
        taken.assert_path("one-point")
        xr.testing.assert_identical(first, again)
        # the numpy passes at the same points (a two-point list is below the fused threshold)
        taken.clear()
        ref = inf.evaluate(model, hw, **kw, **dict(point, batch_size=[48.0, 7.0],
                                                    kv_len=xr.DataArray([30_000.0, 100.0],
                                                                        dims="batch_size")))
        taken.assert_path("numpy")
        assert set(first.data_vars) == set(other.data_vars) == set(ref.data_vars)
        for k in ref.data_vars:
            for got, i in ((first, 0), (other, 1)):
                want = ref[k].isel(batch_size=i) if "batch_size" in ref[k].dims else ref[k]
                assert got[k].dtype.kind == want.dtype.kind, k
                if want.dtype.kind == "f":
                    np.testing.assert_allclose(got[k].values, want.values,
                                               rtol=RTOL["one-point"], err_msg=k)
                else:
                    np.testing.assert_array_equal(got[k].values, want.values, err_msg=k)


def test_a_kept_draft_pass_equals_one_computed_alone(monkeypatch):
    """The draft pass is kept per draft geometry, batch and context and shared by the overlap
    policies of one shape: each policy's result equals the one computed with nothing kept, and
    other batches or contexts do not hit another's pass."""
    import numpy as np

    from inference_factory.engine import block
    from inference_factory.engine.arrays import evaluate_arrays

    ax = dict(batch_size=np.array([1.0, 8.0, 64.0])[:, None], draft_depth=np.array([0.0, 2.0]),
              kv_len=4096.0)
    kw = dict(tp=1, dp=8, ep=8)

    def both(memo: bool, **extra):
        monkeypatch.setattr(block, "_DRAFT_PASSES", {})
        if not memo:
            monkeypatch.setattr(block, "_DRAFT_MEMO_POINTS", -1)      # nothing kept
        out = [evaluate_arrays("DeepSeek-V3", "H200-SXM", overlap=ov, **kw, **ax, **extra)
               for ov in ("none", "two-batch")]
        kept = len(block._DRAFT_PASSES)
        monkeypatch.setattr(block, "_DRAFT_MEMO_POINTS", 1 << 14)
        return out, kept
    shared, kept = both(True)
    alone, none_kept = both(False)
    assert kept == 1 and none_kept == 0           # one pass served both policies
    for a, b in zip(shared, alone):
        assert set(a) == set(b)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    other, _ = both(True, prompt_len=1000.0)
    more = evaluate_arrays("DeepSeek-V3", "H200-SXM", overlap="none", **kw,
                           **dict(ax, kv_len=8192.0))
    assert len(block._DRAFT_PASSES) == 2          # another context: its own pass
    ref = evaluate_arrays("DeepSeek-V3", "H200-SXM", overlap="none", **kw, **ax)
    assert not np.array_equal(more["decode_draft_s"], ref["decode_draft_s"])
