"""Prediction bands of plan's recommendations (analysis/plan/bands.py).

Reference values: the plan's own point (a band holds it); an independent computation of the
closed form where the spreads are zeroed (the draws then reproduce the point, so the band
path runs the plan's arithmetic); the expected tokens per verify step E(1) = 1 + a_1 (MODEL.md
section 6) for the acceptance draws; the model-structure widening of configs/uncertainty.toml
([conformal]). A small search grid keeps each plan under a second.
"""

import dataclasses
import math
from pathlib import Path

import pytest

from inference_factory.analysis.plan import plan
from inference_factory.analysis.plan.bands import BANDED
from inference_factory.engine.uncertainty import resolve

REPO = Path(__file__).resolve().parents[2]
SMALL = dict(gpus=16, isl=1024, osl=512, tpot_s=0.05, batch_size=(16, 64, 128),
             prefill_batch_size=(1, 4), draft_depth=(1,), precision="native")


def _rec(hw="H200", uncertainty=True, **kw):
    return plan("DeepSeek-V3", hw, uncertainty=uncertainty, **{**SMALL, **kw}) \
        .recommendations.iloc[0]


def _zero(u, **ranges):
    """The bundled sources with every op spread zeroed and only ``ranges`` left."""
    return dataclasses.replace(u, measured_sigma_ln={}, measured_default_sigma_ln=0.0,
                               roofline_sigma_ln={k: 0.0 for k in u.roofline_sigma_ln},
                               ranges=ranges, draws=32)


@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_bands_hold_the_point_and_are_deterministic(mode):
    a = _rec(modes=(mode,))
    b = _rec(modes=(mode,))
    assert a["mode"] == mode
    point = plan("DeepSeek-V3", "H200", **{**SMALL, "modes": (mode,)}).recommendations.iloc[0]
    for k in BANDED:
        assert a[k] == point[k]                               # the point is not moved
        assert a[f"{k}_low"] <= a[k] <= a[f"{k}_high"], k
        assert a[f"{k}_low"] == b[f"{k}_low"] and a[f"{k}_high"] == b[f"{k}_high"]
    assert a["output_tokens_per_s_per_gpu_high"] > a["output_tokens_per_s_per_gpu_low"]
    assert 0.0 <= a["meets_slo_share"] <= 1.0


@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_zero_spread_reproduces_the_point_through_the_plans_arithmetic(mode):
    """No spread and no range: every draw is the plan's own operating point, so the band
    collapses onto the point (1e-9: float round-off of the closed loop's iterations)."""
    rec = _rec(modes=(mode,), uncertainty=_zero(resolve(True)))
    w = rec["band_structure_ln"]
    assert w == resolve(True).conformal_ln["measured"]
    for k in BANDED:
        assert rec[f"{k}_low"] * math.exp(w) == pytest.approx(rec[k], rel=1e-9), k
        assert rec[f"{k}_high"] / math.exp(w) == pytest.approx(rec[k], rel=1e-9), k
    assert rec["meets_slo_share"] == 1.0


def test_structure_term_widens_only():
    """The full band is the component band times exp(w) each side, w the device's
    model-structure term; the point is the same."""
    full = _rec(uncertainty=True)
    comp = _rec(uncertainty="components")
    w = resolve(True).conformal_ln["measured"]
    assert full["band_structure_ln"] == w and comp["band_structure_ln"] == 0.0
    for k in BANDED:
        assert full[k] == comp[k]
        assert full[f"{k}_low"] == pytest.approx(comp[f"{k}_low"] / math.exp(w), rel=1e-12)
        assert full[f"{k}_high"] == pytest.approx(comp[f"{k}_high"] * math.exp(w), rel=1e-12)


def test_free_acceptance_moves_the_decode_band_by_the_expected_tokens_per_step():
    """Only the acceptance drawn (uniform on its range, above the default a_1 = 0.8): at
    draft depth 1 the decode step is unchanged and E = 1 + a_1, so tokens/s per user moves by
    (1 + a) / (1 + 0.8); the 90th percentile of a over 32 draws lies within 10 % of the
    range's top. A pinned acceptance_rate is not drawn."""
    u = resolve(True)
    lo_a, hi_a = u.ranges["acceptance_rate"]
    rec = _rec(modes=("disaggregated",), uncertainty=_zero(u, acceptance_rate=(lo_a, hi_a)))
    assert rec["draft_depth"] == 1 and lo_a > 0.8
    w = rec["band_structure_ln"]
    k = "tokens_per_s_per_user"
    ratio_hi = rec[f"{k}_high"] / math.exp(w) / rec[k]
    a_hi = hi_a - 0.1 * (hi_a - lo_a)
    assert (1 + a_hi) / 1.8 - 0.01 <= ratio_hi <= (1 + hi_a) / 1.8 + 1e-9
    # every draw is above the point: the band's low end is the point itself
    assert rec[f"{k}_low"] * math.exp(w) == pytest.approx(rec[k], rel=1e-9)
    pinned = _rec(modes=("disaggregated",), acceptance_rate=0.8,
                  uncertainty=_zero(u, acceptance_rate=(lo_a, hi_a)))
    assert pinned[f"{k}_high"] / math.exp(w) == pytest.approx(pinned[k], rel=1e-9)


def test_roofline_only_device_gets_a_wider_recommendation_band(tmp_path, monkeypatch):
    """A copy of MI355X's spec under another name has no kernel tables: every op is on the
    roofline and takes the roofline's spread, wider than H200's measured families."""
    text = (REPO / "hardware" / "MI355X.toml").read_text()
    text = text.replace('name = "MI355X"', 'name = "MI355X-ROOF"', 1)
    text = text.replace('aliases = ["MI355", "AMD-MI355X", "Instinct-MI355X"]',
                        'aliases = ["MI355X-ROOF-ALIAS"]', 1)
    (tmp_path / "MI355X-ROOF.toml").write_text(text)
    monkeypatch.setenv("INFERENCE_FACTORY_HARDWARE_DIR", str(tmp_path))
    from inference_factory.engine.measured import tables_for
    from inference_factory.specs import load_hardware
    assert tables_for(load_hardware("MI355X-ROOF")) is None
    res = plan("DeepSeek-V3", ["H200", "MI355X-ROOF"], uncertainty="components",
               **SMALL).recommendations.set_index("hardware")
    width = {h: res.loc[h, "output_tokens_per_s_per_gpu_high"]
             / res.loc[h, "output_tokens_per_s_per_gpu_low"] for h in res.index}
    assert width["MI355X-ROOF"] > 1.3 * width["H200-SXM"]
    full = plan("DeepSeek-V3", ["MI355X-ROOF"], uncertainty=True, **SMALL).recommendations
    assert full["band_structure_ln"].iloc[0] == resolve(True).conformal_ln["roofline_only"]


def test_cli_shows_value_low_high(tmp_path):
    from click.testing import CliRunner

    from inference_factory.cli import cli

    args = ["plan", "-m", "DeepSeek-V3", "-H", "H200", "--gpus", "16", "--isl", "1024",
            "--osl", "512", "--tpot", "50ms", "-a", "batch_size=16,64", "-a",
            "prefill_batch_size=1,4", "-a", "draft_depth=1", "--precision", "native",
            "--uncertainty"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    i = next(i for i, x in enumerate(lines) if x.startswith("TPOT ms"))
    band = lines[i + 1]                     # the band on the line under its value
    assert "[" not in lines[i] and "[" in band and "-" in band.split("[")[1]
    assert "80% band [low-high]" in out.output
    js = CliRunner().invoke(cli, args + ["--format", "json"])
    assert js.exit_code == 0, js.output
    import json
    rec = json.loads(js.output)["recommendations"][0]
    assert rec["tpot_s_low"] <= rec["tpot_s"] <= rec["tpot_s_high"]
    plot = tmp_path / "front.png"
    pytest.importorskip("matplotlib")
    got = CliRunner().invoke(cli, args + ["--plot", str(plot)])
    assert got.exit_code == 0, got.output
    assert plot.stat().st_size > 0


def test_simulate_bands_hold_the_headline_figures():
    """simulate --uncertainty: each headline figure inside its band, deterministic."""
    from inference_factory.factory.compare import simulate_one
    from inference_factory.factory.config import load_config

    cfg = load_config(REPO / "configs" / "factory.toml")
    cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, n_requests=2000))
    a = simulate_one(cfg, uncertainty=True)["scenario"]
    from inference_factory.factory.bands import SIMULATE_BANDED
    for k in SIMULATE_BANDED:
        assert a[f"{k}_low"] <= a[k] <= a[f"{k}_high"], k
    assert a["decode_tokens_per_s_per_gpu_high"] > a["decode_tokens_per_s_per_gpu_low"]
