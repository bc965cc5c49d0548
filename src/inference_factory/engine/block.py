"""One block: structural choices fixed, numeric axes broadcast. Builds the decode and prefill
passes from the op graph, costs them, schedules them into steps, and derives throughput,
latency and memory."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Mapping

import numpy as np

from ..kernels import cache as kcache
from ..kernels import memory as kmem
from ..kernels import roofline as kroof
from ..kernels import speculative as kspec
from ..specs import ModelSpec
from . import grid as G
from . import schedule as S
from .cost import Cost, cost_ops
from .layer_mix import architecture
from .geometry import (Geom, Layers, activation_bytes_per_token, for_draft, main_layers,
                       mtp_layers, weight_bytes_per_gpu)
from .ops import layer_ops
from . import xp

RESOURCES = ("compute", "memory", "comm", "overhead")


def run_pass(g: Geom, L: Layers, *, seqs, new_tokens, cached_tokens, kv_len,
             logit_tokens_per_seq, phase: str, micro_batches: Any = 1) -> dict[str, Any]:
    """Step time, per-resource times, FLOPs and bytes of one pass (per GPU), and its costs."""
    mb = micro_batches
    ops = layer_ops(g, L, seqs=seqs / mb, new_tokens=new_tokens, cached_tokens=cached_tokens,
                    kv_len=kv_len, logit_tokens_per_seq=logit_tokens_per_seq, phase=phase)
    costs = cost_ops(g, ops)
    if g.rl.is_ideal:
        step = S.ideal_s(costs)
        res = {"compute": sum(c.op.count * c.flop_s for c in costs),
               "memory": sum(c.op.count * c.byte_s for c in costs),
               "comm": sum(c.op.count * c.time_s for c in costs if c.op.stream == "comm"),
               "overhead": 0.0}
    else:
        res = S.by_resource(costs, mb)
        frac = g.rl.comm_sm_frac if phase == "prefill" else 0.0
        if not isinstance(mb, int):      # per point (:func:`decode_micro_batches`)
            step = xp.where_lazy(mb > 1.5, lambda: S.two_batch_s(costs, L, phase,
                                                                 comm_sm_frac=frac),
                                 S.sequential_s(res))
        elif mb > 1:
            step = S.two_batch_s(costs, L, phase, comm_sm_frac=frac)
        else:
            step = S.sequential_s(res)
    return {
        "step_s": step, "res": res, "costs": costs, "mb": mb,
        "flop": mb * sum(c.op.count * c.op.flop for c in costs),
        "hbm_bytes": mb * sum(c.op.count * c.op.hbm_bytes for c in costs),
    }


def decode_micro_batches(mb: int, seqs) -> Any:
    """Micro-batches of a decode pass of ``seqs`` sequences per rank under a policy of ``mb``:
    two micro-batches split the batch by requests (DeepSeek: "splitting a batch of requests
    into two microbatches", DS_DAY6 in reference/deployments.csv), so below two sequences
    there is nothing to split and the pass runs as one batch, with nothing to overlap its
    communication with (it was costed as two half-sequences, each streaming the weights:
    Llama-3.1-70B TP8 at one sequence, a step of 17.5 ms instead of 9.0). Returns 1, 2, or
    per point where ``seqs`` straddles 2."""
    if mb == 1 or not xp.any_below(seqs, 2.0 - 1e-12):
        return mb
    if not xp.any_above(seqs, 2.0 - 1e-12):
        return 1
    return xp.where_lazy(seqs >= 2.0 - 1e-12, lambda: 2.0 + 0.0 * seqs, 1.0 + 0.0 * seqs)


def binding(named: Mapping[str, Any]) -> Any:
    """Index (into ``named``'s order, int8) of the largest part at each point, the first on a
    tie; the Dataset carries the labels (:func:`.dataset._to_dataset`)."""
    parts = list(named.values())
    code = np.zeros(np.broadcast_shapes(*[np.shape(p) for p in parts]), np.int8)
    best = parts[0]
    for i, p in enumerate(parts[1:], 1):
        larger = p > best
        code = np.where(larger, np.int8(i), code)
        best = np.maximum(best, p)
    return code if np.ndim(code) else np.asarray(code).item()


#: Draft passes kept by what they depend on: the draft geometry (specs by identity), the draft
#: model and the batch and context values. A draft pass is one micro-batch whatever the main
#: pass's overlap policy, so the policies of one shape (a plan's candidate grid) share it.
#: Values known here only (:func:`.xp.memo_key`); the oldest dropped beyond the cap.
_DRAFT_PASSES: dict[tuple, tuple] = {}
_DRAFT_PASSES_CAP = 16
#: Largest grid (batch x context points) whose draft pass is kept.
_DRAFT_MEMO_POINTS = 1 << 14


def _draft_pass(dg: Geom, draft: ModelSpec | None, B, ctx) -> dict[str, Any]:
    """The decode pass of the draft (the model's MTP layers, or a separate draft model)."""
    layers = (lambda: main_layers(draft)) if draft is not None else (lambda: mtp_layers(dg.m))
    def compute():
        return run_pass(dg, layers(), seqs=B, new_tokens=1.0, cached_tokens=ctx - 1.0,
                        kv_len=ctx, logit_tokens_per_seq=1.0, phase="decode")
    values = xp.memo_key(B, ctx, max_points=_DRAFT_MEMO_POINTS)
    if values is None:                      # per-point values, or a long list or tile
        return compute()
    specs = (dg.m, dg.hw, dg.rl, draft)
    key = (tuple(id(v) if f.name in ("m", "hw", "rl") else v
                 for f, v in ((f, getattr(dg, f.name)) for f in fields(dg))),
           id(draft)) + values
    hit = _DRAFT_PASSES.get(key)
    if hit is not None and all(x is y for x, y in zip(hit[0], specs)):
        return hit[1]
    res = compute()
    if len(_DRAFT_PASSES) >= _DRAFT_PASSES_CAP:
        _DRAFT_PASSES.pop(next(iter(_DRAFT_PASSES)))
    _DRAFT_PASSES[key] = (specs, res)       # the specs kept alive: their ids stay theirs
    return res


def evaluate_block(g: Geom, ax: Mapping[str, Any], acceptance_by_position=None,
                   draft: ModelSpec | None = None, detail: str = "resources") -> dict[str, Any]:
    m, hw, rl = g.m, g.hw, g.rl
    out: dict[str, Any] = {}
    mb = 2 if (g.overlap == "two-batch" and not rl.is_ideal) else 1
    B, ctx, d = ax["batch_size"], ax["kv_len"], ax["draft_depth"]

    # ---- decode: one verify step of B sequences x (1 + d) tokens, plus d draft passes
    verify = run_pass(g, main_layers(m), seqs=B, new_tokens=1.0 + d, cached_tokens=ctx - 1.0,
                      kv_len=ctx, logit_tokens_per_seq=1.0 + d, phase="decode",
                      micro_batches=decode_micro_batches(mb, B))
    # a draft pass is a single micro-batch: nothing to overlap its communication with
    if xp.any_above(d, 0):
        dg = for_draft(g, draft) if draft is not None else replace(g, overlap="none")
        dpass = _draft_pass(dg, draft, B, ctx)
    else:       # no draft anywhere on the grid: nothing to cost
        dpass = {"step_s": 0.0, "res": dict.fromkeys(RESOURCES, 0.0), "flop": 0.0,
                 "hbm_bytes": 0.0}
    draft_s = d * dpass["step_s"]
    if acceptance_by_position is not None:
        tps = kspec.expected_tokens_per_step_sequence(draft_depth=d,
                                                      acceptance_by_position=acceptance_by_position)
    else:
        tps = kspec.expected_tokens_per_step(draft_depth=d, acceptance_rate=ax["acceptance_rate"])
    step_s = verify["step_s"] + draft_s
    for r in RESOURCES:
        out[f"decode_{r}_s"] = xp.broadcast_like(verify["res"][r] + d * dpass["res"][r], step_s)
    out["decode_draft_s"] = draft_s
    out["decode_step_s"] = step_s
    out["decode_flop_per_gpu"] = verify["flop"] + d * dpass["flop"]
    out["decode_hbm_bytes_per_gpu"] = verify["hbm_bytes"] + d * dpass["hbm_bytes"]
    out["tokens_per_step"] = tps
    out["decode_tokens_per_s_per_gpu"] = kroof.tokens_per_s_per_gpu(
        seqs_per_rank=B, tokens_per_seq=tps, step_s=step_s, tp=g.tp)
    out["decode_tokens_per_s_per_user"] = tps / step_s
    out["tpot_s"] = step_s / tps
    out["expert_efficiency_frac"] = 1.0 / g.placement_imbalance
    out["decode_binding_resource"] = binding({r: out[f"decode_{r}_s"] for r in RESOURCES})

    # ---- prefill: Bp prompts of P tokens, a fraction h restored from the prefix cache
    Bp, P, hit = ax["prefill_batch_size"], ax["prompt_len"], ax["cache_hit_rate"]
    computed = kcache.prefill_computed_tokens(prompt_tokens=P, cache_hit_rate=hit)
    cached = P - computed
    pre = run_pass(g, main_layers(m), seqs=Bp, new_tokens=computed, cached_tokens=cached,
                   kv_len=P, logit_tokens_per_seq=1.0, phase="prefill", micro_batches=mb)
    tier_bw = {"hbm": hw.hbm_bw_bytes_per_s, "dram": hw.host_dram_bw_bytes_per_s,
               "nvme": hw.nvme_bw_bytes_per_s / hw.gpus_per_node}[g.tier]
    arch = architecture(m)
    restore_s = arch.restore_s(g.kvprec, sequences=Bp, cached_tokens=cached, tp=g.tp,
                               tier_bytes_per_s=tier_bw)
    # restoration is prefetched by the copy engines while the GPU computes other requests:
    # it does not occupy the prefill step, but a request cannot start before its KV is in HBM
    pre_s = pre["step_s"]
    for r in RESOURCES:
        out[f"prefill_{r}_s"] = xp.broadcast_like(pre["res"][r], pre_s)
    out["prefill_restore_s"] = restore_s
    out["prefill_step_s"] = pre_s
    out["prefill_flop_per_gpu"] = pre["flop"]
    out["prefill_hbm_bytes_per_gpu"] = pre["hbm_bytes"]
    out["prefill_tokens_per_s_per_gpu"] = kroof.tokens_per_s_per_gpu(
        seqs_per_rank=Bp, tokens_per_seq=P, step_s=pre_s, tp=g.tp)
    out["prefill_computed_tokens_per_s_per_gpu"] = kroof.tokens_per_s_per_gpu(
        seqs_per_rank=Bp, tokens_per_seq=computed, step_s=pre_s, tp=g.tp)
    out["ttft_s"] = np.maximum(pre_s, restore_s)
    out["prefill_binding_resource"] = binding({r: out[f"prefill_{r}_s"] for r in RESOURCES})

    # ---- memory per GPU: the serving engine reserves each sequence's final length
    uses_draft = d > 0
    if draft is None:
        mtp = weight_bytes_per_gpu(g, with_mtp=True) - weight_bytes_per_gpu(g, with_mtp=False)
        weights = weight_bytes_per_gpu(g, with_mtp=False) + mtp * uses_draft
    else:
        weights = (weight_bytes_per_gpu(g, with_mtp=False)
                   + weight_bytes_per_gpu(replace(g, m=draft, ep=1, redundant=0), False) * uses_draft)
    final = np.where(ax["final_len"] > 0, ax["final_len"], ctx)
    final = np.maximum(final, ctx)
    # each layer kind's bytes per token of context and per sequence (engine/attention), and
    # with a draft its own KV at every token: the MTP layers' or the draft model's
    draft_kv = (arch.mtp_sequence_bytes(g.kvprec, final, g.tp) if draft is None
                else architecture(draft).sequence_bytes(g.kvprec, final, g.tp))
    kv_per_seq = arch.sequence_bytes(g.kvprec, final, g.tp) + draft_kv * uses_draft
    act_per_seq = activation_bytes_per_token(g) * (1.0 + d)
    reserve = kmem.runtime_reserve_bytes(hbm_capacity_bytes=hw.hbm_capacity_bytes,
                                         reserve_frac=rl.reserve_frac)
    out["weight_bytes_per_gpu"] = weights
    out["kv_bytes_per_gpu"] = B * kv_per_seq
    out["activation_bytes_per_gpu"] = B * act_per_seq
    out["hbm_used_bytes_per_gpu"] = kmem.hbm_used_bytes(
        weight_bytes=weights, reserve_bytes=reserve, batch_size=B, kv_bytes_per_seq=kv_per_seq,
        activation_bytes_per_seq=act_per_seq)
    out["fits"] = kmem.fits(hbm_used_bytes=out["hbm_used_bytes_per_gpu"],
                            hbm_capacity_bytes=hw.hbm_capacity_bytes)
    out["max_batch_size"] = kmem.max_batch_size(
        hbm_capacity_bytes=hw.hbm_capacity_bytes, reserve_bytes=reserve, weight_bytes=weights,
        kv_bytes_per_seq=kv_per_seq, activation_bytes_per_seq=act_per_seq)
    if detail == "ops":
        out["_ops"] = {"decode": verify, "prefill": pre}
    return out


def op_table(passes: Mapping[str, dict]) -> dict[str, tuple[list[str], list, list, list,
                                                              list, list]]:
    """Per phase: op names, time per step (count x micro-batches x per-call time), resource
    label, source label, FLOPs and HBM bytes per step per GPU (count x micro-batches x the
    op's per-call figure; they sum to the pass's ``flop`` and ``hbm_bytes``) of each op (for
    ``evaluate(..., detail="ops")``)."""
    out = {}
    for phase, p in passes.items():
        names, times, res, src, flop, nbytes = [], [], [], [], [], []
        costs: list[Cost] = p["costs"]
        for c in costs:
            names.append(c.op.name)
            times.append(p["mb"] * c.op.count * c.time_s)
            res.append(c.resource_label())
            code = c.source() if callable(c.source) else c.source
            src.append(np.asarray(G.SOURCES, dtype=object)[np.asarray(code, dtype=int)])
            flop.append(p["mb"] * c.op.count * c.op.flop)
            nbytes.append(p["mb"] * c.op.count * c.op.hbm_bytes)
        out[phase] = (names, times, res, src, flop, nbytes)
    return out
