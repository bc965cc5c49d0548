r"""Exact-prefix KV cache over three exclusive LRU tiers (HBM, DRAM, NVMe), and Che's law.

Semantics, per request in arrival order (:func:`simulate_prefix_cache`):

1. **Hit.** The hit is the longest LEADING run of the request's chain items that are present
   in any tier, judged on the cache state before the request (prefix matching stops at the
   first missing item). Its tokens are recorded per tier where each item was found.
2. **Touch.** Every chain item of the request, in order, moves to the MRU end of HBM (a miss
   is inserted there); then ``own_item`` (if >= 0) is inserted at the HBM MRU end.
3. **Insert / demote.** Inserting an item into a tier first evicts that tier's LRU items
   until the item fits; each evicted item is inserted at the MRU end of the next tier
   (cascading the same way); NVMe evictions leave the cache. An item larger than a tier skips
   it and goes to the next tier (an item larger than every tier is not cached). An item that
   moves is first removed from its old tier. No tier ever holds more tokens than its capacity.

Tiers are exclusive and demotion keeps recency order, so the three tiers together are one LRU
stack cut in three: HBM holds the most recent items, DRAM the next, NVMe the next (up to the
slack each tier leaves when the next item does not fit).

Capacities are in tokens; the caller converts bytes with ``capacity_bytes /
kv_bytes_per_token``. A model with per-sequence state (a recurrent layer's) keeps a snapshot
of it with each cached item: the item then takes ``snapshot_tokens`` more room (its bytes in
tokens of KV), so tier occupancy and its peak count that room too, while hits count tokens. The hit rate reported is the fraction of INPUT TOKENS served from cache
(DeepSeek's published metric), not the fraction of requests with a hit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numba
import numpy as np

from ..errors import SpecError
from ..kernels import moe as kmoe
from .workload import Trace

__all__ = ["TIERS", "CacheResult", "simulate_prefix_cache",
           "che_token_hit_rate", "zipf_popularity", "popularity_trace"]

TIERS = ("hbm", "dram", "nvme")


def _capacities(capacity_tokens: Sequence[float]) -> tuple[float, float, float]:
    try:
        caps = tuple(capacity_tokens)
    except TypeError:
        caps = ()
    if len(caps) != 3 or not all(
            isinstance(c, (int, float, np.integer, np.floating)) and not isinstance(c, bool)
            and c >= 0 for c in caps):
        raise SpecError(f"capacity_tokens = {capacity_tokens!r} must be three numbers >= 0 "
                        "(HBM, DRAM, NVMe tokens); use 0 for an absent tier and math.inf for "
                        "an unbounded one")
    return tuple(float(c) if math.isinf(c) else int(c) for c in caps)  # type: ignore[return-value]


@dataclass(frozen=True, eq=False)
class CacheResult:
    """Per-request cache hits of a trace, and totals.

    All ``hit_tokens*`` arrays are int64, one entry per request of the trace (arrival order).
    """

    capacity_tokens: tuple[float, float, float]
    input_tokens: np.ndarray
    hit_tokens_hbm: np.ndarray
    hit_tokens_dram: np.ndarray
    hit_tokens_nvme: np.ndarray
    peak_occupancy_tokens: tuple[int, int, int]

    @property
    def hit_tokens(self) -> np.ndarray:
        """Prompt tokens restored from any tier. [tokens]"""
        return self.hit_tokens_hbm + self.hit_tokens_dram + self.hit_tokens_nvme

    @property
    def miss_tokens(self) -> np.ndarray:
        """Prompt tokens prefill must compute. [tokens]"""
        return self.input_tokens - self.hit_tokens

    def token_hit_rate(self, start: int = 0, tier: str | None = None) -> float:
        """Hit tokens / input tokens over requests ``start:`` (skip a warm-up), all tiers or one."""
        arr = self.hit_tokens if tier is None else getattr(self, f"hit_tokens_{tier}")
        denom = int(self.input_tokens[start:].sum())
        return float(arr[start:].sum()) / denom if denom else math.nan

    @property
    def token_hit_rate_total(self) -> float:
        """Token hit rate over the whole trace (all tiers): DeepSeek's 56.3 % metric. [frac]"""
        return self.token_hit_rate()

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {"token_hit_rate": self.token_hit_rate()}
        for t, cap, peak in zip(TIERS, self.capacity_tokens, self.peak_occupancy_tokens):
            out[f"token_hit_rate_{t}"] = self.token_hit_rate(tier=t)
            out[f"capacity_tokens_{t}"] = cap
            out[f"peak_occupancy_tokens_{t}"] = peak
        out["request_hit_frac"] = float(np.mean(self.hit_tokens > 0)) if self.input_tokens.size \
            else math.nan
        return out


# --------------------------------------------------------------------------------------------
# compiled simulation: one doubly linked list per tier in flat arrays, O(1) per item access
# --------------------------------------------------------------------------------------------
#
# All state lives in ONE int64 table ``node``: rows 0 .. n_items - 1 are the items
# (prev, next, tokens, tier holding it or -1), in one 32-byte row so that touching an item
# misses the cache once; rows ``base + t`` (base = n_items) are tier t's (LRU item, MRU item,
# tokens held, peak tokens held). The helpers take that one array and the capacities as a
# tuple: every array argument of a compiled call costs atomic reference-count updates, which
# were 80 % of the run time when the state was seven arrays (0.77 s -> 0.13 s on a
# 10^6-request trace, identical hits). numba's own inlining (``inline="always"``) would take
# 0.10 s but doubles the first compile (4.5 -> 8 s), so it is not used.

_PREV, _NEXT, _TOKENS, _TIER = 0, 1, 2, 3          # item row columns
_LRU, _MRU, _OCC, _PEAK = 0, 1, 2, 3               # tier row columns


@numba.njit(cache=True)
def _unlink(x, t, node, base):
    p, q = node[x, _PREV], node[x, _NEXT]
    if p >= 0:
        node[p, _NEXT] = q
    else:
        node[base + t, _LRU] = q
    if q >= 0:
        node[q, _PREV] = p
    else:
        node[base + t, _MRU] = p


@numba.njit(cache=True)
def _push_mru(x, t, node, base):
    """Append ``x`` at tier ``t``'s MRU end (list only; the tokens are counted by the caller)."""
    last = node[base + t, _MRU]
    node[x, _PREV] = last
    node[x, _NEXT] = -1
    if last >= 0:
        node[last, _NEXT] = x
    else:
        node[base + t, _LRU] = x
    node[base + t, _MRU] = x


@numba.njit(cache=True)
def _hold(x, t, node, base):
    """Put ``x`` (held nowhere) at tier ``t``'s MRU end and count its tokens there."""
    _push_mru(x, t, node, base)
    node[x, _TIER] = t
    occ = node[base + t, _OCC] + node[x, _TOKENS]
    node[base + t, _OCC] = occ
    if occ > node[base + t, _PEAK]:
        node[base + t, _PEAK] = occ


@numba.njit(cache=True)
def _pop_lru(t, node, base):
    """Remove tier ``t``'s LRU item (the tier is not empty) and return it."""
    y = node[base + t, _LRU]
    _unlink(y, t, node, base)
    node[base + t, _OCC] -= node[y, _TOKENS]
    node[y, _TIER] = -1
    return y


@numba.njit(cache=True)
def _insert(x, t, node, base, caps):
    """Insert ``x`` (not held anywhere) at the MRU end of tier ``t``, or of the first lower
    tier it fits; each eviction is inserted the same way one tier down before the next
    eviction (module docstring, rule 3). The cascade is at most three levels deep and is
    written out level by level (numba compiles no recursion here)."""
    s = node[x, _TOKENS]
    while t < 3 and s > caps[t]:
        t += 1                                   # too large for this tier: skip it
    if t == 3:
        return                                   # larger than every tier below: not cached
    while node[base + t, _OCC] + s > caps[t]:
        y = _pop_lru(t, node, base)              # the tier's LRU item
        sy = node[y, _TOKENS]
        u = t + 1
        while u < 3 and sy > caps[u]:
            u += 1
        if u == 3:
            continue                             # evicted from the last tier it fits: gone
        # demote y to tier u's MRU end, evicting there first (one more level of the cascade)
        while node[base + u, _OCC] + sy > caps[u]:
            z = _pop_lru(u, node, base)
            sz = node[z, _TOKENS]
            v = u + 1
            while v < 3 and sz > caps[v]:
                v += 1
            if v == 3:
                continue
            while node[base + v, _OCC] + sz > caps[v]:   # v == 2 here: evictions leave the cache
                _pop_lru(v, node, base)
            _hold(z, v, node, base)
        _hold(y, u, node, base)
    _hold(x, t, node, base)


@numba.njit(cache=True)
def _touch(y, node, base, caps):
    """Move ``y`` to the HBM MRU end (inserting it if it is not cached; rule 2)."""
    t = node[y, _TIER]
    if t == 0:
        if node[base, _MRU] != y:               # a move inside HBM: no tokens change
            _unlink(y, 0, node, base)
            _push_mru(y, 0, node, base)
        return
    if t > 0:
        _unlink(y, t, node, base)
        node[base + t, _OCC] -= node[y, _TOKENS]
        node[y, _TIER] = -1
    _insert(y, 0, node, base, caps)


@numba.njit(cache=True)
def _simulate_compiled(offsets, items, own, size, tokens, caps_arr):
    n = offsets.size - 1
    base = size.size
    caps = (caps_arr[0], caps_arr[1], caps_arr[2])
    node = np.full((base + 3, 4), -1, np.int64)
    node[:base, _TOKENS] = size
    node[base:, _OCC] = 0
    node[base:, _PEAK] = 0
    hits = np.zeros((3, n), np.int64)
    for r in range(n):
        a, b = offsets[r], offsets[r + 1]
        for j in range(a, b):                    # 1. hit: the leading run of present items
            y = items[j]
            t = node[y, _TIER]
            if t < 0:
                break
            hits[t, r] += tokens[y]
        for j in range(a, b):                    # 2. touch every chain item, then own
            _touch(items[j], node, base, caps)
        if own[r] >= 0:
            _touch(own[r], node, base, caps)
    return hits, node[base:, _PEAK].copy()


def simulate_prefix_cache(trace: Trace, capacity_tokens: Sequence[float],
                          snapshot_tokens: float = 0.0) -> CacheResult:
    """Run ``trace`` through the three-tier exact-prefix LRU cache (module docstring).

    Parameters
    ----------
    trace : Trace
        Requests in arrival order with their prefix chains.
    capacity_tokens : (hbm, dram, nvme)
        Tier capacities. [tokens]
    snapshot_tokens : float
        Room each cached item takes beyond its tokens, in tokens of KV: a model with
        per-sequence state (a recurrent layer's) keeps a snapshot of it at the end of each
        cached item, so that a hit can resume there (``Architecture.state_bytes_per_sequence``
        over the KV bytes per token; 0 for KV-only models). Rounded up to whole tokens.

    Cost: compiled (numba), a few array reads and writes per chain item (about 50 ns),
    independent of the cache size; the first call in a fresh environment compiles (cached on
    disk, see the README). This is the package's one LRU; the tests check it against an
    interpreted copy with an audit and a brute-force oracle (``tests/kvcache_oracle.py``).
    """
    caps = _capacities(capacity_tokens)
    if not (math.isfinite(snapshot_tokens) and snapshot_tokens >= 0):
        raise SpecError(f"snapshot_tokens = {snapshot_tokens!r} must be a finite number >= 0")
    size = trace.item_tokens + np.int64(math.ceil(snapshot_tokens))
    hits, peak = _simulate_compiled(trace.chain_offsets, trace.chain_items, trace.own_item,
                                    size, trace.item_tokens, np.asarray(caps, dtype=np.float64))
    return CacheResult(capacity_tokens=caps, input_tokens=trace.input_tokens,
                       hit_tokens_hbm=hits[0], hit_tokens_dram=hits[1], hit_tokens_nvme=hits[2],
                       peak_occupancy_tokens=tuple(int(p) for p in peak))


# --------------------------------------------------------------------------------------------
# Che's approximation
# --------------------------------------------------------------------------------------------

def che_token_hit_rate(item_popularity, item_tokens, capacity_tokens, *,
                       uncacheable_tokens=0.0, n_iterations: int = 60):
    r"""Token hit rate of an LRU prefix cache under the independent reference model (Che).

    Each request references one cacheable prefix item, item :math:`i` with probability
    :math:`p_i` (size :math:`s_i` tokens), plus :math:`\bar u` uncacheable tokens on average
    (the unique suffix, never reused). Time is counted in requests.

    Parameters
    ----------
    item_popularity : array_like, shape (N,)
        Probability :math:`p_i` that a request references item i (normalized here). [-]
    item_tokens : array_like, shape (N,) or scalar
        Item sizes :math:`s_i`. [tokens]
    capacity_tokens : array_like
        Cache capacities :math:`C`; any shape, the result has the same shape. [tokens]
    uncacheable_tokens : float
        Mean uncacheable prompt tokens per request, :math:`\bar u`. [tokens]
    n_iterations : int
        Bisection steps on :math:`\log T` (60 halves the bracket to below 1e-15 of its width).

    Returns
    -------
    ndarray
        Token hit rate :math:`H(C)`, fraction of input tokens. [frac]

    Notes
    -----
    Che's characteristic time :math:`T_C` solves

    .. math:: \sum_i s_i \left(1 - e^{-p_i T_C}\right) = C,

    an item is in cache iff it was referenced in the last :math:`T_C` requests, so its hit
    probability is :math:`h_i = 1 - e^{-p_i T_C}`, and

    .. math:: H(C) = \frac{\sum_i p_i s_i h_i}{\sum_i p_i s_i + \bar u}.

    :math:`H(0) = 0`; for :math:`C \ge \sum_{p_i > 0} s_i` every item fits and
    :math:`H = \sum_i p_i s_i / (\sum_i p_i s_i + \bar u)`, the limit without compulsory
    misses (which a finite trace still pays once per item).

    For the stacked exclusive tiers of :func:`simulate_prefix_cache` (one LRU stack cut in
    three), the hit rate of tier k is :math:`H(C_1 + \dots + C_k) - H(C_1 + \dots + C_{k-1})`.

    The approximation is asymptotically exact for many items with none dominant [2]_;
    variable sizes enter only through the capacity equation (items larger than a tier, which
    the simulation cannot hold there, are not modelled).

    References
    ----------
    .. [1] H. Che, Y. Tung and Z. Wang, "Hierarchical Web caching systems: modeling, design
       and experimental results", IEEE J. Sel. Areas Commun. 20(7), 1305-1314, 2002, eq. (2).
    .. [2] C. Fricker, P. Robert and J. Roberts, "A versatile and accurate approximation for
       LRU cache performance", Proc. 24th International Teletraffic Congress (ITC 24), 2012.
    """
    p = np.asarray(item_popularity, dtype=np.float64).ravel()
    if p.size == 0 or np.any(p < 0) or not np.all(np.isfinite(p)) or p.sum() <= 0:
        raise SpecError("item_popularity must be a non-empty array of finite numbers >= 0 "
                        "with a positive sum")
    p = p / p.sum()
    s = np.broadcast_to(np.asarray(item_tokens, dtype=np.float64), p.shape)
    if np.any(s <= 0) or not np.all(np.isfinite(s)):
        raise SpecError("item_tokens must be finite and > 0")
    if not (np.isfinite(uncacheable_tokens) and uncacheable_tokens >= 0):
        raise SpecError(f"uncacheable_tokens = {uncacheable_tokens!r} must be >= 0")
    cap = np.asarray(capacity_tokens, dtype=np.float64)
    if np.any(cap < 0) or np.any(np.isnan(cap)):
        raise SpecError("capacity_tokens must be >= 0")

    keep = p > 0
    p, s = p[keep], s[keep]
    ps = p * s
    demand = ps.sum()                       # mean cacheable tokens per request
    denom = demand + uncacheable_tokens
    total = s.sum()                         # tokens of all items with p > 0

    flat = cap.ravel()
    out = np.empty_like(flat)
    full = flat >= total
    out[full] = demand / denom
    out[flat <= 0] = 0.0
    inner = (flat > 0) & ~full
    if np.any(inner):
        c = flat[inner]
        # bracket T: f(T) <= T * demand gives T >= C / demand; the deficit
        # sum s_i exp(-p_i T) <= total exp(-p_min T) gives f(T) >= C for
        # T >= -log(1 - C / total) / p_min.
        lo = np.log(c / demand)
        hi = np.log(-np.log1p(-c / total) / p.min())
        hi = np.maximum(hi, lo)
        chunk = max(1, 4_000_000 // p.size)         # bound the (capacities x items) work array
        for k in range(0, c.size, chunk):
            cl, a, b = c[k:k + chunk], lo[k:k + chunk].copy(), hi[k:k + chunk].copy()
            for _ in range(n_iterations):
                mid = 0.5 * (a + b)
                f = (s * -np.expm1(-np.outer(np.exp(mid), p))).sum(axis=1)
                below = f < cl
                a = np.where(below, mid, a)
                b = np.where(below, b, mid)
            t_c = np.exp(0.5 * (a + b))
            h = -np.expm1(-np.outer(t_c, p))
            out[np.flatnonzero(inner)[k:k + chunk]] = (h * ps).sum(axis=1) / denom
    return out.reshape(cap.shape)


# --------------------------------------------------------------------------------------------
# an IRM trace to check Che against the simulation
# --------------------------------------------------------------------------------------------

def zipf_popularity(n_items: int, alpha: float) -> np.ndarray:
    """Zipf popularity p_i proportional to i^-alpha, i = 1..N (item 0 most popular)."""
    if not (isinstance(n_items, (int, np.integer)) and n_items >= 1):
        raise SpecError(f"n_items = {n_items!r} must be an integer >= 1")
    if not (np.isfinite(alpha) and alpha >= 0):
        raise SpecError(f"alpha = {alpha!r} must be a finite number >= 0")
    return kmoe.zipf_popularity(n_experts=n_items, skew=alpha)


def popularity_trace(n_requests: int, n_items: int, alpha: float, *, item_tokens=1024,
                     suffix_tokens: int = 256, arrival_rate_per_s: float = 1.0,
                     seed: int = 0) -> Trace:
    """Independent-reference-model trace: single-turn requests, each = one prefix item + suffix.

    Request r references prefix item i ~ Zipf(alpha) over ``n_items`` (item 0 most popular),
    i.i.d.; its prompt is that item (``item_tokens``, a scalar or one size per item) followed
    by ``suffix_tokens`` unique tokens that are never reused (``own_item`` = -1). Arrivals
    are Poisson at ``arrival_rate_per_s``. The matching Che prediction is
    ``che_token_hit_rate(zipf_popularity(n_items, alpha), item_tokens, C,
    uncacheable_tokens=suffix_tokens)``.
    """
    if not (isinstance(n_requests, (int, np.integer)) and n_requests >= 1):
        raise SpecError(f"n_requests = {n_requests!r} must be an integer >= 1")
    if not (isinstance(suffix_tokens, (int, np.integer)) and suffix_tokens >= 0):
        raise SpecError(f"suffix_tokens = {suffix_tokens!r} must be an integer >= 0")
    if not (np.isfinite(arrival_rate_per_s) and arrival_rate_per_s > 0):
        raise SpecError(f"arrival_rate_per_s = {arrival_rate_per_s!r} must be > 0")
    p = zipf_popularity(n_items, alpha)
    sizes = np.broadcast_to(np.asarray(item_tokens, dtype=np.int64), (n_items,)).copy()
    rng = np.random.default_rng(seed)
    ref = np.minimum(np.searchsorted(np.cumsum(p), rng.random(n_requests), side="right"),
                     n_items - 1).astype(np.int64)
    arrival = np.cumsum(rng.exponential(1.0 / arrival_rate_per_s, n_requests))
    return Trace(arrival_s=arrival, class_id=np.zeros(n_requests, np.int16),
                 class_names=("irm",), input_tokens=sizes[ref] + suffix_tokens,
                 output_tokens=np.ones(n_requests, np.int64),
                 chain_offsets=np.arange(n_requests + 1, dtype=np.int64), chain_items=ref,
                 item_tokens=sizes, own_item=np.full(n_requests, -1, np.int64),
                 acceptance_rate=np.array([np.nan]), expert_skew=np.array([np.nan]),
                 source=f"popularity_trace(N={n_items}, alpha={alpha}, seed={seed})")
