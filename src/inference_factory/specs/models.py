"""Model specs: a strict TOML loader into a frozen dataclass; parameter counts and KV bytes
per token are derived from the architecture here, never typed into a file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import units
from ..errors import SpecError
from ..kernels import params as kparams
from .files import read_toml


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------

#: Scaling formats of quantised weights per precision, the default first: FP8 per-tensor
#: (TensorRT-LLM / vLLM FP8 checkpoints) or 128x128 block scales (DeepSeek-V3, DeepGEMM);
#: FP4 with E4M3 scales per 16 (NVFP4, NVIDIA's FP4 checkpoints) or E8M0 scales per 32
#: (MXFP4, OCP; gpt-oss). The measured tables hold each as its own dtype.
QUANT_FORMATS = {"fp8": ("fp8", "fp8_block"), "fp4": ("nvfp4", "mxfp4")}


@dataclass(frozen=True)
class ModelSpec:
    """One model architecture. Built by :func:`load_model`; counts are derived properties."""

    name: str
    hf_repo: str
    source: str
    weight_precision: str
    expert_precision: str
    n_layers: int
    hidden_size: int
    vocab_size: int
    tied_embeddings: bool
    max_position_embeddings: int
    attention_kind: str
    n_q_heads: int
    n_kv_heads: int
    head_dim_qk: int
    head_dim_v: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    attention_bias: bool
    sliding_window_tokens: int
    n_sliding_window_layers: int
    n_dense_layers: int
    dense_intermediate_size: int
    n_routed_experts: int
    experts_per_token: int
    n_shared_experts: int
    expert_intermediate_size: int
    expert_bias: bool
    n_mtp_modules: int
    aliases: tuple[str, ...] = ()
    path: str = ""
    #: scaling format of the stored (quantised) weights and routed experts: one of
    #: :data:`QUANT_FORMATS` of their precision ("" = the precision's default)
    weight_format: str = ""
    expert_format: str = ""

    def quant_format(self, precision: str, experts: bool = False) -> str:
        """Scaling format of weights served in ``precision``: the checkpoint's own format
        where it ships in that precision, else the precision's default (quantised from the
        checkpoint: FP8 per-tensor, NVFP4). The one place a precision becomes a format,
        whether it comes from the model file, an argument or a config."""
        stored = self.expert_precision if experts else self.weight_precision
        fmt = self.expert_format if experts else self.weight_format
        if precision == stored and fmt:
            return fmt
        return QUANT_FORMATS.get(precision, (precision,))[0]

    # -- structure ---------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.attention_kind == "mla"

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers

    # -- parameters per component -------------------------------------------------------------
    @property
    def n_attention_params_per_layer(self) -> float:
        if self.is_mla:
            return kparams.mla_attention_params(
                hidden_size=self.hidden_size, n_q_heads=self.n_q_heads,
                q_lora_rank=self.q_lora_rank, kv_lora_rank=self.kv_lora_rank,
                qk_nope_head_dim=self.qk_nope_head_dim, qk_rope_head_dim=self.qk_rope_head_dim,
                v_head_dim=self.head_dim_v)
        return kparams.gqa_attention_params(
            hidden_size=self.hidden_size, n_q_heads=self.n_q_heads, n_kv_heads=self.n_kv_heads,
            head_dim_qk=self.head_dim_qk, head_dim_v=self.head_dim_v, bias=self.attention_bias)

    @property
    def n_dense_ffn_params_per_layer(self) -> float:
        return kparams.swiglu_ffn_params(hidden_size=self.hidden_size,
                                         intermediate_size=self.dense_intermediate_size)

    @property
    def n_expert_params(self) -> float:
        """Parameters of one routed (or shared) expert."""
        if not self.is_moe:
            return 0.0
        return kparams.swiglu_ffn_params(hidden_size=self.hidden_size,
                                         intermediate_size=self.expert_intermediate_size,
                                         bias=self.expert_bias)

    @property
    def n_router_params_per_layer(self) -> float:
        return float(self.hidden_size * self.n_routed_experts) if self.is_moe else 0.0

    @property
    def n_norm_params_per_layer(self) -> float:
        return 2.0 * self.hidden_size

    @property
    def n_embedding_params(self) -> float:
        return float(self.vocab_size * self.hidden_size)

    @property
    def n_lm_head_params(self) -> float:
        return 0.0 if self.tied_embeddings else self.n_embedding_params

    @property
    def n_routed_expert_params(self) -> float:
        """All routed-expert parameters of the model."""
        return self.n_moe_layers * self.n_routed_experts * self.n_expert_params

    @property
    def n_dense_path_params(self) -> float:
        """Non-expert parameters touched by every token, excluding embedding and lm_head:
        attention, norms, dense FFN layers, routers and shared experts."""
        return (self.n_layers * (self.n_attention_params_per_layer + self.n_norm_params_per_layer)
                + self.n_dense_layers * self.n_dense_ffn_params_per_layer
                + self.n_moe_layers * (self.n_router_params_per_layer
                                       + self.n_shared_experts * self.n_expert_params)
                + self.hidden_size)  # final norm

    @property
    def total_params(self) -> float:
        """All main-model parameters (MTP modules excluded, as in the model cards)."""
        return (self.n_dense_path_params + self.n_routed_expert_params
                + self.n_embedding_params + self.n_lm_head_params)

    def active_params(self, *, include_embedding: bool = True) -> float:
        """Parameters used per token: dense path + top-k routed experts + lm_head
        (+ the input embedding row table, by the convention of most model cards)."""
        routed = self.n_moe_layers * self.experts_per_token * self.n_expert_params
        emb = self.n_embedding_params if include_embedding else 0.0
        return self.n_dense_path_params + routed + self.n_lm_head_params + emb

    @property
    def n_mtp_params_per_module(self) -> float:
        """One DeepSeek-style MTP module: projection 2h->h, two norms, one MoE (or dense)
        transformer layer; embedding and output head are shared with the main model."""
        if self.n_mtp_modules == 0:
            return 0.0
        ffn = (self.n_router_params_per_layer
               + (self.n_routed_experts + self.n_shared_experts) * self.n_expert_params
               if self.is_moe else self.n_dense_ffn_params_per_layer)
        return (2.0 * self.hidden_size * self.hidden_size + 3.0 * self.hidden_size
                + self.n_attention_params_per_layer + self.n_norm_params_per_layer + ffn)

    # -- KV cache ---------------------------------------------------------------------------
    def kv_bytes_per_token_per_layer(self, kv_precision: str) -> float:
        if kv_precision not in units.BYTES_PER_ELEMENT:
            raise SpecError(f"kv_precision = {kv_precision!r} is not one of "
                            f"{sorted(units.BYTES_PER_ELEMENT)}")
        b = units.BYTES_PER_ELEMENT[kv_precision]
        if self.is_mla:
            return kparams.mla_kv_bytes_per_token_per_layer(
                kv_lora_rank=self.kv_lora_rank, qk_rope_head_dim=self.qk_rope_head_dim,
                latent_bytes_per_elem=b, rope_bytes_per_elem=max(b, 2.0),
                # FlashMLA FP8 layout: four FP32 scales per 512-wide latent; MXFP4's 4.25 bits
                # per element already include its block scales
                scale_bytes_per_token=(4.0 * self.kv_lora_rank / 128.0 if kv_precision == "fp8"
                                       else 0.0))
        return kparams.gqa_kv_bytes_per_token_per_layer(
            n_kv_heads=self.n_kv_heads, head_dim_k=self.head_dim_qk, head_dim_v=self.head_dim_v,
            kv_bytes_per_elem=b)

    def check_context(self, isl: int, osl: int = 0) -> None:
        """SpecError when a request of ``isl`` prompt and ``osl`` output tokens does not fit
        the model's context (``max_position_embeddings``): it could not be served."""
        if isl + osl > self.max_position_embeddings:
            raise SpecError(f"isl + osl = {isl:,} + {osl:,} = {isl + osl:,} tokens exceeds the "
                            f"{self.max_position_embeddings:,}-token context of {self.name!r}; "
                            f"allowed isl + osl <= {self.max_position_embeddings:,}")

    def kv_bytes_per_token(self, kv_precision: str = "bf16") -> float:
        """KV bytes of one token over the full-attention layers (sliding-window layers are
        bounded separately, see :meth:`n_full_attention_layers`)."""
        return self.n_full_attention_layers * self.kv_bytes_per_token_per_layer(kv_precision)

    @property
    def n_full_attention_layers(self) -> int:
        return self.n_layers - self.n_sliding_window_layers

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["aliases"] = list(self.aliases)
        out["derived"] = {
            "total_params": self.total_params,
            "active_params": self.active_params(),
            "active_params_excluding_embedding": self.active_params(include_embedding=False),
            "kv_bytes_per_token_bf16": self.kv_bytes_per_token("bf16"),
            "kv_bytes_per_token_fp8": self.kv_bytes_per_token("fp8"),
            "mtp_params_per_module": self.n_mtp_params_per_module,
        }
        return out


def _quant_format(path, key: str, fmt: str | None, precision: str) -> str:
    """The stored format of weights in ``precision`` (the precision's default if unset);
    SpecError where the format is not one of that precision's."""
    allowed = QUANT_FORMATS.get(precision, ())
    if fmt is None:
        return allowed[0] if allowed else ""
    if fmt not in allowed:
        which = "experts" if key == "expert_format" else "weights"
        raise SpecError(f"{path}: {key} = {fmt!r} is not a format of the {which}' precision "
                        f"{precision!r}; allowed {list(allowed) or 'none (unquantised)'}")
    return fmt


def _parse_model(path: Path) -> ModelSpec:
    """Build a :class:`ModelSpec` from a file checked against
    :class:`~inference_factory.specs.schema.ModelFile`, plus the rules that tie keys together."""
    from . import schema_specs as schema
    from .schema_base import check

    f = check(schema.ModelFile, read_toml(path), str(path))
    a, at, ffn = f.architecture, f.attention, f.ffn
    kind = at.kind
    if kind == "mla":
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim"):
            if getattr(at, key) is None:
                raise SpecError(f"{path}: attention.{key} is missing (required for kind 'mla')")
    n_q, n_kv = at.n_q_heads, at.n_kv_heads
    kv_lora = at.kv_lora_rank or 0
    sw, swl = at.sliding_window or 0, at.sliding_window_layers or 0
    if kind == "mla" and kv_lora <= 0:
        raise SpecError(f"{path}: attention.kv_lora_rank = {kv_lora} must be > 0 for kind 'mla'")
    if kind == "mla":
        for key in ("qk_nope_head_dim", "qk_rope_head_dim"):
            if getattr(at, key) <= 0:
                raise SpecError(f"{path}: attention.{key} = {getattr(at, key)} must be an "
                                "integer >= 1 for kind 'mla' (query/key head = non-rotary + "
                                "rotary part)")
        if at.qk_nope_head_dim + at.qk_rope_head_dim != at.head_dim_qk:
            raise SpecError(f"{path}: attention.qk_nope_head_dim + qk_rope_head_dim = "
                            f"{at.qk_nope_head_dim} + {at.qk_rope_head_dim} must equal "
                            f"head_dim_qk = {at.head_dim_qk} for kind 'mla'")
    if kind != "mla" and n_q % n_kv:
        raise SpecError(f"{path}: attention.n_kv_heads = {n_kv} must divide n_q_heads = {n_q}")
    if swl > a.n_layers or (swl > 0) != (sw > 0):
        raise SpecError(f"{path}: attention.sliding_window_layers = {swl} must be 0..n_layers "
                        f"and set together with sliding_window")
    n_dense = ffn.dense_layers
    if n_dense > 0 and ffn.dense_intermediate_size is None:
        raise SpecError(f"{path}: ffn.dense_intermediate_size is missing (required when "
                        f"dense_layers > 0)")
    if n_dense > 0 and ffn.dense_intermediate_size <= 0:
        raise SpecError(f"{path}: ffn.dense_intermediate_size = {ffn.dense_intermediate_size} "
                        f"must be an integer >= 1 when dense_layers = {n_dense} > 0 "
                        "(0 only for a model without dense FFN layers)")
    if n_dense > a.n_layers:
        raise SpecError(f"{path}: ffn.dense_layers = {n_dense} exceeds n_layers = {a.n_layers}")
    moe = f.moe
    if moe is None and n_dense < a.n_layers:
        raise SpecError(f"{path}: moe table is missing (required): {a.n_layers - n_dense} layers "
                        "have no dense FFN")
    if moe is not None and moe.experts_per_token > moe.n_routed_experts:
        raise SpecError(f"{path}: moe.experts_per_token = {moe.experts_per_token} exceeds "
                        f"n_routed_experts = {moe.n_routed_experts}")
    wprec, eprec = f.weight_precision, f.expert_precision or f.weight_precision
    wfmt = _quant_format(path, "weight_format", f.weight_format, wprec)
    efmt = _quant_format(path, "expert_format", f.expert_format
                         or (wfmt if eprec == wprec and wfmt else None), eprec)
    return ModelSpec(
        name=f.name, hf_repo=f.hf_repo, source=f.source, weight_precision=wprec,
        expert_precision=eprec, weight_format=wfmt, expert_format=efmt,
        n_layers=a.n_layers, hidden_size=a.hidden_size, vocab_size=a.vocab_size,
        tied_embeddings=a.tied_embeddings, max_position_embeddings=a.max_position_embeddings,
        attention_kind=kind, n_q_heads=n_q, n_kv_heads=n_kv, head_dim_qk=at.head_dim_qk,
        head_dim_v=at.head_dim_v, q_lora_rank=at.q_lora_rank or 0, kv_lora_rank=kv_lora,
        qk_nope_head_dim=at.qk_nope_head_dim or 0, qk_rope_head_dim=at.qk_rope_head_dim or 0,
        attention_bias=bool(at.bias), sliding_window_tokens=sw, n_sliding_window_layers=swl,
        n_dense_layers=n_dense, dense_intermediate_size=ffn.dense_intermediate_size or 0,
        n_routed_experts=moe.n_routed_experts if moe else 0,
        experts_per_token=moe.experts_per_token if moe else 0,
        n_shared_experts=moe.n_shared_experts if moe else 0,
        expert_intermediate_size=moe.expert_intermediate_size if moe else 0,
        expert_bias=bool(moe.expert_bias) if moe else False,
        n_mtp_modules=(f.mtp.modules or 0) if f.mtp else 0, aliases=tuple(f.aliases),
        path=str(path),
    )

