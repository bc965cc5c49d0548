"""``inference-factory bench``: what ``vllm bench serve`` (InferenceX's harness) would measure on
one deployment at each concurrency (thin: parse, call :func:`inference_factory.bench`, print;
``--compare`` reads measured results and prints the errors)."""

from __future__ import annotations

import click

from ..errors import SpecError
from ..output.tables import TABLE_WIDTH, chosen_format, render
from ..specs import grammar as g
from . import params as p
from .params import engine_option, format_option
from ..specs.hardware import DEFAULT_HARDWARE

#: Columns of the human table, within 100 characters (every variable goes to csv and json;
#: --wide shows them all).
TABLE_COLUMNS = ("concurrency", "total_token_throughput_per_gpu", "output_throughput_per_gpu",
                 "interactivity", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                 "p99_tpot_ms", "median_e2el_ms", "decode_batch_per_rank",
                 "decode_binding_resource")


def _concurrency(ctx, param, value):
    if value is None:
        return None
    try:
        values = g.parse_values(value, "--concurrency")
    except SpecError as exc:
        raise click.UsageError(str(exc), ctx) from None
    if not all(isinstance(v, int) and v >= 1 for v in values):
        raise click.UsageError(f"--concurrency {value}: whole numbers >= 1, e.g. 1,2,4,...,512",
                               ctx)
    return tuple(values)


@click.command("bench")
@click.option("--model", "-m", default="DeepSeek-V3", show_default=True,
              help="Model name, alias or TOML path.")
@click.option("--hardware", "-H", default=DEFAULT_HARDWARE, show_default=True,
              help="Hardware name, alias or TOML path, or several NAME,NAME (one run each, "
                   "one chart); the one default of every command: the device of "
                   "configs/factory.toml.")
@click.option("--parallelism", "-p", type=p.ShapeParam(), multiple=True,
              help="Aggregated instance shape, e.g. tp=4,ep=4 or dp=8,ep=8 (default tp=1); "
                   "repeat for several shapes in one run (one chart).")
@click.option("--prefill-pool", type=p.PoolParam(), default=None, metavar="N:SHAPE",
              help="Disaggregated: N prefill instances of SHAPE, e.g. 2:tp=8.")
@click.option("--decode-pool", type=p.PoolParam(), default=None, metavar="N:SHAPE",
              help="Disaggregated: N decode instances of SHAPE, e.g. 1:dp=8,ep=8.")
@p.precision_options
@click.option("--draft-depth", type=click.IntRange(0, 64), default=0, show_default=True,
              help="Draft tokens per step (MTP or --draft-model).")
@click.option("--acceptance-rate", type=p.FiniteRange(0, 1), default=None,
              help="Acceptance of the first draft position (default: the engine's 0.8).")
@click.option("--draft-model", default=None, help="Separate draft model (default: MTP).")
@click.option("--overlap", type=click.Choice(["none", "two-batch"]), default="none",
              show_default=True, help="Two-micro-batch overlap of compute and communication.")
@click.option("--isl", type=p.TokensParam(), default=1024, show_default=True,
              help="Prompt tokens (the largest, with --range-ratio).")
@click.option("--osl", type=p.TokensParam(), default=1024, show_default=True,
              help="Output tokens (the largest, with --range-ratio).")
@click.option("--range-ratio", type=p.FiniteRange(0, 1), default=None,
              help="Lengths uniform in [ratio x ISL, ISL] and [ratio x OSL, OSL] (default 1, "
                   "or the --preset's: InferenceX 0.8).")
@click.option("--preset", default=None, metavar="NAME",
              help="A benchmark's settings where you give none (configs/bench_presets.toml, "
                   "each sourced): inferencex = range ratio 0.8, FP8 KV cache where the device "
                   "has FP8, 10 prompts per client, the default engine profile's flags.")
@click.option("--concurrency", "-c", callback=_concurrency, default=None, metavar="LIST",
              help="Requests in flight, e.g. 1,2,4,...,512 (default that list, or the "
                   "--compare files' values).")
@click.option("--num-prompts", type=click.IntRange(min=1), default=None,
              help="Prompts per run (default 10 x concurrency, as InferenceX).")
@engine_option
@click.option("--no-engine-time", is_flag=True,
              help="Drop the engine's own time (poll waits, host time, stream chunks).")
@click.option("--uncertainty", is_flag=True,
              help="Add the 80% band of each throughput and latency (table: value [low-high]; "
                   "JSON <name>_low/_high; the plot shades it): component uncertainty widened "
                   "by the model's track record (docs/MODEL.md sections 12-13).")
@click.option("--compare", "compare_paths", multiple=True, metavar="FILE.json",
              help="Measured results (vllm bench serve --save-result, or InferenceX's processed "
                   "JSON; a file, JSONL or folder; repeat): print predicted vs measured.")
@click.option("--calibrate", "calibrate_paths", multiple=True, metavar="FILE.json",
              help="Fit the engine profile's host times (per decode step, per prefill pass; "
                   "nothing in the physics) to your own runs of this deployment (vllm bench "
                   "serve --save-result or InferenceX files; repeat), print the leave-one-out "
                   "error before and after and write the profile (--profile-out), which "
                   "--engine FILE.toml then reads.")
@click.option("--profile-out", default=None, metavar="FILE.toml",
              help="Where --calibrate writes the fitted profile (default "
                   "<profile>-<hardware>-calibrated.toml).")
@click.option("--num-gpus", type=click.IntRange(min=1), default=None,
              help="GPUs of the measured runs where the --compare files do not say.")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png",
              help="Draw throughput/GPU vs interactivity and TTFT vs concurrency.")
@click.option("--output", "-o", default=None, metavar="FILE",
              help="Also write the result in the chosen --format.")
@click.option("--trace", default=None, metavar="FILE|NAME",
              help="Replay agent sessions instead of random prompts: a trace file (AIPerf/"
                   "weka, Mooncake/AIPerf JSONL with session_id, OpenAI-style conversations), "
                   "a shape .toml or a bundled shape (agentic_coding); prefix caching on.")
@click.option("--kv-offload", default="dram", show_default=True, metavar="TIERS",
              help="With --trace: none, dram (InferenceX's pro-rata rule), dram:GB, dram+nvme.")
@click.option("--attribution", is_flag=True,
              help="With --trace: the same trace with caching off, HBM, HBM+DRAM, "
                   "HBM+DRAM+NVMe (table and --plot lines).")
@click.option("--cached-input-fraction", type=click.FloatRange(0, 1), default=None,
              help="With --trace: price of a cached input token over a fresh one "
                   "(default configs/agentic.toml: 0.10).")
@click.option("--wide", is_flag=True, help="Table: every column (default: the ones a person "
              "reads, within 100 characters).")
@format_option
def bench_cmd(model, hardware, parallelism, prefill_pool, decode_pool, weight_precision,
              moe_precision, kv_precision, attention_precision, dispatch_precision,
              combine_precision, draft_depth, acceptance_rate,
              draft_model, overlap, isl, osl, range_ratio, preset, concurrency, num_prompts, engine,
              no_engine_time, uncertainty, compare_paths, calibrate_paths, profile_out,
              num_gpus, plot_path, output, wide, trace, kv_offload, attribution,
              cached_input_fraction, fmt, as_json) -> None:
    """Predict a closed-loop serving benchmark (vllm bench serve --max-concurrency N, as
    InferenceX runs it) on one deployment: per concurrency, TTFT, TPOT, ITL, E2E latency,
    throughput (total and per GPU) and interactivity, with vLLM's key names.

    \b
    inference-factory bench -m DeepSeek-R1 -H B200 -p tp=4,ep=4 --weight-precision fp4 \\
        --moe-precision fp4 --kv-precision fp8 --isl 8192 --osl 1024 --range-ratio 0.8 \\
        --concurrency 4,8,16,...,128 --plot bench.png
    """
    from ..analysis.bench import DEFAULT_CONCURRENCY, bench

    fmt = chosen_format(fmt, as_json)
    if plot_path is not None:
        if not plot_path.lower().endswith((".png", ".svg", ".pdf")):
            raise SpecError(f"--plot {plot_path!r}: the name must end in .png, .svg or .pdf")
        from ..errors import require
        require("matplotlib", f"--plot {plot_path}", extra="plots")
    from ..output.files import check_target
    for path, opt in ((output, "--output"), (plot_path, "--plot")):
        if path is not None:
            check_target(path, option=opt)     # a bad name fails before the prediction runs
    if (prefill_pool is None) != (decode_pool is None):
        raise SpecError("--prefill-pool and --decode-pool go together (a disaggregated "
                        "deployment needs both)")
    if prefill_pool is not None and parallelism:
        raise SpecError("--parallelism is the aggregated shape; with --prefill-pool/"
                        "--decode-pool give each pool's shape there")
    if trace is not None:
        from .bench_trace import run_trace
        return run_trace(trace=trace, kv_offload=kv_offload, attribution=attribution,
                         cached_input_fraction=cached_input_fraction, fmt=fmt,
                         plot_path=plot_path, output=output, compare_paths=compare_paths,
                         num_gpus=num_gpus, wide=wide, kw=dict(
                             model=model, hardware=hardware,
                             **dict(parallelism[0] if parallelism else {}),
                             prefill_pool=prefill_pool, decode_pool=decode_pool,
                             weight_precision=weight_precision,
                             moe_precision=moe_precision, kv_precision=kv_precision,
                             attention_precision=attention_precision, draft_depth=draft_depth,
                             acceptance_rate=acceptance_rate, engine=engine,
                             engine_time=not no_engine_time,
                             uncertainty=True if uncertainty else None,
                             **({"concurrency": concurrency} if concurrency else {})))
    from ..analysis.bench.presets import apply_preset
    from ..specs import load_hardware

    devices = _devices(hardware)
    shapes = list(parallelism) or [None]
    n_runs = len(devices) * len(shapes)
    from ..output.bench_plot import MAX_LABELS
    if n_runs > MAX_LABELS:
        raise SpecError(f"-H {hardware} with {len(shapes)} -p shape(s): {n_runs} runs; at "
                        f"most {MAX_LABELS} in one bench (one chart)")
    if calibrate_paths:
        if n_runs > 1:
            raise SpecError("--calibrate fits one deployment: give one -H device and at most "
                            "one -p shape")
        rr, kv, _ = apply_preset(preset, load_hardware(devices[0]), range_ratio=range_ratio,
                                 kv_precision=kv_precision)
        _calibrate(calibrate_paths, profile_out, model=model, hardware=devices[0],
                   engine=engine, num_gpus=num_gpus, fmt=fmt, **dict(shapes[0] or {}),
                   prefill_pool=prefill_pool,
                   decode_pool=decode_pool, weight_precision=weight_precision,
                   moe_precision=moe_precision, kv_precision=kv,
                   attention_precision=attention_precision,
                   dispatch_precision=dispatch_precision, combine_precision=combine_precision,
                   draft_depth=draft_depth, acceptance_rate=acceptance_rate,
                   draft_model=draft_model, overlap=overlap, isl=isl, osl=osl,
                   range_ratio=rr, num_prompts=num_prompts)
        return
    measured = None
    if compare_paths:
        if n_runs > 1:
            raise SpecError(f"--compare scores one deployment against its files: give one "
                            f"-H and one -p (got {len(devices)} device(s) x {len(shapes)} "
                            "shape(s))")
        from ..analysis.bench.results import read_bench_results
        measured = read_bench_results(list(compare_paths), num_gpus=num_gpus)
        if concurrency is None:
            concurrency = tuple(sorted({int(c) for c in measured["max_concurrency"].dropna()}))
    runs = []
    for hw in devices:
        rr, kv, notes = apply_preset(preset, load_hardware(hw), range_ratio=range_ratio,
                                     kv_precision=kv_precision)
        for shape in shapes:
            df = bench(model, hw, **dict(shape or {}), prefill_pool=prefill_pool,
                       decode_pool=decode_pool, weight_precision=weight_precision,
                       moe_precision=moe_precision, kv_precision=kv,
                       attention_precision=attention_precision,
                       dispatch_precision=dispatch_precision,
                       combine_precision=combine_precision, draft_depth=draft_depth,
                       acceptance_rate=acceptance_rate, draft_model=draft_model,
                       overlap=overlap, isl=isl, osl=osl, range_ratio=rr,
                       concurrency=concurrency or DEFAULT_CONCURRENCY,
                       num_prompts=num_prompts, engine=engine,
                       engine_time=not no_engine_time,
                       uncertainty=True if uncertainty else None, as_frame=True)
            runs.append((df, notes))
    texts = []
    for df, notes in runs:
        a = df.attrs
        head = (f"{a['model']} on {a['hardware']} {a['deployment']} "
                f"({int(df['num_gpus'][0])} GPUs), ISL {isl} / OSL {osl}, range ratio "
                f"{a['range_ratio']:g}, engine {a.get('engine_label', a['engine'])}"
                f"{'' if not no_engine_time else ' without its own time'}")
        if measured is not None:
            text = _comparison_text(df, measured, fmt, head, wide)
            if fmt in ("table", "markdown"):
                text += "\n" + _footing_line(a, notes, wide)
        elif fmt in ("table", "markdown"):
            cols = ([c for c in df.columns if not c.endswith(("_low", "_high"))] if wide else
                    [c for c in TABLE_COLUMNS if c in df])
            if uncertainty and not wide:    # a band under its value; columns dropped to fit
                from .question_options import fit_columns, hidden_note
                text, hidden = fit_columns(_with_bands(df, cols, human=True), fmt, head,
                                           width=TABLE_WIDTH, keep=("concurrency",), human=True)
                text += hidden_note(hidden, TABLE_WIDTH)
            else:
                text = render(_with_bands(df, cols), fmt, header=head, human=not wide,
                              width=10_000 if wide else None)   # bands never wrap
            text += "\n" + _footing_line(a, notes, wide)
            eager = _eager_note(engine, a["hardware"], df)
            if eager:
                from ..output.tables import fit_lines
                text += "\n" + (f"note: {eager}" if wide else fit_lines(f"note: {eager}"))
        else:
            text = None
        texts.append(text)
    if fmt in ("table", "markdown") or measured is not None:
        text = "\n\n".join(texts)
    elif fmt == "json":
        from ..output.files import json_text
        from ..output.tables import records
        one = [{"points": records(df), "attrs": dict(df.attrs)} for df, _ in runs]
        text = json_text(one[0] if len(one) == 1 else {"runs": one})
    else:
        text = render(_stacked([df for df, _ in runs]), fmt)
    # all or nothing: the plot (the write that can fail on its own) before the output
    if plot_path is not None:
        from ..output.bench_plot import plot_bench
        title, labels = _chart_words([df.attrs for df, _ in runs])
        plot_bench(list(zip(labels, (df for df, _ in runs))), plot_path, measured=measured,
                   title=title)
    if output is not None:
        from ..output.files import write_text_atomic
        write_text_atomic(output, text + "\n")
    click.echo(text)
    if plot_path is not None and fmt in ("table", "markdown"):
        click.echo(f"wrote {plot_path}: throughput/GPU vs interactivity, TTFT vs concurrency")


def _devices(hardware: str) -> list[str]:
    """``-H H200,MI355X`` -> each device once, in order; an empty name is refused."""
    names = [h.strip() for h in str(hardware).split(",")]
    if not all(names):
        raise SpecError(f"-H {hardware!r}: a device name is empty (give NAME or NAME,NAME,...)")
    return list(dict.fromkeys(names))


def _stacked(frames):
    """csv of several runs: one table, each row led by its device and deployment."""
    if len(frames) == 1:
        return frames[0]
    import pandas as pd

    return pd.concat([df.assign(hardware=df.attrs["hardware"],
                                deployment=df.attrs["deployment"])[
        ["hardware", "deployment", *df.columns]] for df in frames], ignore_index=True)


def _chart_words(attrs: list) -> tuple[str, list[str]]:
    """The chart's title (model, precision, ISL/OSL with the range ratio, engine: what every
    run shares) and one label per run (device and deployment, and whatever the title cannot
    name because the runs differ in it)."""
    def words(a, k):
        return {"model": a["model"], "precision": f"{a['precision']} (KV {a['kv_precision']})",
                "lengths": f"ISL {a['isl']} / OSL {a['osl']}, range ratio {a['range_ratio']:g}",
                "engine": f"engine {a['engine']}"}[k]
    keys = ("model", "precision", "lengths", "engine")
    same = [k for k in keys if len({words(a, k) for a in attrs}) == 1]
    title = " · ".join(words(attrs[0], k) for k in same)
    labels = [" ".join([a["hardware"], a["deployment"]]
                       + [words(a, k) for k in keys if k not in same]) for a in attrs]
    return title, labels


def _eager_note(engine, hw: str, df) -> str:
    """'' unless a decode batch per rank runs outside the engine's CUDA graphs on the device
    (:func:`~inference_factory.analysis.plan.engines.eager_note`: step time unmodelled)."""
    from ..analysis.plan.engines import eager_note
    from ..specs.engines import resolve_serving_engine

    if "decode_batch_per_rank" not in df:
        return ""
    return eager_note(resolve_serving_engine(engine, "--engine", hardware=hw),
                      df["decode_batch_per_rank"].to_numpy(float))


def _footing_line(a, notes, wide: bool) -> str:
    """Under the table: what the prediction stands on (plan's footing, at one concurrency),
    the precisions run and any weight-only fallback, and the engine profile
    (:func:`~inference_factory.analysis.footing.footing_lines`, as roofline and simulate)."""
    from ..analysis.footing import footing_lines
    from ..output.tables import fit_lines

    text = "\n".join(footing_lines(
        footing=a.get("footing", ""), measured_share=a.get("measured_share"),
        where=f" at concurrency {a.get('footing_concurrency')}", precisions=a,
        notes=[a.get("precision_note")] + list(notes),
        engine=f"{a['engine']} ({a['engine_description']})"))
    return text if wide else fit_lines(text)


def _calibrate(paths, profile_out, *, fmt, **kw) -> None:
    """``--calibrate``: fit, print the errors, write the profile file."""
    from ..analysis.bench.calibrate import calibrate
    from ..output.files import json_text, write_text_atomic

    if profile_out is not None and not profile_out.lower().endswith(".toml"):
        raise SpecError(f"--profile-out {profile_out!r}: the name must end in .toml")
    got = calibrate(list(paths), **kw)
    eng = got["engine"]
    path = profile_out or f"{eng.name}-{eng.device.lower()}-calibrated.toml"
    write_text_atomic(path, got["profile_toml"])
    terms = got["fit"]["terms"]
    if fmt == "json":
        click.echo(json_text({"terms": terms, "summary": got["summary"], "profile": path}))
        return
    head = (f"{eng.label()}: host time fitted to {len(got['fit']['concurrency'])} runs "
            f"(concurrency {', '.join(map(str, got['fit']['concurrency']))}): "
            f"{terms['host_s_per_decode_step'] * 1e3:.3g} ms per decode step, "
            f"{terms['host_s_per_prefill_pass'] * 1e3:.3g} ms per prefill pass")
    click.echo(render(got["summary"], fmt if fmt != "csv" else "table", header=head))
    click.echo(f"wrote {path}: use it with --engine {path}")


def _with_bands(df, columns, human: bool = False):
    """The shown columns, each with a band as ``value [low-high]`` (text) where the result
    carries ``<name>_low`` / ``<name>_high``; ``human``: in the human header's unit (E2E in
    s), the band on a second line under the value (a cell as narrow as its widest part)."""
    from ..output.tables import human_header, value_band

    out = df[columns].copy()
    for c in columns:
        if f"{c}_low" in df and f"{c}_high" in df:
            f = human_header(c)[1] if human else 1.0
            out[c] = [value_band(f * v, f * lo, f * hi).replace(" [", "\n[" if human else " [")
                      for v, lo, hi in zip(df[c], df[f"{c}_low"], df[f"{c}_high"])]
    return out


#: The human comparison table: (column of compare_results, header); pred and meas side by side.
COMPARE_COLUMNS = (("max_concurrency", "conc"),
                   ("{thr}_predicted", "tok/s/GPU"), ("{thr}_measured", "meas"),
                   ("median_ttft_ms_predicted", "TTFT ms"), ("median_ttft_ms_measured", "meas"),
                   ("median_tpot_ms_predicted", "TPOT ms"), ("median_tpot_ms_measured", "meas"),
                   ("interactivity_predicted", "tok/s/user"), ("interactivity_measured", "meas"))
#: The summary's metrics as a person reads them.
METRIC_NAMES = {"total_token_throughput_per_gpu": "tok/s/GPU (all tokens)",
                "total_token_throughput": "tok/s (all tokens)",
                "output_throughput": "output tok/s", "median_ttft_ms": "median TTFT",
                "median_tpot_ms": "median TPOT", "interactivity": "tok/s/user"}


def _comparison_text(df, measured, fmt: str, head: str, wide: bool = False) -> str:
    """Predicted vs measured per point and a summary (json: ``{"points", "summary"}``); the
    table shows the scored runs side by side and lists each run not scored with its reason
    (``--wide``: every column of the comparison)."""
    import textwrap

    from ..analysis.bench.comparison import compare_results, summarize_comparison
    from ..output.tables import fit_lines, format_number, render_rows

    cmp = compare_results(df, measured)
    summary = summarize_comparison(cmp)
    if fmt == "json":
        from ..output.files import json_text
        from ..output.tables import records
        return json_text({"points": records(cmp), "summary": summary})
    if fmt == "csv":
        return render(cmp, fmt)
    n, total = summary["n_points"], len(cmp)
    title = fit_lines(f"{head}\npredicted vs measured (the 'meas' column after each): {n} of "
                      f"{total} runs scored")
    if wide:
        text = render(cmp, fmt, header=title, width=10_000)
    else:
        thr = cmp.attrs["throughput_metric"]
        cols = [(c.format(thr=thr), h if "tok/s/GPU" not in h or thr.endswith("_per_gpu")
                 else "tok/s") for c, h in COMPARE_COLUMNS]
        scored = cmp[cmp["matched"]]
        rows = [[format_number(r[c]) for c, _ in cols] for _, r in scored.iterrows()]
        text = title + "\n" + (render_rows([h for _, h in cols], rows,
                                           right=range(len(cols)), fmt=fmt) if rows else
                               "(no run is like the prediction)")
    skipped = cmp[~cmp["matched"]]
    if len(skipped):
        text += f"\n\nnot scored ({len(skipped)} runs unlike the prediction):"
        for _, r in skipped.iterrows():
            src = str(r.get("source", "")).rsplit("/", 1)[-1]
            text += "\n" + textwrap.fill(f"{src} (conc {format_number(r['max_concurrency'])}): "
                                         f"{r['reason']}", 98, initial_indent="  ",
                                         subsequent_indent="    ")
    if n:
        rows = [[METRIC_NAMES.get(k, k), v["n"], format_number(v["median_abs_ln"]), format_number(v["worst_abs_ln"]),
                 format_number(v["worst_at_concurrency"]), format_number(v["geomean_ratio"])]
                for k, v in summary["metrics"].items()]
        text += "\n\n" + render_rows(["metric", "points", "median |ln|", "worst |ln|",
                                       "at conc", "pred/meas (geomean)"], rows,
                                      right=range(1, 6), fmt=fmt)
    return text
