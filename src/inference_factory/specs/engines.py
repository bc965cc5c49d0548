"""Serving-engine profiles: how an engine schedules a closed-loop benchmark, on which devices
it runs with which settings, and what it runs there.

The settings live in ``configs/serving_engines.toml`` (each with the server flag, recipe or
source file it was read from); this module loads them strictly (schema
:class:`~inference_factory.specs.schema_engines.ServingEnginesFile`) into frozen
:class:`ServingEngine` objects. Every command takes one (``--engine``; a factory config's
``engine``; a sweep file's ``[sweep] engine``), resolved here: a profile name
(``sglang-0.5.6``), an engine (``sglang``: the profile of that engine that runs on the
device), an engine at a version (``trtllm@1.3``: the version's leading parts) or a profile
file (``my-profile.toml``, e.g. written by ``bench --calibrate``). :meth:`ServingEngine.on`
resolves a profile for one device (its recipe's settings, :class:`Supports`, its label; an
unlisted device is one line; ``like = "..."`` takes another's settings, labelled so).
``bench`` and ``plan``'s closed loop
(:mod:`inference_factory.analysis.bench`) run on its settings, ``plan`` keeps the
deployments it supports and writes its launch command, ``simulate`` and ``compare`` take
the ones the factory has a concept for (:data:`FACTORY_USES`), ``sweep`` names it. Its
policies are its methods: no code outside this module compares ``policy``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import SpecError, did_you_mean
from .catalog import _cached
from .files import read_toml, data_dir

#: what a profile supports where neither it nor the device says (the most conservative)
_SUPPORT_DEFAULTS = dict(modes=("aggregated",), attention_dp=False, expert_parallel=False,
                         all_to_all="", expert_parallel_spans_instance=False,
                         kv_connector="", speculative=(),
                         two_batch_overlap=False, weight_formats=(), kv_formats=(),
                         max_instance_gpus=8, cuda_graph_max_batch=0, kernel_tables="")


#: what an engine does at full KV memory where neither it nor the device says: every request's
#: prompt and whole output reserved at admission, so the pool is never full (today's bound)
_KV_POOL_DEFAULTS = dict(admission="guaranteed", retract="newest", retract_speculative="newest",
                         requeue="back", new_token_ratio_init=1.0, new_token_ratio_min_factor=1.0,
                         new_token_ratio_decay_steps=1, retract_decode_steps=0,
                         clip_max_new_tokens=1 << 30, schedule_conservativeness=1.0,
                         conservativeness_dp_attention_factor=1.0, reserve_tokens_per_request=0.0,
                         no_admission_after_retract=False, page_tokens=1, decode_check="boundary",
                         draft_in_pool=True, memory_fraction_factor=1.0,
                         memory_fraction_factor_above_context=0)


@dataclass(frozen=True)
class KvPool:
    """What an engine does when its KV pool is full (``configs/serving_engines.toml``
    ``kv_pool``; simulated by :mod:`inference_factory.factory.kv_pool`)."""

    admission: str
    retract: str
    retract_speculative: str
    requeue: str
    new_token_ratio_init: float
    new_token_ratio_min_factor: float
    new_token_ratio_decay_steps: int
    retract_decode_steps: int
    clip_max_new_tokens: int
    schedule_conservativeness: float
    conservativeness_dp_attention_factor: float
    reserve_tokens_per_request: float
    no_admission_after_retract: bool
    page_tokens: int
    decode_check: str
    draft_in_pool: bool
    memory_fraction_factor: float        # the pool share's factor above a context of
    memory_fraction_factor_above_context: int   # tokens (analysis/full_memory.py)

    def ratio(self, dp_attention: bool) -> tuple[float, float, float]:
        """(initial, minimum, decay per decode step) of the new-token ratio: the initial
        value times the conservativeness (times its DP-attention factor), at most 1; the
        minimum a factor of it; the decay spreads the difference over the decay steps."""
        cons = self.schedule_conservativeness * (
            self.conservativeness_dp_attention_factor if dp_attention else 1.0)
        r0 = min(self.new_token_ratio_init * cons, 1.0)
        r_min = min(r0 * self.new_token_ratio_min_factor, 1.0)
        return r0, r_min, (r0 - r_min) / self.new_token_ratio_decay_steps


@dataclass(frozen=True)
class Supports:
    """What an engine runs on one device (``configs/serving_engines.toml`` ``supports``)."""

    modes: tuple[str, ...]
    attention_dp: bool
    expert_parallel: bool
    all_to_all: str
    expert_parallel_spans_instance: bool
    kv_connector: str
    speculative: tuple[str, ...]
    two_batch_overlap: bool
    weight_formats: tuple[str, ...]
    kv_formats: tuple[str, ...]
    max_instance_gpus: int
    cuda_graph_max_batch: int
    kernel_tables: str

    def refusal(self, *, mode: str = "aggregated", tp: int = 1, dp: int = 1, ep: int = 1,
                draft_depth: float = 0, overlap: str = "none",
                precisions: Mapping[str, str] | None = None) -> str:
        """Why the engine does not run this deployment on the device ('' where it does)."""
        if mode not in self.modes:
            return f"runs {' and '.join(self.modes)} only"
        if dp > 1 and not self.attention_dp:
            return "no attention DP"
        if ep > 1 and not self.expert_parallel:
            return "no expert parallelism"
        if ep > 1 and self.expert_parallel_spans_instance and ep != tp * dp:
            return f"expert parallelism spans the instance (ep = tp x dp = {tp * dp}, not {ep})"
        if tp * dp > self.max_instance_gpus:
            return f"instances of at most {self.max_instance_gpus} GPUs"
        if draft_depth and draft_depth > 0 and not self.speculative:
            return "no speculative decoding"
        if overlap == "two-batch" and not self.two_batch_overlap:
            return "no two-batch overlap"
        for key, v in (precisions or {}).items():
            allowed = self.kv_formats if key == "kv_precision" else (
                self.weight_formats if key in ("weight_precision", "moe_precision") else ())
            if allowed and v not in allowed:
                return f"no {v} {key.replace('_precision', '')} path"
        return ""


@dataclass(frozen=True)
class ServingEngine:
    """One engine's scheduling settings; :meth:`on` resolves them for one device."""

    name: str
    description: str
    policy: str
    prefill_tokens_per_pass: int
    prefill_tokens_per_pass_dp_attention: int
    max_running_requests: int
    recv_interval_steps: int
    recv_interval_steps_high: int
    recv_interval_high_from_concurrency: int
    recv_interval_steps_dp_attention: int
    stream_interval_tokens: int
    host_s_per_decode_step: float
    host_s_per_prefill_pass: float
    dp_attention_divides_limits: bool = False
    path: str = ""
    engine: str = ""
    version: str = ""
    max_running_requests_speculative: int | None = None
    kv_memory_fraction: float | None = None
    search_by_default: bool = True
    #: the device this profile was resolved for ('' until :meth:`on`), the device whose
    #: settings it took (``like``), the device's source and launch flags, its supports
    device: str = ""
    settings_from: str = ""
    source: str = ""
    flags: str = ""
    supports: Supports | None = None
    #: whether it fuses the TP all-reduce with the residual add and RMSNorm on its device
    #: (None: not stated; the engine then reads the device's all-reduce table)
    fused_allreduce_norm: bool | None = None
    kv_pool: KvPool = field(default_factory=lambda: KvPool(**_KV_POOL_DEFAULTS))
    launch: Mapping[str, str] = field(default_factory=dict, compare=False)
    fusion_by_device: Mapping[str, bool] = field(default_factory=dict, compare=False, repr=False)
    devices: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    base_supports: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: model family -> the devices the engine runs that family on (``[engines.X.models]``;
    #: empty: no family restricted) and the file's family -> model names
    #: (``[model_families]``: a model in no family is not restricted)
    models: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False,
                                                  repr=False)
    model_families: Mapping[str, tuple[str, ...]] = field(default_factory=dict,
                                                          compare=False, repr=False)
    #: model family -> the supports fields it replaces (``[engines.X.model_supports]``)
    model_supports: Mapping[str, Mapping[str, Any]] = field(default_factory=dict,
                                                            compare=False, repr=False)

    # ---- the device ---------------------------------------------------------------------

    def runs_on(self, hardware: str) -> bool:
        return hardware in self.devices or "*" in self.devices

    def on(self, hardware: str) -> "ServingEngine":
        """This profile on ``hardware`` (a hardware name): the device's recipe values over the
        profile's, its supports and label; a device it does not list is one line naming the
        devices it runs on."""
        hw = getattr(hardware, "name", hardware)
        if self.device == hw or (self.device and not self.devices):
            return self
        entry = self.devices.get(hw, self.devices.get("*"))
        if entry is None:
            raise SpecError(f"engine {self.name} ({self.engine} {self.version}) has no settings "
                            f"for {hw}; it runs on {', '.join(sorted(self.devices))}")
        like = entry.get("like")
        base = dict(self.devices[like]) if like else {}
        if like and like not in self.devices:
            raise SpecError(f"{self.path}: engines.{self.name}.devices.{hw}.like = {like!r} is "
                            f"not a device of the profile; allowed: {sorted(self.devices)}")
        merged = {**base, **{k: v for k, v in entry.items() if v is not None}}
        sup = {**_SUPPORT_DEFAULTS, **self.base_supports,
               **{k: v for k, v in (base.get("supports") or {}).items() if v is not None},
               **{k: v for k, v in (entry.get("supports") or {}).items() if v is not None}}
        sup = {k: tuple(v) if isinstance(v, list) else v for k, v in sup.items()}
        sched = {k: v for k, v in merged.items()
                 if k in _SCHEDULING and v is not None}
        by = self.fusion_by_device           # the device's, its `like` device's, the default
        fused = next((by[k] for k in (hw, like, "default") if k and k in by), None)
        pool = {k: v for part in (base.get("kv_pool"), entry.get("kv_pool"))
                for k, v in (part or {}).items() if v is not None}
        return dataclasses.replace(self, **sched, device=hw, settings_from=like or "",
                                   fused_allreduce_norm=fused,
                                   kv_pool=dataclasses.replace(self.kv_pool, **pool),
                                   source=entry["source"], flags=merged.get("flags") or "",
                                   supports=Supports(**sup))

    def label(self) -> str:
        """The profile as outputs name it: ``sglang-0.5.6 on B300``, with the device whose
        settings it took where the device has no recipe of its own."""
        if not self.device:
            return self.name
        where = "" if self.device == "*" else f" on {self.device}"
        like = (f" (settings of {self.settings_from}: no recipe for {self.device})"
                if self.settings_from else "")
        return f"{self.name}{where}{like}"

    # ---- policies -----------------------------------------------------------------------

    def prefill_mixes_with_decode(self, colocated: bool) -> bool:
        """Whether prompt chunks ride on the decode steps (``policy = "mixed"``, vLLM V1) on a
        deployment where prefill and decode share the GPUs (``colocated``); False where a
        prefill pass runs on its own and decoding waits (``"prefill-first"``, SGLang) and on a
        disaggregated deployment (its prefill pool runs nothing else)."""
        return colocated and self.policy == "mixed"

    def mixed_pass_tokens(self, dp: int) -> float | None:
        """One mixed step's token budget per attention-DP rank (decode tokens first, prompt
        chunks fill the rest: :meth:`pass_tokens_per_rank`); None: prefill passes alone."""
        return self.pass_tokens_per_rank(dp) if self.prefill_mixes_with_decode(True) else None

    def pass_tokens(self, dp_attention: bool) -> int:
        """Prompt tokens one prefill pass (or one mixed step) takes per DP rank."""
        return (self.prefill_tokens_per_pass_dp_attention if dp_attention
                else self.prefill_tokens_per_pass)

    def pass_tokens_per_rank(self, dp: int) -> float:
        """Prompt tokens per pass of one attention-DP rank: the flag's value, divided among
        the ``dp`` ranks where the engine divides it (``dp_attention_divides_limits``)."""
        tokens = float(self.pass_tokens(dp > 1))
        return tokens / dp if (dp > 1 and self.dp_attention_divides_limits) else tokens

    def with_draft(self, draft_depth) -> "ServingEngine":
        """The profile as it runs with ``draft_depth`` draft tokens: the recipe's request cap
        for speculative decoding (``max_running_requests_speculative``) where it sets one."""
        if draft_depth and float(draft_depth) > 0 and self.max_running_requests_speculative:
            return dataclasses.replace(self,
                                       max_running_requests=self.max_running_requests_speculative)
        return self

    def requests_per_rank(self, dp: int, speculative: bool = False) -> float:
        """Requests in service per attention-DP rank at most (the same division); with a
        draft the recipe's cap for speculative decoding where it sets one."""
        cap = float(self.max_running_requests_speculative
                    if speculative and self.max_running_requests_speculative
                    else self.max_running_requests)
        return cap / dp if (dp > 1 and self.dp_attention_divides_limits) else cap

    def runs_eager(self, batch_per_rank):
        """Whether a decode step of ``batch_per_rank`` requests per DP rank runs outside the
        engine's CUDA graphs on its device (above ``supports.cuda_graph_max_batch``; False
        where the profile states none): its launch time is not modelled (docs/ENGINES.md)."""
        limit = self.supports.cuda_graph_max_batch if self.supports is not None else 0
        b = np.asarray(batch_per_rank, dtype=float)
        return (b > limit) if limit else np.zeros(b.shape, dtype=bool)

    def recv_interval(self, concurrency, dp_attention: bool):
        """Decode steps between two polls for new requests at each concurrency (an array)."""
        c = np.asarray(concurrency, dtype=float)
        if dp_attention:
            return np.full(c.shape, float(self.recv_interval_steps_dp_attention))
        return np.where(c >= self.recv_interval_high_from_concurrency,
                        float(self.recv_interval_steps_high), float(self.recv_interval_steps))

    def refusal(self, *, model=None, **deployment) -> str:
        """Why the engine does not run ``deployment`` of ``model`` (spec or name; None: any)
        on its device ('' where it does): :func:`.engine_models.refusal`."""
        from .engine_models import refusal
        return refusal(self, model, deployment)

    def model_refusal(self, model) -> str:
        """'' where the profile runs ``model``'s family on its device (or the model is in no
        family); else one line naming the file, the field, its value and what it runs."""
        from .engine_models import model_refusal
        return model_refusal(self, model)

    def launch_command(self, model: str, *, tp: int = 1, dp: int = 1, ep: int = 1,
                       draft_depth: int = 0, kv_precision: str = "bf16",
                       overlap: str = "none", role: str = "", dp_attention: bool | None = None
                       ) -> str:
        """The engine's own launch command for one instance (``role``: '' aggregated,
        ``prefill`` or ``decode`` for a P/D pool), from the profile's ``[launch]`` parts."""
        from .engine_launch import launch_command

        return launch_command(self, model, tp=tp, dp=dp, ep=ep, draft_depth=draft_depth,
                              kv_precision=kv_precision, overlap=overlap, role=role,
                              dp_attention=dp > 1 if dp_attention is None else dp_attention)


_SCHEDULING = ("kv_memory_fraction", "prefill_tokens_per_pass", "prefill_tokens_per_pass_dp_attention",
               "max_running_requests", "max_running_requests_speculative",
               "recv_interval_steps", "recv_interval_steps_high",
               "recv_interval_high_from_concurrency", "recv_interval_steps_dp_attention",
               "stream_interval_tokens", "host_s_per_decode_step", "host_s_per_prefill_pass")

#: What ``simulate`` and ``compare`` take from a profile (the factory has a matching concept)
#: and what they do not model, for docs and tests (:data:`FACTORY_USES`).
FACTORY_USES = ("name", "policy")
FACTORY_IGNORES = ("prefill_tokens_per_pass", "prefill_tokens_per_pass_dp_attention",
                   "max_running_requests", "recv_interval_steps", "recv_interval_steps_high",
                   "recv_interval_high_from_concurrency", "recv_interval_steps_dp_attention",
                   "stream_interval_tokens", "host_s_per_decode_step",
                   "host_s_per_prefill_pass", "dp_attention_divides_limits", "kv_pool",
                   "kv_memory_fraction")


def default_serving_engine_name(path: str | os.PathLike | None = None) -> str:
    """The ``default`` of the engines file (what every command takes unless told)."""
    return _load(path)[0]


def resolve_serving_engine(name, where: str, path: str | os.PathLike | None = None,
                           hardware: str | None = None) -> ServingEngine:
    """The profile ``name`` names (a profile, an engine, ``engine@version`` or a profile
    file; None: the file's default), on ``hardware`` where given (:meth:`ServingEngine.on`;
    an engine picks its profile that runs there). An unknown name is one line naming
    ``where`` (the option or field), the value and the allowed names."""
    if isinstance(name, ServingEngine):
        return name.on(hardware) if hardware is not None else name
    default, engines, _ = _load(path)
    key = default if name is None else str(name)
    if key.endswith(".toml"):
        if not Path(key).is_file():
            raise SpecError(f"{where} = {key!r}: profile file not found")
        got = resolve_serving_engine(None, where, path=key)
        return got.on(hardware) if hardware is not None else got
    if key in engines:
        return engines[key].on(hardware) if hardware is not None else engines[key]
    family, _, version = key.partition("@")
    matches = [e for e in engines.values() if e.engine == family and (
        not version or e.version == version or e.version.startswith(version + "."))]
    if not matches:
        fams = sorted({e.engine for e in engines.values()})
        raise SpecError(f"{where} = {key!r} is not a profile of the serving engines"
                        f"{did_you_mean(key, [*engines, *fams]) or ';'} allowed: "
                        f"{', '.join(sorted(engines))}; or an engine ({', '.join(fams)}), "
                        "optionally NAME@VERSION")
    if hardware is None:
        return matches[0]
    hw = getattr(hardware, "name", hardware)
    for e in (*[e for e in matches if hw in e.devices], *matches):  # a listing before '*'
        if e.runs_on(hw):
            return e.on(hw)
    runs = "; ".join(f"{e.name}: {', '.join(sorted(e.devices))}" for e in matches)
    raise SpecError(f"{where} = {key!r}: no profile of that engine runs on {hw} ({runs})")


def engines_for_plan(names, hardware: str, path: str | os.PathLike | None = None
                     ) -> list[ServingEngine]:
    """The profiles ``plan`` searches on one device: those ``names`` name (each resolved as
    :func:`resolve_serving_engine`; a name without a profile for the device is skipped), or
    every profile the file searches by default that runs there."""
    _, engines, _ = _load(path)
    if names is None:         # per engine: the profiles that list the device, else a '*' one
        listed = {e.engine for e in engines.values() if hardware in e.devices}
        return [e.on(hardware) for e in engines.values()
                if e.search_by_default and e.runs_on(hardware)
                and (hardware in e.devices or e.engine not in listed)]
    out = []
    for n in ([names] if isinstance(names, (str, ServingEngine)) else list(names)):
        try:
            out.append(resolve_serving_engine(n, "--engine", path=path, hardware=hardware))
        except SpecError as exc:
            if "no settings for" not in str(exc) and "no profile of that engine" not in str(exc):
                raise
    return out


def list_serving_engines(path: str | os.PathLike | None = None) -> list[str]:
    """The profile names of the engines file (default: the bundled one)."""
    return sorted(_load(path)[1])


def load_serving_engine(name: str | None = None,
                        path: str | os.PathLike | None = None) -> ServingEngine:
    """The profile ``name`` (default: the file's ``default``) of ``configs/serving_engines.toml``
    or of the file at ``path``; an unknown name is a one-line error listing the names."""
    if isinstance(name, ServingEngine):
        return name
    default, engines, p = _load(path)
    key = default if name is None else str(name)
    if key not in engines:
        try:
            return resolve_serving_engine(key, f"{p}: engine", path=path)
        except SpecError:
            raise SpecError(f"{p}: engine = {key!r} is not a profile; allowed: "
                            f"{sorted(engines)}") from None
    return engines[key]


def _load(path):
    p = Path(path) if path is not None else data_dir("configs") / "serving_engines.toml"
    if not p.is_file():
        raise SpecError(f"{p}: file not found")
    return _cached(p, _parse)


def _parse(p: Path):
    from .engine_models import read_models
    from .schema_base import check
    from .schema_engines import ServingEnginesFile

    f = check(ServingEnginesFile, read_toml(p), str(p))
    engines = {}
    families = {fam: tuple(ms) for fam, ms in (f.model_families or {}).items()}
    for k, e in f.engines.items():
        d = e.model_dump()
        devices, sup, launch = d.pop("devices"), d.pop("supports"), d.pop("launch") or {}
        fusion = d.pop("fused_allreduce_norm") or {}
        pool = {**_KV_POOL_DEFAULTS,
                **{a: b for a, b in (d.pop("kv_pool") or {}).items() if b is not None}}
        models, fam_sup = read_models(p, k, d, families, devices)
        for hw, entry in devices.items():
            if entry.get("like") and entry["like"] not in devices:
                raise SpecError(f"{p}: engines.{k}.devices.{hw}.like = {entry['like']!r} is "
                                f"not a device of the profile; allowed: {sorted(devices)}")
        engines[k] = ServingEngine(name=k, path=str(p), devices=devices, launch=launch,
                                   fusion_by_device=fusion, models=models,
                                   model_supports=fam_sup, model_families=families,
                                   base_supports={a: b for a, b in sup.items() if b is not None},
                                   kv_pool=KvPool(**pool), **d)
    names = {f.default} | {e.engine for e in engines.values()}
    if f.default not in engines and f.default not in {e.engine for e in engines.values()}:
        raise SpecError(f"{p}: default = {f.default!r} is not a profile or engine; allowed: "
                        f"{sorted(names - {f.default}) + sorted(engines)}")
    return f.default, engines, p
