"""The engine: one layer as a list of named operations, each costed from measured kernel
tables or the roofline, combined into steps by an explicit schedule, over xarray grids.

Modules: :mod:`.geometry` (structural choices, expert placement, memory), :mod:`.ops` (the op
graph per layer family), :mod:`.grid` and :mod:`.measured` (measured tables and their
interpolation), :mod:`.cost` (cost per op), :mod:`.schedule` (sequential and stage-wise
two-batch overlap), :mod:`.block` (one structural block), :mod:`.inputs` (axis checks),
:mod:`.arrays` (``evaluate_arrays``: one structure on numpy arrays), :mod:`.evaluate`
(``evaluate``: any grid, as a Dataset), :mod:`.fused` (point lists through the compiled
backend, long grids by tiles), :mod:`.dataset` (results as Datasets and DataFrames), :mod:`.xp`
(the seam the physics sees backends through), :mod:`.backends` (the tracer and its numba
interpreter). Names are imported on first use, so an answer on arrays never imports xarray.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..axes import NUMERIC_AXES, STRUCT_AXES, CacheTier, Overlap

#: public name -> module of this package that defines it
_LAZY = {"RESOURCES": ".block", "evaluate": ".evaluate", "evaluate_arrays": ".arrays",
         "to_dataframe": ".dataset"}

__all__ = ["NUMERIC_AXES", "STRUCT_AXES", "RESOURCES", "CacheTier", "Overlap", "evaluate",
           "evaluate_arrays", "to_dataframe"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
