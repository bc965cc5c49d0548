"""The compiled building blocks of the interpreter (:mod:`.interp`): exp, log and power as
vectorisable polynomials, ``searchsorted(side='right')`` and ``interp`` over a block of points,
each with numpy's semantics (NaN propagation, values held at the end nodes). Compiled code is
cached on disk (``cache=True``)."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

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
