"""The engine's axes, as plain data: importable without numpy or xarray.

The command line (option grammar, ``--help``) and the engine read the same table, so a new
axis or a changed range appears in both at once.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from .bounds import MAX_BATCH, MAX_GPUS, MAX_TOKENS

Overlap = Literal["none", "two-batch"]
CacheTier = Literal["hbm", "dram", "nvme"]
OVERLAPS: tuple[str, ...] = ("none", "two-batch")
CACHE_TIERS: tuple[str, ...] = ("hbm", "dram", "nvme")

#: Numeric axes: broadcast through the kernels. name -> (default, unit, lower, upper, integer).
#: Upper bounds (bounds.MAX_TOKENS, MAX_BATCH) keep every value finite and far above any
#: deployment (an unbounded kv_len of 1e300 overflowed to NaN).
NUMERIC_AXES: dict[str, tuple[float, str, float, float, bool]] = {
    "batch_size": (1, "sequences per DP rank", 1, MAX_BATCH, False),
    "kv_len": (1024, "tokens of decode context", 1, MAX_TOKENS, False),
    "prompt_len": (1024, "prompt tokens", 1, MAX_TOKENS, False),
    "prefill_batch_size": (1, "prompts per DP rank per pass", 1, MAX_BATCH, False),
    "draft_depth": (0, "draft tokens per step", 0, 64, True),
    "acceptance_rate": (0.8, "fraction per position", 0.0, 1.0, False),
    "cache_hit_rate": (0.0, "fraction of input tokens", 0.0, 1.0, False),
    "final_len": (0, "tokens reserved per sequence (input + output); 0 = kv_len", 0,
                  MAX_TOKENS, False),
}

#: Structural axes: one vectorized block per combination. name -> default
STRUCT_AXES: dict[str, Any] = {
    "tp": 1, "dp": 1, "ep": 1, "redundant_experts": 0, "expert_skew": None, "context_cv": None,
    "weight_precision": None, "moe_precision": None, "kv_precision": "bf16",
    "attention_precision": "bf16", "dispatch_precision": "fp8", "combine_precision": "bf16",
    "overlap": "none", "cache_tier": "dram",
}

#: Axes counted in whole units on the command line (the library keeps batch sizes continuous
#: for root finding; a user typing ``batch_size=2.5`` has made a mistake).
WHOLE_AXES: tuple[str, ...] = ("batch_size", "prefill_batch_size", "draft_depth", "tp", "dp",
                               "ep", "redundant_experts")
#: Structural axes that take numbers: name -> (lower, upper)
STRUCT_NUMBERS: dict[str, tuple[float, float]] = {
    "tp": (1, MAX_GPUS), "dp": (1, MAX_GPUS), "ep": (1, MAX_GPUS),
    "redundant_experts": (0, math.inf), "expert_skew": (0.0, 4.0), "context_cv": (0.0, 10.0),
}
#: Precision axes (values: units.PRECISIONS)
PRECISION_AXES: tuple[str, ...] = ("weight_precision", "moe_precision", "kv_precision",
                                   "attention_precision", "dispatch_precision",
                                   "combine_precision")

#: Sweep output formats by suffix.
SWEEP_FORMATS: dict[str, str] = {".nc": "netCDF4", ".zarr": "Zarr folder", ".csv": "CSV",
                                 ".parquet": "Parquet"}
#: How a GPU-hour is charged.
COST_BASES: tuple[str, ...] = ("rental", "capex", "tco")
#: Points per block when the command line chunks a sweep on its own.
DEFAULT_CHUNK_POINTS = 1_000_000
