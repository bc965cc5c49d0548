"""The precision-profile grammar of ``plan --precision``: the set of formats a deployment runs
in, as users state it (``native``, ``low``, ``both``, ``fp8-weights+fp8-kv``,
``weight=fp8,moe=fp4,kv=fp8``). Part of the one option grammar (:mod:`.grammar` re-exports
:func:`parse_precision` and :class:`PrecisionProfile`); imports neither numpy nor xarray."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ..errors import SpecError

#
# A precision profile is the set of formats a deployment runs in, as users state it:
#
# ==============================  ==============================================================
# ``native``                      the model's own weight formats (the lowest the device
#                                 computes in at or above them), BF16 KV cache and dispatch
# ``low``                         the factory's low_precision lever: FP8 KV cache and dispatch,
#                                 FP4 routed experts where the device has FP4 tensor cores
# ``both``                        ``native`` and ``low`` (two profiles)
# ``fp8-weights+fp8-kv``          ``native`` with the named parts changed: ``PREC-PART``
#                                 joined by ``+``, optionally after a base (``low+fp8-weights``)
# ``weight=fp8,moe=fp4,kv=fp8``   the same, as ``PART=PREC`` fields (``,`` or ``+`` between)
# ==============================  ==============================================================
#
# Parts: ``weights`` (every weight: the non-expert weights and, unless ``experts`` is named
# too, the routed experts; the engine's rule for ``weight_precision``), ``dense`` (the
# non-expert weights only), ``experts`` / ``moe`` (routed experts), ``kv`` (KV cache),
# ``attention`` (attention core math), ``dispatch`` / ``combine`` (MoE all-to-all). Precisions:
# :data:`inference_factory.units.PRECISIONS`. Several profiles: comma-separated in the
# ``PREC-PART`` form (``native,fp8-weights+fp8-kv``) or the option repeated.

#: Profile parts -> the engine arguments each sets (``weights``: both, see above).
PRECISION_PARTS: dict[str, tuple[str, ...]] = {
    "weights": ("weight_precision", "moe_precision"), "dense": ("weight_precision",),
    "experts": ("moe_precision",), "kv": ("kv_precision",),
    "attention": ("attention_precision",), "dispatch": ("dispatch_precision",),
    "combine": ("combine_precision",)}
#: Other spellings of the parts (the ``PART=PREC`` form's engine-like names).
_PART_ALIASES = {"weight": "weights", "moe": "experts", "expert": "experts",
                 **{f"{k}_precision": v for k, v in (("weight", "weights"), ("moe", "experts"),
                                                     ("kv", "kv"), ("attention", "attention"),
                                                     ("dispatch", "dispatch"),
                                                     ("combine", "combine"))}}
#: Named profiles (the bases a combination starts from).
PRECISION_BASES: tuple[str, ...] = ("native", "low")
#: The engine arguments a profile can set, in the order a label names them.
_PROFILE_KEYS = ("weight_precision", "moe_precision", "kv_precision", "attention_precision",
                 "dispatch_precision", "combine_precision")
_KEY_PART = {"weight_precision": "dense", "moe_precision": "experts", "kv_precision": "kv",
             "attention_precision": "attention", "dispatch_precision": "dispatch",
             "combine_precision": "combine"}


@dataclass(frozen=True)
class PrecisionProfile:
    """One precision profile: a base (``native`` or ``low``) and the engine precisions the
    user named on top of it (``(("kv_precision", "fp8"), ...)`` in :data:`_PROFILE_KEYS`
    order). :meth:`label` is its canonical spelling; ``parse_precision(p.label())`` gives
    ``p`` back."""

    base: str = "native"
    overrides: tuple[tuple[str, str], ...] = ()

    def label(self) -> str:
        """Canonical text: the base unless it is ``native`` with parts named, then the parts
        (``weights`` where the dense and expert weights share a precision)."""
        o = dict(self.overrides)
        parts = [] if (self.base == "native" and o) else [self.base]
        w, e = o.get("weight_precision"), o.get("moe_precision")
        if w is not None and w == e:
            parts.append(f"{w}-weights")
            o = {k: v for k, v in o.items() if k not in ("weight_precision", "moe_precision")}
        parts += [f"{o[k]}-{_KEY_PART[k]}" for k in _PROFILE_KEYS if k in o]
        return "+".join(parts)

    def __str__(self) -> str:
        return self.label()


def _precision_token(prec: str, part_text: str, where: str, text: str) -> str:
    from ..units import PRECISIONS

    p = prec.strip().lower()
    if p not in PRECISIONS:
        raise SpecError(f"{where} {text!r}: {part_text!r} names precision {prec.strip()!r}; "
                        f"allowed: {', '.join(PRECISIONS)} (e.g. fp8-weights+fp8-kv)")
    return p


def _part_name(name: str, where: str, text: str) -> str:
    n = name.strip().lower().replace("-", "_")
    n = _PART_ALIASES.get(n, n)
    if n not in PRECISION_PARTS:
        raise SpecError(f"{where} {text!r}: unknown part {name.strip()!r}; allowed: "
                        f"{', '.join(PRECISION_PARTS)} (e.g. fp8-weights+fp8-kv or "
                        "weight=fp8,kv=fp8)")
    return n


def _one_profile(items: Sequence[str], where: str, text: str) -> PrecisionProfile:
    """A profile from its items (a base name, ``PREC-PART`` or ``PART=PREC`` each)."""
    base, named = None, {}
    for item in items:
        it = item.strip()
        if not it:
            raise SpecError(f"{where} {text!r}: an empty part; join parts with '+', e.g. "
                            "fp8-weights+fp8-kv")
        if it.lower() in PRECISION_BASES:
            if base is not None or named:
                raise SpecError(f"{where} {text!r}: the base {it!r} must come first and once "
                                f"(e.g. low+fp8-weights); bases: {', '.join(PRECISION_BASES)}")
            base = it.lower()
            continue
        if "=" in it:
            part, prec = it.split("=", 1)
        elif "-" in it:
            prec, part = it.split("-", 1)
        else:
            raise SpecError(f"{where} {text!r}: {it!r} is not a profile "
                            f"({', '.join(PRECISION_BASES)}, both) nor PREC-PART or PART=PREC; "
                            f"parts: {', '.join(PRECISION_PARTS)} (e.g. fp8-weights+fp8-kv)")
        name = _part_name(part, where, text)
        if name in named:
            raise SpecError(f"{where} {text!r}: names {name} twice; give each part once")
        named[name] = _precision_token(prec, it, where, text)
    o: dict[str, str] = {}
    for name in ("weights", "dense", "experts", "kv", "attention", "dispatch", "combine"):
        if name in named:      # the specific parts (dense, experts) override weights
            o.update({k: named[name] for k in PRECISION_PARTS[name]})
    return PrecisionProfile(base or "native",
                            tuple((k, o[k]) for k in _PROFILE_KEYS if k in o))


def parse_precision(spec: str | Sequence[str] | PrecisionProfile,
                    where: str = "--precision") -> tuple[PrecisionProfile, ...]:
    """Precision profiles from their text (see the table above); a list of texts (the
    option repeated) gives their profiles in order. A profile listed twice is an error."""
    if isinstance(spec, PrecisionProfile):
        return (spec,)
    texts = [spec] if isinstance(spec, str) else list(spec)
    out: list[PrecisionProfile] = []
    for text in texts:
        if isinstance(text, PrecisionProfile):
            out.append(text)
            continue
        t = str(text).strip()
        if not t:
            raise SpecError(f"{where}: empty; give a profile ({', '.join(PRECISION_BASES)}, "
                            "both) or parts such as fp8-weights+fp8-kv")
        if "=" in t:              # PART=PREC fields: one profile
            out.append(_one_profile(re.split(r"[,+]", t), where, t))
            continue
        for prof in t.split(","):
            if prof.strip().lower() == "both":
                out += [PrecisionProfile("native"), PrecisionProfile("low")]
            else:
                out.append(_one_profile(prof.split("+"), where, t))
    labels = [p.label() for p in out]
    dup = next((x for x in labels if labels.count(x) > 1), None)
    if dup is not None:
        raise SpecError(f"{where}: profile {dup!r} is listed twice; give each once")
    return tuple(out)
