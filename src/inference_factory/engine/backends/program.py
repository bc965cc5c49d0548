"""From a recorded tape (:mod:`.tape`) to a :class:`Program`: the live instructions, rewritten
(:mod:`.rewrite`), with immediates, fused multiply-adds, skips over guarded regions and
registers freed after their last use; what :func:`.interp.run` replays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .rewrite import _fold_by_bounds, _live, _regroup_sums
from .tape import OP, Tape, Traced


@dataclass(frozen=True)
class Program:
    """A pruned, register-allocated tape.

    ``code[i] = (op, out, a, b, c, table, table2, table_len)``: operands are registers, or
    ``immediates[i]`` for the ``*_k``/``k*`` ops (another constant has a register of its own,
    filled once per thread: ``const_regs``/``const_values``); tables are offsets into
    ``table_data``. ``input_regs[j]`` receives input ``inputs[j]``;
    ``outputs`` maps each output name to ``("reg", register)``, or to ``("const", value)``
    where it does not depend on the traced inputs."""

    code: np.ndarray
    immediates: np.ndarray
    table_data: np.ndarray
    const_regs: np.ndarray
    const_values: np.ndarray
    inputs: tuple[str, ...]
    input_regs: np.ndarray
    outputs: dict[str, tuple[str, Any]]
    n_regs: int
    layout: tuple            # (names, distinct registers, index of each, first of each)

    @property
    def n_instructions(self) -> int:
        return int(self.code.shape[0])


def _insert_skips(tape: Tape, code: list, code_node: list, reg: dict, kept: set) -> list:
    """Before each guarded region, ``skip``: jump over its instructions for a block where its
    mask is false at every point. A region qualifies if its values are read, outside it,
    only as the selected branch of ``np.where(mask, value, ...)`` and are no outputs."""
    spans: dict[int, list[int]] = {}
    for pos, n in enumerate(code_node):
        r = tape.region_of.get(n)
        if r is not None:
            spans.setdefault(r, []).append(pos)
    ok = {r for r, pos in spans.items() if pos[-1] - pos[0] + 1 == len(pos)}
    for n in code_node:             # readers outside the region
        op, operands, _ = tape.nodes[n]
        for j, (kind, a) in enumerate(operands):
            r = tape.region_of.get(a) if kind == "v" else None
            if r is None or tape.region_of.get(n) == r:
                continue
            if not (op == "where" and j == 1 and operands[0] == ("v", tape.region_mask[r])):
                ok.discard(r)
    ok -= {tape.region_of.get(n) for n in kept}
    starts = {spans[r][0]: r for r in ok}
    out = []
    for pos, ins in enumerate(code):
        r = starts.get(pos)
        if r is not None:
            m = reg[tape.region_mask[r]]
            out.append((OP["skip"], m, m, m, m, len(spans[r]), 0, 0, 0.0))
        out.append(ins)
    return out


#: (op, position of the constant) -> (immediate op, swapped): the constant leaves the register
#: file (less traffic per instruction). k > a is a < k (also for NaN: both false).
_IMMEDIATE = {("add", 1): "add_k", ("add", 0): "add_k", ("mul", 1): "mul_k",
              ("mul", 0): "mul_k", ("sub", 1): "sub_k", ("sub", 0): "ksub", ("div", 1): "div_k",
              ("div", 0): "kdiv", ("max", 1): "max_k", ("max", 0): "max_k",
              ("min", 1): "min_k", ("min", 0): "min_k", ("gt", 1): "gt_k", ("gt", 0): "lt_k",
              ("ge", 1): "ge_k", ("ge", 0): "le_k", ("lt", 1): "lt_k", ("lt", 0): "gt_k",
              ("le", 1): "le_k", ("le", 0): "ge_k", ("where", 1): "where_kb",
              ("where", 2): "where_kc"}


def _immediate(op: str, operands: tuple):
    """The instruction with its one constant operand as an immediate, if it has one; a < b
    and a <= b between registers as b > a and b >= a (the same for NaN: both false), so the
    interpreter has one loop for each pair."""
    consts = [j for j, (kind, _) in enumerate(operands) if kind == "k"]
    if not consts and op in ("lt", "le"):
        return {"lt": "gt", "le": "ge"}[op], operands[::-1], 0.0
    if len(consts) != 1 or (op, consts[0]) not in _IMMEDIATE:
        return op, operands, 0.0
    j = consts[0]
    rest = tuple(x for i, x in enumerate(operands) if i != j)
    k = operands[j][1]
    if (op, j) == ("div", 1) and 2.2250738585072014e-308 < abs(k) < 4.4e307:
        # x / k as x * (1/k): a multiply, not a divide (at most an ulp apart)
        return "mul_k", rest, 1.0 / k
    return _IMMEDIATE[(op, j)], rest, k


def _fuse_multiply_adds(tape: Tape, order: list[int], kept: set):
    """``x * y + z`` where the product is read by that sum alone: one instruction
    (``muladd``/``muladd_k``; the sums of count x time that make a step)."""
    uses: dict[int, int] = {}
    for n in order:
        for kind, a in tape.nodes[n][1]:
            if kind == "v":
                uses[a] = uses.get(a, 0) + 1
    fused, dead = {}, set()
    for n in order:
        op, ops, _ = tape.nodes[n]
        if op != "add" or len(ops) != 2:
            continue
        for j in (0, 1):
            (kind, x), other = ops[j], ops[1 - j]
            if (kind != "v" or other[0] != "v" or x in kept or x in dead or uses.get(x) != 1
                    or tape.region_of.get(x) != tape.region_of.get(n)):
                continue
            xop, xops, _ = tape.nodes[x]
            if xop != "mul" or xops[0][0] != "v":
                continue
            if xops[1][0] == "k":
                fused[n] = ("muladd_k", (xops[0], other), xops[1][1])
            else:
                fused[n] = ("muladd", (xops[0], xops[1], other), 0.0)
            dead.add(x)
            break
    return fused, dead


def compile_outputs(tape: Tape, outputs: Mapping[str, Any]) -> Program:
    """Keep the instructions the outputs need (in recording order, sums of non-negative
    terms regrouped: :func:`_regroup_sums`), and give each value a register that is freed
    after its last use; each distinct constant gets a register of its own."""
    tape, outputs = _regroup_sums(*_fold_by_bounds(tape, outputs))
    live = _live(tape, outputs)
    order = sorted(live)
    kept = {v.node for v in outputs.values() if isinstance(v, Traced)}
    fused, dead = _fuse_multiply_adds(tape, order, kept)
    order = [n for n in order if n not in dead]
    instr = {n: fused.get(n) or _immediate(*tape.nodes[n][:2]) for n in order}
    last_use: dict[int, int] = {}
    const_reg: dict[float, int] = {}
    for pos, n in enumerate(order):
        for kind, a in instr[n][1]:
            if kind == "v":
                last_use[a] = pos
            elif a not in const_reg:
                const_reg[a] = len(const_reg)
    offsets, at = [], 0
    for t in tape.tables:
        offsets.append(at)
        at += t.size
    reg: dict[int, int] = {}
    free: list[int] = []
    n_regs = len(const_reg)
    code = []
    input_nodes = [k for k, nd in enumerate(tape.nodes) if nd[0] == "input"]
    input_name = dict(zip(input_nodes, tape.inputs))
    inputs, input_regs = [], []
    code_node: list[int] = []
    for pos, n in enumerate(order):
        tables = tape.nodes[n][2]
        op, operands, k = instr[n]
        regs_in = [reg[a] if kind == "v" else const_reg[a] for kind, a in operands]
        # the result never takes a dying operand's register: an instruction writing over
        # its operand defeats the vectoriser's overlap check (the loop would run scalar)
        if free:
            r = free.pop()
        else:
            r, n_regs = n_regs, n_regs + 1
        reg[n] = r
        for a in {a for kind, a in operands if kind == "v"}:
            if last_use.get(a) == pos and a not in kept:
                free.append(reg[a])
        if op == "input":
            inputs.append(input_name[n])
            input_regs.append(r)
            continue
        regs_in += [regs_in[0] if regs_in else r] * (3 - len(regs_in))   # unused slots
        t1 = offsets[tables[0]] if tables else 0
        t2 = offsets[tables[1]] if len(tables) > 1 else 0
        tlen = tape.tables[tables[0]].size if tables else 0
        code.append((OP[op], r, *regs_in, t1, t2, tlen, k))
        code_node.append(n)
    code = _insert_skips(tape, code, code_node, reg, kept)
    out = {name: ("reg", reg[v.node]) if isinstance(v, Traced) else ("const", v)
           for name, v in outputs.items()}
    names = [k for k, (kind, _) in out.items() if kind == "reg"]
    uniq, where = np.unique(np.array([out[k][1] for k in names], dtype=np.int64),
                            return_inverse=True)
    where = where.tolist()
    layout = (names, uniq, where, [where.index(u) for u in range(uniq.size)])
    return Program(code=np.array([c[:8] for c in code], dtype=np.int64).reshape(-1, 8),
                   immediates=np.array([c[8] for c in code], dtype=float),
                   table_data=(np.concatenate(tape.tables) if tape.tables else np.zeros(1)),
                   const_regs=np.array(list(const_reg.values()), dtype=np.int64),
                   const_values=np.array(list(const_reg.keys()), dtype=float),
                   inputs=tuple(inputs), input_regs=np.array(input_regs, dtype=np.int64),
                   outputs=out, n_regs=max(n_regs, 1), layout=layout)
