"""Prices and cost assumptions: API prices per million tokens (``configs/prices.toml``, each
row dated and sourced) and the charging of GPU time (:class:`Economics`: capex or rental,
power by phase, PUE, electricity). Specs, not physics: the analysis layer and the factory read
them from here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from .files import _read_toml, data_dir


#: Token mix of DeepSeek's published production day, input per output token:
#: 608B input / 168B output tokens (deployments.csv, DS_DAY6).
INPUT_TOKENS_PER_OUTPUT_TOKEN = 608.0 / 168.0


@dataclass(frozen=True)
class Economics:
    """Charging of GPU time. The defaults are the project's one copy of these assumptions
    (``economics.CostModel`` reuses them)."""

    cost_basis: str = "capex"            # "capex" (depreciation) or "rental"
    capex_usd_per_gpu: float = 0.0
    depreciation_years: float = 4.0      # ASSUMPTION
    residual_frac: float = 0.0
    rental_usd_per_gpu_hour: float = 0.0
    pue: float = 1.3                     # low end of 30-50% facility overhead (serving_facts.md)
    usd_per_kwh: float = 0.08            # ASSUMPTION: not in the sources
    # GPU power by phase as fractions of TDP: Splitwise H100 model, idle 75 W, prefill 700 W,
    # decode 380 W of 700 W (serving_facts.md); applied to every device as an assumption
    idle_frac_of_tdp: float = 75.0 / 700.0
    prefill_frac_of_tdp: float = 1.0
    decode_frac_of_tdp: float = 380.0 / 700.0


@dataclass(frozen=True)
class Price:
    id: str
    model: str
    input_cache_hit_usd_per_mtok: float
    input_cache_miss_usd_per_mtok: float
    output_usd_per_mtok: float
    date: str
    source: str


def load_prices(path: str | os.PathLike | None = None) -> dict[str, Price]:
    """Prices by id from ``configs/prices.toml`` (or ``path``), checked against
    :class:`~inference_factory.specs.schema.PricesFile` (types, ranges, unknown keys)."""
    from . import schema     # pydantic: imported when prices are loaded, not with the CLI

    p = Path(path) if path is not None else data_dir("configs") / "prices.toml"
    f = schema.check(schema.PricesFile, _read_toml(p), str(p))
    out = {}
    for r in f.price:
        pr = Price(id=r.id, model=r.model,
                   input_cache_hit_usd_per_mtok=float(r.input_cache_hit_usd_per_mtok),
                   input_cache_miss_usd_per_mtok=float(r.input_cache_miss_usd_per_mtok),
                   output_usd_per_mtok=float(r.output_usd_per_mtok), date=r.date, source=r.source)
        out[pr.id] = pr
    return out


def resolve_price(price: "str | Price | None") -> "Price | None":
    """A :class:`Price` from its id in ``configs/prices.toml`` (a Price or None passes)."""
    if price is None or isinstance(price, Price):
        return price
    prices = load_prices()
    if price not in prices:
        raise SpecError(f"price = {price!r} is not a price id; available: {sorted(prices)}")
    return prices[price]
