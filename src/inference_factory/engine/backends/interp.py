"""The compiled interpreter of a :class:`.tape.Program`: one pass over the points, block by
block, every instruction applied to a whole block of registers (numba, on every core).

Each instruction is the elementwise numpy operation it was recorded from, with numpy's
semantics (NaN propagation of ``maximum``/``minimum``, IEEE division, ``interp`` clamped at
the end nodes). Compiled code is cached on disk (``cache=True``).
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
from llvmlite import ir
from numba import carray, get_num_threads, njit, prange, types
from numba.extending import intrinsic

from .tape import OP

ADD, SUB, MUL, DIV, MAX, MIN, POW = (OP[k] for k in ("add", "sub", "mul", "div", "max", "min",
                                                   "pow"))
GT, GE, EQ, NE = (OP[k] for k in ("gt", "ge", "eq", "ne"))   # lt, le compile to gt, ge
AND, OR, NOT, NEG = OP["and"], OP["or"], OP["not"], OP["neg"]
LOG, EXP, LOG1P, SQRT = OP["log"], OP["exp"], OP["log1p"], OP["sqrt"]
CEIL, FLOOR, TRUNC, ABS = OP["ceil"], OP["floor"], OP["trunc"], OP["abs"]
WHERE, INTERP, SEARCH, TAKE = OP["where"], OP["interp"], OP["search_right"], OP["take"]
SKIP = OP["skip"]
ADD_K, MUL_K, SUB_K, KSUB, DIV_K, KDIV = (OP[k] for k in ("add_k", "mul_k", "sub_k", "ksub",
                                                       "div_k", "kdiv"))
MAX_K, MIN_K, GT_K, GE_K, LT_K, LE_K = (OP[k] for k in ("max_k", "min_k", "gt_k", "ge_k",
                                                       "lt_k", "le_k"))
WHERE_KB, WHERE_KC = OP["where_kb"], OP["where_kc"]
MULADD_K, MULADD = OP["muladd_k"], OP["muladd"]

#: Points per block: a block's live registers stay in the core's L2 cache, and the cost of
#: dispatching an instruction is spread over many points.
BLOCK_POINTS = 512

_JIT = dict(cache=True, error_model="numpy", nogil=True)

# exp and log as vectorisable polynomials (numba has no vector libm here; a libm call per point
# costs 4-5x more). Cody-Waite reduction, Taylor/atanh series to below half an ulp of truncation
# error; points outside the polynomial's range (over/underflow, zero, negatives, NaN,
# subnormals) take numpy's scalar function. Within 3 ulp of numpy's (tests.test_tape).
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01       # ln 2 split: k * _LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.90821492927058770002e-10
_SHIFT = 6755399441055744.0                 # 1.5 x 2^52: adding it rounds to an integer
_SHIFT_BITS = 0x4338000000000000             # its bit pattern: the integer sits in the low bits
_SQRT2 = 1.4142135623730951
_EXP_LO, _EXP_HI = -708.0, 709.0            # e^x is a normal double in between
_EXP_ZERO = -745.2                          # e^x rounds to 0 below
_TINY = 2.2250738585072014e-308             # smallest normal double
#: e^r = sum r^k / k!, k = 13 .. 0, highest power first (Horner)
EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(13, -1, -1))
#: atanh(s) / s = sum z^k / (2k + 1), z = s^2, k = 10 .. 0, highest power first
ATANH_SERIES = tuple(1.0 / (2 * k + 1) for k in range(10, -1, -1))


@intrinsic
def _address(typingctx, arr, offset):
    """Pointer to ``arr[offset]`` (a 1-D float64 array)."""
    sig = types.CPointer(types.float64)(arr, offset)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.gep(ary.data, [args[1]])
    return sig, codegen


@intrinsic
def _pointer(typingctx, address):
    """The float64 pointer at an integer address (an array's ``ctypes.data``)."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.DoubleType().as_pointer())
    return types.CPointer(types.float64)(types.int64), codegen


@njit(inline="always", **_JIT)
def _reg(R, offset, n):
    """Register ``R[offset:offset + n]`` as an array without a reference count: slicing
    would cost atomic reference-count updates for each operand of each instruction."""
    return carray(_address(R, offset), n)


@intrinsic
def _bits(typingctx, x):
    """The bit pattern of a float64 as an int64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _float(typingctx, i):
    """The float64 with the bit pattern of an int64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@njit(inline="always", fastmath={"contract"}, **_JIT)
def _exp1(x):
    """e^x on (_EXP_LO, _EXP_HI): x = k ln2 + r, |r| <= ln2/2; e^r by its Taylor series to
    r^13 (truncation < 5e-18); 2^k written into the exponent bits. Outside: clamped (the
    caller takes numpy's value there)."""
    x = _EXP_HI if x > _EXP_HI else x
    x = _EXP_LO if x < _EXP_LO else x
    t = x * _LOG2E + _SHIFT
    k = t - _SHIFT
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = EXP_TAYLOR[0]
    for c in EXP_TAYLOR[1:]:
        p = p * r + c
    return p * _float((_bits(t) - _SHIFT_BITS + 1023) << 52)


@njit(inline="always", fastmath={"contract"}, **_JIT)
def _log1(x):
    """ln x for a normal positive x: x = 2^e m, m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s),
    s = (m-1)/(m+1), |s| < 0.172, by its series to s^21 (truncation < 1e-18)."""
    b = _bits(x)
    m = _float((b & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000)
    e = _float(0x4330000000000000 | ((b >> 52) & 0x7FF)) - 4503599627371519.0   # 2^52 + 1023
    big = m > _SQRT2
    m = m * 0.5 if big else m
    e = e + 1.0 if big else e
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    p = ATANH_SERIES[0]
    for c in ATANH_SERIES[1:]:
        p = p * z + c
    return e * _LN2_HI + (2.0 * s * p + e * _LN2_LO)


@njit(fastmath={"contract"}, **_JIT)
def _exp_block(a, o, keep, n):
    """o = exp(a), vectorised (:func:`_exp1`); numpy's scalar exp where the result is not a
    normal double. ``keep``: a copy of ``a`` for that fix-up (``o`` may be ``a``)."""
    bad = 0
    for i in range(n):
        x = a[i]
        keep[i] = x
        bad += 0 if (x > _EXP_LO and x < _EXP_HI) or x < _EXP_ZERO else 1
        y = _exp1(x)
        o[i] = 0.0 if x < _EXP_ZERO else y
    if bad:
        for i in range(n):
            x = keep[i]
            if not ((x > _EXP_LO and x < _EXP_HI) or x < _EXP_ZERO):
                o[i] = np.exp(x)


@njit(fastmath={"contract"}, **_JIT)
def _log_block(a, o, keep, n):
    """o = log(a), vectorised (:func:`_log1`); numpy's scalar log for zero, negative,
    subnormal, infinite and NaN arguments."""
    bad = 0
    for i in range(n):
        x = a[i]
        keep[i] = x
        bad += 0 if (x >= _TINY and x < np.inf) else 1
        o[i] = _log1(x)
    if bad:
        for i in range(n):
            x = keep[i]
            if not (x >= _TINY and x < np.inf):
                o[i] = np.log(x)


@njit(fastmath={"contract"}, **_JIT)
def _pow_block(a, b, o, keep, n):
    """o = a ** b as e^(b ln a) where a is a normal positive number and the result a normal
    double (relative error ~|b ln a| x 1e-16); numpy's power elsewhere (a negative base with
    an integer exponent, zero, overflow)."""
    bad = 0
    for i in range(n):
        x, y = a[i], b[i]
        keep[i] = x
        z = y * _log1(x)
        ok = x >= _TINY and x < np.inf and ((z > _EXP_LO and z < _EXP_HI) or z < _EXP_ZERO)
        bad += 0 if ok else 1
        w = _exp1(z)
        o[i] = 0.0 if z < _EXP_ZERO else w
    if bad:
        for i in range(n):
            x, y = keep[i], b[i]
            z = y * np.log(x) if x > 0 else 0.0
            if not (x >= _TINY and x < np.inf and ((z > _EXP_LO and z < _EXP_HI)
                                                   or z < _EXP_ZERO)):
                o[i] = x ** y


@njit(**_JIT)
def _count_le(tab, t0, tlen, a, o, n):
    """o = number of nodes tab[t0:t0+tlen] (ascending) <= a, per point
    (numpy.searchsorted side='right'): one vectorised pass per node (the tables have tens of
    nodes; a binary search per point does not vectorise)."""
    for i in range(n):
        o[i] = 0.0
    for k in range(tlen):
        node = tab[t0 + k]
        for i in range(n):
            o[i] += 1.0 if a[i] >= node else 0.0
    for i in range(n):                      # NaN sorts after every node
        x = a[i]
        o[i] = tlen if x != x else o[i]


@njit(**_JIT)
def _interp_block(tab, t0, t1, tlen, a, o, cnt, n):
    """o = numpy.interp(a, xp, fp), xp = tab[t0:t0+tlen], fp = tab[t1:t1+tlen]: held at the
    end values, ``slope * (x - xp[j]) + fp[j]`` inside (numpy's formula); branch-free.
    ``cnt``: scratch (``o`` may be ``a``'s register)."""
    last = tlen - 1
    if last == 0:
        for i in range(n):
            x = a[i]
            o[i] = x if x != x else tab[t1]
        return
    _count_le(tab, t0, tlen, a, cnt, n)
    lo_x, hi_x, lo_y, hi_y = tab[t0], tab[t0 + last], tab[t1], tab[t1 + last]
    for i in range(n):
        x = a[i]
        j = int(cnt[i]) - 1
        j = 0 if j < 0 else j
        j = last - 1 if j > last - 1 else j
        x0, x1, y0, y1 = tab[t0 + j], tab[t0 + j + 1], tab[t1 + j], tab[t1 + j + 1]
        y = (y1 - y0) / (x1 - x0) * (x - x0) + y0
        y = lo_y if x <= lo_x else y
        y = hi_y if x >= hi_x else y
        o[i] = x if x != x else y


@njit(**_JIT)
def _block(code, imm, tab, R, P, cnt, n):
    """Every instruction over the first ``n`` points of a block; register r of the block is
    ``R[r * P : r * P + n]`` (:func:`.tape.compile_outputs` never gives a result its
    operand's register); ``cnt`` holds what a multi-pass instruction keeps between passes."""
    j = -1
    while j + 1 < code.shape[0]:
        j += 1
        op = code[j, 0]
        o0 = code[j, 1] * P
        a0 = code[j, 2] * P
        b0 = code[j, 3] * P
        o = _reg(R, o0, n)       # distinct arrays: the vectoriser checks they do not overlap
        a = _reg(R, a0, n)
        b = _reg(R, b0, n)
        k = imm[j]
        if op == MUL_K:
            for i in range(n):
                o[i] = a[i] * k
        elif op == ADD_K:
            for i in range(n):
                o[i] = a[i] + k
        elif op == MULADD_K:
            for i in range(n):
                o[i] = a[i] * k + b[i]
        elif op == MULADD:
            c0 = code[j, 4] * P
            c = _reg(R, c0, n)
            for i in range(n):
                o[i] = a[i] * b[i] + c[i]
        elif op == MUL:
            for i in range(n):
                o[i] = a[i] * b[i]
        elif op == ADD:
            for i in range(n):
                o[i] = a[i] + b[i]
        elif op == MAX:
            for i in range(n):
                x, y = a[i], b[i]
                o[i] = x if (x > y or x != x) else y
        elif op == SUB:
            for i in range(n):
                o[i] = a[i] - b[i]
        elif op == DIV:
            for i in range(n):
                o[i] = a[i] / b[i]
        elif op == TAKE:
            t0, tlen = code[j, 5], code[j, 7]
            for i in range(n):
                k = int(a[i])
                k = 0 if k < 0 else k
                k = tlen - 1 if k >= tlen else k
                o[i] = tab[t0 + k]
        elif op == SUB_K:
            for i in range(n):
                o[i] = a[i] - k
        elif op == KSUB:
            for i in range(n):
                o[i] = k - a[i]
        elif op == DIV_K:
            for i in range(n):
                o[i] = a[i] / k
        elif op == KDIV:
            for i in range(n):
                o[i] = k / a[i]
        elif op == MAX_K:
            for i in range(n):
                x = a[i]
                o[i] = x if (x > k or x != x) else k
        elif op == MIN_K:
            for i in range(n):
                x = a[i]
                o[i] = x if (x < k or x != x) else k
        elif op == GT_K:
            for i in range(n):
                o[i] = 1.0 if a[i] > k else 0.0
        elif op == GE_K:
            for i in range(n):
                o[i] = 1.0 if a[i] >= k else 0.0
        elif op == LT_K:
            for i in range(n):
                o[i] = 1.0 if a[i] < k else 0.0
        elif op == LE_K:
            for i in range(n):
                o[i] = 1.0 if a[i] <= k else 0.0
        elif op == WHERE_KB:      # operands loaded first: a select, not a branch
            for i in range(n):
                x = b[i]
                o[i] = k if a[i] != 0.0 else x
        elif op == WHERE_KC:
            for i in range(n):
                x = b[i]
                o[i] = x if a[i] != 0.0 else k
        elif op == SKIP:           # a guarded region: skipped where its mask is all false
            anyset = False
            for i in range(n):
                anyset |= a[i] != 0.0
            if not anyset:
                j += code[j, 5]
        elif op == WHERE:
            c0 = code[j, 4] * P
            c = _reg(R, c0, n)
            for i in range(n):
                x, y = b[i], c[i]
                o[i] = x if a[i] != 0.0 else y
        elif op == EXP:
            _exp_block(a, o, cnt, n)
        elif op == LOG:
            _log_block(a, o, cnt, n)
        elif op == MIN:
            for i in range(n):
                x, y = a[i], b[i]
                o[i] = x if (x < y or x != x) else y
        elif op == GE:
            for i in range(n):
                o[i] = 1.0 if a[i] >= b[i] else 0.0
        elif op == GT:
            for i in range(n):
                o[i] = 1.0 if a[i] > b[i] else 0.0
        elif op == INTERP:
            _interp_block(tab, code[j, 5], code[j, 6], code[j, 7], a, o, cnt, n)
        elif op == TRUNC:
            for i in range(n):
                o[i] = np.trunc(a[i])
        elif op == OR:
            for i in range(n):
                o[i] = 1.0 if (a[i] != 0.0 or b[i] != 0.0) else 0.0
        elif op == EQ:
            for i in range(n):
                o[i] = 1.0 if a[i] == b[i] else 0.0
        elif op == NE:
            for i in range(n):
                o[i] = 1.0 if a[i] != b[i] else 0.0
        elif op == AND:
            for i in range(n):
                o[i] = 1.0 if (a[i] != 0.0 and b[i] != 0.0) else 0.0
        elif op == NOT:
            for i in range(n):
                o[i] = 1.0 if a[i] == 0.0 else 0.0
        elif op == NEG:
            for i in range(n):
                o[i] = -a[i]
        elif op == SEARCH:
            _count_le(tab, code[j, 5], code[j, 7], a, cnt, n)
            for i in range(n):
                o[i] = cnt[i]
        elif op == POW:
            _pow_block(a, b, o, cnt, n)
        elif op == LOG1P:
            for i in range(n):
                o[i] = np.log1p(a[i])
        elif op == SQRT:
            for i in range(n):
                o[i] = np.sqrt(a[i])
        elif op == CEIL:
            for i in range(n):
                o[i] = np.ceil(a[i])
        elif op == FLOOR:
            for i in range(n):
                o[i] = np.floor(a[i])
        elif op == ABS:
            for i in range(n):
                o[i] = abs(a[i])


@njit(**_JIT)
def _blocks(t, nt, code, imm, tab, const_regs, const_values, X, input_regs, Y, output_regs,
            n_regs, P, N):
    """Blocks t, t + nt, t + 2 nt, ... of the ``N`` points, with this thread's registers.
    ``X``, ``Y``: addresses of the input and output arrays (float64, contiguous, N long; held
    by the caller): one compiled signature whatever their number."""
    nb = (N + P - 1) // P
    R = np.empty(n_regs * P)
    cnt = np.empty(P)
    for j in range(const_regs.size):
        R[const_regs[j] * P:(const_regs[j] + 1) * P] = const_values[j]
    blk = t
    while blk < nb:
        lo = blk * P
        n = min(P, N - lo)
        for j in range(input_regs.size):
            r = input_regs[j] * P
            x = carray(_pointer(X[j]), N)
            for i in range(n):
                R[r + i] = x[lo + i]
        _block(code, imm, tab, R, P, cnt, n)
        for j in range(output_regs.size):
            r = output_regs[j] * P
            y = carray(_pointer(Y[j]), N)
            for i in range(n):
                y[lo + i] = R[r + i]
        blk += nt


@njit(parallel=True, **_JIT)
def _run(code, imm, tab, const_regs, const_values, X, input_regs, Y, output_regs, n_regs, P, N,
         nt):
    for t in prange(nt):
        _blocks(np.int64(t), nt, code, imm, tab, const_regs, const_values, X, input_regs, Y,
                output_regs, n_regs, P, N)


#: numba's default threading layer (workqueue) takes one parallel call at a time
_LOCK = threading.Lock()


#: Points per call of the compiled pass when some output is not a float (a flag, a code):
#: those are computed into a float buffer this long and converted chunk by chunk.
CHUNK_POINTS = 1 << 20


#: Bytes of output memory kept for reuse by later calls once no result refers to it (0: none
#: kept). A call writing into memory used before skips the first-touch page faults of fresh
#: memory: a Monte Carlo loop reuses its previous batch's arrays (10^6 points, all outputs,
#: best of 8 interleaved on the 2-core VM: Llama 110 -> 77 ms, DeepSeek-V3 191 -> 154 ms).
#: The size is a choice, not a measurement: the outputs of one 10^6-point call with every
#: variable (about 30 float64 arrays of 8 MB) and its flag buffers fit.
POOL_BYTES = 384 << 20


class _Pool:
    """Output arrays of :func:`run`, each reused once nothing else refers to it (no result,
    no view: the pool's own reference is the only one left) by a call needing between half
    of it and all of it; the most recently used kept, up to :data:`POOL_BYTES` in all. A
    request none fits first lets go of every unused array, so the allocator can reuse their
    memory (as it does without a pool: a smaller warm-up call's arrays then serve a longer
    call's, in part)."""

    def __init__(self):
        self.blocks: list[np.ndarray] = []
        self.lock = threading.Lock()

    def _unused(self, i: int) -> bool:
        return sys.getrefcount(self.blocks[i]) == 2      # the list's reference and the call's

    def take(self, n_floats: int) -> np.ndarray:
        """A float64 array of ``n_floats`` values (uninitialised)."""
        if n_floats == 0 or 8 * n_floats > POOL_BYTES:
            return np.empty(n_floats)
        with self.lock:
            for i in range(len(self.blocks) - 1, -1, -1):
                if n_floats <= self.blocks[i].size <= 2 * n_floats and self._unused(i):
                    block = self.blocks.pop(i)
                    break
            else:
                for i in [i for i in range(len(self.blocks)) if self._unused(i)][::-1]:
                    del self.blocks[i]
                block = np.empty(n_floats)
            self.blocks.append(block)
            total = sum(b.nbytes for b in self.blocks)
            while total > POOL_BYTES:            # the oldest let go (freed once unused)
                total -= self.blocks.pop(0).nbytes
            return block[:n_floats]

    def clear(self):
        """Keep no array (the memory is freed once no result refers to it)."""
        with self.lock:
            self.blocks.clear()


_POOL = _Pool()


def release_buffers():
    """Let go of the output memory kept for reuse (:data:`POOL_BYTES`)."""
    _POOL.clear()


def run(program, inputs: dict[str, np.ndarray], n_points: int,
        dtypes: dict[str, np.dtype] | None = None) -> dict[str, np.ndarray]:
    """Evaluate ``program`` at ``n_points`` points; ``inputs`` maps each of
    ``program.inputs`` to a 1-D array of that length (read in place). Returns one array per
    register output (the constant outputs are the caller's), of its dtype in ``dtypes``
    (default float64; booleans are the nonzero values, integers truncated)."""
    X = tuple(np.ascontiguousarray(inputs[name], dtype=float) for name in program.inputs)
    names, uniq, where, first = program.layout
    if not names:
        return {}
    kinds = [np.dtype(dtypes.get(k, float)) if dtypes else _FLOAT for k in names]
    # one array per distinct register, of the dtype of the first output there (written in
    # place when float, else through a float buffer); outputs sharing a register share it
    # when their dtypes agree
    # the float outputs and the buffers of the others from the pool (:class:`_Pool`)
    floats = [kinds[i] == _FLOAT for i in first]
    final = [_POOL.take(n_points) if f else np.empty(n_points, dtype=kinds[i])
             for i, f in zip(first, floats)]
    typed = [not f for f in floats]
    step = CHUNK_POINTS if any(typed) else max(n_points, 1)
    buf = [_POOL.take(min(step, n_points)) if t else None for t in typed]
    for lo in range(0, n_points, step):
        hi = min(lo + step, n_points)
        Xc = [x[lo:hi] for x in X]
        Yc = tuple(b[:hi - lo] if t else f[lo:hi] for f, b, t in zip(final, buf, typed))
        _call(program, Xc, Yc, uniq, hi - lo)
        for f, b, t in zip(final, buf, typed):
            if t:
                f[lo:hi] = (b[:hi - lo] != 0.0) if f.dtype.kind == "b" else b[:hi - lo]
    out = {}
    for k, w, kind in zip(names, where, kinds):
        arr = final[w]
        if arr.dtype != kind:          # two outputs of one register with different dtypes
            arr = arr != 0.0 if kind.kind == "b" else arr.astype(kind)
        out[k] = arr
    return out


def run_point(program, inputs: dict[str, float]) -> dict[str, float]:
    """``program`` at one point (``inputs``: a number per input): each register output as a
    float, with as little around the replay as possible (a one-configuration call)."""
    names, uniq, where, _ = program.layout
    X = np.array([inputs[k] for k in program.inputs] or [0.0], dtype=float)
    Y = np.empty(max(uniq.size, 1))
    if names:       # one point: consecutive elements are the arrays of length 1
        xa = X.ctypes.data + 8 * np.arange(X.size, dtype=np.int64)
        ya = Y.ctypes.data + 8 * np.arange(Y.size, dtype=np.int64)
        _blocks(0, 1, program.code, program.immediates, program.table_data, program.const_regs,
                program.const_values, xa, program.input_regs, ya, uniq, program.n_regs,
                BLOCK_POINTS, 1)
    vals = Y.tolist()
    return {k: vals[w] for k, w in zip(names, where)}


_FLOAT = np.dtype(float)


def _addresses(arrays) -> np.ndarray:
    """Addresses of contiguous float64 arrays of one length (the caller keeps them alive)."""
    for a in arrays:
        assert a.dtype == np.float64 and a.flags.c_contiguous
    return np.array([a.ctypes.data for a in arrays] or [0], dtype=np.int64)


def _call(program, X, Y, regs, n_points):
    """The compiled interpreter over ``n_points`` points: in this thread for one block (no
    parallel launch), else on every core."""
    xa, ya = _addresses(X), _addresses(Y)
    if n_points <= BLOCK_POINTS:
        _blocks(0, 1, program.code, program.immediates, program.table_data, program.const_regs,
                program.const_values, xa, program.input_regs, ya, regs, program.n_regs,
                BLOCK_POINTS, n_points)
        return
    with _LOCK:
        _run(program.code, program.immediates, program.table_data, program.const_regs,
             program.const_values, xa, program.input_regs, ya, regs, program.n_regs,
             BLOCK_POINTS, n_points, min(get_num_threads(), -(-n_points // BLOCK_POINTS)))


# ---- axis checks of long point lists ---------------------------------------------------

@njit(**_JIT)
def _summary(x):
    # eight running values per statistic: elementwise updates vectorise (one running value
    # is a chain of dependent additions, four cycles per element)
    mn, mx, frac = np.full(8, x[0]), np.full(8, x[0]), np.zeros(8)
    n8 = x.size - x.size % 8
    for i in range(0, n8, 8):
        for k in range(8):
            v = x[i + k]
            mn[k] = v if v < mn[k] else mn[k]
            mx[k] = v if v > mx[k] else mx[k]
            frac[k] += v - np.floor(v)
    for i in range(n8, x.size):
        v = x[i]
        mn[0] = v if v < mn[0] else mn[0]
        mx[0] = v if v > mx[0] else mx[0]
        frac[0] += v - np.floor(v)
    return mn.min(), mx.max(), frac.sum()


def summary(x: np.ndarray) -> tuple[float, float, bool] | None:
    """(min, max, all whole numbers) of a non-empty float64 array in one pass; None if some
    value is NaN or infinite (it makes the sum of fractional parts NaN; the caller's numpy
    checks then name the value)."""
    mn, mx, frac = _summary(np.ascontiguousarray(x).reshape(-1))
    if not np.isfinite(frac):
        return None
    return float(mn), float(mx), frac == 0.0
