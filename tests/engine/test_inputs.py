"""The checks of the numeric axes (engine.inputs): a number is checked in plain Python, a short
list with numpy, a long point list in one compiled pass; the same verdicts and messages."""

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import inputs


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

