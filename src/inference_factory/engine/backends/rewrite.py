"""Rewrites of a recorded tape before it is compiled (:func:`.program.compile_outputs`):
the live nodes, interval bounds of every node, instructions that those bounds decide folded
away, and sums of non-negative terms regrouped. Each returns a new tape and outputs with the
same results (the same bits, or within a few ulps where stated)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .tape import _BOOL_OUT, Tape, Traced


def _live(tape: Tape, outputs: Mapping[str, Any]) -> set:
    live = set()
    stack = [v.node for v in outputs.values() if isinstance(v, Traced)]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(a for kind, a in tape.nodes[n][1] if kind == "v")
    return live


_ANY = (-np.inf, np.inf)


def _interval(op: str, b: list, tables: list) -> tuple[float, float]:
    """Bounds of an instruction's result from its operands' bounds ``b`` (NaN aside: a NaN
    stays NaN in any order of a sum). Computed with the instruction's own float operation,
    which is monotone, so they bound the rounded results too. A NaN bound (inf - inf) is
    taken as unbounded (called under ``np.errstate(all="ignore")``: :func:`_bounds`)."""
    if op in ("add", "sub", "mul", "div", "max", "min"):
        (la, ha), (lb, hb) = b
        if op == "add":
            r = (la + lb, ha + hb)
        elif op == "sub":
            r = (la - hb, ha - lb)
        elif op == "max":
            r = (max(la, lb), max(ha, hb))
        elif op == "min":
            r = (min(la, lb), min(ha, hb))
        elif op == "mul":
            # 0 x unbounded is 0: a bound is no value, the values are finite
            p = [0.0 if x == 0.0 or y == 0.0 else x * y for x in (la, ha) for y in (lb, hb)]
            r = (min(p), max(p))
        else:
            r = (la / hb, ha / lb) if la >= 0.0 and lb > 0.0 else _ANY
    elif op in ("exp", "log", "sqrt", "log1p", "trunc", "floor", "ceil"):
        f = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "log1p": np.log1p,
             "trunc": np.trunc, "floor": np.floor, "ceil": np.ceil}[op]
        lo, hi = float(f(b[0][0])), float(f(b[0][1]))     # monotone non-decreasing
        if op in ("exp", "log"):    # the compiled ones: within 4 ulp of numpy's (the
            # tolerance tests/engine/backends/test_interp.py holds them to), and
            # of the same sign (e^x >= 0; ln x >= 0 from x >= 1, <= 0 up to 1)
            lo = lo - 4.0 * np.spacing(abs(lo)) if lo != 0.0 else 0.0
            hi = hi + 4.0 * np.spacing(abs(hi)) if hi != 0.0 else 0.0
            lo = max(lo, 0.0) if op == "exp" else lo
        r = (lo, hi)
    elif op in _BOOL_OUT:
        r = (0.0, 1.0)
    elif op == "neg":
        r = (-b[0][1], -b[0][0])
    elif op == "where":
        r = (min(b[1][0], b[2][0]), max(b[1][1], b[2][1]))
    elif op in ("take", "interp"):
        t = tables[-1]
        r = (float(t.min()), float(t.max()))
    elif op == "search_right":
        r = (0.0, float(tables[0].size))
    elif op == "pow" and b[0][0] >= 0.0:
        r = (0.0, np.inf)
    else:
        r = _ANY
    return r if r[0] == r[0] and r[1] == r[1] else _ANY         # NaN: unbounded


def _bounds(tape: Tape, order: list[int]) -> dict[int, tuple]:
    """(lo, hi) of every node (NaN aside), by interval arithmetic in recording order from
    the bounds of the inputs (none: unbounded)."""
    bounds: dict[int, tuple] = {}
    with np.errstate(all="ignore"):
        for n in order:
            op, ops, tables = tape.nodes[n]
            if op == "input":
                bounds[n] = tape.bounds.get(n, _ANY)
                continue
            b = [(a, a) if kind == "k" else bounds[a] for kind, a in ops]
            bounds[n] = _interval(op, b, [tape.tables[t] for t in tables])
    return bounds


def _rebuild(tape: Tape, outputs: Mapping[str, Any], live: set, rewrite):
    """A new tape of the live nodes (and every input), in recording order: ``rewrite(n, op,
    operands, tables, region, emit)`` gives each node's value, ``("v", node)`` or ``("k",
    value)``, from its operands' new values; ``emit(op, operands, tables, region)`` records
    an instruction on the new tape and returns its value. Returns the new tape and outputs."""
    out = Tape()
    out.tables, out._table_ids, out.inputs = tape.tables, tape._table_ids, tape.inputs
    val: dict[int, tuple] = {}

    def emit(op, operands, tables=(), region=None):
        out.nodes.append((op, tuple(operands), tuple(tables)))
        node = len(out.nodes) - 1
        if region is not None:
            out.region_of[node] = region
        return ("v", node)
    for n in sorted(live.union(tape.input_nodes)):
        op, ops, tables = tape.nodes[n]
        ops = tuple(val[a] if kind == "v" else (kind, a) for kind, a in ops)
        val[n] = rewrite(n, op, ops, tables, tape.region_of.get(n), emit)
        if op == "input":
            out.input_nodes.append(val[n][1])
    for k, v in tape.data.items():
        out.data[val[k][1]] = v
    out.bounds = {val[k][1]: v for k, v in tape.bounds.items()}
    out.region_mask = [val[m][1] if m in val and val[m][0] == "v" else -1
                       for m in tape.region_mask]
    outs = {}
    for name, v in outputs.items():
        if isinstance(v, Traced):
            kind, x = val[v.node]
            v = Traced(out, x) if kind == "v" else x
        outs[name] = v
    return out, outs


#: comparison -> (a OP k, k OP a) false for every a in [lo, hi]
_NEVER = {"gt": (lambda lo, hi, k: hi <= k, lambda lo, hi, k: k <= lo),
          "ge": (lambda lo, hi, k: hi < k, lambda lo, hi, k: k < lo),
          "lt": (lambda lo, hi, k: lo >= k, lambda lo, hi, k: k >= hi),
          "le": (lambda lo, hi, k: lo > k, lambda lo, hi, k: k > hi)}


def _fold_by_bounds(tape: Tape, outputs: Mapping[str, Any]):
    """Instructions that the bounds of their operands decide (:func:`_bounds`) removed:
    ``max(a, k)`` where a >= k is a and ``min(a, k)`` where a <= k is a (NaN stays NaN); a
    comparison with a constant that no value of the operand's range satisfies is 0 (as for
    NaN); ``or``/``and``/``where`` with a constant operand that decides them take their
    value. The same bits as the instructions they replace. Returns a new tape and outputs
    (the same objects where nothing folds)."""
    live = _live(tape, outputs)
    kept = {v.node for v in outputs.values() if isinstance(v, Traced)}
    bounds = _bounds(tape, sorted(live))
    new_bounds: dict[int, tuple] = {}
    boolean: set[int] = set()
    folded = []

    def rewrite(n, op, ops, tables, region, emit):
        r = None
        ks = [j for j in range(len(ops)) if ops[j][0] == "k"]
        if len(ks) == 1 and len(ops) == 2:
            k, other = ops[ks[0]][1], ops[1 - ks[0]]
            lo, hi = new_bounds[other[1]]
            if op in ("max", "min") and ((lo >= k) if op == "max" else (hi <= k)):
                r = other
            elif op in _NEVER and _NEVER[op][1 - ks[0]](lo, hi, k):
                r = ("k", 0.0)
            elif op == "or":
                r = ("k", 1.0) if k != 0.0 else (other if other[1] in boolean else None)
            elif op == "and":
                r = ("k", 0.0) if k == 0.0 else (other if other[1] in boolean else None)
        elif op in ("or", "and") and len(ks) == 2:
            a, b = ops[0][1] != 0.0, ops[1][1] != 0.0
            r = ("k", float((a or b) if op == "or" else (a and b)))
        elif op == "where" and ops[0][0] == "k":
            r = ops[1] if ops[0][1] != 0.0 else ops[2]
        if r is not None and not (n in kept and r[0] == "k"):
            folded.append(n)
            return r
        v = emit(op, ops, tables, region)
        new_bounds[v[1]] = bounds.get(n, _ANY)
        if op in _BOOL_OUT:
            boolean.add(v[1])
        return v
    new = _rebuild(tape, outputs, live, rewrite)
    return new if folded else (tape, outputs)


def _regroup_sums(tape: Tape, outputs: Mapping[str, Any]):
    """Sums of non-negative terms regrouped: ``x*a + ... + x*b`` is ``x*(a+b)``, constant
    terms are added once, and a sum times a constant, ``(x*a + c)*k``, is ``x*(a k) + c k``
    (the FLOPs and bytes of a pass are sums over its ops of a few per-point quantities times
    constants, divided by a peak). Only for a sum whose intermediate results are
    read by the sum alone and whose terms are all >= 0 (:func:`_bounds`): any order of such
    a sum is within n ulps of every other (no cancellation). Returns a new tape and outputs
    (the same objects where nothing regroups)."""
    live = _live(tape, outputs)
    order = sorted(live)
    kept = {v.node for v in outputs.values() if isinstance(v, Traced)}
    uses: dict[int, int] = {}
    user: dict[int, int] = {}
    for n in order:
        for kind, a in tape.nodes[n][1]:
            if kind == "v":
                uses[a] = uses.get(a, 0) + 1
                user[a] = n
    pos = {n for n, (lo, _) in _bounds(tape, order).items() if lo >= 0.0}
    region = tape.region_of.get

    def inner(n):       # an add absorbed into the sum that reads it
        return (tape.nodes[n][0] == "add" and uses.get(n) == 1 and n not in kept
                and tape.nodes[user[n]][0] == "add" and region(user[n]) == region(n))
    plans: dict[int, tuple] = {}
    for root in order:
        op, ops, _ = tape.nodes[root]
        if op == "add" and not inner(root):
            top, scale = root, 1.0
        elif (op == "mul" and ops[0][0] == "v" and ops[1][0] == "k" and ops[1][1] >= 0.0
              and tape.nodes[ops[0][1]][0] == "add" and uses.get(ops[0][1]) == 1
              and ops[0][1] not in kept and region(ops[0][1]) == region(root)):
            top, scale = ops[0][1], ops[1][1]       # (sum) * k: k into the terms
        else:
            continue
        terms, const, stack, n_adds = [], [], [top], 0
        while stack:
            n = stack.pop()
            n_adds += 1
            for kind, a in reversed(tape.nodes[n][1]):
                if kind == "k":
                    const.append(a)
                elif inner(a):
                    stack.append(a)
                else:
                    terms.append(a)
        if not all(a in pos for a in terms) or any(k < 0.0 for k in const):
            continue
        groups: dict[int, list] = {}
        for a in terms:
            op, ops, _ = tape.nodes[a]
            if op == "mul" and ops[0][0] == "v" and ops[1][0] == "k" and ops[0][1] in pos:
                groups.setdefault(ops[0][1], []).append((ops[1][1], a))
            else:
                groups.setdefault(a, []).append((1.0, a))
        # every term of a scaled sum takes a multiply of its own
        redone = [g for g in groups.values() if len(g) > 1 or top != root]
        freed = n_adds + (top != root) + sum(1 for g in redone for _, a in g
                                             if tape.nodes[a][0] == "mul" and uses.get(a) == 1)
        new = len(groups) + (1 if const else 0) - 1 + sum(
            1 for g in redone if sum(k for k, _ in g) * scale != 1.0)
        if new < freed and (redone or len(const) > 1):
            plans[root] = (groups, const, scale)
    if not plans:
        return tape, outputs

    def rewrite(n, op, ops, tables, region, emit):
        if n not in plans:
            return emit(op, ops, tables, region)
        groups, const, scale = plans[n]
        acc = None
        for x, g in groups.items():
            if len(g) == 1 and scale == 1.0:
                term = val[g[0][1]]
            else:
                coef = sum(k for k, _ in g) * scale
                term = val[x] if coef == 1.0 else emit("mul", (val[x], ("k", coef)), (), region)
            acc = term if acc is None else emit("add", (acc, term), (), region)
        if const and sum(const) * scale != 0.0:
            acc = emit("add", (acc, ("k", sum(const) * scale)), (), region)
        return acc
    val: dict[int, tuple] = {}

    def recording(n, *args):
        val[n] = rewrite(n, *args)
        return val[n]
    return _rebuild(tape, outputs, live, recording)

