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
and :func:`.interp.run` evaluates it block by block of a few hundred points (the registers
stay in the CPU caches) on every core. This module records; :mod:`.program` compiles (with the
rewrites of :mod:`.rewrite`).

Where the numpy code branches on the data (``clamped.any()``: are some points beyond the
measured table?), a traced value answers "yes" and the code takes its per-point form
(``np.where``), which gives each point what the numpy branch gives it. Whatever the tracer
cannot express raises :class:`NotTraceable`, and the caller evaluates with numpy instead.
"""

from __future__ import annotations


import numpy as np

from ..xp import register

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
        """A traced input; ``data`` (its values at the points) answers
        :func:`inference_factory.engine.xp.concrete`; ``bounds``: (lo, hi) its values never
        leave (validated), from which the compiler knows which sums have no negative term
        (:func:`.rewrite._regroup_sums`)."""
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


@register          # engine/xp.py: the physics asks this type its three questions
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

    # -- the engine's array seam (engine/xp.py) ------------------------------------------
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


def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None):
    """numpy.full_like of a traced value: ``fill_value`` at every point, recorded as
    ``fill_value + 0 a`` (the same wherever ``a`` is finite, as the validated axes are)."""
    if dtype is not None or order != "K" or not subok or shape is not None:
        raise NotTraceable("numpy.full_like with dtype, order, subok or shape")
    return fill_value + 0.0 * a


def _any(a, *args, **kw):
    return True if isinstance(a, Traced) else bool(np.any(np.asarray(a)))


_FUNCTIONS = {np.where: _where, np.clip: _clip, np.interp: _interp,
              np.searchsorted: _searchsorted, np.ndim: _ndim, np.shape: _shape,
              np.broadcast_to: _broadcast_to, np.full_like: _full_like, np.any: _any}

