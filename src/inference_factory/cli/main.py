"""Command-line interface: ``inference-factory hardware|models|roofline``.

A thin layer over the library: it parses options, calls :func:`inference_factory.evaluate`
or the spec loaders, and formats the result. No physics lives here; values are only
converted from SI back to the vendor units of the spec files for display.

Any :class:`~inference_factory.SpecError` or command-line usage error is printed as one line
``error: <message>`` on stderr and the process exits with status 2 (no traceback).
"""

from __future__ import annotations

import math
import os
import sys
import typing
from typing import Any, Iterable, Sequence

import click

from .. import __version__, units
from ..axes import NUMERIC_AXES, STRUCT_AXES, CacheTier, Overlap
from ..output.files import check_target, json_text, write_text_atomic
from ..errors import SpecError
from .params import ValueParam
from ..specs import HardwareSpec, ModelSpec, list_hardware, list_models, load_hardware, load_model

PROG = "inference-factory"
EXIT_USAGE = 2


# --------------------------------------------------------------------------------------------
# error handling: one line on stderr, status 2
# --------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _error(message: str) -> None:
    click.echo(f"error: {_one_line(message)}", err=True)


class _Group(click.Group):
    """Click group whose ``main`` turns SpecError and usage errors into one stderr line."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any):
        no_args_help = getattr(click.exceptions, "NoArgsIsHelpError", None)
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except SpecError as exc:
            _error(str(exc))
            code = EXIT_USAGE
        except click.UsageError as exc:
            if no_args_help is not None and isinstance(exc, no_args_help):
                # bare ``inference-factory`` (or a bare subgroup): show help, not an error
                click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
                code = 0
            else:
                hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
                _error(exc.format_message() + hint)
                code = EXIT_USAGE
        except click.ClickException as exc:
            _error(exc.format_message())
            code = exc.exit_code
        except click.Abort:
            _error("aborted")
            code = 1
        if standalone_mode:
            sys.exit(code)
        return code


# --------------------------------------------------------------------------------------------
# formatting helpers (display only)
# --------------------------------------------------------------------------------------------


def _g(value: float, digits: int = 6) -> str:
    """Compact number: 989, 3350, 794.5, 0.125."""
    return f"{value:.{digits}g}"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Sequence[int] = ()) -> str:
    from ..output.tables import render_rows

    return render_rows(headers, list(rows), right)


def _kv(pairs: Iterable[tuple[str, str]], indent: int = 2, width: int = 0) -> list[str]:
    pairs = list(pairs)
    if not pairs:
        return []
    width = max([width] + [len(k) for k, _ in pairs])
    return [" " * indent + f"{k.ljust(width)}  {v}" for k, v in pairs]


def _json_value(v: Any) -> Any:
    """Plain JSON value from a numpy/xarray scalar or 1-D array (a list); non-finite
    floats become null."""
    if getattr(v, "ndim", 0) > 0:
        return [_json_value(x) for x in v]
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _format_option(func):
    from .params import format_option

    return format_option(func)


def _chosen_format(fmt, as_json):
    from ..output.tables import chosen_format

    return chosen_format(fmt, as_json)


def _render(df, fmt: str, header: str = "") -> str:
    from ..output.tables import render

    return render(df, fmt, header=header)


def _dump_json(obj: Any) -> None:
    click.echo(json_text(obj))


# --------------------------------------------------------------------------------------------
# root group
# --------------------------------------------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name=PROG)
def cli() -> None:
    """Explain and predict LLM-serving performance from hardware and model specs.

    Names are case-insensitive and may be aliases (e.g. h800) or paths to TOML files.
    INFERENCE_FACTORY_HARDWARE_DIR and INFERENCE_FACTORY_MODELS_DIR put your own spec
    folders in front of the bundled ones (they add to them and shadow same-named ones).
    """


# --------------------------------------------------------------------------------------------
# hardware
# --------------------------------------------------------------------------------------------


@cli.group("hardware")
def hardware_group() -> None:
    """List and inspect accelerator specs."""


@hardware_group.command("list")
@_format_option
def hardware_list(fmt: str | None, as_json: bool) -> None:
    """Accelerators on the search path: key figures (vendor units) and a description."""
    rows: list[dict] = []
    for name in list_hardware():
        try:
            hw = load_hardware(name)
        except SpecError as exc:     # one broken file does not hide the others
            rows.append({"name": name, "description": _unloadable(exc)})
            continue
        tf = {p: hw.dense_flop_per_s.get(p, float("nan")) / units.TFLOP
              for p in ("bf16", "fp8", "fp4")}
        rows.append({"name": hw.name, "vendor": hw.vendor,
                     "hbm_gb": hw.hbm_capacity_bytes / units.GB,
                     "hbm_tb_per_s": hw.hbm_bw_bytes_per_s / units.TB,
                     **{f"{p}_tflop_per_s": v for p, v in tf.items()},
                     "scale_up_gpus": hw.scale_up_domain_gpus,
                     "rental_usd_per_gpu_hour": hw.price.get("rental_usd_per_gpu_hour",
                                                             float("nan")),
                     "description": hw.description, "file": hw.path})
    keys = ["name", "vendor", "hbm_gb", "hbm_tb_per_s", "bf16_tflop_per_s", "fp8_tflop_per_s",
            "fp4_tflop_per_s", "scale_up_gpus", "rental_usd_per_gpu_hour", "description", "file"]
    rows = [{k: r.get(k) for k in keys} for r in rows]
    fmt = _chosen_format(fmt, as_json)
    if fmt in ("table", "markdown"):      # no pandas here: 'hardware list' starts fast
        rows = [{k: v for k, v in r.items() if k != "file"} for r in rows]
    click.echo(_render(rows, fmt))


def _unloadable(exc: SpecError) -> str:
    """The listing's cell for a spec file that does not load: the reason, one line."""
    return "NOT LOADABLE: " + _one_line(str(exc)).split(": ", 1)[-1]


def _hardware_lines(hw: HardwareSpec) -> list[str]:
    lines = [f"{hw.name}  ({hw.vendor})", f"  {hw.description}"]
    head = []
    if hw.aliases:
        head.append(("aliases", ", ".join(hw.aliases)))
    head.append(("file", hw.path))
    lines += _kv(head)

    lines.append("")
    lines.append("compute (dense tensor-core peak)")
    lines += _kv((p, f"{_g(v / units.TFLOP)} TFLOP/s") for p, v in hw.dense_flop_per_s.items())
    if hw.measured_matmul_flop_per_s:
        lines.append("measured matmul")
        lines += _kv((p, f"{_g(v / units.TFLOP)} TFLOP/s "
                         f"({_g(100.0 * v / hw.dense_flop_per_s[p], 3)}% of peak)")
                     for p, v in hw.measured_matmul_flop_per_s.items())

    lines.append("")
    lines.append("memory and interconnect")
    lines += _kv([
        ("HBM capacity", f"{_g(hw.hbm_capacity_bytes / units.GB)} GB"),
        ("HBM bandwidth", f"{_g(hw.hbm_bw_bytes_per_s / units.GB)} GB/s"),
        ("scale-up bandwidth", f"{_g(hw.scale_up_bw_bytes_per_s / units.GB)} GB/s per GPU, "
                               "one direction"),
        ("scale-up domain", f"{hw.scale_up_domain_gpus} GPUs"),
        ("scale-out bandwidth", f"{_g(hw.scale_out_bw_bytes_per_s / units.GBIT)} Gbit/s per GPU"),
        ("TDP", f"{_g(hw.tdp_w)} W"),
    ])

    tag = " (assumed)" if hw.node_values_assumed else ""
    lines.append("")
    lines.append("node" + tag)
    lines += _kv([
        ("GPUs per node", f"{hw.gpus_per_node}"),
        ("host DRAM", f"{_g(hw.host_dram_capacity_bytes / units.GB)} GB{tag}"),
        ("host DRAM -> GPU", f"{_g(hw.host_dram_bw_bytes_per_s / units.GB)} GB/s per GPU{tag}"),
        ("NVMe", f"{_g(hw.nvme_capacity_bytes / units.TB)} TB{tag}"),
        ("NVMe bandwidth", f"{_g(hw.nvme_bw_bytes_per_s / units.GB)} GB/s per node{tag}"),
    ])

    lines.append("")
    lines.append("price")
    pr = hw.price
    price_rows = []
    for key, label, unit in (("rental_usd_per_gpu_hour", "rental", "USD/GPU-hour"),
                             ("tco_usd_per_gpu_hour", "TCO", "USD/GPU-hour"),
                             ("capex_usd_per_gpu", "capex", "USD/GPU")):
        if key in pr:
            date_key = key.split("_usd")[0] + "_date"
            date = pr.get(date_key)
            price_rows.append((label, f"{_g(pr[key])} {unit}" + (f" ({date})" if date else "")))
    lines += _kv(price_rows) if price_rows else ["  (none listed)"]

    for title, table in (("sources", hw.sources), ("notes", hw.notes)):
        if table:
            lines.append("")
            lines.append(title)
            lines += _kv(table.items())
    return lines


@hardware_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the spec as JSON (SI units).")
def hardware_show(name: str, as_json: bool) -> None:
    """Show one accelerator (NAME: name, alias or path to a TOML file)."""
    hw = load_hardware(name)
    if as_json:
        _dump_json(hw.to_dict())
        return
    click.echo("\n".join(_hardware_lines(hw)))


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------


@cli.group("models")
def models_group() -> None:
    """List and inspect model architectures."""


def _kind(m: ModelSpec) -> str:
    return "MoE" if m.is_moe else "dense"


@models_group.command("list")
def models_list() -> None:
    """Bundled models: name, kind, total and active parameters (billions)."""
    rows = []
    for name in list_models():
        try:
            m = load_model(name)
        except SpecError as exc:     # one broken file does not hide the others
            rows.append((name, _unloadable(exc), "", "", ""))
            continue
        rows.append((m.name, _kind(m), m.attention_kind.upper(),
                     f"{m.total_params / 1e9:.1f}", f"{m.active_params() / 1e9:.1f}"))
    click.echo(_table(["NAME", "KIND", "ATTENTION", "TOTAL (B)", "ACTIVE (B)"], rows,
                      right=(3, 4)))


def _model_lines(m: ModelSpec) -> list[str]:
    d = m.to_dict()["derived"]
    lines = [f"{m.name}  ({_kind(m)}, {m.attention_kind.upper()})"]
    lines += _kv([("aliases", ", ".join(m.aliases) or "-"), ("hf repo", m.hf_repo),
                  ("file", m.path), ("source", m.source),
                  ("weight precision", m.weight_precision),
                  ("expert precision", m.expert_precision)])

    lines += ["", "architecture"]
    lines += _kv([("layers", str(m.n_layers)), ("hidden size", str(m.hidden_size)),
                  ("vocab size", str(m.vocab_size)),
                  ("tied embeddings", "yes" if m.tied_embeddings else "no"),
                  ("max position embeddings", str(m.max_position_embeddings))])

    lines += ["", "attention"]
    att = [("kind", m.attention_kind), ("query heads", str(m.n_q_heads)),
           ("KV heads", str(m.n_kv_heads)), ("head dim qk / v", f"{m.head_dim_qk} / {m.head_dim_v}"),
           ("bias", "yes" if m.attention_bias else "no")]
    if m.is_mla:
        att += [("q LoRA rank", str(m.q_lora_rank)), ("KV LoRA rank", str(m.kv_lora_rank)),
                ("qk nope / rope head dim", f"{m.qk_nope_head_dim} / {m.qk_rope_head_dim}")]
    if m.n_sliding_window_layers:
        att += [("sliding window", f"{m.sliding_window_tokens} tokens on "
                                   f"{m.n_sliding_window_layers} of {m.n_layers} layers")]
    lines += _kv(att)

    lines += ["", "feed-forward"]
    ffn = [("dense layers", str(m.n_dense_layers))]
    if m.n_dense_layers:
        ffn.append(("dense intermediate size", str(m.dense_intermediate_size)))
    if m.is_moe:
        ffn += [("MoE layers", str(m.n_moe_layers)),
                ("routed experts", str(m.n_routed_experts)),
                ("experts per token", str(m.experts_per_token)),
                ("shared experts", str(m.n_shared_experts)),
                ("expert intermediate size", str(m.expert_intermediate_size))]
    if m.n_mtp_modules:
        ffn.append(("MTP modules", str(m.n_mtp_modules)))
    lines += _kv(ffn)

    kv_note = (" (full-attention layers; windowed layers are bounded by the window)"
               if m.n_sliding_window_layers else "")
    lines += ["", "derived"]
    der = [("total params", f"{d['total_params'] / 1e9:.2f} B"),
           ("active params", f"{d['active_params'] / 1e9:.2f} B (incl. input embedding; "
                             f"{d['active_params_excluding_embedding'] / 1e9:.2f} B without)"),
           ("KV bytes/token bf16", f"{d['kv_bytes_per_token_bf16']:,.0f}{kv_note}"),
           ("KV bytes/token fp8", f"{d['kv_bytes_per_token_fp8']:,.0f}{kv_note}")]
    if m.n_mtp_modules:
        der.append(("MTP params per module", f"{d['mtp_params_per_module'] / 1e9:.2f} B"))
    lines += _kv(der)
    return lines


@models_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the spec and derived counts as JSON.")
def models_show(name: str, as_json: bool) -> None:
    """Show one model (NAME: name, alias or path to a TOML file)."""
    m = load_model(name)
    if as_json:
        _dump_json(m.to_dict())
        return
    click.echo("\n".join(_model_lines(m)))


# --------------------------------------------------------------------------------------------
# roofline
# --------------------------------------------------------------------------------------------

_PRECISIONS = click.Choice(list(units.PRECISIONS))


def _numeric_axis_options(func):
    """One ``--name`` option per numeric axis of the engine; unset means engine default."""
    for name, (default, unit, lo, hi, integer) in reversed(list(NUMERIC_AXES.items())):
        rng = f"[{lo:g}, {hi:g}]" if math.isfinite(hi) else f">= {lo:g}"
        func = click.option(f"--{name.replace('_', '-')}", name, type=ValueParam(name),
                            default=None, help=f"{unit}; {rng} (default {default:g})")(func)
    return func


_W = 10  # width of the number column in the roofline report
_K = 18  # width of the label column in the roofline report


def _fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:{_W}.3f} ms"


def _fmt_gb(nbytes: float) -> str:
    return f"{nbytes / units.GB:{_W}.3f} GB"


def _fmt_num(x: float, decimals: int = 1) -> str:
    return f"{x:{_W},.{decimals}f}" if math.isfinite(x) else f"{x!s:>{_W}}"


def _fmt_text(x: Any) -> str:
    return f"{x!s:>{_W}}"


def _roofline_text(ds, point: dict[str, Any]) -> str:
    from ..engine import RESOURCES

    v = {k: ds[k].item() for k in ds.data_vars if "op" not in ds[k].dims}
    model, hw = ds["model"].item(), ds["hardware"].item()
    par = " ".join(f"{k}={point.get(k, STRUCT_AXES[k])}" for k in ("tp", "dp", "ep"))
    lines = [f"{model} on {hw}  [{ds.attrs.get('mode')}]  {par}"]
    if not v["fits"]:
        lines.insert(0, f"*** DOES NOT FIT: {_g(v['hbm_used_bytes_per_gpu'] / units.GB, 4)} GB "
                        f"per GPU needed, {_g(load_hardware(hw).hbm_capacity_bytes / units.GB)} "
                        f"GB on the device (max batch {v['max_batch_size']:.0f}); the figures "
                        "below are not reachable ***")
    axes = {k: point.get(k, d[0]) for k, d in NUMERIC_AXES.items()}
    lines.append("  " + " ".join(f"{k}={_g(x)}" for k, x in axes.items()))
    extra = {k: x for k, x in point.items() if k not in axes and k not in ("tp", "dp", "ep")}
    if extra:
        lines.append("  " + " ".join(f"{k}={_g(x) if isinstance(x, float) else x}"
                                     for k, x in extra.items()))

    def part(prefix, resources, binding):
        return [(r, _fmt_ms(v[f"{prefix}_{r}_s"]) + ("  <- binding" if r == binding else ""))
                for r in resources]

    lines += ["", "decode (one step)"]
    rows = part("decode", RESOURCES, v["decode_binding_resource"])
    rows += [("draft", _fmt_ms(v["decode_draft_s"])),
             ("step", _fmt_ms(v["decode_step_s"])),
             ("binding resource", _fmt_text(v["decode_binding_resource"])),
             ("tokens per step", _fmt_num(v["tokens_per_step"], 3)),
             ("tok/s per GPU", _fmt_num(v["decode_tokens_per_s_per_gpu"])),
             ("tok/s per user", _fmt_num(v["decode_tokens_per_s_per_user"])),
             ("TPOT", _fmt_ms(v["tpot_s"])),
             ("expert efficiency", _fmt_num(100.0 * v["expert_efficiency_frac"]) + " %")]
    lines += _kv(rows, width=_K)

    lines += ["", "prefill (one pass)"]
    rows = part("prefill", [r for r in RESOURCES + ("restore",) if f"prefill_{r}_s" in v],
                v["prefill_binding_resource"])
    rows += [("step", _fmt_ms(v["prefill_step_s"])),
             ("binding resource", _fmt_text(v["prefill_binding_resource"])),
             ("tok/s per GPU", _fmt_num(v["prefill_tokens_per_s_per_gpu"])),
             ("TTFT", _fmt_ms(v["ttft_s"]))]
    lines += _kv(rows, width=_K)

    lines += ["", "memory per GPU"]
    lines += _kv([("weights", _fmt_gb(v["weight_bytes_per_gpu"])),
                  ("KV cache", _fmt_gb(v["kv_bytes_per_gpu"])),
                  ("activations", _fmt_gb(v["activation_bytes_per_gpu"])),
                  ("used", _fmt_gb(v["hbm_used_bytes_per_gpu"])
                   + f" of {_g(load_hardware(hw).hbm_capacity_bytes / units.GB)} GB"),
                  ("fits", _fmt_text("yes" if v["fits"] else "NO")),
                  ("max batch size", _fmt_num(v["max_batch_size"], 0))], width=_K)
    if "op" in ds.dims:
        for phase in ("decode", "prefill"):
            rows = [(str(op), _fmt_ms(float(t)), str(r), str(s)) for op, t, r, s in zip(
                ds.op.values, ds[f"{phase}_op_time_s"].values, ds[f"{phase}_op_resource"].values,
                ds[f"{phase}_op_source"].values) if math.isfinite(float(t))]
            lines += ["", f"{phase} operations (time per step)"]
            lines.append(_table(["OP", "TIME", "RESOURCE", "SOURCE"], rows, right=(1,)))
    return "\n".join(lines)


@cli.command("roofline")
@click.option("--model", "-m", default="Llama-3.1-8B", show_default=True,
              help="Model name, alias or TOML path.")
@click.option("--hardware", "-H", "hardware", default="H100-SXM", show_default=True,
              help="Hardware name, alias or TOML path.")
@click.option("--tp", type=ValueParam("tp"), default=None, help="Tensor-parallel degree (default 1).")
@click.option("--dp", type=ValueParam("dp"), default=None,
              help="Attention data-parallel degree (default 1); tp x dp GPUs per instance.")
@click.option("--ep", type=ValueParam("ep"), default=None, help="Expert-parallel degree (default 1).")
@_numeric_axis_options
@click.option("--weight-precision", type=_PRECISIONS, default=None,
              help="Non-expert weights (default: the model's).")
@click.option("--moe-precision", type=_PRECISIONS, default=None,
              help="Routed-expert weights (default: the model's).")
@click.option("--kv-precision", type=_PRECISIONS, default=None, help="KV cache (default bf16).")
@click.option("--attention-precision", type=_PRECISIONS, default=None,
              help="Attention core math (default bf16).")
@click.option("--dispatch-precision", type=_PRECISIONS, default=None,
              help="MoE all-to-all dispatch (default fp8).")
@click.option("--combine-precision", type=_PRECISIONS, default=None,
              help="MoE all-to-all combine (default bf16).")
@click.option("--overlap", type=click.Choice(list(typing.get_args(Overlap))), default=None,
              help="Overlap policy (default none).")
@click.option("--cache-tier", type=click.Choice(list(typing.get_args(CacheTier))), default=None,
              help="Where the prefix cache lives (default dram).")
@click.option("--redundant-experts", type=ValueParam("redundant_experts"), default=None,
              help="Extra expert replicas for load balance (default 0).")
@click.option("--expert-skew", type=ValueParam("expert_skew"), default=None,
              help="Zipf skew of expert popularity, [0, 4] (default: configs/realism.toml "
                   "[experts] default_skew).")
@click.option("--context-cv", type=ValueParam("context_cv"), default=None,
              help="Coefficient of variation of per-sequence context across attention-DP "
                   "ranks, [0, 10] (default: configs/realism.toml [dp_attention]).")
@click.option("--draft-model", default=None,
              help="Separate draft model for --draft-depth (default: the model's MTP module).")
@click.option("--ideal", is_flag=True, help="Pure roofline: realism terms off, parts combined by max.")
@click.option("--realism", "realism", type=click.Choice(["measured", "roofline"]),
              default="measured", show_default=True,
              help="Cost ops from the measured kernel tables where they cover them, or keep "
                   "every op on the realistic roofline.")
@click.option("--ops", "show_ops", is_flag=True,
              help="Also report each operation's time per step, resource and source "
                   "(measured / interpolated / extrapolated / roofline).")
@click.option("--json", "as_json", is_flag=True,
              help="Print every result variable and the attributes as one JSON object.")
def roofline(model: str, hardware: str, ideal: bool, realism: str, show_ops: bool,
             as_json: bool, draft_model: str | None, **options: Any) -> None:
    """Evaluate prefill and decode at ONE operating point.

    Options left unset keep the engine's defaults (precisions: the model's own).
    """
    from ..engine import evaluate

    point = {k: x for k, x in options.items() if x is not None}
    ds = evaluate(model, hardware, ideal=ideal, draft_model=draft_model, realism=realism,
                  detail="ops" if show_ops else "resources", **point)
    if as_json:
        out: dict[str, Any] = {"model": ds["model"].item(), "hardware": ds["hardware"].item()}
        out.update({k: _json_value(ds[k].values) for k in ds.data_vars})
        if show_ops:
            out["op"] = [str(x) for x in ds.op.values]
        out["units"] = {k: ds[k].attrs.get("units", "") for k in ds.data_vars}
        out["inputs"] = dict(point, ideal=ideal, realism=realism,
                             **({"draft_model": draft_model} if draft_model else {}))
        out["attrs"] = {k: _json_value(x) for k, x in ds.attrs.items()}
        _dump_json(out)
        return
    if draft_model:
        point["draft_model"] = draft_model
    click.echo(_roofline_text(ds, point))


# --------------------------------------------------------------------------------------------
# validate
# --------------------------------------------------------------------------------------------

def _validation_json(results, summary) -> str:
    records = [{k: _json_value(v) for k, v in r.items()} for r in results.to_dict("records")]
    return json_text({"cases": records, "summary": summary})


def _validation_text(results, summary) -> str:
    from ..analysis import validation

    rows = [(r.case_id, r.phase, r.hardware, r.metric, validation.format_number(r.predicted),
             validation.format_number(r.published),
             f"{r.ratio:.3f}", f"{r.abs_log_error:.3f}") for r in results.itertuples()]
    lines = [_table(["CASE", "PHASE", "HARDWARE", "METRIC", "PREDICTED", "PUBLISHED", "RATIO",
                     "|LN ERR|"], rows, right=(4, 5, 6, 7)), ""]
    groups = [("all", summary["overall"])]
    groups += [(f"phase {k}", v) for k, v in summary["by_phase"].items()]
    groups += [(f"hardware {k}", v) for k, v in summary["by_hardware"].items()]
    srows = [(name, str(s["n_cases"]), f"{s['median_abs_log_error']:.3f}",
              f"{s['worst_abs_log_error']:.3f}", f"{s['geomean_ratio']:.3f}", s["worst_case"])
             for name, s in groups]
    lines.append(_table(["SUMMARY", "CASES", "MEDIAN |LN ERR|", "WORST |LN ERR|", "GEOMEAN RATIO",
                         "WORST CASE"], srows, right=(1, 2, 3, 4)))
    return "\n".join(lines)


@cli.command("validate")
@click.option("--cases", "cases_path", required=True, metavar="FILE.csv",
              help="Case file (columns in docs/VALIDATION.md), e.g. validation/dev_cases.csv.")
@click.option("--json", "as_json", is_flag=True, help="Print cases and summary as one JSON object.")
@click.option("--output", "-o", "output", default=None, metavar="FILE",
              help="Also write the results: FILE.json (cases + summary) or FILE.csv (cases).")
def validate(cases_path: str, as_json: bool, output: str | None) -> None:
    """Predict every case of a case file and compare with the published figure.

    Reports predicted, published, ratio (predicted / published) and |ln ratio| per case,
    then the median and worst |ln ratio| overall, by phase and by hardware. Nothing is
    fitted: the engine runs with the bundled realism constants.
    """
    from ..analysis import validation

    suffix = os.path.splitext(output)[1].lower().lstrip(".") if output else ""
    if output is not None and suffix not in ("json", "csv"):
        raise SpecError(f"--output {output!r}: the file name must end in .json or .csv")
    if output is not None:
        check_target(output)
    cases = validation.load_cases(cases_path)
    results = validation.predict(cases)
    summary = validation.summarize(results)
    json_text = _validation_json(results, summary)
    if output is not None:
        text = json_text + "\n" if suffix == "json" else results.to_csv(index=False)
        write_text_atomic(output, text)
    click.echo(json_text if as_json else _validation_text(results, summary))


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; exits with 0, or 2 on a bad input (one stderr line)."""
    return cli.main(args=list(argv) if argv is not None else None, prog_name=PROG)


if __name__ == "__main__":  # pragma: no cover
    main()


# --------------------------------------------------------------------------------------------
# factory commands (defined in the factory layer, registered here)
# --------------------------------------------------------------------------------------------

from .factory import compare_cmd, simulate_cmd  # noqa: E402

cli.add_command(compare_cmd)
cli.add_command(simulate_cmd)

# questions (best-draft, max-batch, cheapest, pareto, tornado, montecarlo): questions_cli.py
from .questions import COMMANDS as _QUESTION_COMMANDS  # noqa: E402

for _cmd in _QUESTION_COMMANDS:
    cli.add_command(_cmd)

# sweep (grids to .nc/.zarr/.csv/.parquet, plots, dask): sweep_cli.py
from .sweep import sweep_cmd  # noqa: E402

cli.add_command(sweep_cmd)

# plan (GPU budget and targets -> recommended deployment): plan_cli.py
from .plan import plan_cmd  # noqa: E402

cli.add_command(plan_cmd)

# prices list|show, configs list|show: catalog_cli.py
from .catalog import COMMANDS as _CATALOG_COMMANDS  # noqa: E402

for _cmd in _CATALOG_COMMANDS:
    cli.add_command(_cmd)
