"""``plan``: from a GPU budget and SLOs to one recommended deployment per device.

:mod:`.search` (the entry :func:`plan`, the search space, precision profiles),
:mod:`.candidates` (each shape's grid of candidates, aggregated through the shared
:mod:`..closed_loop`, disaggregated pools packed to each other), :mod:`.ranking` (sizing for
a load, the ranking, one recommendation per device, the front),
:mod:`.footing` (the share of a recommendation's time read from measured tables),
:mod:`.bands` (prediction bands of the recommendations), :mod:`.trace` (``plan --trace``:
deployments for a session trace, through ``bench --trace``'s replay), :mod:`.config` (the emitted factory
config and the plot). Names are imported on first use: reading :mod:`.footing` or
:mod:`.config` does not load the search.
"""

from __future__ import annotations

from ...lazy import lazy_getattr

#: public name -> module of this package that defines it
_LAZY = {"plan": ".search", "PlanResult": ".search", "candidate_shapes": ".search",
         "profile_precisions": ".search", "MODES": ".search", "DEFAULT_BATCHES": ".search",
         "DEFAULT_PREFILL_BATCHES": ".search", "OBJECTIVES": ".ranking",
         "pack_pools": ".candidates", "config_toml": ".config", "plot_front": ".config",
         "config_path": ".config", "footing_of": ".footing", "plan_trace": ".trace"}

__all__ = list(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
