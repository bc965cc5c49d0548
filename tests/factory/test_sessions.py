"""Session traces: the bundled shape's sourced targets, the readers, bad input."""

import json

import numpy as np
import pytest

from inference_factory.errors import SpecError
from inference_factory.factory.session_io import load_sessions
from inference_factory.factory.sessions import generate_sessions, load_shape
from inference_factory.specs import data_dir


def write(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def test_bundled_shape_lands_on_its_public_targets():
    s = generate_sessions(load_shape(data_dir("configs") / "traces" / "agentic_coding.toml"))
    inp = s.input_tokens
    # AA-AgentPerf: inputs ~5K-131K, mean ~27K; InferenceX: median input:output 133:1
    assert 22_000 < inp.mean() < 35_000
    assert inp.min() >= 5_000 and (inp + s.output_tokens).max() <= 131_072
    assert 90 < np.median(inp / s.output_tokens) < 180
    # every later turn resends its predecessor's prompt and output
    p = s.prev
    has = p >= 0
    assert np.all(inp[has] >= inp[p[has]] + s.output_tokens[p[has]])
    assert np.any(s.session[np.maximum(p, 0)][has] != s.session[has])   # sub-agents exist


def test_mooncake_sessions_chain_their_turns(tmp_path):
    rows = [{"session_id": "a", "input_length": 100, "output_length": 10},
            {"session_id": "a", "input_length": 150, "output_length": 10, "delay": 2000},
            {"session_id": "b", "input_length": 200, "output_length": 5,
             "parent_session_id": "a", "parent_turn": 0}]
    s = load_sessions(write(tmp_path, rows))
    assert list(s.prev) == [-1, 0, 0]
    assert list(s.think_s) == [0.0, 2.0, 0.0]
    # turn 1's chain is turn 0's own item: its prompt and output (110 tokens)
    assert list(s.item_tokens[s.chain_items[s.chain_offsets[1]:s.chain_offsets[2]]]) == [110]


def test_openai_conversation_turns_and_shared_system(tmp_path):
    conv = {"id": "c1", "system_id": "sys", "messages": [
        {"role": "system", "tokens": 50}, {"role": "user", "tokens": 20},
        {"role": "assistant", "tokens": 5}, {"role": "tool", "tokens": 30, "delay_s": 1.5},
        {"role": "assistant", "tokens": 7}]}
    s = load_sessions(write(tmp_path, [conv, {**conv, "id": "c2"}]))
    assert list(s.input_tokens) == [70, 105, 70, 105]
    assert list(s.output_tokens) == [5, 7, 5, 7]
    assert list(s.think_s) == [0.0, 1.5, 0.0, 1.5]
    first = s.chain_items[s.chain_offsets[0]:s.chain_offsets[1]]
    assert list(first) == list(s.chain_items[s.chain_offsets[2]:s.chain_offsets[3]])   # shared


def test_weka_trace_reads_hash_blocks_and_subagents(tmp_path):
    tr = {"id": "x", "block_size": 64, "requests": [
        {"t": 0.0, "type": "n", "in": 200, "out": 10, "hash_ids": [1, 2, 3], "api_time": 1.0},
        {"t": 0.0, "type": "subagent", "requests": [
            {"t": 1.5, "type": "n", "in": 300, "out": 5, "hash_ids": [9, 8, 7, 6]}]},
        {"t": 4.0, "type": "n", "in": 260, "out": 10, "hash_ids": [1, 2, 3, 4]}]}
    s = load_sessions(write(tmp_path, [tr]))
    assert list(s.prev) == [-1, 0, 0]
    assert list(s.session) == [0, 1, 0]
    assert s.think_s[2] == pytest.approx(3.0)            # 4.0 - (0.0 + 1.0)
    assert s.chain_offsets[-1] == 3 + 4 + 4


@pytest.mark.parametrize("rows, match", [
    ([{"session_id": "a", "input_length": 100, "output_length": 10},
      {"session_id": "a", "input_length": 105, "output_length": 10}],
     r"line 2: field 'input_length' = 105 does not extend its prefix"),
    ([{"session_id": "a", "input_length": 100, "output_length": -3}],
     r"line 1: field 'output_length' = -3 must be a whole number >= 1"),
    ([{"session_id": "a", "output_length": 3}], r"line 1: field 'input_length' is missing"),
    ([{"session_id": "a", "input_length": 10, "output_length": 1, "parent_session_id": "b",
       "parent_turn": 0},
      {"session_id": "b", "input_length": 20, "output_length": 1, "parent_session_id": "a",
       "parent_turn": 0}], r"line \d: field 'parent_turn' = \d makes a cycle of sub-agents"),
    ([{"prompt": "hi"}], r"line 1: unknown trace format"),
])
def test_bad_input_names_file_line_and_field(tmp_path, rows, match):
    p = write(tmp_path, rows)
    with pytest.raises(SpecError, match=match) as e:
        load_sessions(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_unknown_suffix(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("x\n")
    with pytest.raises(SpecError, match="unknown trace format '.txt'"):
        load_sessions(p)
