"""HBM per GPU: weight, KV-cache and activation bytes, and what fits beside them."""

import numpy as np


def sharded_weight_bytes(*, n_params, bytes_per_param, n_shards):
    r"""Bytes per GPU of weights split evenly over ``n_shards`` GPUs (tensor parallelism).

    .. math:: W = \frac{P\, b_w}{t}

    Used for the dense path (attention, norms, dense FFN, router, shared experts) and the
    embedding and head, each at its own precision. Source: the column/row split of every
    projection across a TP group (Megatron-LM, Shoeybi et al. 2019, sec. 3).
    """
    return n_params * bytes_per_param / n_shards


def mla_replicated_latent_bytes(*, n_layers, hidden_size, q_lora_rank, kv_lora_rank,
                                qk_rope_head_dim, bytes_per_param, tp):
    r"""Extra bytes per GPU because MLA's latent down-projections are replicated, not split,
    across a TP group (SGLang, vLLM).

    .. math:: \Delta W = N_L\, H (r_q + r_{kv} + d_r)\, b_w \left(1 - \frac{1}{tp}\right)

    :func:`sharded_weight_bytes` has counted 1/tp of them; each GPU holds them whole. Zero at
    tp = 1. Source: DeepSeek-V3 report sec. 2.1.1 (W_DQ, W_DKV, W_KR shapes).
    """
    down = hidden_size * (q_lora_rank + kv_lora_rank + qk_rope_head_dim)
    return n_layers * down * bytes_per_param * (1.0 - 1.0 / tp)


def replicated_weight_extra_bytes(*, n_params, bytes_per_param, tp):
    r"""Extra bytes per GPU for weights every GPU of a TP group holds whole (a latent MoE's
    projections), beyond the 1/tp share :func:`sharded_weight_bytes` counted.

    .. math:: \Delta W = P\, b_w \left(1 - \frac{1}{tp}\right)

    Zero at tp = 1. Source: aiconfigurator ``sdk/models/kimi_k3.py`` (the latent down and up
    projections "replicated ... unsharded", commit 095f58a5).
    """
    return n_params * bytes_per_param * (1.0 - 1.0 / tp)


def expert_slots_per_rank(*, n_experts, n_redundant, ep):
    r"""Expert slots of one EP rank: the routed experts and their redundant replicas, spread
    over ``ep`` ranks, rounded up (every rank is sized for the fullest one).

    .. math:: s = \left\lceil \frac{E + R}{ep} \right\rceil

    Source: DeepSeek EPLB (``eplb``), which fills (E + R)/ep slots per rank.
    """
    return np.ceil((n_experts + n_redundant) / ep)


def routed_expert_bytes(*, n_layers, slots_per_rank, n_expert_params, bytes_per_param,
                        expert_tp):
    r"""Bytes per GPU of the routed experts: the rank's slots in every MoE layer, each expert
    split over the expert-tensor-parallel GPUs t_e = N / ep.

    .. math:: W_e = N_{moe}\, s\, \frac{P_e\, b_e}{t_e}
    """
    return n_layers * slots_per_rank * n_expert_params * bytes_per_param / expert_tp


def sequence_memory_bytes(*, kv_len_tokens, bytes_per_token, span_tokens, bytes_per_sequence,
                          kv_split):
    r"""Bytes one sequence holds on one GPU in a group of layers: a term per token of context,
    up to the span of tokens the layers keep, and a term independent of context.

    .. math:: M = \frac{\min(L, s)\, b_{tok} + b_{seq}}{\kappa}

    b_tok: bytes of one token over the group's layers (KV; MLA's latent); s: the tokens a
    layer keeps (infinite for full attention, w for a sliding window); b_seq: bytes per
    sequence whatever its length (a recurrent state; zero for KV caches); kappa: the GPUs
    one sequence's cache is split over (min(tp, n_kv) for GQA; 1 for MLA, whose latent every
    TP rank holds whole). The engine sizes it at the sequence's **final** length: the
    serving engine reserves it (vLLM / SGLang allocate KV for prompt + max output). The bytes
    a decode step reads are the context term at the current length
    (:func:`inference_factory.kernels.attention.kv_read_bytes`).
    """
    return (np.minimum(kv_len_tokens, span_tokens) * bytes_per_token + bytes_per_sequence) / kv_split


def activation_bytes_per_token(*, vocab_size, hidden_size, dense_intermediate_size,
                               expert_intermediate_size, experts_per_token, tp):
    r"""Working memory of one in-flight token: FP32 logits of the vocabulary shard plus BF16
    buffers of one layer (residual, normed input, attention output, one more H buffer, gate
    and up of the FFN).

    .. math:: a = \frac{4 V}{tp} + 2\left(4 H + 2\,\frac{\max(f_{dense},\ k f_e)}{tp}\right)

    (k taken as at least 1). An ASSUMPTION: an estimate of the serving engine's activation
    pool, not a measurement; prefill activations are not counted (docs/MODEL.md sec. 6).
    """
    inter = np.maximum(dense_intermediate_size,
                       expert_intermediate_size * np.maximum(experts_per_token, 1)) / tp
    return 4.0 * vocab_size / tp + 2.0 * (4.0 * hidden_size + 2.0 * inter)


def runtime_reserve_bytes(*, hbm_capacity_bytes, reserve_frac):
    r"""HBM the runtime keeps for itself (CUDA context, NCCL buffers, CUDA graphs).

    .. math:: R = \rho\, C

    rho is an ASSUMPTION (``configs/realism.toml`` [memory]).
    """
    return reserve_frac * hbm_capacity_bytes


def hbm_used_bytes(*, weight_bytes, reserve_bytes, batch_size, kv_bytes_per_seq,
                   activation_bytes_per_seq):
    r"""HBM used per GPU by weights, the runtime reserve and B sequences' KV and activations.

    .. math:: U = W + R + B\,(KV_{seq} + A_{seq})
    """
    return weight_bytes + reserve_bytes + batch_size * (kv_bytes_per_seq + activation_bytes_per_seq)


def fits(*, hbm_used_bytes, hbm_capacity_bytes):
    r"""Whether a configuration fits in HBM: :math:`U \le C` (a mask, not a filter)."""
    return hbm_used_bytes <= hbm_capacity_bytes


def max_batch_size(*, hbm_capacity_bytes, reserve_bytes, weight_bytes, kv_bytes_per_seq,
                   activation_bytes_per_seq):
    r"""Most sequences per GPU whose KV and activations fit beside the weights and reserve.

    .. math:: B_{max} = \left\lfloor \frac{\max(C - R - W,\ 0)}{KV_{seq} + A_{seq}} \right\rfloor
    """
    free = hbm_capacity_bytes - reserve_bytes - weight_bytes
    return np.floor(np.maximum(free, 0.0) / (kv_bytes_per_seq + activation_bytes_per_seq))


def free_hbm_cache_bytes(*, hbm_capacity_bytes, reserve_frac, weight_bytes, cache_frac, n_gpus):
    r"""HBM of ``n_gpus`` GPUs given to the prefix cache: a share of what the weights and the
    runtime reserve leave.

    .. math:: C_{hbm} = n\, f \max\big(C (1 - \rho) - W,\ 0\big)

    f (``hbm_cache_frac``) is a sizing choice of the configuration.
    """
    return (np.maximum(hbm_capacity_bytes * (1 - reserve_frac) - weight_bytes, 0.0)
            * cache_frac * n_gpus)


def cache_capacity_tokens(*, cache_bytes, kv_bytes_per_token):
    r"""Tokens of prefix KV a tier of ``cache_bytes`` holds: :math:`n = C / b_{kv}`."""
    return cache_bytes / kv_bytes_per_token
