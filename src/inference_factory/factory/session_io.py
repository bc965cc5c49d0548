"""Session-trace readers (``bench --trace FILE``), one-line errors naming file, line, field.

Formats, told apart by the keys of the first object of a ``.jsonl`` file:

- **AIPerf / kv-cache-tester "weka" traces** (InferenceX's cc-traces corpora; schema from
  ``utils/agentic/datasets/proxy_to_weka.py``, InferenceX commit 843c6254f): one trace per
  line, ``{"id", "block_size", "requests": [...]}``; a request ``{"t" [s], "type": "n",
  "in", "out", "hash_ids", "api_time" [s]}`` or a sub-agent ``{"type": "subagent",
  "requests": [...]}`` whose requests branch from the parent request before it. The prefix
  chain is the request's ``hash_ids`` (``block_size`` tokens each; full blocks only, as the
  factory's Mooncake reader); think time = the recorded gap ``t_next - (t + api_time)``.
  Turns are not required to extend their predecessor (a real agent compacts its context).
- **Mooncake / AIPerf ``mooncake_trace`` JSONL**: one request per line, ``input_length``,
  ``output_length``, optional ``hash_ids`` (512-token blocks), ``session_id`` (rows of one
  session are its turns in file order, each extending the previous prompt and output),
  ``delay`` [ms] (think time before the turn; AIPerf's field), ``parent_session_id`` and
  ``parent_turn`` (this project's extension: a sub-agent branching from that turn). Rows
  without ``session_id`` are one-turn sessions whose chain is their ``hash_ids``.
- **OpenAI-style conversations**: one conversation per line, ``{"id", "messages":
  [{"role", "tokens", "delay_s"?}...], "system_id"?, "parent": {"id", "turn"}?}``; each
  ``assistant`` message is a turn whose prompt is every message before it; conversations
  with the same ``system_id`` share their leading system message as a cached item.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SpecError
from .sessions import Sessions, build_sessions
from .trace_io import MOONCAKE_BLOCK_TOKENS

__all__ = ["load_sessions"]


def _fail(path, line, field, value, must) -> SpecError:
    return SpecError(f"{path}: line {line}: field {field!r} = {value!r} {must}")


def _count(path, line, obj, field, lo=0, required=True, default=None):
    if field not in obj:
        if required:
            raise SpecError(f"{path}: line {line}: field {field!r} is missing")
        return default
    v = obj[field]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v < lo or (field not in ("t", "api_time", "delay", "delay_s") and v != int(v)):
        raise _fail(path, line, field, v, f"must be a {'whole ' if field not in ('t', 'api_time', 'delay', 'delay_s') else ''}number >= {lo}")
    return v


def _objects(path: Path):
    with open(path, encoding="utf-8") as fh:
        for line_no, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SpecError(f"{path}: line {line_no}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise SpecError(f"{path}: line {line_no}: expected a JSON object")
            yield line_no, obj


class _Acc:
    def __init__(self, names=()):
        self.names = names
        self.session, self.prev, self.inp, self.out = [], [], [], []
        self.think, self.line, self.heads = [], [], []
        self.head_ids: dict[Any, int] = {}
        self.head_tokens: list[int] = []
        self.hashed = False

    def head(self, key, tokens) -> int:
        if key not in self.head_ids:
            self.head_ids[key] = len(self.head_tokens)
            self.head_tokens.append(int(tokens))
        return self.head_ids[key]

    def add(self, sid, prev, inp, out, think, line, heads) -> int:
        self.session.append(sid)
        self.prev.append(prev)
        self.inp.append(int(inp))
        self.out.append(int(out))
        self.think.append(float(think))
        self.line.append(line)
        self.heads.append(heads)
        return len(self.inp) - 1

    def sessions(self, path) -> Sessions:
        if not self.inp:
            raise SpecError(f"{path}: no turns in the file")
        return build_sessions(self.session, self.prev, self.inp, self.out, self.think,
                              self.line, self.heads, self.head_tokens, str(path),
                              chains_from_heads=self.hashed, names=self.names)


def _blocks(acc, path, line, obj, inp, block, scope):
    """The request's full ``hash_ids`` blocks as cache items (the factory reader's rule)."""
    hashes = obj.get("hash_ids") or []
    if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool)
                                               for h in hashes):
        raise _fail(path, line, "hash_ids", hashes, "must be a list of integers")
    if hashes:
        acc.hashed = True
    return [acc.head((scope, h), block) for h in hashes[:inp // block]]


def _weka(path: Path) -> Sessions:
    acc = _Acc((("input_tokens", "in"), ("output_tokens", "out"), ("think_s", "t")))
    sid = 0
    for line, obj in _objects(path):
        reqs = obj.get("requests")
        if not isinstance(reqs, list):
            raise _fail(path, line, "requests", reqs, "must be a list of requests")
        block = int(_count(path, line, obj, "block_size", 1, False, 64))
        scope = obj.get("id", line) if obj.get("hash_id_scope", "local") == "local" else None

        def walk(reqs, parent, sid):
            prev, end, nxt = parent, None, sid + 1
            for r in reqs:
                if not isinstance(r, dict):
                    raise _fail(path, line, "requests", r, "must hold objects")
                if r.get("type", "n") == "subagent":
                    if prev < 0:
                        raise _fail(path, line, "type", "subagent",
                                    "must follow a request it branches from")
                    nxt = walk(r.get("requests") or [], prev, nxt)
                    continue
                inp = _count(path, line, r, "in", 1)
                out = _count(path, line, r, "out", 1)
                t = _count(path, line, r, "t", 0, False, 0.0)
                gap = 0.0 if end is None else max(t - end, 0.0)
                heads = _blocks(acc, path, line, r, int(inp), block, scope)
                prev = acc.add(sid, prev, inp, out, gap, line, heads)
                end = t + float(_count(path, line, r, "api_time", 0, False, 0.0))
            return nxt

        sid = walk(reqs, -1, sid)
    return acc.sessions(path)


def _mooncake(path: Path) -> Sessions:
    acc = _Acc((("input_tokens", "input_length"), ("output_tokens", "output_length"),
                ("think_s", "delay"), ("parent", "parent_turn")))
    last: dict[Any, int] = {}
    turns: dict[Any, list[int]] = {}
    sid_of: dict[Any, int] = {}
    pending = []
    for line, obj in _objects(path):
        inp = int(_count(path, line, obj, "input_length", 1))
        out = int(_count(path, line, obj, "output_length", 1))
        delay = float(_count(path, line, obj, "delay", 0, False, 0.0)) / 1000.0
        key = obj.get("session_id")
        if key is None:
            heads = _blocks(acc, path, line, obj, inp, MOONCAKE_BLOCK_TOKENS, None)
            acc.add(len(sid_of) + len(pending) + 10**9, -1, inp, out, 0.0, line, heads)
            continue
        if key not in sid_of:
            sid_of[key] = len(sid_of)
            parent = obj.get("parent_session_id")
            prev = -1
            if parent is not None:
                pending.append((len(acc.inp), parent, obj.get("parent_turn"), line))
            i = acc.add(sid_of[key], prev, inp, out, delay, line, [])
        else:
            i = acc.add(sid_of[key], last[key], inp, out, delay, line, [])
        last[key] = i
        turns.setdefault(key, []).append(i)
    for i, parent, turn, line in pending:
        if parent not in turns:
            raise _fail(path, line, "parent_session_id", parent, "names no session of the file")
        if isinstance(turn, bool) or not isinstance(turn, int) or not \
                0 <= turn < len(turns[parent]):
            raise _fail(path, line, "parent_turn", turn,
                        f"must be a turn index in [0, {len(turns[parent])})")
        acc.prev[i] = turns[parent][turn]
    # renumber one-turn sessions after the named ones
    base = len(sid_of)
    acc.session = [s if s < 10**9 else base + k for k, s in
                   enumerate(acc.session)]
    _, acc.session = np.unique(np.asarray(acc.session), return_inverse=True)
    return acc.sessions(path)


_ROLES = ("system", "user", "assistant", "tool", "developer")


def _openai(path: Path) -> Sessions:
    acc = _Acc((("input_tokens", "messages"), ("output_tokens", "tokens"),
                ("parent", "parent.turn")))
    by_id: dict[Any, list[int]] = {}
    pending = []
    for sid, (line, obj) in enumerate(_objects(path)):
        msgs = obj.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise _fail(path, line, "messages", msgs, "must be a non-empty list")
        ctx, prev, turns, delay, heads = 0, -1, [], 0.0, []
        for k, msg in enumerate(msgs):
            role = msg.get("role") if isinstance(msg, dict) else None
            if role not in _ROLES:
                raise _fail(path, line, f"messages[{k}].role", role, f"must be one of {_ROLES}")
            tok = int(_count(path, line, msg, "tokens", 0))
            delay += float(_count(path, line, msg, "delay_s", 0, False, 0.0))
            if role == "assistant":
                if ctx < 1:
                    raise _fail(path, line, f"messages[{k}]", "assistant",
                                "needs a prompt before it")
                prev = acc.add(sid, prev, ctx, max(tok, 1), delay if prev >= 0 else 0.0,
                               line, heads if prev < 0 else [])
                turns.append(prev)
                delay = 0.0
            elif k == 0 and role == "system" and obj.get("system_id") is not None:
                heads = [acc.head(("system", obj["system_id"], tok), tok)]
            ctx += tok
        if not turns:
            raise _fail(path, line, "messages", "no assistant message",
                        "must hold at least one assistant turn")
        by_id[obj.get("id", sid)] = turns
        if obj.get("parent") is not None:
            pending.append((turns[0], obj["parent"], line))
    for i, parent, line in pending:
        pid = parent.get("id") if isinstance(parent, dict) else None
        turn = parent.get("turn") if isinstance(parent, dict) else None
        if pid not in by_id:
            raise _fail(path, line, "parent.id", pid, "names no conversation of the file")
        if isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn < len(by_id[pid]):
            raise _fail(path, line, "parent.turn", turn,
                        f"must be an assistant-turn index in [0, {len(by_id[pid])})")
        acc.prev[i] = by_id[pid][turn]
        acc.heads[i] = []
    return acc.sessions(path)


def load_sessions(path) -> Sessions:
    """Read a session trace (module docstring: weka/AIPerf traces, Mooncake/AIPerf
    ``mooncake_trace`` JSONL, OpenAI-style conversations), its format told by its first
    object's keys; an unknown format or a bad row: one-line SpecError (file, line, field)."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: {'is a folder, not a trace file' if p.is_dir() else 'file not found'}")
    if p.suffix.lower() not in (".jsonl", ".json"):
        raise SpecError(f"{p}: unknown trace format {p.suffix!r}; use .jsonl (AIPerf/weka "
                        "traces, Mooncake rows, OpenAI-style conversations)")
    try:
        first = next(_objects(p), None)
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: not a UTF-8 text file (byte {exc.start})") from None
    if first is None:
        raise SpecError(f"{p}: no turns in the file")
    line, obj = first
    if "requests" in obj:
        return _weka(p)
    if "messages" in obj:
        return _openai(p)
    if {"input_length", "output_length", "session_id", "hash_ids"} & set(obj):
        return _mooncake(p)
    raise SpecError(f"{p}: line {line}: unknown trace format (keys {sorted(obj)[:6]}); "
                    "expected 'requests' (AIPerf/weka), 'input_length' (Mooncake/AIPerf) "
                    "or 'messages' (OpenAI-style conversations)")
