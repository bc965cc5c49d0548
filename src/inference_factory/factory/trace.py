"""The request-trace data types: :class:`WorkloadClass` and :class:`WorkloadSpec` (what a
synthetic workload is made of) and :class:`Trace` (columnar requests with their prefix
chains; the CSR layout is described in :mod:`inference_factory.factory.workload`), with the
one-line validation helpers they share.

Re-exported by :mod:`inference_factory.factory.workload`, where users import them."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from .. import bounds
from ..errors import SpecError, show
from ..units import SECONDS_PER_DAY, SECONDS_PER_HOUR


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
        raise SpecError(f"{owner}: {name} = {show(v)} must be an integer {allowed}")


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
        _check_num(who, "prompt_tokens_median", self.prompt_tokens_median, 0.0, bounds.MAX_TOKENS,
                   lo_open=True)
        _check_num(who, "prompt_tokens_sigma", self.prompt_tokens_sigma, 0.0)
        _check_num(who, "output_tokens_median", self.output_tokens_median, 0.0, bounds.MAX_TOKENS,
                   lo_open=True)
        _check_num(who, "output_tokens_sigma", self.output_tokens_sigma, 0.0)
        _check_int(who, "max_prompt_tokens", self.max_prompt_tokens, 1, bounds.MAX_TOKENS)
        _check_int(who, "max_output_tokens", self.max_output_tokens, 1, bounds.MAX_TOKENS)
        for kind in ("prompt", "output"):
            cap, median = (getattr(self, f"max_{kind}_tokens"),
                           getattr(self, f"{kind}_tokens_median"))
            if cap < median:
                raise SpecError(f"{who}: max_{kind}_tokens = {cap} is below {kind}_tokens_median"
                                f" = {median:g}; the cap must be >= the median (else more than "
                                "half the draws are clipped to it)")
        _check_int(who, "system_prompt_tokens", self.system_prompt_tokens, 0, bounds.MAX_TOKENS)
        _check_int(who, "n_system_prompts", self.n_system_prompts, 1, bounds.MAX_SYSTEM_PROMPTS)
        _check_num(who, "system_prompt_zipf", self.system_prompt_zipf, 0.0)
        _check_num(who, "turns_mean", self.turns_mean, 1.0, bounds.MAX_TURNS_MEAN)
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
        _check_int(who, "n_requests", self.n_requests, 1, bounds.MAX_REQUESTS)
        _check_num(who, "arrival_rate_per_s", self.arrival_rate_per_s, 0.0, bounds.MAX_RATE_PER_S,
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

    def summary_columns(self) -> dict[str, np.ndarray]:
        """The columns of :meth:`summary` as arrays (one value per class, then ``all``),
        without pandas."""
        cid = self.class_id.astype(np.int64)
        k = len(self.class_names)
        n = np.bincount(cid, minlength=k)
        inp = np.bincount(cid, weights=self.input_tokens, minlength=k)
        out = np.bincount(cid, weights=self.output_tokens, minlength=k)
        chn = np.bincount(cid, weights=self.chain_tokens, minlength=k)
        n, inp, out, chn = (np.append(a, a.sum()) for a in (n, inp, out, chn))
        with np.errstate(invalid="ignore", divide="ignore"):
            return {
                "n_requests": n.astype(np.int64),
                "request_share_frac": n / max(self.n_requests, 1),
                "input_tokens": inp.astype(np.int64),
                "output_tokens": out.astype(np.int64),
                "mean_input_tokens": inp / n,
                "mean_output_tokens": out / n,
                "chain_tokens_frac": chn / inp,
            }

    def summary(self):
        """Per-class totals and means, plus an ``all`` row (pandas DataFrame).

        ``chain_tokens_frac`` is the share of input tokens that sit in reusable prefixes: the
        token hit rate an infinite cache would reach without compulsory (first-use) misses.
        """
        import pandas as pd

        df = pd.DataFrame(self.summary_columns(),
                          index=pd.Index(list(self.class_names) + ["all"], name="class_name"))
        df.attrs.update(n_requests=self.n_requests, duration_s=self.duration_s,
                        request_rate_per_s=(self.n_requests / self.duration_s
                                            if self.duration_s > 0 else math.nan),
                        source=self.source)
        return df
