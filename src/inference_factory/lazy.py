"""Lazy public names: a package's ``__getattr__`` that imports the module defining a name on
first use (PEP 562), so ``import inference_factory`` and ``--help`` stay fast. One mechanism
for every package that re-exports lazily (the root, engine, analysis.plan, analysis.bench)."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_getattr(package: str, table: Mapping[str, Any], namespace: dict) -> Callable[[str], Any]:
    """``__getattr__`` for ``package``: ``table`` maps a public name to the (relative) module
    defining it, or to (module, attribute) where the attribute has another name there; the
    value found is cached in the package's ``namespace`` (its ``globals()``)."""

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = where if isinstance(where, tuple) else (where, name)
        value = getattr(importlib.import_module(module, package), attr)
        namespace[name] = value
        return value

    return __getattr__
