"""The fuzz suite on the surfaces of issue 30 (what the user reads is what the model
computed): measured result files for ``bench --compare`` (fields, structure, like-with-like
matching), token counts, names that get a "did you mean", price bases, presets, float options
and the target utilisation. Each property asserts the contract of the rest of the suite
(tests/test_fuzz.py): a value is accepted as what it says, or refused with one SpecError line
naming the field; nothing else escapes.

Budget: the CI profile's max_examples (tests/conftest.py) scaled by ``_n`` as in test_fuzz.py."""

from __future__ import annotations

import json
import math

import click
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference_factory.analysis.bench.comparison import compare_results
from inference_factory.analysis.bench.presets import load_preset
from inference_factory.analysis.bench.results import read_bench_results
from inference_factory.cli.params import FiniteRange
from inference_factory.errors import SpecError, closest
from inference_factory.specs.grammar import MAX_TOKENS, parse_tokens
from inference_factory.specs.prices import resolve_price_bases
from inference_factory.specs.provisioning import check_target_utilization


def _fuzz(fraction: float):
    n = max(5, int(settings().max_examples * fraction))
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


GOOD = {"model_id": "meta-llama/Llama-3.1-70B", "max_concurrency": 4, "duration": 100.0,
        "completed": 40, "output_throughput": 102.4, "total_token_throughput": 512.0,
        "median_ttft_ms": 150.0, "median_tpot_ms": 11.0, "num_gpus": "8", "tp": "8"}
BAD_NUMBERS = st.one_of(
    st.just(0), st.just(-1), st.just(float("nan")), st.just(float("inf")), st.just(1e400),
    st.integers(min_value=2 ** 53 + 1, max_value=10 ** 40), st.just(10 ** 400),
    st.text(max_size=8).filter(lambda s: not s.strip().replace(".", "", 1).isdigit()),
    st.booleans(), st.lists(st.integers(), max_size=2), st.just({"a": 1}))
#: Fields that must be positive numbers (or whole numbers >= 1) where a file gives them.
INTEGERS = ("max_concurrency", "num_gpus", "tp")
STRICT = ("max_concurrency", "duration", "output_throughput", "total_token_throughput",
          "median_ttft_ms", "num_gpus", "tp")


def _one_line(exc: SpecError, *words: str) -> None:
    text = str(exc)
    assert "\n" not in text and all(w in text for w in words), text


@_fuzz(1.0)
@given(field=st.sampled_from(STRICT), value=BAD_NUMBERS)
def test_compare_file_bad_field(tmp_path_factory, field, value):
    if field in ("duration",) and value == 0:
        value = -1          # a zero duration is a (degenerate) number >= 0
    if isinstance(value, int) and value > 2 ** 53 and field not in INTEGERS:
        value = -value      # a huge measured figure is a number; a huge count is not
    f = tmp_path_factory.mktemp("r") / "run.json"
    f.write_text(json.dumps(GOOD | {field: value}, allow_nan=True))
    with pytest.raises(SpecError) as exc:
        read_bench_results(f)
    _one_line(exc.value, "run.json", repr(field))


_JSON = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers()
                     | st.text(max_size=6),
                     lambda kids: st.lists(kids, max_size=3)
                     | st.dictionaries(st.text(max_size=6), kids, max_size=3), max_leaves=12)


@_fuzz(1.0)
@given(obj=_JSON, depth=st.integers(min_value=0, max_value=200))
def test_compare_file_structure(tmp_path_factory, obj, depth):
    """Any JSON (and any nesting) reads as runs or is one SpecError line naming the file."""
    f = tmp_path_factory.mktemp("r") / "junk.json"
    f.write_text("[" * depth + json.dumps(GOOD | {"extra": obj}) + "]" * depth)
    try:
        df = read_bench_results(f)
    except SpecError as exc:
        _one_line(exc.value if hasattr(exc, "value") else exc, "junk.json")
    else:
        assert len(df) == 1 and df["max_concurrency"].iloc[0] == 4


PRED_ATTRS = dict(model="Llama-3.1-70B", hardware="H100-SXM", isl=1024, osl=256,
                  range_ratio=1.0, precision="fp8", deployment="tp8")


@_fuzz(1.0)
@given(isl=st.sampled_from([1024.0, 8192.0, math.nan]),
       model=st.sampled_from(["meta-llama/Llama-3.1-70B", "deepseek-ai/DeepSeek-R1", "x", None]),
       hw=st.sampled_from(["h100", "H100-SXM", "b200-dgxc", "zz", None]),
       prec=st.sampled_from(["fp8", "nvfp4", "int4", None]),
       gpus=st.sampled_from([8.0, 4.0]), dep=st.sampled_from(["tp8", "tp4 ep4", "", None]),
       conc=st.sampled_from([4.0, 64.0]))
def test_compare_scores_only_like_with_like(isl, model, hw, prec, gpus, dep, conc):
    pred = pd.DataFrame([dict(concurrency=4, num_gpus=8, total_token_throughput_per_gpu=100.0,
                              output_throughput=50.0, median_ttft_ms=90.0,
                              median_tpot_ms=10.0)])
    pred.attrs.update(PRED_ATTRS)
    meas = pd.DataFrame([dict(max_concurrency=conc, isl=isl, osl=256.0, model=model,
                              hardware=hw, precision=prec, num_gpus=gpus, deployment=dep,
                              total_token_throughput_per_gpu=80.0, output_throughput=40.0,
                              median_ttft_ms=100.0, median_tpot_ms=11.0, source="f.json")])
    out = compare_results(pred, meas).iloc[0]
    alike = (conc == 4 and (math.isnan(isl) or isl == 1024) and gpus == 8
             and model in ("meta-llama/Llama-3.1-70B", None) and hw in ("h100", "H100-SXM", None)
             and prec in ("fp8", None) and dep in ("tp8", "", None))
    assert bool(out["matched"]) == alike and (out["reason"] == "") == alike
    assert math.isnan(out["median_ttft_ms_abs_ln"]) != alike


@_fuzz(1.0)
@given(text=st.one_of(st.text(max_size=10), st.integers(min_value=-5, max_value=10 ** 9)))
def test_token_counts(text):
    try:
        n = parse_tokens(text, "--isl")
    except SpecError as exc:
        _one_line(exc, "--isl")
    else:
        assert isinstance(n, int) and 1 <= n <= MAX_TOKENS


@_fuzz(1.0)
@given(name=st.text(max_size=12), choices=st.lists(st.text(max_size=8), max_size=6))
def test_closest_name_is_one_of_the_choices_or_none(name, choices):
    got = closest(name, choices)
    assert got is None or got in choices


@_fuzz(0.5)
@given(name=st.text(max_size=14))
def test_price_basis_names_and_presets(name):
    for call in (lambda: resolve_price_bases(name), lambda: load_preset(name)):
        try:
            call()
        except SpecError as exc:
            _one_line(exc)


@_fuzz(1.0)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6)))
def test_float_options_are_finite(value):
    try:
        x = FiniteRange(0, 1).convert(str(value), None, None)
    except click.BadParameter:
        pass
    else:
        assert math.isfinite(x) and 0 <= x <= 1
    try:
        u = check_target_utilization(value, "--target-utilization")
    except SpecError as exc:
        _one_line(exc, "--target-utilization")
    else:
        assert 0 < u <= 1
