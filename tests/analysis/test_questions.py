"""The questions layer: each answer checked against an independent engine computation."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner

import inference_factory as inf
from inference_factory.analysis import questions as q
from inference_factory.cli import cli
from inference_factory.analysis.economics import CostModel, add_economics
from inference_factory.specs.prices import load_prices

DS = "DeepSeek-V3"
PRICE = "deepseek-chat-2025-02"
H800 = dict(dp=32, ep=32, kv_len=4096)


# --------------------------------------------------------------------------------------------
# best draft depth
# --------------------------------------------------------------------------------------------


def test_best_draft_depth_is_the_argmax_of_the_engine_grid():
    batches, depths = [1, 8, 64, 128], [0, 1, 2, 3]
    r = q.best_draft_depth(DS, ["H800-SXM", "B200"], batch_size=batches, draft_depth=depths, **H800)
    compared = 0
    for hw in ("H800-SXM", "B200"):
        for b in batches:
            best, best_v = None, -np.inf
            for d in depths:                                  # one engine point at a time
                p = inf.evaluate(DS, hw, batch_size=b, draft_depth=d, **H800)
                if bool(p.fits) and float(p.decode_tokens_per_s_per_gpu) > best_v:
                    best, best_v = d, float(p.decode_tokens_per_s_per_gpu)
            got = r.sel(hardware=hw, batch_size=b)
            if best is None:
                assert np.isnan(got.best_draft_depth) and not bool(got.fits_any_depth)
                continue
            assert float(got.best_draft_depth) == best
            # the depth grid shares MTP weights across depths (fits only); throughput is per point
            assert float(got.best_decode_tokens_per_s_per_gpu) == pytest.approx(best_v, rel=1e-9)
            assert float(got.speedup_over_no_draft) >= 1.0
            compared += 1
    assert compared, "no point fits: the argmax was never compared"


def test_best_draft_depth_falls_as_batch_grows_into_the_compute_bound_regime():
    batches = [1, 4, 16, 64, 128, 256, 384, 512, 768, 1024]
    kw = dict(dp=8, ep=8, kv_len=1024, kv_precision="fp8")
    r = q.best_draft_depth(DS, "B200", batch_size=batches, **kw)
    best = r.best_draft_depth.values
    assert np.all(np.isfinite(best))
    assert np.all(np.diff(best) <= 0)                        # non-increasing with batch
    assert best[0] == 4 and best[-1] == 0
    binding = inf.evaluate(DS, "B200", batch_size=batches, draft_depth=0, **kw).decode_binding_resource
    assert binding.values[0] == "memory" and binding.values[-1] == "compute"


def test_best_draft_depth_errors():
    with pytest.raises(inf.SpecError, match=r"model 'Llama-3.1-8B' has no MTP module; give a draft"):
        q.best_draft_depth("Llama-3.1-8B", "H100-SXM", batch_size=[1, 8])
    with pytest.raises(inf.SpecError, match=r"metric = 'tpot_s' is not one of"):
        q.best_draft_depth(DS, "H800-SXM", batch_size=8, metric="tpot_s", **H800)
    with pytest.raises(inf.SpecError, match=r"draft_depth = 1.5 must be a whole number >= 0"):
        q.best_draft_depth(DS, "H800-SXM", batch_size=8, draft_depth=[0, 1.5], **H800)


# --------------------------------------------------------------------------------------------
# largest batch meeting SLOs
# --------------------------------------------------------------------------------------------


def _meets(b, tpot_s, **kw):
    p = inf.evaluate(DS, "H800-SXM", batch_size=b, **kw)
    return bool(p.fits) and float(p.tpot_s) <= tpot_s


def test_max_batch_meets_the_slo_and_the_next_batch_does_not():
    r = q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=0.03, kv_len=[2048, 4096], dp=32, ep=32)
    for kv in (2048, 4096):
        p = r.sel(kv_len=kv)
        b = int(p.max_batch_size_meeting_slo)
        assert p.slo_binding_constraint.item() == "tpot"
        assert _meets(b, 0.03, kv_len=kv, dp=32, ep=32)
        assert not _meets(b + 1, 0.03, kv_len=kv, dp=32, ep=32)
        assert float(p.tpot_s) <= 0.03


def test_max_batch_equals_a_brute_force_scan_of_every_whole_batch():
    tpot = 0.035
    grid = np.arange(1, 400)
    ds = inf.evaluate(DS, "H800-SXM", batch_size=grid, **H800)
    ok = (ds.tpot_s <= tpot) & ds.fits
    brute = int(grid[np.flatnonzero(ok.values)[-1]])
    r = q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=tpot, **H800)
    assert int(r.max_batch_size_meeting_slo) == brute
    coarse = q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=tpot, refine=False, **H800)
    b = int(coarse.max_batch_size_meeting_slo)
    assert b <= brute and b in q.default_batch_grid()


def test_max_batch_bound_by_memory_user_rate_grid_and_none():
    loose = q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=10.0, **H800)
    cap = float(inf.evaluate(DS, "H800-SXM", batch_size=1, **H800).max_batch_size)
    assert loose.slo_binding_constraint.item() == "memory"
    assert float(loose.max_batch_size_meeting_slo) == cap
    user = q.max_batch_meeting_slo(DS, "H800-SXM", min_user_tokens_per_s=30.0, **H800)
    b = int(user.max_batch_size_meeting_slo)
    assert user.slo_binding_constraint.item() == "user_tokens_per_s"
    assert float(inf.evaluate(DS, "H800-SXM", batch_size=b, **H800).decode_tokens_per_s_per_user) >= 30
    assert float(inf.evaluate(DS, "H800-SXM", batch_size=b + 1, **H800).decode_tokens_per_s_per_user) < 30
    top = q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=10.0, batch_size=[1, 2, 4, 8], **H800)
    assert top.slo_binding_constraint.item() == "grid" and float(top.max_batch_size_meeting_slo) == 8
    none = q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=1e-6, **H800)
    assert np.isnan(float(none.max_batch_size_meeting_slo))
    assert none.slo_binding_constraint.item() == "tpot"


def test_max_prefill_batch_meets_ttft_and_the_next_does_not():
    r = q.max_batch_meeting_slo(DS, "H800-SXM", ttft_s=1.5, prompt_len=2048, **H800)
    bp = int(r.max_prefill_batch_size_meeting_slo)
    assert r.prefill_slo_binding_constraint.item() == "ttft"

    def ttft(n):
        return float(inf.evaluate(DS, "H800-SXM", prefill_batch_size=n, prompt_len=2048, **H800).ttft_s)

    assert ttft(bp) <= 1.5 < ttft(bp + 1)
    assert float(r.ttft_s) == pytest.approx(ttft(bp))


def test_max_batch_errors():
    with pytest.raises(inf.SpecError, match=r"tpot_s = -1 must be a positive number"):
        q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=-1)
    with pytest.raises(inf.SpecError, match=r"batch_size = 0 must be a whole number >= 1"):
        q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=0.05, batch_size=[0, 4])
    with pytest.raises(inf.SpecError, match=r"batch_size = \[8, 4\] must be increasing"):
        q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=0.05, batch_size=[8, 4])
    with pytest.raises(inf.SpecError, match=r"unknown argument 'kv_length'"):
        q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=0.05, kv_length=4096)


# --------------------------------------------------------------------------------------------
# cheapest configuration meeting an SLO
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cheapest():
    return q.cheapest_meeting_slo(
        DS, ["H800-SXM", "H100-SXM", "B200"],
        parallelism=[{"tp": 8}, {"dp": 8, "ep": 8}, {"dp": 16, "ep": 16}, {"dp": 6, "ep": 4}],
        options={"kv_precision": ["bf16", "fp8"]}, tpot_s=0.05, kv_len=4096, price=PRICE,
        batch_size=[1, 8, 32, 64, 96, 128, 192, 256, 384, 512])


def test_cheapest_rows_meet_the_slo_and_are_the_cheapest_fitting_batch(cheapest):
    ok = cheapest[cheapest.meets_slo]
    assert len(ok) >= 4
    assert list(ok["rank"]) == list(range(1, len(ok) + 1))
    assert np.all(np.diff(ok["usd_per_mtok_output"].to_numpy()) >= 0)
    grid = [1, 8, 32, 64, 96, 128, 192, 256, 384, 512]
    for r in ok.itertuples():
        kw = {k: getattr(r, k) for k in ("tp", "dp", "ep", "kv_precision")}
        e = add_economics(inf.evaluate(DS, r.hardware, batch_size=grid, kv_len=4096, **kw), price=PRICE)
        meets = e.fits & (e.tpot_s <= 0.05)
        assert float(e.usd_per_mtok_output.where(meets).min()) == pytest.approx(r.usd_per_mtok_output)
        p = e.sel(batch_size=r.batch_size)
        assert bool(p.fits) and float(p.tpot_s) <= 0.05
        assert float(p.gross_margin_frac) == pytest.approx(r.gross_margin_frac)


def test_cheapest_says_why_the_others_fail(cheapest):
    bad = cheapest[~cheapest.meets_slo]
    assert bad["rank"].isna().all() and (bad["reason"] != "").all()
    h100_dp8 = bad[(bad.hardware == "H100-SXM") & (bad.dp == 8)]
    assert len(h100_dp8) == 2 and h100_dp8.reason.str.startswith("does not fit").all()
    invalid = bad[bad.dp == 6]
    assert len(invalid) == 6 and invalid.reason.str.contains("ep = 4 must divide").all()
    tight = q.cheapest_meeting_slo(DS, "B200", parallelism=[{"dp": 8, "ep": 8}], tpot_s=0.001,
                                   kv_len=4096)
    assert tight.reason[0].startswith("misses SLO: TPOT") and not tight.meets_slo[0]
    noprice = q.cheapest_meeting_slo(DS, "H20-96GB", parallelism=[{"dp": 8, "ep": 8}], tpot_s=0.05)
    assert noprice.reason[0].startswith("no cost:") and "no rental price" in noprice.reason[0]


def test_cheapest_errors():
    with pytest.raises(inf.SpecError, match=r"parallelism key 'pp' is not a structural axis"):
        q.cheapest_meeting_slo(DS, "B200", parallelism=[{"pp": 2}])
    with pytest.raises(inf.SpecError, match=r"option kv_precision must be a non-empty list"):
        q.cheapest_meeting_slo(DS, "B200", options={"kv_precision": "fp8"})
    with pytest.raises(inf.SpecError, match=r"kv_len = \[1, 2\] must be a single value"):
        q.cheapest_meeting_slo(DS, "B200", kv_len=[1, 2])
    with pytest.raises(inf.SpecError, match=r"metric = 'usd' is not one of"):
        q.cheapest_meeting_slo(DS, "B200", metric="usd")


# --------------------------------------------------------------------------------------------
# Pareto front
# --------------------------------------------------------------------------------------------


def _dominates(a, b):
    return a[0] >= b[0] and a[1] >= b[1] and (a[0] > b[0] or a[1] > b[1])


def test_pareto_front_is_non_dominated_and_covers_every_dominated_point():
    ds = inf.evaluate(DS, ["H200-SXM", "B200"], dp=8, ep=8, batch_size=[1, 4, 16, 64, 128, 256, 512],
                      draft_depth=[0, 1, 2, 3], kv_len=4096)
    front = q.pareto_front(ds)
    df = inf.to_dataframe(ds)
    df = df[df.fits]
    x, y = "decode_tokens_per_s_per_user", "decode_tokens_per_s_per_gpu"
    fp = list(zip(front[x], front[y]))
    pts = list(zip(df[x], df[y]))
    assert 2 <= len(fp) < len(pts)
    for a in fp:
        assert not any(_dominates(b, a) for b in pts)
    for p in pts:
        if p not in fp:
            assert any(_dominates(a, p) for a in fp)
    assert np.all(np.diff(front[x]) >= 0) and np.all(np.diff(front[y]) <= 0)
    assert set(front.hardware) <= {"H200-SXM", "B200"} and "draft_depth" in front


def test_pareto_mask_matches_brute_force_with_ties():
    rng = np.random.default_rng(7)
    for _ in range(20):
        x = rng.integers(0, 6, 40).astype(float)
        y = rng.integers(0, 6, 40).astype(float)
        x[3] = np.nan
        mask = q.pareto_mask(x, y)
        for i in range(x.size):
            if not np.isfinite(x[i]):
                assert not mask[i]
                continue
            dominated = any(_dominates((x[j], y[j]), (x[i], y[i]))
                            for j in range(x.size) if np.isfinite(x[j]))
            assert mask[i] == (not dominated)


def test_pareto_errors():
    ds = inf.evaluate(DS, "B200", dp=8, ep=8, batch_size=[1, 8])
    with pytest.raises(inf.SpecError, match=r"'tokens' is not a variable of the data"):
        q.pareto_front(ds, x="tokens")


# --------------------------------------------------------------------------------------------
# tornado
# --------------------------------------------------------------------------------------------

POINT = dict(dp=32, ep=32, batch_size=96, kv_len=4096, draft_depth=1)


@pytest.fixture(scope="module")
def tor():
    return q.tornado(DS, "H800-SXM", {
        "acceptance_rate": (0.6, 0.9), "cache_hit_rate": (0.0, 0.8), "expert_skew": (0.0, 0.8),
        "rental_usd_per_gpu_hour": (1.5, 3.0), "utilization": (0.5, 1.0), "pue": (1.1, 1.5),
        "kv_precision": ("bf16", "fp8"), "output_usd_per_mtok": (0.8, 1.6),
    }, price=PRICE, **POINT)


def test_tornado_ranks_by_swing_and_matches_independent_evaluations(tor):
    swing = tor["usd_per_mtok_blended_swing"].to_numpy()
    assert np.all(np.diff(swing) <= 0)
    acc = tor.set_index("parameter").loc["acceptance_rate"]
    for v, col in ((0.6, "low"), (0.9, "high")):
        e = add_economics(inf.evaluate(DS, "H800-SXM", acceptance_rate=v, **POINT), price=PRICE)
        assert acc[f"usd_per_mtok_blended_{col}"] == pytest.approx(float(e.usd_per_mtok_blended))
        assert acc[f"gross_margin_frac_{col}"] == pytest.approx(float(e.gross_margin_frac))
    base = add_economics(inf.evaluate(DS, "H800-SXM", **POINT), price=PRICE)
    assert tor.attrs["base"]["usd_per_mtok_blended"] == pytest.approx(float(base.usd_per_mtok_blended))
    hit = tor.set_index("parameter").loc["cache_hit_rate"]     # hits are billed cheaper too
    e = add_economics(inf.evaluate(DS, "H800-SXM", cache_hit_rate=[0.8], **POINT), price=PRICE)
    assert hit.gross_margin_frac_high == pytest.approx(float(e.gross_margin_frac.squeeze()))
    rent = tor.set_index("parameter").loc["rental_usd_per_gpu_hour"]
    assert rent.usd_per_mtok_blended_high / rent.usd_per_mtok_blended_low == pytest.approx(2.0)
    assert rent.base == 2.0                                  # the H800 file's rental price


def test_tornado_zero_swings_are_physical(tor):
    t = tor.set_index("parameter")
    # rental is all-in: power does not enter the cost
    assert t.loc["pue", "usd_per_mtok_blended_swing"] == 0
    # the list price changes revenue (margin), never cost
    assert t.loc["output_usd_per_mtok", "usd_per_mtok_blended_swing"] == 0
    assert t.loc["output_usd_per_mtok", "gross_margin_frac_swing"] > 0
    # on the capex basis power costs money
    cap = q.tornado(DS, "H200-SXM", {"pue": (1.1, 1.5), "usd_per_kwh": (0.05, 0.15)},
                    cost=CostModel(cost_basis="capex"), dp=8, ep=8, batch_size=64)
    assert (cap["usd_per_mtok_blended_swing"] > 0).all()
    assert (cap["usd_per_mtok_blended_high"] > cap["usd_per_mtok_blended_low"]).all()


def test_tornado_errors():
    with pytest.raises(inf.SpecError, match=r"unknown parameter 'acceptance'; allowed: \["):
        q.tornado(DS, "H800-SXM", {"acceptance": (0.5, 0.9)}, **POINT)
    with pytest.raises(inf.SpecError, match=r"range of pue = \(1.5, 1.1\) must have low < high"):
        q.tornado(DS, "H800-SXM", {"pue": (1.5, 1.1)}, **POINT)
    with pytest.raises(inf.SpecError, match=r"pue = 0.9 is out of range; allowed >= 1"):
        q.tornado(DS, "H800-SXM", {"pue": (0.9, 1.1)}, **POINT)
    with pytest.raises(inf.SpecError, match=r"acceptance_rate = 1.2 is out of range"):
        q.tornado(DS, "H800-SXM", {"acceptance_rate": (0.5, 1.2)}, **POINT)
    with pytest.raises(inf.SpecError, match=r"metric 'gross_margin_frac' needs a price"):
        q.tornado(DS, "H800-SXM", {"pue": (1.1, 1.5)}, metrics=["gross_margin_frac"], **POINT)
    with pytest.raises(inf.SpecError, match=r"batch_size = \[1, 2\] must be a single value"):
        q.tornado(DS, "H800-SXM", {"pue": (1.1, 1.5)}, **dict(POINT, batch_size=[1, 2]))


# --------------------------------------------------------------------------------------------
# Monte Carlo
# --------------------------------------------------------------------------------------------

RANGES = {"acceptance_rate": (0.6, 0.8, 0.9), "cache_hit_rate": (0.2, 0.8),
          "batch_size": (32, 128), "rental_usd_per_gpu_hour": (1.5, 3.0),
          "utilization": (0.5, 0.95), "output_usd_per_mtok": (0.9, 1.3)}


def test_monte_carlo_is_deterministic_for_a_seed():
    a = q.monte_carlo(DS, "H800-SXM", RANGES, n=200, seed=3, price=PRICE, **H800)
    b = q.monte_carlo(DS, "H800-SXM", RANGES, n=200, seed=3, price=PRICE, **H800)
    c = q.monte_carlo(DS, "H800-SXM", RANGES, n=200, seed=4, price=PRICE, **H800)
    xr.testing.assert_identical(a.samples, b.samples)
    pd.testing.assert_frame_equal(a.summary, b.summary)
    assert not np.array_equal(a.samples.gross_margin_frac.values, c.samples.gross_margin_frac.values)


def test_monte_carlo_samples_are_latin_hypercube_within_the_ranges():
    n = 128
    r = q.monte_carlo(DS, "H800-SXM", RANGES, n=n, seed=0, price=PRICE, **H800)
    s = r.samples
    for name, rng in RANGES.items():
        v = s[name].values
        assert v.min() >= rng[0] and v.max() <= rng[-1]
    for name in ("cache_hit_rate", "rental_usd_per_gpu_hour"):      # uniform: one per stratum
        lo, hi = RANGES[name]
        strata = np.floor((s[name].values - lo) / (hi - lo) * n).astype(int)
        assert sorted(strata) == list(range(n))
    tri = s["acceptance_rate"].values                                 # triangular mean
    big = q.monte_carlo(DS, "H800-SXM", {"acceptance_rate": (0.6, 0.8, 0.9)}, n=4000, **H800)
    assert big.samples.acceptance_rate.values.mean() == pytest.approx((0.6 + 0.8 + 0.9) / 3, abs=2e-3)
    assert tri.size == n


def test_monte_carlo_vectorized_matches_point_by_point_economics():
    r = q.monte_carlo(DS, "H800-SXM", RANGES, n=64, seed=1, price=PRICE, **H800)
    base_price = load_prices()[PRICE]
    for i in (0, 17, 40, 63):
        s = r.samples.isel(sample=i)
        # the samples' batch is continuous: the engine's evaluate (inf.evaluate takes whole
        # batch sizes only, issue 23)
        from inference_factory.engine import evaluate as engine_evaluate
        p = engine_evaluate(DS, "H800-SXM", acceptance_rate=float(s.acceptance_rate),
                         cache_hit_rate=float(s.cache_hit_rate), batch_size=float(s.batch_size), **H800)
        # add_economics prices hits only from a cache_hit_rate coordinate (see test_economics)
        p = p.assign_coords(cache_hit_rate=float(s.cache_hit_rate))
        e = add_economics(p, price=dataclasses.replace(base_price, output_usd_per_mtok=float(
            s.output_usd_per_mtok)), cost=CostModel(rental_usd_per_gpu_hour=float(
                s.rental_usd_per_gpu_hour), utilization=float(s.utilization)))
        for m in ("usd_per_mtok_output", "usd_per_mtok_blended", "gross_margin_frac"):
            assert float(s[m]) == pytest.approx(float(e[m]), rel=1e-9), (i, m)
        assert bool(s.fits) == bool(p.fits)
    # only engine axes sampled: one add_economics call on the sample grid; the sampled cache
    # hit rate must reach the revenue side too (cheaper input price on hits)
    eng = q.monte_carlo(DS, "H800-SXM", {"cache_hit_rate": (0.0, 0.9)}, n=32, seed=2, price=PRICE,
                        **H800)
    for i in (0, 5, 31):
        s = eng.samples.isel(sample=i)
        hit = float(s.cache_hit_rate)
        e = add_economics(inf.evaluate(DS, "H800-SXM", cache_hit_rate=[hit], **H800).squeeze(
            "cache_hit_rate"), price=PRICE)
        assert float(s.gross_margin_frac) == pytest.approx(float(e.gross_margin_frac), rel=1e-9)


def test_monte_carlo_summary_is_the_percentiles_of_fitting_samples():
    r = q.monte_carlo(DS, "H800-SXM", RANGES, n=300, seed=5, price=PRICE, **H800)
    fits = r.samples.fits.values
    assert 0 < fits.mean() < 1                              # batch up to 128 overflows H800 at 4k
    for m in ("usd_per_mtok_output", "gross_margin_frac"):
        v = r.samples[m].values[fits]
        row = r.summary.loc[m]
        assert row["p50"] == pytest.approx(np.percentile(v, 50))
        assert row["p5"] == pytest.approx(np.percentile(v, 5))
        assert row["mean"] == pytest.approx(v.mean())
        assert row["fits_frac"] == pytest.approx(fits.mean())
    assert r.summary.loc["gross_margin_frac", "p5"] < r.summary.loc["gross_margin_frac", "p95"]


def test_monte_carlo_errors():
    with pytest.raises(inf.SpecError, match=r"expert_skew is a structural choice .* vary "
                                            r"expert_skew with tornado"):
        q.monte_carlo(DS, "H800-SXM", {"expert_skew": (0, 1)}, **H800)
    with pytest.raises(inf.SpecError, match=r"mode of acceptance_rate = 0.95 must lie in \[0.6, 0.9\]"):
        q.monte_carlo(DS, "H800-SXM", {"acceptance_rate": (0.6, 0.95, 0.9)}, **H800)
    with pytest.raises(inf.SpecError, match=r"method = 'sobol' is not one of"):
        q.monte_carlo(DS, "H800-SXM", {"acceptance_rate": (0.6, 0.9)}, method="sobol", **H800)
    with pytest.raises(inf.SpecError, match=r"sampling output_usd_per_mtok needs a price"):
        q.monte_carlo(DS, "H800-SXM", {"output_usd_per_mtok": (1, 2)}, **H800)
    with pytest.raises(inf.SpecError, match=r"utilization = 0 is out of range; allowed \(0, 1\]"):
        q.monte_carlo(DS, "H800-SXM", {"utilization": (0.0, 0.5)}, n=10, **H800)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _run(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_cli_max_batch_json_equals_the_library_call():
    res = _run(["max-batch", "-m", DS, "-H", "H800-SXM", "-a", "dp=32", "-a", "ep=32",
                "-a", "kv_len=2048,4096", "--tpot-ms", "30", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["rows"]
    lib = q.max_batch_meeting_slo(DS, "H800-SXM", tpot_s=0.03, dp=32, ep=32, kv_len=[2048, 4096])
    got = {r["kv_len"]: r["max_batch_size_meeting_slo"] for r in rows}
    assert got == {kv: float(lib.max_batch_size_meeting_slo.sel(kv_len=kv)) for kv in (2048.0, 4096.0)}


@pytest.mark.parametrize("args", [
    ["best-draft", "-a", "dp=32", "-a", "ep=32", "--batch-size", "1,64"],
    ["cheapest", "-H", "H800-SXM,B200", "-p", "dp=16,ep=16", "-a", "kv_precision=bf16,fp8",
     "--tpot-ms", "50", "--price", PRICE],
    ["pareto", "-H", "B200", "-a", "dp=8", "-a", "ep=8", "-a", "batch_size=1,16,128",
     "-a", "draft_depth=0,2"],
    ["tornado", "-a", "dp=32", "-a", "ep=32", "-a", "batch_size=64", "-r", "acceptance_rate=0.6,0.9",
     "-r", "kv_precision=bf16,fp8", "--price", PRICE],
    ["montecarlo", "-a", "dp=32", "-a", "ep=32", "-a", "batch_size=64", "-r",
     "cache_hit_rate=0.2,0.8", "-r", "acceptance_rate=tri:0.6:0.8:0.9", "--n", "50", "--price", PRICE],
])
def test_cli_commands_run_and_print_json(args):
    text = _run(args)
    assert text.exit_code == 0, text.output
    js = _run(args + ["--json"])
    assert js.exit_code == 0, js.output
    obj = json.loads(js.output)
    assert obj["rows"]


def test_cli_montecarlo_prints_the_library_percentiles():
    res = _run(["montecarlo", "-a", "dp=32", "-a", "ep=32", "-a", "batch_size=64", "-r",
                "cache_hit_rate=0.2,0.8", "--n", "40", "--seed", "9", "--price", PRICE, "--json"])
    rows = {r["metric"]: r for r in json.loads(res.output)["rows"]}
    lib = q.monte_carlo(DS, "H800-SXM", {"cache_hit_rate": (0.2, 0.8)}, n=40, seed=9, price=PRICE,
                        dp=32, ep=32, batch_size=64)
    assert rows["gross_margin_frac"]["p50"] == pytest.approx(lib.summary.loc["gross_margin_frac", "p50"])


@pytest.mark.parametrize("args, message", [
    (["tornado", "-r", "acceptance_rate=0.9,0.6"], "must have low < high"),
    (["tornado", "-r", "acceptance_rate"], "expected NAME=LOW,HIGH"),
    (["montecarlo", "-r", "expert_skew=0,1"], "expert_skew is a structural choice"),
    (["cheapest", "--utilization", "1.5"], "utilization = 1.5 is out of range"),
    (["max-batch", "-a", "foo=3"], "unknown axis 'foo'"),
    (["tornado", "-H", "H800-SXM,B200", "-r", "pue=1.1,1.5"], "give one device"),
])
def test_cli_bad_input_is_one_line_and_status_2(args, message):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2
    err = res.stderr if hasattr(res, "stderr") else res.output
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


# --------------------------------------------------------------------------------------------
# lever waterfall
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compared():
    from inference_factory.factory.compare import compare
    from inference_factory.factory.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "factory.toml")
    wl = dataclasses.replace(cfg.workload, n_requests=1500)
    return compare(dataclasses.replace(cfg, workload=wl,
                                       baseline=dataclasses.replace(cfg.baseline, workload=wl)))


def test_lever_waterfall_runs_from_baseline_to_factory(compared):
    b = compared["baseline"]["usd_per_mtok_output"]
    f = compared["factory"]["usd_per_mtok_output"]
    lin = q.lever_waterfall(compared, "usd_per_mtok_output")
    # the generic baseline already batches continuously: the waterfall starts without it
    pre = [r for r in compared["attribution"] if "baseline_without" in r]
    assert [r["lever"] for r in pre] == ["continuous_batching"]
    start = pre[0]["baseline_without"]["usd_per_mtok_output"]
    assert list(lin.step) == ["baseline without continuous_batching"] + [
        r["lever"] for r in compared["attribution"]] + [q.INTERACTIONS, "factory"]
    levers = lin[lin.kind == "lever"]
    assert levers.change.sum() + lin.set_index("step").loc[q.INTERACTIONS, "change"] == pytest.approx(f - start)
    for r in compared["attribution"]:
        step = lin.set_index("step").loc[r["lever"]]
        assert step.change == pytest.approx(f - r["factory_without"]["usd_per_mtok_output"])
    np.testing.assert_allclose(lin.before.to_numpy()[1:-1], lin.after.to_numpy()[:-2])
    log = q.lever_waterfall(compared, "gpu_seconds", basis="baseline", log=True)
    total = compared["factory"]["gpu_seconds"] / pre[0]["baseline_without"]["gpu_seconds"]
    assert np.prod(log[log.kind.isin(["lever", "interactions"])].change) == pytest.approx(total)
    assert log.after.iloc[-1] == compared["factory"]["gpu_seconds"]
    # measured at the baseline, the continuous-batching step lands exactly on the baseline
    assert log.set_index("step").loc["continuous_batching", "after"] == pytest.approx(
        compared["baseline"]["gpu_seconds"])


def test_lever_waterfall_errors(compared):
    with pytest.raises(inf.SpecError, match=r"metric = 'ttft' is not one of"):
        q.lever_waterfall(compared, "ttft")
    with pytest.raises(inf.SpecError, match=r"log steps need a positive metric; gross_margin"):
        q.lever_waterfall(compared, "gross_margin", log=True)
    no_attr = {k: v for k, v in compared.items() if k != "attribution"}
    with pytest.raises(inf.SpecError, match=r"no attribution; run compare\(cfg, attribution=True\)"):
        q.lever_waterfall(no_attr)
