"""``inference-factory bench --trace``: the session replay (thin: call
:func:`inference_factory.analysis.bench.replay.bench_trace`, print, plot, compare)."""

from __future__ import annotations

import click

from ..output.tables import TABLE_WIDTH, fit_lines, render

#: Columns of the human table, the ones a person reads first to the left (a table that does
#: not fit 100 columns drops them from the right; --wide shows them all).
COLUMNS = ("concurrency", "total_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
           "e2e_normalized_interactivity_p90", "time_to_first_token_p50_ms",
           "time_to_first_token_p90_ms", "inter_token_latency_p50_ms", "prefix_hit_rate",
           "cost_usd_per_mtok_output", "cached_input_tokens_per_s_per_gpu",
           "prefix_hit_rate_hbm", "prefix_hit_rate_dram", "prefix_hit_rate_nvme",
           "request_latency_p50_ms", "request_latency_p90_ms", "request_latency_p99_ms",
           "kv_peak_occupancy_hbm", "kv_peak_occupancy_dram", "requests_in_flight",
           "revenue_usd_per_gpu_hour")
#: The per-tier attribution: label -> (prefix cache on, --kv-offload)
SCENARIOS = (("no cache", False, None), ("HBM", True, None), ("HBM+DRAM", True, "dram"),
             ("HBM+DRAM+NVMe", True, "dram+nvme"))
ATTRIBUTION = ("concurrency", "total_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
               "prefix_hit_rate", "e2e_normalized_interactivity_p90",
               "revenue_usd_per_gpu_hour", "cost_usd_per_mtok_output",
               "cost_usd_per_mtok_total")


def _banded(df, columns, human: bool = False):
    """The shown columns, a band as ``value [low-high]`` where the point carries one;
    ``human``: in the human header's unit, the band on a line under the value."""
    from ..output.tables import human_header, value_band

    out = df[columns].copy()
    for c in columns:
        if f"{c}_low" in df:
            f = human_header(c)[1] if human else 1.0
            out[c] = [value_band(f * v, f * lo, f * hi).replace(" [", "\n[" if human else " [")
                      for v, lo, hi in zip(df[c], df[f"{c}_low"], df[f"{c}_high"])]
    return out


def _fitted(df, fmt: str, header: str, keep) -> str:
    """A person's table within 100 columns: human headers, columns dropped from the right
    (cli.question_options.fit_columns) and named under it."""
    from .question_options import fit_columns, hidden_note

    text, hidden = fit_columns(df, fmt, header, width=TABLE_WIDTH, keep=keep, human=True)
    return text + hidden_note(hidden, TABLE_WIDTH)


def run_trace(*, trace, kv_offload, attribution, cached_input_fraction, kw, fmt, plot_path,
              output, compare_paths, num_gpus, wide: bool = False) -> None:
    from ..analysis.bench.replay import bench_trace
    import pandas as pd

    runs = ([(label, dict(prefix_cache=on, kv_offload=off)) for label, on, off in SCENARIOS]
            if attribution else [(kv_offload or "HBM", dict(kv_offload=kv_offload))])
    results = [(label, bench_trace(trace=trace, cached_input_fraction=cached_input_fraction,
                                   **kw, **opts)) for label, opts in runs]
    a = results[-1][1]["attrs"]
    head = (f"{a['model']} on {a['hardware']} {a['deployment']}, trace {a['trace']} "
            f"({a['sessions']} sessions, {a['turns']} turns), engine {a['engine']}")
    if fmt == "json":
        from ..output.files import json_text
        text = json_text({label: r for label, r in results} if attribution else results[0][1])
    elif attribution:
        rows = [{"tiers": label, **{k: p[k] for k in ATTRIBUTION}}
                for label, r in results for p in r["points"]]
        human = fmt in ("table", "markdown") and not wide
        text = (_fitted if human else render)(pd.DataFrame(rows), fmt,
                                              head + " -- per-tier attribution",
                                              **({"keep": ("tiers", "concurrency")} if human
                                                 else {}))
    else:
        df = pd.DataFrame(results[0][1]["points"])
        cols, title = [c for c in COLUMNS if c in df], head + f", KV offload {a['kv_offload']}"
        text = (render(df, fmt) if fmt == "csv" else
                render(_banded(df, cols), fmt, header=title) if wide else
                _fitted(_banded(df, cols, human=True), fmt, title, ("concurrency",)))
        if "band_structure_ln" in df:
            import math
            note = ("80% band [low-high]: component uncertainty through the replay's "
                    "latency solve, widened by the model-structure term "
                    f"x{math.exp(float(df['band_structure_ln'].iloc[0])):.3f} each side "
                    "(docs/AGENTIC.md)")
            text += "\n" + (note if wide or fmt == "csv" else fit_lines(note))
    if compare_paths:
        from ..analysis.bench.results import compare_results, read_bench_results
        measured = read_bench_results(list(compare_paths), num_gpus=num_gpus)
        pts = pd.DataFrame(results[-1][1]["points"])
        pred = pd.DataFrame({"max_concurrency": pts["concurrency"],
                             "total_token_throughput_per_gpu": pts["total_tokens_per_s_per_gpu"],
                             "output_throughput": pts["output_token_throughput"],
                             "median_ttft_ms": pts["time_to_first_token_p50_ms"],
                             "median_tpot_ms": pts["inter_token_latency_p50_ms"]})
        text += "\n\n" + render(compare_results(pred, measured), fmt if fmt != "json"
                                else "csv", header="predicted vs measured")
    if output is not None:
        from ..output.files import write_text_atomic
        write_text_atomic(output, text + "\n")
    click.echo(text)
    if plot_path is not None:
        from ..output.agentic_plot import plot_agentic
        plot_agentic([(label, r["points"]) for label, r in results], plot_path, title=head)
        if fmt in ("table", "markdown"):
            click.echo(f"wrote {plot_path}: tokens/s/GPU vs E2E normalized interactivity, "
                       "prefix hit rate vs concurrency")
