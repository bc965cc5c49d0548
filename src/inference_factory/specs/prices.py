"""Prices and cost assumptions: API prices per million tokens (``configs/prices.toml``, each
row dated and sourced) and the charging of GPU time (:class:`CostModel`: rental, TCO or
capex, power by phase, PUE, electricity; :func:`price_basis_label` says what priced it). Specs, not physics: the analysis layer and the factory read
them from here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError, did_you_mean
from .catalog import load_hardware
from .files import read_toml, data_dir

#: Token mix of DeepSeek's published production day, input per output token:
#: 608B input / 168B output tokens (deployments.csv, DS_DAY6).
INPUT_TOKENS_PER_OUTPUT_TOKEN = 608.0 / 168.0


@dataclass(frozen=True)
class CostModel:
    """How one GPU-hour is charged: the project's one cost model (``add_economics``, plan and
    the questions; the factory's ``simulate`` and ``compare``). Defaults are labelled
    assumptions (docs/CONFIG.md).

    ``cost_basis``: ``rental`` (an all-in rate per GPU-hour), ``tco`` (an owning cost per
    GPU-hour) or ``capex`` (straight-line depreciation of the purchase price plus energy).
    ``price_basis`` prices every device of a run from one named table
    (``configs/price_bases.toml``: ``rental-3yr``, ``owning-hyperscaler``, ``owning-neocloud``;
    ``hardware-file``; a user's .toml/.csv; ``NAME,FALLBACK`` names a fallback, stated per
    device); unset: ``rental-3yr,hardware-file`` for rental, ``owning-hyperscaler`` for tco.
    A rate or price left unset (None or 0) comes from the basis or the hardware file.
    ``power_basis`` is what tokens/s per MW divides by: ``gpu-tdp-pue`` (the GPU's phase power
    x PUE) or ``all-in-provisioned`` (InferenceX's provisioned kW per GPU)."""

    cost_basis: str = "rental"
    price_basis: str | None = None
    power_basis: str = "gpu-tdp-pue"
    rental_usd_per_gpu_hour: float | None = None    # unset: the price basis's rate
    capex_usd_per_gpu: float | None = None          # unset: the hardware file's price
    depreciation_years: float = 4.0      # ASSUMPTION
    residual_frac: float = 0.0
    pue: float = 1.3                     # low end of 30-50% facility overhead (serving_facts.md)
    usd_per_kwh: float = 0.08            # ASSUMPTION: not in the sources
    utilization: float = 1.0             # busy share of the GPU-hour
    # GPU power by phase as fractions of TDP: Splitwise H100 model, idle 75 W, prefill 700 W,
    # decode 380 W of 700 W (serving_facts.md); applied to every device as an assumption
    idle_frac_of_tdp: float = 75.0 / 700.0
    prefill_frac_of_tdp: float = 1.0
    decode_frac_of_tdp: float = 380.0 / 700.0
    #: what priced the GPU-hour (:func:`price_basis_label`), set where a run resolves its
    #: rate once (the factory's configs); "" elsewhere, where it is computed per device list
    price_basis_label: str = ""
    #: the rental rate above was read from the price basis when the run was resolved (a
    #: config that extends this one re-reads it for its own hardware and basis)
    rate_from_basis: bool = False

    def __post_init__(self):
        # a price basis prices rental or owning GPU-hours; under capex it would be ignored
        # without a word (issue 30): refused, naming both keys
        if self.cost_basis == "capex" and self.price_basis:
            raise SpecError(f"price basis {self.price_basis!r} (--price-basis, "
                            "economics.price_basis) prices rental or owning GPU-hours; the "
                            "cost basis is capex (depreciation of capex_usd_per_gpu plus "
                            "energy), which it would not change: drop it, or use cost basis "
                            "rental (or tco)")


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
    from . import schema  # pydantic: imported when prices are loaded, not with the CLI

    p = Path(path) if path is not None else data_dir("configs") / "prices.toml"
    f = schema.check(schema.PricesFile, read_toml(p), str(p))
    out = {}
    for r in f.price:
        pr = Price(id=r.id, model=r.model,
                   input_cache_hit_usd_per_mtok=float(r.input_cache_hit_usd_per_mtok),
                   input_cache_miss_usd_per_mtok=float(r.input_cache_miss_usd_per_mtok),
                   output_usd_per_mtok=float(r.output_usd_per_mtok), date=r.date, source=r.source)
        out[pr.id] = pr
    return out


def resolve_price(price: str | Price | None) -> Price | None:
    """A :class:`Price` from its id in ``configs/prices.toml`` (a Price or None passes)."""
    if price is None or isinstance(price, Price):
        return price
    prices = load_prices()
    if price not in prices:
        raise SpecError(f"price = {price!r} is not a price id; available: {sorted(prices)}")
    return prices[price]


# --------------------------------------------------------------------------------------------
# price bases and power bases (configs/price_bases.toml): one source and date per run
# --------------------------------------------------------------------------------------------

#: The built-in price basis: each hardware file's own [price] rental_usd_per_gpu_hour (mixed
#: sources and dates; the files' [sources] price line says which).
HARDWARE_FILE_BASIS = "hardware-file"
#: The price basis of cost_basis 'rental' when none is named: SemiAnalysis's 3-year rental,
#: falling back, device by device and said so in every output, to the hardware file.
DEFAULT_RENTAL_BASIS = "rental-3yr,hardware-file"
#: The price basis of cost_basis 'tco' when none is named (the hardware files' tco figures
#: are InferenceX's costh).
DEFAULT_TCO_BASIS = "owning-hyperscaler"
#: Power bases of tokens/s per MW: the GPU's phase power x PUE (computed), or InferenceX's
#: all-in provisioned kW per GPU (a table).
POWER_BASES = ("gpu-tdp-pue", "all-in-provisioned")
DEFAULT_POWER_BASIS = "gpu-tdp-pue"


@dataclass(frozen=True)
class PriceBasis:
    """One table of all-in USD per GPU-hour by hardware spec name, from one source and date."""

    name: str
    description: str
    date: str
    source: str
    usd_per_gpu_hour: dict[str, float]

    def label(self) -> str:
        """``rental-3yr (IMAX_TCO, 2026-04)``: the name, its source id and date."""
        return f"{self.name} ({self.source.split(':', 1)[0].strip()}, {self.date})"


@dataclass(frozen=True)
class PowerBasis:
    """Provisioned facility kW per GPU by hardware spec name, from one source and date."""

    name: str
    description: str
    date: str
    source: str
    kw_per_gpu: dict[str, float]


def _bases_file(path: str | os.PathLike | None) -> Path:
    if path is not None:
        return Path(path)
    from .files import data_dirs

    for d in data_dirs("configs"):
        if (d / "price_bases.toml").is_file():
            return d / "price_bases.toml"
    return data_dir("configs") / "price_bases.toml"


def _canonical(name: str, where: str) -> str:
    """The hardware spec name a table row names (an alias resolves to it)."""
    from . import load_hardware

    try:
        return load_hardware(name).name
    except SpecError:
        raise SpecError(f"{where}: {name!r} is not a hardware spec name or alias (see "
                        "'inference-factory hardware list')") from None


_BASES: dict[tuple, tuple] = {}


def _read_bases(p: Path) -> tuple[dict[str, PriceBasis], dict[str, PowerBasis]]:
    """The file's price and power bases, read once per (path, modification time)."""
    try:
        key = (str(p.resolve()), p.stat().st_mtime_ns)
    except OSError:
        raise SpecError(f"{p}: file not found") from None
    if key not in _BASES:
        _BASES[key] = _parse_bases(p)
    prices, powers = _BASES[key]
    return dict(prices), dict(powers)


def _parse_bases(p: Path) -> tuple[dict[str, PriceBasis], dict[str, PowerBasis]]:
    from .schema_base import check
    from .schema_config import PriceBasesFile

    f = check(PriceBasesFile, read_toml(p), str(p))
    prices: dict[str, PriceBasis] = {}
    for t in f.price_basis:
        if t.name in prices or t.name == HARDWARE_FILE_BASIS:
            raise SpecError(f"{p}: price_basis name {t.name!r} is given twice (or is the "
                            f"built-in {HARDWARE_FILE_BASIS!r}); give each basis one name")
        rates = {_canonical(k, f"{p}: price_basis {t.name!r}"): float(v)
                 for k, v in t.usd_per_gpu_hour.items()}
        prices[t.name] = PriceBasis(t.name, t.description, t.date, t.source, rates)
    powers: dict[str, PowerBasis] = {}
    for t in f.power_basis:
        kw = {_canonical(k, f"{p}: power_basis {t.name!r}"): float(v)
              for k, v in t.kw_per_gpu.items()}
        powers[t.name] = PowerBasis(t.name, t.description, t.date, t.source, kw)
    return prices, powers


def _read_csv_basis(p: Path) -> PriceBasis:
    """A user's CSV table: columns hardware, usd_per_gpu_hour and optional source, date."""
    import csv
    import math

    import io

    from .files import read_text

    rows = list(csv.DictReader(io.StringIO(read_text(p), newline="")))
    if not rows or not {"hardware", "usd_per_gpu_hour"} <= set(rows[0]):
        raise SpecError(f"{p}: a price-basis CSV needs the columns hardware,usd_per_gpu_hour "
                        "(and optionally source,date)")
    rates: dict[str, float] = {}
    for i, r in enumerate(rows, start=2):
        try:
            v = float(r["usd_per_gpu_hour"])
        except (TypeError, ValueError):
            v = math.nan
        if not (math.isfinite(v) and 0 < v <= 1e4):
            raise SpecError(f"{p}: line {i}: usd_per_gpu_hour = {r['usd_per_gpu_hour']!r}; "
                            "allowed a number in (0, 10000]")
        name = _canonical((r["hardware"] or "").strip(), f"{p}: line {i}: hardware")
        if name in rates:
            raise SpecError(f"{p}: line {i}: {name} is priced twice; give each device once")
        rates[name] = v
    sources = sorted({(r.get("source") or "").strip() for r in rows} - {""})
    dates = sorted({(r.get("date") or "").strip() for r in rows} - {""})
    return PriceBasis(p.stem, f"user table {p}", ", ".join(dates) or "undated",
                      "; ".join(sources) or f"user table {p.name}", rates)


def load_price_bases(path: str | os.PathLike | None = None) -> dict[str, PriceBasis]:
    """Price bases by name from ``configs/price_bases.toml`` (or ``path``), checked against
    :class:`~inference_factory.specs.schema_config.PriceBasesFile`."""
    return _read_bases(_bases_file(path))[0]


def load_power_bases(path: str | os.PathLike | None = None) -> dict[str, PowerBasis]:
    """Tabled power bases by name (``all-in-provisioned``) from ``configs/price_bases.toml``."""
    return _read_bases(_bases_file(path))[1]


def price_basis_names() -> list[str]:
    """Every price basis a run can name (the bundled tables and ``hardware-file``)."""
    return [*load_price_bases(), HARDWARE_FILE_BASIS]


def resolve_price_bases(spec: str) -> list[PriceBasis | str]:
    """The chain a ``price_basis`` text names: ``NAME`` or ``NAME,FALLBACK[,...]`` where each
    part is a bundled basis, ``hardware-file`` or a table file (``.toml`` / ``.csv``).
    ``hardware-file`` stays the string (it is read from each hardware file)."""
    if not isinstance(spec, str) or not spec.strip():
        raise SpecError(f"price_basis = {spec!r}: give a basis name; allowed: "
                        f"{price_basis_names()} or a .toml/.csv table")
    bundled = load_price_bases()
    out: list[PriceBasis | str] = []
    for part in (s.strip() for s in spec.split(",")):
        if part == HARDWARE_FILE_BASIS:
            out.append(part)
        elif part in bundled:
            out.append(bundled[part])
        elif part.lower().endswith((".toml", ".csv")):
            p = Path(part)
            if not p.is_file():
                raise SpecError(f"price_basis = {spec!r}: {part}: file not found")
            if part.lower().endswith(".csv"):
                out.append(_read_csv_basis(p))
            else:
                tables = list(_read_bases(p)[0].values())
                if len(tables) != 1:
                    raise SpecError(f"price_basis = {spec!r}: {part} holds {len(tables)} "
                                    "[[price_basis]] tables; a user's table holds one")
                out.append(tables[0])
        else:
            raise SpecError(f"price_basis = {spec!r}: {part!r} is not a price basis"
                            f"{did_you_mean(part, [*bundled, HARDWARE_FILE_BASIS]) or ';'} "
                            f"allowed: {price_basis_names()}, a .toml/.csv table, or "
                            "NAME,FALLBACK")
    return out


@dataclass(frozen=True)
class GpuHourPrice:
    """What one GPU-hour of a device costs on the run's price basis, and where it comes from.

    ``basis`` names the table that priced it (``rental-3yr``, ``hardware-file``, a user's
    table, ``user rate`` for an explicit ``rental_usd_per_gpu_hour``); ``fallback`` says why a
    later basis of the chain priced it (``not in rental-3yr``), else it is empty."""

    hardware: str
    usd_per_gpu_hour: float
    basis: str
    source: str
    date: str
    fallback: str = ""

    @property
    def tag(self) -> str:
        """The source id (``IMAX_TCO``), or the hardware file for ``hardware-file``."""
        if self.basis == HARDWARE_FILE_BASIS:
            return f"{Path(self.source.split(' [price]', 1)[0]).name} [price]"
        return self.source.split(":", 1)[0].strip()

    def label(self) -> str:
        """``H800-SXM 2 $/GPU-h from hardware-file (not in rental-3yr; 2025-02)``."""
        why = f"{self.fallback}; " if self.fallback else ""
        return (f"{self.hardware} {self.usd_per_gpu_hour:g} $/GPU-h from {self.basis} "
                f"({why}{self.date})")


def default_price_basis(cost_basis: str) -> str:
    """The price basis a run uses when it names none: 3-year rental (with the hardware-file
    fallback) for ``rental``, owning-hyperscaler for ``tco``."""
    return DEFAULT_TCO_BASIS if cost_basis == "tco" else DEFAULT_RENTAL_BASIS


def price_gpu_hour(hw, *, cost_basis: str = "rental", price_basis: str | None = None,
                   rental_usd_per_gpu_hour: float | None = None) -> GpuHourPrice:
    """The all-in USD per GPU-hour of ``hw`` (a :class:`~inference_factory.specs.HardwareSpec`)
    for ``cost_basis`` ``rental`` or ``tco``: an explicit ``rental_usd_per_gpu_hour`` (rental
    only), else the first basis of the ``price_basis`` chain that lists the device (default
    :func:`default_price_basis`). A device no basis of the chain lists is a SpecError naming
    the chain and the bases that do price it."""
    if cost_basis not in ("rental", "tco"):
        raise SpecError(f"cost_basis = {cost_basis!r}: a price basis prices 'rental' or 'tco' "
                        "GPU-hours; 'capex' charges depreciation and energy")
    if cost_basis == "rental" and rental_usd_per_gpu_hour:
        return GpuHourPrice(hw.name, float(rental_usd_per_gpu_hour), "user rate",
                            "rental_usd_per_gpu_hour given", "as given")
    spec = price_basis or default_price_basis(cost_basis)
    chain = _chain(spec)
    file_key = "tco_usd_per_gpu_hour" if cost_basis == "tco" else "rental_usd_per_gpu_hour"
    missed: list[str] = []
    for b in chain:
        if isinstance(b, str):          # hardware-file
            rate = hw.price.get(file_key)
            if rate:
                date = hw.price.get("tco_date" if cost_basis == "tco" else "rental_date", "undated")
                return GpuHourPrice(hw.name, float(rate), HARDWARE_FILE_BASIS,
                                    f"{hw.path} [price] {file_key}: "
                                    f"{hw.sources.get('price', 'no [sources] price line')}",
                                    str(date), _missed(missed))
            missed.append(HARDWARE_FILE_BASIS)
        elif hw.name in b.usd_per_gpu_hour:
            return GpuHourPrice(hw.name, b.usd_per_gpu_hour[hw.name], b.name, b.source, b.date,
                                _missed(missed))
        else:
            missed.append(b.name)
    have = [n for n, b in load_price_bases().items() if hw.name in b.usd_per_gpu_hour]
    if hw.price.get(file_key):
        have.append(HARDWARE_FILE_BASIS)
    what = "rental" if cost_basis == "rental" else "TCO"
    hint = (f"; bases that price it: {have} (name a fallback: {spec},{have[0]})" if have else
            "; no bundled basis prices it: give rental_usd_per_gpu_hour "
            "(--rental-usd-per-gpu-hour) or a price table of your own")
    raise SpecError(f"{hw.path}: hardware {hw.name!r} lists no {what} price in price basis "
                    f"{spec!r}{hint}")


def _missed(names: list[str]) -> str:
    return f"not in {', '.join(names)}" if names else ""


_CHAINS: dict[tuple, list] = {}


def _chain(spec: str) -> list:
    """:func:`resolve_price_bases`, kept per (spec, bundled file, its mtime): a Monte Carlo
    asks once per sample."""
    p = _bases_file(None)
    key = (spec, str(p), p.stat().st_mtime_ns if p.is_file() else 0)
    if key not in _CHAINS:
        _CHAINS[key] = resolve_price_bases(spec)
    return _CHAINS[key]


def allin_kw_per_gpu(hw) -> float | None:
    """InferenceX's all-in provisioned facility kW per GPU of ``hw`` (``all-in-provisioned``
    power basis), or None when the table does not list the device."""
    pb = load_power_bases().get("all-in-provisioned")
    return None if pb is None else pb.kw_per_gpu.get(hw.name)


def check_power_basis(name: str) -> str:
    if name not in POWER_BASES:
        raise SpecError(f"power_basis = {name!r} is not one of {list(POWER_BASES)}")
    return name


def gpu_hour_price(hw, cost: CostModel) -> GpuHourPrice:
    """The rental or TCO price of one GPU-hour of ``hw`` on the run's price basis, with where
    it comes from (:func:`price_gpu_hour`)."""
    if cost.price_basis and cost.cost_basis == "capex":
        raise SpecError(f"price_basis = {cost.price_basis!r} prices rental or TCO GPU-hours; "
                        "cost_basis 'capex' charges depreciation and energy (drop one)")
    return price_gpu_hour(hw, cost_basis=cost.cost_basis, price_basis=cost.price_basis or None,
                          rental_usd_per_gpu_hour=cost.rental_usd_per_gpu_hour)


def price_basis_label(cost: CostModel, hardware=()) -> str:
    """What priced the GPU-hour, in one line for table headers and JSON (every costed output
    states it; headers write ``price basis <label>``): the run's price basis, its source and
    date, and each device of ``hardware`` a fallback priced, e.g. ``rental-3yr (IMAX_TCO,
    2026-04); H800-SXM 2 $/GPU-h from hardware-file (not in rental-3yr; 2025-02)``; a user
    rate; or the capex and energy terms."""
    if cost.cost_basis == "capex":
        src = (f"{cost.capex_usd_per_gpu:g} USD/GPU" if cost.capex_usd_per_gpu else
               "the hardware files' [price] capex_usd_per_gpu")
        return (f"capex {src} over {cost.depreciation_years:g} years + energy "
                f"({cost.usd_per_kwh:g} $/kWh, PUE {cost.pue:g})")
    if cost.cost_basis == "rental" and cost.rental_usd_per_gpu_hour:
        return f"user rate {cost.rental_usd_per_gpu_hour:g} $/GPU-h (rental_usd_per_gpu_hour)"
    spec = cost.price_basis or default_price_basis(cost.cost_basis)
    first = spec.split(",")[0].strip()
    bundled = load_price_bases()
    head = bundled[first].label() if first in bundled else (
        "hardware-file (each hardware file's own [price], its own source and date)"
        if first == HARDWARE_FILE_BASIS else first)
    notes = []
    for hw in (h if not isinstance(h, str) else load_hardware(h) for h in hardware):
        try:
            g = gpu_hour_price(hw, cost)
        except SpecError:
            notes.append(f"{hw.name} unpriced (not in {spec})")
            continue
        if g.basis != first or first == HARDWARE_FILE_BASIS:   # the file's own: each date
            notes.append(g.label())
    return "; ".join([head, *notes])

