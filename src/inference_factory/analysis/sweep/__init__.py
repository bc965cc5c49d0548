"""Sweeps: named axes from a TOML file or the command line, evaluated in memory or in chunks
(``inference-factory sweep``): :mod:`.spec` (the sweep file and axis grammar, ``SweepSpec``),
:mod:`.run` (evaluation, provenance, chunked runs over dask), :mod:`.io` (schedulers and
writing results). Users import them from here."""

from ...axes import COST_BASES, DEFAULT_CHUNK_POINTS, SWEEP_FORMATS
from ...specs.grammar import MAX_AXIS_LENGTH, check_values, parse_values
from .io import (FORMATS, compute, dask_scheduler, is_lazy, open_result, output_format,
                 write_result)
from .run import check_size, file_sha256, provenance, run_sweep
from .spec import (SPEC_AXES, SweepSpec, coerce_values, load_sweep_file, parse_axis,
                   parse_setting)

__all__ = ["SweepSpec", "load_sweep_file", "parse_axis", "parse_setting", "coerce_values",
           "run_sweep", "check_size", "provenance", "file_sha256", "write_result",
           "open_result", "compute", "is_lazy", "dask_scheduler", "output_format", "FORMATS",
           "SPEC_AXES", "COST_BASES", "DEFAULT_CHUNK_POINTS", "SWEEP_FORMATS",
           "MAX_AXIS_LENGTH", "check_values", "parse_values"]
