"""Programs compiled to machine code (engine.tape_llvm) against the numpy evaluation and the
interpreter: every output variable to 1e-9 relative on the configurations of
tests/test_tape.py, each instruction with the interpreter's (numpy's) semantics at edge
values, guarded regions, and the on-disk cache (reused, and recompiled when damaged)."""

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import core
from inference_factory.engine import tape as T
from inference_factory.engine import tape_exec as TE
from inference_factory.engine import tape_llvm as TL

from test_tape import CASES, N, _assert_same, _edge_values, _points


@pytest.fixture
def compile_all(monkeypatch, tmp_path):
    """Compile a kernel for any point list, into a fresh cache folder; record the kernels
    that run."""
    monkeypatch.setenv("INFERENCE_FACTORY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(TL, "COMPILE_MIN_POINTS", 0)
    monkeypatch.setattr(TL, "_KERNELS", {})
    monkeypatch.setattr(core, "_FUSED_PROGRAMS", {})
    used = []
    real = TE._parallel
    monkeypatch.setattr(TE, "_parallel", lambda k, *a: used.append(k) or real(k, *a))
    return used


@pytest.mark.parametrize("name,permute", [(name, None) for name in CASES]
                         + [("dsv3-ep-measured-mtp", False), ("llama70b-tp8", False)])
def test_compiled_kernel_equals_numpy_evaluation(name, permute, compile_all, monkeypatch):
    """N + 5 points: the kernel takes whole vectors of points, the interpreter the last 5.
    Tables read by permutes where the CPU has AVX-512, and (two cases) lane by lane, as on
    other CPUs."""
    monkeypatch.setattr(TL, "AVX512", permute)
    kw, draft = CASES[name]
    kw = dict(kw)
    model, hw = kw.pop("model"), kw.pop("hardware")
    grid = _points(hash(name) % 2**32, n=N + 5, draft_max=draft)
    monkeypatch.setattr(core, "FUSED_MIN_POINTS", 10**12)
    ref = inf.evaluate(model, hw, **kw, **grid)
    monkeypatch.setattr(core, "FUSED_MIN_POINTS", 1)
    got = inf.evaluate(model, hw, **kw, **grid)
    assert compile_all, "no compiled kernel ran"
    _assert_same(got, ref)


def _program(build, *names):
    tape = T.Tape()
    xs = [tape.input(k) for k in names]
    return T.compile_outputs(tape, {"y": build(*xs)})


def _both(prog, **inputs):
    """(kernel, interpreter) outputs of ``prog`` at the given points (a multiple of 8)."""
    n = next(iter(inputs.values())).size
    kernel = TL.kernel_for(prog, n)
    assert kernel is not None
    X = [np.ascontiguousarray(inputs[k], dtype=float) for k in prog.inputs]
    names, uniq, _, _ = prog.layout
    Y = np.empty(n)
    kernel(TE._addresses(X), TE._addresses([Y]), 0, n)
    monkey = TL.ENABLED
    try:
        TL.ENABLED = False
        ref = TE.run(prog, dict(zip(prog.inputs, X)), n)["y"]
    finally:
        TL.ENABLED = monkey
    return Y, ref


def _pad(x):
    return np.concatenate([x, np.full(-x.size % TL.LANES, 1.0)])


@pytest.mark.parametrize("avx512,outline", [(None, False), (False, False), (None, True)])
def test_compiled_exp_log_pow_match_numpy(avx512, outline, compile_all, monkeypatch):
    """exp, log and pow within 4 ulp of numpy's (2e-13 for pow, computed as exp(y ln x)),
    its values at the edges (NaN, infinities, signed zeros, subnormals, overflow): reduced by
    tables on AVX-512 (where this CPU has it), and the interpreter's polynomials; inline and
    as functions of their own."""
    monkeypatch.setattr(TL, "AVX512", avx512)
    monkeypatch.setattr(TL, "OUTLINE_MIN_INSTRUCTIONS", 0 if outline else 10**9)
    rng = np.random.default_rng(0)
    x = _pad(np.concatenate([rng.uniform(-745, 709, 40_000), rng.uniform(-1, 1, 10_000),
                             _edge_values()]))
    prog = _program(np.exp, "x")
    tables = TL._Codegen(prog).avx512          # this CPU takes the table reduction
    got, interp = _both(prog, x=x)
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    normal = np.isfinite(ref) & (ref > 2.2250738585072014e-308)
    np.testing.assert_allclose(got[normal], ref[normal], rtol=4 * 2.2e-16, atol=0)
    if tables:      # measured 1 ulp (the docs' figure)
        assert np.all(np.abs(got[normal] - ref[normal]) <= np.spacing(ref[normal]))
    np.testing.assert_allclose(got[~normal], ref[~normal], rtol=0, atol=1e-323)
    np.testing.assert_allclose(got, interp, rtol=4 * 2.2e-16, atol=1e-323)
    y = _pad(np.concatenate([np.exp(rng.uniform(-700, 700, 40_000)),
                             rng.uniform(0.5, 2.0, 10_000), _edge_values()]))
    got, interp = _both(_program(np.log, "x"), x=y)
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = np.log(y)
    ok = np.isfinite(ref)
    np.testing.assert_allclose(got[ok], ref[ok], rtol=4 * 2.2e-16, atol=2.3e-16)
    np.testing.assert_array_equal(got[~ok], ref[~ok])
    np.testing.assert_allclose(got[ok], interp[ok], rtol=4 * 2.2e-16, atol=2.3e-16)
    if tables:      # measured 2 ulp (the docs' figure)
        assert np.all(np.abs(got[ok] - ref[ok]) <= 2 * np.spacing(np.abs(ref[ok])))
    a = _pad(np.concatenate([rng.uniform(0, 1, 20_000), np.exp(rng.uniform(-50, 50, 20_000)),
                             [0.0, -2.0, -2.0, 2.0, np.inf, np.nan, 1.0, 5e-324]]))
    b = _pad(np.concatenate([rng.uniform(0, 5, 20_000), rng.uniform(-10, 10, 20_000),
                             [3.0, 3.0, 0.5, 2000.0, 2.0, 1.0, np.nan, 0.5]]))
    got, interp = _both(_program(np.power, "a", "b"), a=a, b=b)
    with np.errstate(all="ignore"):
        ref = a ** b
    np.testing.assert_allclose(got, ref, rtol=2e-13, atol=0)


@pytest.mark.parametrize("permute", [None, False])
def test_compiled_tables_and_elementwise_ops_equal_the_interpreter(permute, compile_all,
                                                                     monkeypatch):
    """interp, searchsorted, take (truncated, clamped index) and the elementwise ops with
    NaN, infinities and signed zeros: bit for bit the interpreter's values; tables read by
    vector permutes (on an AVX-512 CPU) and lane by lane."""
    monkeypatch.setattr(TL, "AVX512", permute)
    rng = np.random.default_rng(1)
    xp = np.sort(rng.uniform(-5, 10, 23))
    fp = rng.uniform(-3, 3, 23)
    vals = rng.uniform(-1, 1, 17)
    small, big = np.sort(rng.uniform(0, 4, 6)), np.sort(rng.uniform(-9, 30, 40))
    edge = np.array([np.nan, -np.inf, np.inf, 0.0, -0.0, 1.0, -1.0, 16.99, 17.0, 1e300])
    x = _pad(np.concatenate([rng.uniform(-8, 20, 20_000), xp, edge]))
    y = _pad(np.concatenate([rng.uniform(-8, 20, 20_000), xp[::-1], edge[::-1]]))

    def build(x, y):
        terms = [np.interp(x, xp, fp), np.searchsorted(xp, y, side="right"),
                 T.take(vals, x), T.take(small, y), T.take(big, x),
                 np.interp(y, small, np.arange(6.0)), np.interp(x, big, np.arange(40.0)),
                 np.interp(x, big, big[::-1] * 2.0), np.searchsorted(big, x, side="right"),
                 np.searchsorted(small, y, side="right"), np.maximum(x, y), np.minimum(x, 2.0), np.maximum(3.0, y),
                 np.where(x > y, x, y * 2.0), np.where(x, 1.5, y), np.where(y >= 1.0, x, -4.0),
                 (x < y) + (x <= 1.0) * 2.0 + (x == y) * 4.0 + (x != y) * 8.0,
                 np.logical_and(x, y) + np.logical_or(x, y) * 2.0 + np.logical_not(x) * 4.0,
                 -x, np.abs(y), np.floor(x), np.ceil(y), np.trunc(x), np.sqrt(np.abs(x)),
                 x / y, 2.0 / y, y - 1.0, 1.0 - y, x * y + 1.0, x * 3.0 + y]
        out = terms[0]
        for k, t in enumerate(terms[1:]):
            out = out + t * (k + 2.0)
        return out
    with np.errstate(all="ignore"):
        got, ref = _both(_program(build, "x", "y"), x=x, y=y)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("avx512", [None, False])
def test_compiled_max_min_propagate_nan_and_keep_zero_signs_bit_for_bit(avx512, compile_all,
                                                                       monkeypatch):
    """maximum and minimum, one output each (nothing else can make a lane NaN), over every
    pair of NaN, +-inf, +-0 and numbers, with a register or a constant second operand:
    bit for bit the interpreter's values (numpy's: a NaN in either operand gives NaN; of
    two equal operands, the second: maximum(0.0, -0.0) is -0.0)."""
    monkeypatch.setattr(TL, "AVX512", avx512)
    vals = np.array([np.nan, -np.inf, np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, 1e-310, -3.5])
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    x, y = _pad(x), _pad(y)
    ops = {"max": np.maximum, "min": np.minimum}
    for name, f in ops.items():
        for k in (None, 0.0, -0.0, 2.0):
            prog = _program((lambda a, b: f(a, b)) if k is None else (lambda a, b: f(a, k)),
                            "x", "y")
            got, ref = _both(prog, x=x, y=y)
            np.testing.assert_array_equal(got.view(np.uint64), ref.view(np.uint64),
                                          err_msg=f"{name} with {k}")
            want = f(x, y if k is None else k)
            np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64),
                                          err_msg=f"{name} with {k} against numpy")


def test_guarded_regions_branch_per_vector(compile_all):
    tape = T.Tape()
    x = tape.input("x")
    mask = x > 2.0
    with T.guarded(mask):
        g = np.log(x * 3.0) + 1.0
    prog = T.compile_outputs(tape, {"y": np.where(mask, g, 0.0) + x})
    xs = np.array([0.5, 1.0, 0.25, 0.125] * 300 + [3.0, 7.0, 0.5, 1.0] * 2 + [0.5] * 8)
    got, ref = _both(prog, x=xs)
    np.testing.assert_allclose(got, np.where(xs > 2, np.log(xs * 3.0) + 1.0, 0.0) + xs,
                               rtol=1e-15)
    np.testing.assert_allclose(got, ref, rtol=1e-15)


def test_kernels_are_cached_on_disk_and_damaged_files_recompiled(compile_all, monkeypatch,
                                                                  tmp_path):
    prog = _program(lambda x: np.exp(x * 0.5) + 1.0, "x")
    x = np.linspace(-3.0, 3.0, 64)
    first, _ = _both(prog, x=x)
    files = list((tmp_path / "kernels").glob("*.o"))
    assert len(files) == 1
    # a new process: nothing in memory, the object code read back, no compiler needed
    monkeypatch.setattr(TL, "_KERNELS", {})
    monkeypatch.setattr(TL, "compile_ir", lambda *a: pytest.fail("compiled again"))
    again, _ = _both(prog, x=x)
    np.testing.assert_array_equal(again, first)
    # a damaged file is never loaded: below the compile threshold the interpreter runs ...
    files[0].write_bytes(files[0].read_bytes()[:-100])
    monkeypatch.setattr(TL, "_KERNELS", {})
    monkeypatch.setattr(TL, "COMPILE_MIN_POINTS", 10**9)
    assert TL.kernel_for(prog, 64) is None
    # ... and above it the kernel is compiled and stored again
    monkeypatch.undo()
    monkeypatch.setenv("INFERENCE_FACTORY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(TL, "_KERNELS", {})
    monkeypatch.setattr(TL, "COMPILE_MIN_POINTS", 0)
    third, _ = _both(prog, x=x)
    np.testing.assert_array_equal(third, first)
    data = files[0].read_bytes()
    import hashlib
    assert data[:32] == hashlib.sha256(data[32:]).digest()


def test_a_kernel_is_compiled_once_enough_points_went_through_its_program(monkeypatch,
                                                                          tmp_path):
    """Below COMPILE_MIN_POINTS points, in one call or several, a new program is
    interpreted; the call that reaches it compiles the kernel, which later calls use."""
    monkeypatch.setenv("INFERENCE_FACTORY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(TL, "_KERNELS", {})
    monkeypatch.setattr(TL, "_POINTS_SEEN", {})
    monkeypatch.setattr(TL, "COMPILE_MIN_POINTS", 12_000)
    compiled = []
    real = TL.compile_ir
    monkeypatch.setattr(TL, "compile_ir", lambda *a: compiled.append(1) or real(*a))
    ran = []
    real_parallel = TE._parallel
    monkeypatch.setattr(TE, "_parallel", lambda k, *a: ran.append(k) or real_parallel(k, *a))
    prog = _program(lambda x: x * 2.0, "x")
    x = np.arange(5000.0)
    for calls in range(1, 5):                   # 5,000 points a call: the third reaches 12,000
        np.testing.assert_array_equal(TE.run(prog, {"x": x}, x.size)["y"], x * 2.0)
        assert len(compiled) == (calls >= 3) and len(ran) == max(calls - 2, 0), calls


def test_kernels_compiled_and_run_from_several_threads(compile_all):
    """Threads compiling and running kernels at once (LLVM's context is shared with numba's:
    compiles are serialised) give each the single-threaded result."""
    from concurrent.futures import ThreadPoolExecutor
    progs = [_program(lambda x, k=k: np.exp(x * (0.1 * k)) + np.log(x + k), "x")
             for k in range(1, 5)]
    x = np.linspace(0.5, 40.0, 4096)
    want = [np.exp(x * (0.1 * k)) + np.log(x + k) for k in range(1, 5)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda p: TE.run(p, {"x": x}, x.size)["y"], progs * 2))
    assert len(compile_all) == 8            # every call ran a kernel
    for g, w in zip(got, want * 2):
        np.testing.assert_allclose(g, w, rtol=1e-14)


def test_disk_cache_keeps_the_most_recently_used_kernels(compile_all, monkeypatch, tmp_path):
    """Beyond MAX_CACHED_KERNELS files the least recently used kernels are removed; a
    kernel loaded from disk counts as used; other files in the folder are never touched."""
    import os
    monkeypatch.setattr(TL, "MAX_CACHED_KERNELS", 2)
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    progs = [_program(lambda x, k=k: x * (k + 2.0), "x") for k in range(3)]
    x = np.arange(64.0)
    _both(progs[0], x=x)
    _both(progs[1], x=x)
    first = sorted(folder.glob("*.o"), key=lambda f: f.stat().st_mtime)
    for age, f in enumerate(first):          # clearly ordered times: 0 older than 1
        os.utime(f, (1e9 + age, 1e9 + age))
    monkeypatch.setattr(TL, "_KERNELS", {})
    _both(progs[0], x=x)                     # read from disk: now the most recent
    _both(progs[2], x=x)                     # a third file: the least recent goes
    names = {f.name for f in folder.glob("*.o")}
    assert len(names) == 2
    assert first[0].name in names and first[1].name not in names
    assert (folder / "notes.txt").read_text() == "mine"


def test_exp_and_log_reduction_tables():
    """The AVX-512 tables against independent computations: 2^(j/16) by numpy's exp2 (to the
    rounding of a double), ln c_j = hi + lo against math.log (hi the nearest double), c_5 = 1
    exactly (ln x near 1 keeps its relative accuracy), centres 3/4 + j/20 over [3/4, 3/2]."""
    import math
    np.testing.assert_allclose(TL.EXP_TABLE, np.exp2(np.arange(16) / 16.0), rtol=1.2e-16)
    c, hi, lo = TL.LOG_TABLE
    assert c[5] == 1.0 and hi[5] == 0.0 and lo[5] == 0.0
    np.testing.assert_allclose(c, 0.75 + np.arange(16) / 20.0, rtol=2.3e-16)
    ref = np.array([math.log(v) for v in c])
    np.testing.assert_allclose(hi, ref, rtol=1.2e-16, atol=0)
    assert np.all(np.abs(lo) <= 0.5 * np.spacing(np.abs(hi)) + 1e-300)
