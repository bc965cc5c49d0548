"""Validation against published serving figures (``inference-factory validate``):
:mod:`.cases` (the case-file contract, its checks, a case's metric from the engine's
outputs), :mod:`.predictions` (predict every case, summarize, the docs table), :mod:`.bands`
(prediction bands of the cases and their coverage). Users import them from here."""

from .cases import COLUMNS, METRICS, OVERLAPS, PHASES, load_cases, metric_of
from .predictions import (DOCS_BEGIN, DOCS_END, GRID_POINTS, markdown_table, predict,
                          summarize)

__all__ = ["load_cases", "predict", "summarize", "markdown_table", "metric_of", "COLUMNS",
           "METRICS", "OVERLAPS", "PHASES", "DOCS_BEGIN", "DOCS_END", "GRID_POINTS"]
