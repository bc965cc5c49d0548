"""Measured-table families of linear attention (:mod:`.attention.linear`): Gated DeltaNet
(``gdn_prefill``, ``gdn_decode``) and Kimi Delta Attention (``kda_prefill``, ``kda_decode``),
and the pure roofline of one of their rows.

A row (``hardware/measured/<device>/gdn.csv`` / ``kda.csv``, extracted from NVIDIA's
aiconfigurator ``linear_attention/*/gdn_perf.parquet`` and ``kda/*/kda_perf.parquet`` by
``calibration/extract_aiconfigurator_linear.py``) is the latency of one layer's two kernels
of a phase as one engine runs them, summed: the causal short convolution and the delta-rule
recurrence (context: ``causal_conv1d_fn`` + ``chunk_gated_delta_rule`` / ``chunk_kda``;
generation: ``causal_conv1d_update`` + the fused recurrent step), for ``batch_size``
sequences of ``seq_len`` new tokens (1 in generation) with per-TP-shard head counts
(aiconfigurator ``sdk/operations/mamba.py``: "Tensor-parallel model builders therefore pass
per-rank head counts"), BF16 inputs and an FP32 state (``collector/sglang/collect_gdn.py``).
"""

from __future__ import annotations

from ..kernels import linear_attention as klin
from ..kernels import ops as kops
from .table_families import Family, register
from .table_rooflines import _peak

#: bytes per element of the tables' inputs (BF16) and recurrent state (FP32), above
TABLE_IO_BYTES, TABLE_STATE_BYTES = 2.0, 4.0


def shapes(variant, nk, nv, dk, dv, d_conv, *, state_bytes_per_elem, io_bytes_per_elem=2.0):
    """(state bytes, conv-state bytes, bytes per token in and out, one chunk's states) of one
    layer's shard of ``nk`` key and ``nv`` value heads for one sequence; ``variant`` "kda"
    reads an FP32 gate per key channel, "gdn" one per value head (and beta)."""
    channels = 2.0 * nk * dk + nv * dv
    state = klin.recurrent_state_bytes(n_heads=nv, head_dim_k=dk, head_dim_v=dv,
                                       state_bytes_per_elem=state_bytes_per_elem)
    conv = klin.conv_state_bytes(conv_channels=channels, conv_kernel=d_conv,
                                 bytes_per_elem=io_bytes_per_elem)
    gates = 4.0 * (nv * dk + nv if variant == "kda" else 2.0 * nv)
    # conv input and output, recurrence inputs (q, k, v) and output o, gates
    io = io_bytes_per_elem * (3.0 * channels + nv * dv) + gates
    chunk_h = nv * dk * dv * io_bytes_per_elem
    return state, conv, io, chunk_h


def linear_roofline_s(hw, variant, phase, nk, nv, dk, dv, d_conv, batch, tokens, *,
                      state_bytes_per_elem=TABLE_STATE_BYTES, io_bytes_per_elem=TABLE_IO_BYTES):
    """Pure roofline of one layer's conv + recurrence over ``batch`` sequences of ``tokens``
    new tokens each: chunked in prefill, the recurrent step in decode (BF16 tensor-core peak,
    HBM bandwidth; :mod:`inference_factory.kernels.linear_attention`)."""
    state, conv, io, chunk_h = shapes(variant, nk, nv, dk, dv, d_conv,
                                      state_bytes_per_elem=state_bytes_per_elem,
                                      io_bytes_per_elem=io_bytes_per_elem)
    t = batch * tokens
    channels = 2.0 * nk * dk + nv * dv
    flop = klin.conv_flop(tokens=t, conv_channels=channels, conv_kernel=d_conv)
    if phase == "decode":
        flop = flop + klin.decode_flop(tokens=t, n_heads=nv, head_dim_k=dk, head_dim_v=dv)
        nbytes = klin.decode_bytes(sequences=batch, new_tokens=tokens, state_bytes=state,
                                   conv_bytes=conv, io_bytes_per_token=io)
    else:
        flop = flop + klin.chunk_prefill_flop(tokens=t, n_heads=nv, head_dim_k=dk, head_dim_v=dv)
        nbytes = klin.chunk_prefill_bytes(sequences=batch, new_tokens=tokens, state_bytes=state,
                                          conv_bytes=conv, io_bytes_per_token=io,
                                          chunk_state_bytes=chunk_h)
    return kops.pure_roofline_s(flop=flop, bytes_moved=nbytes, peak_flop_per_s=_peak(hw, "bf16"),
                                peak_bytes_per_s=hw.hbm_bw_bytes_per_s)


def _rows(variant, phase):
    def roofline(hw, nk, nv, dk, dv, d_conv, batch, seq_len):
        return linear_roofline_s(hw, variant, phase, nk, nv, dk, dv, d_conv, batch,
                                 1.0 if phase == "decode" else seq_len)
    return roofline


_KEYS = ("head_k_dim", "head_v_dim", "d_conv")
_HEADS = ("num_k_heads", "num_v_heads")
_ARGS = _HEADS + _KEYS + ("batch_size", "seq_len")

register(
    [Family(f"{v}_{phase}", _KEYS, _HEADS, ("batch_size", "seq_len") if phase == "prefill"
            else ("batch_size",), "latency_us", _rows(v, phase), _ARGS)
     for v in ("gdn", "kda") for phase in ("prefill", "decode")],
    {f"{v}_{phase}": (f"{v}.csv", ("phase", phase))
     for v in ("gdn", "kda") for phase in ("prefill", "decode")})
