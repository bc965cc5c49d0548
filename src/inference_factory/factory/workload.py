"""Request traces: synthetic mixed workloads and loaders for public trace formats.

A :class:`Trace` is columnar (numpy arrays, one row per request, sorted by arrival) and
carries the prefix structure an exact-prefix KV cache needs, as a CSR "chain" per request:

- ``chain_items[chain_offsets[i]:chain_offsets[i + 1]]`` are the reusable prefix items the
  prompt of request ``i`` starts with, in order (the class's system prompt, then one item per
  earlier turn of the same conversation; or the full KV blocks of a ``hash_ids`` trace);
- ``item_tokens[k]`` is the length of item ``k``;
- ``own_item[i]`` is the item that request ``i``'s own new tokens (new user message plus its
  output) become for the next turn of its conversation, or -1 when no later turn exists.

Tokens are conserved exactly: ``input_tokens = chain tokens + new user tokens``, and the own
item of a turn holds ``new user tokens + output tokens``, so the next turn's prompt is the
previous prompt plus the previous answer plus a new message.

:func:`generate_trace` builds a trace from a :class:`WorkloadSpec` with vectorized numpy and
one compiled pass that lays out the chains in arrival order (10^6 requests in about 0.4 s on
2 cores); :func:`load_trace` reads Mooncake JSONL and Vidur/Splitwise-style CSV files.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import numbers
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..specs import schema
from ..errors import SpecError
from ..units import SECONDS_PER_DAY, SECONDS_PER_HOUR
MOONCAKE_BLOCK_TOKENS = 512          # block size of the hash_ids in Mooncake's public traces

__all__ = ["WorkloadClass", "WorkloadSpec", "Trace", "generate_trace", "load_trace",
           "example_spec", "example_trace_path", "MOONCAKE_BLOCK_TOKENS"]


# --------------------------------------------------------------------------------------------
# validation helpers (one-line SpecError messages)
# --------------------------------------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))


def _check_int(owner: str, name: str, v: Any, minimum: int, maximum: int | None = None) -> None:
    if not _is_int(v) or v < minimum or (maximum is not None and v > maximum):
        allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum:,}]"
        raise SpecError(f"{owner}: {name} = {schema.show(v)} must be an integer {allowed}")


def _check_num(owner: str, name: str, v: Any, lo: float, hi: float = math.inf, *,
               lo_open: bool = False) -> None:
    ok = _is_num(v) and (v > lo if lo_open else v >= lo) and v <= hi
    if not ok:
        lo_s = f"> {lo:g}" if lo_open else f">= {lo:g}"
        if hi == math.inf:
            allowed = f"a finite number {lo_s}"
        else:
            allowed = f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise SpecError(f"{owner}: {name} = {v!r} must be {allowed}")


# --------------------------------------------------------------------------------------------
# workload specification
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkloadClass:
    """One kind of traffic (chat, API agent, reasoning...) in a synthetic workload.

    Token lengths are lognormal, ``round(median * exp(sigma * Z))`` clipped to
    ``[1, max_*_tokens]``. ``prompt_tokens_*`` describe the NEW user tokens of each turn; the
    prompt a request sends is its class's system prompt, all earlier turns of its conversation
    (messages and answers) and these new tokens. Conversations have a geometric number of
    turns with mean ``turns_mean`` (1 = single-turn). A conversation ends early when the next
    turn would not fit ``max_context_tokens`` (prompt plus output), if that is set.

    ``acceptance_rate`` (per-position speculative acceptance) and ``expert_skew`` (Zipf
    exponent of expert popularity) are carried per class for the later layers.
    """

    name: str
    share: float                       # fraction of REQUESTS in this class, (0, 1]
    prompt_tokens_median: float
    prompt_tokens_sigma: float
    output_tokens_median: float
    output_tokens_sigma: float
    max_prompt_tokens: int             # cap on the new user tokens of one turn
    max_output_tokens: int
    system_prompt_tokens: int = 0      # length of each shared system prompt (0 = none)
    n_system_prompts: int = 1          # distinct system prompts of the class
    system_prompt_zipf: float = 1.0    # popularity exponent over the system prompts
    turns_mean: float = 1.0            # mean turns per conversation (geometric), >= 1
    acceptance_rate: float = 0.0       # per-position speculative acceptance, [0, 1]
    expert_skew: float = 0.0           # Zipf exponent of expert popularity, >= 0
    max_context_tokens: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError(f"WorkloadClass: name = {self.name!r} must be a non-empty string")
        who = f"WorkloadClass {self.name!r}"
        _check_num(who, "share", self.share, 0.0, 1.0, lo_open=True)
        _check_num(who, "prompt_tokens_median", self.prompt_tokens_median, 0.0, schema.MAX_TOKENS,
                   lo_open=True)
        _check_num(who, "prompt_tokens_sigma", self.prompt_tokens_sigma, 0.0)
        _check_num(who, "output_tokens_median", self.output_tokens_median, 0.0, schema.MAX_TOKENS,
                   lo_open=True)
        _check_num(who, "output_tokens_sigma", self.output_tokens_sigma, 0.0)
        _check_int(who, "max_prompt_tokens", self.max_prompt_tokens, 1, schema.MAX_TOKENS)
        _check_int(who, "max_output_tokens", self.max_output_tokens, 1, schema.MAX_TOKENS)
        _check_int(who, "system_prompt_tokens", self.system_prompt_tokens, 0, schema.MAX_TOKENS)
        _check_int(who, "n_system_prompts", self.n_system_prompts, 1, schema.MAX_SYSTEM_PROMPTS)
        _check_num(who, "system_prompt_zipf", self.system_prompt_zipf, 0.0)
        _check_num(who, "turns_mean", self.turns_mean, 1.0, schema.MAX_TURNS_MEAN)
        _check_num(who, "acceptance_rate", self.acceptance_rate, 0.0, 1.0)
        _check_num(who, "expert_skew", self.expert_skew, 0.0)
        if self.max_context_tokens is not None:
            _check_int(who, "max_context_tokens", self.max_context_tokens, 1)
            first = self.system_prompt_tokens + self.max_prompt_tokens + self.max_output_tokens
            if self.max_context_tokens < first:
                raise SpecError(
                    f"{who}: max_context_tokens = {self.max_context_tokens} must be >= "
                    f"system_prompt_tokens + max_prompt_tokens + max_output_tokens = {first}, "
                    "so that a first turn always fits")


@dataclass(frozen=True)
class WorkloadSpec:
    """A synthetic workload: how many requests, when they arrive, which classes.

    The request rate follows ``r(t) = r0 (1 + A sin(2 pi t / 86400 - pi/2))`` (trough at
    t = 0, peak at t = 12 h; A = ``diurnal_amplitude`` in [0, 1]). Conversations start as a
    Poisson process with this profile (at rate ``r0 * n_conversations / n_requests`` so that
    requests arrive at about ``r0``); turn k+1 of a conversation arrives an exponential think
    time (mean ``think_time_mean_s``, covering generation and reading) after turn k.
    ``output_tokens_per_day`` (0 = unset), when given, sets the daily mean request rate that
    sizes the fleet and the money (output tokens per day / mean output tokens per request);
    the trace's timestamps still follow ``arrival_rate_per_s``.
    """

    n_requests: int
    arrival_rate_per_s: float
    diurnal_amplitude: float = 0.0
    seed: int = 0
    classes: tuple[WorkloadClass, ...] = ()
    think_time_mean_s: float = 60.0
    output_tokens_per_day: float = 0.0

    def __post_init__(self) -> None:
        who = "WorkloadSpec"
        _check_int(who, "n_requests", self.n_requests, 1, schema.MAX_REQUESTS)
        _check_num(who, "arrival_rate_per_s", self.arrival_rate_per_s, 0.0, schema.MAX_RATE_PER_S,
                   lo_open=True)
        _check_num(who, "diurnal_amplitude", self.diurnal_amplitude, 0.0, 1.0)
        _check_int(who, "seed", self.seed, 0)
        _check_num(who, "think_time_mean_s", self.think_time_mean_s, 0.0)
        _check_num(who, "output_tokens_per_day", self.output_tokens_per_day, 0.0)
        classes = tuple(self.classes) if isinstance(self.classes, (list, tuple)) else None
        if not classes:
            raise SpecError(f"{who}: classes = {self.classes!r} must be a non-empty sequence "
                            "of WorkloadClass")
        for c in classes:
            if not isinstance(c, WorkloadClass):
                raise SpecError(f"{who}: classes contains {c!r}; expected WorkloadClass")
        names = [c.name for c in classes]
        if len(set(names)) != len(names):
            raise SpecError(f"{who}: class names {names} must be unique")
        total = sum(c.share for c in classes)
        if abs(total - 1.0) > 1e-6:
            raise SpecError(f"{who}: class shares {[c.share for c in classes]} sum to "
                            f"{total:.6g}; they must sum to 1")
        object.__setattr__(self, "classes", classes)


# --------------------------------------------------------------------------------------------
# the trace
# --------------------------------------------------------------------------------------------

def _ro(a: Any, dtype) -> np.ndarray:
    """Contiguous read-only view (the caller's array keeps its own flags)."""
    v = np.ascontiguousarray(a, dtype=dtype).view()
    v.flags.writeable = False
    return v


@dataclass(frozen=True, eq=False)
class Trace:
    """Columnar request trace, one row per request, sorted by arrival.

    See the module docstring for the chain (CSR) prefix structure. ``acceptance_rate`` and
    ``expert_skew`` are indexed by class id (NaN where a loaded file does not say; set them
    with :meth:`with_class_params`). ``conversation_id`` is -1 where unknown (loaded traces).
    """

    arrival_s: np.ndarray          # float64, non-decreasing
    class_id: np.ndarray           # int16, index into class_names
    class_names: tuple[str, ...]
    input_tokens: np.ndarray       # int64
    output_tokens: np.ndarray      # int64
    chain_offsets: np.ndarray      # int64, n + 1
    chain_items: np.ndarray        # int64 item ids
    item_tokens: np.ndarray        # int64 per item id, >= 1
    own_item: np.ndarray           # int64 per request, -1 = none
    acceptance_rate: np.ndarray    # float64 per class
    expert_skew: np.ndarray        # float64 per class
    conversation_id: np.ndarray | None = None   # int64 per request, -1 = unknown
    source: str = ""

    def __post_init__(self) -> None:
        s = object.__setattr__
        s(self, "arrival_s", _ro(self.arrival_s, np.float64))
        n = self.arrival_s.shape[0]
        s(self, "class_id", _ro(self.class_id, np.int16))
        s(self, "class_names", tuple(str(c) for c in self.class_names))
        for name in ("input_tokens", "output_tokens", "chain_offsets", "chain_items",
                     "item_tokens", "own_item"):
            s(self, name, _ro(getattr(self, name), np.int64))
        s(self, "acceptance_rate", _ro(self.acceptance_rate, np.float64))
        s(self, "expert_skew", _ro(self.expert_skew, np.float64))
        cid = np.full(n, -1, np.int64) if self.conversation_id is None else self.conversation_id
        s(self, "conversation_id", _ro(cid, np.int64))
        self._check(n)

    def _check(self, n: int) -> None:
        def fail(msg: str) -> SpecError:
            return SpecError(f"Trace{' ' + self.source if self.source else ''}: {msg}")

        for name in ("class_id", "input_tokens", "output_tokens", "own_item", "conversation_id"):
            if getattr(self, name).shape != (n,):
                raise fail(f"{name} has shape {getattr(self, name).shape}, expected ({n},)")
        off, items, sizes = self.chain_offsets, self.chain_items, self.item_tokens
        if off.shape != (n + 1,) or off[0] != 0 or off[-1] != items.shape[0] \
                or np.any(np.diff(off) < 0):
            raise fail("chain_offsets must be non-decreasing, start at 0, have n + 1 entries "
                       "and end at len(chain_items)")
        n_classes = len(self.class_names)
        if n_classes == 0 or self.acceptance_rate.shape != (n_classes,) \
                or self.expert_skew.shape != (n_classes,):
            raise fail("class_names, acceptance_rate and expert_skew must have one entry per class")
        if n and (np.any(self.class_id < 0) or np.any(self.class_id >= n_classes)):
            raise fail(f"class_id must lie in [0, {n_classes})")
        if not np.all(np.isfinite(self.arrival_s)) or np.any(np.diff(self.arrival_s) < 0):
            raise fail("arrival_s must be finite and sorted (non-decreasing)")
        if np.any(sizes < 1):
            raise fail("item_tokens must be >= 1")
        n_items = sizes.shape[0]
        if items.size and (items.min() < 0 or items.max() >= n_items):
            raise fail(f"chain_items must lie in [0, {n_items})")
        if n and (self.own_item.min() < -1 or self.own_item.max() >= n_items):
            raise fail(f"own_item must be -1 or lie in [0, {n_items})")
        if np.any(self.output_tokens < 0):
            raise fail("output_tokens must be >= 0")
        if np.any(self.new_tokens < 0):
            i = int(np.argmax(self.new_tokens < 0))
            raise fail(f"request {i}: input_tokens = {int(self.input_tokens[i])} is less than "
                       f"its chain's {int(self.chain_tokens[i])} tokens")

    # ---- derived columns ------------------------------------------------------------------
    @property
    def n_requests(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.item_tokens.shape[0])

    @property
    def duration_s(self) -> float:
        """Time from the first to the last arrival. [s]"""
        return float(self.arrival_s[-1] - self.arrival_s[0]) if self.n_requests else 0.0

    @cached_property
    def chain_tokens(self) -> np.ndarray:
        """Tokens of each request's reusable prefix chain (an upper bound on its hit). [tokens]"""
        cs = np.concatenate(([0], np.cumsum(self.item_tokens[self.chain_items])))
        out = cs[self.chain_offsets[1:]] - cs[self.chain_offsets[:-1]]
        out.flags.writeable = False
        return out

    @cached_property
    def new_tokens(self) -> np.ndarray:
        """Prompt tokens of each request that no earlier request can provide. [tokens]"""
        out = self.input_tokens - self.chain_tokens
        out.flags.writeable = False
        return out

    @cached_property
    def hour_of_day(self) -> np.ndarray:
        """Hour of the day (0 .. 23) of each arrival, ``arrival_s`` counted from midnight."""
        out = ((self.arrival_s % SECONDS_PER_DAY) // SECONDS_PER_HOUR).astype(int)
        out.flags.writeable = False
        return out

    @property
    def chain_lengths(self) -> np.ndarray:
        """Number of chain items per request."""
        return np.diff(self.chain_offsets)

    def chain(self, i: int) -> np.ndarray:
        """Chain item ids of request ``i``, in prompt order."""
        return self.chain_items[self.chain_offsets[i]:self.chain_offsets[i + 1]]

    # ---- views ----------------------------------------------------------------------------
    def with_class_params(self, *, acceptance_rate: float | Mapping[str, float] | None = None,
                          expert_skew: float | Mapping[str, float] | None = None) -> "Trace":
        """Copy with per-class acceptance rate and/or expert skew (a number or {class: value})."""
        def resolve(name: str, value, current: np.ndarray, lo: float, hi: float) -> np.ndarray:
            if value is None:
                return current
            if isinstance(value, Mapping):
                unknown = sorted(set(value) - set(self.class_names))
                if unknown:
                    raise SpecError(f"{name}: unknown classes {unknown}; the trace has "
                                    f"{list(self.class_names)}")
                out = current.copy()
                for k, v in value.items():
                    _check_num(name, k, v, lo, hi)
                    out[self.class_names.index(k)] = v
                return out
            _check_num("with_class_params", name, value, lo, hi)
            return np.full(len(self.class_names), float(value))

        return Trace(**{**self._fields(),
                        "acceptance_rate": resolve("acceptance_rate", acceptance_rate,
                                                   self.acceptance_rate, 0.0, 1.0),
                        "expert_skew": resolve("expert_skew", expert_skew, self.expert_skew,
                                               0.0, math.inf)})

    def head(self, n: int) -> "Trace":
        """The first ``n`` requests by arrival (all of them if the trace is shorter); items
        no kept request uses stay in ``item_tokens`` (harmless: never looked up)."""
        _check_int("Trace.head", "n", n, 1)
        n = min(int(n), self.n_requests)
        end = int(self.chain_offsets[n])
        f = self._fields()
        for k in ("arrival_s", "class_id", "input_tokens", "output_tokens", "own_item",
                  "conversation_id"):
            f[k] = f[k][:n]
        f["chain_offsets"] = self.chain_offsets[:n + 1]
        f["chain_items"] = self.chain_items[:end]
        return Trace(**f)

    def _fields(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def to_dataframe(self):
        """One row per request: arrival, class, tokens, prefix-chain size, own item."""
        import pandas as pd

        df = pd.DataFrame({
            "arrival_s": self.arrival_s,
            "class_name": pd.Categorical.from_codes(self.class_id.astype(np.int64),
                                                    categories=list(self.class_names)),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "chain_tokens": self.chain_tokens,
            "new_tokens": self.new_tokens,
            "n_chain_items": self.chain_lengths,
            "own_item": self.own_item,
            "conversation_id": self.conversation_id,
        })
        df.attrs["units"] = {"arrival_s": "s", "input_tokens": "tokens",
                             "output_tokens": "tokens", "chain_tokens": "tokens",
                             "new_tokens": "tokens"}
        df.attrs["source"] = self.source
        return df

    def summary(self):
        """Per-class totals and means, plus an ``all`` row (pandas DataFrame).

        ``chain_tokens_frac`` is the share of input tokens that sit in reusable prefixes: the
        token hit rate an infinite cache would reach without compulsory (first-use) misses.
        """
        import pandas as pd

        cid = self.class_id.astype(np.int64)
        k = len(self.class_names)
        n = np.bincount(cid, minlength=k)
        inp = np.bincount(cid, weights=self.input_tokens, minlength=k)
        out = np.bincount(cid, weights=self.output_tokens, minlength=k)
        chn = np.bincount(cid, weights=self.chain_tokens, minlength=k)
        rows = list(self.class_names) + ["all"]
        n, inp, out, chn = (np.append(a, a.sum()) for a in (n, inp, out, chn))
        with np.errstate(invalid="ignore", divide="ignore"):
            df = pd.DataFrame({
                "n_requests": n.astype(np.int64),
                "request_share_frac": n / max(self.n_requests, 1),
                "input_tokens": inp.astype(np.int64),
                "output_tokens": out.astype(np.int64),
                "mean_input_tokens": inp / n,
                "mean_output_tokens": out / n,
                "chain_tokens_frac": chn / inp,
            }, index=pd.Index(rows, name="class_name"))
        df.attrs.update(n_requests=self.n_requests, duration_s=self.duration_s,
                        request_rate_per_s=(self.n_requests / self.duration_s
                                            if self.duration_s > 0 else math.nan),
                        source=self.source)
        return df


# --------------------------------------------------------------------------------------------
# synthetic generation (vectorized)
# --------------------------------------------------------------------------------------------

def _lognormal_tokens(rng: np.random.Generator, median: float, sigma: float, size: int,
                      cap: int) -> np.ndarray:
    x = np.rint(median * np.exp(sigma * rng.standard_normal(size)))
    return np.clip(x, 1, cap).astype(np.int64)


def _segments(lengths: np.ndarray):
    """For segments of the given lengths: (segment of each element, first index, index within)."""
    first = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    seg = np.repeat(np.arange(lengths.shape[0]), lengths)
    within = np.arange(seg.shape[0], dtype=np.int64) - first[seg]
    return seg, first, within


def _exclusive_segment_cumsum(x: np.ndarray, seg: np.ndarray, first: np.ndarray) -> np.ndarray:
    cs = np.cumsum(x)
    excl = cs - x
    return excl - excl[first][seg]


def _conversations(rng: np.random.Generator, c: WorkloadClass, n_target: int):
    """Turn counts, new user tokens and output tokens of the conversations of one class.

    Returns ``(turns_per_conversation, user_tokens, output_tokens)`` with exactly
    ``n_target`` turns in all (the last conversation is cut if needed).
    """
    p = 1.0 / c.turns_mean
    sys_tokens = c.system_prompt_tokens
    parts_k, parts_u, parts_o = [], [], []
    have = 0
    while have < n_target:
        need = n_target - have
        m = int(need / c.turns_mean * 1.05) + 16
        k = rng.geometric(p, m).astype(np.int64)
        total = int(k.sum())
        u = _lognormal_tokens(rng, c.prompt_tokens_median, c.prompt_tokens_sigma, total,
                              c.max_prompt_tokens)
        o = _lognormal_tokens(rng, c.output_tokens_median, c.output_tokens_sigma, total,
                              c.max_output_tokens)
        if c.max_context_tokens is not None:
            seg, first, within = _segments(k)
            prior = _exclusive_segment_cumsum(u + o, seg, first)
            too_long = sys_tokens + prior + u + o > c.max_context_tokens
            k_eff = np.minimum.reduceat(np.where(too_long, within, k[seg]), first)
            keep = within < k_eff[seg]
            k, u, o = k_eff, u[keep], o[keep]
        cum = np.cumsum(k)
        if cum[-1] >= need:
            j = int(np.searchsorted(cum, need))          # conversation holding turn `need`
            k = k[:j + 1].copy()
            k[-1] -= int(cum[j]) - need
            u, o = u[:need], o[:need]
        parts_k.append(k)
        parts_u.append(u)
        parts_o.append(o)
        have += int(k.sum())
    return np.concatenate(parts_k), np.concatenate(parts_u), np.concatenate(parts_o)


def _zipf_probabilities(n: int, exponent: float) -> np.ndarray:
    w = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return w / w.sum()


def _diurnal_poisson_times(rng: np.random.Generator, n: int, rate0_per_s: float,
                           amplitude: float) -> np.ndarray:
    """First ``n`` events of a Poisson process of rate r0 (1 - A cos(2 pi t / day)), by thinning."""
    lam_max = rate0_per_s * (1.0 + amplitude)
    omega = 2.0 * math.pi / SECONDS_PER_DAY
    out, have, t0 = [], 0, 0.0
    while have < n:
        m = int((n - have) * (1.0 + amplitude) * 1.1) + 64
        t = t0 + np.cumsum(rng.exponential(1.0 / lam_max, m))
        keep = rng.random(m) * (1.0 + amplitude) < 1.0 - amplitude * np.cos(omega * t)
        out.append(t[keep])
        have += int(keep.sum())
        t0 = float(t[-1])
    return np.concatenate(out)[:n]


def generate_trace(spec: WorkloadSpec) -> Trace:
    """Deterministic synthetic trace for ``spec`` (numpy ``default_rng(spec.seed)``).

    Steps, vectorized (the chain layout compiled): requests per class ~ Multinomial(n,
    shares); per class, geometric conversations (cut at the context limit) until the class has
    its requests; a system prompt per conversation drawn by Zipf popularity; conversation
    starts from the diurnal Poisson process, randomly assigned to conversations of all classes
    (so classes interleave); turn k+1 at turn k plus an exponential think time; finally all
    requests sorted by arrival.
    """
    rng = np.random.default_rng(spec.seed)
    classes = spec.classes
    shares = np.array([c.share for c in classes], dtype=np.float64)
    n_per_class = rng.multinomial(spec.n_requests, shares / shares.sum())

    # item ids 0 .. n_sys-1 are the system prompts of all classes, class by class
    sys_base, sys_sizes, next_item = [], [], 0
    for c in classes:
        if c.system_prompt_tokens > 0:
            sys_base.append(next_item)
            sys_sizes.append(np.full(c.n_system_prompts, c.system_prompt_tokens, np.int64))
            next_item += c.n_system_prompts
        else:
            sys_base.append(-1)
    n_sys_items = next_item

    turns, user, out, conv_class, conv_sys = [], [], [], [], []
    for ci, c in enumerate(classes):
        if n_per_class[ci] == 0:
            continue
        k, u, o = _conversations(rng, c, int(n_per_class[ci]))
        if sys_base[ci] >= 0:
            p = _zipf_probabilities(c.n_system_prompts, c.system_prompt_zipf)
            s = sys_base[ci] + rng.choice(c.n_system_prompts, size=k.shape[0], p=p)
        else:
            s = np.full(k.shape[0], -1, np.int64)
        turns.append(k)
        user.append(u)
        out.append(o)
        conv_class.append(np.full(k.shape[0], ci, np.int16))
        conv_sys.append(s.astype(np.int64))
    turns = np.concatenate(turns)
    user = np.concatenate(user)
    out = np.concatenate(out)
    conv_class = np.concatenate(conv_class)
    conv_sys = np.concatenate(conv_sys)
    n, n_conv = user.shape[0], turns.shape[0]

    # arrivals: conversation starts from the diurnal process, shuffled over conversations
    starts = _diurnal_poisson_times(rng, n_conv, spec.arrival_rate_per_s * n_conv / n,
                                    spec.diurnal_amplitude)
    conv_start = starts[rng.permutation(n_conv)]
    seg, first, within = _segments(turns)
    think = rng.exponential(spec.think_time_mean_s, n) if spec.think_time_mean_s > 0 \
        else np.zeros(n)
    think[within == 0] = 0.0
    arrival = conv_start[seg] + _exclusive_segment_cumsum(think, seg, first) + think

    # tokens: prompt = system prompt + all earlier turns (message + answer) + new message
    sys_item = conv_sys[seg]
    has_sys = sys_item >= 0
    sys_sizes_all = np.concatenate(sys_sizes) if sys_sizes else np.zeros(0, np.int64)
    sys_tok = np.where(has_sys, sys_sizes_all[np.maximum(sys_item, 0)] if n_sys_items else 0, 0)
    turn_tok = user + out
    input_tokens = sys_tok + _exclusive_segment_cumsum(turn_tok, seg, first) + user

    # own items: every turn that has a later turn becomes an item
    has_next = within < turns[seg] - 1
    own = np.full(n, -1, np.int64)
    own[has_next] = n_sys_items + np.arange(int(has_next.sum()), dtype=np.int64)
    item_tokens = np.concatenate((sys_sizes_all, turn_tok[has_next]))

    # chains, rows in arrival order: [system prompt] + own items of the earlier turns
    perm = _arrival_order(arrival)
    chain_offsets, chain_items = _compiled_chains()(perm, sys_item, within, own)
    conv_id = seg[perm]  # conversations are numbered in generation order

    return Trace(
        arrival_s=arrival[perm], class_id=conv_class[conv_id],
        class_names=tuple(c.name for c in classes),
        input_tokens=input_tokens[perm], output_tokens=out[perm],
        chain_offsets=chain_offsets, chain_items=chain_items, item_tokens=item_tokens,
        own_item=own[perm],
        acceptance_rate=np.array([c.acceptance_rate for c in classes]),
        expert_skew=np.array([c.expert_skew for c in classes]),
        conversation_id=conv_id, source=f"generate_trace(seed={spec.seed})")


def _arrival_order(arrival: np.ndarray) -> np.ndarray:
    """The stable sort order of ``arrival``. numpy's default (SIMD) sort is 4x faster than its
    stable one and gives the same permutation when no two arrivals are equal; with ties
    (e.g. zero think time) the stable sort is used."""
    perm = np.argsort(arrival)
    s = arrival[perm]
    if s.size > 1 and np.any(s[1:] == s[:-1]):
        perm = np.argsort(arrival, kind="stable")
    return perm


def _sorted_chains(perm, sys_item, within, own):
    """CSR prefix chains with rows in the order ``perm`` (arrival order): row ``r`` holds
    request ``i = perm[r]``'s system prompt item (if ``sys_item[i] >= 0``), then the own
    items of the ``within[i]`` earlier turns of its conversation, which are the requests
    ``i - within[i] .. i - 1`` (a conversation's turns are consecutive in generation order).
    Returns ``(offsets, items)``. Compiled by :func:`_compiled_chains`; plain Python here."""
    n = perm.shape[0]
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    for r in range(n):
        i = perm[r]
        offsets[r + 1] = offsets[r] + (sys_item[i] >= 0) + within[i]
    items = np.empty(offsets[n], np.int64)
    for r in range(n):
        i = perm[r]
        o = offsets[r]
        if sys_item[i] >= 0:
            items[o] = sys_item[i]
            o += 1
        first = i - within[i]
        for e in range(within[i]):
            items[o + e] = own[first + e]
    return offsets, items


@functools.cache
def _compiled_chains():
    """:func:`_sorted_chains` compiled (numba, cached on disk); imported on first use so that
    reading configs and traces does not import numba."""
    import numba

    return numba.njit(cache=True)(_sorted_chains)


def example_spec(n_requests: int = 100_000, seed: int = 0) -> WorkloadSpec:
    """An illustrative three-class mix (chat, API/agent, reasoning), for docs and benchmarks.

    The shape parameters are plausible, not calibrated to any provider; the mix gives an
    input/output token ratio of about 3.9 (DeepSeek published 608B/168B = 3.6 per day, see
    ``reference/deployments.csv``) and a mean prompt of about 3.2k tokens. Write your own
    classes for real studies.
    """
    classes = (
        WorkloadClass("chat", 0.55, prompt_tokens_median=120, prompt_tokens_sigma=1.0,
                      output_tokens_median=400, output_tokens_sigma=0.8,
                      max_prompt_tokens=16_384, max_output_tokens=8_192,
                      system_prompt_tokens=300, n_system_prompts=20, system_prompt_zipf=1.0,
                      turns_mean=3.0, acceptance_rate=0.85, expert_skew=0.6,
                      max_context_tokens=65_536),
        WorkloadClass("api-agent", 0.30, prompt_tokens_median=400, prompt_tokens_sigma=1.2,
                      output_tokens_median=300, output_tokens_sigma=0.9,
                      max_prompt_tokens=32_768, max_output_tokens=8_192,
                      system_prompt_tokens=1_500, n_system_prompts=5_000,
                      system_prompt_zipf=1.1, turns_mean=4.0, acceptance_rate=0.9,
                      expert_skew=1.0, max_context_tokens=65_536),
        WorkloadClass("reasoning", 0.15, prompt_tokens_median=250, prompt_tokens_sigma=1.0,
                      output_tokens_median=2_000, output_tokens_sigma=0.7,
                      max_prompt_tokens=16_384, max_output_tokens=32_768,
                      system_prompt_tokens=150, n_system_prompts=5, system_prompt_zipf=1.0,
                      turns_mean=1.5, acceptance_rate=0.75, expert_skew=0.8,
                      max_context_tokens=65_536),
    )
    return WorkloadSpec(n_requests=n_requests, arrival_rate_per_s=50.0, diurnal_amplitude=0.5,
                        seed=seed, classes=classes)


# --------------------------------------------------------------------------------------------
# loaders
# --------------------------------------------------------------------------------------------

def example_trace_path() -> Path:
    """The bundled Mooncake-format example (``configs/traces/example_mooncake.jsonl``)."""
    from ..specs import data_dir

    return data_dir("configs") / "traces" / "example_mooncake.jsonl"


class _Rows:
    """Accumulates validated rows; errors name the file, line, field and value."""

    def __init__(self, path: Path):
        self.path = path
        self.arrival: list[float] = []
        self.inp: list[int] = []
        self.out: list[int] = []
        self.cls: list[str] = []
        self.hashes: list[list[int]] = []

    def fail(self, line: int, fieldname: str, value: Any, must: str) -> SpecError:
        return SpecError(f"{self.path}: line {line}: field {fieldname!r} = "
                         f"{schema.show(value)} {must}")

    def _float(self, line: int, fieldname: str, value: Any) -> float:
        """A number or a numeric string (CSV cells are strings)."""
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise self.fail(line, fieldname, value, "is not a number") from None
        if _is_int(value):
            try:
                return float(value)
            except OverflowError:
                return math.inf
        if _is_num(value):
            return float(value)
        raise self.fail(line, fieldname, value, "is not a number")

    def number(self, line: int, fieldname: str, value: Any, minimum: float,
               maximum: float) -> float:
        value_f = self._float(line, fieldname, value)
        if not math.isfinite(value_f) or not minimum <= value_f <= maximum:
            raise self.fail(line, fieldname, value,
                            f"must be a finite number in [{minimum:g}, {maximum:g}]")
        return value_f

    def integer(self, line: int, fieldname: str, value: Any, minimum: int, maximum: int) -> int:
        value_f = self._float(line, fieldname, value)
        if not math.isfinite(value_f) or value_f != int(value_f) \
                or not minimum <= value_f <= maximum:
            raise self.fail(line, fieldname, value,
                            f"must be a whole number in [{minimum}, {maximum:,}]")
        return int(value_f)

    def add(self, line: int, arrival_s: float, inp: int, out: int, cls: str,
            hashes: list[int], block_tokens: int, hash_field: str) -> None:
        if len(hashes) > -(-inp // block_tokens):
            raise self.fail(line, hash_field, f"<{len(hashes)} ids>",
                            f"has more blocks than ceil(input / {block_tokens}) = "
                            f"{-(-inp // block_tokens)}; is the block size right?")
        self.arrival.append(arrival_s)
        self.inp.append(inp)
        self.out.append(out)
        self.cls.append(cls)
        self.hashes.append(hashes)

    def trace(self, block_tokens: int) -> Trace:
        if not self.arrival:
            raise SpecError(f"{self.path}: no requests in file")
        n = len(self.arrival)
        arrival = np.asarray(self.arrival, np.float64)
        inp = np.asarray(self.inp, np.int64)
        names = list(dict.fromkeys(self.cls))
        code = {c: i for i, c in enumerate(names)}
        cid = np.fromiter((code[c] for c in self.cls), np.int16, n)
        # reusable chain: the FULL blocks only; the last partial block is the request's own
        lengths = np.fromiter((len(h) for h in self.hashes), np.int64, n)
        lengths = np.minimum(lengths, inp // block_tokens)
        flat = np.fromiter((x for h, k in zip(self.hashes, lengths.tolist()) for x in h[:k]),
                           np.int64, int(lengths.sum()))
        uniq, items = np.unique(flat, return_inverse=True)
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        perm = np.argsort(arrival, kind="stable")
        new_len = lengths[perm]
        new_off = np.concatenate(([0], np.cumsum(new_len)))
        src = np.repeat(offsets[:-1][perm] - new_off[:-1], new_len) + np.arange(new_off[-1])
        k = len(names)
        return Trace(arrival_s=arrival[perm], class_id=cid[perm], class_names=tuple(names),
                     input_tokens=inp[perm], output_tokens=np.asarray(self.out, np.int64)[perm],
                     chain_offsets=new_off, chain_items=items.reshape(-1)[src],
                     item_tokens=np.full(uniq.shape[0], block_tokens, np.int64),
                     own_item=np.full(n, -1, np.int64),
                     acceptance_rate=np.full(k, np.nan), expert_skew=np.full(k, np.nan),
                     source=str(self.path))


def _load_jsonl(path: Path, block_tokens: int) -> Trace:
    rows = _Rows(path)
    with open(path, encoding="utf-8") as fh:
        for line_no, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SpecError(f"{path}: line {line_no}: not valid JSON ({exc.msg} at column "
                                f"{exc.colno})") from None
            if not isinstance(obj, dict):
                raise SpecError(f"{path}: line {line_no}: expected a JSON object, got "
                                f"{type(obj).__name__}")
            row, bad = schema.parse(schema.TraceRow, obj)
            if bad is not None:
                key, value, need = bad
                if need.startswith("is missing"):
                    raise SpecError(f"{path}: line {line_no}: field {key!r} is missing "
                                    "(required: timestamp [ms], input_length, output_length)")
                raise rows.fail(line_no, key.split("[")[0], value, need)
            rows.add(line_no, row.timestamp / 1000.0, row.input_length, row.output_length,
                     row.class_, list(row.hash_ids), block_tokens, "hash_ids")
    return rows.trace(block_tokens)


_CSV_COLUMNS = {"arrival": ("arrival_s", "arrived_at"),
                "input": ("input_tokens", "num_prefill_tokens"),
                "output": ("output_tokens", "num_decode_tokens")}


def _load_csv(path: Path, block_tokens: int) -> Trace:
    rows = _Rows(path)
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise SpecError(f"{path}: line 1: empty file; expected a header with arrival_s, "
                            "input_tokens, output_tokens")
        header = [h.strip() for h in header]
        col: dict[str, int] = {}
        for role, names in _CSV_COLUMNS.items():
            found = [h for h in names if h in header]
            if not found:
                raise SpecError(f"{path}: line 1: column {names[0]!r} (or {names[1]!r}) is "
                                f"missing; the header has {header}")
            col[role] = header.index(found[0])
        names_used = {role: header[i] for role, i in col.items()}
        cls_i = header.index("class") if "class" in header else None
        hash_i = header.index("hash_ids") if "hash_ids" in header else None
        width = len(header)
        for rec in reader:
            line_no = reader.line_num
            if not rec or all(not x.strip() for x in rec):
                continue
            if len(rec) != width:
                raise SpecError(f"{path}: line {line_no}: {len(rec)} fields, expected {width} "
                                f"as in the header {header}")

            def cell(i: int, name: str) -> str:
                v = rec[i].strip()
                if v == "":
                    raise SpecError(f"{path}: line {line_no}: field {name!r} is empty")
                return v

            arrival = rows.number(line_no, names_used["arrival"],
                                  cell(col["arrival"], names_used["arrival"]), 0.0,
                                  schema.MAX_TRACE_MS / 1000.0)
            inp = rows.integer(line_no, names_used["input"],
                               cell(col["input"], names_used["input"]), 1, schema.MAX_TOKENS)
            out = rows.integer(line_no, names_used["output"],
                               cell(col["output"], names_used["output"]), 0, schema.MAX_TOKENS)
            cls = "default"
            if cls_i is not None:
                cls = cell(cls_i, "class")
            hashes: list[int] = []
            if hash_i is not None and rec[hash_i].strip():
                for tok in rec[hash_i].split():
                    try:
                        hashes.append(int(tok))
                        if not -2**63 <= hashes[-1] < 2**63:
                            raise ValueError(tok)
                    except ValueError:
                        raise rows.fail(line_no, "hash_ids", rec[hash_i].strip(),
                                        "must be space-separated 64-bit integers") from None
            rows.add(line_no, arrival, inp, out, cls, hashes, block_tokens, "hash_ids")
    return rows.trace(block_tokens)


def load_trace(path: str | os.PathLike, *, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Trace:
    """Read a request trace file into a :class:`Trace` (sorted by arrival).

    ``.jsonl``: the public Mooncake format, one object per line with ``timestamp`` [ms],
    ``input_length``, ``output_length``, ``hash_ids`` (KV block ids, optional) and optionally
    ``class``. ``.csv``: columns ``arrival_s`` or ``arrived_at`` [s], ``input_tokens`` or
    ``num_prefill_tokens``, ``output_tokens`` or ``num_decode_tokens`` (Vidur/Splitwise),
    optional ``class`` and ``hash_ids`` (space-separated).

    Chain items are the FULL blocks of ``hash_ids`` (``block_tokens`` each; 512 in Mooncake's
    traces); tokens past the last full block are the request's own and never reusable;
    ``own_item`` is -1. A malformed file raises :class:`SpecError` naming the file, line,
    field and value. Per-class acceptance rate and expert skew are NaN: set them with
    :meth:`Trace.with_class_params`.
    """
    _check_int("load_trace", "block_tokens", block_tokens, 1)
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise SpecError(f"{p}: unknown trace format {p.suffix!r}; use .jsonl (Mooncake) or "
                        ".csv (arrival_s, input_tokens, output_tokens)")
    if not p.is_file():
        raise SpecError(f"{p}: {'is a folder, not a trace file' if p.is_dir() else 'file not found'}")
    try:
        return _load_jsonl(p, block_tokens) if suffix == ".jsonl" else _load_csv(p, block_tokens)
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: not a UTF-8 text file (byte {exc.start}: {exc.reason})") from None
    except csv.Error as exc:
        raise SpecError(f"{p}: malformed CSV ({exc})") from None
