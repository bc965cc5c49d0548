"""A block's arithmetic recorded once and replayed by one compiled pass over the points.

The engine's formulas are written once, as numpy expressions over the grid (the kernels, the
op graph, the cost rules, the schedule). For a list of non-separable points (every axis
differs at every point: Monte Carlo, Latin hypercubes) running them as numpy passes costs one
full-length temporary per operation, about a thousand passes per point. Instead,
:func:`trace` runs the *same* code once on :class:`Traced` stand-ins for the per-point axes:
every numpy operation that touches a per-point value is recorded on a :class:`Tape` (an SSA
list of elementwise instructions); everything else (the model's shapes, the measured tables,
the device's peaks) is computed as usual and enters the tape as constants. The tape is then
pruned to what the outputs need, common subexpressions are merged, registers are assigned,
and :func:`.tape_exec.run` evaluates it block by block of a few hundred points (the registers
stay in the CPU caches) on every core.

Where the numpy code branches on the data (``clamped.any()``: are some points beyond the
measured table?), a traced value answers "yes" and the code takes its per-point form
(``np.where``), which gives each point what the numpy branch gives it. Whatever the tracer
cannot express raises :class:`NotTraceable`, and the caller evaluates with numpy instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

# ---- instruction set: elementwise on float64 (booleans are 0.0 / 1.0) -------------------------
OPS = ("add", "sub", "mul", "div", "max", "min", "pow", "gt", "ge", "lt", "le", "eq", "ne",
       "and", "or", "not", "neg", "log", "exp", "log1p", "sqrt", "ceil", "floor", "trunc",
       "abs", "where", "interp", "search_right", "take", "skip",
       # with an immediate constant k: a OP k, k OP a, where(c, k, b), where(c, a, k)
       "add_k", "mul_k", "sub_k", "ksub", "div_k", "kdiv", "max_k", "min_k", "gt_k", "ge_k",
       "lt_k", "le_k", "where_kb", "where_kc",
       # fused: a * k + b, a * b + c (two roundings, as the two instructions they replace)
       "muladd_k", "muladd")
OP = {name: i for i, name in enumerate(OPS)}

_UFUNCS = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div",
           np.maximum: "max", np.minimum: "min", np.power: "pow", np.greater: "gt",
           np.greater_equal: "ge", np.less: "lt", np.less_equal: "le", np.equal: "eq",
           np.not_equal: "ne", np.logical_and: "and", np.logical_or: "or",
           np.bitwise_and: "and", np.bitwise_or: "or", np.logical_not: "not",
           np.invert: "not", np.negative: "neg", np.log: "log", np.exp: "exp",
           np.log1p: "log1p", np.sqrt: "sqrt", np.ceil: "ceil", np.floor: "floor",
           np.trunc: "trunc", np.absolute: "abs"}
_BOOL_OUT = {"gt", "ge", "lt", "le", "eq", "ne", "and", "or", "not"}


class NotTraceable(Exception):
    """The block uses an operation the tape cannot record (evaluate it with numpy)."""


def _const(x) -> float:
    """A concrete operand as one float (a per-point array cannot enter the tape as data)."""
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        return float(x)
    a = np.asarray(x)
    if a.size != 1:
        raise NotTraceable(f"a concrete array of shape {a.shape} meets a traced value")
    return float(a.reshape(-1)[0])


class Tape:
    """The recorded instructions: ``nodes[i] = (op, operands, tables)``; an operand is
    ``("v", node)`` or ``("k", float)``; ``tables`` index :attr:`tables`."""

    def __init__(self):
        self.nodes: list[tuple] = []
        self.tables: list[np.ndarray] = []
        self._table_ids: dict[tuple, int] = {}
        self._cse: dict[tuple, int] = {}
        self.inputs: list[str] = []
        self.input_nodes: list[int] = []         # the node of each input, in order
        self.data: dict[int, np.ndarray] = {}
        self.bounds: dict[int, tuple] = {}       # input -> (lo, hi) (see :meth:`input`)
        self.region_of: dict[int, int] = {}      # node -> guarded region (see :meth:`guarded`)
        self.region_mask: list[int] = []         # region -> its mask node
        self._region: int | None = None

    def input(self, name: str, data: np.ndarray | None = None,
              bounds: tuple[float, float] | None = None) -> "Traced":
        """A traced input; ``data`` (its values at the points) answers :func:`inference_factory.engine.xp.concrete`;
        ``bounds``: (lo, hi) its values never leave (validated), from which the compiler
        knows which sums have no negative term (:func:`_regroup_sums`)."""
        self.nodes.append(("input", (), ()))
        self.inputs.append(name)
        self.input_nodes.append(len(self.nodes) - 1)
        if data is not None:
            self.data[len(self.nodes) - 1] = data
        if bounds is not None:
            self.bounds[len(self.nodes) - 1] = (float(bounds[0]), float(bounds[1]))
        return Traced(self, len(self.nodes) - 1)

    def table(self, values) -> int:
        a = np.ascontiguousarray(values, dtype=float).reshape(-1)
        key = (a.size, a.tobytes())
        if key not in self._table_ids:
            self._table_ids[key] = len(self.tables)
            self.tables.append(a)
        return self._table_ids[key]

    def emit(self, op: str, args, tables=()) -> "Traced":
        operands = tuple(("v", a.node) if isinstance(a, Traced) else ("k", _const(a))
                         for a in args)
        op, operands = self._fold_scale(op, operands)
        simple = _simplify(op, operands)
        if simple is not None:
            return Traced(self, simple)
        key = (op, operands, tuple(tables), None)     # values outside regions always exist
        node = self._cse.get(key)
        if node is None and self._region is not None:
            key = key[:3] + (self._region,)
            node = self._cse.get(key)
        if node is None:
            self.nodes.append((op, operands, tuple(tables)))
            node = self._cse[key] = len(self.nodes) - 1
            if self._region is not None:
                self.region_of[node] = self._region
        return Traced(self, node)

    def _fold_scale(self, op: str, operands: tuple):
        """x / k is x * (1/k), and (x * k1) * k2 is x * (k1 k2): one multiply for a chain of
        constant factors (unit conversions, counts, micro-batches). Each changes the result
        by at most an ulp or two; only where the folded constant is a normal number."""
        def normal(k):
            return 2.2250738585072014e-308 < abs(k) < 1.7e308
        if op == "div" and operands[1][0] == "k" and operands[0][0] == "v" \
                and normal(operands[1][1]) and normal(1.0 / operands[1][1]):
            op, operands = "mul", (operands[0], ("k", 1.0 / operands[1][1]))
        if op != "mul":
            return op, operands
        if operands[0][0] == "k":
            operands = operands[::-1]
        if operands[0][0] != "v" or operands[1][0] != "k":
            return op, operands
        x, k = operands[0][1], operands[1][1]
        src_op, src_operands, _ = self.nodes[x]
        if (src_op == "mul" and src_operands[1][0] == "k" and src_operands[0][0] == "v"
                and self.region_of.get(x) in (None, self._region)
                and normal(src_operands[1][1] * k)):
            return "mul", (src_operands[0], ("k", src_operands[1][1] * k))
        return op, operands

    def guarded(self, mask: "Traced"):
        """Context: the values recorded inside matter only where ``mask`` is true (they feed
        ``np.where(mask, value, ...)``): the compiled pass skips them for a block of points
        where it is false everywhere (beyond-the-table corrections, rare inside a grid)."""
        return _Guard(self, mask)


class _Guard:
    def __init__(self, tape: Tape, mask):
        self.tape, self.mask, self.outer = tape, mask, None

    def __enter__(self):
        t = self.tape
        self.outer = t._region
        if t._region is None and isinstance(self.mask, Traced):   # no nesting
            t.region_mask.append(self.mask.node)
            t._region = len(t.region_mask) - 1
        return self

    def __exit__(self, *exc):
        self.tape._region = self.outer
        return False


def _simplify(op, operands):
    """x*1, 1*x, x/1, x+0, 0+x, x-0 are x (exact in IEEE arithmetic)."""
    if len(operands) != 2:
        return None
    (ka, a), (kb, b) = operands
    if kb == "k" and ka == "v" and ((op in ("mul", "div") and b == 1.0)
                                    or (op in ("add", "sub") and b == 0.0)):
        return a
    if ka == "k" and kb == "v" and ((op == "mul" and a == 1.0) or (op == "add" and a == 0.0)):
        return b
    return None


def is_traced(*xs) -> bool:
    return any(isinstance(x, Traced) for x in xs)


class Traced:
    """A per-point value being traced: numpy's elementwise functions and operators record
    themselves on the tape. Shaped like a one-element array (so it broadcasts with scalars),
    with ``ndim`` 1 (it varies per point)."""

    __slots__ = ("tape", "node")
    __array_priority__ = 1000.0
    shape = (1,)
    ndim = 1
    size = 1
    dtype = np.dtype(float)

    def __init__(self, tape: Tape, node: int):
        self.tape, self.node = tape, node

    # -- the engine's array seam (engine/xp.py) -------------------------------------------
    __xp_traced__ = True

    def xp_concrete(self):
        """The values at the points: an input's data (the tape holds it)."""
        if self.node not in self.tape.data:
            raise NotTraceable("the values of a traced intermediate are not known while tracing")
        return self.tape.data[self.node]

    def xp_take(self, values):
        """``values.reshape(-1)[self]`` for a concrete table."""
        return self.tape.emit("take", (self,), (self.tape.table(np.asarray(values)),))

    def xp_guarded(self):
        """The tape's guarded region of this mask."""
        return self.tape.guarded(self)

    # -- numpy protocols ------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        if method != "__call__" or kw.get("out") is not None or ufunc not in _UFUNCS:
            raise NotTraceable(f"numpy.{ufunc.__name__}.{method}")
        return self.tape.emit(_UFUNCS[ufunc], inputs)

    def __array_function__(self, func, types, args, kwargs):
        impl = _FUNCTIONS.get(func)
        if impl is None:
            raise NotTraceable(f"numpy.{func.__name__}")
        return impl(*args, **kwargs)

    def __array__(self, *a, **k):
        raise NotTraceable("a traced value converted to an array")

    def __bool__(self):
        raise NotTraceable("a Python branch on a traced value")

    def __float__(self):
        raise NotTraceable("a traced value converted to a float")

    def __getitem__(self, key):
        raise NotTraceable("indexing a traced value")

    def __iter__(self):
        raise NotTraceable("iterating over a traced value")

    __hash__ = object.__hash__

    # -- what the engine asks of an array -------------------------------------------------
    def any(self):
        """Conservative: some point may be True (the caller takes its per-point form)."""
        return True

    def astype(self, dtype, *a, **k):
        kind = np.dtype(dtype).kind
        if kind in "iu":
            return self.tape.emit("trunc", (self,))
        if kind in "fb":
            return self
        raise NotTraceable(f"astype({dtype})")

    def item(self):
        raise NotTraceable("item() of a traced value")

    # -- operators ------------------------------------------------------------------------
    def _bin(op, swap=False):
        def f(self, other):
            return self.tape.emit(op, (other, self) if swap else (self, other))
        return f

    __add__, __radd__ = _bin("add"), _bin("add", True)
    __sub__, __rsub__ = _bin("sub"), _bin("sub", True)
    __mul__, __rmul__ = _bin("mul"), _bin("mul", True)
    __truediv__, __rtruediv__ = _bin("div"), _bin("div", True)
    __pow__, __rpow__ = _bin("pow"), _bin("pow", True)
    __gt__, __ge__, __lt__, __le__ = _bin("gt"), _bin("ge"), _bin("lt"), _bin("le")
    __eq__, __ne__ = _bin("eq"), _bin("ne")
    __and__, __rand__ = _bin("and"), _bin("and", True)
    __or__, __ror__ = _bin("or"), _bin("or", True)
    del _bin

    def __neg__(self):
        return self.tape.emit("neg", (self,))

    def __invert__(self):
        return self.tape.emit("not", (self,))

    def __abs__(self):
        return self.tape.emit("abs", (self,))

    def __pos__(self):
        return self


def _tape_of(*xs) -> Tape:
    return next(x.tape for x in xs if isinstance(x, Traced))


def _where(cond, a=None, b=None):
    if a is None or b is None:
        raise NotTraceable("numpy.where with one argument")
    if not is_traced(cond):
        return a if _const(cond) else b
    return _tape_of(cond, a, b).emit("where", (cond, a, b))


def _clip(x, lo, hi, **kw):
    """numpy.clip = minimum(maximum(x, lo), hi)."""
    if kw:
        raise NotTraceable("numpy.clip with keywords")
    return np.minimum(np.maximum(x, lo), hi)


def _interp(x, xp, fp, left=None, right=None, period=None):
    if left is not None or right is not None or period is not None or is_traced(xp, fp):
        raise NotTraceable("numpy.interp with traced nodes or edge values")
    t = _tape_of(x)
    xp, fp = np.asarray(xp, dtype=float), np.asarray(fp, dtype=float)
    return t.emit("interp", (x,), (t.table(xp), t.table(fp)))


def _searchsorted(a, v, side="left", sorter=None):
    if side != "right" or sorter is not None or is_traced(a):
        raise NotTraceable("numpy.searchsorted other than side='right' on a concrete axis")
    t = _tape_of(v)
    return t.emit("search_right", (v,), (t.table(a),))


def _ndim(a):
    return 1 if isinstance(a, Traced) else np.asarray(a).ndim


def _shape(a):
    return Traced.shape if isinstance(a, Traced) else np.asarray(a).shape


def _broadcast_to(a, shape, subok=False):
    if isinstance(a, Traced):
        return a
    raise NotTraceable("numpy.broadcast_to of a concrete array with a traced shape")


def _any(a, *args, **kw):
    return True if isinstance(a, Traced) else bool(np.any(np.asarray(a)))


_FUNCTIONS = {np.where: _where, np.clip: _clip, np.interp: _interp,
              np.searchsorted: _searchsorted, np.ndim: _ndim, np.shape: _shape,
              np.broadcast_to: _broadcast_to, np.any: _any}


# ---- from a traced block to a program ----------------------------------------------------------

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
            # tolerance tests/test_tape.py and test_tape_llvm.py hold them to), and
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
