"""Deployment planning: from a GPU budget and SLOs to one recommended deployment per device.

:func:`plan` searches, per hardware type, every instance shape within the GPU budget
(tensor, attention-data and expert parallelism), aggregated serving (one pool time-shares
prefill and decode) and prefill/decode disaggregation (two pools, each with its own shape),
precision profiles (the factory's ``native`` and ``low`` or ones the user states, such as
``fp8-weights+fp8-kv``; :func:`inference_factory.specs.grammar.parse_precision`), the two-batch overlap
policy (MoE), the decode batch, the speculative draft depth and the prefill batch. Each
shape's grid of candidates (overlap x decode batch x draft depth x prefill batch) is one
vectorized engine pass (:func:`inference_factory.engine.evaluate_arrays`), priced with
:func:`inference_factory.analysis.economics.usd_per_mtok_at`; nothing here adds physics. The
recommendation is the candidate that fits in HBM, meets the TTFT and TPOT targets and is best
on the objective (lowest all-in $/M output tokens by default). Each recommendation says
its ``footing``: the share of its GPU time per request whose cost the engine read from
measured kernel tables (:func:`inference_factory.analysis.plan.footing.footing_of`), so a
ranking across vendors shows which devices are measured and which are roofline-only.

The per-request arithmetic that joins the two phases (all SI, per GPU):

* GPU-seconds per request: ``isl / P + osl / D`` (P: prefill input tokens/s per GPU at the
  chosen prefill batch, D: decode output tokens/s per GPU at the chosen decode point);
  :func:`inference_factory.kernels.serving.output_tokens_per_s_per_gpu_all_in` is ``osl``
  over it.
* Aggregated serving stretches every decode step by the prefill share of busy time
  (:func:`inference_factory.kernels.serving.prefill_busy_share`, the factory's colocated
  interference): ``TPOT = TPOT_decode / (1 - s_p)``.
* All-in cost per million output tokens:
  :func:`inference_factory.kernels.economics.usd_per_mtok_output_all_in`.
* GPUs to serve a load: :func:`inference_factory.kernels.serving.gpus_for_load` (whole
  instances of each pool).

Assumptions (stated, not fitted): every request has ``isl`` prompt and ``osl`` output tokens;
decode runs at context ``isl + osl / 2`` with KV reserved for ``isl + osl``; prefill and
decode pools of a P/D deployment use one precision profile (the KV cache moves between
them); a prefill instance fits where its weights and one sequence fit; queueing is not
modelled (``simulate`` on the emitted config does that).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..economics import CostModel, gpu_cost_usd_per_hour
from ...engine import architecture, with_mtp_acceptance
from ...errors import SpecError
from ...factory.config import Levers, lever_precisions
from ...specs.grammar import PrecisionProfile, parse_precision
from ...specs.prices import resolve_price
from ...kernels.economics import usd_per_mtok_output_all_in
from ...kernels.serving import (gpus_for_load,
                               output_tokens_per_s_per_gpu_all_in)
from ...specs import HardwareSpec, ModelSpec, load_hardware, load_model

from .candidates import _candidates, _shape_grid
from .ranking import OBJECTIVES, _front, _rank, _recommend, _size_for_load
from .footing import add_footing
from .energy import add_energy
from .config import config_toml, plot_front  # noqa: F401 (re-exported)

__all__ = ["plan", "PlanResult", "candidate_shapes", "output_tokens_per_s_per_gpu_all_in",
           "usd_per_mtok_output_all_in", "gpus_for_load", "config_toml", "OBJECTIVES"]

MODES = ("aggregated", "disaggregated")
#: Default decode batch grid (sequences per attention-DP rank) and prefill batch grid.
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
DEFAULT_PREFILL_BATCHES = (1, 2, 4, 8, 16)


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
    arch = architecture(model)
    out = []
    for n in _powers_of_two(max_gpus):
        for tp in _powers_of_two(min(n, node)):
            if arch.tp_error(tp):            # each attention kind's heads split whole
                continue
            dp = n // tp
            eps = sorted({1, n}) if model.is_moe else [1]
            for ep in eps:
                if model.is_moe and ep > model.n_routed_experts:
                    continue
                out.append({"tp": tp, "dp": dp, "ep": ep})
    return out


def profile_precisions(m: ModelSpec, hw: HardwareSpec, prof: PrecisionProfile
                       ) -> tuple[dict[str, Any] | None, str]:
    """A precision profile on one device, as engine arguments, and a note.

    The base (``native`` or ``low``) is the factory's lever (:func:`lever_precisions`): it
    keeps the checkpoint's format where the device runs it, weight-only where it has no
    tensor cores for it (MXFP4 experts on H200 stored in FP4 and computed at BF16, as
    ``bench`` runs them), else maps it to the next one up, and the note says so. The parts the user named are kept as named
    (a 4- or 8-bit weight format without its tensor cores runs weight-only, stored in the
    format and computed at 16 bits, and the note says so);
    where the device cannot run one, the profile is refused on that device (None) and the
    note carries the engine's own message (the one check :func:`inference_factory.evaluate`
    applies, so a format the engine learns to run is accepted here too)."""
    from ...axes import STRUCT_AXES
    from ...engine import validate_struct
    from ...specs.realism import load_realism

    base = lever_precisions(m, hw, Levers(low_precision=prof.base == "low"))
    named = dict(prof.overrides)
    precs = {**base, **named}
    notes = []
    natives = [("weight_precision", m.weight_precision, "weights")]
    if m.is_moe:
        natives.append(("moe_precision", m.expert_precision, "experts"))
    from ...engine import compute_precision
    for key, native, what in natives:
        if key not in named and native not in hw.dense_flop_per_s:
            notes.append(f"{m.name}'s {native} {what} stored in {precs[key]} and computed at "
                         f"{compute_precision(hw, precs[key])} on {hw.name} (no {native} "
                         "tensor cores)")
        elif key in named and named[key] not in hw.dense_flop_per_s \
                and compute_precision(hw, named[key]) is not None:
            notes.append(f"{what} stored in {named[key]} and computed at "
                         f"{compute_precision(hw, named[key])} on {hw.name} (weight-only: no "
                         f"{named[key]} tensor cores)")
    if prof.base == "low" and m.is_moe and "moe_precision" not in named \
            and "fp4" not in hw.dense_flop_per_s:
        kept, comp = precs["moe_precision"], compute_precision(hw, precs["moe_precision"])
        notes.append(f"low on {hw.name}: experts stay at {kept}"
                     + (f", computed at {comp}" if comp != kept else "")
                     + " (no fp4 tensor cores)")
    try:
        validate_struct(m, hw, {**STRUCT_AXES, **precs}, load_realism())
    except SpecError as exc:     # the engine's reason, without its file path and advice
        why = re.sub(r" \([^()]*\.toml\)", "", str(exc)).split(": pass ")[0]
        return None, f"{prof.label()} refused on {hw.name}: {why}"
    return {"precision": prof.label(), "low_precision": prof.base == "low", **precs}, \
        "; ".join(notes)


def _profiles(m: ModelSpec, hw: HardwareSpec, profiles: Sequence[PrecisionProfile]
              ) -> tuple[list[dict[str, Any]], list[str]]:
    """The profiles a device runs, as engine arguments, and the notes (mappings, refusals)."""
    out, notes = [], []
    for prof in profiles:
        prec, note = profile_precisions(m, hw, prof)
        if prec is not None:
            out.append(prec)
        if note and note not in notes:
            notes.append(note)
    return out, notes


def _check_profiles(m: ModelSpec, profiles: Sequence[PrecisionProfile]) -> None:
    """A dense model's profile that names the experts alone changes nothing: an error."""
    if m.is_moe:
        return
    for prof in profiles:
        o = dict(prof.overrides)
        if "moe_precision" in o and o.get("weight_precision") != o["moe_precision"]:
            raise SpecError(f"--precision {prof.label()!r}: {m.name} is dense (no routed "
                            "experts); name weights or dense instead of experts")


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
         max_instance_gpus: int | None = None, isl: int = 1024, osl: int = 1024, ttft_s: float | None = None,
         tpot_s: float | None = None, price=None, cost: CostModel | None = None,
         objective: str = "usd_per_mtok_output_all_in",
         load_output_tokens_per_s: float | None = None, modes: Sequence[str] = MODES,
         shapes: Sequence[Mapping[str, int]] | None = None,
         low_precision: Sequence[bool] = (False, True),
         precision: str | Sequence[str | PrecisionProfile] | None = None,
         overlap: Sequence[str] | None = None,
         batch_size: Sequence[int] = DEFAULT_BATCHES, draft_depth: Sequence[int] | None = None,
         prefill_batch_size: Sequence[int] = DEFAULT_PREFILL_BATCHES,
         min_gpus: int = 1, uncertainty: Any = None, engine: Any = None,
         target_utilization: float | None = None, **kwargs: Any) -> PlanResult:
    """Recommend one deployment per hardware type for a GPU budget and latency targets.

    Parameters
    ----------
    model, hardware : name, alias, path or spec (hardware: one or a list)
    gpus : int
        GPU budget in total: whole instances x GPUs per instance (for P/D, whole prefill and
        decode instances whose GPUs sum to at most ``gpus``, their counts chosen to balance
        the pools' request rates: :func:`.candidates.pack_pools`). Every per-GPU
        figure counts every GPU used.
    max_instance_gpus : int, optional
        The most GPUs one instance (prefill or decode) may take (default ``gpus``; the
        shapes' tensor parallelism stays within one node's scale-up domain,
        :func:`candidate_shapes`). ``min_gpus`` is the smallest instance considered.
    isl, osl : int
        Prompt and output tokens per request.
    ttft_s, tpot_s : float, optional
        Targets (seconds). TTFT is one prefill pass at the prefill batch; TPOT the decode
        step per token, stretched by prefill interference when aggregated.
    price, cost
        As for :func:`~inference_factory.analysis.economics.add_economics` (the price adds margins).
    objective : str
        One of :data:`OBJECTIVES` (default: lowest all-in $/M output tokens).
    load_output_tokens_per_s : float, optional
        A load to size for: adds ``gpus_for_load`` (and per pool for P/D) at
        ``target_utilization``, and ``load_share_frac``: the share of the load the
        recommendation's own GPUs serve at it.
    target_utilization : float, optional
        Busy share of the GPUs a fleet is sized for (default ``configs/provisioning.toml``:
        the rule ``simulate`` applies, so an emitted config simulates to the same counts).
    modes : "aggregated" and/or "disaggregated"
    shapes : list of {"tp", "dp", "ep"}, optional
        Instance shapes to try (default :func:`candidate_shapes` within the budget).
    low_precision : bools
        The factory's precision profiles to try (FP8 KV and dispatch, FP4 experts where the
        device has FP4 tensor cores; or BF16 KV and dispatch at native weights).
    precision : profile text(s), optional
        Precision profiles instead of ``low_precision``: ``native``, ``low``, ``both`` or
        combinations such as ``fp8-weights+fp8-kv``, ``fp4-experts+fp8-kv`` or
        ``weight=fp8,moe=fp4,kv=fp8`` (:func:`inference_factory.specs.grammar.parse_precision`).
        Dense models take ``fp8-weights`` / ``fp4-weights`` without a model file of their own.
        A named part the device cannot run refuses the profile on that device, with the
        engine's reason in the recommendation (and an error if no device runs any profile).
    overlap : overlap policies, optional
        Default: none and two-batch for a MoE model, none for a dense one.
    batch_size, draft_depth, prefill_batch_size : whole numbers
        Decode batch per attention-DP rank, draft depths (default 0..3 with an MTP module or a
        draft model, else 0), prefill prompts per attention-DP rank per pass.
    uncertainty : True, "components" or an Uncertainty, optional
        Adds ``<name>_low`` / ``<name>_high`` (the 80 % band) of each recommendation's
        tokens/s per GPU and per user, TTFT, TPOT and $/M columns, ``band_structure_ln`` and
        ``meets_slo_share`` (:mod:`.bands`: the recommended operating point re-evaluated
        under the component draws, widened by the model-structure term; candidates and the
        front carry no bands).
    engine : name or ServingEngine, optional
        The serving-engine profile of ``configs/serving_engines.toml`` (default: its
        default, SGLang 0.5.6) whose scheduling the aggregated candidates' closed loop runs
        (poll interval, host times, prefill-first or mixed steps, pass budget per DP rank:
        :func:`.bench.loop_at_batch`, as ``bench``); named in ``request["engine"]`` and the
        frames' attrs. Disaggregated candidates do not depend on it.
    **kwargs
        Other engine options held fixed (``acceptance_rate``, ``expert_skew``,
        ``redundant_experts``, ``draft_model``, ``cache_hit_rate``...).
    """
    if objective not in OBJECTIVES:
        raise SpecError(f"objective = {objective!r} is not one of {list(OBJECTIVES)}")
    bad = [x for x in modes if x not in MODES]
    if bad or not modes:
        raise SpecError(f"modes = {list(modes)!r}: each must be one of {list(MODES)}")
    if max_instance_gpus is None:
        max_instance_gpus = gpus
    for name, v in (("gpus", gpus), ("isl", isl), ("osl", osl), ("min_gpus", min_gpus),
                    ("max_instance_gpus", max_instance_gpus)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{name} = {v!r} must be a whole number >= 1")
    if max_instance_gpus > gpus:
        raise SpecError(f"max_instance_gpus = {max_instance_gpus} exceeds the budget "
                        f"gpus = {gpus} (an instance cannot be larger than the fleet)")
    if min_gpus > max_instance_gpus:
        raise SpecError(f"min_gpus = {min_gpus} exceeds max_instance_gpus = "
                        f"{max_instance_gpus}")
    for name, v in (("ttft_s", ttft_s), ("tpot_s", tpot_s),
                    ("load_output_tokens_per_s", load_output_tokens_per_s)):
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise SpecError(f"{name} = {v!r} must be a positive number")
    for k in ("tp", "dp", "ep", "batch_size", "draft_depth", "prefill_batch_size", "kv_len",
              "prompt_len", "final_len", "weight_precision", "moe_precision", "kv_precision",
              "dispatch_precision", "acceptance_by_position"):
        if k in kwargs:
            raise SpecError(f"plan: {k} is searched (or set from isl/osl); do not fix it")
    from ...specs.provisioning import target_utilization as _target
    util = _target(target_utilization, "target_utilization")
    from ...specs.engines import engines_for_plan, resolve_serving_engine
    from .engines import add_launch, engine_candidates
    names = None if engine is None else (
        [engine] if isinstance(engine, str) or not isinstance(engine, (list, tuple))
        else list(engine))
    for n in names or []:
        resolve_serving_engine(n, "engine")      # an unknown name: one line
    m = load_model(model)
    m.check_context(isl, osl)
    hws = [load_hardware(h) for h in (hardware if isinstance(hardware, (list, tuple))
                                      else [hardware])]
    profiles = (parse_precision(precision) if precision is not None else
                tuple(PrecisionProfile("low" if flag else "native") for flag in low_precision))
    _check_profiles(m, profiles)
    pr = resolve_price(price)
    cost = cost or CostModel()
    draft_model = kwargs.get("draft_model")
    if draft_depth is None:
        draft_depth = (0, 1, 2, 3) if (m.n_mtp_modules or draft_model) else (0,)
    engine_kw = with_mtp_acceptance(m, kwargs, draft_depth)
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
    notes: dict[str, list[str]] = {}
    used: dict[tuple[str, str], Any] = {}
    for hw in hws:
        engines = engines_for_plan(names, hw.name)
        if not engines:
            notes[hw.name] = [f"no engine {'named ' if names else ''}runs on {hw.name}"]
            continue
        used.update({(hw.name, e.name): e for e in engines})
        hw_shapes = [dict(s) for s in shapes] if shapes is not None else \
            candidate_shapes(m, hw, max_instance_gpus)
        hw_shapes = [s for s in hw_shapes
                     if min_gpus <= s.get("tp", 1) * s.get("dp", 1) <= max_instance_gpus]
        rates = {ph: sum(gpu_cost_usd_per_hour(hw, cost, ph)) for ph in ("decode", "prefill")}
        runs, notes[hw.name] = _profiles(m, hw, profiles)
        if names is None:       # shapes no engine runs here are not costed at all
            hw_shapes = [s for s in hw_shapes if any(
                not e.refusal(mode=e.supports.modes[0], tp=s.get("tp", 1), dp=s.get("dp", 1),
                              ep=s.get("ep", 1)) for e in engines)]
        for prof in runs:
            precs = {k: v for k, v in prof.items() if k.endswith("_precision")
                     and k != "low_precision"}
            grids: dict[int, list] = {}     # one grid per realism the engines run
            for eng in engines:        # each engine keeps what it runs on this device
                kw = _engine_kw(engine_kw, eng)
                key = id(kw.get("realism"))
                if key not in grids:
                    grids[key] = []
                    for shape in hw_shapes:
                        ovs = overlaps if shape.get("ep", 1) > 1 or not m.is_moe else ["none"]
                        res = _shape_grid(m, hw, shape, precs, ovs, axes, kw, rates, cost)
                        if res is not None:  # None: a shape the engine refuses (experts...)
                            grids[key].append((shape, res))
                rows += engine_candidates(eng, m, hw, prof, grids[key], isl, osl, ttft_s,
                                          tpot_s, gpus, modes, rates=rates,
                                          utilization=cost.utilization,
                                          notes=notes[hw.name])
    if not rows:
        why = "; ".join(n for ns in notes.values() for n in ns if "refused" in n)
        if why and not any(_profiles(m, hw, profiles)[0] for hw in hws):
            raise SpecError(f"plan: no precision profile runs on "
                            f"{', '.join(h.name for h in hws)}: {why}")
        raise SpecError(f"plan: no instance shape of {min_gpus}..{max_instance_gpus} GPUs is "
                        "valid for "
                        f"{m.name} on {', '.join(h.name for h in hws)}")
    cand = pd.concat(rows, ignore_index=True)
    if load_output_tokens_per_s is not None:
        _size_for_load(cand, load_output_tokens_per_s, isl, osl, util)
    cand = _rank(cand, objective)
    recs = _recommend(cand, hws, objective, notes)
    recs = add_footing(recs, cand, m, hws, isl=isl, osl=osl, engine_options=engine_kw)
    recs = add_launch(recs, m, used)
    recs = add_energy(recs, hws, cost, isl=isl, osl=osl)     # on the named bases
    if uncertainty is not None and uncertainty is not False:
        from .bands import add_bands
        if kwargs.get("ideal"):
            raise SpecError("plan: uncertainty needs the realism terms (the ideal roofline "
                            "has no measured spread); drop ideal")
        recs = add_bands(recs, m, hws, uncertainty, isl=isl, osl=osl, ttft_s=ttft_s,
                         tpot_s=tpot_s, gpus=gpus, cost=cost,
                         prefill_batch_sizes=grid["prefill_batch_size"],
                         engine_kw={k: v for k, v in engine_kw.items()
                                    if k not in ("realism", "ideal")},
                         free_acceptance="acceptance_rate" not in kwargs,
                         realism=kwargs.get("realism"), serving_engine=used)
    front = _front(cand)
    request = dict(model=m.name, hardware=[h.name for h in hws], gpus=gpus, min_gpus=min_gpus,
                   max_instance_gpus=max_instance_gpus,
                   acceptance_by_position=list(engine_kw.get("acceptance_by_position", [])),
                   isl=isl, osl=osl, ttft_s=ttft_s, tpot_s=tpot_s,
                   price=pr.id if pr is not None else None, cost_basis=cost.cost_basis,
                   objective=objective, load_output_tokens_per_s=load_output_tokens_per_s,
                   target_utilization=util, modes=list(modes), engine_options={k: v for k, v in kwargs.items()},
                   precision=[p.label() for p in profiles],
                   precision_notes={h: n for h, n in notes.items() if n},
                   uncertainty=(None if uncertainty is None or uncertainty is False else
                                "components" if uncertainty == "components" else "full"),
                   cost=dataclasses.asdict(cost),
                   engine=(",".join(sorted({e for _, e in used})) if names is None
                           else ",".join(str(getattr(n, "name", n)) for n in names)),
                   engines={f"{h} {e}": used[(h, e)].label() for h, e in sorted(used)})
    for df in (recs, cand, front):
        df.attrs.update({k: v for k, v in request.items() if isinstance(v, (str, int, float))})
    return PlanResult(recommendations=recs, candidates=cand, front=front, request=request)


def _engine_kw(engine_kw: dict, eng) -> dict:
    """The engine options as serving engine ``eng`` runs on its device: the realism with
    its profile's kernel choices (all-reduce + norm fusion, ``Realism.for_engine``)."""
    from ...engine import resolve_realism
    rl = resolve_realism(bool(engine_kw.get("ideal")), engine_kw.get("realism"))
    return {**engine_kw, "realism": rl.for_engine(eng)}
