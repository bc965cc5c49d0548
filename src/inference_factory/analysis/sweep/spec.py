"""The sweep description: :class:`SweepSpec` (models, hardware, axes, fixed values,
economics), the axis and setting parsers of the command line (:func:`parse_axis`,
:func:`parse_setting`) and the sweep-file reader (:func:`load_sweep_file`).

Re-exported by :mod:`inference_factory.analysis.sweep`, where users import them."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..economics import CostModel
from ...engine import NUMERIC_AXES, STRUCT_AXES
from ...specs import schema as schemas
from ...specs.grammar import check_values, parse_values, scalar as _scalar
from ...errors import SpecError
from ...specs.files import read_toml

#: Axes a sweep may vary, in the engine's dimension order.
SPEC_AXES: tuple[str, ...] = ("model", "hardware", *STRUCT_AXES, *NUMERIC_AXES)


# --------------------------------------------------------------------------------------------
# the sweep description
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepSpec:
    """What to evaluate. ``axes`` maps axis names to tuples of values (each a dimension);
    ``fixed`` maps axis names to scalars. ``model`` and ``hardware`` are tuples of names."""

    models: tuple[str, ...]
    hardware: tuple[str, ...]
    axes: Mapping[str, tuple] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    ideal: bool = False
    draft_model: str | None = None
    price: str | None = None
    cost: CostModel | None = None
    name: str = ""
    description: str = ""
    path: str = ""          # the sweep file, "" when built on the command line
    #: The serving-engine profile's name (None: the default), named in the result's attrs;
    #: the per-step engine a sweep evaluates uses none of its settings.
    engine: str | None = None

    @property
    def economics(self) -> bool:
        return self.price is not None or self.cost is not None

    @property
    def n_points(self) -> int:
        return math.prod(len(v) for v in self.axes.values()) * len(self.models) * len(self.hardware)

    def with_axis(self, name: str, values: Sequence) -> "SweepSpec":
        """A copy with ``name`` swept over ``values`` (model and hardware included)."""
        _check_axis_name(name, f"--axis {name}")
        values = tuple(values)
        if not values:
            raise SpecError(f"axis {name!r} is empty; give at least one value")
        if name == "model":
            return replace(self, models=values)
        if name == "hardware":
            return replace(self, hardware=values)
        axes = dict(self.axes)
        axes[name] = values
        fixed = {k: v for k, v in self.fixed.items() if k != name}
        return replace(self, axes=axes, fixed=fixed)

    def with_fixed(self, name: str, value: Any) -> "SweepSpec":
        """A copy with ``name`` held at ``value`` (removed from the swept axes)."""
        _check_axis_name(name, f"--set {name}", allow_lists=False)
        fixed = dict(self.fixed)
        fixed[name] = value
        axes = {k: v for k, v in self.axes.items() if k != name}
        return replace(self, axes=axes, fixed=fixed)

    def evaluate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the equivalent :func:`inference_factory.evaluate` call."""
        kw: dict[str, Any] = dict(self.fixed)
        kw.update({k: list(v) for k, v in self.axes.items()})
        if self.draft_model is not None:
            kw["draft_model"] = self.draft_model
        return kw


def _check_axis_name(name: str, where: str, allow_lists: bool = True) -> None:
    allowed = SPEC_AXES if allow_lists else SPEC_AXES[2:]
    if name not in allowed:
        hint = ("; model and hardware are lists (--model/--hardware or --axis)"
                if name in ("model", "hardware") else "")
        raise SpecError(f"{where}: unknown axis {name!r}; allowed: {list(allowed)}{hint}")


# --------------------------------------------------------------------------------------------
# parsing axis specifications
# --------------------------------------------------------------------------------------------


def coerce_values(name: str, values: Sequence, where: str) -> tuple:
    """Numeric axes become floats (with a clear message for names); model and hardware
    names stay strings; structural values keep their parsed type."""
    if name in NUMERIC_AXES:
        out = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise SpecError(f"{where}: {name} = {v!r} must be a number "
                                f"({NUMERIC_AXES[name][1]})")
            out.append(float(v))
        return tuple(out)
    if name in ("model", "hardware"):
        return tuple(str(v) for v in values)
    return tuple(values)


def parse_axis(text: str, where: str | None = None) -> tuple[str, tuple]:
    """``"batch_size=1,2,4,...,1024"`` -> ``("batch_size", (1.0, 2.0, ..., 1024.0))``.

    Raises SpecError (one line) on an unknown axis name or an empty or malformed range.
    Values outside an axis's domain are rejected by the engine when the sweep runs.
    """
    where = where or f"--axis {text}"
    if "=" not in text:
        raise SpecError(f"{where}: expected NAME=VALUES, e.g. batch_size=1,2,4,...,1024")
    name, spec = (s.strip() for s in text.split("=", 1))
    _check_axis_name(name, where)
    return name, coerce_values(name, check_values(name, parse_values(spec, where), where), where)


def parse_setting(text: str, where: str | None = None) -> tuple[str, Any]:
    """``"kv_len=4096"`` -> ``("kv_len", 4096.0)``: one fixed value."""
    where = where or f"--set {text}"
    if "=" not in text:
        raise SpecError(f"{where}: expected NAME=VALUE, e.g. kv_len=4096")
    name, value = (s.strip() for s in text.split("=", 1))
    _check_axis_name(name, where, allow_lists=False)
    if not value:
        raise SpecError(f"{where}: no value given for {name}")
    return name, coerce_values(name, check_values(name, (_scalar(value),), where), where)[0]


# --------------------------------------------------------------------------------------------
# sweep files
# --------------------------------------------------------------------------------------------


def load_sweep_file(path: str | os.PathLike) -> SweepSpec:
    """Read a sweep file (strict TOML; an unknown key is a one-line SpecError).

    ::

        [sweep]
        name = "decode_grid"                 # optional
        description = "..."                  # optional
        model = "DeepSeek-V3"                # a name or a list (a list adds a dimension)
        hardware = ["H800-SXM", "H200-SXM"]
        ideal = false                        # optional
        draft_model = "Llama-3.1-8B"         # optional

        [axes]                               # each entry is a dimension
        batch_size = "1,2,4,...,256"         # a specification string, or
        draft_depth = [0, 1, 2, 3]           # a list of values
        kv_precision = ["bf16", "fp8"]

        [fixed]                              # scalars
        dp = 32
        kv_len = 4096

        [economics]                          # optional: add_economics on the result
        price = "deepseek-chat-2025-02"
        cost_basis = "rental"                # rental | capex | tco; other CostModel fields too
    """
    p = Path(path)
    f = schemas.check(schemas.SweepFile, read_toml(p), str(p))
    name = f.sweep.name if f.sweep.name is not None else p.stem
    description = f.sweep.description or ""
    models = tuple(f.sweep.model) if f.sweep.model is not None else None
    hardware = tuple(f.sweep.hardware) if f.sweep.hardware is not None else None
    ideal = bool(f.sweep.ideal)
    draft = f.sweep.draft_model
    engine = None
    if f.sweep.engine is not None:
        from ...specs.engines import resolve_serving_engine
        engine = resolve_serving_engine(f.sweep.engine, f"{p}: sweep.engine").name

    axes: dict[str, tuple] = {}
    for key, raw in f.axes.items():
        where = f"{p}: axes.{key}"
        _check_axis_name(key, where)
        if isinstance(raw, str):
            values = parse_values(raw, where)
        elif isinstance(raw, list):
            if not raw:
                raise SpecError(f"{where}: empty range (empty list); give at least one value")
            if any(isinstance(v, (list, dict)) for v in raw):
                raise SpecError(f"{where} = {raw!r} must be a flat list of values")
            values = tuple(raw)
        elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
            values = (raw,)
        else:
            raise SpecError(f"{where} = {raw!r} must be a list or a specification string "
                            "such as \"1,2,4,...,1024\" or \"0:0.9:10\"")
        values = coerce_values(key, check_values(key, values, where), where)
        if key == "model":
            if models is not None:
                raise SpecError(f"{where}: model is also given in [sweep]; give it once")
            models = values
        elif key == "hardware":
            if hardware is not None:
                raise SpecError(f"{where}: hardware is also given in [sweep]; give it once")
            hardware = values
        else:
            axes[key] = values

    fixed: dict[str, Any] = {}
    for key, raw in f.fixed.items():
        where = f"{p}: fixed.{key}"
        _check_axis_name(key, where, allow_lists=False)
        if key in axes:
            raise SpecError(f"{where}: {key} is also an axis in [axes]; give it once")
        if isinstance(raw, (list, dict)) or isinstance(raw, bool):
            raise SpecError(f"{where} = {raw!r} must be one value (lists go in [axes])")
        fixed[key] = coerce_values(key, check_values(key, (raw,), where), where)[0]

    price, cost = None, None
    if f.economics is not None:
        ec = f.economics.model_dump()
        price = ec.pop("price")
        ec["cost_basis"] = ec["cost_basis"] or "rental"
        cost = CostModel(**{k: v for k, v in ec.items() if v is not None})

    if models is None or hardware is None:
        missing = "model" if models is None else "hardware"
        raise SpecError(f"{p}: sweep.{missing} is missing (required): a name or a list of names")
    return SweepSpec(models=models, hardware=hardware, axes=axes, fixed=fixed, ideal=ideal,
                     draft_model=draft, price=price, cost=cost, name=name,
                     description=description, path=str(p), engine=engine)


