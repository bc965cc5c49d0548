"""Model specs: a strict TOML loader into a frozen dataclass; parameter counts and KV bytes
per token are derived from the architecture here, never typed into a file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..kernels import hyper_connections as khc
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
class LayerGroup:
    """``count`` layers with attention of kind ``attention`` (a module of
    ``engine/attention``) over at most ``window`` tokens (0: the whole context) and a
    ``mlp`` feed-forward ("dense" or "moe")."""

    count: int
    attention: str
    window: int = 0
    mlp: str = "moe"
    #: the kind's own parameters for these layers, over ``[attention.params]``
    params: tuple[tuple[str, Any], ...] = ()


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
    #: the layer mix: groups of layers by attention kind, window and feed-forward kind
    layer_mix: tuple[LayerGroup, ...] = ()
    #: the kind's own parameters (``[attention.params]``), as (key, value) pairs
    attention_params: tuple[tuple[str, Any], ...] = ()
    #: residual streams of hyper-connections (DeepSeek-V4 mHC ``hc_mult``; 0 = none)
    hyper_connections: int = 0
    hyper_connection_sinkhorn_iters: int = 0
    #: width of the latent the routed experts run in (0 = none: they run at hidden_size)
    latent_hidden_size: int = 0

    def quant_format(self, precision: str, experts: bool = False) -> str:
        """Scaling format of weights served in ``precision``: the checkpoint's own format
        where it ships in that precision, else the precision's default (quantised from the
        checkpoint: FP8 per-tensor, NVFP4). The one place a precision becomes a format,
        whether it comes from the model file, an argument or a config."""
        stored = self.expert_precision if experts else self.weight_precision
        fmt = self.expert_format if experts else self.weight_format
        if precision == stored and fmt:
            return fmt
        if experts and precision == self.weight_precision and self.weight_format:
            # experts requantised to the precision of the checkpoint's other weights take
            # their scaling too (DeepSeek-V4's FP8 requant, sgl-project/DeepSeek-V4-Flash-FP8:
            # 128x128 blocks throughout), as a file declaring both in it would
            return self.weight_format
        return QUANT_FORMATS.get(precision, (precision,))[0]

    # -- structure ---------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def attention_param_keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.attention_params)

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers

    # -- parameters per component (attention's: its kind, engine/layer_mix.py) -----------
    @property
    def n_dense_ffn_params_per_layer(self) -> float:
        return kparams.swiglu_ffn_params(hidden_size=self.hidden_size,
                                         intermediate_size=self.dense_intermediate_size)

    @property
    def expert_hidden_size(self) -> int:
        """Width of the routed experts' input and output: the latent of a latent MoE, else
        ``hidden_size`` (what the expert GEMMs and the EP all-to-all carry)."""
        return self.latent_hidden_size or self.hidden_size

    @property
    def n_expert_params(self) -> float:
        """Parameters of one routed expert (at :attr:`expert_hidden_size`)."""
        if not self.is_moe:
            return 0.0
        return kparams.swiglu_ffn_params(hidden_size=self.expert_hidden_size,
                                         intermediate_size=self.expert_intermediate_size,
                                         bias=self.expert_bias)

    @property
    def n_shared_expert_params(self) -> float:
        """Parameters of one shared expert (always at ``hidden_size``; the same as a routed
        expert's unless the routed experts run in a latent)."""
        if not self.is_moe:
            return 0.0
        return kparams.swiglu_ffn_params(hidden_size=self.hidden_size,
                                         intermediate_size=self.expert_intermediate_size,
                                         bias=self.expert_bias)

    @property
    def n_latent_params_per_layer(self) -> float:
        """A latent MoE's down/up projections and latent norm, per MoE layer (0 without)."""
        return kparams.latent_moe_projection_params(hidden_size=self.hidden_size,
                                                    latent_size=self.latent_hidden_size)

    @property
    def n_router_params_per_layer(self) -> float:
        return float(self.hidden_size * self.n_routed_experts) if self.is_moe else 0.0

    @property
    def n_moe_non_routed_params_per_layer(self) -> float:
        """What every token of a MoE layer touches besides its routed experts: the router,
        the shared experts and a latent MoE's projections."""
        return (self.n_router_params_per_layer
                + self.n_shared_experts * self.n_shared_expert_params
                + self.n_latent_params_per_layer)

    @property
    def n_norm_params_per_layer(self) -> float:
        return 2.0 * self.hidden_size

    @property
    def n_hyper_connection_params_per_layer(self) -> float:
        if not self.hyper_connections:
            return 0.0
        return khc.mhc_params_per_layer(hidden_size=self.hidden_size,
                                        hc_mult=self.hyper_connections)

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

    def check_context(self, isl: int, osl: int = 0) -> None:
        """SpecError when a request of ``isl`` prompt and ``osl`` output tokens does not fit
        the model's context (``max_position_embeddings``): it could not be served."""
        if isl + osl > self.max_position_embeddings:
            raise SpecError(f"isl + osl = {isl:,} + {osl:,} = {isl + osl:,} tokens exceeds the "
                            f"{self.max_position_embeddings:,}-token context of {self.name!r}; "
                            f"allowed isl + osl <= {self.max_position_embeddings:,}")

    @property
    def n_full_attention_layers(self) -> int:
        """Layers without a sliding window, whatever their attention kind (what each kind
        keeps per token is its own: ``engine.architecture(m).memory_groups``)."""
        return self.n_layers - self.n_sliding_window_layers

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["aliases"] = list(self.aliases)
        out["layer_mix"] = [{**vars(grp), "params": dict(grp.params)} for grp in self.layer_mix]
        out["attention_params"] = dict(self.attention_params)
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
    kind = at.kind          # its own keys are checked by its module (engine/attention)
    n_q, n_kv = at.n_q_heads, at.n_kv_heads
    kv_lora = at.kv_lora_rank or 0
    sw, swl = at.sliding_window or 0, at.sliding_window_layers or 0
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
    if moe is None and n_dense < a.n_layers and not f.layers:   # [[layers]]: checked there
        raise SpecError(f"{path}: moe table is missing (required): {a.n_layers - n_dense} layers "
                        "have no dense FFN")
    if moe is not None and moe.experts_per_token > moe.n_routed_experts:
        raise SpecError(f"{path}: moe.experts_per_token = {moe.experts_per_token} exceeds "
                        f"n_routed_experts = {moe.n_routed_experts}")
    mix = _layer_mix(path, f, kind, n_dense, sw, swl)
    n_dense = sum(grp.count for grp in mix if grp.mlp == "dense")
    windows = [grp for grp in mix if grp.window]
    swl = sum(grp.count for grp in windows)
    sw = max((grp.window for grp in windows), default=0)
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
        latent_hidden_size=(moe.latent_hidden_size or 0) if moe else 0,
        n_mtp_modules=(f.mtp.modules or 0) if f.mtp else 0, aliases=tuple(f.aliases),
        path=str(path), layer_mix=mix,
        attention_params=tuple(sorted(at.params.items())),
        hyper_connections=a.hyper_connections or 0,
        hyper_connection_sinkhorn_iters=a.hyper_connection_sinkhorn_iters or 0,
    )


def _layer_mix(path, f, kind: str, n_dense: int, sw: int, swl: int) -> tuple[LayerGroup, ...]:
    """The file's ``[[layers]]`` groups (checked against the counts it gives elsewhere), or
    the mix its keys imply: ``ffn.dense_layers`` dense layers, the rest MoE (dense where the
    model has no [moe]); ``attention.sliding_window_layers`` of them windowed. Only counts
    matter to the engine, so which layers pair a window with a dense FFN is immaterial."""
    n = f.architecture.n_layers
    ffn_default = "moe" if f.moe is not None else "dense"
    if f.layers:
        mix = tuple(LayerGroup(count=grp.count, attention=grp.attention or kind,
                               window=grp.window or 0, mlp=grp.mlp or ffn_default,
                               params=tuple(sorted(grp.params.items())))
                    for grp in f.layers)
        total = sum(grp.count for grp in mix)
        if total != n:
            raise SpecError(f"{path}: layers counts sum to {total}; they must sum to "
                            f"architecture.n_layers = {n}")
        dense = sum(grp.count for grp in mix if grp.mlp == "dense")
        if n_dense and dense != n_dense:
            raise SpecError(f"{path}: layers give {dense} dense-FFN layers but "
                            f"ffn.dense_layers = {n_dense}; allowed: the same count")
        if dense and f.ffn.dense_intermediate_size in (None, 0):
            raise SpecError(f"{path}: ffn.dense_intermediate_size is missing (required when "
                            f"layers give {dense} dense-FFN layers)")
        if dense < n and f.moe is None:
            raise SpecError(f"{path}: moe table is missing (required): layers give "
                            f"{n - dense} MoE layers")
        return mix
    groups = []
    for window, count in ((0, n - swl), (sw, swl)):
        dense = min(count, max(n_dense - sum(g.count for g in groups if g.mlp == "dense"), 0))
        for mlp, c in (("dense", dense), (ffn_default, count - dense)):
            if c:
                groups.append(LayerGroup(count=c, attention=kind, window=window, mlp=mlp))
    return tuple(groups)

