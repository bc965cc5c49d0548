"""The sources of uncertainty (``configs/uncertainty.toml``), loaded once into a frozen
:class:`Uncertainty`.

Every spread there is measured (leave-one-out residuals of the measured tables, the roofline
against the tables on the devices that have them: ``calibration/uncertainty_spreads.py``
writes them) or a labelled range; the engine's sampling is :mod:`..engine.uncertainty`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..errors import SpecError
from .catalog import _cached
from .files import read_toml, data_dir


@dataclass(frozen=True)
class Uncertainty:
    """Spreads (standard deviations of ln time), assumption ranges and the conformal term."""

    draws: int
    seed: int
    levels: int
    quantiles: tuple[float, float, float]
    #: table folder -> family -> sigma of ln time (leave-one-out)
    measured_sigma_ln: Mapping[str, Mapping[str, float]]
    measured_default_sigma_ln: float
    #: op class (gemm, moe, attention, allreduce, a2a, other) -> sigma of ln time
    roofline_sigma_ln: Mapping[str, float]
    #: assumption -> (low, high)
    ranges: Mapping[str, tuple[float, float]]
    #: "measured" / "roofline_only" -> ln widening of each side
    conformal_ln: Mapping[str, float]
    bench_conformal_ln: float | None = None
    source: str = ""
    raw: Mapping = field(default_factory=dict, repr=False, compare=False)

    def family_sigma_ln(self, folder: str, family: str) -> float:
        """Spread of a measured family on a table folder (the default where none was
        measured: a family with too few rows for a leave-one-out)."""
        return self.measured_sigma_ln.get(folder, {}).get(family, self.measured_default_sigma_ln)

    def pinned(self) -> "Uncertainty":
        """A copy with every assumption range collapsed (components only)."""
        import dataclasses
        return dataclasses.replace(self, ranges={})


def load_uncertainty(path: str | os.PathLike | None = None) -> Uncertainty:
    """Load the uncertainty sources (default: the bundled ``configs/uncertainty.toml``)."""
    p = Path(path) if path is not None else data_dir("configs") / "uncertainty.toml"
    if not p.is_file():
        raise SpecError(f"{p}: file not found")
    return _cached(p, _parse)


def _domains() -> dict[str, tuple[float, float]]:
    from ..axes import STRUCT_NUMBERS

    frac = (0.0, 1.0)
    return {"expert_skew": STRUCT_NUMBERS["expert_skew"],
            "context_cv": STRUCT_NUMBERS["context_cv"], "acceptance_rate": frac,
            "runtime_reserve_frac": frac, "overlap_comm_sm_frac": frac}


#: Where each assumption's range may lie: the fractions in [0, 1], the skew and the context
#: spread in their engine axes' ranges (axes.STRUCT_NUMBERS), so a band never draws a value
#: the engine refuses (an acceptance of 1.2 was accepted).
ASSUMPTION_DOMAINS = _domains()


def _parse(p: Path) -> Uncertainty:
    from .schema_base import check
    from .schema_uncertainty import UncertaintyFile

    raw = read_toml(p)
    f = check(UncertaintyFile, raw, str(p))
    q = tuple(float(x) for x in f.sampling.quantiles)
    if not q[0] < q[1] < q[2]:
        raise SpecError(f"{p}: sampling.quantiles = {list(q)} must be increasing")
    for k, r in f.assumptions.items():
        if r.low > r.high:
            raise SpecError(f"{p}: assumptions.{k}.low = {r.low:g} is above high = {r.high:g}")
        lo, hi = ASSUMPTION_DOMAINS[k]
        for end, v in (("low", r.low), ("high", r.high)):
            if not lo <= v <= hi:
                raise SpecError(f"{p}: assumptions.{k}.{end} = {v:g} is outside the "
                                f"quantity's own domain; allowed [{lo:g}, {hi:g}]")
    return Uncertainty(
        draws=f.sampling.draws, seed=f.sampling.seed, levels=f.sampling.levels, quantiles=q,
        measured_sigma_ln={d: {k: float(v.sigma_ln) for k, v in fams.items()}
                           for d, fams in f.measured.items()},
        measured_default_sigma_ln=float(f.measured_default.sigma_ln),
        roofline_sigma_ln={k: float(v.sigma_ln) for k, v in f.roofline.items()},
        ranges={k: (float(v.low), float(v.high)) for k, v in f.assumptions.items()},
        conformal_ln={k: float(v.widen_ln) for k, v in f.conformal.items()},
        bench_conformal_ln=(float(f.bench_conformal.widen_ln) if f.bench_conformal else None),
        source=str(p), raw=raw)
