"""Test oracles of the tiered exact-prefix KV cache (test use only; the package runs the one
compiled LRU of :func:`inference_factory.factory.kvcache.simulate_prefix_cache`).

* :func:`interpreted_prefix_cache` - the same semantics in CPython (OrderedDicts per tier,
  O(1) amortized per item access); with ``audit`` every tier is recounted after every
  request and checked against the running occupancy and the capacity.
* :func:`brute_force_prefix_cache` - written as plainly as possible: lists and linear scans.

Both were in the package (``simulate_prefix_cache(audit=True)`` ran the interpreted one);
they moved here so that the package holds one LRU implementation.
"""

from collections import OrderedDict
from typing import Sequence

import numpy as np

from inference_factory.factory.kvcache import TIERS, CacheResult, _capacities
from inference_factory.factory.workload import Trace


def interpreted_prefix_cache(trace: Trace, capacity_tokens: Sequence[float], *,
                             audit: bool = True) -> CacheResult:
    """:func:`simulate_prefix_cache` in CPython, with the audit by default (what
    ``simulate_prefix_cache(..., audit=True)`` ran when it lived in the package)."""
    return _simulate_interpreted(trace, _capacities(capacity_tokens), audit=audit)


def _simulate_interpreted(trace: Trace, caps: tuple[float, float, float],
                          audit: bool = True) -> CacheResult:
    """:func:`simulate_prefix_cache` in CPython (OrderedDicts per tier; about 1 us per
    request and chain item); with ``audit``, every tier recounted after every request."""
    cap0, cap1, cap2 = caps
    n = trace.n_requests
    size = trace.item_tokens.tolist()
    offs = trace.chain_offsets.tolist()
    items = trace.chain_items.tolist()
    own = trace.own_item.tolist()
    loc = [-1] * len(size)                       # tier holding each item, -1 = not cached
    hbm: OrderedDict[int, int] = OrderedDict()   # item -> tokens, LRU first
    dram: OrderedDict[int, int] = OrderedDict()
    nvme: OrderedDict[int, int] = OrderedDict()
    occ0 = occ1 = occ2 = 0                       # tokens held per tier
    pk0 = pk1 = pk2 = 0                          # peak tokens held per tier

    # Insertion, cascading demotion and eviction, written out per tier (no loop over tiers,
    # no recursion): this is the hot path, ~1e7 item accesses for 1e6 requests.
    def put_nvme(x: int, s: int) -> None:        # requires s <= cap2
        nonlocal occ2, pk2
        while occ2 + s > cap2:
            y, sy = nvme.popitem(last=False)
            occ2 -= sy
            loc[y] = -1                           # evicted from the last tier
        nvme[x] = s
        occ2 += s
        loc[x] = 2
        if occ2 > pk2:
            pk2 = occ2

    def put_dram(x: int, s: int) -> None:        # requires s <= cap1
        nonlocal occ1, pk1
        while occ1 + s > cap1:
            y, sy = dram.popitem(last=False)
            occ1 -= sy
            if sy <= cap2:
                put_nvme(y, sy)
            else:
                loc[y] = -1
        dram[x] = s
        occ1 += s
        loc[x] = 1
        if occ1 > pk1:
            pk1 = occ1

    def put_lower(x: int, s: int) -> None:       # an item that does not fit HBM
        if s <= cap1:
            put_dram(x, s)
        elif s <= cap2:
            put_nvme(x, s)
        else:
            loc[x] = -1

    hit0 = [0] * n
    hit1 = [0] * n
    hit2 = [0] * n
    move_to_end = hbm.move_to_end
    popitem = hbm.popitem
    pop_dram = dram.pop
    pop_nvme = nvme.pop
    for r in range(n):
        a = offs[r]
        b = offs[r + 1]
        x = own[r]
        if a == b and x < 0:
            continue
        chain = items[a:b]
        # Fast path: while the chain's items sit in HBM, count the hit and touch them in one
        # pass (moving an item inside HBM changes no item's tier, so the hit of the rest of the
        # chain is unaffected).
        h0 = 0
        k = 0
        for y in chain:
            if loc[y] != 0:
                break
            h0 += size[y]
            move_to_end(y)
            k += 1
        rest = chain[k:] if k else chain
        if rest:
            # 1. hit: the rest of the leading run of present items, per tier where found
            h1 = h2 = 0
            for y in rest:
                t = loc[y]
                if t < 0:
                    break
                if t == 0:
                    h0 += size[y]
                elif t == 1:
                    h1 += size[y]
                else:
                    h2 += size[y]
            if h1:
                hit1[r] = h1
            if h2:
                hit2[r] = h2
        if h0:
            hit0[r] = h0
        # 2. touch the remaining chain items, then the own item: each to the HBM MRU end
        if x >= 0:
            rest.append(x)                      # rest is a fresh list (a slice of items)
        for y in rest:
            t = loc[y]
            if t == 0:
                move_to_end(y)
                continue
            if t < 0:
                s = size[y]
            elif t == 1:
                s = pop_dram(y)
                occ1 -= s
            else:
                s = pop_nvme(y)
                occ2 -= s
            if s > cap0:
                put_lower(y, s)
                continue
            # insert at the HBM MRU end, demoting HBM's LRU items (inlined: the hot path)
            while occ0 + s > cap0:
                z, sz = popitem(last=False)
                occ0 -= sz
                if sz <= cap1:
                    put_dram(z, sz)
                elif sz <= cap2:
                    put_nvme(z, sz)
                else:
                    loc[z] = -1
            hbm[y] = s
            occ0 += s
            loc[y] = 0
            if occ0 > pk0:
                pk0 = occ0
        if audit:
            for t, od, o in ((0, hbm, occ0), (1, dram, occ1), (2, nvme, occ2)):
                held = sum(od.values())
                if held != o or held > caps[t] or any(loc[y] != t for y in od):
                    raise AssertionError(f"request {r}: tier {TIERS[t]} holds {held} tokens, "
                                         f"counter {o}, capacity {caps[t]}")
    peak = (pk0, pk1, pk2)

    as64 = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    return CacheResult(capacity_tokens=caps, input_tokens=trace.input_tokens,
                       hit_tokens_hbm=as64(hit0), hit_tokens_dram=as64(hit1),
                       hit_tokens_nvme=as64(hit2), peak_occupancy_tokens=peak)


def brute_force_prefix_cache(trace: Trace, capacity_tokens: Sequence[float]) -> CacheResult:
    """Same semantics as :func:`simulate_prefix_cache`, written as plainly as possible.

    Each tier is a Python list of item ids, LRU first. Every lookup scans the lists; the
    occupancy is recomputed from the lists after every change, and the peak recorded. Used by
    the tests as the oracle; O(cache items) per access.
    """
    caps = _capacities(capacity_tokens)
    size = [int(s) for s in trace.item_tokens]
    tiers: list[list[int]] = [[], [], []]

    def used(t: int) -> int:
        return sum(size[y] for y in tiers[t])

    peak = [0, 0, 0]

    def find(x: int) -> int:
        for t in range(3):
            if x in tiers[t]:
                return t
        return -1

    def put(x: int, t: int) -> None:
        if t >= 3:
            return                                  # evicted from the last tier: gone
        if size[x] > caps[t]:
            put(x, t + 1)                           # too large for this tier: skip it
            return
        while used(t) + size[x] > caps[t]:
            lru = tiers[t].pop(0)
            put(lru, t + 1)                         # demote to the next tier's MRU end
        tiers[t].append(x)
        peak[t] = max(peak[t], used(t))

    def touch(x: int) -> None:
        t = find(x)
        if t >= 0:
            tiers[t].remove(x)
        put(x, 0)

    n = trace.n_requests
    hits = np.zeros((3, n), dtype=np.int64)
    for r in range(n):
        chain = [int(x) for x in trace.chain(r)]
        for x in chain:
            t = find(x)
            if t < 0:
                break
            hits[t, r] += size[x]
        for x in chain:
            touch(x)
        if trace.own_item[r] >= 0:
            touch(int(trace.own_item[r]))
        for t in range(3):
            assert used(t) <= caps[t]
    return CacheResult(capacity_tokens=caps, input_tokens=trace.input_tokens,
                       hit_tokens_hbm=hits[0], hit_tokens_dram=hits[1], hit_tokens_nvme=hits[2],
                       peak_occupancy_tokens=tuple(peak))
