"""The plan's candidates ranked: sizing for a load, the ranking on the objective, one
recommendation per device and the Pareto front (the candidates: :mod:`.candidates`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..pareto import pareto_mask
from ...kernels.serving import gpus_for_load

#: What a recommendation optimises: name -> "min" or "max".
OBJECTIVES: dict[str, str] = {"usd_per_mtok_output_all_in": "min",
                              "output_tokens_per_s_per_gpu": "max",
                              "tokens_per_s_per_user": "max"}


def _size_for_load(cand: pd.DataFrame, load: float, isl: int, osl: int,
                   target_utilization: float = 1.0) -> None:
    """GPUs each candidate needs for ``load`` output tokens/s at the target utilisation
    (the provisioning rule ``simulate`` applies: whole instances, busy ``u`` of the time),
    and ``load_share_frac``: the share of the load the candidate's own GPUs serve at it."""
    agg = cand["mode"] == "aggregated"
    u = target_utilization
    dec = gpus_for_load(tokens_per_s=load, tokens_per_s_per_gpu=cand[
        "decode_tokens_per_s_per_gpu"], instance_gpus=cand["decode_gpus"], target_utilization=u)
    pre = gpus_for_load(tokens_per_s=load * isl / osl, tokens_per_s_per_gpu=cand[
        "prefill_tokens_per_s_per_gpu"], instance_gpus=cand["prefill_gpus"],
        target_utilization=u)
    whole = gpus_for_load(tokens_per_s=load, tokens_per_s_per_gpu=cand[
        "output_tokens_per_s_per_gpu"], instance_gpus=cand["decode_gpus"], target_utilization=u)
    cand["gpus_for_load"] = np.where(agg, whole, dec + pre)
    cand["decode_gpus_for_load"] = np.where(agg, np.nan, dec)
    cand["prefill_gpus_for_load"] = np.where(agg, np.nan, pre)
    cand["load_share_frac"] = u * cand["output_tokens_per_s"].astype(float) / load


def _rank(cand: pd.DataFrame, objective: str) -> pd.DataFrame:
    """Feasible candidates first, best on the objective first; ties: fewer GPUs, then the
    smaller batch and depth (the cheaper deployment to run)."""
    sign = 1.0 if OBJECTIVES[objective] == "min" else -1.0
    key = np.where(cand["meets_slo"], sign * cand[objective].astype(float), np.inf)
    key = np.where(np.isnan(key), np.inf, key)
    cand = cand.assign(_key=key).sort_values(
        ["_key", "gpus", "batch_size", "draft_depth"], kind="stable").drop(columns="_key")
    cand = cand.reset_index(drop=True)
    rank = cand.groupby("hardware", sort=False).cumcount() + 1
    cand.insert(0, "rank", np.where(cand["meets_slo"], rank, np.nan))
    return cand


#: Columns of a recommendation, in order.
RECOMMENDATION_COLUMNS = (
    "hardware", "engine", "engine_version", "engine_label", "mode", "tp", "dp", "ep", "prefill_tp", "prefill_dp", "prefill_ep",
    "instances", "decode_instances", "prefill_instances", "decode_gpus", "prefill_gpus", "gpus",
    "precision", "low_precision", "weight_precision", "moe_precision", "kv_precision",
    "attention_precision", "dispatch_precision", "combine_precision", "overlap",
    "prefill_overlap",
    "batch_size", "draft_depth", "kv_pool_max_batch", "runs_eager", "concurrency",
    "kv_offload",
    "prefill_batch_size", "request_rate_per_s", "output_tokens_per_s",
    "output_tokens_per_s_per_gpu", "decode_tokens_per_s_per_gpu",
    "prefill_tokens_per_s_per_gpu",
    "tokens_per_s_per_user", "ttft_s", "tpot_s", "decode_binding_resource",
    # plan --trace (analysis/plan/trace.py): the replay's figures
    "total_tokens_per_s_per_gpu", "e2e_normalized_interactivity_p90", "ttft_p90_s",
    "e2e_p90_s", "prefix_hit_rate", "prefix_hit_rate_hbm", "prefix_hit_rate_dram",
    "usd_per_mtok_output", "usd_per_mtok_input", "usd_per_mtok_output_all_in",
    "usd_per_mtok_total_all_in", "revenue_usd_per_gpu_hour",
    "gpus_for_load", "decode_gpus_for_load", "prefill_gpus_for_load", "load_share_frac",
    "reason",
    "precision_note")


def _recommend(cand: pd.DataFrame, hws, objective: str,
               notes: "dict[str, list[str]] | None" = None) -> pd.DataFrame:
    """One row per hardware: its best candidate meeting the targets, else why none does;
    ``precision_note`` carries the precision mappings and refusals on that device."""
    rows = []
    notes = notes or {}
    for hw in hws:
        mine = cand[cand["hardware"] == hw.name]
        ok = mine[mine["meets_slo"]]
        if not ok.empty:
            rows.append(ok.iloc[0].to_dict())
        else:
            counts = mine["reason"].value_counts()
            why = "; ".join(f"{k} ({v}{_best(mine, k)})" for k, v in counts.items() if k) or (
                "; ".join(n for n in notes.get(hw.name, []) if "refused" in n)
                or "no candidate")
            rows.append({"hardware": hw.name, "reason": f"nothing meets the targets: {why}"})
        rows[-1]["precision_note"] = "; ".join(notes.get(hw.name, []))
    recs = pd.DataFrame(rows)
    cols = [c for c in RECOMMENDATION_COLUMNS if c in recs]
    recs = recs[cols]
    if "reason" not in recs:
        recs["reason"] = ""
    return recs.reset_index(drop=True)


def _best(mine: pd.DataFrame, reason: str) -> str:
    """``"; fastest 5.2 ms"``: for a missed TPOT or TTFT target, the best any of those
    candidates reaches, so a target nothing can meet says how far it is."""
    col = {"misses TPOT": "tpot_s", "misses TTFT": "ttft_s"}.get(reason.split(" (")[0])
    if col is None or col not in mine:
        return ""
    t = mine.loc[mine["reason"] == reason, col].astype(float)
    t = t[t > 0]
    return f"; fastest {t.min() * 1e3:.4g} ms" if len(t) else ""


#: What tells two candidates apart as deployments (the front keeps one row of each).
_DEPLOYMENT = ("hardware", "engine", "engine_version", "mode", "tp", "dp", "ep", "prefill_tp",
               "prefill_dp", "prefill_ep", "decode_instances", "prefill_instances", "precision",
               "weight_precision", "moe_precision", "kv_precision", "overlap", "prefill_overlap",
               "batch_size", "draft_depth", "prefill_batch_size")


def _front(cand: pd.DataFrame, user: str = "tokens_per_s_per_user") -> pd.DataFrame:
    """Non-dominated (``user``: tokens/s per user, all-in tokens/s per GPU) per hardware
    among the candidates that fit and meet TTFT (TPOT is the axis the front trades along;
    ``plan --trace``: E2E normalized interactivity P90)."""
    ok = cand["fits"].astype(bool) & cand["prefill_tokens_per_s_per_gpu"].notna()
    # one row per deployment of one engine (a repeated batch or shape in the search gives the
    # same candidate twice); rows of different engines stay, each naming its engine
    same = [c for c in _DEPLOYMENT if c in cand]
    ok &= ~cand[same].astype(str).duplicated()
    parts = []
    for hw, sub in cand[ok].groupby("hardware", sort=False):
        mask = pareto_mask(sub[user].to_numpy(float),
                           sub["output_tokens_per_s_per_gpu"].to_numpy(float))
        parts.append(sub[mask].sort_values(user))
    return pd.concat(parts, ignore_index=True) if parts else cand.iloc[:0]


#: The front's printed columns: what tells its rows apart at a glance (``precision``: the
#: profile, native or low or one the user names, so two rows of one shape and batch that
#: differ in their KV or weight precision do not print alike), then their figures.
FRONT_COLUMNS = ("hardware", "engine", "mode", "precision", "tp", "dp", "ep", "batch_size",
                 "draft_depth", "tokens_per_s_per_user", "output_tokens_per_s_per_gpu",
                 "usd_per_mtok_output_all_in")
#: Front columns a narrow table may hide (cli: fit_columns drops from the right): the rest
#: name the deployment and its place on the front.
FRONT_DROPPABLE = ("usd_per_mtok_output_all_in",)
#: Headers of a narrow table (``short``): the two widest over two lines and the precision
#: profile's short, so the engine's name (sglang-0.5.12-rocm) and the all-in $/M fit in 100.
FRONT_LABELS = {"precision": "prec", "output_tokens_per_s_per_gpu": "out tok/s / /GPU",
                "usd_per_mtok_output_all_in": "$/M out / all-in"}


def front_table(front, short: bool = True):
    """The front's columns as printed (:data:`FRONT_COLUMNS`): each row's engine (its
    profile names its version: sglang-0.5.6, trtllm-1.3) and the mode short, a ``*`` where
    the decode batch runs outside the engine's CUDA graphs (:func:`front_note`); ``short``:
    the headers of :data:`FRONT_LABELS`."""
    cols = [c for c in FRONT_COLUMNS if c in front]
    mode = front["mode"].map({"aggregated": "agg", "disaggregated": "P/D"}).fillna("")
    if "runs_eager" in front:
        mode = mode + front["runs_eager"].astype(bool).map({True: "*", False: ""})
    out = front[cols].assign(mode=mode)
    return out.rename(columns=FRONT_LABELS) if short else out


def front_note(front, hidden=()) -> str:
    """Under the front: why rows of two engines can carry the same figures, what tells apart
    rows that still print alike (the printed columns less ``hidden``, those a narrow table
    dropped), and what an eager decode step means."""
    from ...output.tables import format_number

    lines = []
    shown = front_table(front, short=False)
    shown = shown[[c for c in shown.columns if c not in hidden]].map(format_number)
    figures = [c for c in shown.columns if c != "engine"]
    same = shown[figures].duplicated(keep=False)
    if "engine" in shown and (shown[same].groupby(figures)["engine"].nunique() > 1).any():
        lines.append("rows of different engines with the same figures: a disaggregated "
                     "deployment's pools do not depend on the engine's scheduling, and engines "
                     "with the same policy and budgets run one closed loop (every engine on "
                     "the same kernel tables)")
    alike = shown.duplicated(keep=False)
    if alike.any():
        rest = [c for c in (*hidden, *_DEPLOYMENT) if c in front and c not in shown.columns]
        keys = [shown.loc[alike, k] for k in shown.columns]
        differ = [c for c in dict.fromkeys(rest) if (front.loc[alike, c].astype(str).groupby(
            keys).nunique() > 1).any()]
        lines.append("rows that print alike differ in "
                     f"{', '.join(differ) or 'figures past the shown digits'} (--json shows "
                     "every column)")
    if "runs_eager" in front and front["runs_eager"].astype(bool).any():
        lines.append("*: the decode batch per rank is above the engine's CUDA-graph limit on "
                     "the device, so it runs eager; that step time is unmodelled (optimistic)")
    return "".join(f"\n{x}" for x in lines)
