"""The click-free value grammar (inference_factory.specs.grammar): one grammar for every axis
and duration option of every command (issue 10)."""

from __future__ import annotations

import pytest

from inference_factory.errors import SpecError
from inference_factory.specs import grammar as g


@pytest.mark.parametrize("text, expected", [
    ("batch_size=1,2,4,...,32", ("batch_size", (1, 2, 4, 8, 16, 32))),
    ("draft_depth=0..3", ("draft_depth", (0, 1, 2, 3))),
    ("kv_len=geom:1024:4096:3", ("kv_len", (1024.0, 2048.0, 4096.0))),
    ("acceptance_rate=0.6:0.8:3", ("acceptance_rate", (0.6, 0.7, 0.8))),
    ("kv_precision=bf16,fp8", ("kv_precision", ("bf16", "fp8"))),
    ("tp=8", ("tp", (8,))),
])
def test_one_grammar_parses_every_form(text, expected):
    name, values = g.parse_assignment(text, "--axis")
    assert (name, values) == expected
    # whole-number axes stay integers; numeric axes are floats
    assert all(type(v) is type(e) for v, e in zip(values, expected[1]))


@pytest.mark.parametrize("text, message", [
    ("batch_size=2.5", "must be a whole number"),
    ("tp=-8", "tp = -8 is out of range"),
    ("kv_precision=fp5", "kv_precision = 'fp5' is not one of"),
    ("batch_size=1,2,2", "lists 2 twice"),
    ("acceptance_rate=1.5", "out of range"),
    ("cache_hit_rate=1", "out of range"),
    ("overlap=three-batch", "not one of"),
    ("pp=2", "unknown axis 'pp'"),
    ("batch_size", "expected NAME=VALUES"),
])
def test_grammar_refuses_bad_values_in_one_line(text, message):
    with pytest.raises(SpecError, match=message):
        g.parse_assignment(text, "--axis")


@pytest.mark.parametrize("text, seconds", [("50ms", 0.05), ("2s", 2.0), ("250us", 250e-6),
                                           ("1.5 s", 1.5), ("1min", 60.0)])
def test_durations_take_units(text, seconds):
    assert g.parse_duration(text, "--tpot") == pytest.approx(seconds)


@pytest.mark.parametrize("text, message", [("50", "give a unit"), ("50h", "unknown unit"),
                                           ("-5ms", "positive"), ("fast", "expected a duration")])
def test_bad_durations_are_refused(text, message):
    with pytest.raises(SpecError, match=message):
        g.parse_duration(text, "--tpot")

