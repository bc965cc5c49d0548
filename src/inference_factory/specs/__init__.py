"""Hardware and model specs: strict TOML loaders into frozen dataclasses.

Validation happens here, once. A bad file gives a :class:`SpecError` whose one-line message
names the file, the key, the value and what is allowed. Derived quantities (parameter counts,
KV bytes per token) are computed from the architecture here, never typed into a file.
"""


from .catalog import list_hardware, list_models, load_hardware, load_model
from .files import bundled_dir, data_dir, data_dirs
from .hardware import DEFAULT_HARDWARE, HardwareSpec
from .models import ModelSpec

__all__ = ["DEFAULT_HARDWARE", "HardwareSpec", "ModelSpec", "bundled_dir", "data_dir",
           "data_dirs", "list_hardware",
           "list_models", "load_hardware", "load_model"]
