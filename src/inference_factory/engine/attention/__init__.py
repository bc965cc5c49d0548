"""Attention kinds behind one interface (:class:`~.base.AttentionKind`), one module each.

The registry :data:`KINDS` maps the name a model file gives (``attention.kind``, or a
``[[layers]]`` group's ``attention``) to the kind. The engine reaches every kind through
:func:`kind` and :func:`attention_ops`; nothing outside this folder branches on a kind.

To add a kind: write its module (a subclass of :class:`AttentionKind`), add one line to
:data:`KINDS` (or call :func:`register` from your own code), write its model files and,
where measured, its tables. ``tests/engine/test_attention_kinds.py`` does exactly that with
a toy kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import SpecError
from . import gqa, mla
from .base import AttentionKind, Memory, Pass

if TYPE_CHECKING:
    from ...specs import ModelSpec

__all__ = ["AttentionKind", "Memory", "Pass", "KINDS", "kind", "register", "attention_ops",
           "checked"]

#: name in model files -> kind (MHA is GQA with n_kv = n_q)
KINDS: dict[str, AttentionKind] = {
    "gqa": gqa.KIND,
    "mha": gqa.KIND,
    "mla": mla.KIND,
}


def register(k: AttentionKind, *names: str) -> None:
    """Make ``k`` the kind of ``names`` (default: ``k.name``) in model files."""
    if not isinstance(k, AttentionKind):
        raise TypeError(f"{k!r} is not an AttentionKind")
    for name in names or (k.name,):
        KINDS[name] = k


def kind(name: str, m: ModelSpec | None = None) -> AttentionKind:
    """The kind registered as ``name``; SpecError naming the model file otherwise."""
    try:
        return KINDS[name]
    except KeyError:
        where = f"{m.path}: " if m is not None and m.path else ""
        field = ("attention.kind" if m is None or name == m.attention_kind
                 else "layers.attention")
        raise SpecError(f"{where}{field} = {name!r} is not one of {sorted(KINDS)} (the kinds "
                        "of engine/attention)") from None


def checked(m: ModelSpec) -> ModelSpec:
    """``m`` after each of its attention kinds has checked its keys."""
    kinds = [kind(name, m) for name in dict.fromkeys(
        [m.attention_kind] + [grp.attention for grp in m.layer_mix])]
    known = {key for k in kinds for key in k.param_keys}
    for key in m.attention_param_keys:
        if key not in known:
            raise SpecError(f"{m.path}: attention.params.{key} is not a parameter of "
                            f"kind(s) {[k.name for k in kinds]}; allowed "
                            f"{sorted(known) or 'none'}")
    for k in kinds:
        k.check(m)
    return m


def attention_ops(g, groups, p: Pass) -> list:
    """Operations of one pass over the attention blocks of ``groups`` ((kind, window,
    layers) triples): each kind once, in order of first appearance, over its layers (full
    context first, then each window). Where two kinds name an operation alike, the later
    kind's carries its kind's name as a prefix."""
    by_kind: dict[str, dict[int, int]] = {}
    for name, window, count in groups:
        if count:
            w = by_kind.setdefault(name, {})
            w[window] = w.get(window, 0) + count
    ops, seen = [], set()
    for name, counts in by_kind.items():
        windows = sorted(counts.items(), key=lambda wc: (wc[0] > 0, wc[0]))
        for op in kind(name, g.m).ops(g, windows, p):
            if op.name in seen:
                op.name = f"{name}_{op.name}"
            seen.add(op.name)
            ops.append(op)
    return ops
