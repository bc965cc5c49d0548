"""The engine: one layer as a list of named operations, each costed from measured kernel
tables or the roofline, combined into steps by an explicit schedule, over xarray grids.

Modules: :mod:`.geometry` (structural choices, expert placement, memory), :mod:`.ops` (the op
graph per layer family), :mod:`.grid` and :mod:`.measured` (measured tables and their
interpolation), :mod:`.cost` (cost per op), :mod:`.schedule` (sequential and stage-wise
two-batch overlap), :mod:`.block` (one structural block), :mod:`.core` (``evaluate``).
"""

from .block import RESOURCES
from .core import NUMERIC_AXES, STRUCT_AXES, CacheTier, Overlap, evaluate, to_dataframe

__all__ = ["NUMERIC_AXES", "STRUCT_AXES", "RESOURCES", "CacheTier", "Overlap", "evaluate",
           "to_dataframe"]
