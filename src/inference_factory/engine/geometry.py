"""Resolved structural choices of one block (model, device, parallelism, precisions) and the
quantities that depend on them only: which layers a pass runs, expert placement and the
busiest rank's load, weight and activation memory per GPU."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from .. import units
from ..errors import SpecError
from ..kernels import memory as kmem
from ..kernels import moe as kmoe
from ..specs.realism import Realism
from ..bounds import MAX_GPUS
from ..specs import HardwareSpec, ModelSpec
from .layer_mix import architecture
from .precision import WEIGHT_ONLY_FORMATS, compute_precision  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class Geom:
    m: ModelSpec
    hw: HardwareSpec
    rl: Realism
    tp: int
    dp: int
    ep: int
    redundant: int
    skew: float
    wprec: str
    eprec: str
    kvprec: str
    aprec: str
    dispatch_b: float
    combine_b: float
    overlap: str
    tier: str
    context_cv: float = 0.0
    popularity: tuple | None = None
    placement_imbalance: float = 1.0
    bins: tuple = ()

    @property
    def n_gpus(self) -> int:
        return self.tp * self.dp

    @property
    def moe_tp(self) -> float:
        return self.n_gpus / self.ep

    @property
    def head_precision(self) -> str:
        """Embedding and lm_head stay in 16 bits when weights are quantized below that
        (DeepSeek-V3 and gpt-oss keep them BF16)."""
        return self.wprec if units.BYTES_PER_ELEMENT[self.wprec] >= 2 else "bf16"



def validate_struct(m: ModelSpec, hw: HardwareSpec, s: Mapping[str, Any], rl: Realism,
                    popularity=None) -> Geom:
    """Check one combination of structural choices and resolve it into a :class:`Geom`."""
    def pos_int(key):
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_GPUS:
            raise SpecError(f"{key} = {v!r} must be an integer in [1, {MAX_GPUS:,}]")
        return int(v)

    architecture(m)                      # the attention kinds check their keys
    tp, dp, ep = pos_int("tp"), pos_int("dp"), pos_int("ep")
    why = architecture(m).tp_error(tp)
    if why:
        raise SpecError(f"{why} (each GPU of a TP group holds whole heads)")
    if (tp * dp) % ep:
        raise SpecError(f"ep = {ep} must divide the instance's GPUs tp x dp = {tp * dp}")
    red = s["redundant_experts"]
    if isinstance(red, bool) or not isinstance(red, (int, np.integer)) or red < 0:
        raise SpecError(f"redundant_experts = {red!r} must be an integer >= 0")
    if m.is_moe and red > m.n_routed_experts:
        raise SpecError(f"redundant_experts = {red} exceeds the {m.n_routed_experts} routed "
                        f"experts of {m.name!r}; allowed 0..{m.n_routed_experts} (at most one "
                        "extra replica per expert)")
    if not m.is_moe and (ep > 1 or red > 0):
        raise SpecError(f"model {m.name!r} is dense: ep = {ep} and redundant_experts = {red} "
                        "apply to MoE models only (use ep = 1, redundant_experts = 0)")
    if m.is_moe and ep > m.n_routed_experts + red:
        raise SpecError(f"ep = {ep} exceeds the {m.n_routed_experts + red} routed experts "
                        f"(+ redundant) of {m.name!r}")
    skew = s["expert_skew"]
    if skew is None:
        skew = rl.default_expert_skew
    if isinstance(skew, bool) or not isinstance(skew, (int, float)) or skew < 0 or skew > 4:
        raise SpecError(f"expert_skew = {skew!r} must be a number in [0, 4]")
    cv = s["context_cv"] if s["context_cv"] is not None else rl.default_context_cv
    if isinstance(cv, bool) or not isinstance(cv, (int, float)) or not 0 <= cv <= 10:
        raise SpecError(f"context_cv = {cv!r} must be a number in [0, 10]")
    precs = set(units.PRECISIONS)

    def prec(key, default):
        v = s[key] if s[key] is not None else default
        if v not in precs:
            raise SpecError(f"{key} = {v!r} is not one of {sorted(precs)}")
        return v

    wp = prec("weight_precision", m.weight_precision)
    mp = prec("moe_precision", m.expert_precision if s["weight_precision"] is None else wp)
    kvp, ap = prec("kv_precision", "bf16"), prec("attention_precision", "bf16")
    dpb, cpb = prec("dispatch_precision", "fp8"), prec("combine_precision", "bf16")
    for key, p in (("weight_precision", wp), ("attention_precision", ap)) + (
            (("moe_precision", mp),) if m.is_moe else ()):
        if p in hw.dense_flop_per_s or (key != "attention_precision"
                                        and compute_precision(hw, p) is not None):
            continue        # tensor cores for p, or weights stored in p computed at 16 bits
        listed = sorted(hw.dense_flop_per_s)
        src = "" if s[key] is not None else f" ({m.name}'s native precision)"
        raise SpecError(f"{key} = {p!r}{src}: {hw.name} ({hw.path}) has no dense {p} "
                        f"tensor-core rate; it lists {listed}: pass {key} = one of them")
    if s["overlap"] not in ("none", "two-batch"):
        raise SpecError(f"overlap = {s['overlap']!r} is not one of ['none', 'two-batch']")
    if s["cache_tier"] not in ("hbm", "dram", "nvme"):
        raise SpecError(f"cache_tier = {s['cache_tier']!r} is not one of ['dram', 'hbm', 'nvme']")
    pop = _popularity(m, popularity, float(skew))
    imbalance, bins = (1.0, ())
    if m.is_moe:
        imbalance, bins = expert_placement(m.n_routed_experts, m.experts_per_token, pop, ep,
                                           int(red))
    return Geom(m=m, hw=hw, rl=rl, tp=tp, dp=dp, ep=ep, redundant=int(red), skew=float(skew),
                wprec=wp, eprec=mp, kvprec=kvp, aprec=ap,
                dispatch_b=units.BYTES_PER_ELEMENT[dpb], combine_b=units.BYTES_PER_ELEMENT[cpb],
                overlap=s["overlap"], tier=s["cache_tier"], context_cv=float(cv),
                popularity=None if pop is None else tuple(pop), placement_imbalance=imbalance,
                bins=bins)


def for_draft(g: Geom, draft: ModelSpec) -> Geom:
    """The block's choices applied to a separate draft model: one micro-batch, and the
    draft's own expert popularity (at the block's skew) and placement if it is an MoE."""
    pop = _popularity(draft, None, g.skew)
    imbalance, bins = (1.0, ())
    if draft.is_moe:
        imbalance, bins = expert_placement(draft.n_routed_experts, draft.experts_per_token,
                                           pop, g.ep, 0)
    return replace(g, m=draft, overlap="none", redundant=0,
                   popularity=None if pop is None else tuple(pop),
                   placement_imbalance=imbalance, bins=bins)


def _popularity(m: ModelSpec, popularity, skew: float) -> np.ndarray | None:
    if not m.is_moe:
        return None
    if popularity is None:
        p = kmoe.zipf_popularity(n_experts=m.n_routed_experts, skew=skew)
        what = f"expert_skew = {skew:g}"
    else:
        p = np.asarray(popularity, dtype=float)
        if (p.shape != (m.n_routed_experts,) or np.any(~np.isfinite(p)) or np.any(p < 0)
                or p.sum() <= 0):
            raise SpecError(f"expert_popularity must be {m.n_routed_experts} non-negative shares "
                            f"(one per routed expert of {m.name!r}); got shape {p.shape}")
        p = p / p.sum()
        what = "expert_popularity"
    top = p.max() * m.experts_per_token
    if top > 1.0 + 1e-9:
        raise SpecError(f"{what} gives the most popular expert {top:.2f}x all tokens (share "
                        f"{p.max():.3f} x top-{m.experts_per_token}); a token picks an expert at "
                        f"most once, so each share must be <= 1/{m.experts_per_token}")
    return p


_PLACEMENT_CACHE: dict[tuple, tuple[float, tuple]] = {}


def expert_placement(n_experts: int, top_k: int, pop, ep: int, redundant: int,
                     n_bins: int = 8) -> tuple[float, tuple]:
    """The busiest EP rank's routed load over the mean (placement only; routing noise is
    separate), and replica hit-probability bins (m_j replicas each chosen by a token with
    probability q_j) for the expected-distinct-experts term. EPLB-style balanced placement
    when redundant experts exist, else placement by expert id."""
    key = (n_experts, top_k, tuple(pop), ep, redundant, n_bins)
    if key in _PLACEMENT_CACHE:
        return _PLACEMENT_CACHE[key]
    imbalance = kmoe.rank_load_imbalance(popularity=pop, n_ranks=ep, n_redundant=redundant,
                                         balanced=redundant > 0)
    replicas = kmoe.replica_counts(popularity=pop, n_redundant=redundant)
    q = np.sort(np.repeat(top_k * pop / replicas, replicas))
    if np.ptp(q) <= 1e-12 * q.max():
        bins = ((float(q.size), float(q[0])),)
    else:
        bins = tuple((float(c.size), float(c.mean()))
                     for c in np.array_split(q, min(n_bins, q.size)) if c.size)
    _PLACEMENT_CACHE[key] = (imbalance, bins)
    return imbalance, bins


@dataclass(frozen=True)
class Layers:
    """Which layers a pass runs: the main model, or one MTP draft module. ``attention``
    lists (attention group, layers) of the attention mix (:mod:`.attention`)."""

    n_total: int
    attention: tuple
    n_dense_ffn: int
    n_moe: int
    dense_path_params: float
    logits: bool = True


def main_layers(m: ModelSpec) -> Layers:
    arch = architecture(m)
    return Layers(m.n_layers, tuple(arch.groups()), m.n_dense_layers, m.n_moe_layers,
                  arch.n_dense_path_params)


def mtp_layers(m: ModelSpec) -> Layers:
    """One MTP module: one transformer layer of the model's MoE (or dense) kind, with the
    attention of ``[attention]``, plus the 2h -> h projection; embedding and head are shared
    (DeepSeek-V3 report sec. 2.2)."""
    moe = 1 if m.is_moe else 0
    params = (architecture(m).n_attention_params_per_layer + m.n_norm_params_per_layer
              + (m.n_moe_non_routed_params_per_layer if moe
                 else m.n_dense_ffn_params_per_layer)
              + 2.0 * m.hidden_size ** 2 + 3.0 * m.hidden_size)
    return Layers(1, ((architecture(m).primary, 1),), 1 - moe, moe, params)


def weight_bytes_per_gpu(g: Geom, with_mtp: bool) -> float:
    """Weight bytes per GPU (``kernels.memory``): the dense path and the embedding/head
    split over TP, the attention kinds' replicated weights (MLA's latent projections), the rank's routed-expert slots, and
    (``with_mtp``) one MTP module."""
    m = g.m
    wb = units.BYTES_PER_ELEMENT[g.wprec]
    eb = units.BYTES_PER_ELEMENT[g.eprec]
    hb = units.BYTES_PER_ELEMENT[g.head_precision]
    arch = architecture(m)
    dense = kmem.sharded_weight_bytes(n_params=arch.n_dense_path_params, bytes_per_param=wb,
                                      n_shards=g.tp)
    if g.tp > 1:        # weights an attention kind keeps whole on every TP rank (MLA's latent)
        dense += arch.replicated_weight_bytes(g.tp, wb)
        # and a latent MoE's projections, replicated (aiconfigurator kimi_k3.py)
        dense += kmem.replicated_weight_extra_bytes(
            n_params=m.n_moe_layers * m.n_latent_params_per_layer, bytes_per_param=wb, tp=g.tp)
    heads = kmem.sharded_weight_bytes(n_params=m.n_embedding_params + m.n_lm_head_params,
                                      bytes_per_param=hb, n_shards=g.tp)
    experts = 0.0
    if m.is_moe:
        slots = kmem.expert_slots_per_rank(n_experts=m.n_routed_experts,
                                           n_redundant=g.redundant, ep=g.ep)
        experts = kmem.routed_expert_bytes(n_layers=m.n_moe_layers, slots_per_rank=slots,
                                           n_expert_params=m.n_expert_params,
                                           bytes_per_param=eb, expert_tp=g.moe_tp)
    mtp = 0.0
    if with_mtp and m.n_mtp_modules:
        L = mtp_layers(m)
        mtp = kmem.sharded_weight_bytes(n_params=L.dense_path_params, bytes_per_param=wb,
                                        n_shards=g.tp)
        if m.is_moe:
            mtp += kmem.routed_expert_bytes(
                n_layers=1, slots_per_rank=kmem.expert_slots_per_rank(
                    n_experts=m.n_routed_experts, n_redundant=0, ep=g.ep),
                n_expert_params=m.n_expert_params, bytes_per_param=eb, expert_tp=g.moe_tp)
    return dense + heads + experts + mtp


def activation_bytes_per_token(g: Geom) -> float:
    """Working memory per in-flight token (``kernels.memory.activation_bytes_per_token``)."""
    m = g.m
    return kmem.activation_bytes_per_token(
        vocab_size=m.vocab_size, hidden_size=m.hidden_size,
        dense_intermediate_size=m.dense_intermediate_size,
        expert_intermediate_size=m.expert_intermediate_size,
        experts_per_token=m.experts_per_token, tp=g.tp)
