"""The roofline engine: one call evaluates prefill and decode over a grid of named axes.

``evaluate(model, hardware, batch_size=[1, 8, 64], kv_len=[1024, 4096], ...)`` returns an
``xr.Dataset`` whose dimensions are the arguments given as lists. Numeric axes (batch size,
context, prompt length, draft depth, acceptance, cache-hit rate) broadcast through the pure
kernels in :mod:`inference_factory.kernels`: there is no Python loop over grid points.
Structural choices (hardware, model, parallelism, precisions, overlap policy) may be lists
too; each combination is one vectorized block, concatenated along its own dimension.

The engine wires kernels together: it counts, per operation group, the parameters, tokens
and bytes the kernels take (documented in docs/MODEL.md); the rate equations are kernels.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Literal, Mapping

import numpy as np
import xarray as xr

from . import __version__, units
from .errors import SpecError
from .kernels import attention as katt
from .kernels import cache as kcache
from .kernels import comm as kcomm
from .kernels import moe as kmoe
from .kernels import roofline as kroof
from .kernels import speculative as kspec
from .realism import Realism, load_realism
from .specs import HardwareSpec, ModelSpec, load_hardware, load_model

Overlap = Literal["none", "two-batch"]
CacheTier = Literal["hbm", "dram", "nvme"]

#: Numeric axes: broadcast through the kernels. name -> (default, unit, lower, upper, integer)
NUMERIC_AXES: dict[str, tuple[float, str, float, float, bool]] = {
    "batch_size": (1, "sequences per DP rank", 1, math.inf, False),
    "kv_len": (1024, "tokens of decode context", 1, math.inf, False),
    "prompt_len": (1024, "prompt tokens", 1, math.inf, False),
    "prefill_batch_size": (1, "prompts per DP rank per pass", 1, math.inf, False),
    "draft_depth": (0, "draft tokens per step", 0, 64, True),
    "acceptance_rate": (0.8, "fraction per position", 0.0, 1.0, False),
    "cache_hit_rate": (0.0, "fraction of input tokens", 0.0, 1.0, False),
}

#: Structural axes: one vectorized block per combination. name -> default
STRUCT_AXES: dict[str, Any] = {
    "tp": 1, "dp": 1, "ep": 1, "redundant_experts": 0, "expert_skew": 0.0,
    "weight_precision": None, "moe_precision": None, "kv_precision": "bf16",
    "attention_precision": "bf16", "dispatch_precision": "fp8", "combine_precision": "bf16",
    "overlap": "none", "cache_tier": "dram",
}

RESOURCES = ("compute", "memory", "comm", "overhead")


# --------------------------------------------------------------------------------------------
# resolved scalars of one block
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Geom:
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
    popularity: tuple | None = None

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

    @property
    def kv_split(self) -> float:
        """GPUs of a TP group over which one sequence's KV is partitioned. MLA's latent is
        shared by all heads, so TP replicates it (hence DP attention for MLA models)."""
        if self.m.is_mla:
            return 1.0
        return float(min(self.tp, self.m.n_kv_heads))


def _validate_struct(m: ModelSpec, hw: HardwareSpec, s: Mapping[str, Any], rl: Realism,
                     popularity=None) -> _Geom:
    def pos_int(key):
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{key} = {v!r} must be a positive integer")
        return int(v)

    tp, dp, ep = pos_int("tp"), pos_int("dp"), pos_int("ep")
    if (tp * dp) % ep:
        raise SpecError(f"ep = {ep} must divide the instance's GPUs tp x dp = {tp * dp}")
    red = s["redundant_experts"]
    if isinstance(red, bool) or not isinstance(red, (int, np.integer)) or red < 0:
        raise SpecError(f"redundant_experts = {red!r} must be an integer >= 0")
    if not m.is_moe and (ep > 1 or red > 0):
        raise SpecError(f"model {m.name!r} is dense: ep = {ep} and redundant_experts = {red} "
                        "apply to MoE models only (use ep = 1, redundant_experts = 0)")
    if m.is_moe and ep > m.n_routed_experts + red:
        raise SpecError(f"ep = {ep} exceeds the {m.n_routed_experts + red} routed experts "
                        f"(+ redundant) of {m.name!r}")
    skew = s["expert_skew"]
    if isinstance(skew, bool) or not isinstance(skew, (int, float)) or skew < 0 or skew > 4:
        raise SpecError(f"expert_skew = {skew!r} must be a number in [0, 4]")
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
        if p not in hw.dense_flop_per_s:
            listed = sorted(hw.dense_flop_per_s)
            src = "" if s[key] is not None else f" ({m.name}'s native precision)"
            raise SpecError(f"{key} = {p!r}{src}: {hw.name} ({hw.path}) has no dense {p} "
                            f"tensor-core rate; it lists {listed}: pass {key} = one of them")
    if s["overlap"] not in ("none", "two-batch"):
        raise SpecError(f"overlap = {s['overlap']!r} is not one of ['none', 'two-batch']")
    if s["cache_tier"] not in ("hbm", "dram", "nvme"):
        raise SpecError(f"cache_tier = {s['cache_tier']!r} is not one of ['dram', 'hbm', 'nvme']")
    return _Geom(m=m, hw=hw, rl=rl, tp=tp, dp=dp, ep=ep, redundant=int(red), skew=float(skew),
                 wprec=wp, eprec=mp, kvprec=kvp, aprec=ap,
                 dispatch_b=units.BYTES_PER_ELEMENT[dpb], combine_b=units.BYTES_PER_ELEMENT[cpb],
                 overlap=s["overlap"], tier=s["cache_tier"], popularity=_popularity(m, popularity))


def _popularity(m: ModelSpec, popularity) -> tuple | None:
    if popularity is None or not m.is_moe:
        return None
    p = np.asarray(popularity, dtype=float)
    if p.shape != (m.n_routed_experts,) or np.any(~np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise SpecError(f"expert_popularity must be {m.n_routed_experts} non-negative shares "
                        f"(one per routed expert of {m.name!r}); got shape {p.shape}")
    return tuple(p / p.sum())


# --------------------------------------------------------------------------------------------
# one forward pass on one GPU
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layers:
    """Which layers a pass runs: the main model, or one MTP draft module."""

    n_total: int
    n_window: int
    n_dense_ffn: int
    n_moe: int
    dense_path_params: float
    logits: bool = True


def _main_layers(m: ModelSpec) -> _Layers:
    return _Layers(m.n_layers, m.n_sliding_window_layers, m.n_dense_layers, m.n_moe_layers,
                   m.n_dense_path_params)


def _mtp_layers(m: ModelSpec) -> _Layers:
    """One MTP module: one transformer layer of the model's MoE (or dense) kind plus the
    2h -> h projection; embedding and head are shared (DeepSeek-V3 report sec. 2.2)."""
    moe = 1 if m.is_moe else 0
    params = (m.n_attention_params_per_layer + m.n_norm_params_per_layer
              + (m.n_router_params_per_layer + m.n_shared_experts * m.n_expert_params if moe
                 else m.n_dense_ffn_params_per_layer)
              + 2.0 * m.hidden_size ** 2 + 3.0 * m.hidden_size)
    return _Layers(1, 0, 1 - moe, moe, params)


_BINS_CACHE: dict[tuple, tuple[list[tuple[float, float]], float]] = {}


def _expert_bins(g: _Geom, n_bins: int = 8) -> tuple[list[tuple[float, float]], float]:
    """Replica hit-probability bins (m_j replicas, each chosen by a token with prob. q_j) and
    the placement's max/mean load, for the block's skew, EP degree and redundant experts
    (cached: the placement depends on these few scalars only)."""
    m = g.m
    key = (m.n_routed_experts, m.experts_per_token, g.skew, g.ep, g.redundant, g.popularity,
           n_bins)
    if key not in _BINS_CACHE:
        _BINS_CACHE[key] = _compute_expert_bins(g, n_bins)
    return _BINS_CACHE[key]


def _compute_expert_bins(g: _Geom, n_bins: int) -> tuple[list[tuple[float, float]], float]:
    m = g.m
    if g.popularity is not None:
        pop = np.asarray(g.popularity, dtype=float)
    else:
        pop = kmoe.zipf_popularity(n_experts=m.n_routed_experts, skew=g.skew)
    balanced = g.redundant > 0
    imbalance = kmoe.rank_load_imbalance(popularity=pop, n_ranks=g.ep, n_redundant=g.redundant,
                                         balanced=balanced)
    replicas = kmoe.replica_counts(popularity=pop, n_redundant=g.redundant)
    q = np.repeat(m.experts_per_token * pop / replicas, replicas)
    q = np.sort(q)
    if np.ptp(q) <= 1e-12 * q.max():        # uniform: one exact bin
        return [(float(q.size), float(q[0]))], imbalance
    bins = []
    for chunk in np.array_split(q, min(n_bins, q.size)):
        if chunk.size:
            bins.append((float(chunk.size), float(chunk.mean())))
    return bins, imbalance


def _forward(g: _Geom, L: _Layers, *, seqs, new_tokens, cached_tokens, kv_read_tokens,
             logit_tokens_per_seq, phase: str, micro_batches: int = 1):
    """FLOPs, bytes and times of one forward pass of ``seqs`` sequences per attention-DP rank
    on one GPU. Returns a dict of DataArrays/floats (per GPU, per pass)."""
    m, hw, rl = g.m, g.hw, g.rl
    mb = float(micro_batches)
    seqs = seqs / mb
    tokens = seqs * new_tokens                    # tokens per DP rank per micro-batch
    wb = units.BYTES_PER_ELEMENT[g.wprec]
    eb = units.BYTES_PER_ELEMENT[g.eprec]
    hb = units.BYTES_PER_ELEMENT[g.head_precision]
    kvb_layer = m.kv_bytes_per_token_per_layer(g.kvprec)
    h = m.hidden_size
    tp = g.tp

    def gemm_rate(prec, m_tokens):
        peak = hw.flop_per_s(prec)
        frac = kroof.gemm_efficiency_frac(m_tokens=m_tokens,
                                          large_gemm_frac=rl.large_gemm_frac(hw, prec),
                                          tile_m_tokens=rl.tile_m)
        return peak * frac

    bw = hw.hbm_bw_bytes_per_s
    groups = {}

    # dense path: attention projections, norms, dense FFNs, routers, shared experts
    flop = 2.0 * tokens * L.dense_path_params / tp
    groups["dense"] = (flop, L.dense_path_params * wb / tp, gemm_rate(g.wprec, tokens),
                       bw * rl.weight_hbm_frac)
    if m.is_mla and phase == "prefill":
        # non-absorbed MLA: the cached prefix's latent is up-projected to K_nope and V again,
        # a GEMM whose M is the cached tokens (its weights are already streamed above)
        kv_up = m.kv_lora_rank * m.n_q_heads * (m.qk_nope_head_dim + m.head_dim_v)
        prefix = seqs * cached_tokens
        groups["mla_prefix_up"] = (2.0 * prefix * kv_up * L.n_total / tp, 0.0,
                                   gemm_rate(g.wprec, prefix), bw * rl.weight_hbm_frac)

    # embedding rows and lm_head (logits only where needed: every verified position in
    # decode, the last prompt position in prefill)
    logit_tokens = seqs * logit_tokens_per_seq
    head_params = m.vocab_size * h
    flop = 2.0 * logit_tokens * head_params / tp
    nbytes = head_params * hb / tp + tokens * h * hb / tp   # vocab-parallel shards
    groups["lm_head"] = (flop, nbytes, gemm_rate(g.head_precision, logit_tokens),
                         bw * rl.weight_hbm_frac)

    # routed experts
    expert_eff = 1.0
    routed_busiest = 0.0
    if m.is_moe and L.n_moe:
        bins, placement_imbalance = _expert_bins(g)
        total_tokens = tokens * g.dp                   # unique tokens entering the EP group
        mean_routed = total_tokens * m.experts_per_token / g.ep
        imbalance = placement_imbalance
        if rl.routing and g.ep > 1:
            imbalance = imbalance * kmoe.routing_fluctuation_factor(
                mean_tokens_per_rank=mean_routed, n_ranks=g.ep)
        routed_busiest = mean_routed * imbalance
        distinct = kmoe.expected_distinct_experts_popular(expert_hit_prob=bins,
                                                          tokens=total_tokens) / g.ep
        flop = 2.0 * routed_busiest * m.n_expert_params / g.moe_tp * L.n_moe
        nbytes = distinct * m.n_expert_params * eb / g.moe_tp * L.n_moe
        m_per_expert = routed_busiest / np.maximum(distinct, 1e-9)
        groups["moe"] = (flop, nbytes, gemm_rate(g.eprec, m_per_expert), bw * rl.weight_hbm_frac)
        expert_eff = 1.0 / imbalance

    # attention core
    heads = m.n_q_heads / tp
    full = katt.causal_attended_positions(new_tokens=new_tokens, cached_tokens=cached_tokens)
    if m.is_mla and phase == "decode":
        core = katt.mla_absorbed_core_flop(attended_positions=full, n_q_heads=heads,
                                           kv_lora_rank=m.kv_lora_rank,
                                           qk_rope_head_dim=m.qk_rope_head_dim)
    else:
        core = katt.attention_core_flop(attended_positions=full, n_q_heads=heads,
                                        head_dim_qk=m.head_dim_qk, head_dim_v=m.head_dim_v)
    flop = seqs * core * (L.n_total - L.n_window)
    if L.n_window:
        win = katt.windowed_attended_positions(new_tokens=new_tokens, cached_tokens=cached_tokens,
                                               window_tokens=m.sliding_window_tokens)
        flop = flop + seqs * katt.attention_core_flop(
            attended_positions=win, n_q_heads=heads, head_dim_qk=m.head_dim_qk,
            head_dim_v=m.head_dim_v) * L.n_window
    n_full = L.n_total - L.n_window
    read = katt.kv_read_bytes(sequences=seqs, kv_len_tokens=kv_read_tokens,
                              kv_bytes_per_token_full=kvb_layer * n_full,
                              kv_bytes_per_token_window=kvb_layer * L.n_window,
                              window_tokens=m.sliding_window_tokens)
    write = tokens * kvb_layer * L.n_total
    groups["attention"] = (flop, (read + write) / g.kv_split,
                           hw.flop_per_s(g.aprec) * rl.attn_compute_frac, bw * rl.attn_hbm_frac)

    # communication
    up_bw = hw.scale_up_bw_bytes_per_s * rl.up_frac
    out_bw = hw.scale_out_bw_bytes_per_s * rl.out_frac
    comm = 0.0
    if tp > 1:
        msg = tokens * h * 2.0   # BF16 activations
        # TP groups span nodes when tp exceeds the scale-up domain
        link = up_bw if tp <= hw.scale_up_domain_gpus else out_bw
        lat = rl.up_latency_s if tp <= hw.scale_up_domain_gpus else rl.out_latency_s
        comm = comm + 2.0 * L.n_total * kcomm.ring_allreduce_s(
            message_bytes=msg, n_ranks=tp, link_bytes_per_s=link, latency_s=lat)
    if m.is_moe and L.n_moe and g.ep > 1:
        local_tokens = tokens / tp                    # sequence-parallel share of this GPU
        dom = hw.scale_up_domain_gpus
        c_up = kcomm.ep_copies_per_token_scale_up(experts_per_token=m.experts_per_token,
                                                  n_ranks=g.ep, domain_gpus=dom)
        # prefill uses DeepEP's normal kernels (one NIC copy per remote node, forwarded over
        # NVLink); decode uses the low-latency kernels (one NIC copy per remote expert)
        copies_out = (kcomm.ep_copies_per_token_scale_out if phase == "prefill"
                      else kcomm.ep_copies_per_token_scale_out_per_expert)
        c_out = copies_out(experts_per_token=m.experts_per_token, n_ranks=g.ep, domain_gpus=dom)
        lat = rl.out_latency_s if g.ep > dom else rl.up_latency_s
        for b in (g.dispatch_b, g.combine_b):
            per_copy = local_tokens * h * b
            comm = comm + L.n_moe * kcomm.alltoall_s(
                scale_up_bytes=per_copy * c_up, scale_out_bytes=per_copy * c_out,
                scale_up_bytes_per_s=up_bw, scale_out_bytes_per_s=out_bw, latency_s=lat)

    has_comm = tp > 1 or (m.is_moe and L.n_moe and g.ep > 1)
    if micro_batches > 1 and phase == "prefill" and has_comm:
        # overlapped communication kernels occupy SMs the GEMMs and attention then lack
        # (DeepEP normal kernels; DeepSeek's decode uses IBGDA low-latency kernels: 0 SMs)
        keep = 1.0 - rl.comm_sm_frac
        groups = {k: (f, b, r * keep, w) for k, (f, b, r, w) in groups.items()}
    # per group: time at the achieved compute rate, at the achieved bandwidth, and its
    # roofline (each division done once)
    times = [(f / r, b / w) for f, b, r, w in groups.values()]
    compute_s = sum(tf for tf, _ in times)
    memory_s = sum(tb for _, tb in times)
    ops_s = sum(kroof.roofline_time_s(compute_s=tf, memory_s=tb) for tf, tb in times)
    return {
        "flop": mb * sum(f for f, _, _, _ in groups.values()),
        "hbm_bytes": mb * sum(b for _, b, _, _ in groups.values()),
        "compute_s": mb * compute_s, "memory_s": mb * memory_s, "ops_s": mb * ops_s,
        "comm_s": mb * comm, "overhead_s": L.n_total * rl.layer_overhead_s,
        "expert_efficiency": expert_eff, "routed_tokens_busiest_rank": routed_busiest,
    }


def _combine(g: _Geom, parts) -> Any:
    if g.rl.is_ideal:
        return kroof.step_time_ideal_s(compute_s=parts["compute_s"], memory_s=parts["memory_s"],
                                       comm_s=parts["comm_s"])
    if g.overlap == "two-batch":
        return kroof.step_time_two_batch_s(ops_s=parts["ops_s"], comm_s=parts["comm_s"],
                                           overhead_s=parts["overhead_s"])
    return kroof.step_time_sum_s(ops_s=parts["ops_s"], comm_s=parts["comm_s"],
                                 overhead_s=parts["overhead_s"])


def _binding(named: Mapping[str, Any]) -> Any:
    """Label of the largest part at each point (numpy arrays in, array of labels out)."""
    names = np.asarray(list(named))
    arrays = np.broadcast_arrays(*[np.asarray(a, dtype=float) for a in named.values()])
    return names[np.argmax(np.stack(arrays), axis=0)]


# --------------------------------------------------------------------------------------------
# one block: structural choices fixed, numeric axes broadcast
# --------------------------------------------------------------------------------------------


def _evaluate_block(g: _Geom, ax: Mapping[str, Any], acceptance_by_position=None,
                    draft: ModelSpec | None = None) -> dict[str, Any]:
    m, hw, rl = g.m, g.hw, g.rl
    out: dict[str, Any] = {}
    mb = 2 if (g.overlap == "two-batch" and not rl.is_ideal) else 1
    B, ctx, d = ax["batch_size"], ax["kv_len"], ax["draft_depth"]

    # ---- decode: one verify step of B sequences x (1 + d) tokens, plus d draft passes
    verify = _forward(g, _main_layers(m), seqs=B, new_tokens=1.0 + d, cached_tokens=ctx - 1.0,
                      kv_read_tokens=ctx, logit_tokens_per_seq=1.0 + d, phase="decode",
                      micro_batches=mb)
    verify_s = _combine(g, verify)
    if draft is not None:
        dg = replace(g, m=draft)
        dpass = _forward(dg, _main_layers(draft), seqs=B, new_tokens=1.0, cached_tokens=ctx - 1.0,
                         kv_read_tokens=ctx, logit_tokens_per_seq=1.0, phase="decode")
    else:
        dpass = _forward(g, _mtp_layers(m), seqs=B, new_tokens=1.0, cached_tokens=ctx - 1.0,
                         kv_read_tokens=ctx, logit_tokens_per_seq=1.0, phase="decode")
    # a draft pass is a single micro-batch: nothing to overlap its communication with
    draft_pass_s = _combine(replace(g, m=draft if draft is not None else m, overlap="none"), dpass)
    draft_s = d * draft_pass_s
    if acceptance_by_position is not None:
        tps = kspec.expected_tokens_per_step_sequence(draft_depth=d,
                                                      acceptance_by_position=acceptance_by_position)
    else:
        tps = kspec.expected_tokens_per_step(draft_depth=d, acceptance_rate=ax["acceptance_rate"])
    step_s = verify_s + draft_s
    out["decode_compute_s"] = verify["compute_s"] + d * dpass["compute_s"]
    out["decode_memory_s"] = verify["memory_s"] + d * dpass["memory_s"]
    out["decode_comm_s"] = verify["comm_s"] + d * dpass["comm_s"]
    out["decode_overhead_s"] = verify["overhead_s"] + d * dpass["overhead_s"]
    out["decode_draft_s"] = draft_s
    out["decode_step_s"] = step_s
    out["decode_flop_per_gpu"] = verify["flop"] + d * dpass["flop"]
    out["decode_hbm_bytes_per_gpu"] = verify["hbm_bytes"] + d * dpass["hbm_bytes"]
    out["tokens_per_step"] = tps
    out["decode_tokens_per_s_per_gpu"] = B * g.dp * tps / (step_s * g.n_gpus)
    out["decode_tokens_per_s_per_user"] = tps / step_s
    out["tpot_s"] = step_s / tps
    out["expert_efficiency_frac"] = verify["expert_efficiency"]
    out["decode_binding_resource"] = _binding({r: out[f"decode_{r}_s"] for r in RESOURCES})

    # ---- prefill: Bp prompts of P tokens, a fraction h restored from the prefix cache
    Bp, P, hit = ax["prefill_batch_size"], ax["prompt_len"], ax["cache_hit_rate"]
    computed = kcache.prefill_computed_tokens(prompt_tokens=P, cache_hit_rate=hit)
    cached = P - computed
    pre = _forward(g, _main_layers(m), seqs=Bp, new_tokens=computed, cached_tokens=cached,
                   kv_read_tokens=P, logit_tokens_per_seq=1.0, phase="prefill", micro_batches=mb)
    tier_bw = {"hbm": hw.hbm_bw_bytes_per_s, "dram": hw.host_dram_bw_bytes_per_s,
               "nvme": hw.nvme_bw_bytes_per_s / hw.gpus_per_node}[g.tier]
    kvl = m.kv_bytes_per_token_per_layer(g.kvprec) / g.kv_split
    restore_s = (kcache.kv_restore_s(restored_tokens=Bp * cached,
                                     kv_bytes_per_token=kvl * m.n_full_attention_layers,
                                     tier_bytes_per_s=tier_bw)
                 + kcache.kv_restore_s(restored_tokens=Bp * np.minimum(cached, m.sliding_window_tokens),
                                       kv_bytes_per_token=kvl * m.n_sliding_window_layers,
                                       tier_bytes_per_s=tier_bw))
    # restoration is prefetched by the copy engines while the GPU computes other requests:
    # it does not occupy the prefill step, but a request cannot start before its KV is in HBM
    pre_s = _combine(g, pre)
    out["prefill_compute_s"] = pre["compute_s"]
    out["prefill_memory_s"] = pre["memory_s"]
    out["prefill_comm_s"] = pre["comm_s"]
    out["prefill_overhead_s"] = pre["overhead_s"] + 0.0 * P
    out["prefill_restore_s"] = restore_s
    out["prefill_step_s"] = pre_s
    out["prefill_flop_per_gpu"] = pre["flop"]
    out["prefill_hbm_bytes_per_gpu"] = pre["hbm_bytes"]
    out["prefill_tokens_per_s_per_gpu"] = Bp * P * g.dp / (pre_s * g.n_gpus)
    out["prefill_computed_tokens_per_s_per_gpu"] = Bp * computed * g.dp / (pre_s * g.n_gpus)
    out["ttft_s"] = np.maximum(pre_s, restore_s)
    out["prefill_binding_resource"] = _binding({r: out[f"prefill_{r}_s"] for r in RESOURCES})

    # ---- memory per GPU
    # draft weights are resident only where a draft is used (d > 0)
    uses_draft = np.asarray(d) > 0
    if draft is None:
        mtp = _weight_bytes_per_gpu(g, with_mtp=True) - _weight_bytes_per_gpu(g, with_mtp=False)
        weights = _weight_bytes_per_gpu(g, with_mtp=False) + mtp * uses_draft
    else:
        weights = (_weight_bytes_per_gpu(g, with_mtp=False)
                   + _weight_bytes_per_gpu(replace(g, m=draft, ep=1, redundant=0), False) * uses_draft)
    kv_per_seq = (ctx * m.kv_bytes_per_token(g.kvprec)
                  + np.minimum(ctx, m.sliding_window_tokens) * m.n_sliding_window_layers
                  * m.kv_bytes_per_token_per_layer(g.kvprec)) / g.kv_split
    act_per_seq = _activation_bytes_per_token(g) * (1.0 + d)
    reserve = rl.reserve_frac * hw.hbm_capacity_bytes
    free = hw.hbm_capacity_bytes - reserve - weights
    out["weight_bytes_per_gpu"] = weights
    out["kv_bytes_per_gpu"] = B * kv_per_seq
    out["activation_bytes_per_gpu"] = B * act_per_seq
    out["hbm_used_bytes_per_gpu"] = weights + reserve + B * (kv_per_seq + act_per_seq)
    out["fits"] = out["hbm_used_bytes_per_gpu"] <= hw.hbm_capacity_bytes
    out["max_batch_size"] = np.floor(np.maximum(free, 0.0) / (kv_per_seq + act_per_seq))
    return out


def _weight_bytes_per_gpu(g: _Geom, with_mtp: bool) -> float:
    m = g.m
    wb = units.BYTES_PER_ELEMENT[g.wprec]
    eb = units.BYTES_PER_ELEMENT[g.eprec]
    hb = units.BYTES_PER_ELEMENT[g.head_precision]
    dense = m.n_dense_path_params * wb / g.tp
    heads = (m.n_embedding_params + m.n_lm_head_params) * hb / g.tp
    experts = 0.0
    if m.is_moe:
        slots = math.ceil((m.n_routed_experts + g.redundant) / g.ep)
        experts = m.n_moe_layers * slots * m.n_expert_params * eb / g.moe_tp
    mtp = 0.0
    if with_mtp and m.n_mtp_modules:
        L = _mtp_layers(m)
        mtp = L.dense_path_params * wb / g.tp
        if m.is_moe:
            mtp += math.ceil(m.n_routed_experts / g.ep) * m.n_expert_params * eb / g.moe_tp
    return dense + heads + experts + mtp


def _activation_bytes_per_token(g: _Geom) -> float:
    """Working memory per in-flight token: FP32 logits of the vocabulary shard plus BF16
    buffers of one layer (residual, normed input, attention output, FFN intermediate).
    An estimate of the engine's activation pool; see docs/MODEL.md."""
    m = g.m
    inter = max(m.dense_intermediate_size,
                m.expert_intermediate_size * max(m.experts_per_token, 1)) / g.tp
    return 4.0 * m.vocab_size / g.tp + 2.0 * (4.0 * m.hidden_size + 2.0 * inter)


# --------------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------------


def _as_axis(name: str, value: Any) -> Any:
    """Scalars stay floats; lists, 1-D arrays and DataArrays become labelled axes."""
    default, unit, lo, hi, integer = NUMERIC_AXES[name]
    if isinstance(value, xr.DataArray):
        arr = value.astype(float)
    elif np.ndim(value) == 0:
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise SpecError(f"{name} = {value!r} must be a number ({unit})") from None
        arr = v
    else:
        try:
            vals = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            raise SpecError(f"{name} = {value!r} must be numbers ({unit})") from None
        if vals.ndim != 1 or vals.size == 0:
            raise SpecError(f"{name} must be a number or a non-empty 1-D list; got {value!r}")
        arr = xr.DataArray(vals, dims=name, coords={name: vals})
    vals = np.asarray(arr, dtype=float)
    bad = vals[~((vals >= lo) & (vals <= hi))]
    if name == "cache_hit_rate":
        bad = vals[~((vals >= 0) & (vals < 1))]
        hi_txt = "1 (exclusive)"
    else:
        hi_txt = str(hi)
    if bad.size:
        raise SpecError(f"{name} = {bad[0]:g} is out of range; allowed [{lo:g}, {hi_txt}] ({unit})")
    if integer and np.any(vals != np.round(vals)):
        raise SpecError(f"{name} = {vals[vals != np.round(vals)][0]:g} must be a whole number")
    return arr


def _listify(value) -> list:
    if isinstance(value, (list, tuple)):
        if not value:
            raise SpecError("an axis list is empty; give at least one value")
        return list(value)
    return [value]


def evaluate(model: str | ModelSpec | Iterable = "Llama-3.1-8B",
             hardware: str | HardwareSpec | Iterable = "H100-SXM", *,
             ideal: bool = False, realism: Realism | None = None,
             acceptance_by_position: Iterable[float] | None = None,
             draft_model: str | ModelSpec | None = None,
             expert_popularity: Iterable[float] | None = None,
             **kwargs: Any) -> xr.Dataset:
    """Evaluate prefill and decode of ``model`` on ``hardware`` over a grid of named axes.

    Parameters
    ----------
    model, hardware : name, alias, path, spec, or a list of them (each list adds a dimension)
    batch_size, kv_len, prompt_len, prefill_batch_size, draft_depth, acceptance_rate,
    cache_hit_rate : number or list
        Numeric axes (see ``NUMERIC_AXES`` for units and ranges). A list adds a dimension.
    tp, dp, ep, redundant_experts, expert_skew, weight_precision, moe_precision, kv_precision,
    attention_precision, dispatch_precision, combine_precision, overlap, cache_tier : value or list
        Structural choices. ``tp`` x ``dp`` GPUs form one serving instance; MoE layers use
        ``ep`` expert-parallel ranks and ``tp*dp/ep``-way expert tensor parallelism.
    ideal : bool
        Pure roofline: every realism term off, parts combined by max.
    realism : Realism
        Realism constants (default: bundled ``configs/realism.toml``).
    acceptance_by_position : list of float
        Per-position acceptance a_1..a_D, instead of a constant ``acceptance_rate``.
    draft_model : model name
        Separate draft model for speculative decoding (default: the model's MTP module).
    expert_popularity : sequence of float
        Share of routed tokens per expert (overrides ``expert_skew``; e.g. measured or mixed
        from workload classes).

    Returns
    -------
    xr.Dataset
        Per-resource times, step times, binding resources, tokens/s per GPU and per user,
        TTFT, TPOT, memory and ``fits``; units in each variable's ``attrs``.
    """
    unknown = set(kwargs) - set(NUMERIC_AXES) - set(STRUCT_AXES)
    if unknown:
        allowed = sorted(set(NUMERIC_AXES) | set(STRUCT_AXES))
        raise SpecError(f"unknown axis {sorted(unknown)[0]!r}; allowed: {allowed}")
    rl = Realism.ideal() if ideal else (realism if realism is not None else load_realism())
    axes = {k: _as_axis(k, kwargs.get(k, v[0])) for k, v in NUMERIC_AXES.items()}
    if acceptance_by_position is not None:
        acc = np.asarray(list(acceptance_by_position), dtype=float)
        if acc.ndim != 1 or acc.size == 0 or np.any((acc < 0) | (acc > 1)):
            raise SpecError(f"acceptance_by_position = {list(acc)} must be a non-empty list of "
                            "fractions in [0, 1]")
        if np.max(np.asarray(axes["draft_depth"])) > acc.size:
            raise SpecError(f"draft_depth up to {np.max(np.asarray(axes['draft_depth'])):g} needs "
                            f"{int(np.max(np.asarray(axes['draft_depth'])))} acceptance values; "
                            f"acceptance_by_position has {acc.size}")
        acceptance_by_position = acc
    models = [load_model(x) for x in _listify(model)]
    hws = [load_hardware(x) for x in _listify(hardware)]
    for kind, specs in (("model", models), ("hardware", hws)):
        names = [x.name for x in specs]
        if len(set(names)) < len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise SpecError(f"{kind} {dup!r} is listed twice (names and aliases resolve to the "
                            f"same spec); give each once")
    draft = load_model(draft_model) if draft_model is not None else None
    struct = {k: _listify(kwargs.get(k, v)) for k, v in STRUCT_AXES.items()}
    struct_dims = [k for k in STRUCT_AXES if isinstance(kwargs.get(k), (list, tuple))]
    for k in struct_dims:
        vals = struct[k]
        if len(set(map(str, vals))) < len(vals):
            raise SpecError(f"{k} = {vals!r} lists a value twice; give each once")

    dim_order, dim_sizes, raw_axes = _raw_axes(axes)
    blocks = []
    for mi, hi in itertools.product(models, hws):
        for combo in itertools.product(*struct.values()):
            s = dict(zip(struct, combo))
            g = _validate_struct(mi, hi, s, rl, expert_popularity)
            if (draft is None and mi.n_mtp_modules == 0
                    and np.any(np.asarray(axes["draft_depth"]) > 0)):
                raise SpecError(f"draft_depth > 0 needs a draft: model {mi.name!r} has no MTP "
                                "module; give a draft model (draft_model=NAME, CLI --draft-model NAME)")
            res = _evaluate_block(g, raw_axes, acceptance_by_position, draft)
            ds = _to_dataset(res, dim_order, dim_sizes, axes)
            coords = {"model": mi.name, "hardware": hi.name}
            coords.update({k: s[k] for k in struct_dims})
            ds = ds.expand_dims({k: [v] for k, v in coords.items()})
            blocks.append(ds)
    ds = xr.combine_by_coords(blocks, combine_attrs="drop_conflicts") if len(blocks) > 1 else blocks[0]
    # keep the order the user gave (combine_by_coords sorts labels)
    order = {"model": [x.name for x in models], "hardware": [x.name for x in hws]}
    order.update({k: struct[k] for k in struct_dims})
    ds = ds.reindex({k: v for k, v in order.items() if k in ds.dims and ds.sizes[k] > 1})
    squeeze = [d for d in ("model", "hardware") if ds.sizes[d] == 1]
    ds = ds.squeeze(squeeze)
    ds.attrs.update({
        "title": "inference-factory roofline evaluation",
        "inference_factory_version": __version__,
        "mode": "ideal" if rl.is_ideal else "realistic",
        "realism_source": rl.source,
        "models": ", ".join(f"{x.name} ({x.path})" for x in models),
        "hardware": ", ".join(f"{x.name} ({x.path})" for x in hws),
        "hardware_files": "; ".join(f"{x.name}={x.path}" for x in hws),
    })
    return ds


_UNITS = {"_s": "s", "_per_gpu": "per GPU", "_frac": "1", "_tokens_per_s_per_gpu": "tokens/s/GPU",
          "_tokens_per_s_per_user": "tokens/s/user", "_bytes_per_gpu": "bytes",
          "_flop_per_gpu": "FLOP"}


def _unit_of(name: str) -> str:
    for suffix in ("_tokens_per_s_per_gpu", "_tokens_per_s_per_user", "_bytes_per_gpu",
                   "_flop_per_gpu", "_frac", "_s"):
        if name.endswith(suffix):
            return _UNITS[suffix]
    return {"tokens_per_step": "tokens/step", "fits": "bool", "max_batch_size": "sequences"}.get(
        name, "label")


def _raw_axes(axes: Mapping[str, Any]):
    """Axes as plain numpy arrays on one common dimension order, with singleton dimensions
    where an axis does not vary, so the kernels broadcast by numpy rules at numpy speed."""
    order: list[str] = []
    sizes: dict[str, int] = {}
    for a in axes.values():
        if isinstance(a, xr.DataArray):
            for d in a.dims:
                if d not in sizes:
                    order.append(d)
                    sizes[d] = a.sizes[d]
                elif sizes[d] != a.sizes[d]:
                    raise SpecError(f"axis dimension {d!r} has sizes {sizes[d]} and "
                                    f"{a.sizes[d]}; axes sharing a dimension must agree")
    raw = {}
    for k, a in axes.items():
        if isinstance(a, xr.DataArray):
            present = [d for d in order if d in a.dims]
            arr = np.asarray(a.transpose(*present).values, dtype=float)
            raw[k] = arr.reshape([sizes[d] if d in a.dims else 1 for d in order])
        else:
            raw[k] = float(a)
    return order, sizes, raw


def _to_dataset(res: Mapping[str, Any], order, sizes, axes: Mapping[str, Any]) -> xr.Dataset:
    data = {}
    for k, v in res.items():
        arr = np.asarray(v)
        if arr.ndim == 0:
            da = xr.DataArray(arr[()])
        else:
            keep = [i for i, (d, n) in enumerate(zip(order, arr.shape)) if n > 1 or sizes[d] == 1]
            squeeze = tuple(i for i in range(arr.ndim) if i not in keep)
            da = xr.DataArray(arr.squeeze(axis=squeeze), dims=[order[i] for i in keep])
        da.attrs["units"] = _unit_of(k)
        data[k] = da
    ds = xr.Dataset(data)
    for name, a in axes.items():
        if isinstance(a, xr.DataArray):
            ds = ds.assign_coords({c: a[c] for c in a.coords})
        else:   # a scalar axis is recorded as a scalar coordinate (provenance, DataFrames)
            ds = ds.assign_coords({name: float(a)})
    for name, a in axes.items():
        if name in ds.coords:
            ds[name].attrs["units"] = NUMERIC_AXES[name][1]
    return ds


def to_dataframe(ds: xr.Dataset) -> "pd.DataFrame":  # noqa: F821
    """Tidy DataFrame: one row per grid point, one column per variable; ``df.attrs["units"]``
    maps each column to its unit. Variables are broadcast to the full grid first."""
    import pandas as pd

    full = xr.broadcast(ds)[0]
    if not full.dims:                      # a single point: one row
        df = pd.DataFrame([{k: v.values.item() for k, v in full.variables.items()}])
    else:
        df = full.to_dataframe().reset_index()
    df.attrs["units"] = {k: ds[k].attrs.get("units", "") for k in ds.data_vars}
    df.attrs["units"].update({k: ds[k].attrs.get("units", "") for k in ds.coords})
    df.attrs.update({k: v for k, v in ds.attrs.items() if isinstance(v, str)})
    return df
