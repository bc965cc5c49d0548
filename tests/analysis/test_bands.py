"""Model-structure term and coverage (analysis/validation/bands.py): computations by hand."""

import numpy as np
import pandas as pd
import pytest

from inference_factory.analysis.validation import bands


def test_conformal_quantile_is_the_ceil_n_plus_1_level_order_statistic():
    s = [0, 0, 0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]          # n = 9: ceil(10 x 0.8) = 8th
    assert bands.conformal_widen_ln(s) == 0.5
    assert bands.conformal_widen_ln([0.3, 0.1]) == 0.3      # too few: the largest


def test_outside_distance():
    d = bands.outside_ln([50, 100, 400], [100, 90, 100], [200, 110, 200])
    assert d == pytest.approx([np.log(2), 0, np.log(2)])


def test_leave_one_out_is_exact_on_ln_linear_tables_and_sees_a_kink():
    class Fam:
        exact, nearest, axes = (), (), ("m",)
    m = np.array([1, 2, 4, 8, 16.0])
    df = pd.DataFrame({"m": m, "log_ratio": 0.5 * np.log(m)})
    assert np.allclose(bands.leave_one_out_residuals(df, Fam), 0)
    df.loc[2, "log_ratio"] += 0.1                            # the middle point 0.1 high
    r = bands.leave_one_out_residuals(df, Fam)
    assert r == pytest.approx([0.05, -0.1, 0.05])


def test_robust_sigma_of_a_normal_sample():
    x = np.random.default_rng(1).normal(0, 0.2, 20000)
    assert bands.robust_sigma_ln(x) == pytest.approx(0.2, rel=0.03)


def test_coverage_and_median_width():
    df = pd.DataFrame({"published": [1, 2, 3, 4.0], "predicted_low": [0.5, 2.5, 2, 3],
                       "predicted_high": [2, 5, 4, 6.0]})
    c = bands.coverage(df)
    assert c["coverage"] == 0.75 and c["median_width"] == pytest.approx(2.0)
