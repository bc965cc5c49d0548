"""inference-factory: LLM-serving economics from hardware and model specs.

Public API::

    import inference_factory as inf
    ds = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, batch_size=[1, 64, 256], kv_len=2048)
    df = inf.to_dataframe(ds)

Names are imported on first use (module ``__getattr__``), so ``import inference_factory`` and
the command line's ``--help`` do not pay for numpy, xarray and pandas until they are needed.

The package has one folder per layer (``kernels``, ``output``, ``specs``, ``engine``,
``factory``, ``analysis``, ``cli``; docs/MODEL.md). The modules users import from their earlier
flat places (``inference_factory.questions``, ``.economics``, ``.sweep``, ``.validation``,
``.schema``, ``.realism``) are the same module objects as their new homes
(``inference_factory.analysis.questions`` ...), so code and notebooks written against them keep
working.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY = {
    "SpecError": ".errors",
    "HardwareSpec": ".specs", "ModelSpec": ".specs", "list_hardware": ".specs",
    "list_models": ".specs", "load_hardware": ".specs", "load_model": ".engine.architecture",
    "architecture": ".engine.architecture",
    "Realism": ".specs.realism", "load_realism": ".specs.realism",
    "evaluate": ".engine.inputs", "to_dataframe": ".engine",
    "plan": ".analysis.plan",
    "bench": ".analysis.bench",
}

__all__ = [*_LAZY, "__version__"]

#: earlier flat module -> its home in the layered package
MOVED_MODULES = {"questions": "analysis.questions", "economics": "analysis.economics",
                 "sweep": "analysis.sweep", "validation": "analysis.validation",
                 "schema": "specs.schema", "realism": "specs.realism"}


class _MovedModules:
    """``import inference_factory.questions`` gives the module object of its new home (one
    object under two names, so its state is shared), with that module's own spec. A
    meta-path finder and loader by protocol (importing importlib.abc costs ~10 ms a start)."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, tail = fullname.partition(".")
        if head == __name__ and tail in MOVED_MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module("." + MOVED_MODULES[spec.name.partition(".")[2]],
                                         __name__)
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        # the import system stamped the alias's spec on the module: give it its own back
        module.__spec__ = self._specs[module.__name__]

    _specs: dict = {}


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def __getattr__(name: str) -> Any:
    if name in MOVED_MODULES:
        return importlib.import_module("." + name, __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'inference_factory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
