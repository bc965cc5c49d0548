"""The session replay's two simulations per concurrency: when each turn starts
(:func:`schedule`, N lanes replaying session trees as AIPerf's trace replay does) and what
the prefix cache serves it (:func:`cache_hits`, the factory's one exact-prefix LRU,
:func:`inference_factory.factory.kvcache.simulate_prefix_cache`, with a hybrid model's
snapshot granularity)."""

from __future__ import annotations

import heapq

import numba
import numpy as np

from ...factory.kvcache import simulate_prefix_cache
from ...factory.sessions import Sessions
from ...specs import data_dir
from ...specs.files import read_toml


def agentic_constants() -> dict:
    """The replay's method constants with their sources (configs/agentic.toml), checked
    against their schema (:class:`inference_factory.specs.schema.AgenticFile`)."""
    from ...specs.schema import AgenticFile, check

    p = data_dir("configs") / "agentic.toml"
    raw = read_toml(p)
    check(AgenticFile, raw, str(p))
    return raw


def structure(s: Sessions):
    """Per turn: the next turn of its session (-1), the sub-agent sessions it spawns; per
    session: first and last turn, the turn that spawned it (-1: a root), its tree (root)."""
    n = s.n_turns
    ns = s.n_sessions
    first = np.full(ns, -1, np.int64)
    last = np.full(ns, -1, np.int64)
    for i in range(n - 1, -1, -1):
        first[s.session[i]] = i
    for i in range(n):
        last[s.session[i]] = i
    nxt = np.full(n, -1, np.int64)
    same = s.session[1:] == s.session[:-1]
    nxt[:-1][same] = np.arange(1, n)[same]
    spawn = np.where(first >= 0, s.prev[np.maximum(first, 0)], -1)
    root = np.arange(ns)
    for _ in range(64):                       # sub-agents nest a few levels at most
        up = np.where(spawn[root] >= 0, s.session[np.maximum(spawn[root], 0)], root)
        if np.array_equal(up, root):
            break
        root = up
    return nxt, first, last, spawn, root


@numba.njit(cache=True)
def _schedule(e2e, think, nxt, need, sub_off, sub_first, last_of, spawn_next, tree_of,
              tree_first, tree_turns, lanes):
    """Event loop over turn starts (code i >= 0) and completions (code -1 - i)."""
    n = e2e.size
    start = np.full(n, np.nan)
    ready = np.zeros(n)
    need = need.copy()
    left = tree_turns.copy()
    t_start = np.zeros(tree_turns.size)
    span = np.zeros(tree_turns.size)
    heap = [(0.0, np.int64(0))]
    k = 0
    heap.pop()
    while k < min(lanes, tree_first.size):
        heap.append((0.0, tree_first[k]))
        k += 1
    heapq.heapify(heap)
    while len(heap) > 0:
        t0, code = heapq.heappop(heap)
        if code >= 0:                                   # a turn starts
            start[code] = t0
            heapq.heappush(heap, (t0 + e2e[code], -1 - code))
            continue
        i = -1 - code                                   # a turn completes at t0
        j = nxt[i]                                      # its session's next turn
        if j >= 0:
            need[j] -= 1
            ready[j] = max(ready[j], t0)
            if need[j] == 0:
                heapq.heappush(heap, (ready[j] + think[j], j))
        for q in range(sub_off[i], sub_off[i + 1]):    # sub-agents spawned here
            f = sub_first[q]
            heapq.heappush(heap, (t0 + think[f], f))
        j = spawn_next[i]                               # a sub-agent ends: its parent joins
        if last_of[i] and j >= 0:
            need[j] -= 1
            ready[j] = max(ready[j], t0)
            if need[j] == 0:
                heapq.heappush(heap, (ready[j] + think[j], j))
        tr = tree_of[i]
        left[tr] -= 1
        if left[tr] == 0:                               # the lane takes the next tree
            span[tr] = t0 - t_start[tr]
            if k < tree_first.size:
                t_start[k] = t0
                heapq.heappush(heap, (t0, tree_first[k]))
                k += 1
    return start, span


class Schedule:
    """The dependency structure of a trace, built once, replayed at any latencies."""

    def __init__(self, s: Sessions, idle_gap_cap_s: float):
        n = s.n_turns
        nxt, first, last, spawn, root = structure(s)
        self.think = np.minimum(s.think_s, idle_gap_cap_s)
        self.nxt = nxt
        sub = np.flatnonzero(spawn >= 0)               # sub-agent sessions
        order = np.argsort(spawn[sub], kind="stable")
        sp = spawn[sub][order]
        self.sub_first = first[sub][order]
        self.sub_off = np.searchsorted(sp, np.arange(n + 1)).astype(np.int64)
        need = np.zeros(n, np.int64)
        need[s.prev >= 0] = 1
        sn = nxt[sp]
        np.add.at(need, sn[sn >= 0], 1)
        self.need = need
        self.last_of = np.zeros(n, np.bool_)
        self.last_of[last] = True
        self.spawn_next = np.full(n, -1, np.int64)
        self.spawn_next[last[sub]] = nxt[spawn[sub]]
        roots = np.flatnonzero(spawn < 0)              # trees in session order
        tree_index = np.full(first.size, -1, np.int64)
        tree_index[roots] = np.arange(roots.size)
        self.tree_of = tree_index[root[s.session]]
        self.tree_first = first[roots]
        self.tree_turns = np.bincount(self.tree_of, minlength=roots.size).astype(np.int64)
        self.first_turn = np.zeros(n, np.bool_)
        self.first_turn[self.tree_first] = True

    def run(self, e2e_s: np.ndarray, lanes: int):
        """Start time of every turn and the span of every tree at these latencies."""
        return _schedule(np.asarray(e2e_s, float), self.think, self.nxt, self.need,
                         self.sub_off, self.sub_first, self.last_of, self.spawn_next,
                         self.tree_of, self.tree_first, self.tree_turns, int(lanes))


def cache_hits(s: Sessions, start_s: np.ndarray, capacity_tokens, snapshot_tokens: float,
               track_interval_tokens: float | None):
    """Hit tokens per turn and tier, (3, n), in the turns' replay order through the
    factory's LRU. ``track_interval_tokens`` (hybrid models): a hit resumes only where a
    state snapshot exists (the end of an item that ended a turn's context, or a multiple of
    the interval); the tokens past it are recomputed and leave each tier pro rata."""
    order = np.argsort(start_s, kind="stable")
    res = simulate_prefix_cache(s.trace(order, start_s), capacity_tokens, snapshot_tokens)
    hits = np.zeros((3, s.n_turns), np.int64)
    hits[0, order], hits[1, order], hits[2, order] = (res.hit_tokens_hbm, res.hit_tokens_dram,
                                                      res.hit_tokens_nvme)
    if track_interval_tokens is None:
        return hits, res.peak_occupancy_tokens
    total = hits.sum(0)
    usable = _snapshot_floor(s, total, float(track_interval_tokens))
    scale = np.where(total > 0, usable / np.maximum(total, 1), 0.0)
    trimmed = np.floor(hits * scale[None, :]).astype(np.int64)
    trimmed[0] += usable - trimmed.sum(0)             # rounding stays in HBM
    return trimmed, res.peak_occupancy_tokens


def _snapshot_floor(s: Sessions, hit: np.ndarray, interval: float) -> np.ndarray:
    """The deepest snapshot point at or below each turn's hit (module rule)."""
    off = s.chain_offsets
    lengths = np.diff(off)
    tok = s.item_tokens[s.chain_items]
    seg = np.repeat(np.arange(s.n_turns), lengths)
    cum = np.cumsum(tok)
    cum = cum - np.repeat(np.concatenate(([0], cum))[off[:-1]], lengths)
    ok = s.item_turn_end[s.chain_items] & (cum <= hit[seg])
    best = np.zeros(s.n_turns, np.int64)
    np.maximum.at(best, seg[ok], cum[ok])
    return np.minimum(np.maximum(best, np.floor(hit / interval) * interval), hit).astype(np.int64)
