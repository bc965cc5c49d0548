"""The one provisioning rule's default: the target utilisation at which ``plan --load`` and
``simulate`` size a fleet (``configs/provisioning.toml``, where its assumption is stated)."""

from __future__ import annotations

import math
from typing import Any

from ..errors import SpecError
from .files import data_dir, read_toml

#: The file the default lives in (in the configs folder).
PROVISIONING_FILE = "provisioning.toml"


def check_target_utilization(value: Any, where: str) -> float:
    """A target utilisation as a float in (0, 1]; a one-line SpecError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0.0 < value <= 1.0:
        raise SpecError(f"{where} = {value!r} must be a fraction in (0, 1]: the busy share of "
                        "the GPUs provisioned (e.g. 0.8)")
    return float(value)


def default_target_utilization() -> float:
    """``target_utilization`` of ``configs/provisioning.toml``."""
    path = data_dir("configs") / PROVISIONING_FILE
    doc = read_toml(path)
    unknown = sorted(set(doc) - {"target_utilization"})
    if unknown or "target_utilization" not in doc:
        raise SpecError(f"{path}: holds one key, target_utilization"
                        + (f"; unknown {unknown[0]!r}" if unknown else " (missing)"))
    return check_target_utilization(doc["target_utilization"], f"{path}: target_utilization")


def target_utilization(value: Any = None, where: str = "--target-utilization") -> float:
    """``value`` checked, or the default where None."""
    return default_target_utilization() if value is None else \
        check_target_utilization(value, where)
