"""Click commands for :mod:`inference_factory.questions` (thin: parse, call, print).

``best-draft``, ``max-batch``, ``cheapest``, ``pareto``, ``tornado`` and ``montecarlo``; each
prints a table, or with ``--json`` one JSON object. Registered on the root group at the bottom
of :mod:`inference_factory.cli`, whose ``main`` turns a SpecError into one stderr line and
exit status 2.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import click
import numpy as np
import pandas as pd

from . import questions as q
from ._io import json_text
from .economics import INPUT_TOKENS_PER_OUTPUT_TOKEN
from .engine import evaluate, to_dataframe
from .errors import SpecError

# --------------------------------------------------------------------------------------------
# parsing (display and syntax only)
# --------------------------------------------------------------------------------------------


def _scalar(text: str) -> Any:
    """'8' -> 8, '0.5' -> 0.5, 'fp8' -> 'fp8'."""
    t = text.strip()
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def _values(text: str) -> Any:
    parts = [p for p in text.split(",")]
    if any(not p.strip() for p in parts):
        raise SpecError(f"{text!r}: empty value in a comma-separated list")
    vals = [_scalar(p) for p in parts]
    return vals if len(vals) > 1 else vals[0]


def _assignments(items: Sequence[str], option: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SpecError(f"{option} {item!r}: expected NAME=VALUE or NAME=V1,V2,...")
        name, text = item.split("=", 1)
        name = name.strip().replace("-", "_")
        if not name or not text.strip():
            raise SpecError(f"{option} {item!r}: expected NAME=VALUE or NAME=V1,V2,...")
        if name in out:
            raise SpecError(f"{option} {name} is given twice")
        out[name] = _values(text)
    return out


def _ranges(items: Sequence[str], max_parts: int) -> dict[str, tuple]:
    form = "NAME=LOW:HIGH" + (" or NAME=LOW:MODE:HIGH" if max_parts == 3 else "")
    out: dict[str, tuple] = {}
    for item in items:
        if "=" not in item:
            raise SpecError(f"--range {item!r}: expected {form}")
        name, text = item.split("=", 1)
        name = name.strip().replace("-", "_")
        parts = text.split(":")
        if not name or len(parts) < 2 or len(parts) > max_parts or any(not p.strip() for p in parts):
            raise SpecError(f"--range {item!r}: expected {form}")
        if name in out:
            raise SpecError(f"--range {name} is given twice")
        out[name] = tuple(_scalar(p) for p in parts)
    if not out:
        raise SpecError(f"give at least one --range {form}")
    return out


def _int_values(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    vals = _values(text)
    vals = vals if isinstance(vals, list) else [vals]
    for v in vals:
        if not isinstance(v, int):
            raise SpecError(f"{option} {text!r}: {v!r} is not a whole number")
    return vals


def _names(items: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        out += [p.strip() for p in item.split(",") if p.strip()]
    return out


def _one(names: list[str]) -> Any:
    return names[0] if len(names) == 1 else names


def _title(ds) -> str:
    """'DeepSeek-V3 on H800-SXM, B200' from a result's coordinates."""
    def names(key):
        return ", ".join(str(v) for v in np.atleast_1d(ds[key].values)) if key in ds.coords else "?"
    return f"{names('model')} on {names('hardware')}"


# --------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------


def _cell(v: Any) -> Any:
    if isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _cell(v) for k, v in r.items()} for r in df.to_dict("records")]


def _emit(df: pd.DataFrame, as_json: bool, header: str = "", extra: dict | None = None) -> None:
    if as_json:
        attrs = {k: v for k, v in df.attrs.items() if isinstance(v, (str, int, float, list, dict))}
        obj = {"rows": _records(df), "attrs": attrs}
        obj.update(extra or {})
        click.echo(json_text(obj))
        return
    if header:
        click.echo(header)
    if df.empty:
        click.echo("(no rows)")
        return
    click.echo(df.to_string(index=False, float_format=lambda x: f"{x:.4g}", na_rep="-"))


def _tidy(ds, cols: Sequence[str]) -> pd.DataFrame:
    df = to_dataframe(ds)
    dims = [d for d in ds.dims]
    keep = [c for c in dims if c in df.columns] + [c for c in cols if c in df.columns]
    keep = list(dict.fromkeys(keep))
    out = df[keep].copy()
    out.attrs = {k: v for k, v in ds.attrs.items() if isinstance(v, str)}
    return out


# --------------------------------------------------------------------------------------------
# shared options
# --------------------------------------------------------------------------------------------


def _engine_options(func: Callable) -> Callable:
    func = click.option("--draft-model", default=None,
                        help="Separate draft model (default: the model's MTP module).")(func)
    func = click.option("--axis", "-a", "axes", multiple=True, metavar="NAME=V[,V...]",
                        help="Any engine axis or structural choice, e.g. -a kv_len=4096 "
                             "-a dp=32 -a kv_precision=fp8 (a list adds a dimension).")(func)
    func = click.option("--hardware", "-H", "hardware", multiple=True,
                        help="Hardware name, alias or TOML path (repeat or comma-separate for "
                             "several; default H800-SXM).")(func)
    func = click.option("--model", "-m", default="DeepSeek-V3", show_default=True,
                        help="Model name, alias or TOML path.")(func)
    return func


def _economics_options(func: Callable) -> Callable:
    opts = [
        click.option("--price", default=None, metavar="ID",
                     help="Price id from configs/prices.toml (needed for margins)."),
        click.option("--cost-basis", type=click.Choice(["rental", "capex", "tco"]), default=None,
                     help="How a GPU-hour is charged (default rental)."),
        click.option("--rental-usd-per-gpu-hour", type=click.FLOAT, default=None,
                     help="Override the hardware file's rental price."),
        click.option("--capex-usd-per-gpu", type=click.FLOAT, default=None,
                     help="Override the hardware file's purchase price."),
        click.option("--depreciation-years", type=click.FLOAT, default=None, help="Default 4."),
        click.option("--pue", type=click.FLOAT, default=None, help="Default 1.3."),
        click.option("--usd-per-kwh", type=click.FLOAT, default=None, help="Default 0.08."),
        click.option("--utilization", type=click.FLOAT, default=None,
                     help="Busy share of the GPU-hour, (0, 1] (default 1)."),
        click.option("--input-per-output", "input_tokens_per_output_token", type=click.FLOAT,
                     default=None,
                     help=f"Input tokens per output token (default "
                          f"{INPUT_TOKENS_PER_OUTPUT_TOKEN:.3f}: DeepSeek 608B/168B a day)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


_COST_KEYS = ("cost_basis", "rental_usd_per_gpu_hour", "capex_usd_per_gpu", "depreciation_years",
              "pue", "usd_per_kwh", "utilization")


def _or(value, default):
    return default if value is None else value


def _split_economics(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    cost = {k: options.pop(k) for k in _COST_KEYS if k in options}
    cost = q.cost_model(**{k: v for k, v in cost.items() if v is not None})
    econ = {"price": options.pop("price", None), "cost": cost,
            "input_tokens_per_output_token": _or(options.pop("input_tokens_per_output_token", None),
                                                 INPUT_TOKENS_PER_OUTPUT_TOKEN)}
    return econ, options


def _engine_kwargs(hardware: Sequence[str], axes: Sequence[str], draft_model: str | None,
                   *, single: bool = False) -> tuple[Any, dict[str, Any]]:
    hws = _names(hardware) or ["H800-SXM"]
    if single and len(hws) != 1:
        raise SpecError(f"--hardware: give one device for this command (got {hws})")
    kw = _assignments(axes, "--axis")
    if draft_model:
        kw["draft_model"] = draft_model
    return _one(hws), kw


def _ms(s: pd.Series) -> pd.Series:
    return s * 1e3


# --------------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------------


@click.command("best-draft")
@_engine_options
@click.option("--batch-size", default="1,2,4,8,16,32,64,128,256", show_default=True,
              help="Batch sizes (sequences per attention-DP rank), comma-separated.")
@click.option("--draft-depth", default="0,1,2,3,4", show_default=True,
              help="Draft depths to compare, comma-separated.")
@click.option("--metric", type=click.Choice(["decode_tokens_per_s_per_gpu",
                                             "decode_tokens_per_s_per_user"]),
              default="decode_tokens_per_s_per_gpu", show_default=True, help="What to maximise.")
@click.option("--all", "include_unfit", is_flag=True,
              help="Also consider depths whose batch does not fit in HBM.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def best_draft_cmd(model: str, hardware: Sequence[str], axes: Sequence[str], draft_model: str | None,
                   batch_size: str, draft_depth: str, metric: str, include_unfit: bool,
                   as_json: bool) -> None:
    """Best speculative draft depth per batch size (and any other axis given as a list)."""
    hw, kw = _engine_kwargs(hardware, axes, draft_model)
    ds = q.best_draft_depth(model, hw, batch_size=_int_values(batch_size, "--batch-size"),
                            draft_depth=_int_values(draft_depth, "--draft-depth"), metric=metric,
                            only_fitting=not include_unfit, **kw)
    df = _tidy(ds, ["best_draft_depth", f"best_{metric}", "best_decode_tokens_per_s_per_gpu",
                    "best_decode_tokens_per_s_per_user", "best_tpot_s", "speedup_over_no_draft"])
    if not as_json:
        df["best_tpot_s"] = _ms(df["best_tpot_s"])
        df = df.rename(columns={"best_tpot_s": "best_tpot_ms"})
    _emit(df, as_json, f"{_title(ds)}: {ds.attrs['question']}")


@click.command("max-batch")
@_engine_options
@click.option("--tpot-ms", type=click.FLOAT, default=None, help="TPOT SLO in milliseconds.")
@click.option("--min-user-tps", type=click.FLOAT, default=None,
              help="Minimum decode tokens/s per user.")
@click.option("--ttft-ms", type=click.FLOAT, default=None,
              help="TTFT SLO in milliseconds (searched over the prefill batch).")
@click.option("--max-batch", type=click.INT, default=4096, show_default=True,
              help="Top of the search grid.")
@click.option("--no-refine", is_flag=True, help="Answer on the geometric grid only.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def max_batch_cmd(model: str, hardware: Sequence[str], axes: Sequence[str], draft_model: str | None,
                  tpot_ms: float | None, min_user_tps: float | None, ttft_ms: float | None,
                  max_batch: int, no_refine: bool, as_json: bool) -> None:
    """Largest decode batch that fits and meets the TPOT / per-user SLOs (and largest prefill
    batch meeting a TTFT SLO)."""
    hw, kw = _engine_kwargs(hardware, axes, draft_model)
    ds = q.max_batch_meeting_slo(
        model, hw, tpot_s=tpot_ms / 1e3 if tpot_ms is not None else None,
        min_user_tokens_per_s=min_user_tps, ttft_s=ttft_ms / 1e3 if ttft_ms is not None else None,
        max_batch=max_batch, refine=not no_refine, **kw)
    cols = ["max_batch_size_meeting_slo", "slo_binding_constraint", "tpot_s",
            "decode_tokens_per_s_per_user", "decode_tokens_per_s_per_gpu",
            "max_prefill_batch_size_meeting_slo", "prefill_slo_binding_constraint", "ttft_s",
            "prefill_tokens_per_s_per_gpu"]
    df = _tidy(ds, cols)
    if not as_json:
        for c in ("tpot_s", "ttft_s"):
            if c in df:
                df[c] = _ms(df[c])
        df = df.rename(columns={"tpot_s": "tpot_ms", "ttft_s": "ttft_ms"})
    _emit(df, as_json, f"{_title(ds)}; SLO: {ds.attrs['slo']}")


@click.command("cheapest")
@_engine_options
@click.option("--parallelism", "-p", multiple=True, metavar="tp=8 | dp=8,ep=8",
              help="An instance shape to try (repeat for several).")
@click.option("--option", "-o", "choices", multiple=True, metavar="NAME=V1,V2",
              help="Other structural choices to cross, e.g. -o kv_precision=bf16,fp8.")
@click.option("--tpot-ms", type=click.FLOAT, default=None, help="TPOT SLO in milliseconds.")
@click.option("--ttft-ms", type=click.FLOAT, default=None, help="TTFT SLO in milliseconds.")
@click.option("--min-user-tps", type=click.FLOAT, default=None,
              help="Minimum decode tokens/s per user.")
@click.option("--metric", type=click.Choice(list(q.DOLLAR_METRICS)), default="usd_per_mtok_output",
              show_default=True, help="What to minimise.")
@_economics_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def cheapest_cmd(model: str, hardware: Sequence[str], axes: Sequence[str], draft_model: str | None,
                 parallelism: Sequence[str], choices: Sequence[str], tpot_ms: float | None,
                 ttft_ms: float | None, min_user_tps: float | None, metric: str, as_json: bool,
                 **options: Any) -> None:
    """Rank hardware x parallelism x options by $/M tokens among those meeting the SLOs."""
    econ, _ = _split_economics(options)
    hw, kw = _engine_kwargs(hardware, axes, draft_model)
    pars = [_assignments(p.split(","), "--parallelism") for p in parallelism] or None
    df = q.cheapest_meeting_slo(
        model, hw, parallelism=pars,
        options={k: v if isinstance(v, list) else [v]
                 for k, v in _assignments(choices, "--option").items()} or None,
        tpot_s=tpot_ms / 1e3 if tpot_ms is not None else None,
        ttft_s=ttft_ms / 1e3 if ttft_ms is not None else None,
        min_user_tokens_per_s=min_user_tps, metric=metric, **econ, **kw)
    if not as_json:
        for c in ("tpot_s", "ttft_s"):
            if c in df:
                df[c] = _ms(df[c])
        df = df.rename(columns={"tpot_s": "tpot_ms", "ttft_s": "ttft_ms"})
        drop = [c for c in ("model", "max_batch_size", "meets_slo") if c in df]
        df = df.drop(columns=drop)
    _emit(df, as_json, f"{model}: {df.attrs.get('metric')} ({df.attrs.get('cost_basis')} cost"
                       f"{', price ' + df.attrs['price'] if df.attrs.get('price') else ''}); "
                       f"SLO: {df.attrs.get('slo') or 'none'}")


@click.command("pareto")
@_engine_options
@click.option("--x", "x", default="decode_tokens_per_s_per_user", show_default=True,
              help="Variable on the x axis (maximised).")
@click.option("--y", "y", default="decode_tokens_per_s_per_gpu", show_default=True,
              help="Variable on the y axis (maximised).")
@click.option("--all", "include_unfit", is_flag=True, help="Keep points that do not fit in HBM.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def pareto_cmd(model: str, hardware: Sequence[str], axes: Sequence[str], draft_model: str | None,
               x: str, y: str, include_unfit: bool, as_json: bool) -> None:
    """Pareto front of tokens/s per GPU against tokens/s per user over the grid given with
    -a (e.g. -a batch_size=1,8,64,256 -a draft_depth=0,1,2)."""
    hw, kw = _engine_kwargs(hardware, axes, draft_model)
    ds = evaluate(model, hw, **kw)
    front = q.pareto_front(ds, x=x, y=y, only_fitting=not include_unfit)
    dims = [d for d in ds.dims]
    df = front[[c for c in dims if c in front] + [x, y]]
    df.attrs = dict(front.attrs)
    _emit(df, as_json, f"{_title(ds)}: {front.attrs.get('pareto', '')}")


@click.command("tornado")
@_engine_options
@click.option("--range", "-r", "ranges", multiple=True, metavar="NAME=LOW:HIGH",
              help="A lever or assumption and its range (repeat), e.g. -r acceptance_rate=0.6:0.9 "
                   "-r usd_per_kwh=0.05:0.15 -r kv_precision=bf16:fp8.")
@click.option("--metric", "metrics", multiple=True,
              help="Result variable (repeat); default usd_per_mtok_blended and, with --price, "
                   "gross_margin_frac.")
@_economics_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def tornado_cmd(model: str, hardware: Sequence[str], axes: Sequence[str], draft_model: str | None,
                ranges: Sequence[str], metrics: Sequence[str], as_json: bool, **options: Any) -> None:
    """One-at-a-time sensitivity of $/M tokens and margin, sorted by swing."""
    econ, _ = _split_economics(options)
    hw, kw = _engine_kwargs(hardware, axes, draft_model, single=True)
    df = q.tornado(model, hw, _ranges(ranges, 2), metrics=list(metrics) or None, **econ, **kw)
    base = df.attrs["base"]
    _emit(df, as_json,
          f"{df.attrs['model']} on {df.attrs['hardware']} ({df.attrs['cost_basis']} cost"
          f"{', price ' + df.attrs['price'] if df.attrs['price'] else ''}); at the operating "
          f"point: " + ", ".join(f"{k} = {v:.4g}" for k, v in base.items()))


@click.command("montecarlo")
@_engine_options
@click.option("--range", "-r", "ranges", multiple=True, metavar="NAME=LOW:HIGH[:...]",
              help="Uniform NAME=LOW:HIGH or triangular NAME=LOW:MODE:HIGH (repeat).")
@click.option("--n", "n", type=click.INT, default=1000, show_default=True, help="Samples.")
@click.option("--seed", type=click.INT, default=0, show_default=True, help="Random seed.")
@click.option("--method", type=click.Choice(["lhs", "random"]), default="lhs", show_default=True,
              help="Latin hypercube or plain random sampling.")
@click.option("--metric", "metrics", multiple=True,
              help="Result variable (repeat); default $/M output, $/M blended and, with "
                   "--price, gross_margin_frac.")
@_economics_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def montecarlo_cmd(model: str, hardware: Sequence[str], axes: Sequence[str], draft_model: str | None,
                   ranges: Sequence[str], n: int, seed: int, method: str, metrics: Sequence[str],
                   as_json: bool, **options: Any) -> None:
    """Distribution (percentiles) of $/M tokens and margin over assumption ranges."""
    econ, _ = _split_economics(options)
    hw, kw = _engine_kwargs(hardware, axes, draft_model, single=True)
    res = q.monte_carlo(model, hw, _ranges(ranges, 3), n=n, seed=seed, method=method,
                        metrics=list(metrics) or None, **econ, **kw)
    df = res.summary.reset_index()
    df.attrs = dict(res.summary.attrs)
    _emit(df, as_json, f"{df.attrs['model']} on {df.attrs['hardware']}: {n} samples ({method}, "
                       f"seed {seed}) of {df.attrs['ranges']}; statistics over samples that fit")


COMMANDS = (best_draft_cmd, max_batch_cmd, cheapest_cmd, pareto_cmd, tornado_cmd, montecarlo_cmd)
