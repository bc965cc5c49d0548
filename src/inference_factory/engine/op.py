"""One operation of a pass (:class:`Op`) and the builders every layer family shares: the
dense GEMM of a weight matrix, the measured-table dtype of a weight format, the attention
rooflines' dependence on the grid and the KV bytes a layer reads. Attention kinds
(:mod:`.attention`) and the layer list (:mod:`.ops`) build their operations from these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import units
from ..kernels import attention as katt
from ..kernels import ops as kops
from . import grid as G
from . import measured as M
from . import xp
from .precision import compute_precision

if TYPE_CHECKING:                       # annotations only
    from .geometry import Geom


@dataclass
class Op:
    """One operation of a pass. ``flop``/``hbm_bytes`` are per call and per micro-batch."""

    name: str
    stream: str                  # "compute" | "comm"
    stage: str                   # pipeline stage: attn0, attn1, shared, mlp, dispatch, combine,
    #                              tp_attn, tp_ffn, head
    count: float                 # calls per pass
    flop: Any = 0.0
    hbm_bytes: Any = 0.0
    precision: str = "bf16"      # tensor-core rate of the roofline
    rate: str = "gemm"           # realism class of the roofline: gemm | attention | moe | other
    m_tokens: Any = 1.0          # GEMM M (small-M tile efficiency of the roofline model)
    family: str = ""             # measured-table family ("" = roofline only)
    keys: dict = field(default_factory=dict)     # exact keys of the family
    nearest: dict = field(default_factory=dict)  # nearest-matched keys
    fixed: dict = field(default_factory=dict)    # axes fixed for this block
    coords: tuple = ()           # varying axes (arrays), in the family's axis order
    pure_fn: Any = None          # pure roofline as a function of ``coords`` (table formula)
    params: dict = field(default_factory=dict)   # what the cost needs beyond the above
    #                                              (link model, kernel count, mean load)
    fallback: tuple = ()         # (family, keys, nearest) tried when ``family`` has no rows
    roof_mode: str = "separable"  # what pure_fn depends on (grid.interpolate_time)
    pure_key: Any = None         # what pure_fn is a function of besides ``coords`` (hashable,
    #                              its first item the hardware spec): its values at a table's
    #                              nodes are then computed once (Curve.time_s)
    source_cap: int = 3          # best source label the op may carry (grid.SOURCES; a
    #                              substitute dtype's rows: extrapolated)
    covers_kernels: Any = 0.0    # small kernels per call its measurement includes (a whole
    #                              module's table): taken off the layer's other_kernels


def gemm_dtype(fmt: str, hw=None) -> str:
    """Measured-table dtype of a GEMM whose weights are stored in scaling format ``fmt``
    (``ModelSpec.quant_format``): FP8 per-tensor (``fp8``) or 128-block (``fp8_block``,
    DeepGEMM), NVFP4, and MXFP4 run as MXFP4 x MXFP8 kernels where the device has FP8 tensor
    cores (else MXFP4 x BF16); 16-bit weights read the BF16 tables."""
    if fmt == "mxfp4":
        # with FP4 tensor cores MXFP4 x MXFP8 (Blackwell); without, weight-only MXFP4 x BF16
        return ("w4a8_mxfp4_mxfp8" if hw is None or "fp4" in hw.dense_flop_per_s
                else "w4a16_mxfp4")
    if fmt == "int4":      # W4A16: AIConfigurator's weight-only int4 rows
        return "int4_wo"
    return fmt if fmt in ("fp8", "fp8_block", "nvfp4") else "bf16"


#: Measured dtype tried where a family lacks a format's own rows: the same tensor-core
#: precision in the format the tables hold (the dense GEMM tables have no MXFP4 rows).
#: ASSUMPTION: MXFP4 and NVFP4 GEMMs run at one FP4 tensor-core rate (the same Blackwell
#: FP4 peak for both in NVIDIA's B200 datasheet); NVFP4's finer scales (one per 16 against
#: one per 32) read slightly more bytes, so the substitute is a little pessimistic.
SUBSTITUTE_DTYPE = {"w4a8_mxfp4_mxfp8": "nvfp4"}


def gemm(g: Geom, name, stage, count, m, n, k, prec):
    dtype = gemm_dtype(g.m.quant_format(prec), g.hw) if prec == g.wprec else gemm_dtype(prec)
    dtype, cap = table_dtype(g, "gemm", dtype)
    b = units.BYTES_PER_ELEMENT[prec]          # weights read as stored; math at `comp`
    comp = compute_precision(g.hw, prec) or prec
    # HBM traffic is accounted as the weights (the hand roofline's convention: activations
    # of a GEMM are small next to its weights in decode, and prefill is compute-bound); the
    # measured-table reference roofline (pure_fn) also counts activations, see kernels.ops
    return Op(name, "compute", stage, count,
              flop=kops.gemm_flop(m=m, n=n, k=k),
              hbm_bytes=kops.gemm_bytes(m=0.0, n=n, k=k, input_bytes=0.0, weight_bytes=b,
                                        output_bytes=0.0),
              precision=comp, rate="gemm", m_tokens=m, family="gemm", keys={"dtype": dtype},
              fixed={"n": float(n), "k": float(k)}, coords=(m,),
              pure_fn=lambda m_: M.gemm_roofline_s(g.hw, dtype, m_, n, k),
              pure_key=(g.hw, "gemm", dtype, float(n), float(k)), source_cap=cap)


def table_dtype(g: Geom, family: str, dtype: str) -> tuple[str, int]:
    """The dtype whose rows cost an op of ``family``, and the best source label it may
    carry: ``dtype`` itself, or where the device's table lacks it its
    :data:`SUBSTITUTE_DTYPE` (labelled extrapolated at best)."""
    sub = SUBSTITUTE_DTYPE.get(dtype)
    if sub is None or not g.rl.measured:
        return dtype, G.MEASURED
    tabs = M.tables_for(g.hw)
    if tabs is None or not tabs.has(family) or tabs.curve(family, {"dtype": dtype}, {}) is not None:
        return dtype, G.MEASURED
    return sub, G.EXTRAPOLATED


def has_curve(g: Geom, family: str, keys: dict, nearest: dict) -> bool:
    """Whether the measured tables (where the realism reads them) cost ``family`` at these
    keys on ``g``'s device: an op measured as a whole module replaces its parts only then."""
    if not g.rl.measured:
        return False
    tabs = M.tables_for(g.hw)
    return tabs is not None and tabs.has(family) and tabs.curve(family, keys, nearest) is not None


def quantization_kernels(g: Geom, groups: float) -> float:
    """Activation quantisation kernels of ``groups`` quantised GEMM groups (configs/realism.toml
    [other_kernels] per_quantized_gemm_group; none for 16-bit weights, and none where the
    device's measured GEMMs already time them: realism ``quantization_timed_with_gemm``)."""
    quant = 1.0 if g.wprec in ("fp8", "fp4") else 0.0
    if quant and g.rl.measured:
        tabs = M.tables_for(g.hw)
        if tabs is not None and tabs.gemm_times_quantization(g.rl.quantization_timed_with_gemm):
            quant = 0.0
    return quant * g.rl.other_kernels["per_quantized_gemm_group"] * groups


def kv_write_covered(g: Geom, family: str, keys: dict, nearest: dict) -> float:
    """KV-cache write kernels per call an attention op of ``family`` times: the realism's
    ``kv_write`` where the device's table costs the op at these keys and every row of the
    family comes from a collector that times the write with the attention
    (configs/realism.toml [other_kernels] kv_write_timed_in, kv_write_timed_by); else 0."""
    rl = g.rl
    if family not in rl.kv_write_timed_in or not has_curve(g, family, keys, nearest):
        return 0.0
    names = M.tables_for(g.hw).backends(family)
    return rl.other_kernels["kv_write"] if names and names <= set(rl.kv_write_timed_by) else 0.0


def attention_mode(per_point_parameter) -> str:
    """Attention rooflines are linear in the sequences; they depend on the coordinates only
    where their other parameter (draft tokens, the new share of a prompt) is one number."""
    return "separable" if np.ndim(per_point_parameter) == 0 else "linear_first"


def roofline_key(hw, name, *params, per_point=()):
    """An op's ``pure_key``: the hardware spec, the roofline's name, its scalar parameters
    and the values of its per-point parameters (``per_point``, arrays: the draft tokens of
    an attention roofline); None where those are a backend's values or a large grid (no
    memo: the times are computed each time)."""
    if not per_point:
        return (hw, name, *params)
    values = xp.memo_key(*per_point, max_points=M.TIMES_MEMO_POINTS)
    return None if values is None else (hw, name, *params, values)


def bmm_roofline_fn(hw, dtype, heads, k_dim, n_dim):
    return lambda t_: M.bmm_roofline_s(hw, dtype, t_, heads, k_dim, n_dim)


def prefill_roofline_fn(roofline, head, new_tokens, cached_tokens, **kw):
    """Prefill attention roofline as a function of (prompts, total length S), keeping the
    point's split of S into new and cached tokens."""
    f_new = new_tokens / (new_tokens + cached_tokens)
    return lambda b_, s_: roofline(*head, b_, s_ * f_new, s_ * (1.0 - f_new), **kw)


def kv_read_bytes(seqs, kv_len, kv_bytes_per_token, window):
    """KV bytes one layer reads (``kernels.attention.kv_read_bytes``): a full-attention layer
    (``window`` None) all ``kv_len`` tokens, a window layer at most ``window`` of them."""
    if window is None:
        return katt.kv_read_bytes(sequences=seqs, kv_len_tokens=kv_len,
                                  kv_bytes_per_token_full=kv_bytes_per_token,
                                  kv_bytes_per_token_window=0.0, window_tokens=0.0)
    return katt.kv_read_bytes(sequences=seqs, kv_len_tokens=kv_len, kv_bytes_per_token_full=0.0,
                              kv_bytes_per_token_window=kv_bytes_per_token, window_tokens=window)
