"""One schema per input file kind: the shape, types and ranges every loader checks first.

Each kind of file a user can hand the package has one pydantic model here:

=================  ==========================================  ================================
kind               files                                       loader
=================  ==========================================  ================================
hardware spec      ``hardware/*.toml``                         :func:`specs.load_hardware`
model spec         ``models/*.toml``                           :func:`specs.load_model`
factory config     ``configs/factory.toml`` and friends        :func:`factory.config.load_config`
sweep file         ``configs/sweeps/*.toml``                   :func:`sweep.load_sweep_file`
case file row      ``validation/*.csv`` (one row)              :func:`validation.load_cases`
trace row          ``*.jsonl`` (Mooncake) / ``*.csv`` (one row)  :func:`factory.workload.load_trace`
realism constants  ``configs/realism.toml``                    :func:`specs.realism.load_realism`
serving engines    ``configs/serving_engines.toml``            :func:`specs.engines.load_serving_engine`
uncertainty        ``configs/uncertainty.toml``                :func:`specs.uncertainty.load_uncertainty`
agentic replay     ``configs/agentic.toml``                    :func:`analysis.bench.replay_sim.agentic_constants`
=================  ==========================================  ================================

A loader validates the raw file content against its schema with :func:`check` before it
builds anything; the first violation becomes a one-line :class:`SpecError` naming the file,
the key path, the value and what is allowed. Cross-field rules (tp divides the heads, ep
divides the instance, replicas <= experts, shares sum to 1...) stay in the loaders and the
engine, which see the resolved values. Every number is finite and bounded above as well as
below: the upper bounds (``MAX_*`` below) keep memory and run time sane, far above any real
deployment. The JSON Schema of each model is published under ``docs/schema/``
(``python docs/schema/generate.py`` regenerates it; a test keeps it current),
so editors with a TOML/JSON schema plugin validate files as they are typed.

The models live in one module per group of kinds (``schema_specs``: hardware and model;
``schema_config``: factory config and sweep; ``schema_rows``: case and trace rows;
``schema_realism``: the realism constants) on a shared
base (``schema_base``: bounds, field types, one-line validation); all are re-exported here.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel
from pydantic.version import VERSION as PYDANTIC_VERSION

from .schema_base import (MAX_BATCH, MAX_BATCH_PER_GPU, MAX_GPUS, MAX_RATE_PER_S, MAX_REQUESTS,  # noqa: F401
                          MAX_SWEEP_POINTS, MAX_SYSTEM_PROMPTS, MAX_TOKENS, MAX_TOKENS_PER_DAY,
                          MAX_TRACE_MS, MAX_TURNS_MEAN, MAX_USD, Precision,
                          Sources, _Schema, _bounds, _doc, _field_at, _one_or_many,
                          _requirement, _strip, _unwrap, check, count, describe, flag, names,
                          nonempty, num, parse, show, text, violation)
from .schema_specs import (HardwareCompute, HardwareFile, HardwareMeasured, HardwareMemory,  # noqa: F401
                           HardwareNode, HardwarePower, HardwarePrice, HardwareScaleOut,
                           HardwareScaleUp, ModelArchitecture, ModelAttention, ModelFfn,
                           ModelFile, ModelMoe, ModelMtp, _TFLOPS)
from .schema_config import (ConfigClass, ConfigDecode, ConfigEconomics, ConfigFleet,  # noqa: F401
                            ConfigLevers, ConfigModel, ConfigPublished, ConfigPrefill, ConfigSlo,
                            ConfigWorkload, FactoryConfigFile, PriceRow, PricesFile,
                            SweepEconomics, SweepFile,
                            SweepHeader, _AXIS_DOC, _AxisValue, _FixedValue, _Pool, _frac)
from .schema_rows import (CaseRow, TraceRow, _class_name, _number, _whole, cell_count, cell_num)  # noqa: F401
from .schema_realism import (RealismAttention, RealismDpAttention, RealismExperts,  # noqa: F401
                             RealismFile, RealismGemm, RealismHbm, RealismLinks, RealismMemory,
                             RealismOtherKernels, RealismOverhead, RealismOverlap,
                             RealismSpeculative, RealismSwitch)
from .schema_engines import ServingEngineEntry, ServingEnginesFile  # noqa: F401
from .schema_uncertainty import UncertaintyFile  # noqa: F401
from .schema_agentic import AgenticFile  # noqa: F401

SCHEMAS: dict[str, type[BaseModel]] = {
    "hardware": HardwareFile, "model": ModelFile, "factory_config": FactoryConfigFile,
    "sweep": SweepFile, "case_row": CaseRow, "trace_row": TraceRow, "realism": RealismFile,
    "serving_engines": ServingEnginesFile, "uncertainty": UncertaintyFile,
    "agentic": AgenticFile,
}

# --------------------------------------------------------------------------------------------
# JSON Schema export
# --------------------------------------------------------------------------------------------


def json_schemas() -> dict[str, str]:
    """File name -> JSON Schema text of every input kind (as committed under docs/schema)."""
    out = {}
    for kind, model in SCHEMAS.items():
        schema = model.model_json_schema(by_alias=True)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://inference-factory/schema/{kind}.schema.json"
        schema["$comment"] = (f"generated by docs/schema/generate.py from "
                              f"inference_factory.specs.schema with pydantic {PYDANTIC_VERSION}")
        out[f"{kind}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def write_json_schemas(folder: str | Path) -> list[Path]:
    """Write :func:`json_schemas` into ``folder`` (created if missing)."""
    from ..output.files import write_text_atomic

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for fname, text_ in json_schemas().items():
        write_text_atomic(folder / fname, text_)
        paths.append(folder / fname)
    return paths
