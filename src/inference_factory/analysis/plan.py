"""Deployment planning: from a GPU budget and SLOs to one recommended deployment per device.

:func:`plan` searches, per hardware type, every instance shape within the GPU budget
(tensor, attention-data and expert parallelism), aggregated serving (one pool time-shares
prefill and decode) and prefill/decode disaggregation (two pools, each with its own shape),
the factory's two precision profiles (its ``low_precision`` lever), the two-batch overlap
policy (MoE), the decode batch, the speculative draft depth and the prefill batch. Each
shape's grid of candidates (overlap x decode batch x draft depth x prefill batch) is one
vectorized engine pass (:func:`inference_factory.engine.evaluate_arrays`), priced with
:func:`inference_factory.analysis.economics.usd_per_mtok_at`; nothing here adds physics. The
recommendation is the candidate that fits in HBM, meets the TTFT and TPOT targets and is best
on the objective (lowest all-in $/M output tokens by default).

The per-request arithmetic that joins the two phases (all SI, per GPU):

* GPU-seconds per request: ``isl / P + osl / D`` (P: prefill input tokens/s per GPU at the
  chosen prefill batch, D: decode output tokens/s per GPU at the chosen decode point);
  :func:`output_tokens_per_s_per_gpu_all_in` is ``osl`` over it.
* Aggregated serving stretches every decode step by the prefill share of busy time
  (:func:`inference_factory.factory.simulate.prefill_busy_share`, the factory's colocated
  interference): ``TPOT = TPOT_decode / (1 - s_p)``.
* All-in cost per million output tokens: :func:`usd_per_mtok_output_all_in`.
* GPUs to serve a load: :func:`gpus_for_load` (whole instances of each pool).

Assumptions (stated, not fitted): every request has ``isl`` prompt and ``osl`` output tokens;
decode runs at context ``isl + osl / 2`` with KV reserved for ``isl + osl``; prefill and
decode pools of a P/D deployment use one precision profile (the KV cache moves between
them); a prefill instance fits where its weights and one sequence fit; queueing is not
modelled (``simulate`` on the emitted config does that).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..axes import NUMERIC_AXES
from .economics import CostModel, gpu_cost_usd_per_hour, usd_per_mtok_at
from ..engine import evaluate_arrays
from ..errors import SpecError
from ..factory.config import Levers
from ..specs.prices import resolve_price
from ..factory.simulate import lever_precisions, prefill_busy_share
from ..specs import HardwareSpec, ModelSpec, load_hardware, load_model

__all__ = ["plan", "PlanResult", "candidate_shapes", "output_tokens_per_s_per_gpu_all_in",
           "usd_per_mtok_output_all_in", "gpus_for_load", "config_toml", "OBJECTIVES"]

#: What a recommendation optimises: name -> "min" or "max".
OBJECTIVES: dict[str, str] = {"usd_per_mtok_output_all_in": "min",
                              "output_tokens_per_s_per_gpu": "max",
                              "tokens_per_s_per_user": "max"}
MODES = ("aggregated", "disaggregated")
#: Default decode batch grid (sequences per attention-DP rank) and prefill batch grid.
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
DEFAULT_PREFILL_BATCHES = (1, 2, 4, 8, 16)


# --------------------------------------------------------------------------------------------
# the equations that join prefill and decode (pure)
# --------------------------------------------------------------------------------------------


def output_tokens_per_s_per_gpu_all_in(*, isl_tokens, osl_tokens, prefill_tokens_per_s_per_gpu,
                                       decode_tokens_per_s_per_gpu):
    r"""Output tokens per second per GPU of a whole deployment, prefill included.

    .. math:: R = \frac{o}{i / P + o / D}

    i prompt and o output tokens per request; P, D the prefill (input) and decode (output)
    tokens/s per GPU. The denominator is the GPU-seconds one request takes, summed over the
    phases: it holds for a P/D split whose pools are sized to each other and for a colocated
    pool that time-shares the phases.
    """
    return osl_tokens / (isl_tokens / prefill_tokens_per_s_per_gpu
                         + osl_tokens / decode_tokens_per_s_per_gpu)


def usd_per_mtok_output_all_in(*, usd_per_mtok_output, usd_per_mtok_input, isl_tokens,
                               osl_tokens):
    r"""Cost of a million output tokens with their prompts' prefill charged to them.

    .. math:: c = c_{out} + \frac{i}{o} c_{in}

    c_out, c_in: $/M output tokens of decode and $/M input tokens of prefill
    (:func:`~inference_factory.economics.add_economics`), i / o prompt tokens per output token.
    """
    return usd_per_mtok_output + isl_tokens / osl_tokens * usd_per_mtok_input


def gpus_for_load(*, tokens_per_s, tokens_per_s_per_gpu, instance_gpus):
    r"""GPUs to serve a token rate with whole instances.

    .. math:: n = \left\lceil \frac{L}{r \, g} \right\rceil g

    L tokens/s to serve, r tokens/s per GPU of the pool, g GPUs per instance.
    """
    return np.ceil(tokens_per_s / (tokens_per_s_per_gpu * instance_gpus) - 1e-9) * instance_gpus


# --------------------------------------------------------------------------------------------
# the search space
# --------------------------------------------------------------------------------------------


def _powers_of_two(top: int) -> list[int]:
    return [2 ** k for k in range(int(math.log2(top)) + 1)] if top >= 1 else []


def candidate_shapes(model: ModelSpec, hw: HardwareSpec, max_gpus: int) -> list[dict[str, int]]:
    """Instance shapes of up to ``max_gpus`` GPUs: tp a power of two dividing the query heads
    within one node (scale-up domain), dp a power of two; for a MoE model ep is 1 (experts
    replicated, tensor-parallel) or the whole instance (one expert group per GPU)."""
    node = max(hw.gpus_per_node, hw.scale_up_domain_gpus)
    out = []
    for n in _powers_of_two(max_gpus):
        for tp in _powers_of_two(min(n, node)):
            if model.n_q_heads % tp:
                continue
            dp = n // tp
            eps = sorted({1, n}) if model.is_moe else [1]
            for ep in eps:
                if model.is_moe and ep > model.n_routed_experts:
                    continue
                out.append({"tp": tp, "dp": dp, "ep": ep})
    return out


def _profiles(m: ModelSpec, hw: HardwareSpec, low: Sequence[bool]) -> list[dict[str, Any]]:
    """The factory's precision profiles (its low_precision lever), as engine arguments."""
    out = []
    for flag in low:
        prec = lever_precisions(m, hw, Levers(low_precision=flag))
        if all(p in hw.dense_flop_per_s for p in (prec["weight_precision"],)):
            out.append({"low_precision": flag, **prec})
    return out


# --------------------------------------------------------------------------------------------
# the result
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` found.

    ``recommendations``: one row per hardware (NaN figures where nothing meets the targets,
    with the reason). ``candidates``: every evaluated deployment with ``meets_slo`` and
    ``reason``. ``front``: the non-dominated candidates (tokens/s per user against all-in
    output tokens/s per GPU) per hardware among those that fit and meet TTFT.
    ``request``: the inputs, for the emitted config and the report.
    """

    recommendations: pd.DataFrame
    candidates: pd.DataFrame
    front: pd.DataFrame
    request: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# planning
# --------------------------------------------------------------------------------------------


def plan(model: str | ModelSpec, hardware: str | HardwareSpec | Sequence, *, gpus: int = 8,
         isl: int = 1024, osl: int = 1024, ttft_s: float | None = None,
         tpot_s: float | None = None, price=None, cost: CostModel | None = None,
         objective: str = "usd_per_mtok_output_all_in",
         load_output_tokens_per_s: float | None = None, modes: Sequence[str] = MODES,
         shapes: Sequence[Mapping[str, int]] | None = None,
         low_precision: Sequence[bool] = (False, True), overlap: Sequence[str] | None = None,
         batch_size: Sequence[int] = DEFAULT_BATCHES, draft_depth: Sequence[int] | None = None,
         prefill_batch_size: Sequence[int] = DEFAULT_PREFILL_BATCHES,
         min_gpus: int = 1, **kwargs: Any) -> PlanResult:
    """Recommend one deployment per hardware type for a GPU budget and latency targets.

    Parameters
    ----------
    model, hardware : name, alias, path or spec (hardware: one or a list)
    gpus : int
        GPU budget: an instance (for P/D: a prefill plus a decode instance) uses at most this
        many GPUs. ``min_gpus`` is the smallest instance considered.
    isl, osl : int
        Prompt and output tokens per request.
    ttft_s, tpot_s : float, optional
        Targets (seconds). TTFT is one prefill pass at the prefill batch; TPOT the decode
        step per token, stretched by prefill interference when aggregated.
    price, cost
        As for :func:`~inference_factory.economics.add_economics` (the price adds margins).
    objective : str
        One of :data:`OBJECTIVES` (default: lowest all-in $/M output tokens).
    load_output_tokens_per_s : float, optional
        A load to size for: adds ``gpus_for_load`` (and per pool for P/D).
    modes : "aggregated" and/or "disaggregated"
    shapes : list of {"tp", "dp", "ep"}, optional
        Instance shapes to try (default :func:`candidate_shapes` within the budget).
    low_precision : bools
        The factory's precision profiles to try (FP8 KV and dispatch, FP4 experts where the
        device has FP4 tensor cores; or BF16 KV and dispatch at native weights).
    overlap : overlap policies, optional
        Default: none and two-batch for a MoE model, none for a dense one.
    batch_size, draft_depth, prefill_batch_size : whole numbers
        Decode batch per attention-DP rank, draft depths (default 0..3 with an MTP module or a
        draft model, else 0), prefill prompts per attention-DP rank per pass.
    **kwargs
        Other engine options held fixed (``acceptance_rate``, ``expert_skew``,
        ``redundant_experts``, ``draft_model``, ``cache_hit_rate``...).
    """
    if objective not in OBJECTIVES:
        raise SpecError(f"objective = {objective!r} is not one of {list(OBJECTIVES)}")
    bad = [x for x in modes if x not in MODES]
    if bad or not modes:
        raise SpecError(f"modes = {list(modes)!r}: each must be one of {list(MODES)}")
    for name, v in (("gpus", gpus), ("isl", isl), ("osl", osl), ("min_gpus", min_gpus)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{name} = {v!r} must be a whole number >= 1")
    if min_gpus > gpus:
        raise SpecError(f"min_gpus = {min_gpus} exceeds the budget gpus = {gpus}")
    for name, v in (("ttft_s", ttft_s), ("tpot_s", tpot_s),
                    ("load_output_tokens_per_s", load_output_tokens_per_s)):
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise SpecError(f"{name} = {v!r} must be a positive number")
    for k in ("tp", "dp", "ep", "batch_size", "draft_depth", "prefill_batch_size", "kv_len",
              "prompt_len", "final_len", "weight_precision", "moe_precision", "kv_precision",
              "dispatch_precision"):
        if k in kwargs:
            raise SpecError(f"plan: {k} is searched (or set from isl/osl); do not fix it")
    m = load_model(model)
    hws = [load_hardware(h) for h in (hardware if isinstance(hardware, (list, tuple))
                                      else [hardware])]
    pr = resolve_price(price)
    cost = cost or CostModel()
    draft_model = kwargs.get("draft_model")
    if draft_depth is None:
        draft_depth = (0, 1, 2, 3) if (m.n_mtp_modules or draft_model) else (0,)
    overlaps = list(overlap) if overlap is not None else (
        ["none", "two-batch"] if m.is_moe else ["none"])
    grid = dict(batch_size=[float(b) for b in batch_size],
                draft_depth=[float(d) for d in draft_depth],
                prefill_batch_size=[float(b) for b in prefill_batch_size],
                prompt_len=float(isl), kv_len=float(isl + osl / 2), final_len=float(isl + osl))

    axes = dict(batch_size=np.asarray(grid["batch_size"])[:, None, None],
                draft_depth=np.asarray(grid["draft_depth"])[None, :, None],
                prefill_batch_size=np.asarray(grid["prefill_batch_size"])[None, None, :],
                prompt_len=grid["prompt_len"], kv_len=grid["kv_len"],
                final_len=grid["final_len"])
    rows: list[pd.DataFrame] = []
    for hw in hws:
        hw_shapes = [dict(s) for s in shapes] if shapes is not None else \
            candidate_shapes(m, hw, gpus)
        hw_shapes = [s for s in hw_shapes
                     if min_gpus <= s.get("tp", 1) * s.get("dp", 1) <= gpus]
        rates = {ph: sum(gpu_cost_usd_per_hour(hw, cost, ph)) for ph in ("decode", "prefill")}
        for prof in _profiles(m, hw, low_precision):
            precs = {k: v for k, v in prof.items() if k != "low_precision"}
            per_shape = []
            for shape in hw_shapes:
                ovs = overlaps if shape.get("ep", 1) > 1 or not m.is_moe else ["none"]
                res = _shape_grid(m, hw, shape, precs, ovs, axes, kwargs, rates, cost)
                if res is not None:  # None: a shape the engine refuses (too many experts...)
                    per_shape.append((shape, res))
            rows += _candidates(m, hw, prof, per_shape, isl, osl, ttft_s, tpot_s, gpus, modes)
    if not rows:
        raise SpecError(f"plan: no instance shape of {min_gpus}..{gpus} GPUs is valid for "
                        f"{m.name} on {', '.join(h.name for h in hws)}")
    cand = pd.concat(rows, ignore_index=True)
    cand["usd_per_mtok_output_all_in"] = usd_per_mtok_output_all_in(
        usd_per_mtok_output=cand["usd_per_mtok_output"],
        usd_per_mtok_input=cand["usd_per_mtok_input"], isl_tokens=isl, osl_tokens=osl)
    if load_output_tokens_per_s is not None:
        _size_for_load(cand, load_output_tokens_per_s, isl, osl)
    cand = _rank(cand, objective)
    recs = _recommend(cand, hws, objective)
    front = _front(cand)
    request = dict(model=m.name, hardware=[h.name for h in hws], gpus=gpus, min_gpus=min_gpus,
                   isl=isl, osl=osl, ttft_s=ttft_s, tpot_s=tpot_s,
                   price=pr.id if pr is not None else None, cost_basis=cost.cost_basis,
                   objective=objective, load_output_tokens_per_s=load_output_tokens_per_s,
                   modes=list(modes), engine_options={k: v for k, v in kwargs.items()},
                   cost=dataclasses.asdict(cost))
    for df in (recs, cand, front):
        df.attrs.update({k: v for k, v in request.items() if isinstance(v, (str, int, float))})
    return PlanResult(recommendations=recs, candidates=cand, front=front, request=request)


_DECODE_VARS = ("decode_tokens_per_s_per_gpu", "decode_tokens_per_s_per_user", "tpot_s", "fits",
                "max_batch_size", "decode_binding_resource", "usd_per_mtok_output")
_PREFILL_VARS = ("prefill_tokens_per_s_per_gpu", "ttft_s", "usd_per_mtok_input",
                 "prefill_binding_resource")


@dataclass
class _ShapeGrid:
    """One instance shape's candidates as arrays: per overlap policy, each variable over
    (decode batch, draft depth, prefill batch), broadcast by numpy's rules."""

    overlaps: list[str]
    batch_size: np.ndarray
    draft_depth: np.ndarray
    prefill_batch_size: np.ndarray
    values: list[dict[str, np.ndarray]]


def _shape_grid(m, hw, shape, precs, ovs, axes, kwargs, rates, cost) -> "_ShapeGrid | None":
    """The engine over one shape's grid, once per overlap policy. An overlap the engine
    refuses for this shape while another is valid gives NaN values that do not fit (as
    :func:`inference_factory.evaluate` masks an invalid combination of list values); None
    when every policy is refused."""
    names = (*_DECODE_VARS, *_PREFILL_VARS)
    got: list[dict | None] = []
    for ov in ovs:
        try:
            r = evaluate_arrays(m, hw, **shape, **precs, overlap=ov, **axes, **kwargs,
                                variables=[v for v in names if not v.startswith("usd_")])
        except SpecError:
            if len(ovs) == 1:
                return None
            got.append(None)
            continue
        r["usd_per_mtok_output"] = usd_per_mtok_at(
            r["decode_tokens_per_s_per_gpu"], gpu_cost_usd_per_hour=rates["decode"],
            utilization=cost.utilization)
        r["usd_per_mtok_input"] = usd_per_mtok_at(
            r["prefill_tokens_per_s_per_gpu"], gpu_cost_usd_per_hour=rates["prefill"],
            utilization=cost.utilization)
        got.append(r)
    template = next((r for r in got if r is not None), None)
    if template is None:
        return None
    masked = {k: np.full(np.shape(v), False if np.asarray(v).dtype.kind == "b" else (
        "" if np.asarray(v).dtype.kind in "OUS" else np.nan)) for k, v in template.items()}
    return _ShapeGrid(list(ovs), np.ravel(axes["batch_size"]), np.ravel(axes["draft_depth"]),
                      np.ravel(axes["prefill_batch_size"]),
                      [r if r is not None else masked for r in got])


def _decode_frame(sg: _ShapeGrid) -> dict[str, np.ndarray]:
    """Columns with one row per (overlap, batch, depth) of the decode variables, in that
    order."""
    nb, nd = sg.batch_size.size, sg.draft_depth.size
    cols: dict[str, list] = {"overlap": [], "batch_size": [], "draft_depth": []}
    parts: dict[str, list] = {v: [] for v in _DECODE_VARS}
    for ov, r in zip(sg.overlaps, sg.values):
        cols["overlap"].append(np.full(nb * nd, ov, dtype=object))
        cols["batch_size"].append(np.repeat(sg.batch_size, nd))
        cols["draft_depth"].append(np.tile(sg.draft_depth, nb))
        for v in _DECODE_VARS:
            a = np.asarray(r[v])
            a = a[..., 0] if a.ndim == 3 else a          # decode: no prefill-batch axis
            parts[v].append(np.broadcast_to(a, (nb, nd)).reshape(-1))
    out = {k: np.concatenate(v) for k, v in cols.items()}
    out.update({k: np.concatenate(v) for k, v in parts.items()})
    out["decode_binding_resource"] = out["decode_binding_resource"].astype(object)
    return out


def _along(a, n: int, float_: bool = True) -> np.ndarray:
    """A prefill variable along the prefill batch (the first point of the decode axes, on
    which it does not depend)."""
    a = np.asarray(a)
    a = a[0, 0] if a.ndim == 3 else a
    return np.broadcast_to(np.asarray(a, float if float_ else object), (n,))


def _prefill_best(sg: _ShapeGrid, ttft_s: float | None) -> dict[str, np.ndarray]:
    """Columns with one row per overlap: the prefill batch with the most input tokens/s per
    GPU meeting TTFT (NaN where none does), and whether the instance's weights fit at all."""
    rows = []
    pb = sg.prefill_batch_size
    for ov, r in zip(sg.overlaps, sg.values):
        p = _along(r["prefill_tokens_per_s_per_gpu"], pb.size)
        t = _along(r["ttft_s"], pb.size)
        cin = _along(r["usd_per_mtok_input"], pb.size)
        ok = np.ones(pb.shape, bool) if ttft_s is None else t <= ttft_s
        # the instance fits where its weights and one sequence at the final length fit
        mb = np.asarray(r["max_batch_size"])
        mb = mb[:, :1] if mb.ndim >= 2 else mb           # the first draft depth
        row = [str(ov), bool(np.min(mb) >= 1), float(t.min())]
        if ok.any():
            i = int(np.flatnonzero(ok)[np.argmax(p[ok])])
            row += [float(pb[i]), float(p[i]), float(t[i]), float(cin[i]),
                    str(_along(r["prefill_binding_resource"], pb.size, float_=False)[i])]
        else:
            row += [np.nan, np.nan, np.nan, np.nan, ""]
        rows.append(row)
    names = ("overlap", "prefill_fits", "min_ttft_s", "prefill_batch_size",
             "prefill_tokens_per_s_per_gpu", "ttft_s", "usd_per_mtok_input",
             "prefill_binding_resource")
    kinds = (object, bool, float, float, float, float, float, object)
    return {k: np.array([r[c] for r in rows], dtype=kd)
            for c, (k, kd) in enumerate(zip(names, kinds))}


def _shape_cols(shape, n_rows: int, prefix: str = "") -> dict[str, np.ndarray]:
    """The shape's tp, dp, ep and GPU count as columns of ``n_rows`` rows."""
    tp, dp, ep = shape.get("tp", 1), shape.get("dp", 1), shape.get("ep", 1)
    return {f"{prefix}tp": np.full(n_rows, tp, dtype=np.int64),
            f"{prefix}dp": np.full(n_rows, dp, dtype=np.int64),
            f"{prefix}ep": np.full(n_rows, ep, dtype=np.int64),
            f"{prefix or 'decode_'}gpus": np.full(n_rows, tp * dp, dtype=np.int64)}


def _candidates(m, hw, prof, per_shape, isl, osl, ttft_s, tpot_s, gpus, modes) -> list:
    """Every candidate of one device and precision profile as one frame: per shape, its
    aggregated rows (its own best prefill batch per overlap) and its disaggregated rows (the
    best prefill instance of any shape that fits beside it in the budget)."""
    prefill = []
    for shape, sg in per_shape:
        pf = _prefill_best(sg, ttft_s)
        prefill.append({**pf, **_shape_cols(shape, len(pf["overlap"]), "prefill_")})
    prefill_all = ({k: np.concatenate([pf[k] for pf in prefill]) for k in prefill[0]}
                   if prefill else {})
    common = dict(hardware=hw.name, low_precision=prof["low_precision"],
                  weight_precision=prof["weight_precision"],
                  moe_precision=prof["moe_precision"], kv_precision=prof["kv_precision"])
    frames = []
    for (shape, sg), own in zip(per_shape, prefill):
        dec = _decode_frame(sg)
        n_rows = len(dec["overlap"])
        dec.update(_shape_cols(shape, n_rows))
        n = shape.get("tp", 1) * shape.get("dp", 1)
        tags = lambda mode, pov: {"prefill_overlap": pov,  # noqa: E731
                                  "mode": np.full(n_rows, mode, dtype=object),
                                  **{k: np.full(n_rows, v, dtype=object if isinstance(v, str)
                                                else None) for k, v in common.items()}}
        if "aggregated" in modes:
            at = np.array([sg.overlaps.index(o) for o in sg.overlaps])[
                np.repeat(np.arange(len(sg.overlaps)), n_rows // len(sg.overlaps))]
            frames.append({**dec, **{k: v[at] for k, v in own.items() if k != "overlap"},
                           **tags("aggregated", dec["overlap"].copy())})
        if "disaggregated" in modes and prefill_all:
            # the prefill pool: the best prefill instance (any shape, same precision profile)
            # that fits beside this decode instance in the budget
            ok = np.flatnonzero((prefill_all["prefill_gpus"] + n <= gpus)
                                & prefill_all["prefill_fits"]
                                & ~np.isnan(prefill_all["prefill_tokens_per_s_per_gpu"]))
            row = {k: v[:1].copy() for k, v in prefill_all.items()}
            if ok.size == 0:
                for k in ("prefill_tokens_per_s_per_gpu", "ttft_s", "usd_per_mtok_input",
                          "prefill_batch_size"):
                    row[k][:] = np.nan
                row["prefill_fits"][:] = False
                pov = ""
            else:   # most tokens/s per GPU, then fewest GPUs, then the first listed
                key = np.lexsort((ok, prefill_all["prefill_gpus"][ok],
                                  -prefill_all["prefill_tokens_per_s_per_gpu"][ok]))
                best = ok[key[0]]
                row = {k: v[best:best + 1] for k, v in prefill_all.items()}
                pov = str(prefill_all["overlap"][best])
            frames.append({**dec, **{k: np.repeat(v, n_rows) for k, v in row.items()
                                     if k != "overlap"},
                           **tags("disaggregated", np.full(n_rows, pov, dtype=object))})
    if not frames:
        return []
    f = {k: np.concatenate([fr[k] for fr in frames]) for k in frames[0]}
    return [_judge(f, isl, osl, ttft_s, tpot_s)]


def _judge(f: dict[str, np.ndarray], isl, osl, ttft_s, tpot_s) -> pd.DataFrame:
    """The derived columns of the candidates (TPOT stretched by colocated prefill, all-in
    output tokens/s per GPU, GPUs, whether the SLOs are met and why not), as a frame."""
    agg = f["mode"] == "aggregated"
    # the engine's per-step TPOT, stretched by prefill interference when colocated
    d = f["decode_tokens_per_s_per_gpu"].astype(float)
    p = f["prefill_tokens_per_s_per_gpu"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = prefill_busy_share(prefill_s_per_request=isl / p, decode_s_per_request=osl / d)
    stretch = np.where(agg, 1.0 / np.maximum(1.0 - share, 1e-9), 1.0)
    f["decode_tpot_s"] = f["tpot_s"]
    f["tpot_s"] = f["tpot_s"] * stretch
    f["tokens_per_s_per_user"] = f["decode_tokens_per_s_per_user"] / stretch
    f["output_tokens_per_s_per_gpu"] = output_tokens_per_s_per_gpu_all_in(
        isl_tokens=isl, osl_tokens=osl, prefill_tokens_per_s_per_gpu=p,
        decode_tokens_per_s_per_gpu=d)
    f["gpus"] = np.where(agg, f["decode_gpus"], f["decode_gpus"] + f["prefill_gpus"])
    reasons = np.full(len(agg), "", dtype=object)
    pfits = f["prefill_fits"].astype(bool)
    fits = f["fits"].astype(bool) & pfits
    no_prefill = ~np.isfinite(p)
    reasons[no_prefill & pfits] = "misses TTFT at every prefill batch"
    reasons[~pfits] = "prefill does not fit"
    reasons[~f["fits"].astype(bool)] = "does not fit in HBM"
    slow = (f["tpot_s"] > tpot_s) if tpot_s is not None else np.zeros(len(agg), bool)
    reasons[fits & ~no_prefill & slow] = "misses TPOT"
    f["meets_slo"] = fits & ~no_prefill & ~slow
    f["reason"] = reasons
    return pd.DataFrame(f)


def _size_for_load(cand: pd.DataFrame, load: float, isl: int, osl: int) -> None:
    agg = cand["mode"] == "aggregated"
    dec = gpus_for_load(tokens_per_s=load, tokens_per_s_per_gpu=cand[
        "decode_tokens_per_s_per_gpu"], instance_gpus=cand["decode_gpus"])
    pre = gpus_for_load(tokens_per_s=load * isl / osl, tokens_per_s_per_gpu=cand[
        "prefill_tokens_per_s_per_gpu"], instance_gpus=cand["prefill_gpus"])
    whole = gpus_for_load(tokens_per_s=load, tokens_per_s_per_gpu=cand[
        "output_tokens_per_s_per_gpu"], instance_gpus=cand["decode_gpus"])
    cand["gpus_for_load"] = np.where(agg, whole, dec + pre)
    cand["decode_gpus_for_load"] = np.where(agg, np.nan, dec)
    cand["prefill_gpus_for_load"] = np.where(agg, np.nan, pre)


def _rank(cand: pd.DataFrame, objective: str) -> pd.DataFrame:
    """Feasible candidates first, best on the objective first; ties: fewer GPUs, then the
    smaller batch and depth (the cheaper deployment to run)."""
    sign = 1.0 if OBJECTIVES[objective] == "min" else -1.0
    key = np.where(cand["meets_slo"], sign * cand[objective].astype(float), np.inf)
    key = np.where(np.isnan(key), np.inf, key)
    cand = cand.assign(_key=key).sort_values(
        ["_key", "gpus", "batch_size", "draft_depth"], kind="stable").drop(columns="_key")
    cand = cand.reset_index(drop=True)
    rank = cand.groupby("hardware", sort=False).cumcount() + 1
    cand.insert(0, "rank", np.where(cand["meets_slo"], rank, np.nan))
    return cand


#: Columns of a recommendation, in order.
RECOMMENDATION_COLUMNS = (
    "hardware", "mode", "tp", "dp", "ep", "prefill_tp", "prefill_dp", "prefill_ep", "gpus",
    "low_precision", "kv_precision", "moe_precision", "overlap", "prefill_overlap",
    "batch_size", "draft_depth",
    "prefill_batch_size", "output_tokens_per_s_per_gpu", "decode_tokens_per_s_per_gpu",
    "tokens_per_s_per_user", "ttft_s", "tpot_s", "decode_binding_resource",
    "usd_per_mtok_output", "usd_per_mtok_input", "usd_per_mtok_output_all_in",
    "gpus_for_load", "decode_gpus_for_load", "prefill_gpus_for_load", "reason")


def _recommend(cand: pd.DataFrame, hws, objective: str) -> pd.DataFrame:
    rows = []
    for hw in hws:
        mine = cand[cand["hardware"] == hw.name]
        ok = mine[mine["meets_slo"]]
        if not ok.empty:
            rows.append(ok.iloc[0].to_dict())
        else:
            counts = mine["reason"].value_counts()
            why = "; ".join(f"{k} ({v})" for k, v in counts.items() if k) or "no candidate"
            rows.append({"hardware": hw.name, "reason": f"nothing meets the targets: {why}"})
    recs = pd.DataFrame(rows)
    cols = [c for c in RECOMMENDATION_COLUMNS if c in recs]
    recs = recs[cols]
    if "reason" not in recs:
        recs["reason"] = ""
    return recs.reset_index(drop=True)


def _front(cand: pd.DataFrame) -> pd.DataFrame:
    """Non-dominated (tokens/s per user, all-in tokens/s per GPU) per hardware among the
    candidates that fit and meet TTFT (TPOT is the axis the front trades along)."""
    from .questions import pareto_mask

    ok = cand["fits"].astype(bool) & cand["prefill_tokens_per_s_per_gpu"].notna()
    parts = []
    for hw, sub in cand[ok].groupby("hardware", sort=False):
        mask = pareto_mask(sub["tokens_per_s_per_user"].to_numpy(float),
                           sub["output_tokens_per_s_per_gpu"].to_numpy(float))
        parts.append(sub[mask].sort_values("tokens_per_s_per_user"))
    return pd.concat(parts, ignore_index=True) if parts else cand.iloc[:0]


# --------------------------------------------------------------------------------------------
# the recommendation as a factory config
# --------------------------------------------------------------------------------------------


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


#: CostModel fields a factory config's [economics] table takes.
_CONFIG_COST_KEYS = ("rental_usd_per_gpu_hour", "capex_usd_per_gpu", "depreciation_years",
                     "residual_frac", "pue", "usd_per_kwh")


def config_toml(result: PlanResult, hardware: str | None = None, *, price: str | None = None,
                n_requests: int = 20000, target_utilization: float = 0.8) -> str:
    """A factory config (``simulate --config``) of one recommendation: the pools' hardware
    and shapes, the levers the recommendation uses, one workload class of ``isl`` / ``osl``
    tokens, the targets as SLOs, and an arrival rate that loads the recommended deployment
    (the load given to :func:`plan`, else the GPU budget) to ``target_utilization``."""
    from ..specs.realism import load_realism
    from ..specs.prices import load_prices

    req = result.request
    recs = result.recommendations
    if hardware is not None:
        hw_name = load_hardware(hardware).name
        recs = recs[recs["hardware"] == hw_name]
    recs = recs[recs["reason"].fillna("") == ""] if "reason" in recs else recs
    if recs.empty:
        raise SpecError("no recommendation meets the targets: nothing to write as a config")
    r = recs.iloc[0]
    m = load_model(req["model"])
    price_id = price or req.get("price")
    if price_id is None:
        ids = [p.id for p in load_prices().values() if p.model == m.name]
        if not ids:
            raise SpecError(f"--emit-config needs a price id for {m.name} (a factory config "
                            "names one): give --price ID (see 'inference-factory prices list')")
        price_id = ids[0]
    basis = req.get("cost_basis", "rental")
    if basis not in ("capex", "rental"):
        raise SpecError(f"--emit-config: a factory config charges capex or rental, not {basis!r}")
    isl, osl = int(req["isl"]), int(req["osl"])
    pd_split = r["mode"] == "disaggregated"
    out_per_gpu = float(r["output_tokens_per_s_per_gpu"])
    load = req.get("load_output_tokens_per_s")
    gpus = float(r["gpus_for_load"]) if load is not None and "gpus_for_load" in r else req["gpus"]
    rate = (load if load is not None else out_per_gpu * req["gpus"]) * target_utilization / osl
    depth = int(r["draft_depth"])
    batch_per_gpu = max(1, int(round(float(r["batch_size"]) * int(r["dp"])
                                     / (int(r["tp"]) * int(r["dp"])))))
    prefill_tokens = max(1, int(round(float(r["prefill_batch_size"]) * isl
                                      / int(r["prefill_tp"]))))
    opts = req.get("engine_options", {})
    acc = float(opts.get("acceptance_rate", NUMERIC_AXES["acceptance_rate"][0]))
    skew = float(opts.get("expert_skew", load_realism().default_expert_skew))
    redundant = int(opts.get("redundant_experts", 0))
    desc = f"plan: {m.name} on {r['hardware']}, {r['mode']}"
    lines = [
        "# Written by 'inference-factory plan': the recommended deployment of "
        f"{m.name} on {r['hardware']}",
        f"# for {isl} prompt / {osl} output tokens per request, budget {req['gpus']} GPUs, "
        f"objective {req['objective']}.",
        f"# Plan: {r['mode']}, decode tp={int(r['tp'])} dp={int(r['dp'])} ep={int(r['ep'])}, "
        f"batch {float(r['batch_size']):g}, draft depth {depth}, "
        f"{out_per_gpu:,.0f} output tokens/s/GPU all-in; arrival rate sized for "
        f"{gpus:g} GPUs at {target_utilization:g} utilization.",
        "",
        f"name = {_toml_value('plan-' + str(r['hardware']).lower())}",
        f"description = {_toml_value(desc)}",
        "",
        "[model]",
        f"name = {_toml_value(m.name)}",
        f"price = {_toml_value(price_id)}",
        "",
        "[workload]",
        f"n_requests = {int(n_requests)}",
        f"arrival_rate_per_s = {_toml_value(float(rate))}",
        "diurnal_amplitude = 0.0",
        "seed = 1",
        "",
        "[[workload.class]]",
        'name = "plan"',
        "share = 1.0",
        f"prompt_tokens_median = {isl}",
        "prompt_tokens_sigma = 0.0",
        f"output_tokens_median = {osl}",
        "output_tokens_sigma = 0.0",
        f"max_prompt_tokens = {isl}",
        f"max_output_tokens = {osl}",
        "system_prompt_tokens = 0",
        "n_system_prompts = 1",
        "system_prompt_zipf = 0.0",
        "turns_mean = 1.0",
        f"acceptance_rate = {_toml_value(acc)}",
        f"expert_skew = {_toml_value(skew)}",
        "",
        "[prefill]",
        f"hardware = {_toml_value(r['hardware'])}",
        f"tp = {int(r['prefill_tp'])}",
        f"dp = {int(r['prefill_dp'])}",
        f"ep = {int(r['prefill_ep'])}",
        f"tokens_per_gpu = {prefill_tokens}",
        f"unit_gpus = {int(r['prefill_tp']) * int(r['prefill_dp'])}",
        "",
        "[decode]",
        f"hardware = {_toml_value(r['hardware'])}",
        f"tp = {int(r['tp'])}",
        f"dp = {int(r['dp'])}",
        f"ep = {int(r['ep'])}",
        f"max_batch_per_gpu = {batch_per_gpu}",
        f"max_draft_depth = {max(depth, 1)}",
        f"unit_gpus = {int(r['tp']) * int(r['dp'])}",
        "",
        "[levers]",
        "continuous_batching = true",
        f"pd_split = {_toml_value(pd_split)}",
        "prefix_cache = false",
        f"speculative = {_toml_value(depth > 0)}",
        f"expert_balancing = {_toml_value(redundant > 0)}",
        f"redundant_experts = {redundant}",
        f"low_precision = {_toml_value(bool(r['low_precision']))}",
        f"overlap = {_toml_value(r['overlap'] == 'two-batch')}",
        "",
        "[slo]",   # targets not given keep the factory config's defaults
        *[f"{k} = {_toml_value(float(req[k]))}" for k in ("ttft_s", "tpot_s") if req[k]],
        "",
        "[fleet]",
        f"target_utilization = {_toml_value(float(target_utilization))}",
        "",
        "[economics]",
        f"cost_basis = {_toml_value(basis)}",
    ]
    for k, v in (req.get("cost") or {}).items():
        if k in _CONFIG_COST_KEYS and v is not None and v != getattr(CostModel(), k):
            lines.append(f"{k} = {_toml_value(float(v))}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# the Pareto front as a figure
# --------------------------------------------------------------------------------------------


def plot_front(result: PlanResult, path, *, size: tuple[float, float] = (8.0, 5.0),
               dpi: int = 100):
    """Draw each hardware's front (all-in output tokens/s per GPU against tokens/s per user)
    with its recommendation starred and the TPOT target as a vertical line; write ``path``."""
    from pathlib import Path

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..output.files import atomic_output

    req = result.request
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for i, hw in enumerate(req["hardware"]):
        f = result.front[result.front["hardware"] == hw]
        if f.empty:
            continue
        ax.plot(f["tokens_per_s_per_user"], f["output_tokens_per_s_per_gpu"], marker="o",
                markersize=3, color=f"C{i % 10}", label=hw)
        rec = result.recommendations[result.recommendations["hardware"] == hw]
        if not rec.empty and not rec["reason"].fillna("").iloc[0]:
            ax.plot(rec["tokens_per_s_per_user"], rec["output_tokens_per_s_per_gpu"],
                    marker="*", markersize=14, color=f"C{i % 10}", markeredgecolor="black",
                    linestyle="none")
    if req.get("tpot_s"):
        ax.axvline(1.0 / req["tpot_s"], color="0.4", linestyle="--",
                   label=f"TPOT target {req['tpot_s'] * 1e3:g} ms")
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU, prefill included")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ttft = f", TTFT <= {req['ttft_s']:g} s" if req.get("ttft_s") else ""
    import textwrap

    title = (f"{req['model']}: Pareto fronts within {req['gpus']} GPUs, ISL {req['isl']} / "
             f"OSL {req['osl']}{ttft}; * = recommended ({req['objective']}, "
             f"{req['cost_basis']} cost" + (f", price {req['price']}" if req.get("price") else "")
             + ")")
    ax.set_title(textwrap.fill(title, int(size[0] * 72 / 6.5)), fontsize="small")
    target = Path(path)
    with atomic_output(target, option="--plot") as tmp:
        fig.savefig(tmp, dpi=dpi, format=target.suffix.lstrip(".").lower())
    return target
