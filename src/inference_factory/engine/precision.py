"""The tensor-core precision a weight format computes at on a device (weight-only formats on
devices without their tensor cores)."""

from __future__ import annotations

from ..specs import HardwareSpec


#: Weight formats a device without their tensor cores runs weight-only: stored in the
#: format, dequantised in the kernel and multiplied at 16 bits (vLLM's Marlin and SGLang's
#: MXFP4 x BF16 MoE kernels on Hopper and Ampere; AIConfigurator measures the latter on H100
#: and H200, the ``w4a16_mxfp4`` rows of their MoE tables).
#: INT4 (W4A16, Kimi-K2-Thinking) is weight-only everywhere: no device here lists INT4 tensor
#: cores (AIConfigurator's ``int4_wo`` MoE rows on B200 and H200 measure it so).
WEIGHT_ONLY_FORMATS = ("fp4", "fp8", "int4")


def compute_precision(hw: HardwareSpec, precision: str) -> str | None:
    """The tensor-core precision a GEMM whose weights are stored in ``precision`` runs at on
    ``hw``: the precision itself where the device has its tensor cores; else, for a 4- or
    8-bit weight format, weight-only at BF16 (FP16 where the device lists no BF16 rate);
    None where neither applies."""
    rates = hw.dense_flop_per_s
    if precision in rates:
        return precision
    if precision in WEIGHT_ONLY_FORMATS:
        return "bf16" if "bf16" in rates else ("fp16" if "fp16" in rates else None)
    return None
