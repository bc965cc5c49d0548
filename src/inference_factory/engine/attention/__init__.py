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
from . import block_sparse, compressed, dsa, gqa, linear, mla
from .base import AttentionGroup, AttentionKind, Memory, Pass

if TYPE_CHECKING:
    from ...specs import ModelSpec

__all__ = ["AttentionGroup", "AttentionKind", "Memory", "Pass", "KINDS", "kind", "register",
           "attention_ops", "groups_of", "checked"]

#: name in model files -> kind (MHA is GQA with n_kv = n_q)
KINDS: dict[str, AttentionKind] = {
    "gqa": gqa.KIND,
    "mha": gqa.KIND,
    "mla": mla.KIND,
    "gdn": linear.GDN,
    "kda": linear.KDA,
    "compressed": compressed.KIND,
    "dsa": dsa.KIND,
    "block_sparse": block_sparse.KIND,
}


def register(k: AttentionKind, *names: str, replace: bool = False) -> None:
    """Make ``k`` the kind of ``names`` (default: ``k.name``) in model files; a name already
    registered to another kind is refused unless ``replace``."""
    if not isinstance(k, AttentionKind):
        raise TypeError(f"{k!r} is not an AttentionKind")
    for name in names or (k.name,):
        if not replace and KINDS.get(name, k) is not k:
            raise ValueError(f"attention kind {name!r} is registered already; pass "
                             "replace=True to replace it")
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


def groups_of(m: ModelSpec, mix=None) -> list[tuple[AttentionGroup, int]]:
    """(attention group, layers) of a layer mix (default ``m.layer_mix``), summed over its
    feed-forward kinds, in order of first appearance; each group's parameters are
    ``[attention.params]`` overlaid by its ``[[layers]]`` group's own."""
    base = dict(m.attention_params)
    out: dict[AttentionGroup, int] = {}
    for grp in (m.layer_mix if mix is None else mix):
        at = AttentionGroup(grp.attention, grp.window,
                            tuple(sorted({**base, **dict(grp.params)}.items())))
        out[at] = out.get(at, 0) + grp.count
    return list(out.items())


def checked(m: ModelSpec) -> ModelSpec:
    """``m`` after each of its attention kinds has checked its keys: every key of
    ``[attention.params]`` belongs to a kind of the model, every key of a ``[[layers]]``
    group's ``params`` to that group's kind, and each kind checks its groups."""
    names = list(dict.fromkeys([m.attention_kind] + [grp.attention for grp in m.layer_mix]))
    kinds = {name: kind(name, m) for name in names}
    known = {key for k in kinds.values() for key in k.param_keys}
    for key in m.attention_param_keys:
        if key not in known:
            raise SpecError(f"{m.path}: attention.params.{key} is not a parameter of "
                            f"kind(s) {names}; allowed {sorted(known) or 'none'}")
    for grp in m.layer_mix:
        own = kinds[grp.attention].param_keys
        for key, _ in grp.params:
            if key not in own:
                raise SpecError(f"{m.path}: layers.params.{key} is not a parameter of kind "
                                f"{grp.attention!r}; allowed {sorted(own) or 'none'}")
    for at, _ in groups_of(m):
        kinds[at.kind].check(m, at)
    return m


def attention_ops(g, groups, p: Pass) -> list:
    """Operations of one pass over the attention blocks of ``groups`` ((attention group,
    layers) pairs): each kind and parameter set once, in order of first appearance, over its
    layers (full context first, then each window). The model's primary kind
    (``attention.kind``) names its operations plainly (``qkv``, ``attention``); any other
    kind prefixes its name (``gdn_qkv``), and a kind's second parameter set its name and a
    number (``dsa2_attention``), so names never depend on the order of ``[[layers]]``."""
    by_kind: dict[tuple[str, tuple], dict[int, int]] = {}
    for at, count in groups:
        if count:
            w = by_kind.setdefault((at.kind, at.params), {})
            w[at.window] = w.get(at.window, 0) + count
    ops, sets = [], {}
    for (name, params), counts in by_kind.items():
        sets[name] = sets.get(name, 0) + 1
        prefix = ("" if name == g.m.attention_kind and sets[name] == 1 else
                  f"{name}_" if sets[name] == 1 else f"{name}{sets[name]}_")
        windows = sorted(counts.items(), key=lambda wc: (wc[0] > 0, wc[0]))
        for op in kind(name, g.m).ops(g, windows, p, AttentionGroup(name, 0, params)):
            op.name = prefix + op.name
            ops.append(op)
    return ops
