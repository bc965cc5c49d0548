"""Economics on engine Datasets: every variable recomputed by hand from the TOML files.

Prices and power figures are read straight from hardware/*.toml and configs/prices.toml with
tomllib (not through the package), so a wrong lookup in the economics layer shows up here.
"""

import dataclasses
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import inference_factory as inf
from inference_factory.analysis.economics import CostModel, add_economics
from inference_factory.specs.prices import load_prices

ROOT = Path(__file__).resolve().parents[2]
PRICE_ID = "deepseek-chat-2025-02"
HOURS_PER_MONTH = 8760.0 / 12.0
IDLE, PREFILL, DECODE = 75.0 / 700.0, 1.0, 380.0 / 700.0   # Splitwise H100 power fractions


def hw_toml(name):
    return tomllib.loads((ROOT / "hardware" / f"{name}.toml").read_text())


def basis_toml(name):
    rows = tomllib.loads((ROOT / "configs" / "price_bases.toml").read_text())["price_basis"]
    return next(r for r in rows if r["name"] == name)


def price_toml(pid):
    rows = tomllib.loads((ROOT / "configs" / "prices.toml").read_text())["price"]
    return next(r for r in rows if r["id"] == pid)


@pytest.fixture(scope="module")
def h800():
    return inf.evaluate("DeepSeek-V3", "H800-SXM", dp=32, ep=32, batch_size=[16, 64, 128],
                        kv_len=4096, cache_hit_rate=[0.0, 0.5])


@pytest.fixture(scope="module")
def h200():
    return inf.evaluate("DeepSeek-V3", "H200-SXM", dp=8, ep=8, batch_size=[32, 128], kv_len=4096)


def test_rental_dollars_per_mtok_by_hand(h800):
    rate = hw_toml("H800-SXM")["price"]["rental_usd_per_gpu_hour"]     # 2.0 $/GPU-hour
    e = add_economics(h800, cost=CostModel(cost_basis="rental"))
    p = e.sel(batch_size=64, cache_hit_rate=0.5)
    out = rate / (float(p.decode_tokens_per_s_per_gpu) * 3600.0) * 1e6
    inp = rate / (float(p.prefill_tokens_per_s_per_gpu) * 3600.0) * 1e6
    assert float(p.gpu_cost_usd_per_hour) == pytest.approx(rate, rel=1e-12)
    assert float(p.usd_per_mtok_output) == pytest.approx(out, rel=1e-12)
    assert float(p.usd_per_mtok_input) == pytest.approx(inp, rel=1e-12)
    r = 608.0 / 168.0   # DeepSeek's published input/output tokens per day (deployments.csv)
    assert float(p.usd_per_mtok_blended) == pytest.approx((r * inp + out) / (r + 1), rel=1e-12)
    # a different token mix re-weights the same two costs
    e1 = add_economics(h800, input_tokens_per_output_token=1.0).sel(batch_size=64, cache_hit_rate=0.5)
    assert float(e1.usd_per_mtok_blended) == pytest.approx((inp + out) / 2, rel=1e-12)


def test_margin_by_hand_with_cache_hits(h800):
    pr = price_toml(PRICE_ID)
    e = add_economics(h800, price=PRICE_ID)
    for hit in (0.0, 0.5):
        p = e.sel(batch_size=128, cache_hit_rate=hit)
        price_in = hit * pr["input_cache_hit_usd_per_mtok"] + (1 - hit) * pr["input_cache_miss_usd_per_mtok"]
        r = 608.0 / 168.0                  # DeepSeek's published input/output tokens per day
        revenue = (r * price_in + pr["output_usd_per_mtok"]) / (r + 1)    # $ per M blended tokens
        cost = float(p.usd_per_mtok_blended)
        gm = (revenue - cost) / revenue
        assert float(p.gross_margin_frac) == pytest.approx(gm, rel=1e-12)
        assert float(p.cost_profit_margin_frac) == pytest.approx((revenue - cost) / cost, rel=1e-12)
        dec = float(p.decode_tokens_per_s_per_gpu) * 3600.0
        assert float(p.revenue_usd_per_gpu_hour_decode) == pytest.approx(
            dec * pr["output_usd_per_mtok"] / 1e6, rel=1e-12)
    assert "deepseek-chat-2025-02" in e.attrs["price"] and e.attrs["cost_basis"] == "rental"


def test_capex_basis_energy_and_payback_by_hand(h200):
    t = hw_toml("H200-SXM")
    capex, tdp = t["price"]["capex_usd_per_gpu"], t["power"]["tdp_w"]
    cost = CostModel(cost_basis="capex", depreciation_years=4.0, pue=1.3, usd_per_kwh=0.08,
                     utilization=0.7)
    e = add_economics(h200, price=PRICE_ID, cost=cost)
    dep = capex / (4.0 * 8760.0)
    u = 0.7
    p_dec = tdp * (IDLE + u * (DECODE - IDLE))
    p_pre = tdp * (IDLE + u * (PREFILL - IDLE))
    e_dec = p_dec / 1000.0 * 1.3 * 0.08
    e_pre = p_pre / 1000.0 * 1.3 * 0.08
    p = e.sel(batch_size=128)
    tps = float(p.decode_tokens_per_s_per_gpu)
    assert float(p.gpu_cost_usd_per_hour) == pytest.approx(dep + e_dec, rel=1e-12)
    assert float(p.usd_per_mtok_output) == pytest.approx((dep + e_dec) / (tps * 3600 * u) * 1e6, rel=1e-12)
    assert float(p.usd_per_mtok_input) == pytest.approx(
        (dep + e_pre) / (float(p.prefill_tokens_per_s_per_gpu) * 3600 * u) * 1e6, rel=1e-12)
    revenue_h = tps * 3600 * u * price_toml(PRICE_ID)["output_usd_per_mtok"] / 1e6
    assert float(p.payback_months) == pytest.approx(capex / ((revenue_h - e_dec) * HOURS_PER_MONTH),
                                                    rel=1e-12)
    mw = tps * u / (p_dec * 1.3 / 1e6)
    assert float(p.output_tokens_per_s_per_mw) == pytest.approx(mw, rel=1e-12)


def test_payback_infinite_when_revenue_does_not_cover_energy(h200):
    free = dataclasses.replace(load_prices()[PRICE_ID], output_usd_per_mtok=0.0)
    e = add_economics(h200, price=free, cost=CostModel(cost_basis="capex"))
    assert np.all(np.isinf(e.payback_months.values))      # decode revenue 0 < energy
    priced = add_economics(h200, price=PRICE_ID, cost=CostModel(cost_basis="capex"))
    assert np.all(np.isfinite(priced.payback_months.values) & (priced.payback_months.values > 0))


def test_tco_basis_uses_the_file_price(h200):
    tco = hw_toml("H200-SXM")["price"]["tco_usd_per_gpu_hour"]
    e = add_economics(h200, cost=CostModel(cost_basis="tco"))
    assert float(e.gpu_cost_usd_per_hour) == pytest.approx(tco, rel=1e-12)
    # an explicit rental rate overrides the file's
    r = add_economics(h200, cost=CostModel(rental_usd_per_gpu_hour=5.0))
    assert float(r.gpu_cost_usd_per_hour) == 5.0


def test_margin_rises_with_price_and_falls_with_cost(h800):
    base = load_prices()[PRICE_ID]
    margins, costs = [], []
    for scale in (0.5, 1.0, 2.0, 4.0):
        pr = dataclasses.replace(base, output_usd_per_mtok=base.output_usd_per_mtok * scale,
                                 input_cache_miss_usd_per_mtok=base.input_cache_miss_usd_per_mtok * scale,
                                 input_cache_hit_usd_per_mtok=base.input_cache_hit_usd_per_mtok * scale)
        e = add_economics(h800, price=pr)
        margins.append(e.gross_margin_frac.values)
        costs.append(e.usd_per_mtok_blended.values)
    for a, b in zip(margins, margins[1:]):
        assert np.all(b > a)
    for c in costs[1:]:
        np.testing.assert_array_equal(c, costs[0])      # the price is revenue, not cost
    rates = [1.0, 2.0, 4.0]
    m = [add_economics(h800, price=base, cost=CostModel(rental_usd_per_gpu_hour=r)).gross_margin_frac.values
         for r in rates]
    assert np.all(m[1] < m[0]) and np.all(m[2] < m[1])


def test_cost_halves_when_utilization_doubles(h800):
    full = add_economics(h800, cost=CostModel(utilization=1.0))
    half = add_economics(h800, cost=CostModel(utilization=0.5))
    for k in ("usd_per_mtok_output", "usd_per_mtok_input", "usd_per_mtok_blended"):
        xr.testing.assert_allclose(half[k], 2.0 * full[k], rtol=1e-12)


def test_cost_falls_with_batch_and_cache_hits(h800):
    e = add_economics(h800)
    assert "cache_hit_rate" not in e.usd_per_mtok_output.dims   # hits change prefill only
    out = e.usd_per_mtok_output.values
    assert np.all(np.diff(out) < 0)                         # batch 16 -> 64 -> 128
    inp = e.usd_per_mtok_input                               # prefill: no decode batch
    assert float(inp.sel(cache_hit_rate=0.5)) < float(inp.sel(cache_hit_rate=0.0))


def test_economics_over_a_hardware_dimension():
    names = ["H800-SXM", "H200-SXM", "B200"]
    ds = inf.evaluate("DeepSeek-V3", names, dp=32, ep=32, batch_size=[32, 64], kv_len=2048)
    e = add_economics(ds, price=PRICE_ID)
    assert set(e.usd_per_mtok_output.dims) == {"hardware", "batch_size"}
    rental_3yr = basis_toml("rental-3yr")["usd_per_gpu_hour"]
    for n in names:
        # one basis: SemiAnalysis 3-year rental; H800 is not in it and falls back to its file
        rate = rental_3yr.get(n) or hw_toml(n)["price"]["rental_usd_per_gpu_hour"]
        assert float(e.gpu_cost_usd_per_hour.sel(hardware=n)) == rate
        tps = e.decode_tokens_per_s_per_gpu.sel(hardware=n, batch_size=64)
        assert float(e.usd_per_mtok_output.sel(hardware=n, batch_size=64)) == pytest.approx(
            rate / (float(tps) * 3600) * 1e6, rel=1e-12)
    units = {k: e[k].attrs["units"] for k in ("usd_per_mtok_output", "gross_margin_frac",
                                              "payback_months", "output_tokens_per_s_per_mw")}
    assert units == {"usd_per_mtok_output": "USD/Mtoken", "gross_margin_frac": "1",
                     "payback_months": "months", "output_tokens_per_s_per_mw": "tokens/s/MW"}
    # no capex in the rental files of H800 and B200: payback is unknown there, known on H200
    assert np.isnan(e.payback_months.sel(hardware="H800-SXM")).all()
    assert np.isfinite(e.payback_months.sel(hardware="H200-SXM")).all()


def test_missing_prices_and_bad_inputs_name_the_problem(h800, h200):
    with pytest.raises(inf.SpecError, match=r"H800-SXM\.toml: hardware 'H800-SXM' lists no TCO price"):
        add_economics(h800, cost=CostModel(cost_basis="tco"))
    h20 = inf.evaluate("Llama-3.1-8B", "H20-96GB", batch_size=8)
    with pytest.raises(inf.SpecError, match=r"hardware 'H20-96GB' lists no rental price in price "
                                            r"basis 'rental-3yr,hardware-file'; no bundled basis "
                                            r"prices it: give rental_usd_per_gpu_hour"):
        add_economics(h20)
    with pytest.raises(inf.SpecError, match=r"lists no capex indication"):
        add_economics(h800, cost=CostModel(cost_basis="capex"))
    with pytest.raises(inf.SpecError, match=r"price = 'nope' is not a price id; available: \[.*"
                                            r"'deepseek-chat-2025-02'"):
        add_economics(h800, price="nope")
    for bad in (-1, float("nan"), float("inf"), "2"):
        with pytest.raises(inf.SpecError, match=r"input_tokens_per_output_token = .* must be a "
                                                r"finite number >= 0"):
            add_economics(h800, input_tokens_per_output_token=bad)
    with pytest.raises(inf.SpecError, match=r"cost_basis = 'lease' is not one of"):
        add_economics(h200, cost=CostModel(cost_basis="lease"))
    # without a price only cost variables are added
    e = add_economics(h800)
    assert "gross_margin_frac" not in e and "usd_per_mtok_output" in e
    assert math.isfinite(float(e.usd_per_mtok_output.max()))


def test_scalar_cache_hit_rate_prices_input_like_a_one_point_list():
    scalar = add_economics(inf.evaluate(DS_ARGS[0], DS_ARGS[1], cache_hit_rate=0.5, **DS_KW),
                           price=PRICE_ID)
    listed = add_economics(inf.evaluate(DS_ARGS[0], DS_ARGS[1], cache_hit_rate=[0.5], **DS_KW),
                           price=PRICE_ID).squeeze("cache_hit_rate")
    assert float(scalar.gross_margin_frac) == pytest.approx(float(listed.gross_margin_frac))


DS_ARGS = ("DeepSeek-V3", "H800-SXM")
DS_KW = dict(dp=32, ep=32, batch_size=64, kv_len=4096)
