"""The seam (engine.xp): each array operation the physics calls gives numpy's answer on numpy
values, and the same numbers (to the interpreter's rounding) through the tracer; the grid's
interpolation, written on the seam alone, alike on both."""

import numpy as np
import pytest

from inference_factory.engine import grid as G
from inference_factory.engine import xp
from inference_factory.engine.backends import interp as TE
from inference_factory.engine.backends import program as P
from inference_factory.engine.backends import tape as T

XS = np.array([0.3, 1.0, 2.5, 4.0, 7.5, 12.0, 30.0] * 200)


def _traced(f, xs=XS):
    """``f`` of a traced input, compiled and replayed over ``xs``; and the program."""
    tape = T.Tape()
    x = tape.input("x", xs)
    prog = P.compile_outputs(tape, {"y": f(x)})
    return TE.run(prog, {"x": xs}, xs.size)["y"], prog


def test_asarray_and_lookup_on_numpy_and_traced_values():
    assert xp.asarray([1, 2], dtype=float).dtype == float
    table = np.array([10.0, 20.0, 30.0, 40.0])
    np.testing.assert_array_equal(xp.lookup(table, np.array([3, 0])), [40.0, 10.0])
    np.testing.assert_array_equal(xp.lookup(table.reshape(2, 2), 2), 30.0)
    got, _ = _traced(lambda x: xp.lookup(table, np.minimum(xp.asarray(x, dtype=float), 3.0)
                                         .astype(np.intp)))
    np.testing.assert_array_equal(got, table[np.minimum(XS, 3).astype(np.intp)])


def test_apply_where_evaluates_only_the_masked_points_with_numpy():
    seen = []

    def f(base, x):
        seen.append(x.size)
        return base + np.log(x)
    base = np.zeros(XS.size)
    mask = XS > 5.0
    out = xp.apply_where(mask, (base, XS), f, base)
    assert seen == [mask.sum()]
    np.testing.assert_array_equal(out, np.where(mask, np.log(XS), 0.0))
    assert base.sum() == 0.0                             # the input is not written
    traced, prog = _traced(lambda x: xp.apply_where(x > 5.0, (0.0 * x, x), f, 0.0 * x))
    assert (prog.code[:, 0] == T.OP["skip"]).sum() == 1  # skipped where no point is masked
    np.testing.assert_allclose(traced, out, rtol=1e-15)


def test_where_lazy_broadcast_like_full_like_and_any_above():
    np.testing.assert_array_equal(xp.where_lazy(XS > 2.0, lambda: np.sqrt(XS), -1.0),
                                  np.where(XS > 2.0, np.sqrt(XS), -1.0))
    traced, prog = _traced(lambda x: xp.where_lazy(x > 2.0, lambda: np.sqrt(x), -1.0))
    assert (prog.code[:, 0] == T.OP["skip"]).sum() == 1
    np.testing.assert_allclose(traced, np.where(XS > 2.0, np.sqrt(XS), -1.0), rtol=1e-15)
    np.testing.assert_array_equal(xp.broadcast_like(2.0, XS), np.full(XS.shape, 2.0))
    traced, _ = _traced(lambda x: xp.broadcast_like(2.0, x) + xp.broadcast_like(x, 5.0))
    np.testing.assert_array_equal(traced, 2.0 + XS)
    traced, _ = _traced(lambda x: np.full_like(np.log(x), 3.5))
    np.testing.assert_array_equal(traced, 3.5)
    assert xp.any_above(XS, 29.0) and not xp.any_above(XS, 30.0)
    tape = T.Tape()
    x = tape.input("x", XS)
    assert xp.any_above(x, 29.0) and not xp.any_above(x, 30.0)   # from the input's values


def test_memo_key_of_values_known_here_only():
    key = xp.memo_key(np.arange(3.0), 2.0, max_points=3)
    assert key == ((3,), np.arange(3.0).tobytes(), (), np.float64(2.0).tobytes())
    assert xp.memo_key(np.arange(4.0), 2.0, max_points=3) is None
    assert xp.memo_key(T.Tape().input("x", XS), 2.0, max_points=10) is None


@pytest.mark.parametrize("nodes", [1, 2, 5])
@pytest.mark.parametrize("dims", [1, 2])
def test_the_grid_interpolates_alike_on_numpy_and_traced_values(nodes, dims):
    """Inside, below and above the table (the growth along the roofline), separable and,
    in two dimensions, linear in the first coordinate: the same times both ways."""
    axes = tuple(np.log(np.geomspace(1.0, 20.0, nodes)) for _ in range(dims))
    values = np.sin(np.arange(nodes ** dims, dtype=float)).reshape((nodes,) * dims) * 0.3
    grid = G.Grid(axes, values)
    if dims == 1:
        def roofline(x):
            return 1e-6 + x * 1e-7
        modes = ["separable"]
    else:
        def roofline(b, x):
            return b * (1e-6 + x * 1e-7)
        modes = ["separable", "linear_first"]
    for mode in modes:
        def time(x):
            coords = [x] + [x * 0.5 + 1.0] * (dims - 1)
            return G.interpolate_time(grid, coords, roofline, mode)[0]
        want = time(XS)
        got, _ = _traced(time)
        np.testing.assert_allclose(got, want, rtol=1e-12)
