"""The engine: one layer as a list of named operations, each costed from measured kernel
tables or the roofline, combined into steps by an explicit schedule, over xarray grids.

Modules: :mod:`.geometry` (structural choices, expert placement, memory), :mod:`.ops` (the op
graph per layer family), :mod:`.grid` and :mod:`.measured` (measured tables and their
interpolation), :mod:`.cost` (cost per op), :mod:`.schedule` (sequential and stage-wise
two-batch overlap), :mod:`.block` (one structural block), :mod:`.inputs` (axis checks),
:mod:`.evaluate` (``evaluate``, ``evaluate_arrays``), :mod:`.fused` (point lists through the
compiled backend, long grids by tiles), :mod:`.dataset` (results as Datasets and DataFrames),
:mod:`.xp` (the seam the physics sees backends through), :mod:`.backends` (the tracer and its
numba interpreter).
"""

from .block import RESOURCES
from .evaluate import NUMERIC_AXES, STRUCT_AXES, CacheTier, Overlap, evaluate, evaluate_arrays
from .dataset import to_dataframe

__all__ = ["NUMERIC_AXES", "STRUCT_AXES", "RESOURCES", "CacheTier", "Overlap", "evaluate",
           "evaluate_arrays", "to_dataframe"]
