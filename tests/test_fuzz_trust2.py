"""The fuzz suite on the surfaces issue 30's second pass touched: token counts on the engine's
token axes (``--axis kv_len=8k``, ``--kv-len 8k``), an empty value on any text option, price
tables in any bytes (UTF-16, a latin-1 byte), the uncertainty file's assumption ranges,
traces' output lengths, and the like-with-like of several bench runs' chart words. Each
property asserts the contract of tests/test_fuzz.py: accepted as what it says, or refused with
one SpecError line naming the field; nothing else escapes. (The ``[published]`` figures of a
factory config are fuzzed by tests/test_fuzz.py's config leaves, which read the schema.)

Budget: the CI profile's max_examples (tests/conftest.py) scaled as in test_fuzz.py."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference_factory.cli import cli
from inference_factory.errors import SpecError
from inference_factory.specs.grammar import MAX_TOKENS, TOKEN_AXES, parse_assignment
from inference_factory.specs.prices import resolve_price_bases


def _fuzz(fraction: float):
    n = max(5, int(settings().max_examples * fraction))
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def _one_line(exc: SpecError, *words: str) -> None:
    text = str(exc)
    assert "\n" not in text and all(w in text for w in words), text


@_fuzz(1.0)
@given(axis=st.sampled_from(TOKEN_AXES),
       ks=st.lists(st.one_of(st.integers(min_value=0, max_value=20_000),
                             st.decimals(min_value=0, max_value=100, places=3)),
                   min_size=1, max_size=4, unique=True))
def test_token_axes_read_k_as_1024(axis, ks):
    spec = ",".join(f"{k}k" for k in ks)
    want = [float(k) * 1024 for k in ks]
    try:
        got = parse_assignment(f"{axis}={spec}", "--axis")
    except SpecError as exc:
        _one_line(exc, axis)
        lo = 0 if axis == "final_len" else 1
        assert any(not lo <= w <= MAX_TOKENS for w in want) or len(set(want)) < len(want)
    else:
        assert got[0] == axis and list(got[1]) == pytest.approx(want, rel=1e-12)


#: Text options of the commands issue 30 names (and bench, roofline), each with the arguments
#: that get the command to parse it.
TEXT_OPTIONS = [("plan", "-m"), ("plan", "-H"), ("plan", "--price"), ("plan", "--price-basis"),
                ("plan", "--draft-model"), ("plan", "--emit-config"), ("plan", "-o"),
                ("simulate", "-c"), ("simulate", "--price-basis"), ("simulate", "-o"),
                ("sweep", "-m"), ("sweep", "-H"), ("sweep", "--price"), ("sweep", "-o"),
                ("bench", "-m"), ("bench", "-H"), ("bench", "--plot"), ("bench", "-o"),
                ("roofline", "-m"), ("roofline", "--draft-model"), ("compare", "-c")]


@_fuzz(0.5)
@given(where=st.sampled_from(TEXT_OPTIONS), blank=st.text(alphabet=" \t", max_size=3))
def test_an_empty_value_is_refused_by_every_text_option(where, blank):
    command, option = where
    r = CliRunner().invoke(cli, [command, option, blank], prog_name="inference-factory")
    assert r.exit_code == 2 and "Traceback" not in r.output
    line = r.stderr.strip()
    assert "\n" not in line and "an empty value" in line and f"'{option}'" in line, line


@_fuzz(1.0)
@given(data=st.binary(max_size=64), suffix=st.sampled_from([".csv", ".toml"]),
       encoding=st.sampled_from([None, "utf-16", "latin-1"]))
def test_price_tables_in_any_bytes(tmp_path_factory, data, suffix, encoding):
    f = tmp_path_factory.mktemp("pb") / f"rates{suffix}"
    if encoding is None:
        f.write_bytes(data)
    else:       # a well-formed table saved in another encoding (with a non-ASCII byte)
        f.write_text("hardware,usd_per_gpu_hour\nH200-SXM,2.0\n# é\n" if suffix == ".csv"
                     else 'name = "é"\n[usd_per_gpu_hour]\nH200-SXM = 2.0\n',
                     encoding=encoding)
    try:
        resolve_price_bases(str(f))
    except SpecError as exc:
        _one_line(exc, "rates")


ASSUMPTIONS = ("expert_skew", "context_cv", "acceptance_rate", "runtime_reserve_frac",
               "overlap_comm_sm_frac")


@_fuzz(1.0)
@given(key=st.sampled_from(ASSUMPTIONS),
       low=st.floats(min_value=-1, max_value=12, allow_nan=False),
       high=st.floats(min_value=-1, max_value=12, allow_nan=False))
def test_uncertainty_assumption_ranges_stay_in_their_domain(tmp_path_factory, key, low, high):
    import re
    from pathlib import Path

    from inference_factory.specs.uncertainty import ASSUMPTION_DOMAINS, load_uncertainty

    src = (Path(__file__).resolve().parents[1] / "configs" / "uncertainty.toml").read_text()
    head = f"[assumptions.{key}]"
    at = src.index(head)
    end = src.find("\n[", at + 1)
    block = src[at:end if end > 0 else len(src)]
    new = re.sub(r"(?m)^low = .*$", f"low = {low!r}", block)
    new = re.sub(r"(?m)^high = .*$", f"high = {high!r}", new)
    f = tmp_path_factory.mktemp("u") / "uncertainty.toml"
    f.write_text(src.replace(block, new))
    lo, hi = ASSUMPTION_DOMAINS[key]
    try:
        u = load_uncertainty(f)
    except SpecError as exc:
        _one_line(exc, f"assumptions.{key}")
        assert not (lo <= low <= high <= hi) or low < 0 or high > 10
    else:
        assert lo <= u.ranges[key][0] <= u.ranges[key][1] <= hi


@_fuzz(1.0)
@given(outs=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=6))
def test_traces_need_output_tokens(tmp_path_factory, outs):
    import json

    from inference_factory.factory.trace_io import load_trace

    f = tmp_path_factory.mktemp("t") / "t.jsonl"
    f.write_text("".join(json.dumps({"timestamp": i, "input_length": 16, "output_length": o})
                         + "\n" for i, o in enumerate(outs)))
    try:
        tr = load_trace(f)
    except SpecError as exc:
        _one_line(exc, "t.jsonl", "output_length")
        assert sum(outs) == 0
    else:
        assert int(tr.output_tokens.sum()) == sum(outs) > 0


@_fuzz(1.0)
@given(runs=st.lists(st.fixed_dictionaries({
    "model": st.sampled_from(["DeepSeek-V3", "Kimi-K2"]),
    "precision": st.sampled_from(["fp8", "fp4"]), "kv_precision": st.sampled_from(["fp8", "bf16"]),
    "isl": st.sampled_from([1024, 8192]), "osl": st.just(1024),
    "range_ratio": st.sampled_from([0.8, 1.0]), "engine": st.just("sglang-0.5.6"),
    "hardware": st.sampled_from(["H200-SXM", "MI355X", "B200"]),
    "deployment": st.sampled_from(["tp8 ep8", "dp8 ep8"])}), min_size=1, max_size=6))
def test_chart_title_and_labels_name_every_difference(runs):
    """The chart's title names what every run shares and each label the rest: a run's words
    (title + label) always name its model, precision, lengths and engine."""
    from inference_factory.cli.bench import _chart_words

    title, labels = _chart_words(runs)
    assert len(labels) == len(runs)
    for a, label in zip(runs, labels):
        words = f"{title} {label}"
        for w in (a["model"], f"{a['precision']} (KV {a['kv_precision']})",
                  f"ISL {a['isl']} / OSL {a['osl']}", a["hardware"], a["deployment"]):
            assert w in words, (w, words)
    assert math.isfinite(len(title))
