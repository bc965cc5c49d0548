"""Hardware and model specs: strict TOML loaders into frozen dataclasses.

Validation happens here, once. A bad file gives a :class:`SpecError` whose one-line message
names the file, the key, the value and what is allowed. Derived quantities (parameter counts,
KV bytes per token) are computed from the architecture here, never typed into a file.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from . import units
from .errors import SpecError
from .kernels import params as kparams

# --------------------------------------------------------------------------------------------
# where spec folders live
# --------------------------------------------------------------------------------------------

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _PACKAGE_DIR.parents[1]


def bundled_dir(kind: str) -> Path:
    """The bundled ``hardware``, ``models`` or ``configs`` folder: the copy shipped inside the
    wheel (``inference_factory/_data/<kind>``), else the top-level folder of a source checkout."""
    both = _BUNDLED.get(kind)
    if both is None:
        shipped = _PACKAGE_DIR / "_data" / kind
        both = _BUNDLED[kind] = (shipped, os.fspath(shipped), _REPO_ROOT / kind)
    return both[0] if os.path.isdir(both[1]) else both[2]


#: kind -> (shipped folder, as a string, source checkout's folder): built once (a Path costs
#: microseconds; every spec lookup asks), the shipped one's presence checked on every call.
_BUNDLED: dict[str, tuple[Path, str, Path]] = {}


def data_dirs(kind: str) -> list[Path]:
    """The search path for ``kind``: the folders of ``INFERENCE_FACTORY_<KIND>_DIR``
    (``os.pathsep``-separated, first wins), then the bundled folder. A user's file shadows a
    bundled one of the same name or alias; every other bundled file stays visible."""
    env = os.environ.get(_ENV_VARS.get(kind) or f"INFERENCE_FACTORY_{kind.upper()}_DIR")
    user = [Path(p) for p in env.split(os.pathsep) if p] if env else []
    return user + [bundled_dir(kind)]


_ENV_VARS = {k: f"INFERENCE_FACTORY_{k.upper()}_DIR" for k in ("hardware", "models", "configs")}


def data_dir(kind: str) -> Path:
    """The first folder of :func:`data_dirs` (the user's, if any, else the bundled one)."""
    return data_dirs(kind)[0]


# --------------------------------------------------------------------------------------------
# strict TOML reading
# --------------------------------------------------------------------------------------------

_NUM = (int, float)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SpecError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not a UTF-8 text file (byte {exc.start}: {exc.reason})") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a folder, not a TOML file") from None


class _Table:
    """Accessor that checks keys, types and ranges of one TOML table."""

    def __init__(self, path: Path, raw: Mapping[str, Any], where: str = ""):
        self.path, self.raw, self.where, self.used = path, raw, where, set()

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _fail(self, key: str, msg: str) -> SpecError:
        return SpecError(f"{self.path}: {self._key(key)} {msg}")

    def get(self, key, kind, *, required=True, default=None, positive=False, allowed=None,
            minimum=None):
        self.used.add(key)
        if key not in self.raw:
            if required:
                raise self._fail(key, "is missing (required)")
            return default
        value = self.raw[key]
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, _NUM):
                raise self._fail(key, f"= {value!r} must be a number")
            value = float(value)
            if not math.isfinite(value):
                raise self._fail(key, f"= {value!r} must be a finite number")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self._fail(key, f"= {value!r} must be an integer")
        elif kind is bool:
            if not isinstance(value, bool):
                raise self._fail(key, f"= {value!r} must be true or false")
        elif kind is str:
            if not isinstance(value, str):
                raise self._fail(key, f"= {value!r} must be a string")
        elif kind is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self._fail(key, f"= {value!r} must be a list of strings")
        if positive and value <= 0:
            raise self._fail(key, f"= {value!r} must be > 0")
        if minimum is not None and value < minimum:
            raise self._fail(key, f"= {value!r} must be >= {minimum}")
        if allowed is not None and value not in allowed:
            raise self._fail(key, f"= {value!r} is not one of {sorted(allowed)}")
        return value

    def table(self, key, *, required=True) -> "_Table":
        self.used.add(key)
        if key not in self.raw:
            if required:
                raise self._fail(key, "table is missing (required)")
            return _Table(self.path, {}, self._key(key))
        value = self.raw[key]
        if not isinstance(value, dict):
            raise self._fail(key, f"= {value!r} must be a table")
        return _Table(self.path, value, self._key(key))

    def has(self, key) -> bool:
        return key in self.raw

    def strings(self, key) -> dict[str, str]:
        """A free-form table of string values (sources, notes)."""
        sub = self.table(key, required=False)
        for k, v in sub.raw.items():
            if not isinstance(v, str):
                raise SpecError(f"{self.path}: {sub._key(k)} = {v!r} must be a string")
        return dict(sub.raw)

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self.used)
        if unknown:
            key = unknown[0]
            raise self._fail(key, f"= {self.raw[key]!r} is not a known key; "
                                  f"allowed: {sorted(self.used)}")


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
    :class:`~inference_factory.schema.HardwareFile` (types, ranges, unknown keys), plus the
    rules that tie keys together."""
    from . import schema     # pydantic: imported when a spec is loaded, not with the CLI

    f = schema.check(schema.HardwareFile, _read_toml(path), str(path))
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
    )


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------


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


def _parse_model(path: Path) -> ModelSpec:
    """Build a :class:`ModelSpec` from a file checked against
    :class:`~inference_factory.schema.ModelFile`, plus the rules that tie keys together."""
    from . import schema

    f = schema.check(schema.ModelFile, _read_toml(path), str(path))
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
    if kind != "mla" and n_q % n_kv:
        raise SpecError(f"{path}: attention.n_kv_heads = {n_kv} must divide n_q_heads = {n_q}")
    if swl > a.n_layers or (swl > 0) != (sw > 0):
        raise SpecError(f"{path}: attention.sliding_window_layers = {swl} must be 0..n_layers "
                        f"and set together with sliding_window")
    n_dense = ffn.dense_layers
    if n_dense > 0 and ffn.dense_intermediate_size is None:
        raise SpecError(f"{path}: ffn.dense_intermediate_size is missing (required when "
                        f"dense_layers > 0)")
    if n_dense > a.n_layers:
        raise SpecError(f"{path}: ffn.dense_layers = {n_dense} exceeds n_layers = {a.n_layers}")
    moe = f.moe
    if moe is None and n_dense < a.n_layers:
        raise SpecError(f"{path}: moe table is missing (required): {a.n_layers - n_dense} layers "
                        "have no dense FFN")
    if moe is not None and moe.experts_per_token > moe.n_routed_experts:
        raise SpecError(f"{path}: moe.experts_per_token = {moe.experts_per_token} exceeds "
                        f"n_routed_experts = {moe.n_routed_experts}")
    return ModelSpec(
        name=f.name, hf_repo=f.hf_repo, source=f.source, weight_precision=f.weight_precision,
        expert_precision=f.expert_precision or f.weight_precision,
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


# --------------------------------------------------------------------------------------------
# lookup by name or path
# --------------------------------------------------------------------------------------------


#: A file or folder changed less than this long before it was read may change again within the
#: same tick of the file system's clock without its timestamps moving ("racy" timestamps, as in
#: git's index): what was read from it is not trusted on its stamp alone until it is older than
#: this. 2 s is the coarsest timestamp resolution in common use (FAT's modification time).
_RACY_NS = 2_000_000_000


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What identifies one version of a file or folder: inode and device (a file replaced by a
    rename is another file), modification and change times (the change time cannot be set
    back by ``touch`` or ``cp -p``; a folder's change when an entry is added, removed or
    renamed) and size."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _settled(st: os.stat_result, now_ns: int) -> bool:
    return now_ns - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS


@dataclass
class _FolderIndex:
    """The names and aliases of one spec folder, and the stamps they were read under."""
    stamp: tuple            # the folder's (a file added, removed or renamed changes it)
    files: tuple            # (path, stamp) of every *.toml file, sorted by name
    stems: dict[str, Path]  # lower-cased file stem -> file
    index: dict[str, Path]  # lower-cased stem or alias -> file (a stem wins over an alias)
    settled: bool           # no stamp was too recent to be trusted ("racy")


_INDEX_CACHE: dict[str, _FolderIndex] = {}


def _read_folder(folder: str, st: os.stat_result) -> _FolderIndex:
    now = time.time_ns()
    files, settled = [], _settled(st, now)
    with os.scandir(folder) as it:
        entries = sorted((e.name, e.path) for e in it if e.name.endswith(".toml"))
    for name, path in entries:
        try:
            fst = os.stat(path)
        except OSError:         # removed while listing: the folder's stamp has moved too
            continue
        files.append((path, _stamp(fst)))
        settled = settled and _settled(fst, now)
    paths = [Path(f) for f, _ in files]
    return _FolderIndex(stamp=_stamp(st), files=tuple(files),
                        stems={q.stem.lower(): q for q in paths}, index=_build_index(paths),
                        settled=settled)


def _files_unchanged(ix: _FolderIndex) -> bool:
    for path, stamp in ix.files:
        try:
            if _stamp(os.stat(path)) != stamp:
                return False
        except OSError:
            return False
    return True


def _folder_index(folder: str, st: os.stat_result, *, contents: bool) -> _FolderIndex:
    """The folder's index, read again when it may be stale. The folder's own stamp moves
    when a file is added, removed or renamed, so file names (stems) need only that; aliases
    live inside the files, so ``contents=True`` also checks every file's stamp (an edit in
    place moves only the file's). Stamps too recent to be trusted (:data:`_RACY_NS`) never
    are: the folder is read again on every call until it has settled."""
    ix = _INDEX_CACHE.get(folder)
    if (ix is None or not ix.settled or ix.stamp != _stamp(st)
            or (contents and not _files_unchanged(ix))):
        ix = _INDEX_CACHE[folder] = _read_folder(folder, st)
    return ix


def _build_index(files) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for p in files:
        out[p.stem.lower()] = p
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
            continue        # a broken file is reported when it is loaded, not while indexing
        for alias in raw.get("aliases", []) if isinstance(raw.get("aliases"), list) else []:
            if isinstance(alias, str):
                out.setdefault(alias.lower(), p)
    return out


def _resolve(name: str | os.PathLike, kind: str, folder: Path | None) -> Path:
    if not isinstance(name, (str, os.PathLike)):
        raise SpecError(f"{kind} name must be a string, got {name!r}")
    s = os.fspath(name)
    if s.endswith(".toml") or (os.sep in s and Path(s).exists()):
        p = Path(s)
        if not p.is_file():
            raise SpecError(f"{s}: {kind} file not found")
        return p
    folders = [Path(folder)] if folder is not None else data_dirs(kind)
    stats = []
    for f in folders:
        try:
            st = os.stat(f)
        except OSError:
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise SpecError(f"{f}: {kind} folder not found")
        stats.append(st)
    key = s.lower()
    for i, (f, st) in enumerate(zip(folders, stats)):
        if i == 0:
            # a file's stem wins over every alias, and the first folder over the others: a
            # stem hit there depends on the listing alone, not on the files' contents
            hit = _folder_index(os.fspath(f), st, contents=False).stems.get(key)
            if hit is not None:
                return hit
        hit = _folder_index(os.fspath(f), st, contents=True).index.get(key)
        if hit is not None:
            return hit
    names = sorted({p.stem for f in folders for p in f.glob("*.toml")})
    where = ", ".join(str(f) for f in folders)
    raise SpecError(f"unknown {kind.rstrip('s')} {s!r} in {where}; available: {names}")


_CACHE: dict[tuple, Any] = {}


def _cached(path: Path, parse):
    """``parse(path)``, once per version of the file (:func:`_stamp`, and the path it was
    reached by: a spec records its path). A file changed too recently for its stamp to tell
    it from its next edit (:data:`_RACY_NS`) is kept with the digest of its bytes, read before
    parsing and compared on each hit until it has settled: the same object while the bytes
    are the same (the engine keys its compiled programs on the spec objects), parsed again
    when they differ."""
    st = os.stat(path)
    key = (parse, os.fspath(path), _stamp(st))
    settled = _settled(st, time.time_ns())
    hit = _CACHE.get(key)
    if hit is not None and hit[1] is None:          # a settled version: its stamp tells it
        return hit[0]
    digest = (hashlib.sha256(Path(path).read_bytes()).digest()
              if hit is not None or not settled else None)
    if hit is not None and hit[1] == digest:        # the same bytes (now settled or not yet)
        _CACHE[key] = (hit[0], None if settled else digest)
        return hit[0]
    out = parse(path)
    _CACHE[key] = (out, None if settled else digest)
    return out


def load_hardware(name: str | os.PathLike, folder: str | os.PathLike | None = None) -> HardwareSpec:
    """Load a hardware spec by name, alias (case-insensitive) or path to a TOML file."""
    if isinstance(name, HardwareSpec):
        return name
    return _cached(_resolve(name, "hardware", folder), _parse_hardware)


def load_model(name: str | os.PathLike, folder: str | os.PathLike | None = None) -> ModelSpec:
    """Load a model spec by name, alias (case-insensitive) or path to a TOML file."""
    if isinstance(name, ModelSpec):
        return name
    return _cached(_resolve(name, "models", folder), _parse_model)


def _list(kind: str, folder) -> list[str]:
    folders = [Path(folder)] if folder is not None else data_dirs(kind)
    for f in folders:
        if not f.is_dir():
            raise SpecError(f"{f}: {kind} folder not found")
    return sorted({p.stem for f in folders for p in f.glob("*.toml")})


def list_hardware(folder: str | os.PathLike | None = None) -> list[str]:
    """Names of the hardware specs on the search path (or in ``folder``)."""
    return _list("hardware", folder)


def list_models(folder: str | os.PathLike | None = None) -> list[str]:
    """Names of the model specs on the search path (or in ``folder``)."""
    return _list("models", folder)
