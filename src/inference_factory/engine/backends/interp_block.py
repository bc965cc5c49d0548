"""The block loop of the interpreter (:mod:`.interp`): every instruction of a
:class:`.program.Program` applied to a block of registers (:func:`_block`), the blocks of one
thread (:func:`_blocks`) and of every core (:func:`_run`). Compiled by numba, cached on disk."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, prange, types
from numba.extending import intrinsic

from .interp_math import (_JIT, _count_le, _exp_block, _interp_block, _log_block,
                          _pow_block)
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



@njit(**_JIT)
def _block(code, imm, tab, R, P, cnt, n):
    """Every instruction over the first ``n`` points of a block; register r of the block is
    ``R[r * P : r * P + n]`` (:func:`.program.compile_outputs` never gives a result its
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
