"""Prediction bands from component uncertainty: Monte Carlo draws over the sources of
``configs/uncertainty.toml`` (:mod:`..specs.uncertainty`), evaluated by the engine's own passes.

One draw perturbs, for every device, the ln time of every op **family** by one normal draw
of its spread (the same draw for every op of the family, in every pass of the evaluation:
errors of one kernel table are correlated, errors of two tables are not):

* an op costed from a measured table takes its family's leave-one-out spread on that device;
* an op on the roofline takes the spread of the roofline against the tables on the devices
  that have them, for its class (gemm, moe, attention, allreduce, a2a, other);
* the labelled assumptions the user left at their defaults (expert skew, context spread
  across DP ranks, acceptance, runtime memory reserve, SMs taken by overlapped communication)
  are drawn uniformly from their ranges, in ``levels`` Latin-hypercube strata (they are
  structural: one engine block per stratum, the draws of a stratum along one array axis).

The band is the (low, high) quantiles of the draws, never narrower than the point (the point
is always inside). The model-structure term (:func:`widen`, calibrated by
:mod:`..analysis.bands`) widens the band of throughputs and latencies by a factor each side;
it never moves the point. Deterministic under ``seed``.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Callable, Mapping

import numpy as np

from ..axes import NUMERIC_AXES
from ..errors import SpecError
from ..specs.realism import Realism
from ..specs.uncertainty import Uncertainty, load_uncertainty
from . import grid as G
from .measured import tables_for

#: Assumptions that are structural axes of the engine (one value per block).
STRUCT_ASSUMPTIONS = ("expert_skew", "context_cv")
#: Assumptions that are realism constants: field of :class:`Realism`.
REALISM_ASSUMPTIONS = {"runtime_reserve_frac": "runtime_reserve_frac",
                       "overlap_comm_sm_frac": "overlap_comm_sm_frac"}


def resolve(uncertainty) -> Uncertainty | None:
    """``True`` / "components" -> the bundled sources, an :class:`Uncertainty` as given,
    ``False`` / None -> None."""
    if uncertainty is None or uncertainty is False:
        return None
    if isinstance(uncertainty, Uncertainty):
        return uncertainty
    if uncertainty is True or uncertainty in ("components", "full"):
        return load_uncertainty()
    raise SpecError(f"uncertainty = {uncertainty!r} is not one of [True, False, 'components', "
                    "'full'] (or an Uncertainty object)")


# --------------------------------------------------------------------------------------------
# the per-op factors
# --------------------------------------------------------------------------------------------


def op_class(op) -> str:
    """Roofline class of an op (the keys of ``[roofline]``)."""
    if op.stream == "comm":
        return "allreduce" if op.family == "allreduce" else "a2a"
    if op.name == "other_kernels":
        return "other"
    return {"attention": "attention", "moe": "moe"}.get(op.rate, "gemm")


def op_key(g, cost, u: Uncertainty) -> tuple[str, float]:
    """(key of the op's draw, its ln spread): the measured family on the device where the
    cost came from a table, else the roofline class."""
    op = cost.op
    src = cost.source
    measured = callable(src) or not np.isscalar(src) or int(src) != G.ROOFLINE
    tabs = tables_for(g.hw) if measured else None
    if tabs is not None:
        if op.name == "other_kernels":
            family = "gemm"     # ASSUMPTION: the small kernels' floor is the fastest GEMM
        elif tabs.has(op.family) or not op.fallback:
            family = op.family
        else:
            family = op.fallback[0]
        return f"m|{g.hw.name}|{family}", u.family_sigma_ln(tabs.folder.name, family)
    cls = op_class(op)
    return f"r|{g.hw.name}|{cls}", u.roofline_sigma_ln[cls]


def standard_normal(seed: int, key: str, n: int) -> np.ndarray:
    """``n`` standard normal draws of one key, the same for the same (seed, key)."""
    return np.random.default_rng([seed, zlib.crc32(key.encode())]).standard_normal(n)


@dataclasses.dataclass
class OpFactors:
    """Multiplies each op's time by exp(sigma z) of its key, for the draws ``index`` (shaped
    ``shape`` so they broadcast along the draw axis of the block)."""

    u: Uncertainty
    seed: int
    n_draws: int
    index: np.ndarray
    shape: tuple
    log: dict = dataclasses.field(default_factory=dict)   # key -> sigma (what was drawn)

    def __call__(self, g, costs):
        for c in costs:
            key, sigma = op_key(g, c, self.u)
            self.log[key] = sigma
            if sigma > 0:
                z = standard_normal(self.seed, key, self.n_draws)[self.index]
                c.time_s = c.time_s * np.exp(sigma * z).reshape(self.shape)
        return costs


@dataclasses.dataclass(frozen=True, eq=False)
class PerturbedRealism(Realism):
    """The realism constants of one stratum of draws, with the op factors the costing applies
    (:func:`.cost.cost_ops` calls ``perturb_costs``)."""

    perturb_costs: Callable | None = None


def perturbed(rl: Realism, factors: OpFactors, **constants: float) -> PerturbedRealism:
    values = {f.name: getattr(rl, f.name) for f in dataclasses.fields(Realism)}
    values.update(constants)
    return PerturbedRealism(**values, perturb_costs=factors)


# --------------------------------------------------------------------------------------------
# the draws
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Stratum:
    index: np.ndarray                      # draw indices
    struct: dict[str, float]               # expert_skew / context_cv values (drawn ones)
    constants: dict[str, float]            # realism fields
    acceptance: np.ndarray | None          # per draw, or None (not drawn)


def strata(u: Uncertainty, free: set[str], n: int | None = None,
           seed: int | None = None) -> list[Stratum]:
    """The draws, split in ``u.levels`` strata: each structural assumption in ``free`` takes
    one value per stratum (stratified uniform over its range, strata permuted independently
    per assumption), acceptance one value per draw."""
    n = int(n or u.draws)
    seed = u.seed if seed is None else int(seed)
    k = max(1, min(u.levels, n))
    rng = np.random.default_rng([seed, 22])
    order = rng.permutation(n)
    groups = np.array_split(order, k)
    levels = {}
    for name in list(STRUCT_ASSUMPTIONS) + list(REALISM_ASSUMPTIONS):
        if name in free and name in u.ranges:
            lo, hi = u.ranges[name]
            levels[name] = lo + (hi - lo) * (rng.permutation(k) + rng.random(k)) / k
    acc = None
    if "acceptance_rate" in free and "acceptance_rate" in u.ranges:
        lo, hi = u.ranges["acceptance_rate"]
        acc = lo + (hi - lo) * rng.random(n)
    out = []
    for i, idx in enumerate(groups):
        idx = np.sort(idx)
        out.append(Stratum(
            index=idx,
            struct={s: float(levels[s][i]) for s in STRUCT_ASSUMPTIONS if s in levels},
            constants={REALISM_ASSUMPTIONS[s]: float(levels[s][i])
                       for s in REALISM_ASSUMPTIONS if s in levels},
            acceptance=None if acc is None else acc[idx]))
    return out


def max_skew(model) -> float:
    """The largest Zipf skew a model's routing admits (its top expert gets at most every
    token: k p_max <= 1), by bisection; the range's upper end is cut there."""
    from ..kernels.moe import zipf_popularity
    from ..specs import load_model

    m = load_model(model)
    n, k = m.n_routed_experts, m.experts_per_token
    if not n or not k:
        return 4.0
    lo, hi = 0.0, 4.0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        ok = zipf_popularity(n_experts=n, skew=mid).max() * k <= 1.0 - 1e-6
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo


def free_assumptions(u: Uncertainty, kwargs: Mapping[str, Any]) -> set[str]:
    """The assumptions a call leaves at their defaults (only those are drawn)."""
    free = {"runtime_reserve_frac", "overlap_comm_sm_frac"}
    for s in STRUCT_ASSUMPTIONS:
        if kwargs.get(s) is None:
            free.add(s)
    if "acceptance_rate" not in kwargs and np.any(np.asarray(kwargs.get("draft_depth", 0)) > 0):
        free.add("acceptance_rate")
    return free & set(u.ranges)


# --------------------------------------------------------------------------------------------
# bands
# --------------------------------------------------------------------------------------------


def widened_variable(name: str) -> bool:
    """Outputs the model-structure term widens: throughputs and times (what it was
    calibrated on), not memory or counts."""
    return "tokens_per_s" in name or name.endswith("_s")


def structure_ln(u: Uncertainty, hw) -> float:
    """ln widening of the model-structure term for a device: measured or roofline-only."""
    return u.conformal_ln["measured" if tables_for(hw) is not None else "roofline_only"]


def widen(low, high, widen_ln: float):
    """Band widened by ``exp(widen_ln)`` each side: ``low e^-w``, ``high e^w`` (the point is
    not moved; a band of a positive quantity stays positive)."""
    f = np.exp(widen_ln)
    return np.asarray(low) / f, np.asarray(high) * f


def band(draws: np.ndarray, point, quantiles, method: str = "linear"
         ) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) quantiles over axis 0 (``np.quantile``'s ``method``), widened to hold
    the point."""
    lo, hi = np.quantile(draws, [quantiles[0], quantiles[2]], axis=0, method=method)
    p = np.asarray(point, dtype=float)
    return np.fmin(lo, p), np.fmax(hi, p)


def widened_band(draws: np.ndarray, point, quantiles, widen_ln: float = 0.0,
                 method: str = "linear") -> tuple[np.ndarray, np.ndarray]:
    """The tail of every prediction band: :func:`band` of the draws (holding the point),
    then :func:`widen` by the model-structure term where ``widen_ln`` is non-zero."""
    lo, hi = band(draws, point, quantiles, method)
    return widen(lo, hi, widen_ln) if widen_ln else (lo, hi)


def sample_arrays(evaluate_arrays, model, hardware, u: Uncertainty, *, realism: Realism,
                  n: int | None = None, seed: int | None = None,
                  **kwargs) -> tuple[dict[str, np.ndarray], dict]:
    """Draws of every float output of :func:`.arrays.evaluate_arrays` (axis 0: the draw),
    and what was drawn (keys -> sigma, the assumption values)."""
    n = int(n or u.draws)
    seed = u.seed if seed is None else int(seed)
    numeric = {k: v for k, v in kwargs.items() if np.ndim(v) > 0 and not isinstance(v, str)}
    depth = max((np.ndim(v) for v in numeric.values()), default=0)
    out: dict[str, list] = {}
    info: dict = {"sigma_ln": {}, "assumptions": {}}
    for st in strata(u, free_assumptions(u, kwargs), n, seed):
        shape = (st.index.size,) + (1,) * depth
        factors = OpFactors(u, seed, n, st.index, shape)
        kw = dict(kwargs)
        kw.update(st.struct)
        if "expert_skew" in st.struct:
            kw["expert_skew"] = min(st.struct["expert_skew"], max_skew(model))
        acc = st.acceptance if st.acceptance is not None else kw.get("acceptance_rate", NUMERIC_AXES["acceptance_rate"][0])
        acc = np.asarray(acc, dtype=float)
        acc = acc.reshape(shape) if st.acceptance is not None else (
            acc.reshape((1,) * (depth - acc.ndim) + acc.shape)[None] * np.ones(shape))
        kw["acceptance_rate"] = acc
        res = evaluate_arrays(model, hardware, realism=perturbed(realism, factors, **st.constants),
                              **kw)
        for k, v in res.items():
            v = np.asarray(v)
            if v.dtype.kind != "f":
                continue
            v = v.reshape((1,) * (depth + 1 - v.ndim) + v.shape)
            out.setdefault(k, []).append(np.broadcast_to(v, (st.index.size,) + v.shape[1:]))
        info["sigma_ln"].update(factors.log)
        for name, val in {**st.struct, **st.constants}.items():
            info["assumptions"].setdefault(name, []).append(val)
    draws = {}
    for k, v in out.items():
        tail = np.broadcast_shapes(*(x.shape[1:] for x in v))
        draws[k] = np.concatenate([np.broadcast_to(x, x.shape[:1] + tail) for x in v], axis=0)
    return draws, info


def bands_arrays(evaluate_arrays, model, hardware, uncertainty, *, realism: Realism,
                 **kwargs) -> dict[str, np.ndarray]:
    """The point outputs of :func:`.arrays.evaluate_arrays` plus ``<name>_low`` and
    ``<name>_high`` of every float output: the component band, widened by the model-structure
    term unless ``uncertainty="components"``. ``_band_structure_ln`` holds the widening."""
    from ..specs import load_hardware

    u = resolve(uncertainty)
    if realism.is_ideal:
        raise SpecError("uncertainty needs the realism terms: the ideal roofline has no "
                        "measured spread; drop --ideal")
    point = evaluate_arrays(model, hardware, realism=realism, **kwargs)
    draws, _ = sample_arrays(evaluate_arrays, model, hardware, u, realism=realism, **kwargs)
    w = 0.0 if uncertainty == "components" else structure_ln(u, load_hardware(hardware))
    out = dict(point)
    for k, d in draws.items():
        lo, hi = widened_band(d, point[k], u.quantiles, w if widened_variable(k) else 0.0)
        out[f"{k}_low"], out[f"{k}_high"] = lo, hi
    out["band_structure_ln"] = np.asarray(w)
    return out


def bands_dataset(evaluate, model, hardware, uncertainty, *, realism: Realism, **kwargs):
    """:func:`.evaluate.evaluate` with a ``quantile`` dimension (low, middle, high of
    ``u.quantiles``) on every float variable: the middle is the point, low and high the band
    (the component band widened by the model-structure term unless "components"). One model
    and one hardware per call; the draws ride on a ``draw`` dimension put first."""
    import xarray as xr

    from ..specs import load_hardware
    from .inputs import _as_axis, _raw_axes

    u = resolve(uncertainty)
    if realism.is_ideal:
        raise SpecError("uncertainty needs the realism terms: drop ideal")
    if isinstance(model, (list, tuple)) or isinstance(hardware, (list, tuple)) or any(
            isinstance(kwargs.get(s), (list, tuple)) for s in ("tp", "dp", "ep")
            + STRUCT_ASSUMPTIONS):
        raise SpecError("evaluate(uncertainty=...) takes one model, one hardware and one "
                        "layout; loop over the others")
    point = evaluate(model, hardware, realism=realism, **kwargs)
    parts = []
    for st in strata(u, free_assumptions(u, kwargs), u.draws, u.seed):
        draw = xr.DataArray(np.ones(st.index.size), dims="draw")
        kw = dict(kwargs)
        kw.update(st.struct)
        if "expert_skew" in st.struct:
            kw["expert_skew"] = min(st.struct["expert_skew"], max_skew(model))
        bs = _as_axis("batch_size", kw.get("batch_size", NUMERIC_AXES["batch_size"][0]))
        kw["batch_size"] = (draw * bs).transpose("draw", ...)
        if st.acceptance is not None:
            kw["acceptance_rate"] = xr.DataArray(st.acceptance, dims="draw")
        axes = {k: _as_axis(k, kw.get(k, v[0])) for k, v in NUMERIC_AXES.items()}
        order = _raw_axes(axes)[0]
        shape = (st.index.size,) + (1,) * (len(order) - 1)
        rl = perturbed(realism, OpFactors(u, u.seed, u.draws, st.index, shape), **st.constants)
        parts.append(evaluate(model, hardware, realism=rl, **kw))
    floats = [k for k in point.data_vars if point[k].dtype.kind == "f"]
    draws = xr.concat([p[floats] for p in parts], dim="draw", data_vars="all",
                      coords="minimal", compat="override")
    w = 0.0 if uncertainty == "components" else structure_ln(u, load_hardware(hardware))
    out = point.copy()
    lo_q, _, hi_q = u.quantiles
    for k in floats:
        q = draws[k].quantile([lo_q, hi_q], dim="draw")
        lo, hi = (np.fmin(q.isel(quantile=0, drop=True), point[k]),
                  np.fmax(q.isel(quantile=1, drop=True), point[k]))
        if w and widened_variable(k):
            lo, hi = lo / np.exp(w), hi * np.exp(w)
        out[k] = xr.concat([lo, point[k], hi], dim=xr.DataArray(
            list(u.quantiles), dims="quantile", name="quantile")).assign_attrs(point[k].attrs)
    out["quantile"].attrs.update(long_name="quantile of the prediction band (middle: the point)")
    out.attrs.update(band_structure_ln=w, band_draws=u.draws, band_seed=u.seed,
                     uncertainty_source=u.source)
    return out
