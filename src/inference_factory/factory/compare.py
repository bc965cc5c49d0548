"""Baseline versus factory on one trace, with a per-lever attribution."""

from __future__ import annotations

import json
import math
from typing import Any

from .config import LEVERS, FactoryConfig
from .simulate import simulate, side_config, with_config_class_params
from .workload import Trace, generate_trace, load_trace

#: rows of the side-by-side table: (metric key, label, format)
HEADLINE = [
    ("decode_tokens_per_s_per_gpu", "decode tokens/s per GPU", "{:,.0f}"),
    ("prefill_tokens_per_s_per_gpu", "prefill tokens/s per GPU (input)", "{:,.0f}"),
    ("cache_hit_rate", "cache hit rate (input tokens)", "{:.1%}"),
    ("speculative_tokens_per_pass", "speculative tokens per pass", "{:.2f}"),
    ("draft_time_share", "draft share of decode step", "{:.1%}"),
    ("expert_efficiency", "expert efficiency (mean/max rank)", "{:.1%}"),
    ("decode_batch_per_gpu", "decode batch per GPU", "{:,.1f}"),
    ("decode_occupancy", "decode occupancy", "{:.1%}"),
    ("ttft_p50_s", "TTFT p50 (s)", "{:.3f}"),
    ("ttft_p99_s", "TTFT p99 (s)", "{:.3f}"),
    ("tpot_p50_s", "TPOT p50 (ms)", "ms"),
    ("tpot_p99_s", "TPOT p99 (ms)", "ms"),
    ("goodput_frac", "goodput (output tokens within SLO)", "{:.1%}"),
    ("required_gpu_hours", "required GPU-hours (trace)", "{:,.1f}"),
    ("gpu_seconds_vs_baseline", "GPU-seconds vs baseline", "{:.1%}"),
    ("gpus_avg", "GPUs, average over the day", "{:,.0f}"),
    ("gpus_peak", "GPUs, peak", "{:,.0f}"),
    ("revenue_usd_per_day", "revenue $/day", "{:,.0f}"),
    ("cost_usd_per_day", "cost $/day", "{:,.0f}"),
    ("gross_margin", "gross margin", "{:.1%}"),
    ("cost_profit_margin", "cost-profit margin", "{:.0%}"),
    ("usd_per_mtok_output", "cost $ per M output tokens", "{:.3f}"),
    ("payback_months", "GPU payback (months)", "{:.1f}"),
    ("output_tokens_per_s_per_mw", "output tokens/s per MW", "{:,.0f}"),
]
ATTRIBUTION_METRICS = ("decode_tokens_per_s_per_gpu", "gpu_seconds", "usd_per_mtok_output",
                       "gross_margin")


def trace_summary(trace: Trace) -> dict:
    """JSON-ready totals of a trace, with per-class shares."""
    df = trace.summary()
    return {
        "source": trace.source, "n_requests": int(trace.n_requests),
        "duration_s": float(trace.duration_s),
        "input_tokens": int(trace.input_tokens.sum()), "output_tokens": int(trace.output_tokens.sum()),
        "reusable_prefix_frac": float(df.loc["all", "chain_tokens_frac"]),
        "classes": {name: {"request_share": float(df.loc[name, "request_share_frac"]),
                           "mean_input_tokens": float(df.loc[name, "mean_input_tokens"]),
                           "mean_output_tokens": float(df.loc[name, "mean_output_tokens"])}
                    for name in trace.class_names},
    }


def _trace_for(cfg: FactoryConfig) -> Trace:
    trace = load_trace(cfg.trace_path) if cfg.trace_path else generate_trace(cfg.workload)
    return with_config_class_params(trace, cfg)


def compare(cfg: FactoryConfig, *, attribution: bool = True, trace: Trace | None = None) -> dict:
    """Run baseline and factory on the same trace; optionally switch each lever off the
    factory and on the baseline, one at a time."""
    base_cfg = side_config(cfg, "baseline")
    trace = trace if trace is not None else _trace_for(cfg)
    memo: dict = {}
    base = simulate(base_cfg, trace, name="baseline", cache_memo=memo)
    fact = simulate(cfg, trace, name="factory", cache_memo=memo)
    for side in (base, fact):
        side.metrics["gpu_seconds_vs_baseline"] = side.metrics["gpu_seconds"] / base.metrics["gpu_seconds"]
    out: dict[str, Any] = {
        "config": cfg.path, "model": cfg.model, "price": cfg.price.id,
        "trace": trace_summary(trace),
        "baseline": base.metrics, "factory": fact.metrics,
    }
    if attribution:
        rows = []
        for lever in LEVERS:
            if getattr(cfg.levers, lever) == getattr(base_cfg.levers, lever):
                continue
            # cache capacity is infrastructure: held at the factory's while another lever is
            # switched off it; the baseline + prefix_cache run simulates its own
            off = simulate(cfg.with_levers(cfg.levers.switched(**{lever: False})), trace,
                           name=f"factory - {lever}", cache_memo=memo, cache_result=fact.cache)
            on = simulate(base_cfg.with_levers(base_cfg.levers.switched(**{lever: True})), trace,
                          name=f"baseline + {lever}", cache_memo=memo)
            rows.append({
                "lever": lever,
                "factory_without": {k: off.metrics[k] for k in ATTRIBUTION_METRICS},
                "baseline_with": {k: on.metrics[k] for k in ATTRIBUTION_METRICS},
            })
        out["attribution"] = rows
    return out


def simulate_one(cfg: FactoryConfig) -> dict:
    side = simulate(cfg, _trace_for(cfg), name=cfg.name)
    return {"config": cfg.path, "model": cfg.model, "price": cfg.price.id,
            "scenario": side.metrics}


def _clean(x):
    if isinstance(x, float):
        return None if not math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item"):
        return _clean(x.item())
    return x


def to_json(result: dict) -> str:
    """Deterministic JSON (no timestamps; non-finite numbers as null)."""
    return json.dumps(_clean(result), indent=2, sort_keys=False)


def _fmt(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if fmt == "ms":
        return f"{value * 1e3:,.1f}"
    return fmt.format(value)


def format_compare(result: dict) -> str:
    b, f = result["baseline"], result["factory"]
    t = result["trace"]
    lines = [f"{result['model']}  price {result['price']}  config {result['config']}",
             f"trace: {t['n_requests']:,} requests, {t['input_tokens']:,} input / "
             f"{t['output_tokens']:,} output tokens over {t['duration_s']:,.0f} s", ""]
    w = max(len(label) for _, label, _ in HEADLINE)
    lines.append(f"{'':{w}}  {'baseline':>14}  {'factory':>14}")
    for key, label, fmt in HEADLINE:
        lines.append(f"{label:{w}}  {_fmt(b.get(key), fmt):>14}  {_fmt(f.get(key), fmt):>14}")
    def cells(d):
        return (f"{d['decode_tokens_per_s_per_gpu']:>9,.0f} {d['gpu_seconds']:>11,.0f} "
                f"{d['usd_per_mtok_output']:>9.3f} {_fmt(d['gross_margin'], '{:.1%}'):>9}")

    if "attribution" in result:
        lines += ["", "per-lever attribution (decode tok/s/GPU, GPU-seconds, $/M output, gross margin)",
                  f"{'lever':20} {'factory without':>44}   {'baseline with':>44}"]
        for r in result["attribution"]:
            lines.append(f"{r['lever']:20} {cells(r['factory_without']):>44}   {cells(r['baseline_with']):>44}")
        lines.append(f"{'(all on / all off)':20} {cells(f):>44}   {cells(b):>44}")
    return "\n".join(lines)


def format_simulate(result: dict) -> str:
    s = result["scenario"]
    lines = [f"{result['model']}  price {result['price']}  config {result['config']}"]
    w = max(len(label) for _, label, _ in HEADLINE)
    for key, label, fmt in HEADLINE:
        if key in s:
            lines.append(f"{label:{w}}  {_fmt(s.get(key), fmt):>14}")
    return "\n".join(lines)
