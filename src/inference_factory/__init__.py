"""inference-factory: LLM-serving economics from hardware and model specs.

Public API::

    import inference_factory as inf
    ds = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, batch_size=[1, 64, 256], kv_len=2048)
    df = inf.to_dataframe(ds)
"""

__version__ = "0.1.0"

from .errors import SpecError  # noqa: E402
from .specs import (HardwareSpec, ModelSpec, list_hardware, list_models,  # noqa: E402
                    load_hardware, load_model)
from .realism import Realism, load_realism  # noqa: E402
from .engine import evaluate, to_dataframe  # noqa: E402

__all__ = ["SpecError", "HardwareSpec", "ModelSpec", "list_hardware", "list_models",
           "load_hardware", "load_model", "Realism", "load_realism", "evaluate", "to_dataframe",
           "__version__"]
