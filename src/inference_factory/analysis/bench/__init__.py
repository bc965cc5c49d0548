"""``bench``: what a closed-loop serving benchmark (``vllm bench serve``) measures on one
deployment, per concurrency, and its comparison with measured results.

:mod:`.serve` (the entry :func:`bench`, over the shared :mod:`..closed_loop`),
:mod:`.metrics` (what a finite run reports: tails, the first wave, the Dataset),
:mod:`.bands` (prediction bands), :mod:`.results` (reading ``--save-result`` files),
:mod:`.comparison` (comparing them with a prediction, like with like). Names are imported on first use: reading results does not
load the model.
"""

from __future__ import annotations

from ...lazy import lazy_getattr

#: public name -> module of this package (or the shared closed loop) that defines it
_LAZY = {"bench": ".serve", "DEFAULT_CONCURRENCY": ".serve", "Pool": "..closed_loop",
         "read_bench_results": ".results", "compare_results": ".comparison",
         "summarize_comparison": ".comparison"}

__all__ = list(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
