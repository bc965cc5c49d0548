"""Agent sessions: turns that resend a growing context, sub-agents that branch from a parent
turn, think time between turns; and a generator from stated shape parameters.

A :class:`Sessions` is columnar, one row per turn (turns of a session consecutive, in order):

- ``prev[i]``: the turn whose context (prompt + output) turn ``i``'s prompt extends and whose
  completion it waits for (-1: the first turn of a root session). The first turn of a
  sub-agent session has ``prev`` in its parent session: it branches from that turn's context
  and starts when it completes; the parent's next turn waits for (joins) every sub-agent
  spawned at its previous turn.
- ``think_s[i]``: the delay between what turn ``i`` waits for and its start (tool execution,
  the user), capped by the replay's idle-gap cap.
- the prefix chain of each turn in :class:`.trace.Trace`'s CSR layout (``chain_offsets``,
  ``chain_items``, ``item_tokens``, ``own_item``): the items the exact-prefix cache
  (:func:`.kvcache.simulate_prefix_cache`) looks up, the same mechanism as the factory's.
  ``item_turn_end[k]`` says whether item ``k`` ends where a turn's context ended (a hybrid
  model's engine keeps a state snapshot there).

Readers are in :mod:`.session_io`; the replay is :mod:`inference_factory.analysis.bench.replay`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from .trace import Trace

__all__ = ["Sessions", "SessionShape", "generate_sessions", "load_shape"]


@dataclass(frozen=True, eq=False)
class Sessions:
    session: np.ndarray          # int64 per turn
    prev: np.ndarray             # int64 per turn, -1 none
    input_tokens: np.ndarray     # int64 per turn (the whole prompt)
    output_tokens: np.ndarray    # int64 per turn
    think_s: np.ndarray          # float64 per turn
    chain_offsets: np.ndarray    # int64, turns + 1
    chain_items: np.ndarray      # int64
    item_tokens: np.ndarray      # int64 per item
    own_item: np.ndarray         # int64 per turn, -1 none
    item_turn_end: np.ndarray    # bool per item
    line: np.ndarray             # int64 per turn: the file line it came from (0: generated)
    source: str = ""
    names: tuple = ()            # (field, the file's name for it) pairs for error messages

    @property
    def n_turns(self) -> int:
        return int(self.input_tokens.size)

    @property
    def n_sessions(self) -> int:
        return int(self.session.max()) + 1 if self.session.size else 0

    def fail(self, i: int, field: str, value, must: str) -> SpecError:
        where = f"line {int(self.line[i])}" if self.line[i] > 0 else f"turn {i}"
        field = dict(self.names).get(field, field)
        return SpecError(f"{self.source}: {where}: field {field!r} = {value!r} {must}")

    def check(self, extends: bool = True) -> "Sessions":
        """One-line SpecError (file, line, field) for negative counts, a sub-agent cycle and,
        with ``extends``, a turn that does not extend its prefix."""
        n = self.n_turns
        if n == 0:
            raise SpecError(f"{self.source}: no turns in the trace")
        for name, arr, lo in (("input_tokens", self.input_tokens, 1),
                              ("output_tokens", self.output_tokens, 1)):
            bad = np.flatnonzero(arr < lo)
            if bad.size:
                raise self.fail(bad[0], name, int(arr[bad[0]]), f"must be a whole number >= {lo}")
        bad = np.flatnonzero(~np.isfinite(self.think_s) | (self.think_s < 0))
        if bad.size:
            raise self.fail(bad[0], "think_s", float(self.think_s[bad[0]]),
                            "must be a finite number >= 0")
        p = self.prev
        bad = np.flatnonzero((p < -1) | (p >= n))
        if bad.size:
            raise self.fail(bad[0], "prev", int(p[bad[0]]), f"must name a turn in [0, {n})")
        # a cycle: following prev never reaches -1 (at most n steps)
        cur = p.copy()
        for _ in range(int(math.ceil(math.log2(n + 1))) + 1):   # pointer doubling
            nxt = np.where(cur >= 0, cur[np.maximum(cur, 0)], -1)
            if np.array_equal(nxt, cur):
                break
            cur = nxt
        cyc = np.flatnonzero(cur >= 0)
        if cyc.size:
            raise self.fail(cyc[0], "parent", int(p[cyc[0]]),
                            "makes a cycle of sub-agents (a turn waits on itself)")
        has = (p >= 0) & extends
        need = np.where(has, self.input_tokens[np.maximum(p, 0)]
                        + self.output_tokens[np.maximum(p, 0)], 0)
        bad = np.flatnonzero(has & (self.input_tokens < need))
        if bad.size:
            i = bad[0]
            raise self.fail(i, "input_tokens", int(self.input_tokens[i]),
                            f"does not extend its prefix: the context it continues holds "
                            f"{int(need[i])} tokens (previous prompt + output)")
        return self

    def trace(self, order: np.ndarray, start_s: np.ndarray) -> Trace:
        """The turns in ``order`` (their replay start times ``start_s``) as a factory
        :class:`Trace` for the one prefix-cache simulation."""
        lengths = np.diff(self.chain_offsets)[order]
        off = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        src = np.repeat(self.chain_offsets[:-1][order] - off[:-1], lengths) + np.arange(off[-1])
        n = order.size
        return Trace(arrival_s=np.asarray(start_s, float)[order], class_id=np.zeros(n, np.int16),
                     class_names=("agentic",), input_tokens=self.input_tokens[order],
                     output_tokens=self.output_tokens[order], chain_offsets=off,
                     chain_items=self.chain_items[src], item_tokens=self.item_tokens,
                     own_item=self.own_item[order], acceptance_rate=np.array([np.nan]),
                     expert_skew=np.array([np.nan]), source=self.source)


def build_sessions(session, prev, inp, out, think, line, head_items, head_tokens,
                   source: str, chains_from_heads: bool = False, names=()) -> Sessions:
    """Sessions from per-turn lists: each turn's chain is its ``prev``'s chain plus
    ``prev``'s own item (its new tokens and output), or ``head_items[i]`` (ids into
    ``head_tokens``: a shared system prompt) for a turn without ``prev``. With
    ``chains_from_heads`` every turn's chain is its ``head_items`` (a trace's hash blocks:
    the blocks say what is shared, turns need not extend their predecessor, no own item)."""
    n = len(inp)
    s = Sessions(np.asarray(session, np.int64), np.asarray(prev, np.int64),
                 np.asarray(inp, np.int64), np.asarray(out, np.int64),
                 np.asarray(think, float), np.zeros(1, np.int64), np.zeros(0, np.int64),
                 np.zeros(0, np.int64), np.zeros(n, np.int64), np.zeros(0, bool),
                 np.asarray(line, np.int64), source, tuple(names))
    s.check(extends=not chains_from_heads)
    n_head = len(head_tokens)
    if chains_from_heads:
        lengths = np.fromiter((len(c) for c in head_items), np.int64, n)
        flat = np.fromiter((x for c in head_items for x in c), np.int64, int(lengths.sum()))
        off = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        turn_end = np.zeros(max(n_head, 1), bool)
        ends = off[1:][lengths > 0] - 1
        turn_end[flat[ends]] = True          # a request's last full block ends its prompt
        return Sessions(s.session, s.prev, s.input_tokens, s.output_tokens, s.think_s, off,
                        flat, np.asarray(head_tokens, np.int64).reshape(-1)
                        if n_head else np.ones(1, np.int64), np.full(n, -1, np.int64),
                        turn_end, s.line, source, s.names)
    chains: list[list[int]] = [[] for _ in range(n)]
    ctok = np.zeros(n, np.int64)
    order = _topological(s.prev)
    own_tok = np.zeros(n, np.int64)
    for i in order:
        p = s.prev[i]
        if p >= 0:
            chains[i] = chains[p] + [n_head + p]
            ctok[i] = int(s.input_tokens[p] + s.output_tokens[p])
        else:
            chains[i] = list(head_items[i])
            ctok[i] = int(sum(head_tokens[k] for k in head_items[i]))
            if ctok[i] > s.input_tokens[i]:
                raise s.fail(i, "input_tokens", int(s.input_tokens[i]),
                             f"is shorter than its shared prefix ({int(ctok[i])} tokens)")
        own_tok[i] = s.input_tokens[i] + s.output_tokens[i] - ctok[i]
    lengths = np.fromiter((len(c) for c in chains), np.int64, n)
    flat = np.fromiter((x for c in chains for x in c), np.int64, int(lengths.sum()))
    item_tokens = np.concatenate([np.asarray(head_tokens, np.int64), np.maximum(own_tok, 1)])
    turn_end = np.concatenate([np.zeros(n_head, bool), np.ones(n, bool)])
    return Sessions(s.session, s.prev, s.input_tokens, s.output_tokens, s.think_s,
                    np.concatenate(([0], np.cumsum(lengths))).astype(np.int64), flat,
                    item_tokens, np.arange(n_head, n_head + n, dtype=np.int64), turn_end,
                    s.line, source, s.names)


def _topological(prev: np.ndarray) -> np.ndarray:
    """Turns ordered so that each comes after its ``prev`` (the check found no cycle)."""
    depth = np.zeros(prev.size, np.int64)
    cur = prev.copy()
    while np.any(cur >= 0):
        depth += cur >= 0
        cur = np.where(cur >= 0, prev[np.maximum(cur, 0)], -1)
    return np.argsort(depth, kind="stable")


# ---- the generator --------------------------------------------------------------------------

@dataclass(frozen=True)
class SessionShape:
    """Shape of synthetic agent sessions (configs/traces/agentic_coding.toml states each
    value's source). Token counts are lognormal, ``round(median exp(sigma Z))`` clipped to
    ``[1, cap]``; turns per session geometric with mean ``turns_mean`` up to ``turns_max``;
    a session ends early where its next prompt would pass ``max_context_tokens``."""

    sessions: int = 2000
    turns_mean: float = 10.0
    turns_max: int = 200
    system_prompt_tokens: int = 8000
    n_system_prompts: int = 1
    first_prompt_tokens_median: float = 2000.0
    first_prompt_tokens_sigma: float = 0.8
    new_tokens_median: float = 700.0
    new_tokens_sigma: float = 1.2
    new_tokens_max: int = 32000
    output_tokens_median: float = 200.0
    output_tokens_sigma: float = 1.0
    output_tokens_max: int = 16000
    subagent_probability: float = 0.05
    subagent_turns_mean: float = 6.0
    think_s_mean: float = 5.0
    max_context_tokens: int = 131072
    seed: int = 0


def load_shape(path) -> SessionShape:
    """A :class:`SessionShape` from a TOML file's ``[shape]`` table; unknown keys refused."""
    from ..specs.files import read_toml  # noqa: PLC0415

    data = read_toml(path)
    table = data.get("shape")
    if not isinstance(table, dict):
        raise SpecError(f"{path}: table [shape] is missing")
    fields = SessionShape.__dataclass_fields__
    for k, v in table.items():
        if k not in fields:
            raise SpecError(f"{path}: shape.{k} is not a shape parameter; allowed: "
                            f"{sorted(fields)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise SpecError(f"{path}: shape.{k} = {v!r} must be a number >= 0")
    return SessionShape(**table)


def generate_sessions(shape: SessionShape, source: str = "generated") -> Sessions:
    """Synthetic agent sessions (seeded). Root session ``s`` starts with system prompt
    ``s mod n_system_prompts`` (a shared item) and a first message; each later turn adds tool
    output / user tokens (``new_tokens``) to the previous prompt and output; after any turn a
    sub-agent branches with ``subagent_probability`` (its own turns, same token shapes, no
    further nesting); think time before each later turn is exponential."""
    rng = np.random.default_rng(shape.seed)

    def logn(median, sigma, cap, size):
        x = np.rint(median * np.exp(sigma * rng.standard_normal(size)))
        return np.clip(x, 1, cap).astype(np.int64)

    session, prev, inp, out, think, heads = [], [], [], [], [], []
    n_sys = max(int(shape.n_system_prompts), 1)
    head_tokens = [int(shape.system_prompt_tokens)] * n_sys if shape.system_prompt_tokens else []

    def run(sid, first_prev, first_ctx, n_turns, head):
        p, ctx = first_prev, first_ctx
        news = logn(shape.new_tokens_median, shape.new_tokens_sigma, shape.new_tokens_max,
                    n_turns)
        if first_prev < 0:
            news[0] = logn(shape.first_prompt_tokens_median, shape.first_prompt_tokens_sigma,
                           shape.new_tokens_max, 1)[0]
        outs = logn(shape.output_tokens_median, shape.output_tokens_sigma,
                    shape.output_tokens_max, n_turns)
        thinks = rng.exponential(shape.think_s_mean, n_turns) if shape.think_s_mean else \
            np.zeros(n_turns)
        turns = []
        for t in range(n_turns):
            prompt = ctx + int(news[t])
            if prompt + int(outs[t]) > shape.max_context_tokens:
                break
            i = len(inp)
            session.append(sid)
            prev.append(p)
            inp.append(prompt)
            out.append(int(outs[t]))
            think.append(float(thinks[t]) if p >= 0 else 0.0)
            heads.append(head if p < 0 else [])
            turns.append(i)
            p, ctx = i, prompt + int(outs[t])
        return turns

    sid = 0
    for s in range(int(shape.sessions)):
        k = int(min(rng.geometric(1.0 / max(shape.turns_mean, 1.0)), shape.turns_max))
        head = [s % n_sys] if head_tokens else []
        turns = run(sid, -1, head_tokens[s % n_sys] if head_tokens else 0, k, head)
        sid += 1
        for i in turns:
            if rng.random() < shape.subagent_probability:
                ks = int(min(rng.geometric(1.0 / max(shape.subagent_turns_mean, 1.0)),
                             shape.turns_max))
                if run(sid, i, inp[i] + out[i], ks, []):
                    sid += 1
    return build_sessions(session, prev, inp, out, think, np.zeros(len(inp), np.int64),
                          heads, head_tokens, source)
