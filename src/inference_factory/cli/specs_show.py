"""The spec commands: ``hardware list|show`` and ``models list|show`` (vendor units for
display; the specs layer loads and checks the files)."""

from __future__ import annotations


import click

from .. import units
from ..errors import SpecError
from ..output.tables import fit_lines
from ..specs import HardwareSpec, ModelSpec, list_hardware, list_models, load_hardware, load_model
from .text import _chosen_format, _dump_json, _format_option, _g, _kv, _one_line, _render, _table


# --------------------------------------------------------------------------------------------
# hardware
# --------------------------------------------------------------------------------------------


@click.group("hardware")
def hardware_group() -> None:
    """List and inspect accelerator specs."""


@hardware_group.command("list")
@_format_option
def hardware_list(fmt: str | None, as_json: bool) -> None:
    """Accelerators on the search path: key figures (vendor units) and a description."""
    rows: list[dict] = []
    for name in list_hardware():
        try:
            hw = load_hardware(name)
        except SpecError as exc:     # one broken file does not hide the others
            rows.append({"name": name, "description": _unloadable(exc)})
            continue
        tf = {p: hw.dense_flop_per_s.get(p, float("nan")) / units.TFLOP
              for p in ("bf16", "fp8", "fp4")}
        rows.append({"name": hw.name, "vendor": hw.vendor,
                     "hbm_gb": hw.hbm_capacity_bytes / units.GB,
                     "hbm_tb_per_s": hw.hbm_bw_bytes_per_s / units.TB,
                     **{f"{p}_tflop_per_s": v for p, v in tf.items()},
                     "scale_up_gpus": hw.scale_up_domain_gpus,
                     "rental_usd_per_gpu_hour": hw.price.get("rental_usd_per_gpu_hour",
                                                             float("nan")),
                     "description": hw.description, "file": hw.path})
    keys = ["name", "vendor", "hbm_gb", "hbm_tb_per_s", "bf16_tflop_per_s", "fp8_tflop_per_s",
            "fp4_tflop_per_s", "scale_up_gpus", "rental_usd_per_gpu_hour", "description", "file"]
    rows = [{k: r.get(k) for k in keys} for r in rows]
    fmt = _chosen_format(fmt, as_json)
    if fmt in ("table", "markdown"):      # no pandas here: 'hardware list' starts fast
        rows = [{k: v for k, v in r.items() if k != "file"} for r in rows]
    click.echo(_render(rows, fmt, human=True))


def _unloadable(exc: SpecError) -> str:
    """The listing's cell for a spec file that does not load: the reason, one line."""
    return "NOT LOADABLE: " + _one_line(str(exc)).split(": ", 1)[-1]


def _hardware_lines(hw: HardwareSpec) -> list[str]:
    lines = [f"{hw.name}  ({hw.vendor})", f"  {hw.description}"]
    head = []
    if hw.aliases:
        head.append(("aliases", ", ".join(hw.aliases)))
    head.append(("file", hw.path))
    lines += _kv(head)

    lines.append("")
    lines.append("compute (dense tensor-core peak)")
    lines += _kv((p, f"{_g(v / units.TFLOP)} TFLOP/s") for p, v in hw.dense_flop_per_s.items())
    if hw.measured_matmul_flop_per_s:
        lines.append("measured matmul")
        lines += _kv((p, f"{_g(v / units.TFLOP)} TFLOP/s "
                         f"({_g(100.0 * v / hw.dense_flop_per_s[p], 3)}% of peak)")
                     for p, v in hw.measured_matmul_flop_per_s.items())

    lines.append("")
    lines.append("memory and interconnect")
    lines += _kv([
        ("HBM capacity", f"{_g(hw.hbm_capacity_bytes / units.GB)} GB"),
        ("HBM bandwidth", f"{_g(hw.hbm_bw_bytes_per_s / units.GB)} GB/s"),
        ("scale-up bandwidth", f"{_g(hw.scale_up_bw_bytes_per_s / units.GB)} GB/s per GPU, "
                               "one direction"),
        ("scale-up domain", f"{hw.scale_up_domain_gpus} GPUs"),
        ("scale-out bandwidth", f"{_g(hw.scale_out_bw_bytes_per_s / units.GBIT)} Gbit/s per GPU"),
        ("TDP", f"{_g(hw.tdp_w)} W"),
    ])

    tag = " (assumed)" if hw.node_values_assumed else ""
    lines.append("")
    lines.append("node" + tag)
    lines += _kv([
        ("GPUs per node", f"{hw.gpus_per_node}"),
        ("host DRAM", f"{_g(hw.host_dram_capacity_bytes / units.GB)} GB{tag}"),
        ("host DRAM -> GPU", f"{_g(hw.host_dram_bw_bytes_per_s / units.GB)} GB/s per GPU{tag}"),
        ("NVMe", f"{_g(hw.nvme_capacity_bytes / units.TB)} TB{tag}"),
        ("NVMe bandwidth", f"{_g(hw.nvme_bw_bytes_per_s / units.GB)} GB/s per node{tag}"),
    ])

    lines.append("")
    lines.append("price")
    pr = hw.price
    price_rows = []
    for key, label, unit in (("rental_usd_per_gpu_hour", "rental", "USD/GPU-hour"),
                             ("tco_usd_per_gpu_hour", "TCO", "USD/GPU-hour"),
                             ("capex_usd_per_gpu", "capex", "USD/GPU")):
        if key in pr:
            date_key = key.split("_usd")[0] + "_date"
            date = pr.get(date_key)
            price_rows.append((label, f"{_g(pr[key])} {unit}" + (f" ({date})" if date else "")))
    lines += _kv(price_rows) if price_rows else ["  (none listed)"]

    for title, table in (("sources", hw.sources), ("notes", hw.notes)):
        if table:
            lines.append("")
            lines.append(title)
            lines += _kv(table.items())
    return lines


@hardware_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the spec as JSON (SI units).")
def hardware_show(name: str, as_json: bool) -> None:
    """Show one accelerator (NAME: name, alias or path to a TOML file)."""
    hw = load_hardware(name)
    if as_json:
        _dump_json(hw.to_dict())
        return
    click.echo(fit_lines("\n".join(_hardware_lines(hw))))      # a long description wrapped


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------


@click.group("models")
def models_group() -> None:
    """List and inspect model architectures."""


def _kind(m: ModelSpec) -> str:
    return "MoE" if m.is_moe else "dense"


@models_group.command("list")
def models_list() -> None:
    """Bundled models: name, kind, total and active parameters (billions)."""
    rows = []
    for name in list_models():
        try:
            m = load_model(name)
        except SpecError as exc:     # one broken file does not hide the others
            rows.append((name, _unloadable(exc), "", "", ""))
            continue
        try:
            arch = _architecture(m)
        except SpecError as exc:
            rows.append((name, _unloadable(exc), "", "", ""))
            continue
        rows.append((m.name, _kind(m), _attention(m),
                     f"{arch.total_params / 1e9:.1f}", f"{arch.active_params() / 1e9:.1f}"))
    click.echo(_table(["NAME", "KIND", "ATTENTION", "TOTAL (B)", "ACTIVE (B)"], rows,
                      right=(3, 4)))


def _architecture(m: ModelSpec):
    """The model's counts and memory from its attention kinds (the engine: numpy loads here,
    not when the command line starts)."""
    from ..engine import architecture
    return architecture(m)


def _attention(m: ModelSpec) -> str:
    """The attention kinds of the layer mix, upper case (``MLA``; ``GDN+GQA`` for a hybrid)."""
    return "+".join(dict.fromkeys(grp.attention.upper() for grp in m.layer_mix))


def _model_lines(m: ModelSpec) -> list[str]:
    arch = _architecture(m)
    d = arch.derived()
    lines = [f"{m.name}  ({_kind(m)}, {_attention(m)})"]
    lines += _kv([("aliases", ", ".join(m.aliases) or "-"), ("hf repo", m.hf_repo),
                  ("file", m.path), ("source", m.source),
                  ("weight precision", m.weight_precision),
                  ("expert precision", m.expert_precision)])

    lines += ["", "architecture"]
    lines += _kv([("layers", str(m.n_layers)), ("hidden size", str(m.hidden_size)),
                  ("vocab size", str(m.vocab_size)),
                  ("tied embeddings", "yes" if m.tied_embeddings else "no"),
                  ("max position embeddings", str(m.max_position_embeddings))])

    lines += ["", "attention"]
    att = [("kind", m.attention_kind), ("query heads", str(m.n_q_heads)),
           ("KV heads", str(m.n_kv_heads)), ("head dim qk / v", f"{m.head_dim_qk} / {m.head_dim_v}"),
           ("bias", "yes" if m.attention_bias else "no")]
    att += arch.primary_kind.describe(m, arch.primary)
    if len({(grp.attention, grp.window, grp.params) for grp in m.layer_mix}) > 1:
        att.append(("layer mix", ", ".join(
            f"{grp.count} {grp.attention}" + (f" (window {grp.window})" if grp.window else "")
            + (" (" + ", ".join(f"{k} {v}" for k, v in grp.params) + ")" if grp.params else "")
            + f" + {grp.mlp}" for grp in m.layer_mix)))
    if m.n_sliding_window_layers:
        att += [("sliding window", f"{m.sliding_window_tokens} tokens on "
                                   f"{m.n_sliding_window_layers} of {m.n_layers} layers")]
    lines += _kv(att)

    lines += ["", "feed-forward"]
    ffn = [("dense layers", str(m.n_dense_layers))]
    if m.n_dense_layers:
        ffn.append(("dense intermediate size", str(m.dense_intermediate_size)))
    if m.is_moe:
        ffn += [("MoE layers", str(m.n_moe_layers)),
                ("routed experts", str(m.n_routed_experts)),
                ("experts per token", str(m.experts_per_token)),
                ("shared experts", str(m.n_shared_experts)),
                ("expert intermediate size", str(m.expert_intermediate_size))]
        if m.latent_hidden_size:
            ffn.append(("routed experts' latent width", f"{m.latent_hidden_size} (projected "
                        f"from and back to {m.hidden_size}; shared experts at {m.hidden_size})"))
    if m.n_mtp_modules:
        ffn.append(("MTP modules", str(m.n_mtp_modules)))
    lines += _kv(ffn)

    kv_note = (" (full-attention layers; windowed layers are bounded by the window)"
               if m.n_sliding_window_layers else "")
    lines += ["", "derived"]
    der = [("total params", f"{d['total_params'] / 1e9:.2f} B"),
           ("active params", f"{d['active_params'] / 1e9:.2f} B (incl. input embedding; "
                             f"{d['active_params_excluding_embedding'] / 1e9:.2f} B without)"),
           ("KV bytes/token bf16", f"{d['kv_bytes_per_token_bf16']:,.0f}{kv_note}"),
           ("KV bytes/token fp8", f"{d['kv_bytes_per_token_fp8']:,.0f}{kv_note}"),
           ("state bytes/sequence bf16", f"{d['state_bytes_per_sequence_bf16']:,.0f} "
                                         "(independent of context)")]
    if m.n_mtp_modules:
        der.append(("MTP params per module", f"{d['mtp_params_per_module'] / 1e9:.2f} B"))
    lines += _kv(der)
    return lines


@models_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the spec and derived counts as JSON.")
def models_show(name: str, as_json: bool) -> None:
    """Show one model (NAME: name, alias or path to a TOML file)."""
    m = load_model(name)
    if as_json:
        _dump_json(_architecture(m).to_dict())
        return
    click.echo(fit_lines("\n".join(_model_lines(m))))      # a long description wrapped


