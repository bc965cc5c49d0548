"""Schemas of one row of a case file (``validation/*.csv``) and of a trace (Mooncake JSONL
or CSV): cells arrive as strings or JSON values and are coerced as documented.

Re-exported by :mod:`.schema`."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Optional

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema

from .schema_base import (MAX_BATCH_PER_GPU, MAX_GPUS, MAX_TOKENS, MAX_TRACE_MS, Precision,
                          _Schema, _bounds, nonempty)


# --------------------------------------------------------------------------------------------
# case file row (CSV: cells are strings; a blank cell is absent and takes its default)
# --------------------------------------------------------------------------------------------


def _whole(v: Any) -> Any:
    """A whole number given as text or as a float (``"4"``, ``"4.0"``, ``4.0``) -> int;
    anything else passes on unchanged for the strict check to reject."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            x = float(v.strip())
        except ValueError:
            return v
        v = x
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    return v


def _number(v: Any) -> Any:
    """A number given as text -> float (``"1e400"`` -> inf, rejected as not finite)."""
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return v
    if isinstance(v, int) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:          # an integer beyond float range: not finite
            return math.inf
    return v


def cell_count(lo: int, hi: int, doc: str):
    """A whole number in a CSV cell or JSON field (text or a whole float is converted)."""
    return Annotated[int, BeforeValidator(_whole),
                     WithJsonSchema({"type": "integer", "minimum": lo, "maximum": hi,
                                     "description": f"{doc}; an integer in [{lo:,}, {hi:,}]"}),
                     Field(ge=lo, le=hi, description=f"{doc}; an integer in [{lo:,}, {hi:,}]")]


def cell_num(lo: float, hi: float, doc: str, *, lo_open: bool = False, hi_open: bool = False):
    rng = dict(gt=lo) if lo_open else dict(ge=lo)
    rng.update(lt=hi) if hi_open else rng.update(le=hi)
    desc = f"{doc}; a finite number in {_bounds(lo, hi, lo_open, hi_open)}"
    return Annotated[float, BeforeValidator(_number), Field(allow_inf_nan=False,
                                                            description=desc, **rng)]


class CaseRow(_Schema):
    """One row of a case file (``docs/VALIDATION.md``: the CSV contract). Blank cells are
    absent here; the defaults and cross-column rules are in :func:`validation.load_cases`."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    case_id: nonempty("unique case id")
    model: nonempty("model spec name or alias")
    hardware: nonempty("hardware spec name or alias")
    phase: Literal["prefill", "decode"]
    n_gpus: Optional[cell_count(1, MAX_GPUS, "GPUs of the instance (tp x dp)")] = None
    tp: Optional[cell_count(1, MAX_GPUS, "tensor-parallel GPUs")] = None
    dp: Optional[cell_count(1, MAX_GPUS, "data-parallel ranks")] = None
    ep: Optional[cell_count(1, MAX_GPUS, "expert-parallel ranks")] = None
    redundant_experts: Optional[cell_count(0, MAX_GPUS, "redundant expert replicas")] = None
    batch_per_gpu: Optional[cell_num(0.0, MAX_BATCH_PER_GPU, "sequences per GPU, or 'max' (blank): "
                                     "the largest batch that fits",
                                     lo_open=True)] = None
    tokens_per_gpu: Optional[cell_num(0.0, MAX_TOKENS, "prefill tokens per GPU per pass",
                                      lo_open=True)] = None
    input_len: Optional[cell_num(1.0, MAX_TOKENS, "prompt tokens")] = None
    output_len: Optional[cell_num(1.0, MAX_TOKENS, "output tokens")] = None
    kv_len: Optional[cell_num(1.0, MAX_TOKENS, "decode context, tokens")] = None
    cache_hit_rate: Optional[cell_num(0.0, 1.0, "prefix-cache hit rate", hi_open=True)] = None
    draft_depth: Optional[cell_count(0, 64, "draft tokens per step")] = None
    acceptance_rate: Optional[cell_num(0.0, 1.0, "per-position acceptance")] = None
    weight_precision: Optional[Precision] = None
    moe_precision: Optional[Precision] = None
    attention_precision: Optional[Precision] = None
    kv_precision: Optional[Precision] = None
    overlap: Optional[Literal["none", "two-batch"]] = None
    expert_skew: Optional[cell_num(0.0, 4.0, "Zipf exponent of expert popularity")] = None
    min_user_tokens_per_s: Optional[cell_num(0.0, 1e6, "SLO: tokens/s per user",
                                             lo_open=True)] = None
    max_ttft_s: Optional[cell_num(0.0, 86_400.0, "SLO: time to first token, s",
                                  lo_open=True)] = None
    metric: str = Field(description="published metric (validation.METRICS)")
    published: cell_num(0.0, 1e12, "the published figure", lo_open=True)
    unit: Optional[str] = None
    source: nonempty("source id and quote")


# --------------------------------------------------------------------------------------------
# trace row
# --------------------------------------------------------------------------------------------


def _class_name(v: Any) -> Any:
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


class TraceRow(_Schema):
    """One request of a Mooncake JSONL trace (timestamp in ms); other keys of the object are
    ignored. A CSV trace row (``arrival_s`` [s], ``input_tokens``, ``output_tokens``,
    ``class``, space-separated ``hash_ids``) is held to the same bounds by the loader."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    timestamp: cell_num(0.0, MAX_TRACE_MS, "arrival, ms from the trace start")
    input_length: cell_count(1, MAX_TOKENS, "prompt tokens")
    output_length: cell_count(0, MAX_TOKENS, "output tokens")
    hash_ids: list[Annotated[int, Field(ge=-2**63, le=2**63 - 1)]] = Field(
        default_factory=list, description="KV block ids of the prompt (64-bit integers)")
    class_: Annotated[str, BeforeValidator(_class_name), Field(min_length=1)] = Field(
        "default", alias="class", description="workload class name")

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True, populate_by_name=True)
