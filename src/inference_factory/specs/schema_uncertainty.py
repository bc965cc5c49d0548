"""Schema of the uncertainty sources (``configs/uncertainty.toml``): the sampling settings, the
leave-one-out spread of every measured op family per device, the roofline-against-table
spread per op class, the labelled assumption ranges and the model-structure (conformal) term.
The loader is :func:`inference_factory.specs.uncertainty.load_uncertainty`.

Re-exported by :mod:`.schema`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .schema_base import _Schema, count, num, text

#: The largest ln spread a file may state (a factor e^3 = 20 either way at one sigma).
MAX_SIGMA_LN = 3.0


class UncertaintySampling(_Schema):
    draws: count(8, 10_000, "Monte Carlo draws per evaluation")
    seed: count(0, 2**32 - 1, "seed of the draws (results are deterministic under it)")
    levels: count(1, 64, "distinct values of the structural assumptions (expert skew, context "
                         "spread, runtime reserve, overlap SMs): Latin-hypercube strata")
    quantiles: list[num(0.0, 1.0, "quantile of the band", lo_open=True, hi_open=True)] = Field(
        min_length=3, max_length=3, description="low, middle and high quantile of the band")


class FamilySpread(_Schema):
    sigma_ln: num(0.0, MAX_SIGMA_LN, "standard deviation of ln(time) of the family's draws")
    median_abs_ln: num(0.0, MAX_SIGMA_LN, "median |ln(predicted / measured)| it comes from")
    n: count(0, 10**7, "residuals behind it")


class RooflineSpread(FamilySpread):
    mean_ln: num(-MAX_SIGMA_LN, MAX_SIGMA_LN, "mean ln(roofline / measured) (bias; reported, "
                                             "not applied: the point is not moved)")


class AssumptionRange(_Schema):
    low: num(0.0, 10.0, "lowest value of the range")
    high: num(0.0, 10.0, "highest value of the range")
    source: text("where the range comes from, or ASSUMPTION with its bias")


class ConformalTerm(_Schema):
    widen_ln: num(0.0, MAX_SIGMA_LN, "ln factor each side of the band is widened by")
    n_cases: count(0, 10**6, "development cases it was calibrated on")
    method: text("how it was calibrated")


class UncertaintyFile(_Schema):
    sampling: UncertaintySampling
    measured: dict[str, dict[str, FamilySpread]] = Field(
        description="table folder -> op family -> leave-one-out spread")
    measured_default: FamilySpread = Field(
        description="spread of a measured family without its own leave-one-out residuals")
    roofline: dict[Literal["gemm", "moe", "attention", "allreduce", "a2a", "other"],
                   RooflineSpread] = Field(description="op class -> roofline-vs-table spread")
    assumptions: dict[Literal["expert_skew", "context_cv", "acceptance_rate",
                              "runtime_reserve_frac", "overlap_comm_sm_frac"], AssumptionRange]
    conformal: dict[Literal["measured", "roofline_only"], ConformalTerm]
    bench_conformal: ConformalTerm | None = None
