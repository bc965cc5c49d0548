"""The ``roofline`` command: prefill and decode at ONE operating point, as a text report
(per-resource times, memory, throughput; ``--ops`` per operation) or one JSON object."""

from __future__ import annotations

import math
import typing
from typing import Any

import click

from .. import units
from ..axes import NUMERIC_AXES, STRUCT_AXES, CacheTier, Overlap
from .params import ValueParam, engine_option, precision_options
from ..specs import DEFAULT_HARDWARE, load_hardware, load_model
from .text import _dump_json, _g, _kv, _table




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


def _roofline_text(v: dict[str, Any], model: str, hw: str, mode: str, point: dict[str, Any],
                   ops=None, footing=None) -> str:
    """The report of one point: ``v`` each output variable's value, ``ops`` the Dataset of
    ``detail="ops"`` (its per-operation table) or None, ``footing`` what the point stands on
    (:func:`~inference_factory.analysis.footing.point_footing`) or None."""
    from ..engine import RESOURCES

    par = " ".join(f"{k}={point.get(k, STRUCT_AXES[k])}" for k in ("tp", "dp", "ep"))
    lines = [f"{model} on {hw}  [{mode}]  {par}"]
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
    if ops is not None:
        for phase in ("decode", "prefill"):
            rows = [(str(op), _fmt_ms(float(t)), str(r), str(s)) for op, t, r, s in zip(
                ops.op.values, ops[f"{phase}_op_time_s"].values,
                ops[f"{phase}_op_resource"].values, ops[f"{phase}_op_source"].values)
                if math.isfinite(float(t))]
            lines += ["", f"{phase} operations (time per step)"]
            lines.append(_table(["OP", "TIME", "RESOURCE", "SOURCE"], rows, right=(1,)))
    if footing is not None:
        lines += ["", "footing (each pass's op time by cost source)"]
        lines += _footing_rows(footing, detail=ops is not None)
    from ..output.tables import fit_lines

    return fit_lines("\n".join(lines))      # the axes and a DOES NOT FIT line, within 100


def _footing_rows(f: dict[str, Any], detail: bool) -> list[str]:
    """The footing section's lines, each wrapped within 100 columns; ``detail``: the tables'
    versions and families too."""
    from ..analysis.footing import PRECISION_WORDS

    def shares(ph):
        d = f[ph]
        return f"{d['footing']}: " + ", ".join(
            f"{k} {100 * x:.0f}%" for k, x in sorted(((k, x) for k, x in d.items()
                                                     if k != "footing"), key=lambda kv: -kv[1]))
    rows = [("decode", shares("decode")), ("prefill", shares("prefill")),
            ("tables", f["tables_detail" if detail else "tables"]
             or "none (every op on the realistic roofline)"),
            ("precisions", ", ".join(f"{w} {f['precisions'][k]}" for k, w in PRECISION_WORDS
                                     if k in f["precisions"]))]
    rows += [("precision", f["precision_note"])] if f["precision_note"] else []
    rows += [("engine", f["engine"])]
    return _kv(rows, width=_K)


#: The outputs whose 80 % band the one-point report shows: (label, variable, format).
_BAND_ROWS = (("decode tok/s per GPU", "decode_tokens_per_s_per_gpu", "num"),
              ("decode tok/s per user", "decode_tokens_per_s_per_user", "num"),
              ("TPOT", "tpot_s", "ms"), ("decode step", "decode_step_s", "ms"),
              ("prefill tok/s per GPU", "prefill_tokens_per_s_per_gpu", "num"),
              ("TTFT", "ttft_s", "ms"), ("max batch size", "max_batch_size", "num"))


def _band_text(v: dict[str, Any]) -> str:
    """The band section of the one-point report: ``value [low-high]``."""
    from ..output.tables import value_band

    def ms(x):
        return f"{x * 1e3:.3f} ms"

    def num(x):
        return f"{x:,.1f}"
    rows = [(label, value_band(v[k], v[k + "_low"], v[k + "_high"], ms if kind == "ms" else num))
            for label, k, kind in _BAND_ROWS if k + "_low" in v]
    w = v.get("band_structure_ln", 0.0)
    head = ["", f"80% band (components; model-structure term x{math.exp(w):.3f} each side "
                "on throughputs and times)"]
    return "\n" + "\n".join(head + _kv(rows, width=_K))


@click.command("roofline")
@click.option("--model", "-m", default="Llama-3.1-8B", show_default=True,
              help="Model name, alias or TOML path.")
@click.option("--hardware", "-H", "hardware", default=DEFAULT_HARDWARE, show_default=True,
              help="Hardware name, alias or TOML path (the one default of every command: "
                   "the device of configs/factory.toml).")
@click.option("--tp", type=ValueParam("tp"), default=None, help="Tensor-parallel degree (default 1).")
@click.option("--dp", type=ValueParam("dp"), default=None,
              help="Attention data-parallel degree (default 1); tp x dp GPUs per instance.")
@click.option("--ep", type=ValueParam("ep"), default=None, help="Expert-parallel degree (default 1).")
@_numeric_axis_options
@precision_options
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
@click.option("--uncertainty", is_flag=True,
              help="Add the 80% band (value [low-high]; JSON <name>_low/_high): component "
                   "spreads and assumption ranges, widened by the model-structure term "
                   "(docs/MODEL.md section 13).")
@click.option("--json", "as_json", is_flag=True,
              help="Print every result variable and the attributes as one JSON object.")
@engine_option(note="roofline takes its kernel choices on the device (all-reduce + norm "
               "fusion, the EP all-to-all); without --engine the device's tables decide.")
def roofline(model: str, hardware: str, ideal: bool, realism: str, show_ops: bool,
             as_json: bool, draft_model: str | None, uncertainty: bool = False,
             engine: str | None = None, **options: Any) -> None:
    """Evaluate prefill and decode at ONE operating point.

    Options left unset keep the engine's defaults (precisions: the model's own).
    """
    point = {k: x for k, x in options.items() if x is not None}
    from ..analysis.footing import point_footing
    from ..engine import evaluate_arrays, realism_mode, resolve_realism as _realism

    m, h = load_model(model), load_hardware(hardware)
    rl = _realism(ideal, realism)
    if engine is not None:
        from ..specs.engines import resolve_serving_engine

        rl = rl.for_engine(resolve_serving_engine(engine, "--engine", hardware=h.name))
    band = None
    if uncertainty:
        band = evaluate_arrays(m, h, realism=rl, draft_model=draft_model, uncertainty=True,
                               **point)
    if not show_ops:       # one point: arrays with each op's source, no Dataset
        import numpy as np

        res = evaluate_arrays(m, h, realism=rl, draft_model=draft_model, detail="ops", **point)
        footing = point_footing(m, h, res, point)
    if not (as_json or show_ops):
        mode = realism_mode(rl)
        if draft_model:
            point["draft_model"] = draft_model
        v = {k: np.asarray(x).item() for k, x in (band or res).items()
             if np.ndim(x) == 0}
        click.echo(_roofline_text(v, m.name, h.name, mode, point, footing=footing)
                   + (_band_text(v) if band is not None else ""))
        return
    from ..engine import evaluate

    ds = evaluate(model, hardware, ideal=ideal, draft_model=draft_model, realism=rl,
                  detail="ops" if show_ops else "resources", **point)
    if show_ops:
        footing = point_footing(m, h, {k: ds[k].values for k in ds.data_vars}, point)
    if as_json:
        out: dict[str, Any] = {"model": ds["model"].item(), "hardware": ds["hardware"].item()}
        out.update({k: ds[k].values for k in ds.data_vars})
        if show_ops:
            out["op"] = [str(x) for x in ds.op.values]
        out["footing"] = footing
        out["units"] = {k: ds[k].attrs.get("units", "") for k in ds.data_vars}
        out["inputs"] = dict(point, ideal=ideal, realism=realism,
                             **({"draft_model": draft_model} if draft_model else {}),
                             **({"engine": engine} if engine else {}))
        out["attrs"] = {k: x for k, x in ds.attrs.items()}
        if band is not None:
            out.update({k: x for k, x in band.items() if k.endswith(("_low", "_high"))
                        or k == "band_structure_ln"})
        _dump_json(out)
        return
    if draft_model:
        point["draft_model"] = draft_model
    v = {k: ds[k].item() for k in ds.data_vars if "op" not in ds[k].dims}
    click.echo(_roofline_text(v, ds["model"].item(), ds["hardware"].item(), ds.attrs.get("mode"),
                              point, ops=ds, footing=footing))
