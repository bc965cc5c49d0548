"""``plan``'s precision profiles and footing.

Profiles: the grammar (:func:`inference_factory.specs.grammar.parse_precision`) round-trips,
its two spellings mean one thing, bad input is one line naming the option, the value and what
is allowed; a profile reaches the engine with exactly the precisions it names (the engine
calls are recorded), and the plan's figures at the recommendation equal ``evaluate`` called
directly with those precisions (the independent reference); a part a device cannot run is
refused there with the engine's reason, a native format the device lacks is mapped with a
note.

Footing: a device without measured tables is roofline-only (every op's source is
``roofline``); H200 (AIConfigurator tables) is mostly measured at a DeepSeek-V3 deployment;
the shares are recomputed here from ``evaluate(..., detail="ops")`` at the recommended point.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.analysis.plan import candidates as pc
from inference_factory.analysis.plan import footing as pf
from inference_factory.analysis.plan import plan, profile_precisions
from inference_factory.engine.measured import tables_for
from inference_factory.errors import SpecError
from inference_factory.specs.grammar import PrecisionProfile, parse_precision

DS, LLAMA = "DeepSeek-V3", "Llama-3.1-70B"
ISL, OSL = 4096, 1024
#: A small search (the precision and footing logic does not depend on its size).
SMALL = dict(batch_size=[16, 64], draft_depth=[0], prefill_batch_size=[1],
             overlap=["none"])


# --------------------------------------------------------------------------------------------
# the grammar
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "native", "low", "fp8-weights+fp8-kv", "fp4-experts+fp8-kv", "low+fp8-dense",
    "fp8-dense+fp4-experts+fp8-kv", "fp4-weights", "bf16-weights+bf16-kv+bf16-dispatch",
    "low+fp8-kv+fp8-attention+bf16-combine"])
def test_a_profile_label_round_trips(text):
    (p,) = parse_precision(text)
    assert p.label() == text
    assert parse_precision(p.label()) == (p,)


def test_the_two_spellings_and_the_weights_rule():
    # weights sets the dense and the expert weights unless experts is named too (the
    # engine's rule for weight_precision)
    assert dict(parse_precision("fp8-weights+fp8-kv")[0].overrides) == {
        "weight_precision": "fp8", "moe_precision": "fp8", "kv_precision": "fp8"}
    explicit = parse_precision("weight=fp8,moe=fp4,kv=fp8")
    assert explicit == parse_precision("fp8-dense+fp4-experts+fp8-kv")
    assert explicit == parse_precision("fp8-weights+fp4-experts+fp8-kv")
    assert explicit == parse_precision("weight_precision=fp8+moe_precision=fp4+kv=fp8")
    assert parse_precision("both") == (PrecisionProfile("native"), PrecisionProfile("low"))
    assert parse_precision(["native", "fp8-weights+fp8-kv"]) == parse_precision(
        "native,fp8-weights+fp8-kv")
    assert parse_precision("low+fp8-dense")[0].base == "low"


@pytest.mark.parametrize("text, message", [
    ("fp9-kv", "allowed: fp32, bf16, fp16, fp8, fp4"),
    ("fp8-kvcache", "unknown part 'kvcache'; allowed: weights, dense, experts, kv"),
    ("kv=fp8,kv=bf16", "names kv twice"),
    ("fp8", "is not a profile (native, low, both) nor PREC-PART or PART=PREC"),
    ("fp8-weights+low", "the base 'low' must come first"),
    ("native,native", "listed twice"),
    ("fp8-weights++fp8-kv", "an empty part"),
    ("", "empty"),
])
def test_bad_profiles_are_one_line_naming_option_value_and_allowed(text, message):
    with pytest.raises(SpecError) as exc:
        parse_precision(text)
    msg = str(exc.value)
    assert msg.startswith("--precision") and message in msg and "\n" not in msg


# --------------------------------------------------------------------------------------------
# a profile on a device
# --------------------------------------------------------------------------------------------

def test_profiles_resolve_per_device_with_notes():
    ds, h200, a100 = inf.load_model(DS), inf.load_hardware("H200"), inf.load_hardware("A100")
    prec, note = profile_precisions(ds, h200, parse_precision("fp8-weights+fp8-kv")[0])
    assert {k: prec[k] for k in ("weight_precision", "moe_precision", "kv_precision",
                                 "dispatch_precision")} == {
        "weight_precision": "fp8", "moe_precision": "fp8", "kv_precision": "fp8",
        "dispatch_precision": "bf16"}                          # the native base's dispatch
    # weights in a format the device has no tensor cores for: weight-only, said so
    prec, note = profile_precisions(ds, h200, parse_precision("fp4-experts+fp8-kv")[0])
    assert prec["moe_precision"] == "fp4"
    assert "experts stored in fp4 and computed at bf16 on H200-SXM (weight-only" in note
    prec, note = profile_precisions(inf.load_model(LLAMA), a100,
                                    parse_precision("fp8-weights")[0])
    assert prec["weight_precision"] == "fp8" and "weight-only" in note
    # a part the device cannot run at all: refused, with the engine's reason
    prec, note = profile_precisions(ds, h200, parse_precision("fp4-attention")[0])
    assert prec is None and "refused on H200-SXM" in note and "no dense fp4" in note
    # the model's own FP8 weights on A100 (no FP8 tensor cores): kept, run weight-only as
    # evaluate and bench run them, said so
    prec, note = profile_precisions(ds, a100, PrecisionProfile("native"))
    assert prec["weight_precision"] == "fp8" and prec["moe_precision"] == "fp8"
    assert "fp8 weights stored in fp8 and computed at bf16 on A100-80GB-SXM" in note
    # DeepSeek-V4-Pro's MXFP4 experts on H200: kept at fp4 (weight-only), so the model fits
    # 8 GPUs (1.6T parameters: ~1.5 TB of experts at FP8 would not)
    prec, note = profile_precisions(inf.load_model("DeepSeek-V4-Pro"), h200,
                                    PrecisionProfile("native"))
    assert prec["moe_precision"] == "fp4" and prec["weight_precision"] == "fp8"
    assert "fp4 experts stored in fp4 and computed at bf16 on H200-SXM" in note


def test_a_profile_reaches_the_engine_with_the_precisions_it_names(monkeypatch):
    seen = []
    real = pc.evaluate_arrays

    def spy(m, hw, **kw):
        seen.append({k: v for k, v in kw.items() if k.endswith("_precision")})
        return real(m, hw, **kw)

    monkeypatch.setattr(pc, "evaluate_arrays", spy)
    res = plan(DS, "B200", gpus=8, isl=ISL, osl=OSL, tpot_s=0.05,
               precision=["fp4-experts+fp8-kv", "weight=fp8,moe=fp8,kv=fp8"],
               shapes=[{"tp": 8, "dp": 1, "ep": 8}], **SMALL)
    named = [{"weight_precision": "fp8", "moe_precision": "fp4", "kv_precision": "fp8",
              "attention_precision": "bf16", "dispatch_precision": "bf16",
              "combine_precision": "bf16"}]
    named.append({**named[0], "moe_precision": "fp8"})
    got = [{k: c.get(k, "bf16") for k in named[0]} for c in seen]
    assert sorted(map(str, {str(g) for g in got})) == sorted(map(str, named))
    cand = res.candidates
    assert set(cand["precision"]) == {"fp4-experts+fp8-kv", "fp8-weights+fp8-kv"}
    assert set(cand.loc[cand["precision"] == "fp4-experts+fp8-kv", "moe_precision"]) == {"fp4"}


def test_a_dense_model_at_fp8_and_fp4_without_a_model_file():
    """Llama-3.1-70B (BF16 weights) planned at FP8 and FP4 weights on B200: the plan's decode
    rate at each profile is evaluate's with those weights (independent call)."""
    res = plan(LLAMA, "B200", gpus=8, isl=ISL, osl=OSL, tpot_s=0.1,
               precision="native,fp8-weights+fp8-kv,fp4-weights+fp8-kv",
               shapes=[{"tp": 8, "dp": 1, "ep": 1}], **SMALL)
    cand = res.candidates[res.candidates["mode"] == "aggregated"]
    rates = {}
    for label, w in (("native", "bf16"), ("fp8-weights+fp8-kv", "fp8"),
                     ("fp4-weights+fp8-kv", "fp4")):
        row = cand[(cand["precision"] == label) & (cand["batch_size"] == 64)].iloc[0]
        assert row["weight_precision"] == w
        ref = inf.evaluate(LLAMA, "B200", tp=8, weight_precision=w,
                           kv_precision=row["kv_precision"],
                           dispatch_precision=row["dispatch_precision"], batch_size=64,
                           kv_len=ISL + OSL / 2, final_len=ISL + OSL, prompt_len=ISL)
        want = float(ref["decode_tokens_per_s_per_gpu"])
        assert math.isclose(row["decode_tokens_per_s_per_gpu"], want, rel_tol=1e-9)
        rates[w] = want
    # each format is its own costing (the measured tables of B200 decide which is faster:
    # at batch 64 its FP8 per-tensor GEMMs measure slower than BF16, so no order is asserted)
    assert len(set(rates.values())) == 3


def test_a_dense_model_refuses_an_experts_only_profile():
    with pytest.raises(SpecError, match="is dense .* name weights or dense"):
        plan(LLAMA, "B200", precision="fp4-experts", **SMALL)


def test_refused_everywhere_is_one_error_and_refused_somewhere_is_a_note():
    with pytest.raises(SpecError, match="refused on H200-SXM: attention_precision = 'fp4'"):
        plan(DS, "H200", gpus=8, precision="fp4-attention", **SMALL)
    res = plan(DS, ["H200", "B200"], gpus=8, isl=ISL, osl=OSL,
               precision="fp4-attention", shapes=[{"tp": 8, "dp": 1, "ep": 8}], **SMALL)
    recs = res.recommendations.set_index("hardware")
    assert recs.loc["H200-SXM", "reason"].startswith("nothing meets the targets")
    assert "fp4-attention refused on H200-SXM" in recs.loc["H200-SXM", "precision_note"]
    assert recs.loc["B200", "reason"] == ""


def test_fp4_experts_without_fp4_tensor_cores_run_weight_only():
    """H200 has no FP4 tensor cores: FP4 experts are stored in 4 bits and multiplied at
    BF16 (weight-only), so they read half the bytes of FP8 experts; the plan says so."""
    res = plan(DS, "H200", gpus=8, isl=ISL, osl=OSL, precision="fp4-experts+fp8-kv",
               shapes=[{"tp": 8, "dp": 1, "ep": 8}], **SMALL)
    rec = res.recommendations.iloc[0]
    assert rec["moe_precision"] == "fp4" and "weight-only" in rec["precision_note"]


# --------------------------------------------------------------------------------------------
# footing
# --------------------------------------------------------------------------------------------

def test_op_source_shares_and_labels():
    sh = pf.op_source_shares([1.0, 3.0, np.nan, 4.0, 0.0],
                             ["measured", "interpolated", "roofline", "roofline", "measured"])
    assert sh == {"measured": 0.125, "interpolated": 0.375, "roofline": 0.5}
    assert pf.footing_label(0.5, 0.5) == "measured"
    assert pf.footing_label(0.2, 0.7) == "extrapolated"
    assert pf.footing_label(0.1, 0.2) == "partly measured"
    assert pf.footing_label(0.0, 0.0) == "roofline-only"
    assert pf.op_source_shares([np.nan], ["roofline"]) == {}


def _no_tables_amd():
    """An AMD device without measured tables: MI355X while it has none; else its spec under
    a name no table folder has (the engine looks tables up by name)."""
    hw = inf.load_hardware("MI355X")
    if tables_for(hw) is not None:
        hw = dataclasses.replace(hw, name="MI355X-no-tables", kernel_tables=None)
    assert tables_for(hw) is None
    return hw


def test_footing_roofline_only_without_tables_and_mostly_measured_on_h200():
    amd = _no_tables_amd()
    res = plan(DS, ["H200", amd], gpus=8, isl=ISL, osl=OSL,
               shapes=[{"tp": 8, "dp": 1, "ep": 8}], precision="low", **SMALL)
    recs = res.recommendations.set_index("hardware")
    assert recs.loc[amd.name, "footing"] == "roofline-only"
    assert recs.loc[amd.name, "measured_share"] == 0.0
    assert recs.loc[amd.name, "table_share"] == 0.0
    h = recs.loc["H200-SXM"]
    assert h["footing"] == "measured" and h["measured_share"] > 0.5
    # independent: the decode share recomputed from the engine's per-op sources
    ds = inf.evaluate(DS, "H200", detail="ops", tp=8, dp=1, ep=8,
                      weight_precision=h["weight_precision"], moe_precision=h["moe_precision"],
                      kv_precision=h["kv_precision"], dispatch_precision="fp8",
                      batch_size=float(h["batch_size"]), draft_depth=float(h["draft_depth"]),
                      prefill_batch_size=float(h["prefill_batch_size"]), prompt_len=ISL,
                      kv_len=ISL + OSL / 2, final_len=ISL + OSL)
    t, s = ds["decode_op_time_s"].values, ds["decode_op_source"].values
    ok = np.isfinite(t)
    share = t[ok][np.isin(s[ok], ["measured", "interpolated"])].sum() / t[ok].sum()
    assert math.isclose(h["decode_measured_share"], share, rel_tol=1e-9)
