"""Request traces: synthetic generation (determinism, conservation, shares, diurnal profile,
turn order) and the Mooncake JSONL / CSV loaders (including their error messages)."""

import dataclasses
import json
import re

import numpy as np
import pytest

from inference_factory.errors import SpecError
from inference_factory.factory import workload as W
from inference_factory.factory.workload import (Trace, WorkloadClass, WorkloadSpec,
                                                example_spec, example_trace_path,
                                                generate_trace, load_trace)

CHAT = WorkloadClass("chat", 0.6, prompt_tokens_median=100, prompt_tokens_sigma=1.0,
                     output_tokens_median=300, output_tokens_sigma=0.8, max_prompt_tokens=4000,
                     max_output_tokens=4000, system_prompt_tokens=200, n_system_prompts=10,
                     system_prompt_zipf=1.0, turns_mean=4.0, acceptance_rate=0.8,
                     expert_skew=0.5)
AGENT = WorkloadClass("agent", 0.3, prompt_tokens_median=500, prompt_tokens_sigma=1.2,
                      output_tokens_median=200, output_tokens_sigma=0.9, max_prompt_tokens=8000,
                      max_output_tokens=2000, system_prompt_tokens=1500, n_system_prompts=500,
                      system_prompt_zipf=1.1, turns_mean=6.0, acceptance_rate=0.9,
                      expert_skew=1.0, max_context_tokens=20_000)
SINGLE = WorkloadClass("single", 0.1, prompt_tokens_median=300, prompt_tokens_sigma=0.5,
                       output_tokens_median=1000, output_tokens_sigma=0.5, max_prompt_tokens=2000,
                       max_output_tokens=8000)
SPEC = WorkloadSpec(n_requests=20_000, arrival_rate_per_s=5.0, diurnal_amplitude=0.3, seed=3,
                    classes=(CHAT, AGENT, SINGLE))


@pytest.fixture(scope="module")
def trace() -> Trace:
    return generate_trace(SPEC)


# ---- determinism --------------------------------------------------------------------------

ARRAYS = ("arrival_s", "class_id", "input_tokens", "output_tokens", "chain_offsets",
          "chain_items", "item_tokens", "own_item", "conversation_id")


def test_same_spec_and_seed_give_identical_arrays(trace):
    again = generate_trace(SPEC)
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(again, name), getattr(trace, name), err_msg=name)


def test_different_seed_gives_a_different_trace(trace):
    other = generate_trace(dataclasses.replace(SPEC, seed=4))
    assert other.n_requests == trace.n_requests
    assert not np.array_equal(other.input_tokens, trace.input_tokens)
    assert not np.array_equal(other.arrival_s, trace.arrival_s)


def _chains_vectorized(perm, sys_item, within, own):
    """The chain construction generate_trace used before the compiled one (independent
    reference): chains built in generation order with numpy, then rows permuted."""
    has_sys = sys_item >= 0
    lengths = has_sys.astype(np.int64) + within
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    row = np.repeat(np.arange(perm.size), lengths)
    pos = np.arange(offsets[-1], dtype=np.int64) - offsets[:-1][row]
    earlier = pos - has_sys[row]
    first = np.arange(perm.size) - within                # first turn of each conversation
    items = np.where(earlier < 0, sys_item[row], own[np.maximum(first[row] + earlier, 0)])
    new_len = lengths[perm]
    new_off = np.concatenate(([0], np.cumsum(new_len)))
    src = np.repeat(offsets[:-1][perm] - new_off[:-1], new_len) + np.arange(new_off[-1])
    return new_off, items[src]


@pytest.mark.parametrize("seed", range(6))
def test_compiled_chains_equal_interpreted_and_vectorized_reference(seed):
    rng = np.random.default_rng(seed)
    turns = rng.geometric(1 / rng.uniform(1, 6), rng.integers(1, 400))
    n = int(turns.sum())
    within = np.concatenate([np.arange(k) for k in turns]).astype(np.int64)
    sys_item = np.repeat(np.where(rng.random(turns.size) < 0.7,
                                  rng.integers(0, 9, turns.size), -1), turns)
    has_next = within < np.repeat(turns, turns) - 1
    own = np.full(n, -1, np.int64)
    own[has_next] = 9 + np.arange(int(has_next.sum()))
    perm = rng.permutation(n)
    want = _chains_vectorized(perm, sys_item, within, own)
    for got in (W._compiled_chains()(perm, sys_item, within, own),
                W._sorted_chains(perm, sys_item, within, own)):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("ties", [False, True])
def test_arrival_order_is_the_stable_sort(ties):
    rng = np.random.default_rng(1)
    arrival = rng.random(50_000) * 1e4
    if ties:                                         # zero think time: equal arrivals
        arrival = np.repeat(arrival[:10_000], 5)[rng.permutation(50_000)]
    np.testing.assert_array_equal(W._arrival_order(arrival),
                                  np.argsort(arrival, kind="stable"))


def test_zero_think_time_keeps_turn_order():
    tr = generate_trace(dataclasses.replace(SPEC, think_time_mean_s=0.0, n_requests=5_000))
    conv, order = tr.conversation_id, np.arange(tr.n_requests)
    for c in np.unique(conv)[:200]:
        idx = order[conv == c]
        assert np.all(np.diff(tr.chain_lengths[idx]) == 1)   # turn k+1 has one more item


# ---- structure and conservation -----------------------------------------------------------

def test_exact_request_count_sorted_arrivals_and_dtypes(trace):
    assert trace.n_requests == SPEC.n_requests
    assert np.all(np.diff(trace.arrival_s) >= 0)
    assert trace.arrival_s.dtype == np.float64 and trace.class_id.dtype == np.int16
    for name in ("input_tokens", "output_tokens", "chain_offsets", "chain_items",
                 "item_tokens", "own_item"):
        assert getattr(trace, name).dtype == np.int64, name
    assert trace.class_names == ("chat", "agent", "single")
    np.testing.assert_array_equal(trace.acceptance_rate, [0.8, 0.9, 0.0])
    np.testing.assert_array_equal(trace.expert_skew, [0.5, 1.0, 0.0])


def test_tokens_conserved(trace):
    # input = chain tokens + own new tokens, and the new tokens are a real message
    chain_tok = np.array([trace.item_tokens[trace.chain(i)].sum()
                          for i in range(trace.n_requests)])
    new = trace.input_tokens - chain_tok
    np.testing.assert_array_equal(new, trace.new_tokens)
    assert new.min() >= 1
    # an own item holds exactly this turn's new message plus its answer
    has = trace.own_item >= 0
    np.testing.assert_array_equal(trace.item_tokens[trace.own_item[has]],
                                  new[has] + trace.output_tokens[has])
    # lengths respect the class caps
    for ci, c in enumerate(SPEC.classes):
        sel = trace.class_id == ci
        assert new[sel].max() <= c.max_prompt_tokens
        assert 1 <= trace.output_tokens[sel].min()
        assert trace.output_tokens[sel].max() <= c.max_output_tokens


def test_next_turn_prompt_is_previous_prompt_plus_answer_plus_message(trace):
    producer = np.full(trace.n_items, -1)
    has = trace.own_item >= 0
    producer[trace.own_item[has]] = np.flatnonzero(has)
    checked = 0
    for i in range(trace.n_requests):
        chain = trace.chain(i)
        if chain.size and producer[chain[-1]] >= 0:
            p = producer[chain[-1]]
            np.testing.assert_array_equal(chain[:-1], trace.chain(p))
            assert trace.input_tokens[i] == (trace.input_tokens[p] + trace.output_tokens[p]
                                             + trace.new_tokens[i])
            assert trace.class_id[i] == trace.class_id[p]
            assert trace.conversation_id[i] == trace.conversation_id[p]
            checked += 1
    assert checked > 0.5 * trace.n_requests


def test_later_turns_arrive_after_earlier_ones(trace):
    producer = np.full(trace.n_items, -1)
    has = trace.own_item >= 0
    producer[trace.own_item[has]] = np.flatnonzero(has)
    row = np.repeat(np.arange(trace.n_requests), trace.chain_lengths)
    p = producer[trace.chain_items]
    turn_items = p >= 0
    assert turn_items.sum() > 0
    assert np.all(trace.arrival_s[p[turn_items]] < trace.arrival_s[row[turn_items]])
    # every own item is used by exactly one later turn (the next one) as its last chain item
    last = trace.chain_items[trace.chain_offsets[1:][trace.chain_lengths > 0] - 1]
    used_as_last = np.isin(trace.own_item[has], last)
    assert used_as_last.all()


def test_turns_interleave_with_other_traffic(trace):
    # consecutive requests mostly belong to different conversations
    same = trace.conversation_id[1:] == trace.conversation_id[:-1]
    assert same.mean() < 0.05


def test_context_limit_respected(trace):
    agent = trace.class_id == 1
    total = trace.input_tokens[agent] + trace.output_tokens[agent]
    assert total.max() <= AGENT.max_context_tokens


def test_class_shares_close_to_spec(trace):
    frac = np.bincount(trace.class_id, minlength=3) / trace.n_requests
    # multinomial: std of a share at n = 20k is <= 0.0035; 0.015 is > 4 std
    np.testing.assert_allclose(frac, [c.share for c in SPEC.classes], atol=0.015)


def test_system_prompt_popularity_follows_zipf():
    c = dataclasses.replace(CHAT, share=1.0, turns_mean=1.0, n_system_prompts=5,
                            system_prompt_zipf=1.0)
    tr = generate_trace(WorkloadSpec(n_requests=20_000, arrival_rate_per_s=1.0, seed=0,
                                     classes=(c,)))
    first = tr.chain_items[tr.chain_offsets[:-1]]          # single-turn: chain = [system]
    freq = np.bincount(first, minlength=5) / tr.n_requests
    expected = (1.0 / np.arange(1, 6)) / (1.0 / np.arange(1, 6)).sum()
    np.testing.assert_allclose(freq, expected, atol=0.015)
    assert np.all(tr.own_item == -1)


def test_mean_turns_match_geometric_mean():
    c = dataclasses.replace(CHAT, share=1.0, turns_mean=3.0)
    tr = generate_trace(WorkloadSpec(n_requests=30_000, arrival_rate_per_s=1.0, seed=1,
                                     classes=(c,)))
    n_conv = np.unique(tr.conversation_id).size
    # the last conversation may be cut; geometric mean 3 -> std of the mean ~0.04 at 10k conv
    assert tr.n_requests / n_conv == pytest.approx(3.0, abs=0.15)


def test_diurnal_profile_visible():
    c = dataclasses.replace(SINGLE, share=1.0)
    amplitude = 0.5
    tr = generate_trace(WorkloadSpec(n_requests=172_800, arrival_rate_per_s=1.0,
                                     diurnal_amplitude=amplitude, seed=5, classes=(c,)))
    days = tr.arrival_s[tr.arrival_s < 2 * 86400.0]
    hourly = np.bincount((days % 86400.0 // 3600).astype(int), minlength=24) / 2.0
    # r(t) = r0 (1 - A cos(2 pi t / day)): trough hour 0 (midnight), peak hour 12 (noon).
    # Averaged over each hour: r0 * 3600 * (1 - A * sinc-like factor); ratio of the noon and
    # midnight hours ~ (1 + A) / (1 - A) = 3 for A = 0.5 (2 days: ~3000 counts/h, 2 % noise).
    hours = np.arange(24)
    w = 2 * np.pi / 24
    expected = 3600.0 * (1 - amplitude * (np.sin(w * (hours + 1)) - np.sin(w * hours)) / w)
    np.testing.assert_allclose(hourly, expected, rtol=0.1)
    assert hourly[12] / hourly[0] == pytest.approx(3.0, rel=0.12)
    flat = generate_trace(WorkloadSpec(n_requests=50_000, arrival_rate_per_s=1.0, seed=5,
                                       classes=(c,)))
    assert flat.n_requests / flat.duration_s == pytest.approx(1.0, rel=0.03)


def test_summary_and_dataframe(trace):
    s = trace.summary()
    assert list(s.index) == ["chat", "agent", "single", "all"]
    assert s.loc["all", "n_requests"] == trace.n_requests
    assert s.loc["all", "input_tokens"] == trace.input_tokens.sum()
    assert s.loc[["chat", "agent", "single"], "output_tokens"].sum() == trace.output_tokens.sum()
    assert s.loc["all", "mean_input_tokens"] == pytest.approx(trace.input_tokens.mean())
    assert s.attrs["duration_s"] == pytest.approx(trace.duration_s)
    df = trace.to_dataframe()
    assert len(df) == trace.n_requests
    assert (df.chain_tokens + df.new_tokens == df.input_tokens).all()
    assert set(df.class_name.cat.categories) == {"chat", "agent", "single"}


def test_example_spec_generates():
    tr = generate_trace(example_spec(5_000))
    assert tr.n_requests == 5_000 and len(tr.class_names) == 3


def test_hour_of_day(trace):
    t = np.array([0.0, 3599.5, 3600.0, 45_000.0, 86_399.9, 86_400.0, 90_000.0, 200_000.0])
    tr = Trace(arrival_s=t, class_id=np.zeros(8), class_names=("a",), input_tokens=np.ones(8),
               output_tokens=np.ones(8), chain_offsets=np.zeros(9), chain_items=[],
               item_tokens=[], own_item=np.full(8, -1), acceptance_rate=[0.5], expert_skew=[0.0])
    np.testing.assert_array_equal(tr.hour_of_day, [0, 0, 1, 12, 23, 0, 1, 7])
    assert trace.hour_of_day.min() >= 0 and trace.hour_of_day.max() <= 23


def test_trace_arrays_are_read_only(trace):
    with pytest.raises(ValueError):
        trace.input_tokens[0] = 1


# ---- spec validation ----------------------------------------------------------------------

@pytest.mark.parametrize(("change", "pattern"), [
    (dict(share=0.0), r"WorkloadClass 'chat': share = 0.0 must be a number in \(0, 1\]"),
    (dict(prompt_tokens_median=-5), r"prompt_tokens_median = -5 must be a number in \(0, 1e\+07\]"),
    (dict(output_tokens_sigma=float("nan")), r"output_tokens_sigma = nan"),
    (dict(max_prompt_tokens=2.5), r"max_prompt_tokens = 2.5 must be an integer in \[1, 10,000,000\]"),
    (dict(n_system_prompts=0), r"n_system_prompts = 0 must be an integer in \[1, 1,000,000\]"),
    (dict(turns_mean=0.5), r"turns_mean = 0.5 must be a number in \[1, 1000\]"),
    (dict(acceptance_rate=1.2), r"acceptance_rate = 1.2 must be a number in \[0, 1\]"),
    (dict(expert_skew=-1), r"expert_skew = -1"),
    (dict(system_prompt_zipf=-0.1), r"system_prompt_zipf = -0.1"),
    (dict(max_context_tokens=1000), r"max_context_tokens = 1000 must be >= .* = 8200"),
])
def test_workload_class_validation(change, pattern):
    with pytest.raises(SpecError, match=pattern):
        dataclasses.replace(CHAT, **change)


@pytest.mark.parametrize(("change", "pattern"), [
    (dict(n_requests=0), r"WorkloadSpec: n_requests = 0 must be an integer in \[1, 10,000,000\]"),
    (dict(arrival_rate_per_s=0), r"arrival_rate_per_s = 0 must be a number in \(0, 1e\+07\]"),
    (dict(diurnal_amplitude=1.5), r"diurnal_amplitude = 1.5 must be a number in \[0, 1\]"),
    (dict(classes=()), r"classes = \(\) must be a non-empty"),
    (dict(classes=(CHAT, AGENT)), r"sum to 0.9; they must sum to 1"),
    (dict(classes=(CHAT, dataclasses.replace(CHAT, share=0.4))), r"class names .* must be unique"),
])
def test_workload_spec_validation(change, pattern):
    with pytest.raises(SpecError, match=pattern):
        dataclasses.replace(SPEC, **change)


# ---- loaders ------------------------------------------------------------------------------

def test_mooncake_example_loads():
    path = example_trace_path()
    tr = load_trace(path)
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    assert tr.n_requests == len(lines) >= 40
    ts = np.sort([x["timestamp"] for x in lines]) / 1000.0
    np.testing.assert_allclose(tr.arrival_s, ts)
    assert tr.input_tokens.sum() == sum(x["input_length"] for x in lines)
    assert tr.output_tokens.sum() == sum(x["output_length"] for x in lines)
    # chains are the full 512-token blocks; the partial last block is the request's own
    np.testing.assert_array_equal(tr.chain_lengths, tr.input_tokens // 512)
    assert np.all(tr.item_tokens == 512)
    assert np.all(tr.own_item == -1)
    assert np.all((tr.new_tokens >= 0) & (tr.new_tokens < 512))
    # shared prefixes: some blocks are used by several requests
    uses = np.bincount(tr.chain_items, minlength=tr.n_items)
    assert uses.max() >= 10
    assert tr.class_names == ("default",) and np.isnan(tr.acceptance_rate).all()
    tr2 = tr.with_class_params(acceptance_rate=0.85, expert_skew={"default": 0.7})
    assert tr2.acceptance_rate[0] == 0.85 and tr2.expert_skew[0] == 0.7


def test_mooncake_block_size_and_classes(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 2000, "input_length": 40, "output_length": 3, '
                 '"hash_ids": [7, 8, 9], "class": "b"}\n'
                 '\n'
                 '{"timestamp": 1000, "input_length": 33, "output_length": 0, '
                 '"hash_ids": [7, 8, 5], "class": "a"}\n'
                 '{"timestamp": 1500, "input_length": 16, "output_length": 1}\n')
    tr = load_trace(p, block_tokens=16)
    np.testing.assert_allclose(tr.arrival_s, [1.0, 1.5, 2.0])
    assert tr.class_names == ("b", "a", "default")
    np.testing.assert_array_equal(tr.class_id, [1, 2, 0])
    assert [tr.chain(i).size for i in range(3)] == [2, 0, 2]     # 33 // 16 = 2, none, 40 // 16 = 2
    np.testing.assert_array_equal(tr.chain(0), tr.chain(2))       # same ids 7, 8 -> same items
    np.testing.assert_array_equal(tr.new_tokens, [1, 16, 8])


BAD_JSONL = [
    ('{"timestamp": 0, "input_length": -5, "output_length": 3}', 2, "input_length", "-5"),
    ('{"timestamp": 0, "input_length": "abc", "output_length": 3}', 2, "input_length", "'abc'"),
    ('{"timestamp": 0, "input_length": 100}', 2, "output_length", "missing"),
    ('{"timestamp": 0, "input_length": 100, "output_length": 3', 2, None, "not valid JSON"),
    ('{"timestamp": -1, "input_length": 100, "output_length": 3}', 2, "timestamp", "-1"),
    ('{"timestamp": 0, "input_length": 12.5, "output_length": 3}', 2, "input_length", "12.5"),
    ('{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": "1 2"}', 2,
     "hash_ids", "'1 2'"),
    ('{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [1, 2]}', 2,
     "hash_ids", "ceil(input / 512) = 1"),
    ('[1, 2, 3]', 2, None, "expected a JSON object"),
]


@pytest.mark.parametrize(("line", "line_no", "fieldname", "value"), BAD_JSONL,
                         ids=[f"jsonl-{i}" for i in range(len(BAD_JSONL))])
def test_malformed_jsonl_names_file_line_field_value(tmp_path, line, line_no, fieldname, value):
    p = tmp_path / "bad_trace.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n'
                 + line + "\n")
    with pytest.raises(SpecError) as err:
        load_trace(p)
    msg = str(err.value)
    assert "\n" not in msg
    assert str(p) in msg and f"line {line_no}:" in msg
    if fieldname:
        assert repr(fieldname) in msg
    assert value in msg


def test_csv_loader_both_column_conventions(tmp_path):
    a = tmp_path / "a.csv"
    a.write_text("arrival_s,input_tokens,output_tokens,class,hash_ids\n"
                 "0.5,1100,20,chat,1 2 3\n"
                 "0.25,600,10,api,1 4\n"
                 "1.0,300,5,chat,\n")
    tr = load_trace(a)
    np.testing.assert_allclose(tr.arrival_s, [0.25, 0.5, 1.0])
    np.testing.assert_array_equal(tr.input_tokens, [600, 1100, 300])
    assert tr.class_names == ("chat", "api")
    np.testing.assert_array_equal(tr.chain_lengths, [1, 2, 0])
    assert tr.chain(0)[0] == tr.chain(1)[0]                     # hash 1 shared
    b = tmp_path / "vidur.csv"
    b.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n1.5,200.0,20\n")
    tr = load_trace(b)
    np.testing.assert_array_equal(tr.input_tokens, [100, 200])
    np.testing.assert_array_equal(tr.output_tokens, [10, 20])
    assert tr.chain_items.size == 0 and tr.class_names == ("default",)


BAD_CSV = [
    ("arrival_s,input_tokens\n0,10\n", 1, "'output_tokens'", "header"),
    ("arrival_s,input_tokens,output_tokens\n0,10,3\n1,-4,3\n", 3, "'input_tokens'", "-4"),
    ("arrival_s,input_tokens,output_tokens\n0,10,3\nsoon,10,3\n", 3, "'arrival_s'", "'soon'"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,3\n1,10,x\n", 3,
     "'num_decode_tokens'", "'x'"),
    ("arrival_s,input_tokens,output_tokens\n0,10,3\n1,,3\n", 3, "'input_tokens'", "empty"),
    ("arrival_s,input_tokens,output_tokens\n0,10,3\n1,10\n", 3, None, "2 fields, expected 3"),
    ("arrival_s,input_tokens,output_tokens,hash_ids\n0,1000,3,1 b\n", 2, "'hash_ids'", "'1 b'"),
]


@pytest.mark.parametrize(("text", "line_no", "fieldname", "value"), BAD_CSV,
                         ids=[f"csv-{i}" for i in range(len(BAD_CSV))])
def test_malformed_csv_names_file_line_field_value(tmp_path, text, line_no, fieldname, value):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(SpecError) as err:
        load_trace(p)
    msg = str(err.value)
    assert str(p) in msg and f"line {line_no}:" in msg
    if fieldname:
        assert fieldname in msg
    assert value in msg


def test_unknown_suffix_and_missing_file(tmp_path):
    p = tmp_path / "trace.parquet"
    p.write_text("x")
    with pytest.raises(SpecError, match=re.escape(f"{p}: unknown trace format '.parquet'")):
        load_trace(p)
    with pytest.raises(SpecError, match="file not found"):
        load_trace(tmp_path / "nope.jsonl")
    e = tmp_path / "empty.jsonl"
    e.write_text("\n")
    with pytest.raises(SpecError, match="no requests"):
        load_trace(e)
