"""Hardware specs: a strict TOML loader into a frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .. import units
from ..errors import SpecError
from .files import read_toml

#: The one default device of every command whose --hardware has a default (plan, bench,
#: roofline, the question commands) and of :func:`inference_factory.bench`: the H800-SXM of
#: the project's anchor case, DeepSeek's published production day
#: (``configs/factory.toml``, ``configs/baseline.toml``), so a bare command answers about
#: the deployment ``compare`` simulates. (H800 runs on H100's measured kernel tables.)
DEFAULT_HARDWARE = "H800-SXM"


# --------------------------------------------------------------------------------------------
# hardware
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator, in SI units. Built by :func:`load_hardware`."""

    name: str
    vendor: str
    description: str
    dense_flop_per_s: Mapping[str, float]
    measured_matmul_flop_per_s: Mapping[str, float]
    hbm_capacity_bytes: float
    hbm_bw_bytes_per_s: float
    scale_up_bw_bytes_per_s: float
    scale_up_domain_gpus: int
    scale_out_bw_bytes_per_s: float
    tdp_w: float
    gpus_per_node: int
    host_dram_capacity_bytes: float
    host_dram_bw_bytes_per_s: float
    nvme_capacity_bytes: float
    nvme_bw_bytes_per_s: float
    node_values_assumed: bool
    price: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    path: str = ""
    #: folder of hardware/measured whose kernel tables this device uses ("" = its own name)
    kernel_tables: str = ""
    #: decode-attention kernel fractions of the BF16 peak and of the HBM bandwidth fitted to
    #: the device's own measured decode-attention latencies ([measured]); None = realism's
    decode_attention_compute_frac: float | None = None
    decode_attention_hbm_frac: float | None = None

    def flop_per_s(self, precision: str) -> float:
        """Dense peak for ``precision``; a clear error if the device lacks it."""
        try:
            return self.dense_flop_per_s[precision]
        except KeyError:
            raise SpecError(
                f"{self.path}: hardware {self.name!r} has no dense tensor-core rate for "
                f"precision {precision!r}; it lists {sorted(self.dense_flop_per_s)}"
            ) from None

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["dense_flop_per_s"] = dict(self.dense_flop_per_s)
        out["measured_matmul_flop_per_s"] = dict(self.measured_matmul_flop_per_s)
        out["price"], out["sources"], out["notes"] = dict(self.price), dict(self.sources), dict(self.notes)
        out["aliases"] = list(self.aliases)
        return out


def _parse_hardware(path: Path) -> HardwareSpec:
    """Build a :class:`HardwareSpec` from a file checked against
    :class:`~inference_factory.specs.schema.HardwareFile` (types, ranges, unknown keys), plus the
    rules that tie keys together."""
    # pydantic: imported when a spec is loaded, not with the CLI; the spec schemas only
    from . import schema_specs as schema
    from .schema_base import check

    f = check(schema.HardwareFile, read_toml(path), str(path))
    dense = {prec: getattr(f.compute, f"{prec}_tflops") * units.TFLOP
             for prec in units.PRECISIONS if getattr(f.compute, f"{prec}_tflops") is not None}
    if not dense:
        raise SpecError(f"{path}: compute lists no precision; give e.g. bf16_tflops")
    measured = {}
    m = f.measured or schema.HardwareMeasured()
    for prec in units.PRECISIONS:
        v = getattr(m, f"{prec}_matmul_tflops")
        if v is not None:
            if prec not in dense:
                raise SpecError(f"{path}: measured.{prec}_matmul_tflops given but compute has no "
                                f"{prec}_tflops")
            measured[prec] = v * units.TFLOP
    price = {k: v for k, v in (f.price.model_dump() if f.price else {}).items() if v is not None}
    return HardwareSpec(
        name=f.name, vendor=f.vendor, description=f.description, dense_flop_per_s=dense,
        measured_matmul_flop_per_s=measured,
        hbm_capacity_bytes=f.memory.hbm_capacity_gb * units.GB,
        hbm_bw_bytes_per_s=f.memory.hbm_bandwidth_gb_per_s * units.GB,
        scale_up_bw_bytes_per_s=f.scale_up.bandwidth_gb_per_s * units.GB,
        scale_up_domain_gpus=f.scale_up.domain_gpus,
        scale_out_bw_bytes_per_s=f.scale_out.bandwidth_gbit_per_s * units.GBIT,
        tdp_w=float(f.power.tdp_w), gpus_per_node=f.node.gpus_per_node,
        host_dram_capacity_bytes=f.node.host_dram_capacity_gb * units.GB,
        host_dram_bw_bytes_per_s=f.node.host_dram_bandwidth_gb_per_s * units.GB,
        nvme_capacity_bytes=f.node.nvme_capacity_tb * units.TB,
        nvme_bw_bytes_per_s=f.node.nvme_bandwidth_gb_per_s * units.GB,
        node_values_assumed=f.node.assumed, price=price, sources=dict(f.sources),
        notes=dict(f.notes), aliases=tuple(f.aliases), path=str(path),
        kernel_tables=m.kernel_tables or "",
        decode_attention_compute_frac=m.decode_attention_compute_frac,
        decode_attention_hbm_frac=m.decode_attention_hbm_frac,
    )

