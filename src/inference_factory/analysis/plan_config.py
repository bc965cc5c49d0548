"""What a plan writes: the factory config of a recommendation (``plan --emit-config``) and the
front of tokens/s per user against $/M output tokens (``plan --plot``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..axes import NUMERIC_AXES
from .economics import CostModel
from ..errors import SpecError
from ..specs import load_hardware, load_model


if TYPE_CHECKING:
    from .plan import PlanResult


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


def config_toml(result: PlanResult, hardware: str | None = None, *, price: str | None = None,
                n_requests: int = 20000, target_utilization: float = 0.8) -> str:
    """A factory config (``simulate --config``) of one recommendation: the pools' hardware
    and shapes, the levers the recommendation uses, one workload class of ``isl`` / ``osl``
    tokens, the targets as SLOs, and an arrival rate that loads the recommended deployment
    (the load given to :func:`plan`, else the GPU budget) to ``target_utilization``."""
    from ..specs.realism import load_realism
    from ..specs.prices import load_prices

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
    load = req.get("load_output_tokens_per_s")
    gpus = float(r["gpus_for_load"]) if load is not None and "gpus_for_load" in r else req["gpus"]
    rate = (load if load is not None else out_per_gpu * req["gpus"]) * target_utilization / osl
    depth = int(r["draft_depth"])
    batch_per_gpu = max(1, int(round(float(r["batch_size"]) * int(r["dp"])
                                     / (int(r["tp"]) * int(r["dp"])))))
    prefill_tokens = max(1, int(round(float(r["prefill_batch_size"]) * isl
                                      / int(r["prefill_tp"]))))
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
    lines = [
        "# Written by 'inference-factory plan': the recommended deployment of "
        f"{m.name} on {r['hardware']}",
        f"# for {isl} prompt / {osl} output tokens per request, budget {req['gpus']} GPUs, "
        f"objective {req['objective']}.",
        f"# Plan: {r['mode']}, decode tp={int(r['tp'])} dp={int(r['dp'])} ep={int(r['ep'])}, "
        f"batch {float(r['batch_size']):g}, draft depth {depth}, "
        f"{out_per_gpu:,.0f} output tokens/s/GPU all-in; arrival rate sized for "
        f"{gpus:g} GPUs at {target_utilization:g} utilization.",
        *prec_note,
        "",
        f"name = {_toml_value('plan-' + str(r['hardware']).lower())}",
        f"description = {_toml_value(desc)}",
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
        f"tp = {int(r['prefill_tp'])}",
        f"dp = {int(r['prefill_dp'])}",
        f"ep = {int(r['prefill_ep'])}",
        f"tokens_per_gpu = {prefill_tokens}",
        f"unit_gpus = {int(r['prefill_tp']) * int(r['prefill_dp'])}",
        "",
        "[decode]",
        f"hardware = {_toml_value(r['hardware'])}",
        f"tp = {int(r['tp'])}",
        f"dp = {int(r['dp'])}",
        f"ep = {int(r['ep'])}",
        f"max_batch_per_gpu = {batch_per_gpu}",
        f"max_draft_depth = {max(depth, 1)}",
        f"unit_gpus = {int(r['tp']) * int(r['dp'])}",
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
        f"target_utilization = {_toml_value(float(target_utilization))}",
        "",
        "[economics]",
        f"cost_basis = {_toml_value(basis)}",
    ]
    for k, v in (req.get("cost") or {}).items():
        if k in _CONFIG_COST_KEYS and v is not None and v != getattr(CostModel(), k):
            lines.append(f"{k} = {_toml_value(float(v))}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# the Pareto front as a figure
# --------------------------------------------------------------------------------------------


def plot_front(result: PlanResult, path, *, size: tuple[float, float] = (8.0, 5.0),
               dpi: int = 100):
    """Draw each hardware's front (all-in output tokens/s per GPU against tokens/s per user)
    with its recommendation starred and the TPOT target as a vertical line; write ``path``."""
    from pathlib import Path

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..output.files import atomic_output

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
    if req.get("tpot_s"):
        ax.axvline(1.0 / req["tpot_s"], color="0.4", linestyle="--",
                   label=f"TPOT target {req['tpot_s'] * 1e3:g} ms")
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
