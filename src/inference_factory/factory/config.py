"""Strict loader of factory scenario configs (``configs/factory.toml`` and friends).

Every key is documented in ``docs/CONFIG.md`` (unit, default, meaning). A file is validated
once, by :class:`inference_factory.specs.schema.FactoryConfigFile` (an unknown key, a wrong type or an
out-of-range value is a one-line :class:`SpecError` naming the file and the key), and the
config is built from the validated model; this module adds only what the schema cannot know:
inheritance (``extends``), required keys of a config that extends nothing, and the rules that
need the model and hardware specs. Every lever is independently switchable under ``[levers]``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine import compute_precision
from ..errors import SpecError, warn
from ..specs.realism import load_realism
from ..specs import HardwareSpec, ModelSpec, load_hardware, load_model
from ..specs.files import read_toml
from ..specs.prices import CostModel, Price, load_prices
from ..specs.provisioning import default_target_utilization
from .trace import WorkloadClass, WorkloadSpec

LEVERS = ("continuous_batching", "pd_split", "prefix_cache", "speculative", "expert_balancing",
          "low_precision", "overlap")
TIERS = ("hbm", "dram", "nvme")
#: Longest ``extends`` chain (a guard against runaway recursion; real chains are 2-3 deep).
MAX_EXTENDS_DEPTH = 32
#: A TPOT target at or above this (s) is warned about as probably milliseconds: 1 s per token
#: is 1 token/s per user, 20x slower than DeepSeek's published 20-22 tokens/s (DS_DAY6).
#: ASSUMPTION (the threshold only decides when a warning line is printed, never a number).
SUSPICIOUS_TPOT_S = 1.0


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


_PREC_ORDER = ("fp4", "fp8", "bf16")


def _lowest_supported(hw: HardwareSpec, wanted: str) -> str:
    """``wanted`` (the checkpoint's precision) where the device runs it, with its tensor cores
    or weight-only (:func:`~inference_factory.engine.compute_precision`: stored in the format,
    multiplied at 16 bits, as ``evaluate`` and ``bench`` run it); else the lowest precision
    >= ``wanted`` that the device computes in."""
    if compute_precision(hw, wanted) is not None:
        return wanted
    i = _PREC_ORDER.index(wanted) if wanted in _PREC_ORDER else len(_PREC_ORDER) - 1
    for p in _PREC_ORDER[i:]:
        if p in hw.dense_flop_per_s:
            return p
    return "bf16"


def lever_precisions(m: ModelSpec, hw: HardwareSpec, levers: Levers) -> dict[str, str]:
    """Low precision lever: FP8 KV cache and FP8 dispatch, and FP4 routed experts on devices
    with FP4 tensor cores. Off: BF16 KV and dispatch, weights at the model's native precision."""
    weight = _lowest_supported(hw, m.weight_precision)
    expert = _lowest_supported(hw, m.expert_precision)
    if levers.low_precision:
        if m.is_moe and "fp4" in hw.dense_flop_per_s:
            expert = "fp4"
        return dict(weight_precision=weight, moe_precision=expert, kv_precision="fp8",
                    dispatch_precision="fp8")
    return dict(weight_precision=weight, moe_precision=expert, kv_precision="bf16",
                dispatch_precision="bf16")


#: The cost model of a factory config that states none (its ``[economics]`` table overrides
#: each field; ``extends`` inherits them): capex depreciation plus energy, the purchase price
#: from the decode hardware's file.
FACTORY_COSTS = CostModel(cost_basis="capex", capex_usd_per_gpu=0.0, rental_usd_per_gpu_hour=0.0,
                          price_basis="")


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
    economics: CostModel
    path: str = ""
    baseline: "FactoryConfig | None" = field(default=None, compare=False)
    baseline_path: str = ""
    trace_head: int = 0                  # > 0: use only the first n requests of the loaded trace
    #: The serving-engine profile (:class:`~inference_factory.specs.engines.ServingEngine`;
    #: None: the default profile). simulate uses its name and policy only
    #: (:data:`~inference_factory.specs.engines.FACTORY_USES`).
    engine: Any = None
    #: What the operator published about the same day (``[published]``: ``source`` and
    #: figures by simulate metric name), printed beside the prediction; not inherited.
    published: dict = field(default_factory=dict, compare=False)

    def with_levers(self, levers: Levers) -> "FactoryConfig":
        return dataclasses.replace(self, levers=levers)


# --------------------------------------------------------------------------------------------


def _set(value, inherited):
    """A key the file sets (validated by the schema), else the inherited value."""
    return inherited if value is None else value


def _need(path: Path, key: str, value):
    """A key required when the config extends nothing."""
    if value is None:
        raise SpecError(f"{path}: {key} is missing (required unless the config extends another)")
    return value


def _pool(path: Path, sub, key: str, base: PoolConfig | None) -> PoolConfig:
    """A pool from its validated table (``sub``, None when absent) over the inherited one."""
    if sub is None and base is None:
        raise SpecError(f"{path}: {key} table is missing (required unless the config extends another)")
    kw: dict[str, Any] = dataclasses.asdict(base) if base else \
        dataclasses.asdict(PoolConfig(hardware=""))
    if sub is not None:
        kw.update({k: getattr(sub, k) for k in type(sub).model_fields
                   if getattr(sub, k) is not None})
    if not kw["hardware"]:
        _need(path, f"{key}.hardware", None)
    try:
        load_hardware(kw["hardware"])
    except SpecError as exc:
        raise SpecError(f"{path}: {key}.hardware: {exc}") from None
    if (kw["tp"] * kw["dp"]) % kw["ep"]:
        raise SpecError(f"{path}: {key}.ep = {kw['ep']} must divide tp x dp = {kw['tp'] * kw['dp']}")
    return PoolConfig(**kw)


def _workload(path: Path, w, base: WorkloadSpec | None) -> tuple[WorkloadSpec, str]:
    """The workload from its validated table (``w``, None when absent) over the inherited one."""
    if w is None and base is None:
        raise SpecError(f"{path}: workload table is missing (required unless the config extends another)")
    b = base
    n = _need(path, "workload.n_requests", _set(w and w.n_requests, b and b.n_requests))
    rate = _need(path, "workload.arrival_rate_per_s",
                 _set(w and w.arrival_rate_per_s, b and b.arrival_rate_per_s))
    amp = _set(w and w.diurnal_amplitude, b.diurnal_amplitude if b else 0.0)
    seed = _set(w and w.seed, b.seed if b else 0)
    per_day = _set(w and w.output_tokens_per_day, b.output_tokens_per_day if b else 0.0)
    trace = (w and w.trace) or ""
    classes = list(b.classes) if b else []
    if w is not None and w.class_ is not None:
        skew = load_realism().default_expert_skew
        classes = []
        for i, c in enumerate(w.class_):
            kw = c.model_dump()
            kw["expert_skew"] = skew if kw["expert_skew"] is None else kw["expert_skew"]
            try:
                classes.append(WorkloadClass(**kw))
            except SpecError as exc:
                raise SpecError(f"{path}: workload.class[{i}]: {exc}") from None
    elif b is None:
        raise SpecError(f"{path}: workload.class is missing (required: at least one class)")
    try:
        spec = WorkloadSpec(n_requests=n, arrival_rate_per_s=rate, diurnal_amplitude=amp,
                            seed=seed, classes=tuple(classes), output_tokens_per_day=per_day)
    except SpecError as exc:
        raise SpecError(f"{path}: workload: {exc}") from None
    if trace and not os.path.isabs(trace):
        trace = str((path.parent / trace).resolve())
    return spec, trace


def bundled_config_path(path: str | os.PathLike) -> Path:
    """``path`` when it names a file (or anything but a bare name); else the bundled config
    ``configs/<name>[.toml]`` when it exists; else ``path`` (reading it names the file)."""
    from ..specs.files import bundled_dir

    p = Path(path)
    if p.exists() or len(p.parts) != 1:
        return p
    for name in (p.name, p.name + ".toml"):
        q = bundled_dir("configs") / name
        if q.is_file():
            return q
    return p


def load_config(path: str | os.PathLike, *, with_baseline: bool = True,
                _chain: tuple[Path, ...] = ()) -> FactoryConfig:
    """Load a factory config. ``extends = "other.toml"`` inherits every unset table/key;
    ``baseline = "file.toml"`` names the config ``compare`` runs against. The file is first
    checked against :class:`~inference_factory.specs.schema.FactoryConfigFile`; an ``extends``
    chain must name files and must not loop. A bare name that is not a file here
    (``"factory"``, ``"deepseek-day.toml"``) is the bundled config of that name
    (``inference-factory configs list``), so a script or notebook runs from any folder."""
    p = Path(path) if _chain else bundled_config_path(path)
    from ..specs import schema   # pydantic: imported when a config is read, not with plan

    doc = schema.check(schema.FactoryConfigFile, read_toml(p), str(p))
    extends = doc.extends or ""
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
    name = _need(p, "name", _set(doc.name, base and base.name))
    from ..specs.engines import resolve_serving_engine
    engine = resolve_serving_engine(
        _set(doc.engine, base.engine.name if base is not None and base.engine else None),
        f"{p}: engine")
    desc = _set(doc.description, base.description if base else "")

    mt = doc.model
    if mt is None and base is None:
        raise SpecError(f"{p}: model table is missing (required unless the config extends another)")
    model = _need(p, "model.name", _set(mt and mt.name, base and base.model))
    price_id = _need(p, "model.price", _set(mt and mt.price, base and base.price.id))
    try:
        spec = load_model(model)
    except SpecError as exc:
        raise SpecError(f"{p}: model.name: {exc}") from None
    prices = load_prices()
    if price_id not in prices:
        raise SpecError(f"{p}: model.price = {price_id!r} is not a price id; available: {sorted(prices)}")

    workload, trace = _workload(p, doc.workload, base.workload if base else None)
    if not trace and base is not None and doc.workload is None:
        trace = base.trace_path
    prefill = _pool(p, doc.prefill, "prefill", base.prefill if base else None)
    decode = _pool(p, doc.decode, "decode", base.decode if base else None)

    from ..engine import architecture      # numpy: loaded with a config, not the CLI

    for key, pool in (("prefill", prefill), ("decode", decode)):
        why = architecture(spec).tp_error(pool.tp)     # each attention kind's heads split whole
        if why:
            raise SpecError(f"{p}: {key}.{why}")
        if pool.unit_gpus % (pool.tp * pool.dp):       # a unit holds whole instances
            raise SpecError(f"{p}: {key}.unit_gpus = {pool.unit_gpus} must be a multiple of "
                            f"the instance's tp x dp = {pool.tp * pool.dp} GPUs")

    lv = doc.levers
    bl = base.levers if base else Levers()
    lk = {k: _set(getattr(lv, k, None), getattr(bl, k)) for k in dataclasses.asdict(bl)}
    lk["cache_tiers"] = tuple(x for x in TIERS if x in lk["cache_tiers"])
    if spec.is_moe and lk["redundant_experts"] > spec.n_routed_experts:
        raise SpecError(f"{p}: levers.redundant_experts = {lk['redundant_experts']} exceeds the "
                        f"{spec.n_routed_experts} routed experts of {spec.name!r}; allowed "
                        f"0..{spec.n_routed_experts} (at most one extra replica per expert)")
    if spec.is_moe and lk["redundant_experts"] and (spec.n_routed_experts + lk["redundant_experts"]) < decode.ep:
        raise SpecError(f"{p}: decode.ep = {decode.ep} exceeds routed + redundant experts")

    if lk["low_precision"]:
        for key, pool in (("prefill", prefill), ("decode", decode)):
            hw_pool = load_hardware(pool.hardware)
            if "fp8" not in hw_pool.dense_flop_per_s:
                raise SpecError(
                    f"{p}: levers.low_precision = true needs FP8 (the lever's FP8 KV cache and "
                    f"dispatch), which {key}.hardware = {hw_pool.name!r} does not compute in "
                    f"(it computes in {', '.join(sorted(hw_pool.dense_flop_per_s))}); allowed: "
                    "low_precision = false, or a device with FP8")

    ttft = _set(doc.slo and doc.slo.ttft_s, base.ttft_slo_s if base else 5.0)
    tpot = _set(doc.slo and doc.slo.tpot_s, base.tpot_slo_s if base else 0.1)
    if doc.slo is not None and doc.slo.tpot_s is not None and tpot >= SUSPICIOUS_TPOT_S:
        warn(f"{p}: slo.tpot_s = {tpot:g} s per output token ({1 / tpot:.3g} tokens/s per "
             f"user) looks like milliseconds; tpot_s is in seconds ({tpot:g} ms is {tpot / 1e3:g})")
    if doc.model is not None and prices[price_id].model != spec.name:
        warn(f"{p}: model.price = {price_id!r} is a price of {prices[price_id].model!r}, not of "
             f"{spec.name!r}; margins compare another model's list price")
    util = _set(doc.fleet and doc.fleet.target_utilization,
                base.target_utilization if base else default_target_utilization())

    ec = doc.economics
    be = base.economics if base else FACTORY_COSTS
    hw = load_hardware(decode.hardware)
    # a rate the base took from its price basis is re-read for this config's hardware and
    # basis; a rate a file states is inherited (prices.price_gpu_hour: one basis per run)
    from_basis = be.rate_from_basis or bool(ec and ec.price_basis)
    inherited_econ = dataclasses.replace(
        be, capex_usd_per_gpu=be.capex_usd_per_gpu or hw.price.get("capex_usd_per_gpu", 0.0),
        rental_usd_per_gpu_hour=0.0 if from_basis else be.rental_usd_per_gpu_hour)
    econ = CostModel(**{k: _set(getattr(ec, k, None), v)
                        for k, v in dataclasses.asdict(inherited_econ).items()})
    econ = _price_basis(p, econ, hw)
    if econ.cost_basis == "capex" and econ.capex_usd_per_gpu <= 0:
        raise SpecError(f"{p}: economics.capex_usd_per_gpu is needed for cost_basis = 'capex' "
                        f"({decode.hardware} lists no capex indication)")
    if econ.cost_basis == "rental" and econ.rental_usd_per_gpu_hour <= 0:
        raise SpecError(f"{p}: economics.rental_usd_per_gpu_hour is needed for cost_basis = 'rental'")

    bt = doc.baseline or ""
    inherited = False
    if not bt and base is not None and base.baseline_path and with_baseline:
        bt, inherited = base.baseline_path, True
    cfg = FactoryConfig(name=name, description=desc, model=spec.name, price=prices[price_id],
                        workload=workload, trace_path=trace, prefill=prefill, decode=decode,
                        levers=Levers(**lk), ttft_slo_s=ttft, tpot_slo_s=tpot,
                        target_utilization=util, economics=econ, path=str(p), engine=engine,
                        published=_published(p, doc.published))
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


def _published(p, pub) -> dict:
    """``[published]`` as a dict; its figures need the ``source`` they are from."""
    out = pub.model_dump(exclude_none=True) if pub is not None else {}
    if out and not out.get("source"):
        raise SpecError(f"{p}: published.source is missing: name the source tag of "
                        "docs/REFERENCES.md the figures are from")
    return out


def _price_basis(p, econ: CostModel, hw) -> CostModel:
    """``econ`` with its rental rate read once from its price basis when the file gives none,
    and ``price_basis_label`` saying what priced the GPU-hour
    (:func:`~inference_factory.specs.prices.price_basis_label`, the one label every costed
    output states)."""
    from ..specs.prices import check_power_basis, gpu_hour_price, price_basis_label

    try:
        check_power_basis(econ.power_basis)
        label = price_basis_label(econ, [hw])
        if econ.cost_basis != "rental" or econ.rental_usd_per_gpu_hour:
            return dataclasses.replace(econ, price_basis_label=label, rate_from_basis=False)
        g = gpu_hour_price(hw, econ)
    except SpecError as exc:
        raise SpecError(f"{p}: economics: {exc}") from None
    return dataclasses.replace(econ, rental_usd_per_gpu_hour=g.usd_per_gpu_hour,
                               price_basis_label=label, rate_from_basis=True)


def with_engine(cfg: FactoryConfig, engine=None, where: str = "--engine") -> FactoryConfig:
    """``cfg`` (and its baseline) on the serving-engine profile ``engine`` (a name or a
    profile; None keeps the config's): ``--engine`` of simulate and compare wins over the
    files' ``engine``. An unknown name is one line naming ``where``."""
    if engine is None:
        return cfg
    from ..specs.engines import resolve_serving_engine

    eng = resolve_serving_engine(engine, where)
    out = dataclasses.replace(cfg, engine=eng)
    if cfg.baseline is not None:
        out = dataclasses.replace(out, baseline=dataclasses.replace(cfg.baseline, engine=eng))
    return out


def with_price_basis(cfg: FactoryConfig, price_basis: str | None = None,
                     power_basis: str | None = None, _side: bool = False) -> FactoryConfig:
    """``cfg`` (and its baseline) re-priced on ``price_basis`` and/or counted on
    ``power_basis`` (``--price-basis`` / ``--power-basis`` of simulate and compare: the option
    wins over the file's own rental rate). A price basis on a capex config is refused
    (:class:`~inference_factory.specs.prices.CostModel`); a capex baseline keeps its capex
    and its label says so."""
    if price_basis is None and power_basis is None:
        return cfg
    ec = cfg.economics
    if _side and ec.cost_basis == "capex":
        price_basis = None
    if price_basis is not None:
        ec = dataclasses.replace(ec, price_basis=price_basis, rental_usd_per_gpu_hour=0.0)
    if power_basis is not None:
        ec = dataclasses.replace(ec, power_basis=power_basis)
    if ec.rate_from_basis:      # re-read from the basis, so the label names it, not a user rate
        ec = dataclasses.replace(ec, rental_usd_per_gpu_hour=0.0)
    ec = _price_basis(cfg.path or "--price-basis", ec, load_hardware(cfg.decode.hardware))
    out = dataclasses.replace(cfg, economics=ec)
    if cfg.baseline is not None:
        out = dataclasses.replace(out, baseline=with_price_basis(cfg.baseline, price_basis,
                                                                 power_basis, _side=True))
    return out
