"""The engine: one layer as a list of named operations, each costed from measured kernel
tables or the roofline, combined into steps by an explicit schedule, over xarray grids.

Modules: :mod:`.geometry` (structural choices, expert placement, memory), :mod:`.ops` (the op
graph per layer family), :mod:`.attention` (one module per attention kind behind one
interface), :mod:`.layer_mix` (a model's parameters and memory terms summed over its layer
mix), :mod:`.op` (the op record and shared builders), :mod:`.grid` and :mod:`.measured` (measured tables and their
interpolation), :mod:`.cost` (cost per op), :mod:`.schedule` (sequential and stage-wise
two-batch overlap), :mod:`.block` (one structural block), :mod:`.inputs` (axis checks),
:mod:`.arrays` (``evaluate_arrays``: one structure on numpy arrays), :mod:`.evaluate`
(``evaluate``: any grid, as a Dataset), :mod:`.fused` (point lists through the compiled
backend, long grids by tiles), :mod:`.dataset` (results as Datasets and DataFrames), :mod:`.xp`
(the seam the physics sees backends through), :mod:`.backends` (the tracer and its numba
interpreter), :mod:`.decode` (a draft's acceptance per position as engine options, decode
outputs re-read under another acceptance or a colocated prefill share). Names are imported on
first use, so an answer on arrays never imports xarray. The layers above (``analysis/``,
``cli/``) import the engine's names from this package only (``__all__``).
"""

from __future__ import annotations

from ..axes import NUMERIC_AXES, STRUCT_AXES, CacheTier, Overlap
from ..lazy import lazy_getattr

#: public name -> module of this package that defines it, or (module, name there) where the
#: defining module keeps a private name (analysis/ and cli/ import the engine's names from here)
_LAZY = {"RESOURCES": ".block", "evaluate": ".evaluate", "evaluate_arrays": ".arrays",
         "to_dataframe": ".dataset", "as_count": ".dataset",
         "invalid_fill": ".arrays", "realism_mode": ".arrays",
         "resolve_realism": (".arrays", "_realism"),
         "validate_struct": ".geometry", "compute_precision": ".geometry",
         "tables_for": ".measured",
         "sample_arrays": ".uncertainty", "band": ".uncertainty", "widen": ".uncertainty",
         "widened_band": ".uncertainty",
         "structure_ln": ".uncertainty", "resolve_uncertainty": (".uncertainty", "resolve"),
         "with_mtp_acceptance": ".decode",
         "mtp_acceptance_by_position": ".decode", "decode_outputs": ".decode",
         "architecture": ".layer_mix", "load_model": ".layer_mix",
         "OpFactors": ".uncertainty", "perturbed": ".uncertainty", "strata": ".uncertainty"}

__all__ = ["NUMERIC_AXES", "STRUCT_AXES", "CacheTier", "Overlap", *_LAZY]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
