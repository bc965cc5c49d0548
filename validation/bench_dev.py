"""Predicted vs published for the InferenceX development points (``inferencex_dev.csv``: B200,
DeepSeek-R1 NVFP4 8k/1k, TP4/EP4, SGLang 0.5.5 and 0.5.6, concurrency 4-128).

    python validation/bench_dev.py [PATH_TO_inferencex_dev.csv] [--plot FILE.png]

A check, never a fit: nothing in ``bench`` reads these figures. The CSV is the development
table of the project's reference set (default: ``validation/inferencex_dev.csv``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from inference_factory.analysis.bench import bench

HERE = Path(__file__).resolve().parent


def main(path: str | Path = HERE / "inferencex_dev.csv") -> pd.DataFrame:
    dev = pd.read_csv(path)
    rows = []
    for (fw, model, hw, tp, ep, dpa, wp, mp, kvp, isl, osl, rr), g in dev.groupby(
            ["framework", "model", "hardware", "tp", "ep", "dp_attention", "weight_precision",
             "moe_precision", "kv_precision", "isl", "osl", "range_ratio"]):
        # dp_attention is the attention-DP degree (1: attention TP over the instance)
        shape = (dict(tp=int(tp) // int(dpa), dp=int(dpa), ep=int(ep)) if dpa > 1
                 else dict(tp=int(tp), ep=int(ep)))
        ds = bench(model, hw, **shape, weight_precision=wp, moe_precision=mp, kv_precision=kvp,
                   isl=int(isl), osl=int(osl), range_ratio=float(rr),
                   concurrency=sorted(g["concurrency"]))
        p = ds.to_dataframe()
        for _, r in g.iterrows():
            q = p.loc[r["concurrency"]]
            rows.append({"framework": fw, "concurrency": int(r["concurrency"]),
                         "tput_pred": q["total_token_throughput_per_gpu"],
                         "tput_meas": r["total_token_throughput_per_gpu"],
                         "tput_ln": math.log(q["total_token_throughput_per_gpu"]
                                             / r["total_token_throughput_per_gpu"]),
                         "intvty_pred": q["interactivity"],
                         "intvty_meas": r["interactivity_tok_s_per_user"],
                         "intvty_ln": math.log(q["interactivity"]
                                               / r["interactivity_tok_s_per_user"]),
                         "tpot_pred_ms": q["median_tpot_ms"], "tpot_meas_ms": r["median_tpot_ms"],
                         "step_ms": q["decode_step_ms"], "ttft_pred_ms": q["median_ttft_ms"],
                         "stall": q["decode_stall_frac"]})
    return pd.DataFrame(rows)


def plot(path: str, csv: str | Path = HERE / "inferencex_dev.csv") -> None:
    """The predicted curves of each engine version's deployment with the published points."""
    from inference_factory.output.bench_plot import plot_bench

    dev = pd.read_csv(csv)
    g = dev[dev["framework"] == dev["framework"].iloc[-1]]
    r = g.iloc[0]
    ds = bench(r["model"], r["hardware"], tp=int(r["tp"]), ep=int(r["ep"]),
               weight_precision=r["weight_precision"], moe_precision=r["moe_precision"],
               kv_precision=r["kv_precision"], isl=int(r["isl"]), osl=int(r["osl"]),
               range_ratio=float(r["range_ratio"]), concurrency=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    measured = dev.rename(columns={"concurrency": "max_concurrency",
                                   "interactivity_tok_s_per_user": "interactivity"})
    measured["median_ttft_ms"] = float("nan")          # the published table has no TTFT
    plot_bench([(f"predicted, {r['hardware']} tp{int(r['tp'])} ep{int(r['ep'])}", ds)], path,
               measured=measured[["max_concurrency", "interactivity", "median_ttft_ms",
                                  "total_token_throughput_per_gpu", "median_tpot_ms"]])


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--plot" in args:
        i = args.index("--plot")
        plot(args[i + 1])
        del args[i:i + 2]
    out = main(*args)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(out.round(3).to_string(index=False))
        for fw, g in out.groupby("framework"):
            print(f"{fw}: median |ln| throughput {g.tput_ln.abs().median():.3f} (worst "
                  f"{g.tput_ln.abs().max():.3f}), interactivity {g.intvty_ln.abs().median():.3f} "
                  f"(worst {g.intvty_ln.abs().max():.3f})")
