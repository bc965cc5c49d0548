"""Strict loader of factory scenario configs (``configs/factory.toml`` and friends).

Every key is documented in ``docs/CONFIG.md`` (unit, default, meaning). An unknown key, a
wrong type or an out-of-range value is a one-line :class:`SpecError` naming the file and the
key. Every lever is independently switchable under ``[levers]``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import schema
from ..errors import SpecError
from ..realism import load_realism
from ..specs import _read_toml, _Table, data_dir, load_hardware, load_model
from .workload import WorkloadClass, WorkloadSpec

LEVERS = ("continuous_batching", "pd_split", "prefix_cache", "speculative", "expert_balancing",
          "low_precision", "overlap")
TIERS = ("hbm", "dram", "nvme")
#: Longest ``extends`` chain (a guard against runaway recursion; real chains are 2-3 deep).
MAX_EXTENDS_DEPTH = 32


@dataclass(frozen=True)
class PoolConfig:
    hardware: str
    tp: int = 1
    dp: int = 1
    ep: int = 1
    unit_gpus: int = 8
    tokens_per_gpu: int = 16384          # prefill: tokens per GPU per forward pass
    max_batch_per_gpu: int = 256         # decode: continuous-batching cap
    static_batch_per_gpu: int = 0        # decode, static batching: cap (0 = the largest batch meeting the SLOs)
    max_draft_depth: int = 3             # decode: deepest draft the engine may choose


@dataclass(frozen=True)
class Levers:
    continuous_batching: bool = True
    pd_split: bool = True
    prefix_cache: bool = True
    speculative: bool = True
    expert_balancing: bool = True
    low_precision: bool = True
    overlap: bool = True
    redundant_experts: int = 32
    cache_tiers: tuple[str, ...] = TIERS
    hbm_cache_frac: float = 0.1
    cache_hit_rate: float | None = None   # scenario-fixed hit rate (None = simulated)

    def switched(self, **changes: bool) -> "Levers":
        return dataclasses.replace(self, **changes)


#: Token mix of DeepSeek's published production day, input per output token:
#: 608B input / 168B output tokens (deployments.csv, DS_DAY6).
INPUT_TOKENS_PER_OUTPUT_TOKEN = 608.0 / 168.0


@dataclass(frozen=True)
class Economics:
    """Charging of GPU time. The defaults are the project's one copy of these assumptions
    (``economics.CostModel`` reuses them)."""

    cost_basis: str = "capex"            # "capex" (depreciation) or "rental"
    capex_usd_per_gpu: float = 0.0
    depreciation_years: float = 4.0      # ASSUMPTION
    residual_frac: float = 0.0
    rental_usd_per_gpu_hour: float = 0.0
    pue: float = 1.3                     # low end of 30-50% facility overhead (serving_facts.md)
    usd_per_kwh: float = 0.08            # ASSUMPTION: not in the sources
    # GPU power by phase as fractions of TDP: Splitwise H100 model, idle 75 W, prefill 700 W,
    # decode 380 W of 700 W (serving_facts.md); applied to every device as an assumption
    idle_frac_of_tdp: float = 75.0 / 700.0
    prefill_frac_of_tdp: float = 1.0
    decode_frac_of_tdp: float = 380.0 / 700.0


@dataclass(frozen=True)
class Price:
    id: str
    model: str
    input_cache_hit_usd_per_mtok: float
    input_cache_miss_usd_per_mtok: float
    output_usd_per_mtok: float
    date: str
    source: str


@dataclass(frozen=True)
class FactoryConfig:
    name: str
    description: str
    model: str
    price: Price
    workload: WorkloadSpec
    trace_path: str
    prefill: PoolConfig
    decode: PoolConfig
    levers: Levers
    ttft_slo_s: float
    tpot_slo_s: float
    target_utilization: float
    economics: Economics
    path: str = ""
    baseline: "FactoryConfig | None" = field(default=None, compare=False)
    baseline_path: str = ""
    trace_head: int = 0                  # > 0: use only the first n requests of the loaded trace

    def with_levers(self, levers: Levers) -> "FactoryConfig":
        return dataclasses.replace(self, levers=levers)


# --------------------------------------------------------------------------------------------


def load_prices(path: str | os.PathLike | None = None) -> dict[str, Price]:
    p = Path(path) if path is not None else data_dir("configs") / "prices.toml"
    t = _Table(p, _read_toml(p))
    rows = t.raw.get("price", [])
    t.used.add("price")
    t.done()
    out = {}
    for i, row in enumerate(rows):
        r = _Table(p, row, f"price[{i}]")
        pr = Price(id=r.get("id", str), model=r.get("model", str),
                   input_cache_hit_usd_per_mtok=r.get("input_cache_hit_usd_per_mtok", float, minimum=0.0),
                   input_cache_miss_usd_per_mtok=r.get("input_cache_miss_usd_per_mtok", float, minimum=0.0),
                   output_usd_per_mtok=r.get("output_usd_per_mtok", float, minimum=0.0),
                   date=r.get("date", str), source=r.get("source", str))
        r.get("provider", str, required=False)
        r.done()
        out[pr.id] = pr
    return out


def resolve_price(price: "str | Price | None") -> "Price | None":
    """A :class:`Price` from its id in ``configs/prices.toml`` (a Price or None passes)."""
    if price is None or isinstance(price, Price):
        return price
    prices = load_prices()
    if price not in prices:
        raise SpecError(f"price = {price!r} is not a price id; available: {sorted(prices)}")
    return prices[price]


def _pool(t: _Table, key: str, phase: str, base: PoolConfig | None) -> PoolConfig:
    sub = t.table(key, required=base is None)
    d = dataclasses.asdict(base) if base else {}
    kw: dict[str, Any] = {}
    kw["hardware"] = sub.get("hardware", str, required=base is None, default=d.get("hardware"))
    for k in ("tp", "dp", "ep", "unit_gpus"):
        kw[k] = sub.get(k, int, required=False, default=d.get(k, 1 if k != "unit_gpus" else 8),
                        positive=True)
    if phase == "prefill":
        kw["tokens_per_gpu"] = sub.get("tokens_per_gpu", int, required=False,
                                       default=d.get("tokens_per_gpu", 16384), positive=True)
    else:
        kw["max_batch_per_gpu"] = sub.get("max_batch_per_gpu", int, required=False,
                                          default=d.get("max_batch_per_gpu", 256), positive=True)
        kw["static_batch_per_gpu"] = sub.get("static_batch_per_gpu", int, required=False,
                                             default=d.get("static_batch_per_gpu", 0), minimum=0)
        kw["max_draft_depth"] = sub.get("max_draft_depth", int, required=False,
                                        default=d.get("max_draft_depth", 3), minimum=0)
        if kw["max_draft_depth"] > 16:
            raise SpecError(f"{t.path}: {key}.max_draft_depth = {kw['max_draft_depth']} must be <= 16")
    sub.done()
    try:
        load_hardware(kw["hardware"])
    except SpecError as exc:
        raise SpecError(f"{t.path}: {key}.hardware: {exc}") from None
    if (kw["tp"] * kw["dp"]) % kw["ep"]:
        raise SpecError(f"{t.path}: {key}.ep = {kw['ep']} must divide tp x dp = {kw['tp'] * kw['dp']}")
    return PoolConfig(**kw)


def _frac(tab: _Table, key: str, default: float, *, upper_open: bool = False) -> float:
    v = tab.get(key, float, required=False, default=default, minimum=0.0)
    if v > 1 or (upper_open and v >= 1):
        raise SpecError(f"{tab.path}: {tab._key(key)} = {v} must lie in [0, 1{')' if upper_open else ']'}")
    return v


def _workload(t: _Table, base: WorkloadSpec | None) -> tuple[WorkloadSpec, str]:
    w = t.table("workload", required=base is None)
    b = base
    n = w.get("n_requests", int, required=b is None, default=b and b.n_requests, positive=True)
    rate = w.get("arrival_rate_per_s", float, required=b is None,
                 default=b and b.arrival_rate_per_s, positive=True)
    amp = _frac(w, "diurnal_amplitude", b.diurnal_amplitude if b else 0.0, upper_open=True)
    seed = w.get("seed", int, required=False, default=b.seed if b else 0, minimum=0)
    per_day = w.get("output_tokens_per_day", float, required=False,
                    default=b.output_tokens_per_day if b else 0.0, minimum=0.0)
    trace = w.get("trace", str, required=False, default="")
    classes = list(b.classes) if b else []
    if "class" in w.raw:
        w.used.add("class")
        rows = w.raw["class"]
        if not isinstance(rows, list) or not rows:
            raise SpecError(f"{t.path}: workload.class must be a non-empty array of tables")
        classes = []
        for i, row in enumerate(rows):
            c = _Table(t.path, row, f"workload.class[{i}]")
            kw = dict(
                name=c.get("name", str), share=c.get("share", float, positive=True),
                prompt_tokens_median=c.get("prompt_tokens_median", float, positive=True),
                prompt_tokens_sigma=c.get("prompt_tokens_sigma", float, minimum=0.0),
                output_tokens_median=c.get("output_tokens_median", float, positive=True),
                output_tokens_sigma=c.get("output_tokens_sigma", float, minimum=0.0),
                max_prompt_tokens=c.get("max_prompt_tokens", int, positive=True),
                max_output_tokens=c.get("max_output_tokens", int, positive=True),
                system_prompt_tokens=c.get("system_prompt_tokens", int, minimum=0),
                n_system_prompts=c.get("n_system_prompts", int, positive=True),
                system_prompt_zipf=c.get("system_prompt_zipf", float, minimum=0.0),
                turns_mean=c.get("turns_mean", float, minimum=1.0),
                acceptance_rate=_frac(c, "acceptance_rate", 0.0),
                expert_skew=c.get("expert_skew", float, required=False, minimum=0.0,
                                  default=load_realism().default_expert_skew),
            )
            c.done()
            try:
                classes.append(WorkloadClass(**kw))
            except SpecError as exc:
                raise SpecError(f"{t.path}: workload.class[{i}]: {exc}") from None
    elif b is None:
        raise SpecError(f"{t.path}: workload.class is missing (required: at least one class)")
    w.done()
    try:
        spec = WorkloadSpec(n_requests=n, arrival_rate_per_s=rate, diurnal_amplitude=amp,
                            seed=seed, classes=tuple(classes), output_tokens_per_day=per_day)
    except SpecError as exc:
        raise SpecError(f"{t.path}: workload: {exc}") from None
    if trace and not os.path.isabs(trace):
        trace = str((Path(t.path).parent / trace).resolve())
    return spec, trace


def load_config(path: str | os.PathLike, *, with_baseline: bool = True,
                _chain: tuple[Path, ...] = ()) -> FactoryConfig:
    """Load a factory config. ``extends = "other.toml"`` inherits every unset table/key;
    ``baseline = "file.toml"`` names the config ``compare`` runs against. The file is first
    checked against :class:`~inference_factory.schema.FactoryConfigFile`; an ``extends``
    chain must name files and must not loop."""
    p = Path(path)
    raw = _read_toml(p)
    schema.check(schema.FactoryConfigFile, raw, str(p))
    t = _Table(p, raw)
    extends = t.get("extends", str, required=False, default="")
    base = None
    if extends:
        bp = (p.parent / extends).resolve()
        chain = _chain + (p.resolve(),)
        if bp in chain:
            loop = " -> ".join(c.name for c in chain[chain.index(bp):] + (bp,))
            raise SpecError(f"{p}: extends = {extends!r} makes a cycle ({loop}); "
                            "the extends chain must end in a config without extends")
        if len(chain) >= MAX_EXTENDS_DEPTH:
            raise SpecError(f"{p}: extends = {extends!r}: the extends chain is longer than "
                            f"{MAX_EXTENDS_DEPTH} files ({chain[0].name} -> ... -> {p.name})")
        if not bp.is_file():
            what = "is a folder" if bp.is_dir() else "does not exist"
            raise SpecError(f"{p}: extends = {extends!r} {what}; it must name a config file "
                            "(relative to this one)")
        base = load_config(bp, with_baseline=False, _chain=chain)
    name = t.get("name", str, required=base is None, default=base and base.name)
    desc = t.get("description", str, required=False, default=base.description if base else "")

    mt = t.table("model", required=base is None)
    model = mt.get("name", str, required=base is None, default=base and base.model)
    price_id = mt.get("price", str, required=base is None, default=base and base.price.id)
    mt.done()
    try:
        spec = load_model(model)
    except SpecError as exc:
        raise SpecError(f"{p}: model.name: {exc}") from None
    prices = load_prices()
    if price_id not in prices:
        raise SpecError(f"{p}: model.price = {price_id!r} is not a price id; available: {sorted(prices)}")

    workload, trace = _workload(t, base.workload if base else None)
    if not trace and base is not None and "workload" not in t.raw:
        trace = base.trace_path
    prefill = _pool(t, "prefill", "prefill", base.prefill if base else None)
    decode = _pool(t, "decode", "decode", base.decode if base else None)

    for key, pool in (("prefill", prefill), ("decode", decode)):
        if spec.n_q_heads % pool.tp:
            raise SpecError(f"{p}: {key}.tp = {pool.tp} must divide the {spec.n_q_heads} "
                            f"attention heads of {spec.name!r}")

    lv = t.table("levers", required=False)
    bl = base.levers if base else Levers()
    lk = {k: lv.get(k, bool, required=False, default=getattr(bl, k)) for k in LEVERS}
    lk["redundant_experts"] = lv.get("redundant_experts", int, required=False,
                                     default=bl.redundant_experts, minimum=0)
    tiers = lv.get("cache_tiers", list, required=False, default=list(bl.cache_tiers))
    bad = [x for x in tiers if x not in TIERS]
    if bad or not tiers:
        raise SpecError(f"{p}: levers.cache_tiers = {tiers!r} must be a non-empty subset of {list(TIERS)}")
    lk["cache_tiers"] = tuple(x for x in TIERS if x in tiers)
    lk["hbm_cache_frac"] = _frac(lv, "hbm_cache_frac", bl.hbm_cache_frac)
    if "cache_hit_rate" in lv.raw:
        lk["cache_hit_rate"] = _frac(lv, "cache_hit_rate", 0.0, upper_open=True)
    else:
        lk["cache_hit_rate"] = bl.cache_hit_rate
    lv.done()
    if spec.is_moe and lk["redundant_experts"] > spec.n_routed_experts:
        raise SpecError(f"{p}: levers.redundant_experts = {lk['redundant_experts']} exceeds the "
                        f"{spec.n_routed_experts} routed experts of {spec.name!r}; allowed "
                        f"0..{spec.n_routed_experts} (at most one extra replica per expert)")
    if spec.is_moe and lk["redundant_experts"] and (spec.n_routed_experts + lk["redundant_experts"]) < decode.ep:
        raise SpecError(f"{p}: decode.ep = {decode.ep} exceeds routed + redundant experts")

    sl = t.table("slo", required=False)
    ttft = sl.get("ttft_s", float, required=False, default=base.ttft_slo_s if base else 5.0, positive=True)
    tpot = sl.get("tpot_s", float, required=False, default=base.tpot_slo_s if base else 0.1, positive=True)
    sl.done()
    fl = t.table("fleet", required=False)
    util = fl.get("target_utilization", float, required=False,
                  default=base.target_utilization if base else 0.75, positive=True)
    if util > 1:
        raise SpecError(f"{p}: fleet.target_utilization = {util} must lie in (0, 1]")
    fl.done()

    ec = t.table("economics", required=False)
    be = base.economics if base else Economics()
    hw = load_hardware(decode.hardware)
    basis = ec.get("cost_basis", str, required=False, default=be.cost_basis,
                   allowed={"capex", "rental"})
    capex = ec.get("capex_usd_per_gpu", float, required=False,
                   default=be.capex_usd_per_gpu or hw.price.get("capex_usd_per_gpu", 0.0), minimum=0.0)
    rental = ec.get("rental_usd_per_gpu_hour", float, required=False,
                    default=be.rental_usd_per_gpu_hour or hw.price.get("rental_usd_per_gpu_hour", 0.0),
                    minimum=0.0)
    econ = Economics(
        cost_basis=basis, capex_usd_per_gpu=capex,
        depreciation_years=ec.get("depreciation_years", float, required=False,
                                  default=be.depreciation_years, positive=True),
        residual_frac=_frac(ec, "residual_frac", be.residual_frac, upper_open=True),
        rental_usd_per_gpu_hour=rental,
        pue=ec.get("pue", float, required=False, default=be.pue, minimum=1.0),
        usd_per_kwh=ec.get("usd_per_kwh", float, required=False, default=be.usd_per_kwh, minimum=0.0),
        idle_frac_of_tdp=_frac(ec, "idle_frac_of_tdp", be.idle_frac_of_tdp),
        prefill_frac_of_tdp=_frac(ec, "prefill_frac_of_tdp", be.prefill_frac_of_tdp),
        decode_frac_of_tdp=_frac(ec, "decode_frac_of_tdp", be.decode_frac_of_tdp),
    )
    ec.done()
    if basis == "capex" and capex <= 0:
        raise SpecError(f"{p}: economics.capex_usd_per_gpu is needed for cost_basis = 'capex' "
                        f"({decode.hardware} lists no capex indication)")
    if basis == "rental" and rental <= 0:
        raise SpecError(f"{p}: economics.rental_usd_per_gpu_hour is needed for cost_basis = 'rental'")

    bt = t.get("baseline", str, required=False, default="")
    inherited = False
    if not bt and base is not None and base.baseline_path and with_baseline:
        bt, inherited = base.baseline_path, True
    t.done()
    cfg = FactoryConfig(name=name, description=desc, model=spec.name, price=prices[price_id],
                        workload=workload, trace_path=trace, prefill=prefill, decode=decode,
                        levers=Levers(**lk), ttft_slo_s=ttft, tpot_slo_s=tpot,
                        target_utilization=util, economics=econ, path=str(p))
    if bt:
        bpath = (p.parent / bt).resolve() if not os.path.isabs(bt) else Path(bt)
        cfg = dataclasses.replace(cfg, baseline_path=str(bpath))
        if bpath == p.resolve():
            if not inherited:
                raise SpecError(f"{p}: baseline = {bt!r} names the file itself")
            return dataclasses.replace(cfg, baseline_path="")
        if with_baseline:
            b = load_config(bpath, with_baseline=False)
            # the baseline serves the same traffic at the same prices
            b = dataclasses.replace(b, workload=cfg.workload, trace_path=cfg.trace_path,
                                    price=cfg.price, model=cfg.model)
            cfg = dataclasses.replace(cfg, baseline=b)
    return cfg
