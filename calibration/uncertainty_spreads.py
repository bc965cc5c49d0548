"""Measure the spreads of configs/uncertainty.toml and write the file (with provenance).

    python calibration/uncertainty_spreads.py            # components + conformal term
    python calibration/uncertainty_spreads.py --components-only

1. ``[measured.<table folder>.<family>]``: the leave-one-out residuals of every measured
   table (``analysis.validation.bands.leave_one_out_residuals``: each measured point predicted from its
   two neighbours along each axis, itself left out), their robust sigma (median |r| / 0.6745).
   COMPONENT measurements: NVIDIA AIConfigurator 0.12.0 and AMD AITER tables.
2. ``[roofline.<class>]``: how wrong the realistic roofline is where a table is absent,
   measured by removing the tables on the NVIDIA devices that have them: ln(op time with
   realism="roofline" / op time from the tables), per op, over a fixed grid of models,
   layouts, batches and contexts, for every op the tables cover. sigma = root mean square of
   ln (the bias is not corrected: the point is not moved, so it counts as spread).
3. ``[conformal.*]``: the model-structure term, split-conformal on the development cases
   (validation/dev_cases.csv): the 80 % conformal quantile of how far each published figure
   lies outside its component band, separately for measured and roofline-only devices.
   A CHECK set used for one widening factor per group, never for the point.

Nothing here is fitted to a serving figure except step 3's widening, which is stated as such.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import inference_factory as inf  # noqa: E402
from inference_factory.analysis.validation import bands  # noqa: E402
from inference_factory.engine import measured as M  # noqa: E402
from inference_factory.specs import data_dir  # noqa: E402

OUT = ROOT / "configs" / "uncertainty.toml"
NVIDIA = ("H100-SXM", "H200-SXM", "B200", "GB200", "B300", "GB300", "A100-80GB-SXM")
#: the grid of step 2: (model, layout and precisions); each on every NVIDIA device
CONFIGS = (
    ("Llama-3.1-8B", dict(tp=1)),
    ("Llama-3.1-70B", dict(tp=4, weight_precision="fp8")),
    ("Llama-3.1-70B", dict(tp=8)),
    ("Mixtral-8x7B", dict(tp=2, ep=2)),
    ("Qwen3-30B-A3B", dict(tp=1)),
    ("DeepSeek-V3", dict(tp=1, dp=8, ep=8, weight_precision="fp8", moe_precision="fp8")),
    ("DeepSeek-V3", dict(tp=8, weight_precision="fp8", moe_precision="fp8")),
)
AXES = dict(batch_size=[1, 8, 64, 256], kv_len=[1024, 8192], prompt_len=[1024, 8192])


def op_class(name: str) -> str:
    """Roofline class of an op by name (engine.uncertainty.op_class on the Op)."""
    if name == "attention":
        return "attention"
    if name == "moe":
        return "moe"
    if name in ("dispatch", "combine"):
        return "a2a"
    if name.startswith("allreduce"):
        return "allreduce"
    if name == "other_kernels":
        return "other"
    return "gemm"


def measured_spreads():
    out = {}
    root = data_dir("hardware") / "measured"
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        tabs = M.DeviceTables(folder, inf.load_hardware(folder.name))
        for name, fam in M.FAMILIES.items():
            if not tabs.has(name):
                continue
            df = tabs.rows(name).to_frame()
            if not len(df):
                continue
            r = bands.leave_one_out_residuals(df, fam)
            if r.size < 5:
                continue
            out.setdefault(folder.name, {})[name] = {
                "sigma_ln": bands.robust_sigma_ln(r), "median_abs_ln": float(np.median(np.abs(r))),
                "n": int(r.size)}
    return out


def roofline_spreads():
    logs: dict[str, list] = {}
    for hw in NVIDIA:
        for model, kw in CONFIGS:
            try:
                meas = inf.evaluate(model, hw, detail="ops", **AXES, **kw)
                roof = inf.evaluate(model, hw, detail="ops", realism="roofline", **AXES, **kw)
            except inf.SpecError as exc:
                print(f"skip {model} {kw} on {hw}: {exc}", file=sys.stderr)
                continue
            for phase in ("decode", "prefill"):
                src = meas[f"{phase}_op_source"]
                t_m, t_r = meas[f"{phase}_op_time_s"], roof[f"{phase}_op_time_s"]
                total = np.asarray(t_m.sum("op").values, dtype=float)
                for op in meas["op"].values:
                    s = np.asarray(src.sel(op=op).values)
                    tm = np.asarray(t_m.sel(op=op).values, dtype=float)
                    tr = np.asarray(t_r.sel(op=op).values, dtype=float)
                    tm, tr, tot = np.broadcast_arrays(tm, tr, total)
                    s = np.broadcast_to(s, tm.shape)
                    ok = (s != "roofline") & (s != "") & (tm > 0) & (tr > 0)
                    ok &= np.isfinite(tm) & np.isfinite(tr)
                    if ok.any():
                        logs.setdefault(op_class(str(op)), []).append(
                            (np.log(tr[ok] / tm[ok]).ravel(), (tm[ok] / tot[ok]).ravel()))
    out = {}
    for cls, parts in sorted(logs.items()):
        x = np.concatenate([p[0] for p in parts])
        w = np.concatenate([p[1] for p in parts])
        # weighted by the op's share of its pass time: a 2-us router at 5x matters less
        # to a step than the MoE GEMM at 1.3x
        out[cls] = {"sigma_ln": float(np.sqrt(np.sum(w * x ** 2) / np.sum(w))),
                    "median_abs_ln": float(np.median(np.abs(x))),
                    "mean_ln": float(np.sum(w * x) / np.sum(w)), "n": int(x.size),
                    "rms_unweighted": float(np.sqrt(np.mean(x ** 2)))}
    return out


ASSUMPTIONS = '''
# ---- labelled assumption ranges: drawn uniformly where a call leaves the value at its default
[assumptions.expert_skew]
# 0 = uniform routing (the balanced end); 1.0 = the exponent of AIConfigurator's default
# DeepSeek-V3 routing generator (power_law_1.01, hardware/measured/H200-SXM/moe_wideep.csv).
# The default 0.47 is a loose fit between them (configs/realism.toml [experts], rms ln 0.42).
low = 0.0
high = 1.0
source = "realism.toml [experts]: uniform routing to AIConfigurator power_law_1.01"
[assumptions.context_cv]
# 0 = a scheduler that balances KV across DP ranks; 1.0 = exponential lengths assigned at
# random (the default, the pessimistic end; realism.toml [dp_attention], ASSUMPTION).
low = 0.0
high = 1.0
source = "realism.toml [dp_attention]: balanced (0) to random exponential (1.0), ASSUMPTION"
[assumptions.acceptance_rate]
# DeepSeek-V3 MTP second-token acceptance 85-90 % (DS_V3_TR 5.4.3, serving_facts.md).
# ASSUMPTION: the range holds for other drafts; drawn only where a call drafts and gives no
# acceptance_rate (the engine default 0.8 then lies below the range: the band is above it).
low = 0.85
high = 0.90
source = "DS_V3_TR 5.4.3: 85-90 % second-token acceptance (serving_facts.md)"
[assumptions.runtime_reserve_frac]
# ASSUMPTION: half to 1.5x the 10 % default (vLLM gpu_memory_utilization = 0.9); a software
# setting, not a measurement. Moves memory, max_batch_size and fits only.
low = 0.05
high = 0.15
source = "ASSUMPTION: 0.5x-1.5x realism.toml [memory] runtime_reserve_frac"
[assumptions.overlap_comm_sm_frac]
# SMs taken by overlapped prefill communication: DeepEP V2's 6-12 SMs of 132 (DEEPEP_V2,
# kernels.csv) to DeepSeek-V3's 20 of 132 (DS_V3_TR 3.2.2; the default, the high end).
low = 0.0455
high = 0.1515
source = "DEEPEP_V2 6 of 132 SMs to DS_V3_TR 3.2.2 20 of 132 SMs (kernels.csv)"
'''


def write(measured, roofline, conformal, bench_conformal=None, note=""):
    today = datetime.date.today().isoformat()
    lines = [
        "# Sources of prediction uncertainty (docs/MODEL.md section 13). GENERATED by",
        "# calibration/uncertainty_spreads.py " + today + "; edit the script, not this file",
        "# (the assumption ranges are written there with their sources).",
        "# Spreads are standard deviations of ln(time): a draw multiplies the time of every op",
        "# of one family on one device by exp(sigma z), z ~ N(0, 1), one z per family per",
        "# device per draw (correlated across the ops of a family; families independent).",
        "",
        "[sampling]",
        "draws = 200",
        "seed = 0",
        "levels = 8",
        "quantiles = [0.1, 0.5, 0.9]",
        "",
        "# ---- measured tables: leave-one-out residuals (COMPONENT measurements:",
        "# AIConfigurator 0.12.0 NVIDIA tables, AITER AMD tables); sigma = median|r| / 0.6745",
    ]
    for dev, fams in sorted(measured.items()):
        for fam, v in sorted(fams.items()):
            lines += [f'[measured."{dev}".{fam}]',
                      f"sigma_ln = {v['sigma_ln']:.4f}",
                      f"median_abs_ln = {v['median_abs_ln']:.4f}", f"n = {v['n']}"]
    allm = sorted(v["sigma_ln"] for f in measured.values() for v in f.values())
    q = float(np.quantile(allm, 0.9))
    lines += ["", "# a measured family without its own residuals (too few rows): the 90th",
              "# percentile of the families above (pessimistic)",
              "[measured_default]", f"sigma_ln = {q:.4f}",
              f"median_abs_ln = {q * bands.NORMAL_MAD:.4f}", f"n = {len(allm)}", "",
              "# ---- the realistic roofline where a table is absent: ln(roofline / table) per op on",
              "# " + ", ".join(NVIDIA) + ",",
              "# models " + ", ".join(sorted({m for m, _ in CONFIGS})) + "; batch 1-256,",
              "# KV / prompt 1k-8k. sigma = rms ln (bias included), each op weighted by its share",
              "# of its pass's measured time; mean_ln (weighted) reported only.",
              "# ASSUMPTION: the roofline errs on AMD and H20 as on NVIDIA (narrow if worse)."]
    for cls, v in sorted(roofline.items()):
        lines += [f"[roofline.{cls}]", f"sigma_ln = {v['sigma_ln']:.4f}",
                  f"median_abs_ln = {v['median_abs_ln']:.4f}", f"mean_ln = {v['mean_ln']:.4f}",
                  f"n = {v['n']}", f"# unweighted rms ln {v['rms_unweighted']:.3f}"]
    lines += ASSUMPTIONS.splitlines()
    lines += ["", "# ---- model-structure term: widens the component band each side by exp(widen_ln);",
              "# calibrated on the development cases (a check set), never moves a point. " + note]
    for group, v in conformal.items():
        lines += [f"[conformal.{group}]", f"widen_ln = {v['widen_ln']:.4f}",
                  f"n_cases = {v['n_cases']}", f'method = "{v["method"]}"']
    if bench_conformal is not None:
        v = bench_conformal
        lines += ["[bench_conformal]", f"widen_ln = {v['widen_ln']:.4f}",
                  f"n_cases = {v['n_cases']}", f'method = "{v["method"]}"']
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


def conformal_terms():
    from inference_factory.analysis import validation

    res = validation.predict(validation.load_cases(ROOT / "validation" / "dev_cases.csv"),
                             uncertainty="components")
    out = {}
    for group in ("measured", "roofline_only"):
        g = res[res["device_class"] == group]
        s = bands.outside_ln(g["published"], g["component_low"], g["component_high"])
        w = bands.conformal_widen_ln(s)
        small = len(g) < math.ceil(1 / (1 - 0.8)) - 1
        out[group] = {"widen_ln": w, "n_cases": int(len(g)), "method": (
            "split-conformal 80 %: ceil((n+1) 0.8)-th smallest ln distance of a published "
            "figure outside its component band, validation/dev_cases.csv"
            + (" (fewer cases than a finite 80 % quantile needs: the largest distance)"
               if small else ""))}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--components-only", action="store_true")
    a = ap.parse_args(argv)
    measured, roofline = measured_spreads(), roofline_spreads()
    zero = {g: {"widen_ln": 0.0, "n_cases": 0, "method": "not yet calibrated"}
            for g in ("measured", "roofline_only")}
    write(measured, roofline, zero)
    if not a.components_only:
        write(measured, roofline, conformal_terms())


if __name__ == "__main__":
    main()
