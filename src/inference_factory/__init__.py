"""inference-factory: LLM-serving economics from hardware and model specs.

Public API::

    import inference_factory as inf
    ds = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, batch_size=[1, 64, 256], kv_len=2048)
    df = inf.to_dataframe(ds)

Names are imported on first use (module ``__getattr__``), so ``import inference_factory`` and
the command line's ``--help`` do not pay for numpy, xarray and pandas until they are needed.

The package has one folder per layer (``kernels``, ``output``, ``specs``, ``engine``,
``factory``, ``analysis``, ``cli``; docs/MODEL.md); modules are imported from their homes there
(``inference_factory.analysis.questions``, ``.analysis.economics``, ``.analysis.sweep``,
``.analysis.validation``, ``.specs.schema``, ``.specs.realism``).
"""

from __future__ import annotations

from .lazy import lazy_getattr

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY = {
    "SpecError": ".errors",
    "HardwareSpec": ".specs", "ModelSpec": ".specs", "list_hardware": ".specs",
    "list_models": ".specs", "load_hardware": ".specs", "load_model": ".engine.layer_mix",
    "architecture": ".engine.layer_mix",
    "Realism": ".specs.realism", "load_realism": ".specs.realism",
    "evaluate": ".engine.inputs", "to_dataframe": ".engine",
    "plan": ".analysis.plan",
    "bench": ".analysis.bench",
}

__all__ = [*_LAZY, "__version__"]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
