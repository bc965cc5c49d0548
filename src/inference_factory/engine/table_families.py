"""Measured-table families: which columns of a table file are exact keys, nearest keys and
interpolation axes, and the pure roofline of one row (:class:`Family`); :data:`FAMILIES` and
:data:`FILES` hold every family the engine reads.

A new attention kind with measured tables declares its families in its own module
(``table_families_<kind>.py``, calling :func:`register` with its :class:`Family` rows and
files) and adds that module to the one import line at the end of this section of
:mod:`.measured`; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..specs import HardwareSpec
from .table_rooflines import (
    a2a_roofline_s,
    allgather_roofline_s,
    allreduce_roofline_s,
    bmm_roofline_s,
    gemm_roofline_s,
    gqa_decode_roofline_s,
    gqa_prefill_roofline_s,
    mla_decode_roofline_s,
    mla_dims,
    mla_prefill_roofline_s,
    moe_roofline_s,
    nvlink_a2a_roofline_s,
)

# ---- families -------------------------------------------------------------------------------

#: GPUs per node in the DeepEP measurements (8-GPU HGX nodes; node_num nodes = EP 8 x node_num)
DEEPEP_NODE_GPUS = 8


def _a2a_rows(bytes_per_elem, phase):
    """EP dispatch (FP8, 1 byte) or combine (BF16, 2 bytes) roofline of DeepEP table rows:
    ``node_num`` nodes of 8 GPUs, EP = 8 x node_num."""
    def roofline(hw, tokens, hidden, topk, node_num):
        return a2a_roofline_s(hw, tokens, hidden, topk, DEEPEP_NODE_GPUS * node_num,
                              bytes_per_elem, phase=phase, domain_gpus=DEEPEP_NODE_GPUS)
    return roofline


@dataclass(frozen=True)
class Family:
    name: str
    exact: tuple[str, ...]       # group keys matched exactly
    nearest: tuple[str, ...]     # numeric group keys matched to the nearest measured value
    axes: tuple[str, ...]        # interpolation axes
    value: str                   # latency column (us)
    roofline: Callable           # (hw, *columns) -> seconds: the pure roofline of a row
    args: tuple[str, ...]        # the table columns ``roofline`` takes, in order
    #: axes along which the latency envelope (more work is never faster) is taken; None: all
    monotone_axes: tuple[str, ...] | None = None

    def roofline_rows(self, hw: HardwareSpec, d) -> np.ndarray:
        """Pure roofline of every row of ``d`` (a mapping of column -> array); string
        columns (dtypes) are passed one value at a time, numeric ones as arrays."""
        cols = [np.asarray(d[c]) for c in self.args]
        text = [i for i, c in enumerate(cols) if c.dtype.kind in "OUS"]
        n = cols[0].size
        out = np.empty(n)
        keys = np.zeros(n, dtype=np.int64)       # one integer per combination of the texts
        for i in text:
            labels, codes = np.unique(cols[i].astype(str), return_inverse=True)
            keys = keys * len(labels) + codes.reshape(-1)
        for key in np.unique(keys):
            rows = keys == key
            args = [c[rows][0] if i in text else c[rows].astype(float) for i, c in enumerate(cols)]
            out[rows] = self.roofline(hw, *args)
        return out


def _bmm_rows(pre: bool):
    """Absorbed MLA BMM rows at the tables' model: W_UK (d_nope -> latent) before the kernel,
    W_UV (latent -> d_v) after it."""
    def roofline(hw, dtype, tokens, heads):
        nope, _, latent, v = mla_dims()
        return bmm_roofline_s(hw, dtype, tokens, heads, *((nope, latent) if pre else (latent, v)))
    return roofline
_MOE_KEYS = ("hidden_size", "inter_size", "topk", "num_experts")
_EP_KEYS = ("hidden_size", "num_topk", "num_experts", "node_num")

FAMILIES: dict[str, Family] = {f.name: f for f in (
    # the GEMM envelope runs along the tokens only: n and k are weight shapes, each run by
    # the kernel configuration the engine picks for it, so a small weight measured slow
    # (sgl-kernel FP8 at n=256, k=7168 on B200: 13.95 us) says nothing of a larger one
    # measured fast (n=1024, k=8192: 10.37 us); lifting every larger shape to it made the
    # decode GEMMs of small batches up to 1.35x slower than their own measurements
    Family("gemm", ("dtype",), (), ("m", "n", "k"), "latency_us", gemm_roofline_s,
           ("dtype", "m", "n", "k"), monotone_axes=("m",)),
    Family("mla_bmm_pre", ("dtype",), (), ("num_tokens", "num_heads"), "latency_us", _bmm_rows(True),
           ("dtype", "num_tokens", "num_heads")),
    Family("mla_bmm_post", ("dtype",), (), ("num_tokens", "num_heads"), "latency_us", _bmm_rows(False),
           ("dtype", "num_tokens", "num_heads")),
    Family("mla_decode", ("kv_dtype",), ("num_heads",), ("batch_size", "kv_len"), "latency_us",
           mla_decode_roofline_s, ("kv_dtype", "num_heads", "batch_size", "kv_len")),
    Family("mla_prefill", ("kv_dtype",), ("num_heads",), ("batch_size", "isl"), "latency_us",
           mla_prefill_roofline_s, ("kv_dtype", "num_heads", "batch_size", "isl")),
    Family("attention_decode", ("kv_dtype", "head_dim"), ("num_heads", "num_kv_heads"),
           ("batch_size", "kv_len"), "latency_us", gqa_decode_roofline_s,
           ("kv_dtype", "num_heads", "num_kv_heads", "head_dim", "batch_size", "kv_len")),
    Family("attention_prefill", ("kv_dtype", "head_dim", "attn_dtype"), ("num_heads", "num_kv_heads"),
           ("batch_size", "isl"), "latency_us", gqa_prefill_roofline_s,
           ("kv_dtype", "num_heads", "num_kv_heads", "head_dim", "batch_size", "isl")),
    Family("moe", ("dtype",), _MOE_KEYS + ("moe_tp", "moe_ep"), ("num_tokens",), "latency_us",
           moe_roofline_s, ("dtype", "num_tokens") + _MOE_KEYS + ("moe_tp", "moe_ep")),
    Family("moe_wideep", ("phase", "dtype"), _MOE_KEYS + ("moe_ep",), ("num_tokens",),
           "latency_us", lambda hw, t, n, h, i, k, e, ep: moe_roofline_s(hw, t, n, h, i, k, e, 1.0, ep),
           ("dtype", "num_tokens") + _MOE_KEYS + ("moe_ep",)),
    Family("a2a_nvlink", ("op", "moe_dtype"), ("hidden_size", "topk", "num_experts", "moe_ep"),
           ("num_tokens",), "latency_us", nvlink_a2a_roofline_s,
           ("op", "moe_dtype", "num_tokens", "hidden_size", "topk", "moe_ep")),
    Family("allreduce", ("kernel",), ("num_gpus",), ("message_bytes",), "latency_us",
           allreduce_roofline_s, ("message_bytes", "num_gpus")),
    # NCCL all-gather / reduce-scatter (the dispatch / combine of an attention-DP MoE layer
    # without an all-to-all kernel: TensorRT-LLM off NVL72, vLLM's allgather_reducescatter)
    Family("allgather", (), ("num_gpus",), ("message_bytes",), "latency_us",
           allgather_roofline_s, ("message_bytes", "num_gpus")),
    Family("reducescatter", (), ("num_gpus",), ("message_bytes",), "latency_us",
           allgather_roofline_s, ("message_bytes", "num_gpus")),
)}
# DeepEP dispatch (FP8 payload) and combine (BF16) in low-latency (decode) and normal
# (prefill) mode: one family each, read from the same two tables
FAMILIES.update({f"{op}_{mode}": Family(
    f"{op}_{mode}", (), _EP_KEYS, ("num_token",), f"{op}_us", _a2a_rows(b, phase),
    ("num_token", "hidden_size", "num_topk", "node_num"))
    for op, b in (("dispatch", 1.0), ("combine", 2.0))
    for mode, phase in (("ll", "decode"), ("normal", "prefill"))})

#: family -> (csv file, row filter) ; several families may read one file
FILES: dict[str, tuple[str, tuple[str, str] | None]] = {
    "gemm": ("gemm.csv", None),
    "mla_bmm_pre": ("mla_bmm.csv", ("op", "pre")),
    "mla_bmm_post": ("mla_bmm.csv", ("op", "post")),
    "mla_decode": ("mla_decode.csv", None),
    "mla_prefill": ("mla_prefill.csv", None),
    "attention_decode": ("attention_decode.csv", None),
    "attention_prefill": ("attention_prefill.csv", None),
    "moe": ("moe.csv", ("distribution", "uniform")),
    "moe_wideep": ("moe_wideep.csv", ("distribution", "uniform")),
    "dispatch_ll": ("deepep_ll.csv", None),
    "combine_ll": ("deepep_ll.csv", None),
    "dispatch_normal": ("deepep_normal.csv", None),
    "combine_normal": ("deepep_normal.csv", None),
    "allreduce": ("allreduce.csv", None),
    "a2a_nvlink": ("alltoall.csv", ("kernel_source", "NVLinkTwoSided")),
    "allgather": ("nccl.csv", ("op", "all_gather")),
    "reducescatter": ("nccl.csv", ("op", "reduce_scatter")),
}




def register(families, files) -> None:
    """Add a kind module's families (an iterable of :class:`Family`) and their files
    (family -> (csv file, row filter)); a name taken by another family is refused."""
    for fam in families:
        if FAMILIES.get(fam.name, fam) != fam:
            raise ValueError(f"table family {fam.name!r} is defined twice")
        FAMILIES[fam.name] = fam
    FILES.update(files)
