"""Serving-engine profiles: how an engine schedules a closed-loop benchmark.

The settings live in ``configs/serving_engines.toml`` (each with the server flag or source
file it was read from); this module loads them strictly (schema
:class:`~inference_factory.specs.schema_engines.ServingEnginesFile`) into frozen
:class:`ServingEngine` objects. Every command takes one (``--engine``; a factory config's
``engine``; a sweep file's ``[sweep] engine``), resolved once here and passed down: ``bench``
and ``plan``'s closed loop (:mod:`inference_factory.analysis.bench`) run on its settings,
``simulate`` and ``compare`` on the ones the factory has a concept for
(:data:`FACTORY_USES`), ``sweep`` names it. Its policies are its methods
(:meth:`ServingEngine.prefill_mixes_with_decode`, :meth:`ServingEngine.mixed_pass_tokens`):
no code outside this module compares ``policy``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError, did_you_mean
from .catalog import _cached
from .files import read_toml, data_dir


@dataclass(frozen=True)
class ServingEngine:
    """One engine's scheduling settings, resolved for a deployment with :meth:`for_run`."""

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

    def prefill_mixes_with_decode(self, colocated: bool) -> bool:
        """Whether prompt chunks ride on the decode steps (``policy = "mixed"``, vLLM V1) on a
        deployment where prefill and decode share the GPUs (``colocated``); False where a
        prefill pass runs on its own and decoding waits (``"prefill-first"``, SGLang) and on a
        disaggregated deployment (its prefill pool runs nothing else)."""
        return colocated and self.policy == "mixed"

    def mixed_pass_tokens(self, dp: int) -> float | None:
        """The token budget of one mixed step per attention-DP rank (decode tokens first,
        prompt chunks fill the rest: :meth:`pass_tokens_per_rank`) where the engine mixes
        prefill into decode steps; None where it runs prefill passes on their own."""
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

    def requests_per_rank(self, dp: int) -> float:
        """Requests in service per attention-DP rank at most (the same division)."""
        cap = float(self.max_running_requests)
        return cap / dp if (dp > 1 and self.dp_attention_divides_limits) else cap

    def recv_interval(self, concurrency, dp_attention: bool):
        """Decode steps between two polls for new requests at each concurrency (an array)."""
        import numpy as np

        c = np.asarray(concurrency, dtype=float)
        if dp_attention:
            return np.full(c.shape, float(self.recv_interval_steps_dp_attention))
        return np.where(c >= self.recv_interval_high_from_concurrency,
                        float(self.recv_interval_steps_high), float(self.recv_interval_steps))


#: What ``simulate`` and ``compare`` take from a profile (the factory has a matching concept)
#: and what they do not model, for docs and tests (:data:`FACTORY_USES`).
FACTORY_USES = ("name", "policy")
FACTORY_IGNORES = ("prefill_tokens_per_pass", "prefill_tokens_per_pass_dp_attention",
                   "max_running_requests", "recv_interval_steps", "recv_interval_steps_high",
                   "recv_interval_high_from_concurrency", "recv_interval_steps_dp_attention",
                   "stream_interval_tokens", "host_s_per_decode_step",
                   "host_s_per_prefill_pass", "dp_attention_divides_limits")


def default_serving_engine_name(path: str | os.PathLike | None = None) -> str:
    """The ``default`` profile of the engines file (what every command takes unless told)."""
    return _load(path)[0]


def resolve_serving_engine(name, where: str,
                           path: str | os.PathLike | None = None) -> ServingEngine:
    """:func:`load_serving_engine`, an unknown name reported as one line naming ``where``
    (the option or config field, e.g. ``--engine`` or ``configs/x.toml: engine``), the value
    and the allowed names."""
    if isinstance(name, ServingEngine):
        return name
    default, engines, _ = _load(path)
    key = default if name is None else str(name)
    if key not in engines:
        raise SpecError(f"{where} = {key!r} is not a profile of the serving engines"
                        f"{did_you_mean(key, engines) or ';'} allowed: "
                        f"{', '.join(sorted(engines))}")
    return engines[key]


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
        raise SpecError(f"{p}: engine = {key!r} is not a profile; allowed: {sorted(engines)}")
    return engines[key]


def _load(path):
    p = Path(path) if path is not None else data_dir("configs") / "serving_engines.toml"
    if not p.is_file():
        raise SpecError(f"{p}: file not found")
    return _cached(p, _parse)


def _parse(p: Path):
    from .schema_base import check
    from .schema_engines import ServingEnginesFile

    f = check(ServingEnginesFile, read_toml(p), str(p))
    engines = {k: ServingEngine(name=k, path=str(p), **e.model_dump())
               for k, e in f.engines.items()}
    if f.default not in engines:
        raise SpecError(f"{p}: default = {f.default!r} is not a profile; allowed: "
                        f"{sorted(engines)}")
    return f.default, engines, p
