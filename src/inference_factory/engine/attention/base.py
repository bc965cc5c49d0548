"""The interface every attention kind gives (:class:`AttentionKind`), and what it returns.

A kind is one module of :mod:`inference_factory.engine.attention` holding one subclass of
:class:`AttentionKind`; the registry (``attention/__init__.py``) maps the model file's
``attention.kind`` (and ``[[layers]] attention``) to it. The engine asks a kind, for the
layers of a model that use it:

- its **operations** for prefill and decode (:meth:`AttentionKind.ops`): the projections
  around attention and the attention kernel itself, each an :class:`~..op.Op` with its FLOPs,
  bytes, shape, stream and measured-table family;
- its **memory** per layer (:meth:`AttentionKind.memory`): bytes per token of context (up
  to the span of tokens the layer keeps) and bytes per sequence independent of context
  (a recurrent state, a fixed ring); ``fits``, the batch cap, prefix restores and the
  factory's cache tiers read both (:mod:`..layer_mix`);
- its **structure**: parameters per layer, the check of its keys in the model file, how
  tensor parallelism splits its cache, its replicated weights, the realism key of its small
  kernels and the lines ``models show`` prints.

Adding a kind is one module (a subclass), one registry entry, its model files and, where
measured, its tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from ...errors import SpecError

if TYPE_CHECKING:                       # annotations only
    from ...specs import ModelSpec
    from ..geometry import Geom
    from ..op import Op


@dataclass(frozen=True)
class Memory:
    """What one layer of a kind holds for one sequence, before tensor parallelism splits it.

    ``bytes_per_token`` for each token of context up to ``span_tokens`` (``inf``: every
    token; a sliding window: its width), plus ``bytes_per_sequence`` whatever the context
    (zero for KV caches; a linear-attention layer's recurrent state)."""

    bytes_per_token: float
    span_tokens: float = float("inf")
    bytes_per_sequence: float = 0.0


@dataclass(frozen=True)
class Pass:
    """The quantities of one pass an attention kind builds its operations from (per
    attention-DP rank and micro-batch): ``seqs`` sequences each adding ``new_tokens`` after
    ``cached_tokens``, ``tokens`` = seqs x new_tokens in all; decode reads ``kv_len`` tokens
    of context (already scaled to the busiest DP rank)."""

    seqs: Any
    new_tokens: Any
    cached_tokens: Any
    kv_len: Any
    tokens: Any
    phase: str                   # "prefill" | "decode"


class AttentionKind:
    """One attention kind. Subclasses override what differs; the defaults state the common
    case (a KV cache per token, split over TP by KV heads, nothing replicated)."""

    #: the kind's name in model files
    name: str = ""
    #: key of configs/realism.toml [other_kernels] counting its small kernels per layer
    other_kernels_key: str = ""
    #: keys of ``[attention.params]`` the kind reads (name -> what it is); others are refused
    param_keys: dict[str, str] = {}

    # -- structure -----------------------------------------------------------------------------
    def check(self, m: ModelSpec) -> None:
        """SpecError (file, field, value, what is allowed) where the model's attention keys
        do not describe this kind (``[attention.params]`` keys that no kind of the model
        declares in :attr:`param_keys` are refused by the registry)."""

    def params_per_layer(self, m: ModelSpec) -> float:
        """Parameters of one layer's attention block (projections, norms inside it)."""
        raise NotImplementedError

    def memory(self, m: ModelSpec, kv_precision: str, window: int) -> Memory:
        """What one layer holds per sequence (``window`` > 0: a sliding-window layer)."""
        raise NotImplementedError

    def kv_split(self, m: ModelSpec, tp: int) -> float:
        """GPUs of a TP group one sequence's cache is partitioned over."""
        return 1.0

    def replicated_weight_bytes(self, m: ModelSpec, *, n_layers: int, tp: int,
                                bytes_per_param: float) -> float:
        """Weight bytes per GPU beyond the 1/tp share (weights every TP rank holds whole)."""
        return 0.0

    def describe(self, m: ModelSpec) -> list[tuple[str, str]]:
        """Lines (label, value) ``models show`` prints for the kind's own keys."""
        return [(f"param {k}", str(v)) for k, v in m.attention_params]

    # -- operations ----------------------------------------------------------------------------
    def ops(self, g: Geom, windows: Sequence[tuple[int, int]], p: Pass) -> list[Op]:
        """Operations of one pass over this kind's layers: ``windows`` lists (window tokens,
        layers) of the kind in the model (window 0 = full context). Projections are counted
        over all its layers, the attention kernel once per window variant."""
        raise NotImplementedError


def param(m: ModelSpec, key: str, kind: str, *, minimum: float | None = None) -> Any:
    """A required ``[attention.params]`` value of ``m``, checked against ``minimum``."""
    values = dict(m.attention_params)
    if key not in values:
        raise SpecError(f"{m.path}: attention.params.{key} is missing (required for kind "
                        f"{kind!r})")
    v = values[key]
    if minimum is not None and (isinstance(v, (bool, str)) or v < minimum):
        raise SpecError(f"{m.path}: attention.params.{key} = {v!r} must be a number >= "
                        f"{minimum:g} for kind {kind!r}")
    return v
