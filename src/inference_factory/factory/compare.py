"""Baseline versus factory on one trace, with a per-lever attribution."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from ..output.files import json_text
from ..output.tables import fit_lines
from .config import LEVERS, FactoryConfig
from .levers import lever_effects, no_change_reasons
from .simulate import config_trace, simulate, side_config, with_config_class_params
from .workload import Trace

#: rows of the side-by-side table: (metric key, label, format)
HEADLINE = [
    ("input_tokens_per_day", "input tokens per day", "{:,.3g}"),
    ("output_tokens_per_day", "output tokens per day", "{:,.3g}"),
    ("kv_tokens_per_output_token", "KV tokens per output token", "{:,.0f}"),
    ("decode_tokens_per_s_per_gpu", "decode tokens/s per GPU", "{:,.0f}"),
    ("prefill_tokens_per_s_per_gpu", "prefill tokens/s per GPU (input)", "{:,.0f}"),
    ("cache_hit_rate", "cache hit rate (input tokens)", "{:.1%}"),
    ("speculative_tokens_per_pass", "speculative tokens per pass", "{:.2f}"),
    ("draft_time_share", "draft share of decode step", "{:.1%}"),
    ("expert_efficiency", "expert efficiency (mean/max rank)", "{:.1%}"),
    ("decode_batch_per_gpu", "decode batch per GPU", "{:,.1f}"),
    ("decode_binding_resource", "decode binds on", "{}"),
    ("decode_occupancy", "decode occupancy", "{:.1%}"),
    ("ttft_p50_s", "TTFT p50 (s)", "{:.3f}"),
    ("ttft_p99_s", "TTFT p99 (s)", "{:.3f}"),
    ("tpot_p50_s", "TPOT p50 (ms)", "ms"),
    ("tpot_p99_s", "TPOT p99 (ms)", "ms"),
    ("goodput_frac", "goodput (output tokens within SLO)", "{:.1%}"),
    ("goodput_tokens_per_s_per_gpu", "goodput tokens/s per GPU (all GPUs)", "{:,.0f}"),
    ("required_gpu_hours", "required GPU-hours (trace)", "{:,.1f}"),
    ("gpu_seconds_vs_baseline", "GPU-seconds vs baseline", "{:.1%}"),
    ("gpus_avg", "GPUs, average over the day", "{:,.0f}"),
    ("gpus_peak", "GPUs, peak", "{:,.0f}"),
    ("nodes_avg", "nodes, average over the day", "{:,.1f}"),
    ("nodes_peak", "nodes, peak", "{:,.0f}"),
    ("revenue_usd_per_day", "revenue $/day", "{:,.0f}"),
    ("cost_usd_per_day", "cost $/day", "{:,.0f}"),
    ("gross_margin", "gross margin", "{:.1%}"),
    ("cost_profit_margin", "cost-profit margin", "{:.0%}"),
    ("usd_per_mtok_output", "cost $ per M output tokens", "{:.3f}"),
    ("payback_months", "GPU payback (months)", "{:.1f}"),
    ("output_tokens_per_s_per_mw", "output tokens/s per MW", "{:,.0f}"),
]
ATTRIBUTION_METRICS = ("decode_tokens_per_s_per_gpu", "gpu_seconds", "usd_per_mtok_output",
                       "gross_margin", "goodput_frac", "goodput_tokens_per_s_per_gpu",
                       "decode_binding_resource")


def trace_summary(trace: Trace) -> dict:
    """JSON-ready totals of a trace, with per-class shares."""
    cols = trace.summary_columns()        # per class, then all (no pandas on compare's path)
    return {
        "source": trace.source, "n_requests": int(trace.n_requests),
        "duration_s": float(trace.duration_s),
        "input_tokens": int(trace.input_tokens.sum()), "output_tokens": int(trace.output_tokens.sum()),
        "reusable_prefix_frac": float(cols["chain_tokens_frac"][-1]),
        "classes": {name: {"request_share": float(cols["request_share_frac"][i]),
                           "mean_input_tokens": float(cols["mean_input_tokens"][i]),
                           "mean_output_tokens": float(cols["mean_output_tokens"][i])}
                    for i, name in enumerate(trace.class_names)},
    }


def _trace_for(cfg: FactoryConfig) -> Trace:
    return with_config_class_params(config_trace(cfg), cfg)


def _with_shapes(cfg: FactoryConfig, donor: FactoryConfig) -> FactoryConfig:
    """``cfg`` with the pool shapes (tp, dp, ep, deployment unit) of ``donor``."""
    def shape(pool, src):
        return dataclasses.replace(pool, tp=src.tp, dp=src.dp, ep=src.ep, unit_gpus=src.unit_gpus)
    return dataclasses.replace(cfg, prefill=shape(cfg.prefill, donor.prefill),
                               decode=shape(cfg.decode, donor.decode))


def _attribution_runs(cfg: FactoryConfig, base_cfg: FactoryConfig):
    """(lever, factory variant, baseline variant, how the baseline variant is read).

    A lever the factory has and the baseline lacks: the factory without it, the baseline with
    it. A lever both have (continuous batching in the generic baseline): the factory without
    it, and the baseline without it (its value at the baseline is baseline / that). The pool
    shapes are measured the same way, as the pseudo-lever ``parallelism``."""
    runs = []
    for lever in LEVERS:
        f_on, b_on = getattr(cfg.levers, lever), getattr(base_cfg.levers, lever)
        if not f_on:
            continue
        off = cfg.with_levers(cfg.levers.switched(**{lever: False}))
        toggled = base_cfg.with_levers(base_cfg.levers.switched(**{lever: not b_on}))
        runs.append((lever, off, toggled, "baseline_without" if b_on else "baseline_with"))
    if (cfg.decode.tp, cfg.decode.dp, cfg.decode.ep) != (base_cfg.decode.tp, base_cfg.decode.dp,
                                                         base_cfg.decode.ep):
        runs.append(("parallelism", _with_shapes(cfg, base_cfg), _with_shapes(base_cfg, cfg),
                     "baseline_with"))
    return runs


#: order in which the cumulative path adds the factory's choices to the generic baseline:
#: infrastructure (pool shapes, P/D split) first, then the numerics and the scheduling
#: features that build on them, the prefix cache last (it acts on prefill only)
PATH_ORDER = ("parallelism", "pd_split", "low_precision", "overlap", "expert_balancing",
              "speculative", "prefix_cache")


def _path_runs(cfg: FactoryConfig, base_cfg: FactoryConfig):
    """(step name, config) from the generic baseline to the factory, one change at a time in
    ``PATH_ORDER`` (each lever the factory has and the baseline lacks; the pool shapes)."""
    runs, cur = [], base_cfg
    for step in PATH_ORDER:
        if step == "parallelism":
            if (cfg.decode.tp, cfg.decode.dp, cfg.decode.ep) == (cur.decode.tp, cur.decode.dp,
                                                                 cur.decode.ep):
                continue
            cur = _with_shapes(cur, cfg)
        else:
            if getattr(cur.levers, step) == getattr(cfg.levers, step):
                continue
            cur = cur.with_levers(cur.levers.switched(**{step: getattr(cfg.levers, step)}))
        runs.append((step, cur))
    return runs


def compare(cfg: FactoryConfig, *, attribution: bool = True, trace: Trace | None = None,
            lever_studies: bool = True, progress: Callable[[str], None] | None = None,
            uncertainty=None) -> dict:
    """Run baseline and factory on the same trace; optionally switch each lever off the
    factory and toggle it on the baseline, one at a time (see :func:`_attribution_runs`), and
    study when speculation and expert balancing pay (:mod:`.levers`). ``progress`` receives
    one line per simulated side. ``uncertainty`` (True or "components") adds the 80 % band
    of the baseline's and the factory's headline figures
    (:func:`inference_factory.factory.bands.simulate_bands`; the same draws on both
    sides, so their ratio is tighter than either band)."""
    say = progress or (lambda _msg: None)
    base_cfg = side_config(cfg, "baseline")
    trace = trace if trace is not None else _trace_for(cfg)
    memo: dict = {}
    runs = _attribution_runs(cfg, base_cfg) if attribution else []
    path = _path_runs(cfg, base_cfg) if attribution else []
    total = 2 + 2 * len(runs) + len(path)
    say(f"[1/{total}] baseline")
    base = simulate(base_cfg, trace, name="baseline", cache_memo=memo)
    say(f"[2/{total}] factory")
    fact = simulate(cfg, trace, name="factory", cache_memo=memo)
    for side in (base, fact):
        side.metrics["gpu_seconds_vs_baseline"] = side.metrics["gpu_seconds"] / base.metrics["gpu_seconds"]
    if uncertainty is not None and uncertainty is not False:
        from .bands import simulate_bands
        say("bands: baseline and factory on the component draws")
        base.metrics = simulate_bands(base_cfg, base.metrics, uncertainty, trace=trace,
                                      cache_memo=memo)
        fact.metrics = simulate_bands(cfg, fact.metrics, uncertainty, trace=trace,
                                      cache_memo=memo)
    out: dict[str, Any] = {
        "config": cfg.path, "model": cfg.model, "price": cfg.price.id,
        "engine": fact.metrics["engine"],
        "trace": trace_summary(trace),
        "baseline": base.metrics, "factory": fact.metrics,
    }
    if lever_studies:
        out["lever_effects"] = lever_effects(fact, trace)
    if attribution:
        rows = []
        for i, (lever, f_cfg, b_cfg, kind) in enumerate(runs):
            say(f"[{3 + 2 * i}/{total}] factory - {lever}")
            # cache capacity is infrastructure: held at the factory's while another lever is
            # switched off it; the baseline + prefix_cache run simulates its own
            keep = fact.cache if lever not in ("prefix_cache", "parallelism") else None
            off = simulate(f_cfg, trace, name=f"factory - {lever}", cache_memo=memo,
                           cache_result=keep)
            say(f"[{4 + 2 * i}/{total}] baseline {'-' if kind == 'baseline_without' else '+'} {lever}")
            tog = simulate(b_cfg, trace, name=f"baseline {kind} {lever}", cache_memo=memo)
            rows.append({"lever": lever, "baseline_side": kind,
                         "factory_without": {k: off.metrics[k] for k in ATTRIBUTION_METRICS},
                         kind: {k: tog.metrics[k] for k in ATTRIBUTION_METRICS}})
        out["attribution"] = rows
        out["no_change"] = no_change_reasons(out)
        steps = []
        for j, (step, p_cfg) in enumerate(path):
            say(f"[{3 + 2 * len(runs) + j}/{total}] path: + {step}")
            r = simulate(p_cfg, trace, name=f"path + {step}", cache_memo=memo)
            steps.append({"step": step, **{k: r.metrics[k] for k in ATTRIBUTION_METRICS}})
        out["path"] = steps
    return out


def simulate_one(cfg: FactoryConfig, *, uncertainty=None) -> dict:
    """One scenario on its trace; ``uncertainty`` (True or "components") adds the 80 % band
    of its headline figures (:func:`inference_factory.factory.bands.simulate_bands`)."""
    trace = _trace_for(cfg)
    memo: dict = {}
    side = simulate(cfg, trace, name=cfg.name, cache_memo=memo)
    metrics = side.metrics
    if uncertainty is not None and uncertainty is not False:
        from .bands import simulate_bands
        metrics = simulate_bands(cfg, metrics, uncertainty, trace=trace, cache_memo=memo)
    return {"config": cfg.path, "model": cfg.model, "price": cfg.price.id,
            "engine": metrics["engine"], "scenario": metrics, "notes": slo_notes(cfg, metrics),
            **({"published": dict(cfg.published)} if cfg.published else {})}


def slo_notes(cfg: FactoryConfig, m: dict) -> list[str]:
    """A target nothing meets, said rather than answered silently: the TPOT target when no
    decode batch holds it (the smallest step is reported), the TTFT target when the median
    request misses it."""
    notes = []
    if not m.get("meets_tpot_slo_at_operating_batch", True):
        notes.append(f"nothing meets the TPOT target {cfg.tpot_slo_s * 1e3:.4g} ms (slo.tpot_s): "
                     f"the fastest decode step gives TPOT p50 {m['tpot_p50_s'] * 1e3:.4g} ms; "
                     f"goodput {m['goodput_frac']:.1%}")
    if m.get("ttft_p50_s", 0.0) > cfg.ttft_slo_s:
        notes.append(f"the median request misses the TTFT target {cfg.ttft_slo_s:.4g} s "
                     f"(slo.ttft_s): TTFT p50 {m['ttft_p50_s']:.4g} s; goodput "
                     f"{m['goodput_frac']:.1%}")
    return notes


def to_json(result: dict) -> str:
    """Deterministic JSON (no timestamps; non-finite numbers as null)."""
    return json_text(result)


def _fmt(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if fmt == "ms":
        return f"{value * 1e3:,.1f}"
    return fmt.format(value)


def attribution_table(result: dict) -> list[str]:
    """The per-lever attribution as aligned text with column headers: the factory with each
    lever off, then the baseline with each toggled (two tables, each within 100 columns)."""
    heads = ("tok/s/GPU", "GPU-s", "$/M out", "margin", "goodput")
    def cells(d):
        return (f"{d['decode_tokens_per_s_per_gpu']:>9,.0f} {d['gpu_seconds']:>11,.0f} "
                f"{d['usd_per_mtok_output']:>8.3f} {_fmt(d['gross_margin'], '{:.1%}'):>8} "
                f"{_fmt(d.get('goodput_frac'), '{:.1%}'):>7}")
    hdr = f"{heads[0]:>9} {heads[1]:>11} {heads[2]:>8} {heads[3]:>8} {heads[4]:>7}"
    b, f = result["baseline"], result["factory"]
    lines = ["per-lever attribution: each lever switched off the factory, and toggled on the "
             "generic baseline", "", "factory without the lever", f"{'lever':20}  {hdr}"]
    for r in result["attribution"]:
        lines.append(f"{r['lever']:20}  {cells(r['factory_without'])}")
    lines += [f"{'(factory)':20}  {cells(f)}", "", "baseline toggled", f"{'lever':20}  {hdr}"]
    for r in result["attribution"]:
        side = r.get("baseline_with") or r.get("baseline_without")
        sign = "-" if "baseline_without" in r else "+"
        lines.append(f"{r['lever']:20}  {cells(side)} ({sign})")
    lines.append(f"{'(baseline)':20}  {cells(b)}")
    lines.append("(+) baseline with the lever; (-) baseline without it (the generic baseline "
                 "already has it)")
    return lines


def lever_effect_lines(result: dict) -> list[str]:
    """When the speculative and expert-balancing levers pay, as text."""
    le = result.get("lever_effects") or {}
    lines = []
    sp = le.get("speculative")
    if sp:
        lines += ["", "speculative decoding (MTP) at the factory's decode pool, by TPOT target",
                  f"{'TPOT target (ms)':>17} {'no draft':>10} {'best depth':>11} {'gain':>7}  depths by class"]
        for r in sp["tpot_curve"]:
            g = r["gain"]
            lines.append(f"{r['tpot_target_s'] * 1e3:>17.0f} "
                         f"{_fmt(r['tokens_per_s_per_gpu_no_draft'], '{:,.0f}'):>10} "
                         f"{_fmt(r['tokens_per_s_per_gpu_best_depth'], '{:,.0f}'):>11} "
                         f"{_fmt(None if g is None else g - 1, '{:+.0%}'):>7}  "
                         f"{r['depth_by_class'] if r['depth_by_class'] else 'n/a'}")
        ll = sp["light_load"]
        lines.append(f"light load (batch 1): {ll['per_user_tokens_per_s_no_draft']:.1f} -> "
                     f"{ll['per_user_tokens_per_s_best_depth']:.1f} tokens/s per user "
                     f"(x{ll['speedup']:.2f}, depths {ll['depth_by_class']})")
        acc = ", ".join(f"{a['class']} " + "/".join(f"{x:.2f}" for x in a["acceptance_by_position"])
                        for a in sp["acceptance"])
        lines.append(f"acceptance by draft position (decay {sp['acceptance_decay_per_position']}): {acc}")
    eb = le.get("expert_balancing")
    if eb:
        lines += ["", f"expert balancing at the factory's decode point (EP{eb['ep']}, the "
                  "trace's expert skew): busiest rank "
                  f"{eb['without']['busiest_rank_load_over_mean']:.2f}x the mean load without, "
                  f"{eb['with']['busiest_rank_load_over_mean']:.2f}x with "
                  f"{eb['redundant_experts']} redundant experts; decode step x{eb['step_time_ratio']:.3f}"]
    return lines


def _engine_words(b: dict, f: dict) -> str:
    """``engine NAME`` (both sides on one profile) or ``engine: baseline A, factory B``."""
    eb, ef = b.get("engine", ""), f.get("engine", "")
    return f"engine {ef}" if eb == ef else f"engine: baseline {eb}, factory {ef}"


def format_compare(result: dict) -> str:
    b, f = result["baseline"], result["factory"]
    t = result["trace"]
    # the config's path on a line of its own: the engine stays on the first
    lines = [f"{result['model']}  price {result['price']}  {_engine_words(b, f)}",
             f"config {result['config']}",
             f"trace: {t['n_requests']:,} requests, {t['input_tokens']:,} input / "
             f"{t['output_tokens']:,} output tokens over {t['duration_s']:,.0f} s; "
             f"fleet and money at {f['arrival_rate_per_s']:,.1f} requests/s "
             f"({f['arrival_rate_source']})",
             f"GPU-hours: baseline price basis {b.get('price_basis', '')}, factory price basis "
             f"{f.get('price_basis', '')}; tokens per MW: power basis {f.get('power_basis', '')}",
             ""]
    w = max(len(label) for _, label, _ in HEADLINE)
    lines.append(f"{'':{w}}  {'baseline':>14}  {'factory':>14}")
    for key, label, fmt in HEADLINE:
        lines.append(f"{label:{w}}  {_fmt(b.get(key), fmt):>14}  {_fmt(f.get(key), fmt):>14}")
    for side, d in (("baseline", b), ("factory", f)):
        if d.get("cache_hit_rate_source") == "fixed by the scenario":
            lines.append(f"note: the {side}'s cache hit rate is fixed by the scenario "
                         "(levers.cache_hit_rate), not simulated")
    if f.get("payback_absent"):
        lines.append(f"note: {f['payback_absent']}")
    if "attribution" in result:
        lines += [""] + attribution_table(result)
    if result.get("path"):
        pre = [r for r in result.get("attribution", []) if "baseline_without" in r]
        lines += ["", "cumulative path from the generic baseline (each lever added to the earlier ones)",
                  f"{'step':32} {'tok/s/GPU':>9} {'$/M out':>8} {'factor':>7}"]
        level = b["usd_per_mtok_output"]
        for r in pre:
            w = r["baseline_without"]
            lines.append(f"{'baseline - ' + r['lever']:32} {w['decode_tokens_per_s_per_gpu']:>9,.0f} "
                         f"{w['usd_per_mtok_output']:>8.3f} {'':>7}")
        lines.append(f"{'generic baseline':32} {b['decode_tokens_per_s_per_gpu']:>9,.0f} {level:>8.3f}")
        for r in result["path"]:
            lines.append(f"{'+ ' + r['step']:32} {r['decode_tokens_per_s_per_gpu']:>9,.0f} "
                         f"{r['usd_per_mtok_output']:>8.3f} x{r['usd_per_mtok_output'] / level:>6.3f}")
            level = r["usd_per_mtok_output"]
    lines += lever_effect_lines(result)
    if result.get("no_change"):
        lines += ["", "levers that change nothing at the factory point:"]
        lines += [f"- {x}" for x in result["no_change"]]
    return fit_lines("\n".join(lines))


def format_simulate(result: dict) -> str:
    """The scenario's headline figures; with the config's ``[published]`` figures, a
    ``published`` column beside them (and the ratio predicted / published)."""
    s = result["scenario"]
    pub = {k: v for k, v in result.get("published", {}).items() if k != "source"}
    lines = [f"{result['model']}  price {result['price']}  engine {s.get('engine', '')}",
             f"config {result['config']}",
             f"GPU-hours: price basis {s.get('price_basis', '')}; tokens per MW: power basis "
             f"{s.get('power_basis', '')}",
             f"fleet and money at {s['arrival_rate_per_s']:,.1f} requests/s "
             f"({s['arrival_rate_source']}); cache hit rate {s['cache_hit_rate_source']}"]
    w = max(len(label) for _, label, _ in HEADLINE)
    if pub:
        lines.append(f"{'':{w}}  {'predicted':>14}  {'published':>14}  {'ratio':>6}  "
                     f"(published: {result['published']['source']})")
    for key, label, fmt in HEADLINE:
        if key in s:
            row = f"{label:{w}}  {_fmt(s.get(key), fmt):>14}"
            if key in pub:
                ratio = s[key] / pub[key] if pub[key] else math.nan
                row += f"  {_fmt(pub[key], fmt):>14}  {_fmt(ratio, '{:.2f}'):>6}"
            lines.append(row)
    if s.get("payback_absent"):
        lines.append(f"note: {s['payback_absent']}")
    lines += [f"note: {n}" for n in result.get("notes", [])]
    return fit_lines("\n".join(lines))
