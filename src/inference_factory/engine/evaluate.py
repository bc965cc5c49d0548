"""The roofline engine: one call evaluates prefill and decode over a grid of named axes.

``evaluate(model, hardware, batch_size=[1, 8, 64], kv_len=[1024, 4096], ...)`` returns an
``xr.Dataset`` whose dimensions are the arguments given as lists. Numeric axes (batch size,
context, prompt length, draft depth, acceptance, cache-hit rate) broadcast through the pure
kernels in :mod:`inference_factory.kernels`: there is no Python loop over grid points.
Structural choices (hardware, model, parallelism, precisions, overlap policy) may be lists
too; each combination is one vectorized block, concatenated along its own dimension.

:func:`.arrays.evaluate_arrays` is the same evaluation for one structure on plain numpy arrays
(no Dataset, no xarray import): the entry for loops inside the package and one-point answers.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Mapping

import numpy as np
import xarray as xr

from .. import __version__
from ..axes import NUMERIC_AXES, STRUCT_AXES, CacheTier, Overlap  # noqa: F401 (re-exported)
from ..errors import SpecError
from ..specs import HardwareSpec, ModelSpec, load_hardware, load_model
from ..specs.realism import Realism
from .arrays import (_acceptance, _realism, _select, check_axis_names, check_draft,  # noqa: F401
                     evaluate_arrays, realism_mode)
from .block import evaluate_block, op_table
from .dataset import (_add_ops, _dim_attrs, _masked_block, _struct_attrs,  # noqa: F401
                      _to_dataset, to_dataframe)
from .fused import _evaluate_tiled
from .geometry import validate_struct
from .inputs import _as_axis, _listify, _raw_axes


def evaluate(model: str | ModelSpec | Iterable = "Llama-3.1-8B",
             hardware: str | HardwareSpec | Iterable = "H100-SXM", *,
             ideal: bool = False, realism: Realism | str | None = None,
             detail: str = "resources",
             variables: Iterable[str] | None = None,
             acceptance_by_position: Iterable[float] | None = None,
             draft_model: str | ModelSpec | None = None,
             expert_popularity: Iterable[float] | None = None,
             uncertainty: Any = None,
             **kwargs: Any) -> xr.Dataset:
    """Evaluate prefill and decode of ``model`` on ``hardware`` over a grid of named axes.

    Parameters
    ----------
    model, hardware : name, alias, path, spec, or a list of them (each list adds a dimension)
    batch_size, kv_len, prompt_len, prefill_batch_size, draft_depth, acceptance_rate,
    cache_hit_rate : number or list
        Numeric axes (see ``NUMERIC_AXES`` for units and ranges). A list adds a dimension.
    tp, dp, ep, redundant_experts, expert_skew, weight_precision, moe_precision, kv_precision,
    attention_precision, dispatch_precision, combine_precision, overlap, cache_tier : value or list
        Structural choices. ``tp`` x ``dp`` GPUs form one serving instance; MoE layers use
        ``ep`` expert-parallel ranks and ``tp*dp/ep``-way expert tensor parallelism.
    ideal : bool
        Pure roofline: every realism term off, parts combined by max.
    realism : Realism, "measured" or "roofline"
        Realism constants (default: bundled ``configs/realism.toml``, which costs every op from
        the measured kernel tables where they cover it). ``"roofline"``: the same constants
        with the measured tables off (every op on the realistic roofline).
    variables : list of str
        Keep only these output variables (default: all). A list of points is then computed
        for them alone (the fused pass drops the rest of the work) and the result holds only
        them: Monte Carlo over 10^7 points fits in memory.
    detail : "resources" or "ops"
        ``"ops"`` adds an ``op`` dimension: each operation's time per step
        (``decode_op_time_s``, ``prefill_op_time_s``), the resource it is charged to and where
        its cost came from (``*_op_source``: measured / interpolated / extrapolated / roofline).
    acceptance_by_position : list of float
        Per-position acceptance a_1..a_D, instead of a constant ``acceptance_rate``.
    draft_model : model name
        Separate draft model for speculative decoding (default: the model's MTP module).
    expert_popularity : sequence of float
        Share of routed tokens per expert (overrides ``expert_skew``; e.g. measured or mixed
        from workload classes).
    uncertainty : True, "components" or an Uncertainty
        Add a ``quantile`` dimension (0.1, 0.5, 0.9 by default) to every float variable:
        the point in the middle, the 80 % band around it (:mod:`.uncertainty`).

    Returns
    -------
    xr.Dataset
        Per-resource times, step times, binding resources, tokens/s per GPU and per user,
        TTFT, TPOT, memory and ``fits``; units in each variable's ``attrs``. The binding
        resources of a list of 2^18 points or more are labels read lazily, as a file's
        variable: kept as one-byte codes until first read (``.values``, ``load()``, a
        DataFrame), then kept as labels; a selection reads its own points only.
    """
    check_axis_names(kwargs)
    if uncertainty is not None and uncertainty is not False:
        # prediction bands: a ``quantile`` dimension (docs/MODEL.md section 13)
        from .uncertainty import bands_dataset
        return bands_dataset(evaluate, model, hardware, uncertainty,
                             realism=_realism(ideal, realism), detail=detail,
                             variables=variables, acceptance_by_position=acceptance_by_position,
                             draft_model=draft_model, expert_popularity=expert_popularity,
                             **kwargs)
    if detail not in ("resources", "ops"):
        raise SpecError(f"detail = {detail!r} is not one of ['ops', 'resources']")
    rl = _realism(ideal, realism)
    axes = {k: _as_axis(k, kwargs.get(k, v[0])) for k, v in NUMERIC_AXES.items()}
    acceptance_by_position = _acceptance(acceptance_by_position, axes["draft_depth"])
    models = [load_model(x) for x in _listify(model)]
    hws = [load_hardware(x) for x in _listify(hardware)]
    for kind, specs in (("model", models), ("hardware", hws)):
        names = [x.name for x in specs]
        if len(set(names)) < len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise SpecError(f"{kind} {dup!r} is listed twice (names and aliases resolve to the "
                            f"same spec); give each once")
    draft = load_model(draft_model) if draft_model is not None else None
    struct = {k: _listify(kwargs.get(k, v)) for k, v in STRUCT_AXES.items()}
    struct_dims = [k for k in STRUCT_AXES if isinstance(kwargs.get(k), (list, tuple))]
    for k in struct_dims:
        vals = struct[k]
        if len(set(map(str, vals))) < len(vals):
            raise SpecError(f"{k} = {vals!r} lists a value twice; give each once")

    dim_order, dim_sizes, raw_axes = _raw_axes(axes)
    blocks = []
    chosen: dict[str, set] = {k: set() for k in STRUCT_AXES if k not in struct_dims}
    listed = any(len(struct[k]) > 1 for k in struct_dims)
    invalid: list[tuple[dict, SpecError]] = []
    valid: list[tuple] = []
    for mi, hi in itertools.product(models, hws):
        for combo in itertools.product(*struct.values()):
            s = dict(zip(struct, combo))
            try:
                g = validate_struct(mi, hi, s, rl, expert_popularity)
            except SpecError as exc:
                if not listed:
                    raise
                # a combination of list values the model cannot take (ep not dividing tp x dp,
                # say) is masked (valid = False), not raised: the other points stand
                invalid.append(({"model": mi.name, "hardware": hi.name,
                                 **{k: s[k] for k in struct_dims}}, exc))
                continue
            for k, v in _resolved_struct(g, s).items():
                if k in chosen:
                    chosen[k].add(v)
            valid.append((mi, hi, s, g))
    # structural choices held at one value (defaults resolved) are scalar coordinates, so a
    # result remembers its shape and precisions (and frames of several calls stay apart);
    # given at construction, like model and hardware (no extra alignment per call)
    held = {k: ((), next(iter(v)), _struct_attrs(k)) for k, v in chosen.items() if len(v) == 1}
    d = axes["draft_depth"]
    any_draft = d > 0 if isinstance(d, float) else bool(np.any(np.asarray(d) > 0))
    for mi, hi, s, g in valid:
        check_draft(mi, draft, any_draft)
        if detail == "ops":
            res = _select(evaluate_block(g, raw_axes, acceptance_by_position, draft, detail),
                          variables)
        else:
            res = _evaluate_tiled(g, raw_axes, dim_order, dim_sizes,
                                  acceptance_by_position, draft, variables)
        passes = res.pop("_ops", None)
        ds = _to_dataset(res, dim_order, dim_sizes, axes,
                         {"model": mi.name, "hardware": hi.name, **held})
        if passes is not None:
            ds = _add_ops(ds, op_table(passes), dim_order, dim_sizes)
        if struct_dims:
            ds["valid"] = xr.DataArray(True, attrs={
                "long_name": "the structural combination is a valid instance"})
        blocks.append((ds, mi.name, hi.name, {k: s[k] for k in struct_dims}))
    if invalid:
        if not blocks:
            raise invalid[0][1]
        blocks += [(_masked_block(blocks[0][0]), c["model"], c["hardware"],
                    {k: c[k] for k in struct_dims}) for c, _ in invalid]
    if len(blocks) == 1:
        # one block: model and hardware are scalar coordinates, nothing to align or copy
        ds, _, _, sdims = blocks[0]
        ds = ds.expand_dims({k: [v] for k, v in sdims.items()}) if sdims else ds
    else:
        ds = xr.combine_by_coords(
            [b.drop_vars(["model", "hardware"]).expand_dims(
                {"model": [mn], "hardware": [hn], **{k: [v] for k, v in sd.items()}})
             for b, mn, hn, sd in blocks], combine_attrs="drop_conflicts")
        # keep the order the user gave (combine_by_coords sorts labels)
        order = {"model": [x.name for x in models], "hardware": [x.name for x in hws]}
        order.update({k: struct[k] for k in struct_dims})
        order = {k: v for k, v in order.items() if k in ds.dims and ds.sizes[k] > 1
                 and list(ds.indexes[k]) != list(v)}
        ds = ds.reindex(order) if order else ds
        ds = ds.squeeze([d for d in ("model", "hardware") if ds.sizes[d] == 1])
    _dim_attrs(ds)
    ds.attrs.update({
        "title": "inference-factory roofline evaluation",
        "inference_factory_version": __version__,
        "mode": realism_mode(rl),
        "realism_source": rl.source,
        "models": ", ".join(f"{x.name} ({x.path})" for x in models),
        "hardware": ", ".join(f"{x.name} ({x.path})" for x in hws),
        "hardware_files": "; ".join(f"{x.name}={x.path}" for x in hws),
    })
    return ds




def _resolved_struct(g, s: Mapping[str, Any]) -> dict[str, Any]:
    """The structural choices of one block as used (defaults resolved by validate_struct)."""
    return {"tp": g.tp, "dp": g.dp, "ep": g.ep, "redundant_experts": g.redundant,
            "expert_skew": g.skew, "context_cv": g.context_cv, "weight_precision": g.wprec,
            "moe_precision": g.eprec, "kv_precision": g.kvprec, "attention_precision": g.aprec,
            "dispatch_precision": s["dispatch_precision"] or "fp8",
            "combine_precision": s["combine_precision"] or "bf16", "overlap": g.overlap,
            "cache_tier": g.tier}

