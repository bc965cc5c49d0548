"""Speculative acceptance from the published acceptance-length curves (configs/acceptance.toml,
InferenceX golden_al_distribution/minimaxm3_eagle3.yaml at commit 843c6254f)."""

from __future__ import annotations

import numpy as np
import pytest

from inference_factory.engine.decode import (acceptance_curves, published_acceptance,
                                             with_mtp_acceptance)
from inference_factory.kernels.speculative import (acceptance_from_acceptance_lengths,
                                                   expected_tokens_per_step_sequence)
from inference_factory.specs import load_model

# the YAML's values, copied by hand from the InferenceX file (thinking_on / thinking_off)
M3_ON = [1.78, 2.38, 2.83, 3.11, 3.35, 3.45, 3.53, 3.74]
M3_OFF = [1.84, 2.52, 2.93, 3.41, 3.59, 3.57, 3.85, 4.06]


def test_the_file_holds_the_published_curve():
    e = acceptance_curves()["MiniMax-M3"]
    assert e["thinking_on"] == M3_ON and e["thinking_off"] == M3_OFF
    assert e["mode"] == "thinking_on" and e["draft"] == "eagle3"


def test_the_derived_acceptance_gives_back_the_curve_where_it_is_consistent():
    a = published_acceptance(load_model("MiniMax-M3"))
    E = expected_tokens_per_step_sequence(draft_depth=np.arange(1, 9), acceptance_by_position=a)
    # thinking_on increments .78 .60 .45 .28 .24 .10 .08 .21 fall until k = 6; the last three
    # pool to .13 each: AL exact at k = 1..5 and at k = 8 (end of the pooled run)
    np.testing.assert_allclose(E[:5], M3_ON[:5], rtol=1e-12)
    assert E[7] == pytest.approx(M3_ON[7], rel=1e-12)
    np.testing.assert_allclose(E[5:7], [3.35 + 0.13, 3.35 + 0.26], rtol=1e-12)
    assert a[0] == pytest.approx(0.78) and np.all((a >= 0) & (a <= 1))


def test_a_dip_in_the_curve_is_pooled_not_negative():
    # thinking_off falls from 3.59 to 3.57 at k = 6: pooled, every acceptance stays in [0, 1]
    a = acceptance_from_acceptance_lengths(M3_OFF)
    assert np.all((a >= 0) & (a <= 1))
    E = expected_tokens_per_step_sequence(draft_depth=np.array([2, 8]), acceptance_by_position=a)
    np.testing.assert_allclose(E, [2.52, 4.06], rtol=1e-12)


def test_the_curve_is_the_default_only_where_published_and_no_rate_is_given():
    m3 = load_model("MiniMax-M3")
    out = with_mtp_acceptance(m3, {}, (0, 1, 2, 3))
    np.testing.assert_allclose(out["acceptance_by_position"], published_acceptance(m3)[:3])
    # a given acceptance_rate keeps the geometric decay; a model without a curve too
    given = with_mtp_acceptance(m3, {"acceptance_rate": 0.8}, (0, 3))
    v3 = with_mtp_acceptance(load_model("DeepSeek-V3"), {}, (0, 3))
    assert given["acceptance_by_position"][0] == v3["acceptance_by_position"][0] == 0.8
