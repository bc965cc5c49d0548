"""The operating points of one side: the prefill pass over candidate batches
(:func:`prefill_arrays`); engine decode step times over (class, draft depth, batch) for a pool
(:func:`decode_grid`), and the depths and batch chosen from them for a TPOT SLO
(:func:`decode_point`), under continuous or static batching (:func:`static_batch_index`).
Every step time comes from the engine (:func:`inference_factory.engine.evaluate_arrays`).
:func:`memoised` keeps engine results within one run (compare's sides share most of them)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..engine import evaluate_arrays, mtp_acceptance_by_position
from ..kernels import roofline as kroof
from ..kernels.serving import static_fill_time_s
from ..specs import ModelSpec
from .config import FactoryConfig, Levers, PoolConfig
from .workload import Trace


def _batch_grid(max_batch: int) -> np.ndarray:
    grid = np.unique(np.concatenate([np.geomspace(1, max_batch, 48).round(), [max_batch]]))
    return grid[grid >= 1]


#: above this many per-class depth combinations the depths are chosen per class (argmax of
#: each class's own rate) instead of jointly
_MAX_DEPTH_COMBOS = 4096


@dataclass
class DecodeGrid:
    """Engine decode step times over (class, draft depth, batch per attention-DP rank) for one
    pool, precisions and levers: what every decode operating-point choice reads from."""

    batch: np.ndarray             # (batch,) sequences per attention-DP rank
    depths: np.ndarray            # (depth,) draft depths evaluated
    step_s: np.ndarray            # (class, depth, batch) verify-step time [s]
    draft_s: np.ndarray           # (class, depth, batch) of which drafting [s]
    tokens_per_step: np.ndarray   # (class, depth)
    binding: np.ndarray           # (depth, batch) binding resource (first class)
    expert_efficiency: np.ndarray  # (depth, batch)
    fits_batch_max: float
    out_share: np.ndarray         # (class,) output-token share
    tp: int
    dp: int

    @cached_property
    def table(self):
        """Every candidate (per-class depths, batch): the depth combinations (combo, class),
        their tokens per step (combo, class), the mixed step (combo, batch), output tokens/s
        per GPU (combo, batch) and per-class TPOT (combo, class, batch). Computed once per
        grid; every operating-point choice (any SLO, static or not) reads it."""
        ci = np.arange(self.step_s.shape[0])
        combos = _depth_choices(self)
        st = self.step_s[ci[None, :], combos, :]                           # (combo, class, batch)
        tk = self.tokens_per_step[ci[None, :], combos]                      # (combo, class)
        step_mix = np.einsum("c,kcb->kb", self.out_share, st)               # (combo, batch)
        tput = kroof.tokens_per_s_per_gpu(seqs_per_rank=self.batch[None, :],
                                          tokens_per_seq=(tk @ self.out_share)[:, None],
                                          step_s=step_mix, tp=self.tp)
        tpot = step_mix[:, None, :] / tk[:, :, None]                       # (combo, class, batch)
        return combos, tk, step_mix, tput, tpot

    @cached_property
    def tpot_max(self) -> np.ndarray:
        """The slowest class's TPOT of every candidate (combo, batch)."""
        return self.table[4].max(axis=1)


def _on_grid(da, dims: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
    """``da``'s values laid out on ``dims`` (in that order) and broadcast over the ones it
    lacks: what ``broadcast_like`` then ``.values`` give, without xarray's alignment (a few
    ms per call)."""
    own = [d for d in dims if d in da.dims]
    v = np.transpose(da.values, [da.dims.index(d) for d in own])
    v = v.reshape([n if d in da.dims else 1 for d, n in zip(dims, shape)])
    return np.array(np.broadcast_to(v, shape))


def _full(v, shape: tuple[int, ...]) -> np.ndarray:
    """An output of :func:`~inference_factory.engine.evaluate_arrays` (broadcastable to
    ``shape``) as a full array of that shape."""
    return np.array(np.broadcast_to(np.asarray(v), shape))


def array_key(a) -> tuple | None:
    """A hashable stand-in for an array's values (dtype, shape and bytes); None stays None."""
    if a is None:
        return None
    a = np.ascontiguousarray(a)
    return (a.dtype.str, a.shape, a.tobytes())


def memoised(memo: dict | None, key: tuple, keep: tuple, compute):
    """``compute()``, kept in ``memo`` under ``key`` (no memo: computed each time). ``keep``
    holds the objects whose ``id`` is in the key alive with the entry, so no later object
    can take an id over while the entry stands."""
    if memo is None:
        return compute()
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = (compute(), keep)
    return hit[0]


def decode_grid(cfg: FactoryConfig, m: ModelSpec, pool: PoolConfig, prec: dict, kw: dict,
                trace: Trace, kv_len: float, out_share: np.ndarray, levers: Levers,
                popularity, *, speculative: bool | None = None,
                memo: dict | None = None) -> DecodeGrid:
    """Evaluate the decode step of every class over the batch grid and the draft depths the
    speculative lever allows (depth 0 only when it is off). Acceptance per position decays
    geometrically from each class's first-position acceptance (``configs/realism.toml``
    ``[speculative]``). With ``memo`` a grid already evaluated on the same inputs is reused
    (the sides of one compare share most of them; grids are read, never changed)."""
    spec_on = levers.speculative if speculative is None else speculative
    rl = kw.get("realism")
    key = ("decode_grid", id(m), pool, tuple(sorted(prec.items())),
           tuple(sorted((k, id(v) if k == "realism" else v) for k, v in kw.items())),
           float(kv_len), array_key(np.asarray(out_share, dtype=float)),
           array_key(np.asarray(trace.acceptance_rate, dtype=float)), len(trace.class_names),
           bool(spec_on), array_key(popularity))
    return memoised(memo, key, (m, rl), lambda: _decode_grid(
        m, pool, prec, kw, trace, kv_len, out_share, spec_on, popularity))


def _decode_grid(m: ModelSpec, pool: PoolConfig, prec: dict, kw: dict, trace: Trace,
                 kv_len: float, out_share: np.ndarray, spec_on: bool, popularity) -> DecodeGrid:
    n_cls = len(trace.class_names)
    max_b = pool.max_batch_per_gpu * pool.tp
    grid = _batch_grid(max_b)
    depths = list(range(pool.max_draft_depth + 1)) if (spec_on and m.n_mtp_modules) else [0]
    shape = (len(depths), grid.size)
    step = np.empty((n_cls, *shape))
    toks = np.empty((n_cls, len(depths)))
    draft = np.empty((n_cls, *shape))
    fits = binding = eff = None
    d_axis = np.asarray(depths, dtype=float)[:, None]
    for c in range(n_cls):
        acc = mtp_acceptance_by_position(float(trace.acceptance_rate[c]),
                                         max(max(depths), 1))
        r = evaluate_arrays(m, pool.hardware, tp=pool.tp, dp=pool.dp, ep=pool.ep, **prec, **kw,
                            batch_size=grid[None, :], kv_len=kv_len, draft_depth=d_axis,
                            acceptance_by_position=list(acc), expert_popularity=popularity)
        step[c] = _full(r["decode_step_s"], shape)
        draft[c] = _full(r["decode_draft_s"], shape)
        # batch-independent; a one-point batch grid carries it along batch_size too
        toks[c] = _full(r["tokens_per_step"], shape)[:, 0]
        if fits is None:
            fits = float(np.min(r["max_batch_size"]))
            binding = _full(r["decode_binding_resource"], shape)
            eff = _full(r["expert_efficiency_frac"], shape)
    return DecodeGrid(batch=grid, depths=np.array(depths), step_s=step, draft_s=draft,
                      tokens_per_step=toks, binding=binding, expert_efficiency=eff,
                      fits_batch_max=fits, out_share=out_share, tp=pool.tp, dp=pool.dp)


@dataclass
class DecodePoint:
    batch: float                  # sequences per attention-DP rank
    depth: np.ndarray             # draft depth per class
    tokens_per_step: np.ndarray   # per class
    step_s: float                 # mixed step time at the operating batch
    tput_per_gpu: float           # output tokens/s/GPU at the operating batch
    tpot_by_class_s: np.ndarray
    draft_share: float            # share of the step spent drafting
    expert_efficiency: float
    binding: str                  # binding resource at the operating point
    meets_slo: bool
    grid_batch: np.ndarray        # for interpolation at other occupancies
    grid_step_by_class: np.ndarray  # (class, batch) step times at the chosen depths
    fits_batch_max: float


def _depth_choices(g: DecodeGrid) -> np.ndarray:
    """Candidate per-class depth indices, (combo, class): every combination when there are
    few, else the depth of each class's own best rate at each batch."""
    n_cls, n_d = g.tokens_per_step.shape
    if n_d ** n_cls <= _MAX_DEPTH_COMBOS:
        return np.array(np.meshgrid(*[np.arange(n_d)] * n_cls, indexing="ij")).reshape(n_cls, -1).T
    best = (g.tokens_per_step[:, :, None] / g.step_s).argmax(axis=1)    # (class, batch)
    return np.unique(best.T, axis=0)


def decode_point(g: DecodeGrid, tpot_slo_s: float, *, batch_index: int | None = None) -> DecodePoint:
    """The decode operating point: the per-class draft depths and batch with the highest
    output tokens/s per GPU whose every class meets the TPOT SLO and whose KV fits in HBM.
    All classes share one batch; the step is their output-share-weighted mean. With
    ``batch_index`` the batch is fixed (static batching) and only the depths are chosen.
    Where no point meets the SLO the smallest batch is taken (``meets_slo`` False)."""
    n_cls = g.step_s.shape[0]
    w = g.out_share
    ci = np.arange(n_cls)
    combos, tk, step_mix, tput, tpot = g.table
    ok = (g.tpot_max <= tpot_slo_s) & (g.batch[None, :] <= g.fits_batch_max)
    if batch_index is not None:
        ok = ok & (np.arange(g.batch.size) == batch_index)[None, :]
    if ok.any():
        k, b = np.unravel_index(np.argmax(np.where(ok, tput, -np.inf)), tput.shape)
        meets = True
    else:
        b = batch_index if batch_index is not None else 0
        k = int(np.argmin(g.tpot_max[:, b]))
        meets = False
    depth_idx = combos[k]
    step_fixed = g.step_s[ci[:, None], depth_idx[:, None], np.arange(g.batch.size)[None, :]]
    draft = g.draft_s[ci, depth_idx, b]
    return DecodePoint(
        batch=float(g.batch[b]), depth=g.depths[depth_idx], tokens_per_step=tk[k],
        step_s=float(step_mix[k, b]), tput_per_gpu=float(tput[k, b]),
        tpot_by_class_s=tpot[k, :, b],
        draft_share=float((w * draft).sum() / step_mix[k, b]),
        expert_efficiency=float(g.expert_efficiency[depth_idx[0], b]),
        binding=str(g.binding[depth_idx[0], b]), meets_slo=meets, grid_batch=g.batch,
        grid_step_by_class=step_fixed, fits_batch_max=g.fits_batch_max)



def static_batch_index(g: DecodeGrid, pool: PoolConfig, rate_per_s: float, ttft_budget_s: float,
                       tpot_slo_s: float) -> int:
    """Static batching's batch: the largest grid batch (per attention-DP rank) that fits in
    HBM, meets the TPOT SLO, stays under the pool's ``static_batch_per_gpu`` cap (if any) and
    fills within the TTFT budget left after one prefill pass. The smallest batch if none."""
    fill = static_fill_time_s(batch_sequences=g.batch * pool.dp, arrival_rate_per_s=rate_per_s)
    ok = (fill <= ttft_budget_s) & (g.batch <= g.fits_batch_max)
    if pool.static_batch_per_gpu:
        ok &= g.batch <= pool.static_batch_per_gpu * pool.tp
    meets = ok & (g.tpot_max <= tpot_slo_s).any(axis=0)
    return int(np.flatnonzero(meets)[-1]) if meets.any() else 0


def prefill_arrays(m: ModelSpec, ppool: PoolConfig, prec_p: dict, overlap: str,
                   redundant_p: int, p_bar: float, batches: np.ndarray, hit: float, pop,
                   rl_kw: dict):
    """The prefill pass over ``batches`` prompts per pass: (step time [s], computed tokens/s
    per GPU, one per batch; weight bytes per GPU) from the engine."""
    r = evaluate_arrays(m, ppool.hardware, tp=ppool.tp, dp=ppool.dp, ep=ppool.ep, **prec_p,
                        overlap=overlap, redundant_experts=redundant_p, prompt_len=p_bar,
                        prefill_batch_size=batches, cache_hit_rate=hit,
                        expert_popularity=pop, **rl_kw)
    shape = batches.shape
    return (np.array(np.broadcast_to(r["prefill_step_s"], shape), dtype=float),
            np.array(np.broadcast_to(r["prefill_computed_tokens_per_s_per_gpu"], shape),
                     dtype=float),
            float(np.asarray(r["weight_bytes_per_gpu"]).reshape(-1)[0]))
