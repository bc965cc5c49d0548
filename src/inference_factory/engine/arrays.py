"""The engine on plain numpy arrays, for one structure: the entry for loops inside the package
(plans, validation, searches evaluate their candidates as one grid) and for one-point answers.
No xarray and no backend here: a one-point answer needs neither.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..axes import NUMERIC_AXES, STRUCT_AXES
from ..errors import SpecError
from ..specs import HardwareSpec, ModelSpec, load_hardware, load_model
from ..specs.realism import Realism, load_realism
from .block import RESOURCES, evaluate_block, op_table
from .geometry import validate_struct
from .inputs import _AXIS_NAMES, _check_scalar, check_values


#: The labels of the binding-resource codes.
_RESOURCE_LABELS = np.asarray(RESOURCES)
#: The same labels, each as the int64 words of its UTF-32 text (one row per label).
_LABEL_WORDS = _RESOURCE_LABELS.view(np.int64).reshape(len(RESOURCES), -1)


def _labels(codes: np.ndarray) -> np.ndarray:
    """``_RESOURCE_LABELS[codes]``, copied as rows of int64 words (a fixed-width string array
    is gathered element by element; 10^6 labels: 15 -> 4 ms)."""
    if codes.ndim == 0:
        return _RESOURCE_LABELS[codes]
    words = np.take(_LABEL_WORDS, codes.astype(np.intp).reshape(-1), axis=0)
    return words.view(_RESOURCE_LABELS.dtype).reshape(codes.shape)


def _select(res: dict[str, Any], variables) -> dict[str, Any]:
    """The outputs named in ``variables`` (all when None); an unknown name is an error."""
    if variables is None:
        return res
    names = [variables] if isinstance(variables, str) else list(variables)
    unknown = [v for v in names if v not in res or v.startswith("_")]
    if unknown or not names:
        allowed = sorted(k for k in res if not k.startswith("_"))
        raise SpecError(f"variables = {unknown[0] if unknown else names!r} is not an output "
                        f"variable; allowed: {allowed}")
    return {k: v for k, v in res.items() if k in names or k.startswith("_")}


def _realism(ideal: bool, realism) -> Realism:
    """The realism constants of a call: ideal, "measured", "roofline" or an object."""
    if isinstance(realism, str):
        if realism not in ("measured", "roofline"):
            raise SpecError(f"realism = {realism!r} is not one of ['measured', 'roofline'] "
                            "(or a Realism object)")
        realism = load_realism() if realism == "measured" else load_realism().without("measured")
    return Realism.ideal() if ideal else (realism if realism is not None else load_realism())


def check_axis_names(kwargs) -> None:
    """Every keyword names an engine axis (numeric or structural)."""
    if not _AXIS_NAMES.issuperset(kwargs):
        unknown = set(kwargs) - _AXIS_NAMES
        raise SpecError(f"unknown axis {sorted(unknown)[0]!r}; allowed: {sorted(_AXIS_NAMES)}")


def check_draft(m: ModelSpec, draft: ModelSpec | None, drafts: bool) -> None:
    """A draft depth above zero needs a draft: the model's MTP module or a draft model."""
    if draft is None and m.n_mtp_modules == 0 and drafts:
        raise SpecError(f"draft_depth > 0 needs a draft: model {m.name!r} has no MTP "
                        "module; give a draft model (draft_model=NAME, CLI --draft-model NAME)")


def realism_mode(rl: Realism) -> str:
    """How a result was costed: "ideal", "measured" (tables where they cover) or "roofline"."""
    return "ideal" if rl.is_ideal else ("measured" if rl.measured else "roofline")


def invalid_fill(dtype: np.dtype) -> tuple:
    """(fill value, dtype) of an output at an invalid structural combination: numbers NaN
    (as floats), flags False, labels empty."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return False, np.dtype(bool)
    if kind in "OUS":
        return "", np.dtype(dtype)
    return np.nan, np.dtype(float)


def evaluate_arrays(model: str | ModelSpec, hardware: str | HardwareSpec, *,
                    ideal: bool = False, realism: Realism | str | None = None,
                    variables: Iterable[str] | None = None,
                    acceptance_by_position: Iterable[float] | None = None,
                    draft_model: str | ModelSpec | None = None,
                    expert_popularity: Iterable[float] | None = None,
                    uncertainty: Any = None, detail: str = "resources",
                    **kwargs: Any) -> dict[str, np.ndarray]:
    """:func:`evaluate` for one structure on plain arrays: each numeric axis a number or a
    numpy array, all broadcast together by numpy's rules (``batch_size=b[:, None]``,
    ``draft_depth=d[None, :]`` is their outer product); every structural choice one value.

    Returns each output variable as a numpy array broadcastable to the axes' common shape
    (an output that does not depend on an axis keeps length 1 along it), binding resources
    as labels; checks and results are :func:`evaluate`'s. A grid of candidates is then one
    vectorized pass, without the Dataset a call of :func:`evaluate` builds around it.

    ``uncertainty`` (True, "components" or an :class:`~..specs.uncertainty.Uncertainty`)
    adds ``<name>_low`` / ``<name>_high`` beside every float output (:mod:`.uncertainty`).

    ``detail="ops"`` adds :func:`evaluate`'s per-op detail as arrays with a leading op axis:
    ``op`` (the names), ``<phase>_op_time_s``, ``<phase>_op_resource`` and
    ``<phase>_op_source`` for the decode and prefill phases (:func:`op_arrays`).
    """
    check_axis_names(kwargs)
    if detail not in ("resources", "ops"):
        raise SpecError(f"detail = {detail!r} is not one of ['ops', 'resources']")
    rl = _realism(ideal, realism)
    if uncertainty is not None and uncertainty is not False:
        if detail != "resources":
            raise SpecError("evaluate_arrays: detail='ops' has no prediction bands")
        from .uncertainty import bands_arrays
        return bands_arrays(evaluate_arrays, model, hardware, uncertainty, realism=rl,
                            variables=variables, acceptance_by_position=acceptance_by_position,
                            draft_model=draft_model, expert_popularity=expert_popularity,
                            **kwargs)
    raw: dict[str, Any] = {}
    for k, v in NUMERIC_AXES.items():
        value = kwargs.get(k, v[0])
        if np.ndim(value) == 0:
            raw[k] = _check_scalar(k, float(value))
        else:
            arr = np.asarray(value, dtype=float)
            check_values(k, arr)                    # the same checks as a list
            raw[k] = arr
    shape = np.broadcast_shapes(*(np.shape(a) for a in raw.values()))
    raw = {k: (a if np.ndim(a) == 0 else np.asarray(a).reshape(
        (1,) * (len(shape) - np.ndim(a)) + np.shape(a))) for k, a in raw.items()}
    acc = _acceptance(acceptance_by_position, raw["draft_depth"])
    m, hw = load_model(model), load_hardware(hardware)
    draft = load_model(draft_model) if draft_model is not None else None
    s = {k: kwargs.get(k, v) for k, v in STRUCT_AXES.items()}
    for k, v in s.items():
        if isinstance(v, (list, tuple)):
            raise SpecError(f"{k} = {v!r}: evaluate_arrays takes one structure; give one value")
    g = validate_struct(m, hw, s, rl, expert_popularity)
    check_draft(m, draft, bool(np.any(np.asarray(raw["draft_depth"]) > 0)))
    res = _select(evaluate_block(g, raw, acc, draft, detail), variables)
    out = {k: _labels(np.asarray(v)) if k.endswith("_binding_resource") else np.asarray(v)
           for k, v in res.items() if not k.startswith("_")}
    if detail == "ops":
        out.update(op_arrays(res["_ops"], shape))
    return out


def op_arrays(passes, shape: tuple = ()) -> dict[str, np.ndarray]:
    """The per-op detail of a block's passes (``evaluate_block(..., detail="ops")``'s
    ``_ops``) as arrays over (op, *shape), as :func:`evaluate` lays out its ``op`` dimension:
    ``op`` the names of every phase's ops (first seen first), per phase the time, FLOPs and
    HBM bytes per step per GPU (NaN for an op the phase does not run), the resource label and
    the source label ("" where the phase does not run the op)."""
    table = op_table(passes)
    names = list(dict.fromkeys(n for phase in table.values() for n in phase[0]))
    shape = tuple(shape)
    out: dict[str, np.ndarray] = {"op": np.asarray(names, dtype=str)}
    for phase, (ops, times, res, src, flop, nbytes) in table.items():
        t = np.full((len(names),) + shape, np.nan)
        f = np.full((len(names),) + shape, np.nan)
        b = np.full((len(names),) + shape, np.nan)
        r = np.full((len(names),) + shape, "", dtype=object)
        so = np.full((len(names),) + shape, "", dtype=object)
        for name, ti, ri, si, fi, bi in zip(ops, times, res, src, flop, nbytes):
            i = names.index(name)
            t[i] = np.broadcast_to(np.asarray(ti, dtype=float), shape) if shape else ti
            f[i] = np.broadcast_to(np.asarray(fi, dtype=float), shape) if shape else fi
            b[i] = np.broadcast_to(np.asarray(bi, dtype=float), shape) if shape else bi
            r[i] = np.broadcast_to(np.asarray(ri, dtype=object), shape) if shape else ri
            so[i] = np.broadcast_to(np.asarray(si, dtype=object), shape) if shape else si
        out[f"{phase}_op_time_s"] = t
        out[f"{phase}_op_flop_per_gpu"] = f
        out[f"{phase}_op_hbm_bytes_per_gpu"] = b
        out[f"{phase}_op_resource"] = r.astype(str)
        out[f"{phase}_op_source"] = so.astype(str)
    return out


def _acceptance(acceptance_by_position, draft_depth):
    """Per-position acceptance as an array, checked against the deepest draft asked for."""
    if acceptance_by_position is None:
        return None
    acc = np.asarray(list(acceptance_by_position), dtype=float)
    if acc.ndim != 1 or acc.size == 0 or np.any((acc < 0) | (acc > 1)):
        raise SpecError(f"acceptance_by_position = {list(acc)} must be a non-empty list of "
                        "fractions in [0, 1]")
    deepest = np.max(np.asarray(draft_depth))
    if deepest > acc.size:
        raise SpecError(f"draft_depth up to {deepest:g} needs {int(deepest)} acceptance values; "
                        f"acceptance_by_position has {acc.size}")
    return acc
