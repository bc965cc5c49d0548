"""Cost of each operation: measured kernel tables where the device and shape are covered,
else the realistic roofline; the pure roofline in ideal mode.

Modes (``Realism``): ``ideal`` (every term off: pure roofline at the peaks), ``roofline``
(the measured tables off: achieved fractions of peak, small-M tiles, per-layer overhead, link
fractions and latencies), and the default, measured (each op with a table takes its own pure
roofline times the measured-over-roofline ratio of its shape, :mod:`.measured`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels import comm as kcomm
from ..kernels import moe as kmoe
from ..kernels import roofline as kroof
from . import grid as G
from .geometry import Geom
from .measured import (a2a_kernels, a2a_roofline_s, allgather_roofline_s, allreduce_roofline_s,
                       nvlink_a2a_roofline_s, tables_for)
from .ops import Op


@dataclass
class Cost:
    """Time of one call of an op (per micro-batch), the resource it is charged to, and
    where the time came from (a :data:`.grid.SOURCES` code, scalar or per point, or a
    function returning them)."""

    op: Op
    time_s: Any
    resource: Any                # "comm" | "overhead" | "compute-or-memory" (see binds_compute)
    source: Any
    flop_s: Any = 0.0            # pure-roofline parts (FLOPs / peak, bytes / peak bandwidth)
    byte_s: Any = 0.0
    binds_compute: Any = None    # compute ops: True where the pure roofline binds on FLOPs

    def resource_label(self):
        """The resource label(s): compute / memory per point for compute ops."""
        if self.binds_compute is None:
            return self.resource
        return np.where(self.binds_compute, "compute", "memory")


def cost_ops(g: Geom, ops: list[Op]) -> list[Cost]:
    memo: dict = {}       # table locations shared by the ops of this pass
    costs = [cost_op(g, op, memo) for op in ops]
    # prediction bands: per-family factors of one stratum of draws (engine/uncertainty.py)
    perturb = getattr(g.rl, "perturb_costs", None)
    return costs if perturb is None else perturb(g, costs)


def cost_op(g: Geom, op: Op, memo: dict | None = None) -> Cost:
    """Cost of one op, with its pure-roofline parts (FLOPs / peak, bytes / peak bandwidth)."""
    if op.stream == "comm":
        return _comm(g, op, memo)
    t_byte = op.hbm_bytes / g.hw.hbm_bw_bytes_per_s
    if op.name == "other_kernels":
        c = _other(g, op)
        c.byte_s = t_byte
        return c
    t_flop = op.flop / g.hw.flop_per_s(op.precision)
    c = _compute_op(g, op, t_flop, t_byte, memo)
    c.flop_s, c.byte_s = t_flop, t_byte
    return c


def _compute_op(g: Geom, op: Op, t_flop, t_byte, memo=None) -> Cost:
    rl = g.rl
    compute = t_flop >= t_byte          # per point; a Python bool at one point
    compute = bool(compute) if np.ndim(compute) == 0 else compute
    resource = "compute-or-memory"
    if rl.is_ideal:
        return Cost(op, kroof.roofline_time_s(compute_s=t_flop, memory_s=t_byte), resource,
                    G.ROOFLINE,
                    binds_compute=compute)
    t, src = None, G.ROOFLINE
    if rl.measured and op.family and op.pure_fn is not None:
        t, src = _measured(g, op, memo)
    if t is None:
        t = _roofline(g, op, t_flop, t_byte)
        tabs = tables_for(g.hw) if rl.measured else None
        if tabs is not None and tabs.has("gemm"):
            # an op the tables do not hold is still a kernel: no faster than the fastest
            # one measured on the device (as a measured op, :func:`_measured`)
            t = np.where(t > 0, np.maximum(t, tabs.kernel_floor_s()), t)
    return Cost(op, t, resource, src, binds_compute=compute)


def _curve(tabs, op: Op):
    """The measured curve of an op: its family's, else its fallback's; None where neither
    has rows for it."""
    for family, keys, nearest in ((op.family, op.keys, op.nearest),) + (
            (op.fallback,) if op.fallback else ()):
        if tabs.has(family):
            curve = tabs.curve(family, keys, nearest, op.fixed)
            if curve is not None:
                return curve
    return None


def _measured(g: Geom, op: Op, memo=None):
    tabs = tables_for(g.hw)
    curve = None if tabs is None else _curve(tabs, op)
    if curve is None:
        return None, G.ROOFLINE
    t, src = curve.time_s(op.pure_fn, *op.coords, mode=op.roof_mode, memo=memo,
                          pure_key=op.pure_key)
    # no kernel runs faster than the fastest one measured on the device
    if op.source_cap < G.MEASURED:
        src = _capped(src, op.source_cap)
    t = np.maximum(t, tabs.kernel_floor_s())
    if op.rate == "moe":
        # the busiest EP rank: the balanced kernel plus its pairs beyond the mean at the
        # kernel's compute-bound rate (measured where a table row is compute-bound, else the
        # realistic roofline's)
        t = t + kmoe.busiest_rank_excess_s(
            mean_pairs=op.params["mean_routed"], load_factor=op.params["load_factor"],
            compute_s_per_pair=_moe_compute_s_per_pair(g, op, tabs, curve))
    return t, src


def _moe_compute_s_per_pair(g: Geom, op: Op, tabs, curve):
    """tau_c of :func:`.kernels.moe.busiest_rank_excess_s` for a measured MoE op.

    t(ref) / (ref x pairs per token) at the largest token count ref of a curve of the op's
    shape and dtype where that row is compute-bound (its log-log slope over the last
    measured interval at least 1/2, :func:`.kernels.moe.is_compute_bound`): the op's own
    curve first (the kernel the extra pairs run in), else, in a table keyed by phase, the
    same shape's curves of the other phases, largest token count first (the H200 wide-EP
    decode rows stop at 256-2048 tokens while the kernel still streams weights; the prefill
    ones run to 10^5). Where none is, the realistic roofline's compute time per pair (as
    :func:`_roofline`)."""
    others = sorted(_phase_curves(tabs, op, curve), key=lambda c: -c.grid.axes[0][-1])
    for c in [curve] + others:
        axis = c.grid.axes[0]
        if axis.size < 2:
            continue
        ref, prev = float(np.exp(axis[-1])), float(np.exp(axis[-2]))
        t_ref = float(c.time_s(op.pure_fn, ref, mode=op.roof_mode, pure_key=op.pure_key)[0])
        t_prev = float(c.time_s(op.pure_fn, prev, mode=op.roof_mode, pure_key=op.pure_key)[0])
        if kmoe.is_compute_bound(t_s=t_ref, t_prev_s=t_prev, tokens=ref, prev_tokens=prev):
            return t_ref / (ref * op.params["pairs_per_token"])
    tf, _ = _moe_balanced_compute_s(g, op)
    return tf / np.maximum(op.params["mean_routed"], 1e-30)


def _phase_curves(tabs, op: Op, curve):
    """Where the op's table is keyed by phase, the curves of the op's keys in the table's
    other phases (the same kernel family and shape); else none."""
    out = []
    for family, keys, nearest in ((op.family, op.keys, op.nearest),) + (
            (op.fallback,) if op.fallback else ()):
        if tabs.has(family) and tabs.curve(family, keys, nearest, op.fixed) is curve:
            if "phase" in keys:
                for ph in np.unique(tabs.rows(family)["phase"].astype(str)).tolist():
                    if ph != keys["phase"]:
                        other = tabs.curve(family, {**keys, "phase": ph}, nearest, op.fixed)
                        if other is not None:
                            out.append(other)
            break
    return out


def _capped(src, cap: int):
    """A source function whose labels are at most ``cap``."""
    return lambda: np.minimum(src(), cap).astype(np.int8)


def _roofline(g: Geom, op: Op, t_flop, t_byte):
    """Realistic roofline of one op: achieved fractions of peak (configs/realism.toml)."""
    rl, hw = g.rl, g.hw
    if op.rate == "attention":
        # an FP8 cache slows the decode kernel (dequantisation per KV read); prefill attends
        # over freshly computed BF16 keys and values
        decode = op.family.endswith("_decode")
        kv = g.kvprec if decode else "bf16"
        # decode attention on a device with fractions fitted to its own decode kernels uses
        # them (hardware [measured]); prefill and every other device the realism constants
        tf = t_flop / rl.decode_attn_compute_frac_on(hw if decode else None, kv)
        tb = t_byte / rl.decode_attn_hbm_frac_on(hw if decode else None)
    else:
        if op.rate == "moe":
            tf, load = _moe_balanced_compute_s(g, op)
            mean = np.maximum(op.params["mean_routed"], 1e-30)
            tb = t_byte / rl.weight_hbm_frac
            return kroof.roofline_time_s(compute_s=tf, memory_s=tb) + kmoe.busiest_rank_excess_s(
                mean_pairs=mean, load_factor=load, compute_s_per_pair=tf / mean)
        frac = kroof.gemm_efficiency_frac(m_tokens=op.m_tokens,
                                          large_gemm_frac=rl.large_gemm_frac(hw, op.precision),
                                          tile_m_tokens=rl.tile_m)
        tf = op.flop / (hw.flop_per_s(op.precision) * frac)
        tb = t_byte / rl.weight_hbm_frac
    return kroof.roofline_time_s(compute_s=tf, memory_s=tb)


def _moe_balanced_compute_s(g: Geom, op: Op):
    """Realistic-roofline compute time of a balanced rank's grouped expert GEMM and the load
    of the busiest rank.

    op.flop is the busiest rank's (at the placement's load): a balanced rank's is op.flop /
    load; finite batches are never balanced (routing noise; the measured tables carry this
    themselves), so with routing on and EP > 1 the load and the tokens per expert take the
    routing fluctuation factor."""
    rl, hw = g.rl, g.hw
    load = op.params["load_factor"]
    m_tokens, flop = op.m_tokens, op.flop / load
    if rl.routing and g.ep > 1:
        fluct = kmoe.routing_fluctuation_factor(
            mean_tokens_per_rank=op.params["mean_routed"], n_ranks=g.ep)
        load, m_tokens = load * fluct, m_tokens * fluct
    frac = kroof.gemm_efficiency_frac(m_tokens=m_tokens,
                                      large_gemm_frac=rl.large_gemm_frac(hw, op.precision),
                                      tile_m_tokens=rl.tile_m)
    return flop / (hw.flop_per_s(op.precision) * frac), load


def _other(g: Geom, op: Op) -> Cost:
    """Norms, RoPE, KV write, activation and quantisation kernels between the GEMMs."""
    rl, hw = g.rl, g.hw
    t_byte = op.hbm_bytes / hw.hbm_bw_bytes_per_s
    if rl.is_ideal:         # the pure roofline has no per-kernel cost
        return Cost(op, t_byte, "memory", G.ROOFLINE)
    t_elem = (op.hbm_bytes + op.params["elementwise_bytes"]) / hw.hbm_bw_bytes_per_s
    tabs = tables_for(hw) if rl.measured else None
    if tabs is not None and tabs.has("gemm"):
        floor = tabs.kernel_floor_s()
        return Cost(op, op.params["kernels"] * floor + t_elem / rl.weight_hbm_frac, "overhead",
                    G.EXTRAPOLATED)
    return Cost(op, rl.layer_overhead_s + t_elem / rl.weight_hbm_frac, "overhead", G.ROOFLINE)


def _comm(g: Geom, op: Op, memo=None) -> Cost:
    rl, hw, m = g.rl, g.hw, g.m
    c = op.params
    up_bw = hw.scale_up_bw_bytes_per_s * rl.up_frac
    out_bw = hw.scale_out_bw_bytes_per_s * rl.out_frac
    dom = hw.scale_up_domain_gpus
    if c["kind"] == "allreduce":
        msg, n = c["message_bytes"], c["n_ranks"]
        if rl.is_ideal:
            return Cost(op, allreduce_roofline_s(hw, msg, n) if n <= dom else
                        kcomm.hierarchical_allreduce_s(
                            message_bytes=msg, n_ranks=n, domain_gpus=dom,
                            scale_up_bytes_per_s=hw.scale_up_bw_bytes_per_s,
                            scale_out_bytes_per_s=hw.scale_out_bw_bytes_per_s,
                            scale_up_latency_s=0.0, scale_out_latency_s=0.0), "comm", G.ROOFLINE)
        if n <= dom and rl.measured:
            t, src = _measured_comm(g, op, lambda m_: allreduce_roofline_s(hw, m_, n),
                                    memo=memo, pure_key=(hw, "allreduce", n))
            if t is not None:
                return Cost(op, t, "comm", src)
        if n <= dom:
            t = kcomm.ring_allreduce_s(message_bytes=msg, n_ranks=n, link_bytes_per_s=up_bw,
                                       latency_s=rl.up_latency_s)
        else:
            t = kcomm.hierarchical_allreduce_s(
                message_bytes=msg, n_ranks=n, domain_gpus=dom, scale_up_bytes_per_s=up_bw,
                scale_out_bytes_per_s=out_bw, scale_up_latency_s=rl.up_latency_s,
                scale_out_latency_s=rl.out_latency_s)
        return Cost(op, t, "comm", G.ROOFLINE)

    if c["kind"] == "allgather":
        return _gather_scatter(g, op, memo)

    # EP dispatch / combine: the busiest rank receives imbalance x the mean traffic
    # the payload is the experts' input: a latent MoE sends its latent, not the hidden state
    k, h, b, tokens = m.experts_per_token, m.expert_hidden_size, c["bytes_per_elem"], c["tokens"]
    busiest = 1.0 if rl.is_ideal else g.placement_imbalance
    # TRT-LLM's NVLink all-to-all where the engine runs it (None: where the device has it)
    if not rl.is_ideal and rl.measured and g.ep <= dom and rl.all_to_all in (None,
                                                                           "NVLinkTwoSided"):
        t, src = _nvlink_a2a(g, op, tokens * busiest, memo)
        if t is not None:
            return Cost(op, t, "comm", src)
    tabs = tables_for(hw) if rl.measured else None
    if not rl.is_ideal and tabs is not None and (g.ep <= dom or tabs.spans_nodes(op.family)):
        # the busiest rank moves `busiest` x the mean tokens: read the table there, so its
        # fixed latency is paid once and only the traffic grows. An EP across nodes takes
        # multi-node rows only: a one-node table's ratio (NVLink latency) says nothing of
        # the NIC.
        t, src = _measured_comm(
            g, op, lambda n_: a2a_roofline_s(hw, n_, h, k, g.ep, b, phase=c["phase"]),
            coords=(tokens * busiest,), pure_key=(hw, "a2a", h, k, g.ep, b, c["phase"]))
        if t is not None:
            return Cost(op, t, "comm", src)
    if not rl.is_ideal and rl.routing and g.ep > 1:
        busiest = busiest * kmoe.routing_fluctuation_factor(
            # the busiest rank's receive load: the same routed pairs as its grouped GEMM
            mean_tokens_per_rank=tokens * g.tp * g.dp * k / g.ep, n_ranks=g.ep)
    lat = rl.out_latency_s if g.ep > dom else rl.up_latency_s
    if rl.is_ideal:
        up_bw, out_bw = hw.scale_up_bw_bytes_per_s, hw.scale_out_bw_bytes_per_s
    t = kcomm.ep_alltoall_s(tokens_per_rank=tokens, hidden_size=h, bytes_per_elem=b,
                            experts_per_token=k, n_ranks=g.ep, domain_gpus=dom,
                            scale_up_bytes_per_s=up_bw, scale_out_bytes_per_s=out_bw,
                            latency_s=lat, load_factor=busiest, kernels=a2a_kernels(c["phase"]))
    return Cost(op, t, "comm", G.ROOFLINE)


def _gather_scatter(g: Geom, op: Op, memo=None) -> Cost:
    """An all-gather or reduce-scatter (EP dispatch / combine without an all-to-all kernel):
    NCCL's measured rows inside the scale-up domain, else the ring over the slowest link."""
    rl, hw = g.rl, g.hw
    msg, n = op.params["message_bytes"], op.params["n_ranks"]
    dom = hw.scale_up_domain_gpus
    if not rl.is_ideal and rl.measured and n <= dom:
        t, src = _measured_comm(g, op, lambda m_: allgather_roofline_s(hw, m_, n), memo=memo,
                                pure_key=(hw, "allgather", n))
        if t is not None:
            return Cost(op, t, "comm", src)
    inside = n <= dom
    if rl.is_ideal:
        bw, lat = (hw.scale_up_bw_bytes_per_s if inside else hw.scale_out_bw_bytes_per_s), 0.0
    else:
        bw = (hw.scale_up_bw_bytes_per_s * rl.up_frac if inside
              else hw.scale_out_bw_bytes_per_s * rl.out_frac)
        lat = rl.up_latency_s if inside else rl.out_latency_s
    t = kcomm.ring_allgather_s(message_bytes=msg, n_ranks=n, link_bytes_per_s=bw, latency_s=lat)
    return Cost(op, t, "comm", G.ROOFLINE)


def _nvlink_a2a(g: Geom, op: Op, tokens, memo=None):
    """EP dispatch (with its routing ``prepare``) or combine inside one NVLink domain from
    TRT-LLM's measured NVLink all-to-all (GB200 NVL72, EP 2-64), where the device has it."""
    tabs = tables_for(g.hw)
    if tabs is None or not tabs.has("a2a_nvlink"):
        return None, G.ROOFLINE
    m, hw = g.m, g.hw
    dtype = {1.0: "fp8", 2.0: "bf16"}.get(op.params["bytes_per_elem"], "nvfp4")
    he = m.expert_hidden_size               # the payload: a latent MoE's latent
    near = {"hidden_size": he, "topk": m.experts_per_token,
            "num_experts": m.n_routed_experts, "moe_ep": g.ep}
    total, source = 0.0, None
    for name in (("prepare", "dispatch") if op.name == "dispatch" else ("combine",)):
        curve = tabs.curve("a2a_nvlink", {"op": name, "moe_dtype": dtype}, near)
        if curve is None:
            return None, G.ROOFLINE
        t, src = curve.time_s(
            lambda n_, name=name: nvlink_a2a_roofline_s(hw, name, dtype, n_, he,
                                                        m.experts_per_token, g.ep),
            tokens, mode="separable", memo=memo,
            pure_key=(hw, "a2a_nvlink", name, dtype, he, m.experts_per_token, g.ep))
        # the pair's source: the worse of its two reads (prepare may be on a row, dispatch not)
        total, source = total + t, src if source is None else _worse(source, src)
    return total, source


def _worse(a, b):
    """A source function giving the worse of two source functions' labels per point."""
    return lambda: np.minimum(a(), b()).astype(np.int8)


def _measured_comm(g: Geom, op: Op, pure_fn, coords=None, memo=None, pure_key=None):
    tabs = tables_for(g.hw)
    if tabs is None:
        return None, G.ROOFLINE
    for family, keys, nearest in ((op.family, op.keys, op.nearest),) + (
            (op.fallback,) if op.fallback else ()):
        curve = tabs.curve(family, keys, nearest) if tabs.has(family) else None
        if curve is not None:
            return curve.time_s(pure_fn, *(coords or op.coords), mode="separable", memo=memo,
                                pure_key=pure_key)
    return None, G.ROOFLINE
