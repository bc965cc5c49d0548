"""Collective communication time: TP all-reduce, EP all-to-all."""

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


def alltoall_s(*, bytes_per_gpu, n_ranks, domain_gpus, scale_up_bytes_per_s,
               scale_out_bytes_per_s, scale_up_latency_s, scale_out_latency_s):
    r"""Time of one all-to-all (EP dispatch or combine) in which each GPU sends
    ``bytes_per_gpu`` spread uniformly over the ``n_ranks`` ranks of the group.

    .. math::
        t = \max\left(\frac{M f_{in}}{W_{up}}, \frac{M f_{out}}{W_{out}}\right) + \alpha,
        \quad f_{in} = \frac{\min(n, D) - 1}{n}, \; f_{out} = \frac{\max(n - D, 0)}{n}

    Traffic to ranks in the sender's scale-up domain (D GPUs) uses NVLink/xGMI; the rest uses
    the scale-out NIC; both run concurrently. alpha is the scale-out latency when the group
    spans domains, else the scale-up latency. The share addressed to the sender itself
    (1/n) moves no data.
    """
    n = np.maximum(n_ranks, 1.0)
    f_in = (np.minimum(n, domain_gpus) - 1.0) / n
    f_out = np.maximum(n - domain_gpus, 0.0) / n
    spans = n > domain_gpus
    latency = scale_out_latency_s * spans + scale_up_latency_s * (1 - spans) * (n > 1)
    return np.maximum(bytes_per_gpu * f_in / scale_up_bytes_per_s,
                      bytes_per_gpu * f_out / scale_out_bytes_per_s) + latency
