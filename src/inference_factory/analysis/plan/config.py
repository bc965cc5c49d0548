"""What a plan writes: the factory config of a recommendation (``plan --emit-config``) and the
front of tokens/s per user against $/M output tokens (``plan --plot``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...axes import NUMERIC_AXES
from ..economics import CostModel
from ...errors import SpecError
from ...specs import load_hardware, load_model


if TYPE_CHECKING:
    from .search import PlanResult


# --------------------------------------------------------------------------------------------
# the recommendation as a factory config
# --------------------------------------------------------------------------------------------


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


#: CostModel fields a factory config's [economics] table takes.
_CONFIG_COST_KEYS = ("rental_usd_per_gpu_hour", "capex_usd_per_gpu", "depreciation_years",
                     "residual_frac", "pue", "usd_per_kwh")


#: The plan's figures an emitted config carries for ``simulate`` to compare against, as
#: ``#plan KEY = VALUE`` comment lines (a factory config's schema has no table for them);
#: :func:`inference_factory.factory.plan_check.plan_check` reads them back.
PLAN_FIGURES = ("mode", "hardware", "gpus", "decode_instances", "prefill_instances",
                "decode_gpus", "prefill_gpus", "batch_per_gpu", "draft_depth",
                "request_rate_per_s", "output_tokens_per_s_per_gpu",
                "decode_tokens_per_s_per_gpu", "prefill_tokens_per_s_per_gpu", "ttft_s",
                "tpot_s", "usd_per_mtok_output_all_in", "decode_binding_resource",
                "utilization", "target_utilization")
#: Arrival rate as a share of the plan's sustained rate x utilisation: just under 1 so that
#: ``simulate``'s whole-instance sizing (a ceiling) lands on the plan's instance counts and
#: not one above them from float rounding. A numerical guard, not a model constant.
_RATE_GUARD = 1.0 - 1e-6


def config_path(path, hardware: str, several: bool) -> str:
    """Where ``--emit-config FILE.toml`` writes one device's recommendation: ``FILE.toml``
    for a single device, ``FILE-<device>.toml`` (the device's lower-case name) for several."""
    from pathlib import Path

    p = Path(path)
    if not several:
        return str(p)
    return str(p.with_name(f"{p.stem}-{str(hardware).lower()}{p.suffix}"))


def config_toml(result: PlanResult, hardware: str | None = None, *, price: str | None = None,
                n_requests: int = 20000, target_utilization: float | None = None) -> str:
    """A factory config (``simulate --config``) of one recommendation (``hardware``'s, else
    the first that meets the targets), carrying the plan's choices where a config can state
    them: each pool's shape and instance size (``unit_gpus``), the decode batch as
    ``max_batch_per_gpu``, the draft depth as ``max_draft_depth``, overlap, the precision
    lever, expert skew and redundancy, the prefill chunk, one workload class of ``isl`` /
    ``osl`` tokens with the plan's first-position acceptance, the targets as SLOs, and an
    arrival rate equal to the plan's sustained request rate (the whole fleet within the GPU
    budget) x ``target_utilization`` (default: the plan's, the one provisioning rule of
    ``configs/provisioning.toml``), so that ``simulate`` sizes the plan's instance counts at
    that utilisation; the config's ``[fleet] target_utilization`` is the plan's, so
    ``simulate`` sizes a ``--load`` to the GPU counts the plan gave for it. With a load given
    to :func:`plan` the rate is that load.
    The plan's own figures follow as ``#plan`` comment lines (:data:`PLAN_FIGURES`)."""
    from ...specs.realism import load_realism
    from ...specs.prices import load_prices

    req = result.request
    recs = result.recommendations
    if hardware is not None:
        hw_name = load_hardware(hardware).name
        recs = recs[recs["hardware"] == hw_name]
    recs = recs[recs["reason"].fillna("") == ""] if "reason" in recs else recs
    if recs.empty:
        raise SpecError("no recommendation meets the targets: nothing to write as a config")
    r = recs.iloc[0]
    m = load_model(req["model"])
    price_id = price or req.get("price")
    if price_id is None:
        ids = [p.id for p in load_prices().values() if p.model == m.name]
        if not ids:
            raise SpecError(f"--emit-config needs a price id for {m.name} (a factory config "
                            "names one): give --price ID (see 'inference-factory prices list')")
        price_id = ids[0]
    basis = req.get("cost_basis", "rental")
    if basis not in ("capex", "rental"):
        raise SpecError(f"--emit-config: a factory config charges capex or rental, not {basis!r}")
    isl, osl = int(req["isl"]), int(req["osl"])
    pd_split = r["mode"] == "disaggregated"
    out_per_gpu = float(r["output_tokens_per_s_per_gpu"])
    util_plan = float((req.get("cost") or {}).get("utilization", 1.0))
    from ...specs.provisioning import target_utilization as _target
    u = _target(target_utilization if target_utilization is not None
                else req.get("target_utilization"), "target_utilization")
    load = req.get("load_output_tokens_per_s")
    sustained = float(r["request_rate_per_s"])
    rate = (load / osl) if load is not None else sustained * u * _RATE_GUARD
    gpus = int(r["gpus"])
    depth = int(r["draft_depth"])
    tp, dp = int(r["tp"]), int(r["dp"])
    batch_per_gpu = max(1, int(round(float(r["batch_size"]) / tp)))
    ptp, pdp, pep = ((int(r["prefill_tp"]), int(r["prefill_dp"]), int(r["prefill_ep"]))
                     if pd_split else (tp, dp, int(r["ep"])))
    prefill_tokens = max(1, int(round(float(r["prefill_batch_size"]) * isl / ptp)))
    opts = req.get("engine_options", {})
    acc = float(opts.get("acceptance_rate", NUMERIC_AXES["acceptance_rate"][0]))
    skew = float(opts.get("expert_skew", load_realism().default_expert_skew))
    redundant = int(opts.get("redundant_experts", 0))
    desc = f"plan: {m.name} on {r['hardware']}, {r['mode']}"
    prof = str(r.get("precision") or ("low" if bool(r["low_precision"]) else "native"))
    prec_note = ([] if prof in ("native", "low") else [
        f"# Precision profile {prof} (weights {r.get('weight_precision')}, experts "
        f"{r.get('moe_precision')}, KV {r.get('kv_precision')}): a factory config's levers "
        "state native or low only;",
        f"# simulate runs it as low_precision = {_toml_value(bool(r['low_precision']))}."])
    n_d, n_p = int(r["decode_instances"]), int(r["prefill_instances"])
    fleet = (f"{n_p} prefill x {int(r['prefill_gpus'])} + {n_d} decode x "
             f"{int(r['decode_gpus'])} GPUs" if pd_split else
             f"{n_d} instances x {int(r['decode_gpus'])} GPUs")
    figures = dict(mode=str(r["mode"]), hardware=str(r["hardware"]), gpus=gpus,
                   decode_instances=n_d, prefill_instances=n_p,
                   decode_gpus=int(r["decode_gpus"]),
                   prefill_gpus=int(r["prefill_gpus"]) if pd_split else 0,
                   batch_per_gpu=float(r["batch_size"]) / tp, draft_depth=depth,
                   request_rate_per_s=sustained, output_tokens_per_s_per_gpu=out_per_gpu,
                   decode_tokens_per_s_per_gpu=float(r["decode_tokens_per_s_per_gpu"]),
                   prefill_tokens_per_s_per_gpu=float(r["prefill_tokens_per_s_per_gpu"]),
                   ttft_s=float(r["ttft_s"]), tpot_s=float(r["tpot_s"]),
                   usd_per_mtok_output_all_in=float(r["usd_per_mtok_output_all_in"]),
                   decode_binding_resource=str(r["decode_binding_resource"]),
                   utilization=util_plan, target_utilization=u)
    lines = [
        "# Written by 'inference-factory plan': the recommended deployment of "
        f"{m.name} on {r['hardware']}",
        f"# for {isl} prompt / {osl} output tokens per request, budget {req['gpus']} GPUs, "
        f"objective {req['objective']}.",
        f"# Plan: {r['mode']}, decode tp={tp} dp={dp} ep={int(r['ep'])}, batch "
        f"{float(r['batch_size']):g} per attention-DP rank ({batch_per_gpu} per GPU), draft "
        f"depth {depth}; {fleet} = {gpus} GPUs, {sustained:,.2f} requests/s sustained,",
        f"# {out_per_gpu:,.0f} output tokens/s/GPU all-in at full load; arrival rate = "
        + ("the plan's --load" if load is not None else
           f"sustained x {u:g} (the fleet's target utilization)") + ".",
        *prec_note,
        "",
        f"name = {_toml_value('plan-' + str(r['hardware']).lower())}",
        f"description = {_toml_value(desc)}",
        *([f"engine = {_toml_value(str(r.get('engine') or req['engine']))}"]
          if (r.get("engine") or req.get("engine")) else []),
        "",
        "[model]",
        f"name = {_toml_value(m.name)}",
        f"price = {_toml_value(price_id)}",
        "",
        "[workload]",
        f"n_requests = {int(n_requests)}",
        f"arrival_rate_per_s = {_toml_value(float(rate))}",
        "diurnal_amplitude = 0.0",
        "seed = 1",
        "",
        "[[workload.class]]",
        'name = "plan"',
        "share = 1.0",
        f"prompt_tokens_median = {isl}",
        "prompt_tokens_sigma = 0.0",
        f"output_tokens_median = {osl}",
        "output_tokens_sigma = 0.0",
        f"max_prompt_tokens = {isl}",
        f"max_output_tokens = {osl}",
        "system_prompt_tokens = 0",
        "n_system_prompts = 1",
        "system_prompt_zipf = 0.0",
        "turns_mean = 1.0",
        f"acceptance_rate = {_toml_value(acc)}",
        f"expert_skew = {_toml_value(skew)}",
        "",
        "[prefill]",
        f"hardware = {_toml_value(r['hardware'])}",
        f"tp = {ptp}",
        f"dp = {pdp}",
        f"ep = {pep}",
        f"tokens_per_gpu = {prefill_tokens}",
        f"unit_gpus = {ptp * pdp}",
        "",
        "[decode]",
        f"hardware = {_toml_value(r['hardware'])}",
        f"tp = {int(r['tp'])}",
        f"dp = {int(r['dp'])}",
        f"ep = {int(r['ep'])}",
        f"max_batch_per_gpu = {batch_per_gpu}",
        f"max_draft_depth = {depth}",
        f"unit_gpus = {tp * dp}",
        "",
        "[levers]",
        "continuous_batching = true",
        f"pd_split = {_toml_value(pd_split)}",
        "prefix_cache = false",
        f"speculative = {_toml_value(depth > 0)}",
        f"expert_balancing = {_toml_value(redundant > 0)}",
        f"redundant_experts = {redundant}",
        f"low_precision = {_toml_value(bool(r['low_precision']))}",
        f"overlap = {_toml_value(r['overlap'] == 'two-batch')}",
        "",
        "[slo]",   # targets not given keep the factory config's defaults
        *[f"{k} = {_toml_value(float(req[k]))}" for k in ("ttft_s", "tpot_s") if req[k]],
        "",
        "[fleet]",
        f"target_utilization = {_toml_value(u)}",
        "",
        "[economics]",
        f"cost_basis = {_toml_value(basis)}",
    ]
    for k, v in (req.get("cost") or {}).items():
        if k in _CONFIG_COST_KEYS and v is not None and v != getattr(CostModel(), k):
            lines.append(f"{k} = {_toml_value(float(v))}")
    for k in ("price_basis", "power_basis"):     # the plan's basis, so simulate prices alike
        v = (req.get("cost") or {}).get(k)
        if v is not None and v != getattr(CostModel(), k):
            lines.append(f"{k} = {_toml_value(str(v))}")
    lines += ["", "# The plan's own figures, for 'simulate' to compare against (#plan KEY = VALUE):",
              *[f"#plan {k} = {_toml_value(v)}" for k, v in figures.items()]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# the Pareto front as a figure
# --------------------------------------------------------------------------------------------


def _draw_band(ax, rec, color) -> None:
    """A recommendation's 80 % band (``plan(..., uncertainty=...)``): a shaded box spanning
    its tokens/s per user and its output tokens/s per GPU bands, with error bars."""
    from matplotlib.patches import Rectangle

    keys = ("tokens_per_s_per_user", "output_tokens_per_s_per_gpu")
    try:
        (x, xl, xh), (y, yl, yh) = ((float(rec[k]), float(rec[f"{k}_low"]),
                                     float(rec[f"{k}_high"])) for k in keys)
    except (KeyError, TypeError, ValueError):
        return
    if not all(np.isfinite(v) and v > 0 for v in (x, xl, xh, y, yl, yh)):
        return
    ax.add_patch(Rectangle((xl, yl), xh - xl, yh - yl, facecolor=color, alpha=0.15,
                           edgecolor=color, linewidth=0.8))
    ax.errorbar([x], [y], xerr=[[x - xl], [xh - x]], yerr=[[y - yl], [yh - y]],
                color=color, linewidth=1.0, capsize=3, linestyle="none")


def plot_front(result: PlanResult, path, *, size: tuple[float, float] = (8.0, 5.0),
               dpi: int = 100):
    """Draw each hardware's front (all-in output tokens/s per GPU against tokens/s per user)
    with its recommendation starred and the TPOT target as a vertical line; write ``path``."""
    from pathlib import Path

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ...output.files import atomic_output

    req = result.request
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for i, hw in enumerate(req["hardware"]):
        f = result.front[result.front["hardware"] == hw]
        if f.empty:
            continue
        ax.plot(f["tokens_per_s_per_user"], f["output_tokens_per_s_per_gpu"], marker="o",
                markersize=3, color=f"C{i % 10}", label=hw)
        rec = result.recommendations[result.recommendations["hardware"] == hw]
        if not rec.empty and not rec["reason"].fillna("").iloc[0]:
            ax.plot(rec["tokens_per_s_per_user"], rec["output_tokens_per_s_per_gpu"],
                    marker="*", markersize=14, color=f"C{i % 10}", markeredgecolor="black",
                    linestyle="none")
            _draw_band(ax, rec.iloc[0], f"C{i % 10}")
    if req.get("tpot_s"):
        ax.axvline(1.0 / req["tpot_s"], color="0.4", linestyle="--",
                   label=f"TPOT target {req['tpot_s'] * 1e3:g} ms")
    if "output_tokens_per_s_per_gpu_low" in result.recommendations:
        ax.plot([], [], color="0.5", linewidth=6, alpha=0.25,
                label="80% band of a recommendation")
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU, prefill included")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ttft = f", TTFT <= {req['ttft_s']:g} s" if req.get("ttft_s") else ""
    import textwrap

    title = (f"{req['model']}: Pareto fronts within {req['gpus']} GPUs, ISL {req['isl']} / "
             f"OSL {req['osl']}{ttft}; * = recommended ({req['objective']}, "
             f"{req['cost_basis']} cost" + (f", price {req['price']}" if req.get("price") else "")
             + ")")
    ax.set_title(textwrap.fill(title, int(size[0] * 72 / 6.5)), fontsize="small")
    target = Path(path)
    with atomic_output(target, option="--plot") as tmp:
        fig.savefig(tmp, dpi=dpi, format=target.suffix.lstrip(".").lower())
    return target
