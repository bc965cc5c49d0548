"""``bench --preset NAME``: a published benchmark's settings (``configs/bench_presets.toml``,
each value with its source), applied where the user gave none."""

from __future__ import annotations

from typing import Any

from ...errors import SpecError, did_you_mean
from ...specs.files import data_dir, read_toml
from ...units import PRECISIONS

#: The keys a preset may set, and what each must be.
KEYS = {"range_ratio": "a fraction in [0, 1]", "kv_precision": f"one of {list(PRECISIONS)}"}


def load_preset(name: str) -> dict[str, Any]:
    """The preset ``name`` of ``configs/bench_presets.toml``, checked."""
    path = data_dir("configs") / "bench_presets.toml"
    doc = read_toml(path)
    if name not in doc:
        raise SpecError(f"--preset {name!r} is not a preset{did_you_mean(name, doc) or ';'} "
                        f"allowed: {sorted(doc)} ({path})")
    out = dict(doc[name])
    for k, v in out.items():
        ok = (k == "range_ratio" and isinstance(v, (int, float)) and not isinstance(v, bool)
              and 0 <= v <= 1) or (k == "kv_precision" and v in PRECISIONS)
        if k not in KEYS or not ok:
            raise SpecError(f"{path}: [{name}] {k} = {v!r}: "
                            + (f"must be {KEYS[k]}" if k in KEYS else
                               f"unknown key; allowed: {list(KEYS)}"))
    return out


def apply_preset(name: str | None, hw, *, range_ratio, kv_precision
                 ) -> tuple[float, str | None, list[str]]:
    """(range ratio, KV precision, notes) with the preset's values where the user gave none
    (``None``); without a preset, bench's own defaults (range ratio 1)."""
    if name is None:
        return (1.0 if range_ratio is None else range_ratio), kv_precision, []
    p = load_preset(name)
    notes = []
    if range_ratio is None:
        range_ratio = float(p.get("range_ratio", 1.0))
    if kv_precision is None and "kv_precision" in p:
        if p["kv_precision"] in hw.dense_flop_per_s:
            kv_precision = p["kv_precision"]
        else:
            notes.append(f"preset {name}: KV cache stays bf16 on {hw.name} (no "
                         f"{p['kv_precision']} tensor cores)")
    return range_ratio, kv_precision, notes
