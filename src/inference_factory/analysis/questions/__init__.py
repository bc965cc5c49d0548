"""The questions users ask of the engine, as library functions (``inference-factory
best-draft``, ``max-batch``, ``cheapest``, ``pareto``, ``waterfall``, ``tornado``,
``monte-carlo``): :mod:`.best` (best draft depth, the Pareto front), :mod:`.slo` (max batch
and cheapest meeting SLOs), :mod:`.sensitivity` (tornado, Monte Carlo, cost_model),
:mod:`.args` (shared constants and argument checks). Users import them from here."""

from ...factory.levers import INTERACTIONS, WATERFALL_METRICS, lever_waterfall
from ..pareto import pareto_mask
from .args import (COST_PARAMETERS, DOLLAR_METRICS, ENGINE_OPTIONS, PRICE_PARAMETERS, PRICED,
                   RATIO_PARAMETER, check_ratio, default_batch_grid)
from .best import best_draft_depth, pareto_front
from .sensitivity import MonteCarloResult, cost_model, monte_carlo, tornado
from .slo import cheapest_meeting_slo, max_batch_meeting_slo

__all__ = ["best_draft_depth", "max_batch_meeting_slo", "cheapest_meeting_slo", "pareto_front",
           "pareto_mask", "tornado", "monte_carlo", "MonteCarloResult", "default_batch_grid",
           "cost_model", "lever_waterfall", "INTERACTIONS", "WATERFALL_METRICS",
           "COST_PARAMETERS", "PRICE_PARAMETERS", "DOLLAR_METRICS", "ENGINE_OPTIONS", "PRICED",
           "RATIO_PARAMETER", "check_ratio"]
