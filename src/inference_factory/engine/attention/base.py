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
class AttentionGroup:
    """Layers of one kind that share a window and parameters: what a kind is asked about.

    ``params`` are the model's ``[attention.params]`` overlaid by the ``[[layers]]`` group's
    own (a hybrid model's second kind states its own heads and dimensions there)."""

    kind: str
    window: int = 0
    params: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)


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
    def check(self, m: ModelSpec, at: AttentionGroup) -> None:
        """SpecError (file, field, value, what is allowed) where the model's keys do not
        describe this kind's layers ``at`` (keys of ``params`` a kind does not declare in
        :attr:`param_keys` are refused by the registry)."""

    def params_per_layer(self, m: ModelSpec, at: AttentionGroup) -> float:
        """Parameters of one layer's attention block (projections, norms inside it)."""
        raise NotImplementedError

    def memory(self, m: ModelSpec, kv_precision: str, at: AttentionGroup) -> Memory:
        """What one layer holds per sequence (``at.window`` > 0: a sliding-window layer)."""
        raise NotImplementedError

    def kv_split(self, m: ModelSpec, tp: int, at: AttentionGroup) -> float:
        """GPUs of a TP group one sequence's cache is partitioned over."""
        return 1.0

    def tp_error(self, m: ModelSpec, tp: int, at: AttentionGroup) -> str | None:
        """Why ``tp`` cannot split these layers (each GPU holds whole heads), or None."""
        if m.n_q_heads % tp:
            return f"tp = {tp} must divide the {m.n_q_heads} attention heads of {m.name!r}"
        return None

    def replicated_weight_bytes(self, m: ModelSpec, at: AttentionGroup, *, n_layers: int,
                                tp: int, bytes_per_param: float) -> float:
        """Weight bytes per GPU beyond the 1/tp share (weights every TP rank holds whole)."""
        return 0.0

    def describe(self, m: ModelSpec, at: AttentionGroup) -> list[tuple[str, str]]:
        """Lines (label, value) ``models show`` prints for the kind's own keys."""
        return [(f"param {k}", str(v)) for k, v in at.params]

    # -- operations ----------------------------------------------------------------------------
    def ops(self, g: Geom, windows: Sequence[tuple[int, int]], p: Pass,
            at: AttentionGroup) -> list[Op]:
        """Operations of one pass over this kind's layers with parameters ``at.params``:
        ``windows`` lists (window tokens, layers) of them (window 0 = full context).
        Projections are counted over all its layers, the attention kernel once per window."""
        raise NotImplementedError


def param(m: ModelSpec, at: AttentionGroup, key: str, *, minimum: float | None = None) -> Any:
    """A required parameter of the layers ``at`` of ``m``, checked against ``minimum``."""
    values = dict(at.params)
    if key not in values:
        raise SpecError(f"{m.path}: attention.params.{key} is missing (required for kind "
                        f"{at.kind!r})")
    v = values[key]
    if minimum is not None and (isinstance(v, (bool, str)) or v < minimum):
        raise SpecError(f"{m.path}: attention.params.{key} = {v!r} must be a number >= "
                        f"{minimum:g} for kind {at.kind!r}")
    return v
