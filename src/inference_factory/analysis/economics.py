"""Economics on engine Datasets: $ per million tokens, gross margin, payback, tokens per MW.

A layer on top of :func:`inference_factory.evaluate`: every variable added here is computed
from the Dataset's throughput variables with the pure formulas of
:mod:`inference_factory.kernels.economics`, so economics broadcast over any axis (batch size,
cache-hit rate, hardware...). Prices are dated data (``configs/prices.toml``, hardware
``[price]``); assumptions without a source are arguments with labelled defaults.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SpecError
from ..kernels import economics as kecon
from ..specs import HardwareSpec, load_hardware
from ..specs.prices import (  # noqa: F401 (CostModel, gpu_hour_price, price_basis_label and
    INPUT_TOKENS_PER_OUTPUT_TOKEN,  # the input mix are re-exported: the analysis layer's names)
    CostModel,
    allin_kw_per_gpu,
    check_power_basis,
    gpu_hour_price,
    load_power_bases,
    price_basis_label,
    resolve_price,
)
from ..units import SECONDS_PER_HOUR

if TYPE_CHECKING:
    import xarray as xr

#: GPU power by phase as fractions of TDP where no cost model is at hand
#: (:class:`CostModel`'s defaults: Splitwise H100 model)
IDLE_FRAC_OF_TDP = CostModel.idle_frac_of_tdp
DECODE_FRAC_OF_TDP = CostModel.decode_frac_of_tdp


def gpu_cost_usd_per_hour(hw: HardwareSpec, cost: CostModel, phase: str) -> tuple[float, float]:
    """(hardware $/GPU-hour, energy $/GPU-hour) of one GPU of ``hw`` in ``phase``."""
    frac = cost.prefill_frac_of_tdp if phase == "prefill" else cost.decode_frac_of_tdp
    power_w = kecon.gpu_power_w(tdp_w=hw.tdp_w, busy_frac=cost.utilization,
                                idle_frac_of_tdp=cost.idle_frac_of_tdp, busy_frac_of_tdp=frac)
    energy = float(kecon.energy_usd_per_hour(power_w=power_w, pue=cost.pue,
                                             usd_per_kwh=cost.usd_per_kwh))
    if cost.cost_basis in ("rental", "tco"):
        # an all-in rental or TCO figure already covers power (SemiAnalysis's includes opex)
        return gpu_hour_price(hw, cost).usd_per_gpu_hour, 0.0
    if cost.cost_basis == "capex":
        capex = cost.capex_usd_per_gpu or hw.price.get("capex_usd_per_gpu")
        if not capex:
            raise SpecError(f"{hw.path}: hardware {hw.name!r} lists no capex indication; pass "
                            "capex_usd_per_gpu")
        dep = float(kecon.capex_usd_per_gpu_hour(capex_usd_per_gpu=capex,
                                                 depreciation_years=cost.depreciation_years,
                                                 residual_frac=cost.residual_frac))
        return dep, energy
    raise SpecError(f"cost_basis = {cost.cost_basis!r} is not one of ['capex', 'rental', 'tco']")


def power_basis_label(cost: CostModel) -> str:
    """``gpu-tdp-pue (GPU phase power x PUE 1.3)`` or ``all-in-provisioned (IMAX_TCO, 2026-04)``."""
    check_power_basis(cost.power_basis)
    if cost.power_basis == "gpu-tdp-pue":
        return f"gpu-tdp-pue (GPU phase power x PUE {cost.pue:g})"
    pb = load_power_bases()["all-in-provisioned"]
    return f"all-in-provisioned ({pb.source.split(':', 1)[0]}, {pb.date})"


def cost_attrs(cost: CostModel, hardware=()) -> dict:
    """What every costed output states (table header and JSON attrs): ``cost_basis``,
    ``price_basis`` (:func:`price_basis_label`), ``power_basis`` and ``usd_per_gpu_hour``, the
    decode-phase GPU-hour cost per device (None where the basis does not price it)."""
    rates = {}
    for hw in (_load(h) for h in hardware):
        try:
            rates[hw.name] = float(sum(gpu_cost_usd_per_hour(hw, cost, "decode")))
        except SpecError:
            rates[hw.name] = None
    return {"cost_basis": cost.cost_basis, "price_basis": price_basis_label(cost, hardware),
            "power_basis": power_basis_label(cost), "usd_per_gpu_hour": rates}


def cost_header(cost: CostModel, hardware=()) -> str:
    """``rental cost, price basis rental-3yr (IMAX_TCO, 2026-04), power basis gpu-tdp-pue``:
    the words a costed table's header carries."""
    return (f"{cost.cost_basis} cost, price basis {price_basis_label(cost, hardware)}, "
            f"power basis {cost.power_basis}")


def _load(h) -> HardwareSpec:
    return h if isinstance(h, HardwareSpec) else load_hardware(h)


def facility_power_w(hw: HardwareSpec, cost: CostModel, *, tdp_w=None, utilization=None,
                     pue=None, phase: str = "decode"):
    """Facility watts charged to one GPU of ``hw`` in ``phase`` (decode or prefill: the
    cost model's share of TDP busy) on ``cost.power_basis``
    (:func:`inference_factory.kernels.economics.facility_power_w_per_gpu`); NaN where the
    all-in table does not list the device. ``tdp_w``, ``utilization`` and ``pue`` may be
    arrays (Monte Carlo samples); default: the spec's and the cost model's."""
    check_power_basis(cost.power_basis)
    u = cost.utilization if utilization is None else utilization
    gpu_w = kecon.gpu_power_w(tdp_w=hw.tdp_w if tdp_w is None else tdp_w, busy_frac=u,
                              idle_frac_of_tdp=cost.idle_frac_of_tdp,
                              busy_frac_of_tdp=cost.prefill_frac_of_tdp if phase == "prefill"
                              else cost.decode_frac_of_tdp)
    kw = allin_kw_per_gpu(hw)
    return kecon.facility_power_w_per_gpu(power_basis=cost.power_basis, gpu_power_w=gpu_w,
                                          pue=cost.pue if pue is None else pue,
                                          allin_kw_per_gpu=np.nan if kw is None else kw)


def usd_per_mtok_at(tokens_per_s_per_gpu, *, gpu_cost_usd_per_hour, utilization):
    """$ per million tokens of a phase running at ``tokens_per_s_per_gpu`` (busy share
    ``utilization`` of each GPU-hour charged at ``gpu_cost_usd_per_hour``); arrays or
    DataArrays. The one wiring of :func:`inference_factory.kernels.economics.usd_per_mtok`
    for the engine's rates (:func:`economics_from_rates` and the plan's candidate grid)."""
    return kecon.usd_per_mtok(cost_usd=gpu_cost_usd_per_hour,
                              tokens=tokens_per_s_per_gpu * SECONDS_PER_HOUR * utilization)


def _hardware_spec(ds: xr.Dataset, name: str) -> HardwareSpec:
    """The spec the Dataset was evaluated with: by the file path the engine recorded
    (``attrs['hardware_files']``), so user files outside the bundled folder work too."""
    files = dict(item.split("=", 1) for item in ds.attrs.get("hardware_files", "").split("; ")
                 if "=" in item)
    return load_hardware(files.get(name, name))


def _per_hardware(ds: xr.Dataset, fn) -> xr.DataArray | float:
    """Evaluate ``fn(hw)`` per hardware: a DataArray along ``hardware`` when it is a
    dimension, else a float for the Dataset's single device."""
    if "hardware" in ds.dims:
        names = [str(h) for h in ds["hardware"].values]
        import xarray as xr

        return xr.DataArray([fn(_hardware_spec(ds, n)) for n in names], dims="hardware",
                            coords={"hardware": ds["hardware"].values})
    return fn(_hardware_spec(ds, str(ds["hardware"].values)))


def add_economics(ds: xr.Dataset, *, price=None, cost: CostModel | None = None,
                  input_tokens_per_output_token: float = INPUT_TOKENS_PER_OUTPUT_TOKEN) -> xr.Dataset:
    """Add cost, revenue and margin variables to an engine Dataset.

    Parameters
    ----------
    ds : xr.Dataset
        Result of :func:`inference_factory.evaluate` (hardware may be a dimension).
    price : str or Price, optional
        Price id in ``configs/prices.toml``; without it only cost variables are added.
    cost : CostModel
        GPU-hour charging (rental, capex + energy, or TCO).
    input_tokens_per_output_token : float
        Token mix for blended figures (DeepSeek's published 608B/168B per day = 3.62).

    Returns
    -------
    xr.Dataset
        With ``gpu_cost_usd_per_hour``, ``usd_per_mtok_output`` (decode GPU time per million
        output tokens), ``usd_per_mtok_input`` (prefill GPU time per million input tokens,
        cache hits included), ``usd_per_mtok_blended``, ``output_tokens_per_s_per_mw``; and,
        with a price, ``revenue_usd_per_gpu_hour`` (decode and prefill pools),
        ``gross_margin_frac`` (blended), ``cost_profit_margin_frac`` and ``payback_months``.
    """
    cost = cost or CostModel()
    r = input_tokens_per_output_token
    if isinstance(r, bool) or not isinstance(r, (int, float, np.integer, np.floating)) \
            or not math.isfinite(r) or r < 0:
        raise SpecError(f"input_tokens_per_output_token = {r!r} must be a finite number >= 0")
    pr = resolve_price(price)
    prices = None if pr is None else {
        "input_cache_hit_usd_per_mtok": pr.input_cache_hit_usd_per_mtok,
        "input_cache_miss_usd_per_mtok": pr.input_cache_miss_usd_per_mtok,
        "output_usd_per_mtok": pr.output_usd_per_mtok}
    capex = _per_hardware(ds, lambda hw: cost.capex_usd_per_gpu or
                          hw.price.get("capex_usd_per_gpu", np.nan))
    unpriced = [] if cost.capex_usd_per_gpu else [
        n for n in _hardware_names(ds)
        if not _hardware_spec(ds, n).price.get("capex_usd_per_gpu")]
    out = economics_from_rates(
        ds,
        gpu_cost_decode=_per_hardware(ds, lambda hw: sum(gpu_cost_usd_per_hour(hw, cost, "decode"))),
        gpu_cost_prefill=_per_hardware(ds, lambda hw: sum(gpu_cost_usd_per_hour(hw, cost, "prefill"))),
        energy_decode=_per_hardware(ds, lambda hw: gpu_cost_usd_per_hour(hw, cost, "decode")[1]),
        tdp_w=_per_hardware(ds, lambda hw: hw.tdp_w), utilization=cost.utilization, pue=cost.pue,
        prices=prices, input_tokens_per_output_token=input_tokens_per_output_token,
        capex_usd_per_gpu=capex,
        facility_power_w=_per_hardware(ds, lambda hw: float(facility_power_w(hw, cost))))
    if pr is not None:
        out.attrs["price"] = f"{pr.id} ({pr.date}; {pr.source})"
        if unpriced:
            # say why payback is absent instead of leaving a silent NaN
            note = payback_absent_reason(unpriced)
            out.attrs["payback_months"] = note
            out["payback_months"].attrs["absent"] = note
    names = _hardware_names(ds)
    attrs = cost_attrs(cost, [_hardware_spec(ds, n) for n in names])
    out.attrs.update(cost_basis=attrs["cost_basis"], price_basis=attrs["price_basis"],
                     power_basis=attrs["power_basis"],
                     usd_per_gpu_hour="; ".join(f"{k}={v:g}" if v is not None else f"{k}=none"
                                                for k, v in attrs["usd_per_gpu_hour"].items()))
    out["output_tokens_per_s_per_mw"].attrs["power_basis"] = attrs["power_basis"]
    if cost.power_basis != "gpu-tdp-pue":
        missing = [n for n in names if allin_kw_per_gpu(_hardware_spec(ds, n)) is None]
        if missing:
            out["output_tokens_per_s_per_mw"].attrs["absent"] = (
                f"output_tokens_per_s_per_mw absent for {', '.join(missing)}: not in power "
                f"basis {cost.power_basis} (configs/price_bases.toml)")
    return out


def _hardware_names(ds: xr.Dataset) -> list[str]:
    return [str(h) for h in np.atleast_1d(ds["hardware"].values)]


def payback_absent_reason(hardware: list[str]) -> str:
    """One line: why ``payback_months`` is absent (NaN) for these devices."""
    return (f"payback_months absent for {', '.join(hardware)}: no sourced purchase price in "
            "the hardware file ([price] capex_usd_per_gpu); give capex_usd_per_gpu "
            "(--capex-usd-per-gpu, a sweep file's [economics], CostModel) to assume one")


def economics_from_rates(ds: xr.Dataset, *, gpu_cost_decode, gpu_cost_prefill, energy_decode,
                         tdp_w, utilization, pue, prices=None, input_tokens_per_output_token,
                         capex_usd_per_gpu=None, facility_power_w=None) -> xr.Dataset:
    """The per-token economics of an engine Dataset from resolved rates; every argument may
    be a float or a DataArray (per hardware, per Monte Carlo sample...). The one place the
    per-token cost, revenue and margin formulas are wired; :func:`add_economics` resolves the
    rates from specs and a :class:`CostModel`.

    ``prices``: mapping with ``input_cache_hit_usd_per_mtok``, ``input_cache_miss_usd_per_mtok``
    and ``output_usd_per_mtok`` (floats or DataArrays), or None for cost variables only.
    ``facility_power_w``: watts per decoding GPU on the run's power basis
    (:func:`facility_power_w`); default the gpu-tdp-pue basis from ``tdp_w`` and ``pue``.
    """
    out = ds.copy()
    r = input_tokens_per_output_token
    out["gpu_cost_usd_per_hour"] = gpu_cost_decode
    dec_tok_h = ds.decode_tokens_per_s_per_gpu * SECONDS_PER_HOUR * utilization
    pre_tok_h = ds.prefill_tokens_per_s_per_gpu * SECONDS_PER_HOUR * utilization
    out["usd_per_mtok_output"] = usd_per_mtok_at(ds.decode_tokens_per_s_per_gpu,
                                                 gpu_cost_usd_per_hour=gpu_cost_decode,
                                                 utilization=utilization)
    out["usd_per_mtok_input"] = usd_per_mtok_at(ds.prefill_tokens_per_s_per_gpu,
                                                gpu_cost_usd_per_hour=gpu_cost_prefill,
                                                utilization=utilization)
    out["usd_per_mtok_blended"] = (r * out.usd_per_mtok_input + out.usd_per_mtok_output) / (r + 1.0)
    if facility_power_w is None:
        power = kecon.gpu_power_w(tdp_w=tdp_w, busy_frac=utilization,
                                  idle_frac_of_tdp=IDLE_FRAC_OF_TDP,
                                  busy_frac_of_tdp=DECODE_FRAC_OF_TDP)
        facility_power_w = kecon.facility_power_w_per_gpu(
            power_basis="gpu-tdp-pue", gpu_power_w=power, pue=pue, allin_kw_per_gpu=np.nan)
    out["output_tokens_per_s_per_mw"] = kecon.tokens_per_s_per_mw(
        tokens_per_s=ds.decode_tokens_per_s_per_gpu * utilization,
        facility_power_w=facility_power_w)
    units = {"gpu_cost_usd_per_hour": "USD/GPU-hour", "usd_per_mtok_output": "USD/Mtok",
             "usd_per_mtok_input": "USD/Mtok", "usd_per_mtok_blended": "USD/Mtok",
             "output_tokens_per_s_per_mw": "tokens/s/MW"}
    if prices is not None:
        # the engine records every numeric axis, scalar or not, as a coordinate
        hit = ds["cache_hit_rate"] if "cache_hit_rate" in ds.coords else 0.0
        price_in = (hit * prices["input_cache_hit_usd_per_mtok"]
                    + (1 - hit) * prices["input_cache_miss_usd_per_mtok"])
        price_out = prices["output_usd_per_mtok"]
        out["revenue_usd_per_gpu_hour_decode"] = dec_tok_h * price_out / 1e6
        out["revenue_usd_per_gpu_hour_prefill"] = pre_tok_h * price_in / 1e6
        price_blend = (r * price_in + price_out) / (r + 1.0)
        out["gross_margin_frac"] = kecon.gross_margin_frac(revenue_usd=price_blend,
                                                           cost_usd=out.usd_per_mtok_blended)
        out["cost_profit_margin_frac"] = kecon.cost_profit_margin_frac(
            revenue_usd=price_blend, cost_usd=out.usd_per_mtok_blended)
        units.update(revenue_usd_per_gpu_hour_decode="USD/GPU-hour",
                     revenue_usd_per_gpu_hour_prefill="USD/GPU-hour", gross_margin_frac="1",
                     cost_profit_margin_frac="1")
        if capex_usd_per_gpu is not None:
            monthly = (out.revenue_usd_per_gpu_hour_decode - energy_decode) * kecon.HOURS_PER_MONTH
            out["payback_months"] = kecon.payback_months(capex_usd_per_gpu=capex_usd_per_gpu,
                                                         monthly_margin_usd_per_gpu=monthly)
            units["payback_months"] = "months"
    for k, u in units.items():
        out[k].attrs["units"] = u
    from ..output.metadata import annotate

    return annotate(out)     # CF: units pint parses and a long name on every variable
