"""CF-style metadata of the output variables: a ``units`` attribute pint parses with the
package's registry (:func:`inference_factory.units.unit_registry`, defined in
``units_registry.txt``) and a ``long_name``, for every variable and coordinate; and which of
them count whole things (sequences, tokens, GPUs, requests), so that they are integers in
Datasets and in every file format.

CF conventions (https://cfconventions.org, section 3.1): ``units`` is a unit string of the
variable's values; dimensionless numbers take ``"1"``; labels (strings) and flags (booleans)
carry no ``units`` (pint-xarray then leaves them as they are). One table here, read by the
engine, the analysis layers and the writers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Old unit strings (prose, or not pint expressions) -> (pint units, words for the long name).
_LEGACY: dict[str, tuple[str | None, str]] = {
    "label": (None, ""), "bool": (None, ""), "": ("1", ""),
    "USD/GPU-hour": ("USD/GPU/hour", ""), "USD/Mtok": ("USD/Mtoken", ""),
    "per GPU": ("1/GPU", ""), "sequences per DP rank": ("sequences", "per DP rank"),
    "sequences per attention-DP rank": ("sequences", "per attention-DP rank"),
    "prompts per attention-DP rank per pass": ("prompts", "per attention-DP rank per pass"),
    "prompts per DP rank per pass": ("prompts", "per DP rank per pass"),
    "tokens of decode context": ("tokens", ""), "prompt tokens": ("tokens", ""),
    "draft tokens per step": ("tokens/step", ""),
    "draft tokens per verify step": ("tokens/step", ""),
    "fraction per position": ("1", ""), "fraction of input tokens": ("1", ""),
    "tokens reserved per sequence (input + output); 0 = kv_len": ("tokens", ""),
}

#: name -> (units, long name) of the engine's variables and coordinates, the analysis
#: layers' and the plan's. Units here win over those a caller passes.
VARIABLES: dict[str, tuple[str | None, str]] = {
    # numeric axes (axes.NUMERIC_AXES describes them in words)
    "batch_size": ("sequences", "decode batch: sequences per attention-DP rank"),
    "kv_len": ("tokens", "decode context length per sequence"),
    "prompt_len": ("tokens", "prompt length"),
    "prefill_batch_size": ("prompts", "prefill batch: prompts per attention-DP rank per pass"),
    "draft_depth": ("tokens/step", "draft tokens proposed per decode step"),
    "acceptance_rate": ("1", "acceptance probability of a draft token, per position"),
    "cache_hit_rate": ("1", "share of input tokens served from the prefix cache"),
    "final_len": ("tokens", "tokens reserved per sequence (input + output); 0 = kv_len"),
    # structural coordinates
    "tp": ("GPUs", "tensor-parallel degree"), "dp": ("GPUs", "attention data-parallel degree"),
    "ep": ("GPUs", "expert-parallel degree"),
    "redundant_experts": ("experts", "redundant expert replicas"),
    "expert_skew": ("1", "Zipf skew of expert popularity"),
    "context_cv": ("1", "coefficient of variation of context across DP ranks"),
    "model": (None, "model"), "hardware": (None, "hardware (device)"),
    "op": (None, "operation of one layer"),
    "valid": (None, "the structural combination is a valid instance"),
    "quantile": ("1", "quantile of the prediction band"),
    # engine outputs
    "decode_compute_s": ("s", "decode step: time on the compute units"),
    "decode_memory_s": ("s", "decode step: time reading and writing HBM"),
    "decode_comm_s": ("s", "decode step: time on the interconnect"),
    "decode_overhead_s": ("s", "decode step: launch and framework overhead"),
    "decode_draft_s": ("s", "decode step: time of the draft model"),
    "decode_step_s": ("s", "decode step time"),
    "decode_flop_per_gpu": ("FLOP", "floating-point operations per decode step per GPU"),
    "decode_hbm_bytes_per_gpu": ("bytes", "HBM traffic per decode step per GPU"),
    "tokens_per_step": ("tokens/step", "tokens emitted per sequence per decode step"),
    "decode_tokens_per_s_per_gpu": ("tokens/s/GPU", "decode output tokens per second per GPU"),
    "decode_tokens_per_s_per_user": ("tokens/s/user",
                                     "decode output tokens per second per sequence"),
    "tpot_s": ("s", "time per output token"),
    "expert_efficiency_frac": ("1", "mean over busiest expert load (expert balance)"),
    "decode_binding_resource": (None, "resource that sets the decode step time"),
    "prefill_compute_s": ("s", "prefill pass: time on the compute units"),
    "prefill_memory_s": ("s", "prefill pass: time reading and writing HBM"),
    "prefill_comm_s": ("s", "prefill pass: time on the interconnect"),
    "prefill_overhead_s": ("s", "prefill pass: launch and framework overhead"),
    "prefill_restore_s": ("s", "prefill pass: time restoring cached prefix KV"),
    "prefill_step_s": ("s", "prefill pass time"),
    "prefill_flop_per_gpu": ("FLOP", "floating-point operations per prefill pass per GPU"),
    "prefill_hbm_bytes_per_gpu": ("bytes", "HBM traffic per prefill pass per GPU"),
    "prefill_tokens_per_s_per_gpu": ("tokens/s/GPU", "prompt tokens per second per GPU"),
    "prefill_computed_tokens_per_s_per_gpu": (
        "tokens/s/GPU", "prompt tokens computed (not served from cache) per second per GPU"),
    "ttft_s": ("s", "time to first token"),
    "prefill_binding_resource": (None, "resource that sets the prefill pass time"),
    "weight_bytes_per_gpu": ("bytes", "weights held per GPU"),
    "kv_bytes_per_gpu": ("bytes", "KV cache held per GPU"),
    "activation_bytes_per_gpu": ("bytes", "activations held per GPU"),
    "hbm_used_bytes_per_gpu": ("bytes", "HBM used per GPU"),
    "fits": (None, "weights, KV and activations fit in HBM"),
    "max_batch_size": ("sequences", "most sequences per GPU that fit in HBM"),
    "decode_op_time_s": ("s", "time of each operation per decode step"),
    "prefill_op_time_s": ("s", "time of each operation per prefill pass"),
    "decode_op_flop_per_gpu": ("FLOP", "FLOPs of each operation per decode step per GPU"),
    "prefill_op_flop_per_gpu": ("FLOP", "FLOPs of each operation per prefill pass per GPU"),
    "decode_op_hbm_bytes_per_gpu": ("bytes", "HBM bytes of each operation per decode step "
                                    "per GPU"),
    "prefill_op_hbm_bytes_per_gpu": ("bytes", "HBM bytes of each operation per prefill pass "
                                     "per GPU"),
    "decode_op_resource": (None, "resource each decode operation is charged to"),
    "prefill_op_resource": (None, "resource each prefill operation is charged to"),
    "decode_op_source": (None, "source of each decode operation's cost"),
    "prefill_op_source": (None, "source of each prefill operation's cost"),
    # economics
    "gpu_cost_usd_per_hour": ("USD/GPU/hour", "cost of one GPU-hour"),
    "usd_per_mtok_output": ("USD/Mtoken", "cost per million output tokens"),
    "usd_per_mtok_input": ("USD/Mtoken", "cost per million input tokens"),
    "usd_per_mtok_blended": ("USD/Mtoken", "cost per million tokens, input and output blended"),
    "output_tokens_per_s_per_mw": ("tokens/s/MW", "output tokens per second per MW of power"),
    "revenue_usd_per_gpu_hour_decode": ("USD/GPU/hour", "revenue per decode GPU-hour"),
    "revenue_usd_per_gpu_hour_prefill": ("USD/GPU/hour", "revenue per prefill GPU-hour"),
    "gross_margin_frac": ("1", "gross margin: (revenue - cost) / revenue"),
    "cost_profit_margin_frac": ("1", "cost-profit margin: (revenue - cost) / cost"),
    "payback_months": ("months", "months for the margin to repay the GPU's capital cost"),
    # questions
    "max_batch_size_meeting_slo": ("sequences",
                                   "largest decode batch per attention-DP rank meeting the SLO"),
    "max_prefill_batch_size_meeting_slo": (
        "prompts", "largest prefill batch per attention-DP rank per pass meeting the SLO"),
    "slo_binding_constraint": (None, "SLO term that limits the decode batch"),
    "prefill_slo_binding_constraint": (None, "SLO term that limits the prefill batch"),
    "best_draft_depth": ("tokens/step", "draft depth that maximises the metric"),
    "best_tpot_s": ("s", "time per output token at the best draft depth"),
    "best_decode_tokens_per_s_per_user": ("tokens/s/user",
                                          "output tokens per second per sequence at the best depth"),
    "best_decode_tokens_per_s_per_gpu": ("tokens/s/GPU",
                                         "output tokens per second per GPU at the best depth"),
    "fits_any_depth": (None, "some draft depth fits in HBM"),
    "speedup_over_no_draft": ("1", "metric at the best depth over the metric without drafts"),
    # bench (analysis/bench/metrics.VARIABLES holds its own; its coordinate here)
    "concurrency": ("requests", "requests in flight"),
}

#: Variables that count whole things: integers in Datasets (where no value is missing) and
#: written without a decimal point in every format.
COUNTS = frozenset({
    "batch_size", "kv_len", "prompt_len", "prefill_batch_size", "draft_depth", "final_len",
    "tp", "dp", "ep", "redundant_experts", "max_batch_size", "max_batch_size_meeting_slo",
    "max_prefill_batch_size_meeting_slo", "best_draft_depth", "concurrency", "max_concurrency",
    "completed", "num_gpus", "total_input_tokens", "total_output_tokens", "n_gpus", "gpus",
    "total_gpus", "instances", "gpus_per_instance", "isl", "osl", "requests",
})
#: Units of counts: a column in these units whose every value is whole is written as integers.
COUNT_UNITS = frozenset({"sequences", "tokens", "prompts", "requests", "GPUs", "experts",
                         "instances"})

_SUFFIX_UNITS = (("_tokens_per_s_per_gpu", "tokens/s/GPU"),
                 ("_tokens_per_s_per_user", "tokens/s/user"), ("_bytes_per_gpu", "bytes"),
                 ("_flop_per_gpu", "FLOP"), ("_usd_per_hour", "USD/GPU/hour"),
                 ("_per_mw", "tokens/s/MW"), ("_frac", "1"), ("_ms", "ms"), ("_s", "s"),
                 ("_usd", "USD"), ("_w", "W"), ("_bytes", "bytes"), ("_months", "months"))


def units_of_name(name: str) -> str | None:
    """The unit a variable's name states (``_s`` -> ``s``, ``usd_per_mtok_*`` -> ``USD/Mtoken``,
    ...), or None."""
    if name.startswith("usd_per_mtok"):
        return "USD/Mtoken"
    for suffix, unit in _SUFFIX_UNITS:
        if name.endswith(suffix):
            return unit
    return None


def _parses(units: str) -> bool:
    try:
        from ..units import parse_units

        parse_units(units)
        return True
    except ImportError:          # no pint: trust the table
        return True
    except Exception:  # noqa: BLE001 (pint raises several kinds on a bad unit string)
        return False


def cf_attrs(name: str, units: str | None = None, long_name: str | None = None) -> dict[str, str]:
    """``{"units": ..., "long_name": ...}`` of variable ``name`` (no ``units`` for labels and
    flags). The table above wins; then ``units`` given by the caller (old prose forms mapped to
    pint ones); then the unit the name states. ``long_name`` defaults to the table's, else to
    the name in words."""
    words = ""
    if name in VARIABLES:
        units, table_long = VARIABLES[name]
        long_name = long_name or table_long
    elif units is not None and units in _LEGACY:
        units, words = _LEGACY[units]
    if units is None and name not in VARIABLES:
        units = units_of_name(name)
    if long_name is None:
        long_name = name.replace("_", " ") + (f" ({words})" if words else "")
    out = {"long_name": long_name}
    if units is not None:
        out["units"] = units
    return out


def annotate(ds, units: Mapping[str, str] | None = None):
    """``ds`` with every data variable and coordinate given :func:`cf_attrs` (in place; also
    returned): a variable's own ``units`` (or ``units[name]``) is kept where pint parses it,
    mapped from its old form otherwise; labels and flags lose theirs. A count data variable
    whose values are all whole (none missing) becomes int64 (:func:`as_count`)."""
    units = units or {}
    for name in list(ds.data_vars):
        lazy = ds[name].chunks is not None          # a chunked sweep: not computed here
        counted = as_count(str(name), ds[name].values) if name in COUNTS and not lazy else None
        if counted is not None and counted.dtype.kind == "i":
            ds[name] = ds[name].copy(data=counted)
    for name, var in ds.variables.items():
        given = units.get(name, var.attrs.get("units"))
        attrs = cf_attrs(str(name), given, var.attrs.get("long_name"))
        if var.dtype.kind in "OUSb":
            attrs.pop("units", None)
        elif name not in VARIABLES and given is not None and given not in _LEGACY \
                and _parses(given):
            attrs["units"] = given
        var.attrs.pop("units", None)
        var.attrs.update(attrs)
    return ds


#: Name endings of counts (``prefill_tp``, ``decode_gpus``, ``best_draft_depth``, ...).
COUNT_SUFFIXES = ("_gpus", "_instances", "_tp", "_dp", "_ep", "_batch_size", "_draft_depth",
                  "_requests")


def is_count(name: str, units: str | None = None) -> bool:
    """Whether column ``name`` (in ``units``) counts whole things."""
    return name in COUNTS or name.endswith(COUNT_SUFFIXES) or units in COUNT_UNITS


def whole_or_nan(values) -> bool:
    """Every value a whole number or missing (NaN), and at least one present."""
    import numpy as np

    a = np.asarray(values)
    if a.dtype.kind in "iu":
        return True
    if a.dtype.kind != "f" or not a.size:
        return False
    finite = a[np.isfinite(a)]
    if finite.size != a[~np.isnan(a)].size:   # an infinity is not a count
        return False
    return bool(finite.size) and bool(np.all(finite == np.round(finite)))


def as_count(name: str, arr):
    """``arr`` (a numpy array or scalar) as int64 when ``name`` counts whole things
    (:data:`COUNTS`) and every value is a whole number, none missing; otherwise as it is.
    The values are unchanged."""
    import numpy as np

    if name in COUNTS and arr.dtype.kind == "f" and arr.size and whole_or_nan(arr) \
            and not np.isnan(arr).any():
        return arr.astype(np.int64)
    return arr


def integer_counts(df, units: Mapping[str, str] | None = None):
    """A copy of DataFrame ``df`` whose count columns (:func:`is_count`) holding only whole
    numbers (or NaN) are integers: int64 when none is missing, pandas' nullable ``Int64``
    otherwise, so CSV shows ``2048`` (not ``2048.0``), JSON ``384`` and Parquet an integer
    column. Other columns are untouched; the values are the same numbers."""
    units = dict(units if units is not None else df.attrs.get("units", {}) or {})
    out = None
    for c in df.columns:
        col = df[c]
        if col.dtype.kind != "f" or not is_count(str(c), units.get(c)):
            continue
        if not whole_or_nan(col.to_numpy()):
            continue
        if out is None:
            out = df.copy()
        out[c] = col.astype("int64") if not col.isna().any() else col.astype("Int64")
    if out is None:
        return df
    out.attrs = dict(df.attrs)
    return out


def plain_number(x: Any) -> Any:
    """A float that is a whole number as an int (JSON ``384``, not ``384.0``); else ``x``."""
    if isinstance(x, float) and math.isfinite(x) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x
