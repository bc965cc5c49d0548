"""The tracer (engine.backends.tape) and its programs: what it records and refuses, what its
compiler folds, merges and regroups, each program replayed by the interpreter
(engine.backends.interp) against the same numpy expression. The engine's evaluation paths
against each other: tests/engine/test_paths.py."""

import numpy as np
import pytest

from inference_factory.engine import xp
from inference_factory.engine.backends import interp as TE
from inference_factory.engine.backends import program as P
from inference_factory.engine.backends import tape as T

def test_programs_skip_guarded_regions():
    tape = T.Tape()
    x = tape.input("x")
    mask = x > 2.0
    with xp.guarded(mask):
        g = np.log(x * 3.0) + 1.0
    out = np.where(mask, g, 0.0) + x
    prog = P.compile_outputs(tape, {"y": out})
    assert (prog.code[:, 0] == T.OP["skip"]).sum() == 1
    xs = np.array([0.5, 1.0, 3.0, 7.0] * 300)
    y = TE.run(prog, {"x": xs}, xs.size)["y"]
    np.testing.assert_allclose(y, np.where(xs > 2, np.log(xs * 3.0) + 1.0, 0.0) + xs,
                               rtol=1e-15)


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
    prog = P.compile_outputs(tape, {"c": c, "k": 3.0})
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
        prog = P.compile_outputs(tape, {"s": s})
        assert prog.n_instructions == n_sum, bounds
        np.testing.assert_allclose(TE.run(prog, {"x": xs, "y": ys}, xs.size)["s"],
                                   (xs - 1.0) * 8.0 + ys + 6.0, rtol=1e-15)
        prog = P.compile_outputs(tape, {"s": ((x - 1.0) * 3.0 + y * 2.0 + 4.0) * 0.5})
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
        prog = P.compile_outputs(tape, {"out": np.where(never, 100.0, y) + inside})
        assert prog.n_instructions == n_instructions, bounds
        np.testing.assert_array_equal(TE.run(prog, {"x": xs}, xs.size)["out"],
                                      2.0 * xs + (xs > 5.0))

