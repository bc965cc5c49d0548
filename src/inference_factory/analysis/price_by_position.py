"""Cost per million tokens by token position, prefill and decode, with the split by operation
group that explains it (``inference-factory price-by-position``; issue 28 item 6, "the
explained price cut": DeepSeek-V3.1 against V3.2, Qwen3.5 against a full-attention model).

One mechanism: the engine's per-operation detail (``evaluate_arrays(..., detail="ops")``:
each operation's time, FLOPs and HBM bytes per step per GPU) grouped by
``configs/op_groups.toml`` (:func:`load_op_groups`), priced by the project's one cost model
(:class:`~inference_factory.analysis.economics.CostModel`, its price basis stated).

Operating points (each a stated rule, every number from the serving-engine profile of
``configs/serving_engines.toml`` unless given):

- **prefill, marginal** (``phase = "prefill"``): the cost of a token at position L is that of
  one chunked-prefill chunk of ``c`` tokens computed after L cached tokens of the same prompt
  (``prompt_len = L + c``, ``cache_hit_rate = L / (L + c)``: the engine's prefill pass with L
  tokens already in the cache), per computed token. ``c`` is the profile's prompt tokens per
  pass per attention-DP rank (SGLang 0.5.6 under DP attention: 32,768 / dp). Marginal, not the
  mean over a prompt of length L, because the question is what a token *at* a position costs:
  the mean mixes every position below L and hides where the cost curve bends (the mean is
  given beside it, ``prefill_mean_usd_per_mtok``: a whole prompt of L tokens in one pass, per
  token).
- **decode**: one decode step of B sequences per attention-DP rank, each at context L,
  ``B = min(cap, the largest batch that fits in HBM with every sequence reserving L tokens)``;
  ``cap`` is the profile's running requests per rank (256 / dp under DP attention). Long
  contexts are memory-limited, and the smaller KV of a model is part of its price cut.
  ``decode_batch`` fixes B instead (NaN where it does not fit).
- every sequence at the same context: ``context_cv = 0`` (the position is the question).

The cost of a point is ``gpu_cost_usd_per_hour / (tokens/s per GPU x 3600) x 1e6``
(:func:`~inference_factory.analysis.economics.usd_per_mtok_at`); its split by group is that
cost times each group's share of the summed operation time (with the sequential schedule the
sum is the step: the split is exact; under two-batch overlap it is a share of busy time).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import SpecError
from ..specs import load_hardware, load_model
from ..specs.engines import load_serving_engine
from ..specs.files import data_dir, read_toml
from .economics import CostModel, cost_attrs, gpu_cost_usd_per_hour, usd_per_mtok_at

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

#: Token positions of the default grid: 1K, 2K, 4K, ..., 128K.
DEFAULT_POSITIONS = tuple(1024 * 2 ** i for i in range(8))
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class OpGroups:
    """The grouping of ``configs/op_groups.toml``: display ``order``, the groups counted as
    ``attention`` besides the indexer, the attention ``core`` group by kind, and the group of
    each base operation name (``ops``; ``"core"`` = the core of the operation's kind)."""

    order: tuple[str, ...]
    attention: frozenset[str]
    core: dict[str, str]
    ops: dict[str, str]
    path: str = ""

    def split(self, op: str, kinds: Sequence[str]) -> tuple[str, str]:
        """(kind, base name) of operation ``op`` of a model whose attention kinds are
        ``kinds`` (the primary first): a prefix ``<kind>[n]_`` names the kind, else the
        primary one."""
        for k in sorted(kinds, key=len, reverse=True):
            hit = re.fullmatch(rf"{re.escape(k)}\d*_(.+)", op)
            if hit and hit.group(1) in self.ops:
                return k, hit.group(1)
        return kinds[0], op

    def group(self, op: str, kinds: Sequence[str]) -> str:
        """The group of operation ``op`` (:meth:`split`); one the file does not name is
        ``other``."""
        kind, base = self.split(op, kinds)
        g = self.ops.get(base, "other")
        return self.core.get(kind, "other") if g == "core" else g


def load_op_groups(path: str | Path | None = None) -> OpGroups:
    """:class:`OpGroups` from ``configs/op_groups.toml`` (or ``path``); a field of the wrong
    shape, or a group not in ``order``, is a one-line SpecError naming the file and field."""
    p = Path(path) if path is not None else data_dir("configs") / "op_groups.toml"
    if not p.is_file():
        raise SpecError(f"{p}: file not found")
    raw = read_toml(p)
    order = raw.get("order")
    if not (isinstance(order, list) and order and all(isinstance(x, str) for x in order)):
        raise SpecError(f"{p}: order = {order!r}; allowed: a list of group names")
    known = set(order)
    for key in ("attention", "core", "ops"):
        if key not in raw:
            raise SpecError(f"{p}: {key} is missing")
    for key, value in [("attention", x) for x in raw["attention"]] + [
            (f"core.{k}", v) for k, v in raw["core"].items()] + [
            (f"ops.{k}", v) for k, v in raw["ops"].items() if v != "core"]:
        if value not in known:
            raise SpecError(f"{p}: {key} = {value!r} is not a group of order; allowed: "
                            f"{order}")
    unknown = set(raw) - {"order", "attention", "core", "ops"}
    if unknown:
        raise SpecError(f"{p}: {sorted(unknown)[0]} is not a field; allowed: order, "
                        "attention, core, ops")
    return OpGroups(tuple(order), frozenset(raw["attention"]), dict(raw["core"]),
                    dict(raw["ops"]), str(p))


def model_kinds(model) -> list[str]:
    """The attention kinds of a model, its primary kind first."""
    m = load_model(model)
    return list(dict.fromkeys([m.attention_kind] + [g.attention for g in m.layer_mix]))


def operating_rules(engine=None, dp: int = 1) -> dict[str, Any]:
    """The serving-engine profile's decode cap and prefill chunk per attention-DP rank."""
    e = load_serving_engine(engine)
    return {"engine": e.name, "max_decode_batch": int(e.requests_per_rank(dp)),
            "prefill_chunk": int(e.pass_tokens_per_rank(dp))}


def _label(model) -> str:
    """A model's label: the name as given (an alias such as DeepSeek-V3.1 stays visible),
    the spec's name for a file path."""
    name = str(model)
    return load_model(name).name if name.endswith(".toml") or "/" in name else name


def _one(model, hardware, positions, shape, cost, rules, decode_batch, choices, realism,
         groups: OpGroups) -> dict[str, np.ndarray]:
    """Arrays of one (model, hardware): cost per phase and position, per group."""
    from ..engine import evaluate_arrays, resolve_realism

    rl = resolve_realism(False, realism)
    L = np.asarray(positions, dtype=float)
    tp = shape.get("tp", 1)
    kw = dict(shape, **choices, context_cv=choices.get("context_cv", 0.0))
    fit = np.floor(np.asarray(evaluate_arrays(model, hardware, realism=rl, kv_len=L,
                                              batch_size=1, variables=["max_batch_size"],
                                              **kw)["max_batch_size"], dtype=float))
    fit = np.broadcast_to(fit, L.shape)
    if decode_batch is None:
        B = np.minimum(fit, rules["max_decode_batch"])
    else:
        B = np.full(L.shape, float(decode_batch))
    fits = (B >= 1) & (B <= fit)
    c = float(rules["prefill_chunk"])
    r = evaluate_arrays(model, hardware, realism=rl, detail="ops", kv_len=L,
                        batch_size=np.maximum(B, 1), prompt_len=L + c,
                        cache_hit_rate=L / (L + c), prefill_batch_size=1, **kw)
    mean = evaluate_arrays(model, hardware, realism=rl, prompt_len=L, cache_hit_rate=0.0,
                           prefill_batch_size=1,
                           variables=["prefill_computed_tokens_per_s_per_gpu"], **kw)
    hw = load_hardware(hardware)
    price = {ph: float(sum(gpu_cost_usd_per_hour(hw, cost, ph))) for ph in PHASES}
    names = [str(x) for x in r["op"]]
    kinds = model_kinds(model)
    of = np.array([groups.order.index(groups.group(n, kinds)) for n in names])
    G = len(groups.order)
    out: dict[str, np.ndarray] = {}
    tps = {"prefill": r["prefill_computed_tokens_per_s_per_gpu"],
           "decode": r["decode_tokens_per_s_per_gpu"]}
    tokens_per_gpu_step = {"prefill": np.full(L.shape, c / tp), "decode": np.maximum(B, 1) / tp}
    for ph in PHASES:
        usd = np.broadcast_to(usd_per_mtok_at(np.asarray(tps[ph], dtype=float),
                                              gpu_cost_usd_per_hour=price[ph],
                                              utilization=cost.utilization), L.shape)
        ok = fits if ph == "decode" else np.ones(L.shape, bool)
        usd = np.where(ok, usd, np.nan)
        t = np.nan_to_num(np.broadcast_to(r[f"{ph}_op_time_s"], (len(names),) + L.shape))
        by = {k: np.zeros((G,) + L.shape) for k in ("time", "flop", "bytes")}
        for i, gi in enumerate(of):
            by["time"][gi] += t[i]
            by["flop"][gi] += np.nan_to_num(np.broadcast_to(r[f"{ph}_op_flop_per_gpu"][i],
                                                            L.shape))
            by["bytes"][gi] += np.nan_to_num(np.broadcast_to(
                r[f"{ph}_op_hbm_bytes_per_gpu"][i], L.shape))
        total = by["time"].sum(axis=0)
        out[f"{ph}_usd"] = usd
        out[f"{ph}_usd_group"] = usd * by["time"] / np.where(total > 0, total, np.nan)
        out[f"{ph}_time_group"] = by["time"] / tokens_per_gpu_step[ph]
        out[f"{ph}_flop_group"] = by["flop"] / tokens_per_gpu_step[ph]
        out[f"{ph}_bytes_group"] = by["bytes"] / tokens_per_gpu_step[ph]
        out[f"{ph}_tokens"] = (np.where(ok, B, np.nan) if ph == "decode"
                               else np.full(L.shape, c))
    out["prefill_mean_usd"] = np.broadcast_to(usd_per_mtok_at(
        np.asarray(mean["prefill_computed_tokens_per_s_per_gpu"], dtype=float),
        gpu_cost_usd_per_hour=price["prefill"], utilization=cost.utilization), L.shape)
    out["fit_batch"] = fit
    out["price"] = np.asarray(price["decode"])
    return out


def price_by_position(models: str | Sequence[str], hardware: str | Sequence[str], *,
                      positions: Sequence[float] = DEFAULT_POSITIONS,
                      parallelism: dict[str, int] | None = None,
                      cost: CostModel | None = None, engine=None,
                      decode_batch: int | None = None, max_decode_batch: int | None = None,
                      prefill_chunk: int | None = None, realism: str = "measured",
                      groups: OpGroups | str | Path | None = None,
                      **choices: Any) -> xr.Dataset:
    """Cost per million tokens at each token position, prefill (marginal) and decode, for
    each model and device, with the split by operation group (module docstring: the rules).

    Returns an ``xr.Dataset`` over (model, hardware, phase, position[, group]):
    ``usd_per_mtok``, ``usd_per_mtok_by_group`` (the cost times each group's share of
    operation time), ``gpu_s_per_token_by_group``, ``hbm_bytes_per_token_by_group`` and
    ``flop_per_token_by_group`` (per token of the phase, all GPUs of a rank),
    ``tokens_per_step`` (decode batch per rank or prefill chunk), ``prefill_mean_usd_per_mtok``
    and ``fit_batch`` (the largest decode batch that fits at L); attrs state the rules, the
    engine profile and the price basis. ``choices`` are further engine options
    (``kv_precision="fp8"``, ``overlap``...)."""
    import xarray as xr

    models = [models] if isinstance(models, str) else list(models)
    hws = [hardware] if isinstance(hardware, str) else list(hardware)
    if not models or not hws:
        raise SpecError("price_by_position: give at least one model and one device")
    pos = [float(x) for x in positions]
    if not pos or any(not math.isfinite(x) or x < 1 for x in pos):
        raise SpecError(f"positions = {list(positions)!r}: allowed finite token counts >= 1")
    shape = {k: int(v) for k, v in (parallelism or {}).items()}
    bad = set(shape) - {"tp", "dp", "ep"}
    if bad:
        raise SpecError(f"parallelism: {sorted(bad)[0]} is not one of tp, dp, ep")
    cost = cost or CostModel()
    g = groups if isinstance(groups, OpGroups) else load_op_groups(groups)
    rules = operating_rules(engine, shape.get("dp", 1))
    if max_decode_batch is not None:
        rules["max_decode_batch"] = int(max_decode_batch)
    if prefill_chunk is not None:
        rules["prefill_chunk"] = int(prefill_chunk)
    for k, v in (("decode_batch", decode_batch), ("max_decode_batch", rules["max_decode_batch"]),
                 ("prefill_chunk", rules["prefill_chunk"])):
        if v is not None and (isinstance(v, bool) or int(v) < 1):
            raise SpecError(f"{k} = {v!r}: allowed an integer >= 1")
    names = [_label(m) for m in models]
    if len(set(names)) < len(names):
        raise SpecError(f"models = {models!r}: a model is given twice")
    hw_names = [load_hardware(h).name for h in hws]
    res = [[_one(m, h, pos, shape, cost, rules, decode_batch, choices, realism, g)
            for h in hws] for m in models]

    def stack(key, per_phase=True):
        if per_phase:
            return np.array([[[x[f"{ph}_{key}"] for ph in PHASES] for x in row] for row in res])
        return np.array([[x[key] for x in row] for row in res])

    dims = ("model", "hardware", "phase", "position")
    gdims = dims[:3] + ("group", "position")
    ds = xr.Dataset(
        {"usd_per_mtok": (dims, stack("usd")),
         "usd_per_mtok_by_group": (gdims, stack("usd_group")),
         "gpu_s_per_token_by_group": (gdims, stack("time_group")),
         "flop_per_token_by_group": (gdims, stack("flop_group")),
         "hbm_bytes_per_token_by_group": (gdims, stack("bytes_group")),
         "tokens_per_step": (dims, stack("tokens")),
         "prefill_mean_usd_per_mtok": (("model", "hardware", "position"),
                                       stack("prefill_mean_usd", False)),
         "fit_batch": (("model", "hardware", "position"), stack("fit_batch", False)),
         "gpu_cost_usd_per_hour": (("model", "hardware"), stack("price", False))},
        coords={"model": names, "hardware": hw_names, "phase": list(PHASES),
                "position": np.asarray(pos), "group": list(g.order)})
    ds = ds.transpose("model", "hardware", "phase", "position", "group")
    attrs = cost_attrs(cost, [load_hardware(h) for h in hws])
    par = " ".join(f"{k}={v}" for k, v in shape.items()) or "tp=1"
    ds.attrs.update(
        question="cost per million tokens by token position",
        parallelism=par, engine=rules["engine"], realism=realism,
        cost_basis=attrs["cost_basis"], price_basis=attrs["price_basis"],
        usd_per_gpu_hour="; ".join(f"{k}={v:g}" for k, v in attrs["usd_per_gpu_hour"].items()
                                   if v is not None),
        prefill_rule=(f"marginal: a chunk of {rules['prefill_chunk']} tokens computed after L "
                      f"cached tokens, per token ({rules['engine']} prompt tokens per pass "
                      "per attention-DP rank)"),
        decode_rule=(f"batch per rank {decode_batch} at context L" if decode_batch is not None
                     else f"batch per rank = min({rules['max_decode_batch']} ({rules['engine']} "
                          "running requests per rank), the largest that fits with L tokens "
                          "reserved per sequence)"),
        split="cost x each group's share of summed operation time; bytes and FLOPs per token "
              "from the engine's per-operation detail; groups: " + g.path,
        choices=", ".join(f"{k}={v}" for k, v in choices.items()) or "engine defaults",
        models="; ".join(f"{n}={load_model(m).name}" for n, m in zip(names, models)))
    return ds


def indexer_dominance(ds: xr.Dataset, groups: OpGroups | None = None) -> pd.DataFrame:
    """Per model, device and phase with indexer time: the first position of the grid where
    the indexer's time exceeds its attention core's (``over_core``) and where it exceeds all
    other attention time (``over_attention``: core + attention GEMMs), and the crossing
    interpolated on log L between grid points (``*_interp``; NaN beyond the grid)."""
    import pandas as pd

    g = groups or load_op_groups()
    cores = [x for x in g.attention if x in set(g.core.values())]
    rows = []
    L = ds.position.values
    for m in ds.model.values:
        for h in ds.hardware.values:
            for ph in ds.phase.values:
                t = ds.gpu_s_per_token_by_group.sel(model=m, hardware=h, phase=ph)
                idx = t.sel(group="indexer").values
                if not np.any(idx > 0):
                    continue
                core = t.sel(group=cores).sum("group").values
                att = t.sel(group=sorted(g.attention)).sum("group").values
                row = {"model": str(m), "hardware": str(h), "phase": str(ph)}
                for name, other in (("over_core", core), ("over_attention", att)):
                    row[name], row[name + "_interp"] = _crossing(L, idx, other)
                rows.append(row)
    return pd.DataFrame(rows, columns=["model", "hardware", "phase", "over_core",
                                       "over_core_interp", "over_attention",
                                       "over_attention_interp"])


def _crossing(L, a, b) -> tuple[float, float]:
    """First grid L with a > b, and the crossing of ln(a / b) = 0 interpolated on ln L."""
    above = a > b
    if not above.any():
        return math.nan, math.nan
    i = int(np.argmax(above))
    if i == 0:
        return float(L[0]), float(L[0])
    r0, r1 = math.log(a[i - 1] / b[i - 1]), math.log(a[i] / b[i])
    x0, x1 = math.log(L[i - 1]), math.log(L[i])
    return float(L[i]), float(math.exp(x0 + (x1 - x0) * (0 - r0) / (r1 - r0)))


def price_table(ds: xr.Dataset) -> pd.DataFrame:
    """One row per (phase, position, hardware, model): ``usd_per_mtok``, ``vs_first`` (the
    ratio to the first model's cost at the same point), ``tokens_per_step``, then per group
    with any time its $ share (``usd_<group>``), bytes per token (``bytes_<group>``) and
    FLOPs per token (``flop_<group>``); ``prefill_mean_usd_per_mtok`` on prefill rows."""
    import pandas as pd

    used = [str(x) for x in ds.group.values
            if np.nansum(ds.gpu_s_per_token_by_group.sel(group=x).values) > 0]
    first = ds.usd_per_mtok.isel(model=0)
    rows = []
    for ph in ds.phase.values:
        for L in ds.position.values:
            for h in ds.hardware.values:
                for m in ds.model.values:
                    pt = dict(model=m, hardware=h, phase=ph, position=L)
                    usd = float(ds.usd_per_mtok.sel(**pt))
                    row = {"phase": str(ph), "position": int(L), "hardware": str(h),
                           "model": str(m), "usd_per_mtok": usd,
                           "vs_first": usd / float(first.sel(hardware=h, phase=ph, position=L)),
                           "tokens_per_step": float(ds.tokens_per_step.sel(**pt))}
                    row["prefill_mean_usd_per_mtok"] = (
                        float(ds.prefill_mean_usd_per_mtok.sel(model=m, hardware=h,
                                                               position=L))
                        if ph == "prefill" else math.nan)
                    for key, var in (("usd", "usd_per_mtok_by_group"),
                                     ("bytes", "hbm_bytes_per_token_by_group"),
                                     ("flop", "flop_per_token_by_group")):
                        for grp in used:
                            row[f"{key}_{grp}"] = float(ds[var].sel(**pt, group=grp))
                    rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs = {k: v for k, v in ds.attrs.items() if isinstance(v, str)}
    return df


def draw(ds: xr.Dataset, title: str | None = None):
    """The matplotlib ``Figure`` of ``price-by-position --plot`` for ``ds`` (cost curves over
    position, prefill and decode, and the cost stacked by group;
    :func:`inference_factory.output.price_plot.draw_price_by_position`)."""
    from ..output.price_plot import draw_price_by_position

    a = ds.attrs
    if title is None:
        title = (f"{', '.join(map(str, ds.model.values))} on "
                 f"{', '.join(map(str, ds.hardware.values))}, {a.get('parallelism', '')}; "
                 f"{a.get('cost_basis', '')} cost, price basis {a.get('price_basis', '')}")
    return draw_price_by_position(price_table(ds), title=title)
