"""Smoke check: every command on every bundled model x every bundled device.

    python validation/smoke_all_models.py [-o smoke.jsonl] [--models A,B] [--hardware X,Y]
                                          [--commands evaluate,bench,...] [--jobs 2]
    python validation/smoke_all_models.py --summary smoke.jsonl     # the matrix of a past run
    python validation/smoke_all_models.py --pairs pairs.json -o rerun.jsonl  # [[model, hw], ...]

Runs, in-process (the library for ``evaluate``; the click commands through click's test
runner for the rest, so the CLI's own error handling is exercised), at one deployment per
(model, device):

  evaluate    inf.evaluate at batch 1 and 64, context 8K
  roofline    one point, with and without --uncertainty
  bench       ISL 1024 / OSL 256, concurrency 4 and 64, with and without --uncertainty
  plan        --gpus 8 (the deployment's GPUs when it needs more), with and without --uncertainty
  max-batch   at the deployment's shape, 8K context
  sweep       a tiny grid: batch_size x kv_len x kv_precision x cache_hit_rate (x draft_depth
              where the model has an MTP module)
  simulate    a factory config (configs/factory.toml's workload, 200 requests) pointed at the
              model and device, with and without --uncertainty
  compare     the same config against its generic baseline (colocated, no levers), with and
              without --uncertainty

The deployment: the smallest power-of-two GPU count g whose share of the model's native
weights is at most WEIGHT_SHARE of the device's HBM (weights from evaluate at tp=1
on B200, which runs every precision); dense
models run tp=g, MoE models tp=g, ep=g up to one 8-GPU node and tp=8, dp=g/8, ep=g beyond.
A simple rule, not plan's choice: the point is that every path runs, not that it is optimal.
Where the device's default engine runs no EP or attention DP (SGLang on MI300X/MI325X), bench
retries the same GPUs as one TP group. A device whose file lists no rental price (A100, H20)
gets SMOKE_RENTAL_USD_PER_GPU_HOUR in plan and the factory configs; a device without FP8 gets
low_precision = false in the factory config; a short-context model (Llama-2) gets the workload
classes capped to its context.

Each run is recorded as one of
  pass      status 0 and every number finite, no throughput-like value zero or negative
            where the point fits
  refusal   status 2 with exactly one 'error: ...' line (a clean SpecError, e.g. does not fit)
  crash     an exception escaped (traceback) or any other status
  nonsense  status 0 but a NaN/inf, a negative value, or a zero throughput at a point that fits
with the detail (error line, exception and its innermost frame, or the offending key).
Results go to a JSONL file (one record per run); the summary prints counts per command.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

#: Share of HBM the deployment rule lets weights take (the rest: KV, activations, runtime).
WEIGHT_SHARE = 0.75
#: Device on which the deployment rule reads the model's weight bytes (it runs FP4/FP8/BF16).
WEIGHTS_DEVICE = "B200"
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64)
COMMANDS = ("evaluate", "roofline", "bench", "plan", "max-batch", "sweep", "simulate", "compare")
#: $/GPU-hour the smoke states for a device whose file lists no rental price (A100, H20), so
#: plan, simulate and compare run there instead of refusing for the price; a placeholder of
#: this check only (no figure of the project reads it), between H100's 1.3 and H200's 2.3.
SMOKE_RENTAL_USD_PER_GPU_HOUR = 2.0
#: Keys whose values may be negative by meaning (differences, margins, signed errors).
SIGNED = ("margin", "delta", "change", "saving", "diff", "error", "profit", "gain", "vs_",
          "relative", "improvement", "reduction", "_pct_of", "speedup", "loss", "skew", "slack",
          "headroom", "net_")
#: Keys that name a throughput: zero where the point fits is nonsense (goodput excepted: no
#: request within the SLO is an answer, e.g. BF16 DeepSeek-V3 on A100 at a 50 ms TPOT).
THROUGHPUT = ("throughput", "tokens_per_s", "tok_s", "tok/s", "interactivity")


# --------------------------------------------------------------------------------------------
# deployment
# --------------------------------------------------------------------------------------------

def deployment(model: str, hardware: str) -> dict:
    """The (tp, dp, ep) of the simple rule, with g and the weights it assumed."""
    import inference_factory as inf

    spec = inf.load_model(model)
    hw = inf.load_hardware(hardware)
    # weights at the model's own precisions do not depend on the device: read them on one
    # that runs every precision, so a device that cannot (FP8 on A100) refuses in each command
    ds = inf.evaluate(model, WEIGHTS_DEVICE, tp=1, batch_size=1, kv_len=1024, prompt_len=1024)
    weights = float(ds["weight_bytes_per_gpu"].values)
    hbm = float(hw.hbm_capacity_bytes)
    g = next((n for n in GPU_COUNTS if weights / n <= WEIGHT_SHARE * hbm), GPU_COUNTS[-1])
    if not spec.is_moe:
        shape = dict(tp=g, dp=1, ep=1)
    elif g <= 8:
        shape = dict(tp=g, dp=1, ep=g)
    else:
        shape = dict(tp=8, dp=g // 8, ep=g)
    return dict(gpus=g, weight_bytes=weights, moe=bool(spec.is_moe),
                mtp=bool(spec.n_mtp_modules), rental=bool(hw.price.get("rental_usd_per_gpu_hour")),
                fp8="fp8" in hw.dense_flop_per_s, **shape)


def shape_arg(d: dict) -> str:
    return f"tp={d['tp']},dp={d['dp']},ep={d['ep']}"


# --------------------------------------------------------------------------------------------
# judging outputs
# --------------------------------------------------------------------------------------------

def _infeasible(node: dict) -> bool:
    for k in ("fits", "meets_slo", "feasible"):
        if node.get(k) is False:
            return True
    for k in ("max_batch_size", "max_batch_size_meeting_slo"):
        if node.get(k) == 0:
            return True
    return False


def nonsense(obj, path="", infeasible=False) -> str | None:
    """The first offending leaf (path and value) of a JSON-like result, or None."""
    if isinstance(obj, dict):
        infeasible = infeasible or _infeasible(obj)
        for k, v in obj.items():
            bad = nonsense(v, f"{path}.{k}", infeasible)
            if bad:
                return bad
        return None
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            bad = nonsense(v, f"{path}[{i}]", infeasible)
            if bad:
                return bad
        return None
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        return None
    key = path.rsplit(".", 1)[-1].lower()
    if math.isnan(obj) or math.isinf(obj):
        if infeasible:
            return None
        return f"{path} = {obj}"
    if obj < 0 and not any(s in path.lower() for s in SIGNED):
        return f"{path} = {obj}"
    if obj == 0 and any(s in key for s in THROUGHPUT) and not infeasible \
            and not key.endswith(("_low", "_high")) and "goodput" not in key:
        return f"{path} = 0"
    return None


def judge_cli(result) -> tuple[str, str]:
    """(status, detail) of a click test-runner result whose stdout is JSON (or a table)."""
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        tb = traceback.extract_tb(result.exc_info[2])
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name}" if tb else "?"
        return "crash", f"{type(exc).__name__}: {str(exc)[:300]} [{where}]"
    err = result.stderr
    if result.exit_code == 2:
        lines = [ln for ln in err.splitlines() if not ln.startswith("warning:")]
        if len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err:
            return "refusal", lines[0][7:300]
        return "crash", f"status 2 but stderr {err[:300]!r}"
    if result.exit_code != 0:
        return "crash", f"status {result.exit_code}: {err[:300]!r}"
    out = result.stdout
    try:
        data = json.loads(out)
    except ValueError:
        return "pass", "(not JSON)"
    bad = nonsense(data)
    return ("nonsense", bad) if bad else ("pass", "")


def judge_dataset(ds) -> tuple[str, str]:
    import numpy as np

    fits = np.asarray(ds["fits"].values, dtype=bool)
    for name in ("decode_tokens_per_s_per_gpu", "prefill_tokens_per_s_per_gpu", "tpot_s", "ttft_s"):
        v = np.asarray(ds[name].values, dtype=float)
        bad = ~np.isfinite(v) | (v <= 0)
        if np.any(bad & fits):
            return "nonsense", f"{name} = {v[bad & fits].ravel()[:3].tolist()} where it fits"
    if not fits.any():
        return "refusal", "evaluate: no point fits (fits False everywhere)"
    return "pass", ""


# --------------------------------------------------------------------------------------------
# the runs of one (model, device)
# --------------------------------------------------------------------------------------------

PRICES = None


def _price_for(model: str) -> str:
    global PRICES
    if PRICES is None:
        from inference_factory.specs.prices import load_prices
        PRICES = load_prices()
    for pid, p in PRICES.items():
        if p.model == model:
            return pid
    return "deepseek-chat-2025-02"


def factory_config(tmp: Path, model: str, hardware: str, d: dict, max_context: int) -> Path:
    """A scenario config: configs/factory.toml's workload and levers, 200 requests, pointed
    at the model and device with the deployment's shape on both sides; its baseline is the
    same shape colocated with no levers."""
    import tomllib

    src = tomllib.loads((REPO / "configs" / "factory.toml").read_text())
    cap_in = max(256, min(32768, max_context // 2))
    cap_out = max(128, min(8192, max_context // 4))
    classes = []
    for c in src["workload"]["class"]:
        c = dict(c)
        c["max_prompt_tokens"] = min(c["max_prompt_tokens"], cap_in)
        c["max_output_tokens"] = min(c["max_output_tokens"], cap_out)
        c["system_prompt_tokens"] = min(c["system_prompt_tokens"], cap_in // 4)
        # a short-context model (Llama-2: 4K) keeps each median below its cap
        c["prompt_tokens_median"] = min(c["prompt_tokens_median"], cap_in // 4)
        c["output_tokens_median"] = min(c["output_tokens_median"], cap_out // 2)
        classes.append(c)
    shape = f"tp = {d['tp']}\ndp = {d['dp']}\nep = {d['ep']}\nunit_gpus = {d['gpus']}\n"
    lines = [
        f'name = "smoke"', f'description = "smoke {model} on {hardware}"',
        f'baseline = "smoke_baseline.toml"', "",
        "[model]", f'name = "{model}"', f'price = "{_price_for(model)}"', "",
        "[workload]", "n_requests = 200", "arrival_rate_per_s = 20.0",
        "diurnal_amplitude = 0.4", "seed = 20250301", ""]
    for c in classes:
        lines.append("[[workload.class]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in c.items()]
        lines.append("")
    lines += ["[prefill]", f'hardware = "{hardware}"', shape, "[decode]",
              f'hardware = "{hardware}"', shape + "max_draft_depth = 3\n",
              "[levers]", "continuous_batching = true", "pd_split = true",
              "prefix_cache = true", 'cache_tiers = ["hbm", "dram", "nvme"]',
              "hbm_cache_frac = 0.1", "speculative = true",
              f"expert_balancing = {'true' if d['moe'] else 'false'}",
              f"redundant_experts = {d['ep'] if d['moe'] else 0}",
              f"low_precision = {'true' if d['fp8'] else 'false'}", "overlap = true", "",
              "[slo]", "ttft_s = 5.0", "tpot_s = 0.05", "",
              "[economics]", 'cost_basis = "rental"', "pue = 1.3", "usd_per_kwh = 0.08"]
    if not d["rental"]:
        lines.append(f"rental_usd_per_gpu_hour = {SMOKE_RENTAL_USD_PER_GPU_HOUR}")
    lines.append("")
    cfg = tmp / "smoke.toml"
    cfg.write_text("\n".join(lines))
    base = [f'extends = "smoke.toml"', 'name = "smoke-baseline"',
            'description = "generic serving"', "",
            "[prefill]", f'hardware = "{hardware}"', shape, "[decode]", f'hardware = "{hardware}"',
            shape, "[levers]", "continuous_batching = true", "pd_split = false",
            "prefix_cache = false", "speculative = false", "expert_balancing = false",
            "low_precision = false", "overlap = false", ""]
    (tmp / "smoke_baseline.toml").write_text("\n".join(base))
    return cfg


def runs(model: str, hardware: str, d: dict, commands, tmp: Path, max_context: int):
    """(command, variant, argv or callable) of every run of the pair."""
    p = shape_arg(d)
    out = []
    if "roofline" in commands:
        base = ["roofline", "-m", model, "-H", hardware, "--tp", str(d["tp"]), "--dp",
                str(d["dp"]), "--ep", str(d["ep"]), "--batch-size", "16", "--kv-len", "8192",
                "--prompt-len", "8192", "--json"]
        out += [("roofline", "", base), ("roofline", "uncertainty", base + ["--uncertainty"])]
    if "bench" in commands:
        base = ["bench", "-m", model, "-H", hardware, "-p", p, "--isl", "1024", "--osl", "256",
                "-c", "4,64", "--json"]
        out += [("bench", "", base), ("bench", "uncertainty", base + ["--uncertainty"])]
    if "plan" in commands:
        base = ["plan", "-m", model, "-H", hardware, "--gpus", str(max(8, d["gpus"])),
                "--isl", "1024", "--osl", "256", "--json"]
        if not d["rental"]:
            base += ["--rental-usd-per-gpu-hour", str(SMOKE_RENTAL_USD_PER_GPU_HOUR)]
        out += [("plan", "", base), ("plan", "uncertainty", base + ["--uncertainty"])]
    if "max-batch" in commands:
        out.append(("max-batch", "", ["max-batch", "-m", model, "-H", hardware,
                                      "-a", f"tp={d['tp']}", "-a", f"dp={d['dp']}",
                                      "-a", f"ep={d['ep']}", "-a", "kv_len=8192",
                                      "--tpot", "100ms", "--json"]))
    if "sweep" in commands:
        out.append(("sweep", "", ["sweep", "-m", model, "-H", hardware,
                                  "--set", f"tp={d['tp']}", "--set", f"dp={d['dp']}",
                                  "--set", f"ep={d['ep']}", "-a", "batch_size=1,64",
                                  "-a", "kv_len=1024,32768", "-a", "kv_precision=bf16,fp8",
                                  "-a", "cache_hit_rate=0,0.5", "-o", str(tmp / "sweep.csv")]
                   + (["-a", "draft_depth=0,2"] if d["mtp"] else [])))
    if "simulate" in commands or "compare" in commands:
        cfg = str(factory_config(tmp, model, hardware, d, max_context))
        if "simulate" in commands:
            out += [("simulate", "", ["simulate", "-c", cfg, "--json"]),
                    ("simulate", "uncertainty", ["simulate", "-c", cfg, "--json",
                                                 "--uncertainty"])]
        if "compare" in commands:
            out += [("compare", "", ["compare", "-c", cfg, "--json"]),
                    ("compare", "uncertainty", ["compare", "-c", cfg, "--json",
                                                "--no-attribution", "--uncertainty"])]
    return out


def check_sweep_file(path: Path) -> tuple[str, str] | None:
    import pandas as pd

    if not path.exists():
        return "crash", "sweep wrote no file"
    df = pd.read_csv(path)
    if len(df) == 0:
        return "nonsense", "sweep wrote no rows"
    fits = df["fits"].astype(bool) if "fits" in df else True
    for col in ("decode_tokens_per_s_per_gpu", "prefill_tokens_per_s_per_gpu"):
        if col in df:
            v = df[col].astype(float)
            bad = (~v.apply(math.isfinite) | (v <= 0)) & fits
            if bad.any():
                return "nonsense", f"{col} = {v[bad].head(3).tolist()} where it fits"
    return None


def run_pair(model: str, hardware: str, commands) -> list[dict]:
    import warnings

    from click.testing import CliRunner

    import inference_factory as inf
    from inference_factory.cli.main import cli

    warnings.simplefilter("ignore")
    records = []

    def rec(command, variant, status, detail, t0, argv=None):
        records.append(dict(model=model, hardware=hardware, command=command, variant=variant,
                            status=status, detail=detail, seconds=round(time.perf_counter() - t0, 2),
                            argv=argv))

    t0 = time.perf_counter()
    try:
        d = deployment(model, hardware)
    except Exception as exc:  # noqa: BLE001 -- a smoke check records, never stops
        rec("deployment", "", "crash", f"{type(exc).__name__}: {exc}", t0)
        return records
    max_context = int(inf.load_model(model).max_position_embeddings or 32768)
    if "evaluate" in commands:
        t0 = time.perf_counter()
        try:
            ds = inf.evaluate(model, hardware, tp=d["tp"], dp=d["dp"], ep=d["ep"],
                              batch_size=[1, 64], kv_len=8192, prompt_len=8192)
            status, detail = judge_dataset(ds)
        except inf.SpecError as exc:
            status, detail = "refusal", str(exc).splitlines()[0][:300]
        except Exception as exc:  # noqa: BLE001
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            status, detail = "crash", (f"{type(exc).__name__}: {str(exc)[:300]} "
                                       f"[{Path(tb.filename).name}:{tb.lineno} in {tb.name}]")
        rec("evaluate", "", status, detail, t0, argv=dict(d))
    runner = CliRunner()
    with tempfile.TemporaryDirectory(prefix="smoke_") as td:
        tmp = Path(td)
        for command, variant, argv in runs(model, hardware, d, commands, tmp, max_context):
            t0 = time.perf_counter()
            result = runner.invoke(cli, argv, catch_exceptions=True)
            status, detail = judge_cli(result)
            if command == "bench" and status == "refusal" and "does not run" in detail:
                # the device's default engine runs no EP or no attention DP (SGLang on
                # MI300X/MI325X): the same GPUs as one TP group, experts split by TP, as that
                # engine's recipes run them
                flat = dict(d, tp=d["tp"] * d["dp"], dp=1, ep=1)
                argv = [a if a != shape_arg(d) else shape_arg(flat) for a in argv]
                result = runner.invoke(cli, argv, catch_exceptions=True)
                status, detail = judge_cli(result)
            if command == "sweep" and status == "pass":
                status, detail = check_sweep_file(tmp / "sweep.csv") or (status, detail)
            rec(command, variant, status, detail, t0, argv=argv)
    return records


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------

def _worker(args):
    model, hardware, commands = args
    try:
        return run_pair(model, hardware, commands)
    except Exception as exc:  # noqa: BLE001
        return [dict(model=model, hardware=hardware, command="driver", variant="",
                     status="crash", detail=f"{type(exc).__name__}: {exc}", seconds=0)]


def _short(detail: str) -> str:
    """A detail without the run's temporary folder and the repository's path."""
    import re

    return re.sub(r"/tmp/smoke_[^/]+/", "", detail).replace(str(REPO) + "/", "")


def summary(records: list[dict]) -> str:
    records = [dict(r, detail=_short(r["detail"])) for r in records]
    counts = defaultdict(Counter)
    for r in records:
        key = r["command"] + (f" --{r['variant']}" if r["variant"] else "")
        counts[key][r["status"]] += 1
    cols = ("pass", "refusal", "crash", "nonsense")
    lines = [f"{'command':<26}" + "".join(f"{c:>10}" for c in cols)]
    for key in sorted(counts):
        lines.append(f"{key:<26}" + "".join(f"{counts[key][c]:>10}" for c in cols))
    tot = Counter()
    for c in counts.values():
        tot.update(c)
    lines.append(f"{'total':<26}" + "".join(f"{tot[c]:>10}" for c in cols))
    problems = Counter((r["command"], r["status"], r["detail"][:160]) for r in records
                       if r["status"] in ("crash", "nonsense"))
    if problems:
        lines.append("\ncrashes and nonsense (command, status, detail: count)")
        for (cmd, st, det), n in problems.most_common():
            lines.append(f"  {cmd} {st}: {det}  x{n}")
    refusals = Counter((r["command"], r["detail"][:120]) for r in records
                       if r["status"] == "refusal")
    if refusals:
        lines.append("\nrefusals (command, line: count)")
        for (cmd, det), n in refusals.most_common():
            lines.append(f"  {cmd}: {det}  x{n}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="smoke_all_models.jsonl")
    ap.add_argument("--models", default="")
    ap.add_argument("--hardware", default="")
    ap.add_argument("--commands", default=",".join(COMMANDS))
    ap.add_argument("--pairs", metavar="FILE.json",
                    help="run only these [model, hardware] pairs (a JSON list), e.g. a rerun")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--summary", metavar="FILE.jsonl", help="print the matrix of a past run")
    a = ap.parse_args()
    if a.summary:
        print(summary([json.loads(ln) for ln in Path(a.summary).read_text().splitlines() if ln]))
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import inference_factory as inf

    models = a.models.split(",") if a.models else list(inf.list_models())
    hardware = a.hardware.split(",") if a.hardware else list(inf.list_hardware())
    commands = tuple(c for c in a.commands.split(",") if c)
    pairs = [(m, h, commands) for m in models for h in hardware]
    if a.pairs:
        chosen = {tuple(p) for p in json.loads(Path(a.pairs).read_text())}
        pairs = [p for p in pairs if p[:2] in chosen]
    records = []
    t0 = time.perf_counter()
    out = Path(a.output)
    with out.open("w") as fh:
        def take(batch):
            for r in batch:
                fh.write(json.dumps(r) + "\n")
            fh.flush()
            records.extend(batch)
            bad = [r for r in batch if r["status"] in ("crash", "nonsense")]
            print(f"[{time.perf_counter() - t0:7.0f} s] {batch[0]['model']} on "
                  f"{batch[0]['hardware']}: {len(batch)} runs, {len(bad)} bad", flush=True)
        if a.jobs > 1:
            import multiprocessing as mp
            with mp.get_context("fork").Pool(a.jobs) as pool:
                for batch in pool.imap_unordered(_worker, pairs):
                    take(batch)
        else:
            for pair in pairs:
                take(_worker(pair))
    print(summary(records))


if __name__ == "__main__":
    main()
