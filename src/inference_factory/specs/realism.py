"""Realism terms: named, sourced, switchable departures from the pure roofline.

The constants live in ``configs/realism.toml`` (each with the component measurement it came
from); this module loads them strictly (the pydantic schema
:class:`~inference_factory.specs.schema.RealismFile`) into a frozen :class:`Realism`. ``Realism.ideal()``
switches every term off (pure roofline).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Mapping
from pathlib import Path

from .. import units
from ..errors import SpecError
from .catalog import _cached
from .files import read_toml, data_dir
from .hardware import HardwareSpec

TERMS = ("gemm", "small_m", "attention", "hbm", "links", "latency", "overhead", "overlap_sms",
         "routing", "memory", "measured")


@dataclass(frozen=True)
class Realism:
    """Efficiencies and overheads applied on top of the roofline. All fractions in [0, 1].

    The values live in ``configs/realism.toml`` only (each with its measurement); build one
    with :func:`load_realism`."""

    gemm: bool
    default_large_gemm_frac: float
    use_measured_matmul: bool
    small_m: bool
    tile_m_tokens: float
    attention: bool
    attention_compute_frac: float
    attention_fp8_kv_compute_frac: float
    attention_hbm_frac: float
    hbm: bool
    gemm_hbm_frac: float
    links: bool
    scale_up_frac: float
    scale_out_frac: float
    latency: bool
    scale_up_latency_s: float
    scale_out_latency_s: float
    overhead: bool
    per_layer_overhead_s: float
    overlap_sms: bool
    overlap_comm_sm_frac: float
    routing: bool
    memory: bool
    runtime_reserve_frac: float
    measured: bool = True
    other_kernels: Mapping[str, float] = dataclasses.field(default_factory=dict)
    #: GEMM-table backends whose rows include the activation quantisation kernel
    quantization_timed_with_gemm: tuple[str, ...] = ()
    #: all-reduce backends whose TP all-reduce runs fused with the residual add and RMSNorm
    fused_allreduce_backends: tuple[str, ...] = ()
    #: measured attention families whose rows time the KV-cache write, and the backends
    #: (collectors) that do
    kv_write_timed_in: tuple[str, ...] = ()
    kv_write_timed_by: tuple[str, ...] = ()
    #: whether the serving engine fuses the TP all-reduce with the residual add and RMSNorm
    #: (its profile's ``fused_allreduce_norm``); None: as the device's all-reduce table says
    #: (``fused_allreduce_backends``)
    fused_allreduce_norm: bool | None = None
    #: the serving engine's expert-parallel all-to-all (its profile's ``supports.all_to_all``
    #: on the device, one of schema_engines.AllToAll); None: DeepEP's tables, or TRT-LLM's
    #: NVLink all-to-all where the device measures it (no command names an engine)
    all_to_all: str | None = None
    default_expert_skew: float = 0.0
    default_context_cv: float = 1.0
    acceptance_decay_per_position: float = 1.0
    source: str = ""

    @classmethod
    def ideal(cls) -> "Realism":
        """Every realism term off: the pure roofline (the constants are then unused). One
        object per loaded realism file (see :meth:`without`)."""
        base = load_realism()
        key = ("ideal",)
        if key not in base._variants:
            base._variants[key] = dataclasses.replace(base.without(*TERMS), source="ideal")
        return base._variants[key]

    @functools.cached_property
    def is_ideal(self) -> bool:
        """Every term off (computed once: the instance is frozen; the engine asks ~20 times
        per call)."""
        return not any(getattr(self, t) for t in TERMS)

    @functools.cached_property
    def _variants(self) -> dict:
        """The variants made from this instance, so that each is one object: the engine keys
        its compiled one-point programs on the realism object."""
        return {}

    def without(self, *terms: str) -> "Realism":
        """A copy with the named terms switched off (the same object for the same terms)."""
        bad = [t for t in terms if t not in TERMS]
        if bad:
            raise SpecError(f"unknown realism term {bad[0]!r}; allowed: {list(TERMS)}")
        key = tuple(sorted(set(terms)))
        if key not in self._variants:
            self._variants[key] = dataclasses.replace(self, **{t: False for t in terms})
        return self._variants[key]

    def for_engine(self, engine) -> "Realism":
        """The constants as serving ``engine`` runs (a profile resolved for a device): its
        all-reduce + norm fusion and its all-to-all where the profile states them; the same
        object where it does not (or nothing would change), one object per value otherwise."""
        fused = getattr(engine, "fused_allreduce_norm", None)
        a2a = getattr(getattr(engine, "supports", None), "all_to_all", "") or None
        change = {k: v for k, v in (("fused_allreduce_norm", None if fused is None else bool(fused)),
                                    ("all_to_all", a2a))
                  if v is not None and v != getattr(self, k)}
        if not change or self.is_ideal:
            return self
        key = tuple(sorted(change.items()))
        if key not in self._variants:
            self._variants[key] = dataclasses.replace(self, **change)
        return self._variants[key]

    # -- resolved rates (what the engine uses) -----------------------------------------------
    def large_gemm_frac(self, hw: HardwareSpec, precision: str) -> float:
        if not self.gemm:
            return 1.0
        # FP16 and BF16 run on the same tensor cores at the same peak: share the measurement
        key = "bf16" if precision == "fp16" else precision
        measured = hw.measured_matmul_flop_per_s
        if self.use_measured_matmul and key in measured:
            return measured[key] / hw.flop_per_s(key)
        if self.use_measured_matmul and measured:
            # no measurement at this precision: the device's own fraction of peak at the
            # precisions it was measured at transfers better than another device's
            fracs = [v / hw.flop_per_s(p) for p, v in measured.items()]
            return min(fracs)
        return self.default_large_gemm_frac

    @property
    def tile_m(self) -> float:
        return self.tile_m_tokens if (self.gemm and self.small_m) else 0.0

    @property
    def attn_compute_frac(self) -> float:
        return self.attention_compute_frac if self.attention else 1.0

    def attn_compute_frac_for(self, kv_precision: str) -> float:
        """Attention-kernel fraction of the BF16 peak for a KV-cache format: an FP8 cache is
        dequantised inside the kernel, which runs slower than the BF16 one."""
        if not self.attention:
            return 1.0
        return (self.attention_fp8_kv_compute_frac if kv_precision in ("fp8", "fp4")
                else self.attention_compute_frac)

    @property
    def attn_hbm_frac(self) -> float:
        return self.attention_hbm_frac if self.attention else 1.0

    def decode_attn_compute_frac_on(self, hw: HardwareSpec | None, kv_precision: str) -> float:
        """:meth:`attn_compute_frac_for` for decode attention on ``hw``: a device with a fitted
        [measured] decode_attention_compute_frac uses it for a BF16 cache, and for an FP8 one
        that fraction times this realism's FP8-over-BF16 ratio (ASSUMPTION: the FlashMLA
        dequantisation slowdown transfers; docs/MODEL.md, AMD section). ``hw`` None (prefill
        attention): the realism constant."""
        frac = self.attn_compute_frac_for(kv_precision)
        fitted = hw.decode_attention_compute_frac if hw is not None else None
        if not self.attention or fitted is None:
            return frac
        return fitted * frac / self.attention_compute_frac

    def decode_attn_hbm_frac_on(self, hw: HardwareSpec | None) -> float:
        """:attr:`attn_hbm_frac` for decode attention on ``hw``: its fitted [measured]
        decode_attention_hbm_frac if any (``hw`` None: the realism constant)."""
        fitted = hw.decode_attention_hbm_frac if hw is not None else None
        if not self.attention or fitted is None:
            return self.attn_hbm_frac
        return fitted

    @property
    def weight_hbm_frac(self) -> float:
        return self.gemm_hbm_frac if self.hbm else 1.0

    @property
    def up_frac(self) -> float:
        return self.scale_up_frac if self.links else 1.0

    @property
    def out_frac(self) -> float:
        return self.scale_out_frac if self.links else 1.0

    @property
    def up_latency_s(self) -> float:
        return self.scale_up_latency_s if self.latency else 0.0

    @property
    def out_latency_s(self) -> float:
        return self.scale_out_latency_s if self.latency else 0.0

    @property
    def layer_overhead_s(self) -> float:
        return self.per_layer_overhead_s if self.overhead else 0.0

    @property
    def comm_sm_frac(self) -> float:
        return self.overlap_comm_sm_frac if self.overlap_sms else 0.0

    @property
    def reserve_frac(self) -> float:
        return self.runtime_reserve_frac if self.memory else 0.0


def load_realism(path: str | os.PathLike | None = None) -> Realism:
    """Load realism constants from TOML (default: the bundled ``configs/realism.toml``);
    parsed once per file version, like the spec files."""
    p = Path(path) if path is not None else data_dir("configs") / "realism.toml"
    if not p.is_file():
        raise SpecError(f"{p}: file not found")
    return _cached(p, _parse_realism)


def _parse_realism(p: Path) -> Realism:
    """Build a :class:`Realism` from a file checked against
    :class:`~inference_factory.specs.schema.RealismFile` (types, ranges, unknown keys)."""
    # pydantic: imported when the constants are loaded, not with the CLI
    from .schema_base import check
    from .schema_realism import RealismFile

    f = check(RealismFile, read_toml(p), str(p))
    g, a, ln, ok = f.gemm, f.attention, f.links, f.other_kernels
    return Realism(
        gemm=g.enabled, default_large_gemm_frac=float(g.default_large_gemm_frac),
        use_measured_matmul=g.use_measured_matmul, small_m=g.small_m,
        tile_m_tokens=float(g.tile_m_tokens),
        attention=a.enabled, attention_compute_frac=float(a.compute_frac),
        attention_fp8_kv_compute_frac=float(a.fp8_kv_compute_frac),
        attention_hbm_frac=float(a.hbm_frac),
        hbm=f.hbm.enabled, gemm_hbm_frac=float(f.hbm.gemm_frac),
        links=ln.enabled, scale_up_frac=float(ln.scale_up_frac),
        scale_out_frac=float(ln.scale_out_frac), latency=ln.latency,
        scale_up_latency_s=float(ln.scale_up_latency_us) * units.US,
        scale_out_latency_s=float(ln.scale_out_latency_us) * units.US,
        overhead=f.overhead.enabled,
        per_layer_overhead_s=float(f.overhead.per_layer_us) * units.US,
        overlap_sms=f.overlap.enabled, overlap_comm_sm_frac=float(f.overlap.comm_sm_frac),
        routing=f.routing.enabled,
        memory=f.memory.enabled, runtime_reserve_frac=float(f.memory.runtime_reserve_frac),
        measured=f.measured.enabled,
        other_kernels={k: float(v) for k, v in ok.model_dump().items()
                       if not isinstance(v, list)},
        quantization_timed_with_gemm=tuple(ok.quantization_timed_with_gemm),
        fused_allreduce_backends=tuple(ok.fused_allreduce_backends),
        kv_write_timed_in=tuple(ok.kv_write_timed_in),
        kv_write_timed_by=tuple(ok.kv_write_timed_by),
        default_expert_skew=float(f.experts.default_skew),
        acceptance_decay_per_position=float(f.speculative.acceptance_decay_per_position),
        default_context_cv=float(f.dp_attention.default_context_cv),
        source=str(p))
