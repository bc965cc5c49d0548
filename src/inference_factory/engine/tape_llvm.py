"""A :class:`.tape.Program` compiled to machine code of its own (LLVM, through llvmlite).

:mod:`.tape_exec` interprets a program: every instruction is a loop over a block of points
whose registers live in memory, so each instruction costs a load and a store per operand and
point. For a long list of points the same program is worth compiling once: here each
instruction becomes LLVM vector operations on :data:`LANES` points at a time, the program's
registers become SSA values (LLVM keeps them in CPU registers or on the stack), and LLVM's
optimiser merges, schedules and allocates across the whole program. The result is a function
``kernel(inputs, outputs, lo, hi)`` over points ``lo .. hi`` (a multiple of :data:`LANES`
apart), called from threads that release the GIL (ctypes).

Every instruction keeps the interpreter's semantics (numpy's): ``maximum``/``minimum``
propagate NaN, comparisons and ``where`` read 0.0/1.0 (a NaN condition is true), ``interp``
holds its end values and counts its nodes, ``take`` truncates and clamps its index. exp and
log are reduced by small tables on AVX-512 (:meth:`_Codegen._exp_table`,
:meth:`_Codegen._log_table`: 1 and 2 ulp from numpy's measured), elsewhere they are the
interpreter's polynomials (:func:`.tape_exec._exp1`, :func:`.tape_exec._log1`) written as
vector code, with libm's scalar function for the lanes outside their range; so results agree
with the interpreter's to an ulp or two, and with numpy's within 4 ulp
(``tests/test_tape_llvm.py``). A guarded region (``skip``) becomes a
branch taken when its mask is false on all lanes. Tables of up to :data:`PERM_MAX` values are
read by AVX-512 variable permutes where the CPU has them (:meth:`_Codegen.lookup`).

Compiling a program takes 0.4-0.7 s (Llama-3.1-70B's) to about 1 s (DeepSeek-V3's). The object
code is kept in memory per process and on disk (:func:`cache_dir`) under a digest of the
program, this module's source, the LLVM version and the CPU (:func:`kernel_for`).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import os
import re
import struct
import tempfile
import threading
from pathlib import Path

import numpy as np

from .tape import OP, OPS
from . import tape_exec as X

#: Points per vector operation: two AVX-512 registers of 8 float64 (LLVM splits them on
#: narrower CPUs). Measured per point, one thread, interleaved (8 / 16 / 32 lanes):
#: DeepSeek-V3 251 / 236 / 231 ns, Llama-3.1-70B 96 / 102 / 94 ns: within the noise, and 16
#: compiles in 0.8x the time of 32 (fewer branches per point than 8: guarded regions).
LANES = 16

#: Largest table read by vector permutes (four registers of 8): beyond, lane by lane.
PERM_MAX = 32

#: Whether the code uses AVX-512 instructions (None: where the CPU has AVX-512F with 512-bit
#: registers): tables read by variable permutes, exp and log reduced by small tables
#: (``vscalefpd``, ``vgetmantpd``, ``vgetexppd``). Else portable vector code: the same tables
#: read lane by lane, and the interpreter's exp and log polynomials.
AVX512 = None

#: Programs of at least this many instructions call exp, log and pow as functions of their
#: own; shorter ones have them inline at every use. Measured, one thread, interleaved (kernel
#: inline / outlined): 1.24x at 382 instructions (Qwen3 MoE), 1.18x at 179 and 508, 1.13x at
#: 559 (Llama-3.1-70B TP8), 1.01x at 799, 0.88x at 915, 0.69-0.82x at 1,404-1,424
#: (DeepSeek-V3). Inline, a call's spills of live vectors go; outlined, the loop stays
#: small enough that it runs faster, and compiles in a quarter of the time (DeepSeek-V3: 3.4
#: -> 0.8 s).
OUTLINE_MIN_INSTRUCTIONS = 800

_NAME = {i: name for i, name in enumerate(OPS)}


# ---- exp and log by table reduction (AVX-512) ----------------------------------------------
#: exp: 2^(j/N) for j = 0 .. N-1, one permute of two registers.
EXP_TABLE_N = 16
#: expm1 r = r (1 + r/2 + ... + r^6/7!), highest power first, for |r| <= ln2/32.
EXPM1_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(7, 0, -1))
#: log: the centres c_j = 3/4 + j/20, j = 0 .. 15, of m in [3/4, 3/2).
LOG_TABLE_START, LOG_TABLE_STEP = 0.75, 0.05
#: ``vgetmantpd``'s immediate: interval [3/4, 3/2) (bits 1:0 = 3), a NaN for a negative
#: source (sign control, bits 3:2 = 2); zeros stay zeros.
LOG_GETMANT_IMM = 3 | 2 << 2
#: e^x clamped to [_EXP_MIN, _EXP_MAX] before the table reduction: e^x overflows to inf above
#: 709.79 and rounds to 0 below -745.14, so the clamp changes no value.
_EXP_MIN, _EXP_MAX = -746.0, 710.0
#: 2 atanh(s)/s = 2 (1 + z/3 + z^2/5 + z^3/7 + z^4/9), z = s^2, highest power first.
LOG_ATANH_SERIES = tuple(2.0 / (2 * k + 1) for k in range(4, -1, -1))


def exp_reduction_table(n: int = EXP_TABLE_N) -> np.ndarray:
    r""":math:`T_j = 2^{j/n}`, j = 0 .. n-1, each the double nearest the exact value (decimal
    arithmetic at 40 digits, correctly rounded, then one rounding to binary64)."""
    from decimal import Decimal, localcontext
    with localcontext() as ctx:
        ctx.prec = 40
        return np.array([float(Decimal(2) ** (Decimal(j) / Decimal(n))) for j in range(n)])


def log_reduction_table(start: float = LOG_TABLE_START, step: float = LOG_TABLE_STEP,
                        n: int = 16) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Centres :math:`c_j` (the doubles nearest start + j step; :math:`c_j = 1` exactly where
    start + j step = 1, so ln x near 1 keeps its relative accuracy) and :math:`\ln c_j` split
    as hi + lo (hi the double nearest, lo the double nearest the rest; decimal arithmetic at
    40 digits from each centre's exact binary value)."""
    from decimal import Decimal, localcontext        # Decimal(a double): its exact value
    c = np.array([start + j * step for j in range(n)])
    c[np.isclose(c, 1.0, rtol=0.0, atol=1e-12)] = 1.0
    with localcontext() as ctx:
        ctx.prec = 40
        ln = [Decimal(v).ln() for v in c.tolist()]
        hi = np.array([float(v) for v in ln])
        lo = np.array([float(v - Decimal(h)) for v, h in zip(ln, hi.tolist())])
    return c, hi, lo


EXP_TABLE = exp_reduction_table()
LOG_TABLE = log_reduction_table()


def _hex(v: float) -> str:
    """A double as LLVM's exact hexadecimal literal."""
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(v)))[0]


class _Emitter:
    """Text of the LLVM function, value by value."""

    def __init__(self):
        self.lines: list[str] = []
        self.block = ""             # the basic block being written
        self.n = 0
        self.vt = f"<{LANES} x double>"
        self.it = f"<{LANES} x i64>"
        self.bt = f"<{LANES} x i1>"

    def tmp(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def __call__(self, text: str) -> str:
        t = self.tmp()
        self.lines.append(f"  {t} = {text}")
        return t

    def raw(self, text: str):
        self.lines.append(text)

    def start(self, label: str):
        """Begin basic block ``label``."""
        self.lines.append(f"{label}:")
        self.block = label

    def splat(self, v: float, ty: str = "double") -> str:
        lit = _hex(v) if ty == "double" else str(int(v))
        return "<" + ", ".join(f"{ty} {lit}" for _ in range(LANES)) + ">"

    def isplat(self, v: int) -> str:
        return self.splat(v, "i64")

    # ---- vector helpers ------------------------------------------------------------------
    def fbin(self, op: str, a: str, b: str) -> str:
        return self(f"{op} {self.vt} {a}, {b}")

    def fma(self, a: str, b: str, c: str) -> str:
        return self(f"call {self.vt} @llvm.fma.v{LANES}f64({self.vt} {a}, {self.vt} {b}, "
                    f"{self.vt} {c})")

    def cmp(self, pred: str, a: str, b: str) -> str:
        return self(f"fcmp {pred} {self.vt} {a}, {b}")

    def sel(self, c: str, a: str, b: str) -> str:
        return self(f"select {self.bt} {c}, {self.vt} {a}, {self.vt} {b}")

    def flag(self, c: str) -> str:
        """A boolean vector as 0.0 / 1.0."""
        return self.sel(c, self.splat(1.0), self.splat(0.0))

    def bor(self, a: str, b: str) -> str:
        return self(f"or {self.bt} {a}, {b}")

    def band(self, a: str, b: str) -> str:
        return self(f"and {self.bt} {a}, {b}")

    def bnot(self, a: str) -> str:
        ones = "<" + ", ".join("i1 true" for _ in range(LANES)) + ">"
        return self(f"xor {self.bt} {a}, {ones}")

    def any(self, c: str) -> str:
        bits = self(f"bitcast {self.bt} {c} to i{LANES}")
        return self(f"icmp ne i{LANES} {bits}, 0")

    def intrinsic(self, name: str, *args: str) -> str:
        return self(f"call {self.vt} @llvm.{name}.v{LANES}f64(" +
                    ", ".join(f"{self.vt} {a}" for a in args) + ")")


def _declarations(avx512: bool) -> str:
    """The intrinsics and libm functions the code calls."""
    x86 = """
declare <8 x double> @llvm.x86.avx512.permvar.df.512(<8 x double>, <8 x i64>)
declare <8 x double> @llvm.x86.avx512.vpermi2var.pd.512(<8 x double>, <8 x i64>, <8 x double>)
declare <8 x double> @llvm.x86.avx512.mask.scalef.pd.512(<8 x double>, <8 x double>, <8 x double>, i8, i32)
declare <8 x double> @llvm.x86.avx512.mask.getexp.pd.512(<8 x double>, <8 x double>, i8, i32)
declare <8 x double> @llvm.x86.avx512.mask.getmant.pd.512(<8 x double>, i32, <8 x double>, i8, i32)
declare <8 x double> @llvm.x86.avx512.mask.fixupimm.pd.512(<8 x double>, <8 x double>, <8 x i64>, i32, i8, i32)
""" if avx512 else ""
    return x86 + f"""
declare <{LANES} x double> @llvm.fma.v{LANES}f64(<{LANES} x double>, <{LANES} x double>, <{LANES} x double>)
declare <{LANES} x double> @llvm.sqrt.v{LANES}f64(<{LANES} x double>)
declare <{LANES} x double> @llvm.fabs.v{LANES}f64(<{LANES} x double>)
declare <{LANES} x double> @llvm.floor.v{LANES}f64(<{LANES} x double>)
declare <{LANES} x double> @llvm.ceil.v{LANES}f64(<{LANES} x double>)
declare <{LANES} x double> @llvm.trunc.v{LANES}f64(<{LANES} x double>)
declare <{LANES} x i64> @llvm.smax.v{LANES}i64(<{LANES} x i64>, <{LANES} x i64>)
declare <{LANES} x i64> @llvm.smin.v{LANES}i64(<{LANES} x i64>, <{LANES} x i64>)
declare double @exp(double)
declare double @log(double)
declare double @log1p(double)
declare double @pow(double, double)
"""


class _Codegen:
    """One program's function body (the loop over vectors of points)."""

    def __init__(self, program, avx512: bool | None = None):
        self.p = program
        self.e = _Emitter()
        self.labels = 0
        if avx512 is None:
            avx512 = AVX512
        if avx512 is None:
            # 512-bit registers: AVX-512F, and not an AVX10 core limited to 256 bits (LLVM
            # aborts the process on a 512-bit permute it cannot lower)
            _target()
            features = _STATE["features"].split(",")
            avx512 = "+avx512f" in features and "-evex512" not in features
        self.avx512 = avx512 and LANES % 8 == 0
        self.offsets: dict[bytes, int] = {}
        self.extra: list[np.ndarray] = []
        self.size = 0
        self.funcs: dict[str, list[str]] = {}

    def label(self) -> str:
        self.labels += 1
        return f"L{self.labels}"

    # ---- the interpreter's exp, log, pow on vectors ---------------------------------------
    def _exp_poly(self, x):
        e = self.e
        xc = e.sel(e.cmp("ogt", x, e.splat(X._EXP_HI)), e.splat(X._EXP_HI), x)
        xc = e.sel(e.cmp("olt", xc, e.splat(X._EXP_LO)), e.splat(X._EXP_LO), xc)
        t = e.fma(xc, e.splat(X._LOG2E), e.splat(X._SHIFT))
        k = e.fbin("fsub", t, e.splat(X._SHIFT))
        nk = e.fbin("fsub", e.splat(-0.0), k)
        r = e.fma(nk, e.splat(X._LN2_HI), xc)
        r = e.fma(nk, e.splat(X._LN2_LO), r)
        p = self._poly(X.EXP_TAYLOR, r)
        tb = e(f"bitcast {e.vt} {t} to {e.it}")
        sb = e(f"sub {e.it} {tb}, {e.isplat(X._SHIFT_BITS - 1023)}")
        sb = e(f"shl {e.it} {sb}, {e.isplat(52)}")
        scale = e(f"bitcast {e.it} {sb} to {e.vt}")
        return e.fbin("fmul", p, scale)

    def _exp_table(self, x):
        """e^x for x in [_EXP_MIN, _EXP_MAX] on AVX-512 (:func:`exp_reduction_table`): x =
        (16m + j) ln2/16 + r, |r| <= ln2/32; e^x = 2^m (T_j + T_j expm1(r)), T_j = 2^(j/16)
        read by a permute, expm1 r by its Taylor series to r^7 (truncation < 2e-18), 2^m
        applied by ``vscalefpd`` (which overflows to inf above 709.78 and rounds through the
        subnormals to 0 below -745.13); NaN stays NaN. About 2/3 of the vector operations of
        :meth:`_exp_poly`."""
        e = self.e
        t = e.fma(x, e.splat(EXP_TABLE_N / np.log(2.0)), e.splat(X._SHIFT))
        k = e.fbin("fsub", t, e.splat(X._SHIFT))
        nk = e.fbin("fsub", e.splat(-0.0), k)
        r = e.fma(nk, e.splat(X._LN2_HI / EXP_TABLE_N), x)
        r = e.fma(nk, e.splat(X._LN2_LO / EXP_TABLE_N), r)
        q = e.fbin("fmul", self._poly(EXPM1_TAYLOR, r), r)
        j = e(f"and {e.it} {e(f'bitcast {e.vt} {t} to {e.it}')}, {e.isplat(EXP_TABLE_N - 1)}")
        tj = self.lookup(EXP_TABLE, j)                  # k mod 16: the low bits of t
        y = e.fma(tj, q, tj)
        return self.x86("mask.scalef.pd", y, e.fbin("fmul", k, e.splat(1.0 / EXP_TABLE_N)))

    def _log_table(self, x):
        """ln x on AVX-512 (:func:`log_reduction_table`): x = 2^e m, m in [3/4, 3/2)
        (``vgetmantpd``/``vgetexppd``, subnormals included); c_j the nearest of 16 centres
        3/4 + j/20 (c_5 = 1); ln m = ln c_j + 2 atanh(s), s = (m - c_j)/(m + c_j), |s| <
        0.017, by its series to s^9 (truncation < 1e-19); ln c_j in two parts, read by
        permutes. The instructions give the edges: +-0 -> -inf (e = -inf), x < 0 -> NaN
        (:data:`LOG_GETMANT_IMM`), inf -> inf, NaN -> NaN (tests/test_tape_llvm.py)."""
        e = self.e
        m = self.x86("mask.getmant.pd", x, imm=LOG_GETMANT_IMM)
        ex = self.x86("mask.getexp.pd", x)
        ex = e.sel(e.cmp("olt", m, e.splat(1.0)), e.fbin("fadd", ex, e.splat(1.0)), ex)
        t = e.fma(m, e.splat(1.0 / LOG_TABLE_STEP),
                  e.splat(X._SHIFT - LOG_TABLE_START / LOG_TABLE_STEP))
        idx = e(f"and {e.it} {e(f'bitcast {e.vt} {t} to {e.it}')}, {e.isplat(15)}")
        c, lc_hi, lc_lo = (self.lookup(tab, idx) for tab in LOG_TABLE)
        s = e.fbin("fdiv", e.fbin("fsub", m, c), e.fbin("fadd", m, c))
        p = self._poly(LOG_ATANH_SERIES, e.fbin("fmul", s, s))
        lo = e.fma(s, p, e.fma(ex, e.splat(X._LN2_LO), lc_lo))
        return e.fbin("fadd", e.fma(ex, e.splat(X._LN2_HI), lc_hi), lo)

    def x86(self, name, x, *more, imm=None):
        """An AVX-512 intrinsic of 8 lanes (``llvm.x86.avx512.<name>.512``, all lanes, current
        rounding) on each half of a vector of :data:`LANES`."""
        e = self.e
        v8 = "<8 x double>"
        parts = []
        for args in zip(*(self._eighths(a) for a in (x, *more))):
            ops = [f"{v8} {a}" for a in args]
            if imm is not None:
                ops.append(f"i32 {imm}")
            ops += [f"{v8} zeroinitializer", "i8 -1", "i32 4"]
            parts.append(e(f"call {v8} @llvm.x86.avx512.{name}.512(" + ", ".join(ops) + ")"))
        return self._concat(parts)

    def nan_of(self, a, v):
        """``v`` where ``a`` is a number, ``a`` where it is NaN, by one ``vfixupimmpd`` per 8
        lanes (its table maps a quiet NaN class of ``a`` to ``a``, a signalling one to its
        quiet NaN, every other class to ``v``): numpy's NaN propagation after an instruction
        that drops a NaN first operand (x86 ``maxpd``/``minpd`` return the second)."""
        e = self.e
        v8, table = "<8 x double>", "<" + ", ".join("i64 33" for _ in range(8)) + ">"  # 0x21
        return self._concat([
            e(f"call {v8} @llvm.x86.avx512.mask.fixupimm.pd.512({v8} {vh}, {v8} {ah}, "
              f"<8 x i64> {table}, i32 0, i8 -1, i32 4)")
            for vh, ah in zip(self._eighths(v), self._eighths(a))])

    def _eighths(self, v, ty: str = "double") -> list[str]:
        """A vector of :data:`LANES` as vectors of 8 lanes (the width of the AVX-512
        intrinsics), in order."""
        if LANES == 8:
            return [v]
        vt = f"<{LANES} x {ty}>"
        return [self.e(f"shufflevector {vt} {v}, {vt} poison, <8 x i32> <"
                       + ", ".join(f"i32 {lo + k}" for k in range(8)) + ">")
                for lo in range(0, LANES, 8)]

    def _concat(self, parts):
        """Vectors of 8 doubles joined pairwise into one vector of :data:`LANES`."""
        e = self.e
        width = 8
        while len(parts) > 1:
            parts = [e(f"shufflevector <{width} x double> {a}, <{width} x double> {b}, "
                       f"<{2 * width} x i32> <"
                       + ", ".join(f"i32 {k}" for k in range(2 * width)) + ">")
                     for a, b in zip(parts[::2], parts[1::2])]
            width *= 2
        return parts[0]

    def _poly(self, coeffs, r):
        """The polynomial with ``coeffs`` (highest power first) at ``r``, by Horner's rule
        (Estrin's scheme, with a shorter dependency chain, measured slower here)."""
        e = self.e
        p = e.splat(coeffs[0])
        for c in coeffs[1:]:
            p = e.fma(p, r, e.splat(c))
        return p

    def _log_poly(self, x):
        e = self.e
        b = e(f"bitcast {e.vt} {x} to {e.it}")
        mb = e(f"and {e.it} {b}, {e.isplat(0x000FFFFFFFFFFFFF)}")
        mb = e(f"or {e.it} {mb}, {e.isplat(0x3FF0000000000000)}")
        m = e(f"bitcast {e.it} {mb} to {e.vt}")
        eb = e(f"lshr {e.it} {b}, {e.isplat(52)}")
        eb = e(f"and {e.it} {eb}, {e.isplat(0x7FF)}")
        eb = e(f"or {e.it} {eb}, {e.isplat(0x4330000000000000)}")
        ex = e.fbin("fsub", e(f"bitcast {e.it} {eb} to {e.vt}"), e.splat(4503599627371519.0))
        big = e.cmp("ogt", m, e.splat(X._SQRT2))
        m = e.sel(big, e.fbin("fmul", m, e.splat(0.5)), m)
        ex = e.sel(big, e.fbin("fadd", ex, e.splat(1.0)), ex)
        s = e.fbin("fdiv", e.fbin("fsub", m, e.splat(1.0)), e.fbin("fadd", m, e.splat(1.0)))
        z = e.fbin("fmul", s, s)
        p = self._poly(X.ATANH_SERIES, z)
        lo = e.fma(e.fbin("fmul", e.splat(2.0), s), p, e.fbin("fmul", ex, e.splat(X._LN2_LO)))
        return e.fma(ex, e.splat(X._LN2_HI), lo)

    def _fixup(self, value, bad, fn, *args):
        """``value`` with libm's ``fn`` at the lanes where ``bad``: a branch taken only when
        some lane is bad."""
        e = self.e
        slow, done = self.label(), self.label()
        e.raw(f"  br i1 {e.any(bad)}, label %{slow}, label %{done}")
        fast = e.block
        e.start(slow)
        out = value
        for lane in range(LANES):
            xs = [e(f"extractelement {e.vt} {a}, i32 {lane}") for a in args]
            r = e(f"call double @{fn}(" + ", ".join(f"double {v}" for v in xs) + ")")
            old = e(f"extractelement {e.vt} {out}, i32 {lane}")
            bl = e(f"extractelement {e.bt} {bad}, i32 {lane}")
            out = e(f"insertelement {e.vt} {out}, double "
                    f"{e(f'select i1 {bl}, double {r}, double {old}')}, i32 {lane}")
        e.raw(f"  br label %{done}")
        e.start(done)
        return e(f"phi {e.vt} [ {value}, %{fast} ], [ {out}, %{slow} ]")

    def outlined(self, name, build, *args):
        """``build(*args)`` as a call to a function of its own, emitted once per module, in a
        program of :data:`OUTLINE_MIN_INSTRUCTIONS` or more; else inline."""
        e = self.e
        if self.p.n_instructions < OUTLINE_MIN_INSTRUCTIONS:
            return build(*args)
        if name not in self.funcs:
            saved = (e.lines, e.block)
            e.lines = []
            params = [f"%{name}.a{i}" for i in range(len(args))]
            e.raw(f"define internal fastcc {e.vt} @{name}("
                  + ", ".join(f"{e.vt} {a}" for a in params) + ") #1 {")
            e.start(f"{name}.entry")
            r = build(*params)
            e.raw(f"  ret {e.vt} {r}")
            e.raw("}")
            self.funcs[name] = e.lines
            e.lines, e.block = saved
        return e(f"call fastcc {e.vt} @{name}(" + ", ".join(f"{e.vt} {a}" for a in args) + ")")

    def exp(self, x):
        return self.outlined("vexp", self._exp, x)

    def log(self, x):
        return self.outlined("vlog", self._log, x)

    def pow(self, x, y):
        return self.outlined("vpow", self._pow, x, y)

    def _exp_core(self, x):
        """e^x inside (_EXP_LO, _EXP_HI) (outside: any value; pow fixes those lanes)."""
        return self._exp_table(x) if self.avx512 else self._exp_poly(x)

    def _log_core(self, x):
        """ln x for normal positive x (else any value; pow fixes those lanes)."""
        return self._log_table(x) if self.avx512 else self._log_poly(x)

    def _exp(self, x):
        e = self.e
        if self.avx512:     # vscalefpd: overflow to inf, underflow through subnormals to 0
            xc = e.sel(e.cmp("ogt", x, e.splat(_EXP_MAX)), e.splat(_EXP_MAX), x)
            return self._exp_table(e.sel(e.cmp("olt", xc, e.splat(_EXP_MIN)), e.splat(_EXP_MIN),
                                         xc))     # NaN compares false: kept
        ok = e.bor(e.band(e.cmp("ogt", x, e.splat(X._EXP_LO)), e.cmp("olt", x, e.splat(X._EXP_HI))),
                   e.cmp("olt", x, e.splat(X._EXP_ZERO)))
        y = e.sel(e.cmp("olt", x, e.splat(X._EXP_ZERO)), e.splat(0.0), self._exp_poly(x))
        return self._fixup(y, e.bnot(ok), "exp", x)

    def _log(self, x):
        e = self.e
        if self.avx512:     # vgetmantpd/vgetexppd: subnormals, +-0 -> -inf, x < 0 -> NaN, inf
            return self._log_table(x)
        ok = e.band(e.cmp("oge", x, e.splat(X._TINY)), e.cmp("olt", x, e.splat(np.inf)))
        return self._fixup(self._log_poly(x), e.bnot(ok), "log", x)

    def _pow(self, x, y):
        e = self.e
        z = e.fbin("fmul", y, self._log_core(x))
        zok = e.bor(e.band(e.cmp("ogt", z, e.splat(X._EXP_LO)), e.cmp("olt", z, e.splat(X._EXP_HI))),
                    e.cmp("olt", z, e.splat(X._EXP_ZERO)))
        ok = e.band(e.band(e.cmp("oge", x, e.splat(X._TINY)), e.cmp("olt", x, e.splat(np.inf))), zok)
        w = e.sel(e.cmp("olt", z, e.splat(X._EXP_ZERO)), e.splat(0.0), self._exp_core(z))
        return self._fixup(w, e.bnot(ok), "pow", x, y)

    # ---- tables ---------------------------------------------------------------------------
    def table(self, values: np.ndarray) -> int:
        """Offset of ``values`` in the module's constant table (the program's tables, then
        the ones derived here)."""
        key = values.tobytes()
        if key not in self.offsets:
            self.offsets[key] = self.size
            self.extra.append(values)
            self.size += values.size
        return self.offsets[key]

    def lookup(self, values: np.ndarray, index):
        """``values[index]`` for a vector of int64 indexes in range. Up to 32 values on an
        AVX-512 CPU: variable permutes of the table held in vector registers (one to four
        instructions per 8 points); otherwise lane by lane, scalar loads (vector gathers are
        slower than those on current Intel cores: microcode mitigation)."""
        e = self.e
        n = values.size
        if not (self.avx512 and n <= PERM_MAX):
            base = self.table(values)
            out = "poison"
            for lane in range(LANES):
                i = e(f"extractelement {e.it} {index}, i32 {lane}")
                i = e(f"add i64 {i}, {base}")
                v = e(f"load double, ptr {e(f'getelementptr double, ptr @tab, i64 {i}')}")
                out = e(f"insertelement {e.vt} {out}, double {v}, i32 {lane}")
            return out
        size = 8 if n <= 8 else (16 if n <= 16 else 32)
        padded = np.concatenate([values, np.full(size - n, values[-1])])
        regs = ["<" + ", ".join(f"double {_hex(v)}" for v in padded[k:k + 8]) + ">"
                for k in range(0, size, 8)]
        v8, i8 = "<8 x double>", "<8 x i64>"
        parts = []
        for idx in self._eighths(index, "i64"):
            if size == 8:
                r = e(f"call {v8} @llvm.x86.avx512.permvar.df.512({v8} {regs[0]}, {i8} {idx})")
            else:
                r = e(f"call {v8} @llvm.x86.avx512.vpermi2var.pd.512({v8} {regs[0]}, {i8} {idx}, "
                      f"{v8} {regs[1]})")
                if size == 32:
                    hi = e(f"call {v8} @llvm.x86.avx512.vpermi2var.pd.512({v8} {regs[2]}, "
                           f"{i8} {idx}, {v8} {regs[3]})")
                    bit = e(f"and {i8} {idx}, <" + ", ".join("i64 16" for _ in range(8)) + ">")
                    up = e(f"icmp ne {i8} {bit}, zeroinitializer")
                    r = e(f"select <8 x i1> {up}, {v8} {hi}, {v8} {r}")
            parts.append(r)
        return self._concat(parts)

    def count_le(self, x, t0, tlen):
        """Number of nodes tab[t0:t0+tlen] (ascending) <= x, NaN: tlen, as int64. With
        table lookups by permutes, a branch-free binary search over the nodes padded with
        +inf to a power of two; else one vector comparison per node."""
        e = self.e
        nodes = self.p.table_data[t0:t0 + tlen]
        size = 1
        while size < tlen + 1:
            size *= 2
        if not (self.avx512 and size <= PERM_MAX) or np.any(nodes[1:] < nodes[:-1]):
            cnt = e.isplat(0)
            for k in range(tlen):
                ge = e(f"zext {e.bt} {e.cmp('oge', x, e.splat(nodes[k]))} to {e.it}")
                cnt = e(f"add {e.it} {cnt}, {ge}")
            return e(f"select {e.bt} {e.cmp('uno', x, x)}, {e.it} {e.isplat(tlen)}, {e.it} {cnt}")
        padded = np.concatenate([nodes, np.full(size - tlen, np.inf)])
        pos = e.isplat(0)
        step = size // 2
        while step:
            cand = e(f"add {e.it} {pos}, {e.isplat(step)}")
            probe = self.lookup(padded, e(f"sub {e.it} {cand}, {e.isplat(1)}"))
            pos = e(f"select {e.bt} {e.cmp('ole', probe, x)}, {e.it} {cand}, {e.it} {pos}")
            step //= 2
        pos = e(f"call {e.it} @llvm.smin.v{LANES}i64({e.it} {pos}, {e.it} {e.isplat(tlen)})")
        return e(f"select {e.bt} {e.cmp('uno', x, x)}, {e.it} {e.isplat(tlen)}, {e.it} {pos}")

    def interp(self, x, t0, t1, tlen):
        """numpy.interp as the interpreter computes it: ``(y1 - y0) / (x1 - x0) * (x - x0) +
        y0`` in the node's cell, the end values outside, NaN kept. Where the values are the
        node numbers (0, 1, 2...: a fractional index), (y1 - y0) / (x1 - x0) is
        1 / (x1 - x0), the same bits read from a table."""
        e = self.e
        tab = self.p.table_data
        xp, fp = tab[t0:t0 + tlen], tab[t1:t1 + tlen]
        last = tlen - 1
        if last == 0:
            return e.sel(e.cmp("uno", x, x), x, e.splat(fp[0]))
        j = e(f"sub {e.it} {self.count_le(x, t0, tlen)}, {e.isplat(1)}")
        j = e(f"call {e.it} @llvm.smax.v{LANES}i64({e.it} {j}, {e.it} {e.isplat(0)})")
        j = e(f"call {e.it} @llvm.smin.v{LANES}i64({e.it} {j}, {e.it} {e.isplat(last - 1)})")
        x0 = self.lookup(xp, j)
        if np.array_equal(fp, np.arange(tlen, dtype=float)):
            slope = self.lookup(1.0 / (xp[1:] - xp[:-1]), j)
            y0 = e(f"sitofp {e.it} {j} to {e.vt}")
        else:
            j1 = e(f"add {e.it} {j}, {e.isplat(1)}")
            y0 = self.lookup(fp, j)
            slope = e.fbin("fdiv", e.fbin("fsub", self.lookup(fp, j1), y0),
                           e.fbin("fsub", self.lookup(xp, j1), x0))
        y = e.fbin("fadd", e.fbin("fmul", slope, e.fbin("fsub", x, x0)), y0)
        y = e.sel(e.cmp("ole", x, e.splat(xp[0])), e.splat(fp[0]), y)
        y = e.sel(e.cmp("oge", x, e.splat(xp[last])), e.splat(fp[last]), y)
        return e.sel(e.cmp("uno", x, x), x, y)

    def take(self, x, t0, tlen):
        e = self.e
        # int(x) clamped to [0, tlen - 1], NaN to 0: clamped first as floats (in range, the
        # conversion is one vector instruction)
        xc = e.sel(e.cmp("ogt", x, e.splat(0.0)), x, e.splat(0.0))
        xc = e.sel(e.cmp("olt", xc, e.splat(tlen - 1.0)), xc, e.splat(tlen - 1.0))
        k = e(f"fptosi {e.vt} {xc} to {e.it}")
        return self.lookup(self.p.table_data[t0:t0 + tlen], k)

    # ---- one instruction ------------------------------------------------------------------
    def instruction(self, op, a, b, c, k, t0, t1, tlen):
        e = self.e
        K = e.splat(k)
        zero = e.splat(0.0)
        name = _NAME[op]
        simple = {"add": ("fadd", a, b), "sub": ("fsub", a, b), "mul": ("fmul", a, b),
                  "div": ("fdiv", a, b), "add_k": ("fadd", a, K), "mul_k": ("fmul", a, K),
                  "sub_k": ("fsub", a, K), "ksub": ("fsub", K, a), "div_k": ("fdiv", a, K),
                  "kdiv": ("fdiv", K, a)}
        if name in simple:
            return e.fbin(*simple[name])
        if name == "muladd":
            return e.fbin("fadd", e.fbin("fmul", a, b), c)
        if name == "muladd_k":
            return e.fbin("fadd", e.fbin("fmul", a, K), b)
        if name in ("max", "max_k", "min", "min_k"):
            y = b if name in ("max", "min") else K
            pred = "ogt" if name.startswith("max") else "olt"
            if self.avx512:     # vmaxpd/vminpd (a > y ? a : y), a NaN a put back: 2 instructions
                return self.nan_of(a, e.sel(e.cmp(pred, a, y), a, y))
            return e.sel(e.bor(e.cmp(pred, a, y), e.cmp("uno", a, a)), a, y)
        cmps = {"gt": ("ogt", a, b), "ge": ("oge", a, b), "lt": ("olt", a, b),
                "le": ("ole", a, b), "eq": ("oeq", a, b), "ne": ("une", a, b),
                "gt_k": ("ogt", a, K), "ge_k": ("oge", a, K), "lt_k": ("olt", a, K),
                "le_k": ("ole", a, K), "not": ("oeq", a, zero)}
        if name in cmps:
            return e.flag(e.cmp(*cmps[name]))
        if name == "and":
            return e.flag(e.band(e.cmp("une", a, zero), e.cmp("une", b, zero)))
        if name == "or":
            return e.flag(e.bor(e.cmp("une", a, zero), e.cmp("une", b, zero)))
        if name == "where":
            return e.sel(e.cmp("une", a, zero), b, c)
        if name == "where_kb":
            return e.sel(e.cmp("une", a, zero), K, b)
        if name == "where_kc":
            return e.sel(e.cmp("une", a, zero), b, K)
        if name == "neg":
            return e(f"fneg {e.vt} {a}")
        if name in ("sqrt", "floor", "ceil", "trunc"):
            return e.intrinsic(name, a)
        if name == "abs":
            return e.intrinsic("fabs", a)
        if name == "exp":
            return self.exp(a)
        if name == "log":
            return self.log(a)
        if name == "pow":
            return self.pow(a, b)
        if name == "log1p":
            return self._fixup(a, e.cmp("true", a, a), "log1p", a)
        if name == "interp":
            return self.interp(a, t0, t1, tlen)
        if name == "search_right":
            return e(f"sitofp {e.it} {self.count_le(a, t0, tlen)} to {e.vt}")
        if name == "take":
            return self.take(a, t0, tlen)
        raise NotImplementedError(name)

    def module(self) -> str:
        """The LLVM module: ``kernel`` loops over vectors of points; each program register is
        a stack slot (promoted to SSA values by LLVM), inputs are loaded into theirs, the
        instructions run in order (a ``skip`` branches over its region), and the output
        registers are stored; the tables read lane by lane are one constant array."""
        p, e = self.p, self.e
        vt = e.vt
        code, imm = p.code, p.immediates
        names, uniq, _, _ = p.layout
        e.raw("define void @kernel(ptr noalias %xs, ptr noalias %ys, i64 %lo, i64 %hi) #0 {")
        e.start("entry")
        slots = [e(f"alloca {vt}, align 64") for _ in range(p.n_regs)]
        for r, v in zip(p.const_regs.tolist(), p.const_values.tolist()):
            e.raw(f"  store {vt} {e.splat(v)}, ptr {slots[r]}")
        ins = []
        for j in range(len(p.inputs)):
            a = e(f"getelementptr i64, ptr %xs, i64 {j}")
            ins.append(e(f"inttoptr i64 {e(f'load i64, ptr {a}')} to ptr"))
        outs = []
        for j in range(len(uniq)):
            a = e(f"getelementptr i64, ptr %ys, i64 {j}")
            outs.append(e(f"inttoptr i64 {e(f'load i64, ptr {a}')} to ptr"))
        e.raw("  br label %loop")
        e.start("loop")
        e.raw("  %i = phi i64 [ %lo, %entry ], [ %inext, %latch ]")
        for ptr, r in zip(ins, p.input_regs.tolist()):
            g = e(f"getelementptr double, ptr {ptr}, i64 %i")
            e.raw(f"  store {vt} {e(f'load {vt}, ptr {g}, align 8')}, ptr {slots[r]}")
        targets: dict[int, str] = {}
        n = code.shape[0]
        for j in range(n):
            if j in targets:
                e.raw(f"  br label %{targets[j]}")
                e.start(targets[j])
            op, o, ra, rb, rc, t0, t1, tlen = (int(v) for v in code[j])
            a, b, c = (e(f"load {vt}, ptr {slots[r]}") for r in (ra, rb, rc))
            if op == OP["skip"]:
                body, end = self.label(), targets.get(j + 1 + t0) or self.label()
                targets[j + 1 + t0] = end
                live = e.any(e.cmp("une", a, e.splat(0.0)))
                e.raw(f"  br i1 {live}, label %{body}, label %{end}")
                e.start(body)
                continue
            v = self.instruction(op, a, b, c, float(imm[j]), t0, t1, tlen)
            e.raw(f"  store {vt} {v}, ptr {slots[o]}")
        if n in targets:
            e.raw(f"  br label %{targets[n]}")
            e.start(targets[n])
        e.raw("  br label %latch")
        e.start("latch")
        for ptr, r in zip(outs, uniq.tolist()):
            g = e(f"getelementptr double, ptr {ptr}, i64 %i")
            e.raw(f"  store {vt} {e(f'load {vt}, ptr {slots[r]}')}, ptr {g}, align 8")
        e.raw(f"  %inext = add i64 %i, {LANES}")
        e.raw("  %more = icmp slt i64 %inext, %hi")
        e.raw("  br i1 %more, label %loop, label %exit")
        e.raw("exit:")
        e.raw("  ret void")
        e.raw("}")
        tab = np.concatenate(self.extra) if self.extra else np.zeros(1)
        table = (f"@tab = private unnamed_addr constant [{tab.size} x double] ["
                 + ", ".join(f"double {_hex(v)}" for v in tab.tolist()) + "], align 64")
        bits = 64 * LANES
        attrs = (f'attributes #0 = {{ nounwind "prefer-vector-width"="{bits}" '
                 f'"min-legal-vector-width"="{bits}" }}\n'
                 f'attributes #1 = {{ noinline nounwind "prefer-vector-width"="{bits}" '
                 f'"min-legal-vector-width"="{bits}" }}')
        funcs = [line for body in self.funcs.values() for line in body]
        return "\n".join([table, _declarations(self.avx512), *funcs, *e.lines, attrs]) + "\n"


# ---- compile, cache, run ----------------------------------------------------------------------

#: Whether point lists use compiled kernels at all (else the interpreter runs every one).
ENABLED = True

#: A new kernel is compiled once a process has run this many points through its program (in
#: one call or several: compiling costs about as much as interpreting 1-4 times as many); a
#: kernel already compiled (in this process or cached on disk) is used for any point list the
#: fused pass takes.
COMPILE_MIN_POINTS = 1 << 19

_LOCK = threading.Lock()
_STATE: dict = {}
_KERNELS: dict[str, "Kernel | None"] = {}     # digest of the IR -> kernel (None: failed)
_POINTS_SEEN: dict[str, int] = {}             # digest -> points interpreted in this process
_MAX_KERNELS = 64


def _target():
    """llvmlite, and a target machine for this CPU (its name and features)."""
    with _LOCK:
        if not _STATE:
            import llvmlite
            import llvmlite.binding as ll
            ll.initialize_native_target()
            ll.initialize_native_asmprinter()
            cpu, features = ll.get_host_cpu_name(), ll.get_host_cpu_features().flatten()
            _STATE.update(ll=ll, tag=f"{llvmlite.__version__}|{cpu}|{features}",
                          tm=_machine(ll, cpu, features), cpu=cpu, features=features)
    return _STATE["ll"], _STATE["tm"], _STATE["tag"]


def _machine(ll, cpu, features):
    """A target machine for this CPU (an execution engine takes ownership of its own)."""
    return ll.Target.from_default_triple().create_target_machine(
        cpu=cpu, features=features, opt=3, codemodel="jitdefault")


def cache_dir() -> Path:
    """Where compiled kernels are kept: ``$INFERENCE_FACTORY_CACHE_DIR``, else the user's
    cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``) under ``inference-factory/kernels``."""
    root = os.environ.get("INFERENCE_FACTORY_CACHE_DIR")
    if root:
        return Path(root) / "kernels"
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base) / "inference-factory" / "kernels"


class Kernel:
    """A program's machine code, ``kernel(xs, ys, lo, hi)``: points ``lo .. hi`` (``hi - lo``
    a multiple of :data:`LANES`) of the inputs at the addresses ``xs`` into the outputs at
    ``ys`` (``program.layout``'s registers)."""

    def __init__(self, obj: bytes):
        ll = _target()[0]
        with _llvm_lock():
            # the engine owns (and frees) its target machine: a new one each
            tm = _machine(ll, _STATE["cpu"], _STATE["features"])
            self.engine = ll.create_mcjit_compiler(ll.parse_assembly(""), tm)
            self.engine.add_object_file(ll.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()
            addr = self.engine.get_function_address("kernel")
        if not addr:
            raise RuntimeError("compiled kernel has no entry point")
        self.fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                   ctypes.c_int64)(addr)

    def __call__(self, xa: np.ndarray, ya: np.ndarray, lo: int, hi: int):
        if hi > lo:                  # ctypes releases the GIL for the call
            self.fn(xa.ctypes.data, ya.ctypes.data, lo, hi)


def _llvm_lock():
    """The lock numba holds while it uses LLVM: LLVM's global context and a target machine
    are not safe for two threads at once (ours, or ours and numba's)."""
    from numba.core.compiler_lock import global_compiler_lock
    return global_compiler_lock


def compile_ir(text: str, speed_level: int = 2) -> bytes:
    """Object code of the LLVM module ``text``, optimised for this CPU."""
    ll, tm, _ = _target()
    with _llvm_lock():
        mod = ll.parse_assembly(text)
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
        pb = ll.create_pass_builder(tm, ll.create_pipeline_tuning_options(
            speed_level=speed_level))
        pb.getModulePassManager().run(mod, pb)
        return tm.emit_object(mod)


def kernel_for(program, n_points: int) -> Kernel | None:
    """The compiled kernel of ``program``: from this process, else from the disk cache, else
    compiled now once this process has run :data:`COMPILE_MIN_POINTS` points through the
    program (this call's ``n_points`` included); None otherwise (and where LLVM fails: the
    interpreter runs instead)."""
    try:
        tag = _target()[2]
    except Exception:               # no usable LLVM target: interpret
        return None
    key = _key(program, tag)
    if key in _KERNELS:
        return _KERNELS[key]
    path = cache_dir() / f"{key}.o"
    obj = None
    if path.is_file():
        try:
            data = path.read_bytes()
        except OSError:
            data = b""
        # the file starts with the digest of the object code: a truncated or corrupted file
        # is compiled again (LLVM would abort the process on a broken object)
        if data[:32] == hashlib.sha256(data[32:]).digest():
            obj = data[32:]
    if obj is None:
        # points this process has run through the program (a Monte Carlo loop of modest
        # calls reaches the threshold too)
        _POINTS_SEEN[key] = seen = _POINTS_SEEN.get(key, 0) + n_points
        if seen < COMPILE_MIN_POINTS:
            if len(_POINTS_SEEN) > 4 * _MAX_KERNELS:
                _POINTS_SEEN.pop(next(iter(_POINTS_SEEN)))
            return None
        try:
            obj = compile_ir(_Codegen(program).module())
        except Exception:
            _KERNELS[key] = None
            return None
        _store(path, obj)
    else:
        _touch(path)
    try:
        kernel = Kernel(obj)
    except Exception:
        kernel = None
    if len(_KERNELS) >= _MAX_KERNELS:
        _KERNELS.pop(next(iter(_KERNELS)))
    _KERNELS[key] = kernel
    return kernel


def _key(program, tag: str) -> str:
    """Digest of everything the generated code depends on: the program's arrays, this
    module's source (the code generator) and the LLVM version and CPU."""
    if "source" not in _STATE:
        _STATE["source"] = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    h = hashlib.sha256(f"{_STATE['source']}|{tag}|{LANES}|{AVX512}|{PERM_MAX}|"
                       f"{OUTLINE_MIN_INSTRUCTIONS}|{program.n_regs}".encode())
    for a in (program.code, program.immediates, program.table_data, program.const_regs,
              program.const_values, program.input_regs, program.layout[1]):
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _store(path: Path, obj: bytes):
    """Write ``obj`` to ``path`` after its SHA-256 digest, atomically (a temporary file
    renamed), then trim the folder to :data:`MAX_CACHED_KERNELS`; nothing if the cache
    folder cannot be written."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as f:
            tmp = f.name
            f.write(hashlib.sha256(obj).digest() + obj)
        os.replace(tmp, path)
        tmp = None
        _trim(path.parent)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


#: Kernels kept on disk (100-300 kB each); beyond, the least recently used are removed.
MAX_CACHED_KERNELS = 512

_KERNEL_FILE = re.compile(r"[0-9a-f]{64}\.o")


def _touch(path: Path):
    """Mark a cached kernel as used now (its modification time orders the trimming)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _trim(folder: Path):
    """Remove the least recently used kernel files beyond :data:`MAX_CACHED_KERNELS` (only
    files named as this module names them)."""
    files = [f for f in folder.iterdir() if _KERNEL_FILE.fullmatch(f.name)]
    if len(files) <= MAX_CACHED_KERNELS:
        return
    def used(f):
        try:
            return f.stat().st_mtime
        except OSError:
            return 0.0
    for f in sorted(files, key=used)[:len(files) - MAX_CACHED_KERNELS]:
        with contextlib.suppress(OSError):
            f.unlink()
