"""The compiled interpreter of a :class:`.program.Program`: one pass over the points, block by
block, every instruction applied to a whole block of registers (numba, on every core).

Each instruction is the elementwise numpy operation it was recorded from, with numpy's
semantics (NaN propagation of ``maximum``/``minimum``, IEEE division, ``interp`` clamped at
the end nodes). Compiled code is cached on disk (``cache=True``). This module is the entry
(:func:`run`, :func:`run_point`, the output memory pool, the tunables); the block loop is in
:mod:`.interp_block`, its exp, log, pow and interp in :mod:`.interp_math`.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
from numba import get_num_threads, njit

from .interp_block import _blocks, _run
from .interp_math import _JIT
# the building blocks, as tests check them against numpy's
from .interp_math import _count_le, _exp_block, _interp_block, _log_block, _pow_block  # noqa: F401

#: Points per block: a block's live registers stay in the core's L2 cache, and the cost of
#: dispatching an instruction is spread over many points.
BLOCK_POINTS = 512


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
