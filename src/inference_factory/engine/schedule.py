"""How the costed operations of a pass combine into a step: one after the other, or the
stage-wise two-micro-batch pipeline (DeepSeek / SGLang two-batch overlap).

Two-batch overlap is a schedule, not a global max: each layer is cut into stages; in each
stage one micro-batch computes while the other's communication runs, and a barrier ends the
stage. A layer therefore costs the sum over its stages of the larger of the two, never less
than the global max of compute and communication, and each micro-batch streams the weights
and pays the kernel floors again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import roofline as kroof
from .cost import Cost
from .geometry import Layers

#: Stages of one layer per phase: (compute stages of one micro-batch, comm stages of the
#: other). Decode follows DeepSeek's published 5-stage decode pipeline (profile-data):
#: [SHARED + ATTN-0] || DISPATCH, MLP, ATTN-1 || COMBINE; prefill overlaps the attention of
#: one micro-batch with the combine of the other and the experts with the dispatch.
STAGES = {
    "decode": ((("attn0", "shared"), ("dispatch", "tp_ffn")),
               (("mlp",), ("tp_attn",)),
               (("attn1",), ("combine",))),
    "prefill": ((("attn0", "attn1", "shared"), ("combine", "tp_ffn")),
                (("mlp",), ("dispatch", "tp_attn"))),
}


def sequential_s(parts: dict[str, Any]) -> Any:
    r"""Every op of every micro-batch one after the other.

    .. math:: t = \mu \sum_{ops} n_{op}\, t_{op}

    summed as the per-resource ``parts`` of :func:`by_resource` (each op's time is charged
    to exactly one resource, the micro-batches counted there).
    """
    return sum(parts.values())


def ideal_s(costs: list[Cost]) -> Any:
    r"""Pure roofline: every resource overlaps perfectly with every other.

    .. math:: t = \max\left(\sum F / P, \sum B / W, \sum t_{comm}\right)
    """
    flop = sum(c.op.count * c.flop_s for c in costs)
    byte = sum(c.op.count * c.byte_s for c in costs)
    comm = sum(c.op.count * c.time_s for c in costs if c.op.stream == "comm")
    return kroof.step_time_ideal_s(compute_s=flop, memory_s=byte, comm_s=comm)


def _layer_class(c: Cost, L: Layers) -> tuple[float, float]:
    """Share of an op's calls in (MoE layers, dense-FFN layers), per layer of that class."""
    n = c.op.count
    if c.op.stream == "comm" and c.op.name in ("dispatch", "combine", "moe_gather",
                                               "moe_reduce") or c.op.name in (
            "moe", "router", "shared_gate_up", "shared_down", "latent_down", "latent_up"):
        return (n / max(L.n_moe, 1), 0.0)
    if c.op.name in ("ffn_gate_up", "ffn_down"):
        return (0.0, n / max(L.n_dense_ffn, 1))
    per_layer = n / max(L.n_total, 1)
    return (per_layer, per_layer)


def two_batch_s(costs: list[Cost], L: Layers, phase: str, *, comm_sm_frac: float = 0.0) -> Any:
    r"""Two micro-batches through the stage-wise pipeline of :data:`STAGES`.

    .. math:: t = 2 \sum_{c \in \{moe, dense\}} n_c \sum_{s} \max\left(
              \frac{C_{c,s}}{1 - f_{SM}[M_{c,s} > 0]},\, M_{c,s}\right) + 2 \sum_{rest} n t

    C and M are one micro-batch's compute and the other's communication in stage s of a layer
    of class c (MoE or dense FFN); ops outside the stages (lm_head) run after the layers.
    ``comm_sm_frac`` is the share of SMs the overlapped communication kernels take from
    computation (DeepEP normal kernels in prefill).
    """
    staged = {s for comp, comm in STAGES[phase] for s in comp + comm}
    per = [(c.op.stage, _layer_class(c, L), c.time_s) for c in costs]
    total = 0.0
    for cls, n_layers in ((0, L.n_moe), (1, L.n_dense_ffn)):
        if not n_layers:
            continue
        for comp_stages, comm_stages in STAGES[phase]:
            comps = [t * w[cls] for st, w, t in per if st in comp_stages and w[cls]]
            comms = [t * w[cls] for st, w, t in per if st in comm_stages and w[cls]]
            comp, comm = sum(comps), sum(comms)
            if comm_sm_frac and comms:
                comp = comp / (1.0 - comm_sm_frac)
            # times are >= 0: a stage with nothing on one side takes the other's time
            stage = np.maximum(comp, comm) if comps and comms else comp + comm
            total = total + n_layers * stage
    rest = sum(c.op.count * c.time_s for c in costs if c.op.stage not in staged)
    return 2.0 * (total + rest)


def by_resource(costs: list[Cost], micro_batches: int = 1) -> dict[str, Any]:
    """Sum of op times charged to each resource (compute, memory, comm, overhead); a compute
    op's time goes to compute where its pure roofline binds on FLOPs, else to memory."""
    out: dict[str, Any] = {r: 0.0 for r in ("compute", "memory", "comm", "overhead")}
    for c in costs:
        n = micro_batches * c.op.count
        if c.binds_compute is None:
            out[c.resource] = out[c.resource] + n * c.time_s
        else:
            # the count multiplies the selected time: one multiply-add per resource
            out["compute"] = out["compute"] + n * np.where(c.binds_compute, c.time_s, 0.0)
            out["memory"] = out["memory"] + n * np.where(c.binds_compute, 0.0, c.time_s)
    return out
