"""What a model file implies once its attention kinds are read: parameter counts and the
memory a sequence holds, summed over the model's layer mix (``ModelSpec.layer_mix``).

A :class:`~inference_factory.specs.ModelSpec` is the file; the parts that depend on an
attention kind (its projections' parameters, its bytes per token of context and per
sequence, how TP splits them) are the kind's (:mod:`.attention`). This module adds them up
for the rest of the package: weights and ``fits`` (:mod:`.geometry`, :mod:`.block`), the
factory's cache tiers, ``models show``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SpecError
from ..kernels import cache as kcache
from ..kernels import memory as kmem
from ..specs import ModelSpec
from ..specs import load_model as load_model_file
from . import attention as A

__all__ = ["Architecture", "architecture", "load_model", "MemoryGroup"]


@dataclass(frozen=True)
class MemoryGroup:
    """The memory of ``layers`` layers of one attention group, per sequence and layer
    (:class:`.attention.Memory`), and how TP splits it (``kv_split`` GPUs)."""

    layers: int
    memory: A.Memory
    kv_split: float

    def per_sequence_bytes(self, kv_len_tokens):
        """:func:`inference_factory.kernels.memory.sequence_memory_bytes` of the group on
        one GPU."""
        return kmem.sequence_memory_bytes(
            kv_len_tokens=kv_len_tokens, bytes_per_token=self.layers * self.memory.bytes_per_token,
            span_tokens=self.memory.span_tokens,
            bytes_per_sequence=self.layers * self.memory.bytes_per_sequence,
            kv_split=self.kv_split)


@dataclass(frozen=True)
class Architecture:
    """A model's counts and memory terms, from its file and its attention kinds."""

    spec: ModelSpec

    def __post_init__(self):
        A.checked(self.spec)

    # -- kinds ---------------------------------------------------------------------------------
    @property
    def primary(self) -> A.AttentionGroup:
        """The layers of ``[attention]``'s kind with ``[attention.params]`` (an MTP module's
        attention is of this kind)."""
        return A.AttentionGroup(self.spec.attention_kind, 0, self.spec.attention_params)

    @property
    def primary_kind(self) -> A.AttentionKind:
        return A.kind(self.spec.attention_kind, self.spec)

    def groups(self) -> list[tuple[A.AttentionGroup, int]]:
        """(attention group, layers) of the attention mix, summed over feed-forward kinds
        (:func:`.attention.groups_of`)."""
        return A.groups_of(self.spec)

    def _kind(self, at: A.AttentionGroup) -> A.AttentionKind:
        return A.kind(at.kind, self.spec)

    def tp_error(self, tp: int) -> str | None:
        """Why ``tp`` cannot split the model's attention (each kind's heads), or None."""
        for at, _ in self.groups():
            why = self._kind(at).tp_error(self.spec, tp, at)
            if why:
                return why
        return None

    # -- parameters ----------------------------------------------------------------------------
    @property
    def n_attention_params(self) -> float:
        """Attention parameters over all layers (each group's kind x its layers)."""
        return float(sum(self._kind(at).params_per_layer(self.spec, at) * n
                         for at, n in self.groups()))

    @property
    def n_attention_params_per_layer(self) -> float:
        """Attention parameters of one layer of the primary kind."""
        return self.primary_kind.params_per_layer(self.spec, self.primary)

    @property
    def n_dense_path_params(self) -> float:
        """Non-expert parameters touched by every token, excluding embedding and lm_head:
        attention, norms, dense FFN layers, routers and shared experts."""
        m = self.spec
        return (self.n_attention_params + m.n_layers * (m.n_norm_params_per_layer
                                                         + m.n_hyper_connection_params_per_layer)
                + m.n_dense_layers * m.n_dense_ffn_params_per_layer
                + m.n_moe_layers * m.n_moe_non_routed_params_per_layer
                + m.hidden_size)  # final norm

    @property
    def total_params(self) -> float:
        """All main-model parameters (MTP modules excluded, as in the model cards)."""
        m = self.spec
        return (self.n_dense_path_params + m.n_routed_expert_params
                + m.n_embedding_params + m.n_lm_head_params)

    def active_params(self, *, include_embedding: bool = True) -> float:
        """Parameters used per token: dense path + top-k routed experts + lm_head
        (+ the input embedding row table, by the convention of most model cards)."""
        m = self.spec
        routed = m.n_moe_layers * m.experts_per_token * m.n_expert_params
        emb = m.n_embedding_params if include_embedding else 0.0
        return self.n_dense_path_params + routed + m.n_lm_head_params + emb

    @property
    def n_mtp_params_per_module(self) -> float:
        """One DeepSeek-style MTP module: projection 2h->h, two norms, one MoE (or dense)
        transformer layer of the primary attention kind; embedding and output head are
        shared with the main model."""
        m = self.spec
        if m.n_mtp_modules == 0:
            return 0.0
        ffn = (m.n_moe_non_routed_params_per_layer + m.n_routed_experts * m.n_expert_params
               if m.is_moe else m.n_dense_ffn_params_per_layer)
        return (2.0 * m.hidden_size * m.hidden_size + 3.0 * m.hidden_size
                + self.n_attention_params_per_layer + m.n_norm_params_per_layer + ffn)

    # -- memory --------------------------------------------------------------------------------
    def memory_groups(self, kv_precision: str, tp: int = 1) -> list[MemoryGroup]:
        """The memory terms of each attention group on one GPU of a TP group of ``tp``,
        full-context groups first."""
        return [MemoryGroup(n, self._kind(at).memory(self.spec, kv_precision, at),
                            self._kind(at).kv_split(self.spec, tp, at))
                for at, n in sorted(self.groups(), key=lambda g: g[0].window > 0)]

    def kv_bytes_per_token_per_layer(self, kv_precision: str) -> float:
        """Bytes per token of context of one layer of the primary kind."""
        return self.primary_kind.memory(self.spec, kv_precision, self.primary).bytes_per_token

    def kv_bytes_per_token(self, kv_precision: str = "bf16") -> float:
        """Bytes per token of context over the layers that keep every token (windowed
        layers are bounded by their window; see :meth:`sequence_bytes`)."""
        return float(sum(g.layers * g.memory.bytes_per_token
                         for g in self.memory_groups(kv_precision)
                         if np.isinf(g.memory.span_tokens)))

    def kv_bytes_per_token_per_gpu(self, kv_precision: str, tp: int) -> float:
        """Bytes per token of context that one GPU of a TP group of ``tp`` holds, over the
        layers that keep every token: each group's bytes over its TP split (``kv_split``;
        KV heads fewer than ``tp`` and MLA's latent are replicated). A prefix cache's
        tokens per byte: ``tp`` times this is what the TP group holds per token, the whole
        model's :meth:`kv_bytes_per_token` only where every group splits ``tp`` ways."""
        return float(sum(g.layers * g.memory.bytes_per_token / g.kv_split
                         for g in self.memory_groups(kv_precision, tp)
                         if np.isinf(g.memory.span_tokens)))

    def state_bytes_per_sequence(self, kv_precision: str = "bf16") -> float:
        """Bytes per sequence independent of context, over all layers."""
        return float(sum(g.layers * g.memory.bytes_per_sequence
                         for g in self.memory_groups(kv_precision)))

    def snapshot_tokens(self, kv_precision: str) -> float:
        """Room a state snapshot takes in a prefix cache counted in tokens of KV: the bytes
        per sequence independent of context over the KV bytes per token (0 for KV-only
        models). SpecError for a model with no KV per token at all (its cache cannot be
        counted in tokens)."""
        kv_tok = self.kv_bytes_per_token(kv_precision)
        if kv_tok <= 0:
            raise SpecError(f"{self.spec.path}: {self.spec.name!r} keeps no KV per token of "
                            "context (every layer's memory is per sequence); a prefix cache "
                            "counted in tokens cannot size it")
        return self.state_bytes_per_sequence(kv_precision) / kv_tok

    def prefix_bytes(self, kv_precision: str, tokens):
        """Bytes of one sequence's cache after ``tokens`` tokens over all its layers (what a
        prefill instance sends to a decode instance): every group's context term up to its
        span and its per-sequence term, before any TP split."""
        return sum(kmem.sequence_memory_bytes(
            kv_len_tokens=tokens, bytes_per_token=g.layers * g.memory.bytes_per_token,
            span_tokens=g.memory.span_tokens,
            bytes_per_sequence=g.layers * g.memory.bytes_per_sequence, kv_split=1.0)
            for g in self.memory_groups(kv_precision))

    def sequence_bytes(self, kv_precision: str, kv_len_tokens, tp: int):
        """Memory one sequence of ``kv_len_tokens`` tokens holds on one GPU of a TP group of
        ``tp``: every group's context and per-sequence terms over its TP split."""
        out = 0.0
        for g in self.memory_groups(kv_precision, tp):
            out = out + g.per_sequence_bytes(kv_len_tokens)
        return out

    def restore_s(self, kv_precision: str, *, sequences, cached_tokens, tp: int,
                  tier_bytes_per_s):
        """Time to bring ``sequences`` prefixes of ``cached_tokens`` back from a tier: each
        group's bytes of the cached tokens it keeps, and its per-sequence state (a snapshot
        at the prefix's end) where the prefix is not empty
        (:func:`inference_factory.kernels.cache.kv_restore_s`)."""
        out = 0.0
        for g in self.memory_groups(kv_precision, tp):
            out = out + kcache.kv_restore_s(
                restored_tokens=sequences * np.minimum(cached_tokens, g.memory.span_tokens),
                kv_bytes_per_token=g.layers * g.memory.bytes_per_token / g.kv_split,
                tier_bytes_per_s=tier_bytes_per_s)
            if g.memory.bytes_per_sequence:
                out = out + kcache.kv_restore_s(
                    # one snapshot per sequence with a prefix of at least one token
                    restored_tokens=sequences * np.minimum(cached_tokens, 1.0),
                    kv_bytes_per_token=g.layers * g.memory.bytes_per_sequence / g.kv_split,
                    tier_bytes_per_s=tier_bytes_per_s)
        return out

    def mtp_sequence_bytes(self, kv_precision: str, kv_len_tokens, tp: int):
        """Memory one sequence holds on one GPU in the model's MTP layers: ``[mtp] modules``
        (num_nextn_predict_layers) layers of ``[attention]``'s kind (SGLang 0.5.6
        model_executor/model_runner.py lines 1374-1380: the draft worker's KV pool has
        num_nextn_predict_layers layers, one slot per token of the target's pool)."""
        kind = self.primary_kind
        return MemoryGroup(self.spec.n_mtp_modules,
                           kind.memory(self.spec, kv_precision, self.primary),
                           kind.kv_split(self.spec, tp, self.primary)
                           ).per_sequence_bytes(kv_len_tokens)

    def replicated_weight_bytes(self, tp: int, bytes_per_param: float) -> float:
        """Weight bytes per GPU beyond the 1/tp share, over the attention kinds."""
        return float(sum(self._kind(at).replicated_weight_bytes(
            self.spec, at, n_layers=n, tp=tp, bytes_per_param=bytes_per_param)
            for at, n in self.groups()))

    def other_kernels_per_layer(self, table: dict, groups=None) -> float:
        """Small kernels per layer of the attention blocks of ``groups`` (default the
        model's; configs/realism.toml [other_kernels], by each kind's key), averaged over
        their layers."""
        keys = [(self._kind(at).other_kernels_key, n)
                for at, n in (self.groups() if groups is None else groups)]
        return sum(table[key] * n for key, n in keys) / sum(n for _, n in keys)

    # -- what `models show` prints ---------------------------------------------------------------
    def derived(self) -> dict[str, Any]:
        return {
            "total_params": self.total_params,
            "active_params": self.active_params(),
            "active_params_excluding_embedding": self.active_params(include_embedding=False),
            "kv_bytes_per_token_bf16": self.kv_bytes_per_token("bf16"),
            "kv_bytes_per_token_fp8": self.kv_bytes_per_token("fp8"),
            "state_bytes_per_sequence_bf16": self.state_bytes_per_sequence("bf16"),
            "mtp_params_per_module": self.n_mtp_params_per_module,
        }

    def to_dict(self) -> dict[str, Any]:
        """The spec's fields and the derived counts (``models show --json``)."""
        return {**self.spec.to_dict(), "derived": self.derived()}


_CACHE: dict[int, Architecture] = {}


def architecture(m: ModelSpec | str) -> Architecture:
    """The :class:`Architecture` of a model (a spec, or a name/alias/path to load)."""
    if isinstance(m, str):
        m = load_model_file(m)
    a = _CACHE.get(id(m))
    if a is None or a.spec is not m:
        a = _CACHE[id(m)] = Architecture(m)
    return a


def load_model(name, folder=None) -> ModelSpec:
    """Load a model spec by name, alias or path (:func:`inference_factory.specs.load_model`)
    and have its attention kinds check their keys: the public ``inference_factory.load_model``.
    The file's own rules are checked by the loader; a kind's by its module."""
    return A.checked(load_model_file(name, folder))

