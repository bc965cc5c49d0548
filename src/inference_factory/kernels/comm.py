"""Collective communication time: TP all-reduce, EP all-to-all."""

from typing import Literal

import numpy as np


def ring_allreduce_s(*, message_bytes, n_ranks, link_bytes_per_s, latency_s):
    r"""Time of a ring all-reduce of ``message_bytes`` over ``n_ranks`` GPUs.

    .. math:: t = \frac{2 (n - 1)}{n} \frac{M}{W} + \alpha \,[n > 1]

    W is the one-direction per-GPU link bandwidth; alpha the latency of one whole collective
    (small-message all-reduces inside an NVSwitch domain use one-shot/tree algorithms, so the
    latency is not paid once per ring step). Zero for one rank. Source: the bandwidth term of
    the reduce-scatter + all-gather ring (Patarasuk & Yuan 2009; NCCL "bus bandwidth").
    """
    n = np.maximum(n_ranks, 1.0)
    return 2.0 * (n - 1.0) / n * message_bytes / link_bytes_per_s + latency_s * (n > 1.0)


def ep_copies_per_token_scale_up(*, experts_per_token, n_ranks, domain_gpus):
    r"""Copies of one token an EP dispatch sends over scale-up links (to peers in its own
    scale-up domain).

    .. math:: c_{up} = k \frac{\min(n, D) - 1}{n}

    Experts are spread uniformly over the n ranks; each of the k selected experts lives on a
    peer of the sender's D-GPU domain with probability (min(n, D) - 1)/n (the sender's own
    share moves no data).
    """
    n = np.maximum(n_ranks, 1.0)
    return experts_per_token * (np.minimum(n, domain_gpus) - 1.0) / n


def ep_copies_per_token_scale_up_per_rank(*, experts_per_token, n_ranks, domain_gpus):
    r"""Copies of one token sent over scale-up links when each destination RANK gets one copy
    however many of its experts the token picked (DeepEP's normal kernels, used in prefill).

    .. math:: c_{up} = (\min(n, D) - 1)\left[1 - \left(1 - \frac{1}{n}\right)^{k}\right]

    Each of the other min(n, D) - 1 ranks of the sender's domain hosts at least one of the k
    experts with probability 1 - (1 - 1/n)^k under uniform routing (experts spread evenly).
    """
    n = np.maximum(n_ranks, 1.0)
    return (np.minimum(n, domain_gpus) - 1.0) * (1.0 - (1.0 - 1.0 / n) ** experts_per_token)


def ep_copies_per_token_scale_out(*, experts_per_token, n_ranks, domain_gpus):
    r"""Copies of one token an EP dispatch sends over the scale-out NIC, deduplicated per
    destination node.

    .. math:: c_{out} = (N - 1)\left[1 - \left(1 - \frac{1}{N}\right)^{k}\right],
              \quad N = \max(n / D, 1)

    DeepEP's internode kernels send a token once to each remote node that hosts any of its
    k experts and forward it inside the node over NVLink (DeepEP README; DeepSeek-V3 report
    sec. 3.2.2). Each of the N - 1 remote nodes is hit with probability 1 - (1 - 1/N)^k under
    uniform routing. Zero when the group fits in one domain.
    """
    n_nodes = np.maximum(n_ranks / domain_gpus, 1.0)
    return (n_nodes - 1.0) * (1.0 - (1.0 - 1.0 / n_nodes) ** experts_per_token)


def ep_copies_per_token_scale_out_per_expert(*, experts_per_token, n_ranks, domain_gpus):
    r"""Copies of one token sent over the scale-out NIC when every remote expert gets its
    own copy (no per-node deduplication).

    .. math:: c_{out} = k \frac{\max(n - D, 0)}{n}

    DeepEP's low-latency kernels, used in decode, send token x expert messages point to
    point (IBGDA) for latency; they reproduce the published low-latency dispatch/combine
    times within ~10% (tests/kernels/test_components.py), where per-node deduplication does not.
    """
    n = np.maximum(n_ranks, 1.0)
    return experts_per_token * np.maximum(n - domain_gpus, 0.0) / n


def ep_alltoall_s(*, tokens_per_rank, hidden_size, bytes_per_elem, experts_per_token, n_ranks,
                  domain_gpus, scale_up_bytes_per_s, scale_out_bytes_per_s, latency_s,
                  load_factor=1.0, kernels: Literal["normal", "low_latency"] = "normal"):
    r"""Time of one EP dispatch or combine of one rank: each of its tokens copied to the ranks
    of its k experts over the scale-up links and the NIC, the two levels concurrent.

    .. math:: t = \max\left(\frac{M c_{up}}{W_{up}}, \frac{M c_{out}}{W_{out}}\right) + \alpha,
              \qquad M = n\, H\, b\, I

    n tokens per rank of H elements of b bytes, times the load factor I of the busiest
    rank. ``kernels`` names DeepEP's kernel family and so the copy counts: "normal" (prefill)
    sends one copy per destination rank in the domain
    (:func:`ep_copies_per_token_scale_up_per_rank`) and one per remote node
    (:func:`ep_copies_per_token_scale_out`); "low_latency" (decode) one per remote expert on
    both levels (:func:`ep_copies_per_token_scale_up`,
    :func:`ep_copies_per_token_scale_out_per_expert`). Source: DeepEP README (normal and
    low-latency kernels); DeepSeek-V3 report sec. 3.2.2.
    """
    if kernels == "normal":
        c_up = ep_copies_per_token_scale_up_per_rank(experts_per_token=experts_per_token,
                                                     n_ranks=n_ranks, domain_gpus=domain_gpus)
        c_out = ep_copies_per_token_scale_out(experts_per_token=experts_per_token,
                                              n_ranks=n_ranks, domain_gpus=domain_gpus)
    elif kernels == "low_latency":
        c_up = ep_copies_per_token_scale_up(experts_per_token=experts_per_token,
                                            n_ranks=n_ranks, domain_gpus=domain_gpus)
        c_out = ep_copies_per_token_scale_out_per_expert(experts_per_token=experts_per_token,
                                                         n_ranks=n_ranks, domain_gpus=domain_gpus)
    else:
        raise ValueError(f"kernels must be 'normal' or 'low_latency', got {kernels!r}")
    per_copy = tokens_per_rank * hidden_size * bytes_per_elem * load_factor
    return alltoall_s(scale_up_bytes=per_copy * c_up, scale_out_bytes=per_copy * c_out,
                      scale_up_bytes_per_s=scale_up_bytes_per_s,
                      scale_out_bytes_per_s=scale_out_bytes_per_s, latency_s=latency_s)


def alltoall_s(*, scale_up_bytes, scale_out_bytes, scale_up_bytes_per_s, scale_out_bytes_per_s,
               latency_s):
    r"""Time of one all-to-all (EP dispatch or combine) of one GPU.

    .. math:: t = \max\left(\frac{M_{up}}{W_{up}}, \frac{M_{out}}{W_{out}}\right) + \alpha

    Scale-up and scale-out traffic run concurrently; alpha is the latency of the slowest
    link used (the caller picks it).
    """
    return np.maximum(scale_up_bytes / scale_up_bytes_per_s,
                      scale_out_bytes / scale_out_bytes_per_s) + latency_s


def hierarchical_allreduce_s(*, message_bytes, n_ranks, domain_gpus, scale_up_bytes_per_s,
                             scale_out_bytes_per_s, scale_up_latency_s, scale_out_latency_s):
    r"""All-reduce over ``n_ranks`` GPUs spanning nodes of ``domain_gpus`` each, as NCCL's
    hierarchical algorithms run it: reduce-scatter inside each node over NVLink, all-reduce of
    each GPU's 1/g shard across the N nodes over the NIC, all-gather inside the node.

    .. math:: t = \frac{2 (g - 1)}{g} \frac{M}{W_{up}}
                + \frac{2 (N - 1)}{N} \frac{M / g}{W_{out}} + \alpha_{up} + \alpha_{out},
              \quad g = \min(n, D),\ N = n / g

    Only 1/g of the message crosses the NIC, instead of the whole ring running at NIC speed.
    Source: NCCL tree/ring hierarchy (Jeaugey, "Massively Scale Your Deep Learning Training
    with NCCL 2.4", NVIDIA blog 2019); the bandwidth terms are the ring's of
    :func:`ring_allreduce_s` on each level.
    """
    g = np.minimum(n_ranks, domain_gpus)
    n_nodes = np.maximum(n_ranks / g, 1.0)
    intra = 2.0 * (g - 1.0) / g * message_bytes / scale_up_bytes_per_s
    inter = 2.0 * (n_nodes - 1.0) / n_nodes * (message_bytes / g) / scale_out_bytes_per_s
    return intra + inter + scale_up_latency_s * (g > 1) + scale_out_latency_s * (n_nodes > 1)


def ring_allgather_s(*, message_bytes, n_ranks, link_bytes_per_s, latency_s):
    r"""Time of a ring all-gather (or reduce-scatter) whose WHOLE buffer is ``message_bytes``
    (the gathered output; the reduce-scatter's input), over ``n_ranks`` GPUs.

    .. math:: t = \frac{n - 1}{n} \frac{M}{W} + \alpha \,[n > 1]

    Each GPU sends and receives the n - 1 shards it does not hold (NCCL "bus bandwidth" of
    all_gather / reduce_scatter: algbw x (n-1)/n); half the ring all-reduce
    (:func:`ring_allreduce_s`), which is a reduce-scatter then an all-gather. ``M`` is sized as
    nccl-tests and aiconfigurator's NcclOp size it (the whole buffer). Zero for one rank.
    """
    n = np.maximum(n_ranks, 1.0)
    return (n - 1.0) / n * message_bytes / link_bytes_per_s + latency_s * (n > 1.0)


def ep_gather_scatter_bytes(*, tokens_per_rank, dp_ranks, hidden_size, bytes_per_elem):
    r"""Whole-buffer bytes of the all-gather that dispatches (or the reduce-scatter that
    combines) the tokens of an attention-DP MoE layer without an all-to-all kernel: every EP
    rank gathers every DP rank's tokens, runs its own experts on them, and the partial outputs
    are reduce-scattered back to the rank that owns each token.

    .. math:: M = T_\text{rank}\, n_\text{dp}\, h\, b

    ``T_rank`` tokens per attention-DP rank, ``bytes_per_elem`` the payload format with its
    block scales (dispatch: the quantised activation, combine: BF16). Source: aiconfigurator (git 095f58a5)
    aic-core/rust/aiconfigurator-core/src/operators/moe_dispatch.rs, TrtllmAlltoall branch
    (all_gather of (x + sf) x dp tokens before the experts, reduce_scatter of the hidden x dp
    tokens after them, off NVL72) and vLLM's ``allgather_reducescatter`` all2all backend. No
    routing imbalance: every rank moves every token whatever the routing.
    """
    return tokens_per_rank * dp_ranks * hidden_size * bytes_per_elem
