"""Tests of the strict spec loaders (hardware/, models/, configs/realism.toml).

Covers: every bundled file loads and is self-consistent; derived model quantities match the
reference values; realism constants load; bad input gives a one-line SpecError naming the
file, the key and the value; name/alias/path lookup; the INFERENCE_FACTORY_HARDWARE_DIR
override.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from inference_factory.engine.layer_mix import architecture
from inference_factory import units
from inference_factory.errors import SpecError
from inference_factory.specs.realism import TERMS, Realism, load_realism
from inference_factory.specs import (
    bundled_dir,
    data_dir,
    list_hardware,
    list_models,
    load_hardware,
)
# the public loader: the file's own rules and its attention kinds' (engine/attention)
from inference_factory import load_model

REPO = Path(__file__).resolve().parents[2]
HARDWARE_FILES = sorted((REPO / "hardware").glob("*.toml"))
MODEL_FILES = sorted((REPO / "models").glob("*.toml"))


def _one_line(msg: str) -> None:
    assert msg, "SpecError message is empty"
    assert "\n" not in msg and "\r" not in msg, f"message is not one line: {msg!r}"


# ============================================================================================
# 1. every bundled file loads and is self-consistent
# ============================================================================================


def test_bundled_folders_are_not_empty():
    assert len(HARDWARE_FILES) >= 10
    assert len(MODEL_FILES) >= 10
    assert list_hardware(REPO / "hardware") == sorted(p.stem for p in HARDWARE_FILES)
    assert list_models(REPO / "models") == sorted(p.stem for p in MODEL_FILES)


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=[p.stem for p in HARDWARE_FILES])
def test_hardware_file_loads(path):
    hw = load_hardware(path)
    assert hw.name == path.stem
    # loading by name finds the same file
    assert load_hardware(path.stem, folder=path.parent).name == hw.name

    peak = hw.dense_flop_per_s
    assert peak.get("bf16", 0.0) > 0.0, "bf16 dense peak must be present and > 0"
    if "fp8" in peak and "bf16" in peak:
        assert peak["fp8"] >= peak["bf16"]
    if "fp4" in peak and "fp8" in peak:
        assert peak["fp4"] >= peak["fp8"]
    for prec, rate in peak.items():
        assert prec in units.PRECISIONS
        assert rate > 0 and math.isfinite(rate)
        assert hw.flop_per_s(prec) == rate

    for prec, measured in hw.measured_matmul_flop_per_s.items():
        assert prec in peak, f"measured {prec} without a dense peak"
        assert 0 < measured <= peak[prec], f"measured {prec} matmul exceeds dense peak"

    for value in (hw.hbm_capacity_bytes, hw.hbm_bw_bytes_per_s, hw.scale_up_bw_bytes_per_s,
                  hw.scale_out_bw_bytes_per_s, hw.tdp_w, hw.host_dram_capacity_bytes,
                  hw.host_dram_bw_bytes_per_s, hw.nvme_capacity_bytes, hw.nvme_bw_bytes_per_s):
        assert value > 0 and math.isfinite(value)
    assert hw.scale_up_domain_gpus >= 1 and hw.gpus_per_node >= 1

    # sources: non-empty, at least the compute and memory sections are sourced
    assert hw.sources, "sources table is empty"
    assert {"compute", "memory"} <= set(hw.sources), sorted(hw.sources)
    assert all(isinstance(v, str) and v.strip() for v in hw.sources.values())


@pytest.mark.parametrize("path", MODEL_FILES, ids=[p.stem for p in MODEL_FILES])
def test_model_file_loads(path):
    m = load_model(path)
    assert m.name == path.stem
    assert load_model(path.stem, folder=path.parent).name == m.name
    assert architecture(m).total_params > 0
    assert 0 < architecture(m).active_params() <= architecture(m).total_params
    assert architecture(m).active_params(include_embedding=False) < architecture(m).active_params()
    assert architecture(m).kv_bytes_per_token("bf16") > 0
    assert architecture(m).kv_bytes_per_token("fp8") < architecture(m).kv_bytes_per_token("bf16")
    assert m.weight_precision in units.PRECISIONS
    assert m.expert_precision in units.PRECISIONS


# ============================================================================================
# 2. derived model quantities, pinned to the reference
# ============================================================================================

# Values copied from shared/reference/models.csv (computed columns): total_params_b_computed,
# active_params_b_computed, kv_cache_bytes_per_token_bf16. They are copied, not read, because
# CI may not have ../shared. models.csv rounds parameter counts to 0.01 B.
# active convention per models.csv active_params_note: "computed active includes embedding+LM
# head" for all models except gpt-oss, whose active count EXCLUDES the input embedding
# (OpenAI convention).
#   model file stem: (total B, active B, active includes input embedding, KV B/token bf16)
MODELS_CSV = {
    "DeepSeek-V3": (671.03, 37.55, True, 70_272),
    "Kimi-K2": (1026.41, 32.86, True, 70_272),  # models.csv row Kimi-K2-Instruct
    "Qwen3-235B-A22B": (235.09, 22.19, True, 192_512),
    "Qwen3-30B-A3B": (30.53, 3.35, True, 98_304),
    "Llama-3.1-8B": (8.03, 8.03, True, 131_072),
    "Llama-3.1-70B": (70.55, 70.55, True, 327_680),
    "Llama-3.1-405B": (405.85, 405.85, True, 516_096),
    "Mixtral-8x7B": (46.70, 12.88, True, 131_072),  # models.csv row Mixtral-8x7B-v0.1
    "gpt-oss-120b": (116.83, 5.13, False, 36_864),  # full-attention layers only
    "gpt-oss-20b": (20.91, 3.61, False, 24_576),  # full-attention layers only
}
PARAM_RTOL = 0.005  # 0.5%: models.csv rounds to 0.01 B


@pytest.mark.parametrize("name", sorted(MODELS_CSV))
def test_model_params_match_models_csv(name):
    total_b, active_b, incl_emb, _ = MODELS_CSV[name]
    m = load_model(name)
    assert architecture(m).total_params == pytest.approx(total_b * 1e9, rel=PARAM_RTOL)
    assert architecture(m).active_params(include_embedding=incl_emb) == pytest.approx(active_b * 1e9,
                                                                        rel=PARAM_RTOL)


@pytest.mark.parametrize("name", sorted(MODELS_CSV))
def test_model_kv_bytes_match_models_csv(name):
    kv_bf16 = MODELS_CSV[name][3]
    assert architecture(load_model(name)).kv_bytes_per_token("bf16") == kv_bf16


def test_deepseek_v3_pinned():
    # shared/reference/models.csv (computed columns)
    m = load_model("DeepSeek-V3")
    assert architecture(m).total_params == pytest.approx(671.03e9, rel=PARAM_RTOL)
    assert architecture(m).active_params(include_embedding=True) == pytest.approx(37.55e9, rel=PARAM_RTOL)
    # 61 x (512 latent + 64 rope) x 2 B (= ISCA'25 Table 1)
    assert architecture(m).kv_bytes_per_token("bf16") == 70_272
    assert architecture(m).kv_bytes_per_token_per_layer("bf16") == 1_152
    # FlashMLA FP8 format: 512 fp8 latent + 64 x 2 B bf16 rope + 4 x 4 B fp32 scales = 656 B
    assert architecture(m).kv_bytes_per_token_per_layer("fp8") == 656
    assert architecture(m).kv_bytes_per_token("fp8") == 40_016 == 656 * 61


def test_llama_3_1_405b_kv():
    # shared/reference/models.csv (computed columns): 2 x 126 x 8 x 128 x 2 B
    assert architecture(load_model("Llama-3.1-405B")).kv_bytes_per_token("bf16") == 516_096


def test_gpt_oss_120b_pinned():
    # shared/reference/models.csv (computed columns); active EXCLUDES the input embedding
    m = load_model("gpt-oss-120b")
    assert architecture(m).total_params == pytest.approx(116.83e9, rel=PARAM_RTOL)
    assert architecture(m).active_params(include_embedding=False) == pytest.approx(5.13e9, rel=PARAM_RTOL)
    # models.csv note: "incl. embedding = 5.71B"
    assert architecture(m).active_params(include_embedding=True) == pytest.approx(5.71e9, rel=PARAM_RTOL)


def test_gpt_oss_20b_active_including_embedding():
    # shared/reference/models.csv active_params_note: "incl. embedding = 4.19B"
    m = load_model("gpt-oss-20b")
    assert architecture(m).active_params(include_embedding=True) == pytest.approx(4.19e9, rel=PARAM_RTOL)


def test_llama_2_7b_total():
    # HF meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters (safetensors metadata)
    m = load_model("Llama-2-7B")
    assert architecture(m).total_params == pytest.approx(6_738_415_616, rel=0.001)
    assert architecture(m).total_params == pytest.approx(6.74e9, rel=0.001)
    assert not m.is_moe
    assert architecture(m).active_params() == architecture(m).total_params


# ============================================================================================
# 3. realism
# ============================================================================================

FRACTION_FIELDS = ("default_large_gemm_frac", "attention_compute_frac", "attention_hbm_frac",
                   "gemm_hbm_frac", "scale_up_frac", "scale_out_frac", "runtime_reserve_frac")


def test_load_realism_bundled():
    r = load_realism()
    assert isinstance(r, Realism)
    assert Path(r.source) == data_dir("configs") / "realism.toml"
    assert Path(r.source).is_file()
    assert not r.is_ideal
    for f in FRACTION_FIELDS:
        v = getattr(r, f)
        assert 0 < v <= 1, f"{f} = {v} not in (0, 1]"
    assert r.tile_m_tokens >= 0
    assert r.scale_up_latency_s >= 0 and r.scale_out_latency_s >= 0
    assert r.per_layer_overhead_s >= 0


def test_realism_ideal():
    r = Realism.ideal()
    assert r.is_ideal is True
    assert not any(getattr(r, t) for t in TERMS)
    hw = load_hardware("H100-SXM")
    assert r.large_gemm_frac(hw, "bf16") == 1.0
    assert r.attn_compute_frac == r.attn_hbm_frac == r.weight_hbm_frac == 1.0
    assert r.up_frac == r.out_frac == 1.0
    assert r.tile_m == r.up_latency_s == r.out_latency_s == r.layer_overhead_s == 0.0
    assert r.reserve_frac == 0.0


def test_realism_default_fractions_in_range():
    r = load_realism()
    for f in FRACTION_FIELDS:
        assert 0 < getattr(r, f) <= 1
    assert load_realism().without("gemm").gemm is False
    with pytest.raises(SpecError) as ei:
        load_realism().without("nope")
    assert "'nope'" in str(ei.value)
    _one_line(str(ei.value))


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=[p.stem for p in HARDWARE_FILES])
def test_realism_large_gemm_frac_in_range(path):
    r, hw = load_realism(), load_hardware(path)
    for prec in hw.dense_flop_per_s:
        assert 0 < r.large_gemm_frac(hw, prec) <= 1


# ============================================================================================
# 4. bad input
# ============================================================================================

H100_TEXT = (REPO / "hardware" / "H100-SXM.toml").read_text()
LLAMA8_TEXT = (REPO / "models" / "Llama-3.1-8B.toml").read_text()


def _write(tmp_path: Path, stem: str, text: str) -> Path:
    p = tmp_path / f"{stem}.toml"
    p.write_text(text)
    return p


def _replace(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"fixture text {old!r} not found exactly once"
    return text.replace(old, new)


def _spec_error(loader, path: Path) -> str:
    with pytest.raises(SpecError) as ei:
        loader(path)
    msg = str(ei.value)
    _one_line(msg)
    assert str(path) in msg, f"file path missing from {msg!r}"
    return msg


MEMORY_BLOCK = "[memory]\nhbm_capacity_gb = 80\nhbm_bandwidth_gb_per_s = 3350\n"

# (id, edit, substrings the message must contain)
HARDWARE_BAD = [
    ("unknown_top_level_key",
     lambda t: "bogus_key = 1\n" + t,
     ["bogus_key", "is not a known key", "allowed:", "'vendor'"]),
    ("unknown_compute_key",
     lambda t: _replace(t, "fp8_tflops = 1979\n", "fp8_tflops = 1979\nint8_tops = 1979\n"),
     ["compute.int8_tops", "is not a known key", "'bf16_tflops'"]),
    ("negative_capacity",
     lambda t: _replace(t, "hbm_capacity_gb = 80", "hbm_capacity_gb = -80"),
     ["memory.hbm_capacity_gb", "= -80", "must be a finite number in (0, 100000]"]),
    ("capacity_wrong_type",
     lambda t: _replace(t, "hbm_capacity_gb = 80", 'hbm_capacity_gb = "80"'),
     ["memory.hbm_capacity_gb", "= '80'", "must be a finite number"]),
    ("bool_for_number",
     lambda t: _replace(t, "hbm_capacity_gb = 80", "hbm_capacity_gb = true"),
     ["memory.hbm_capacity_gb", "= True", "must be a finite number"]),
    ("missing_memory_table",
     lambda t: _replace(t, MEMORY_BLOCK, ""),
     ["memory", "is missing (required)"]),
    ("missing_required_key",
     lambda t: _replace(t, "hbm_bandwidth_gb_per_s = 3350\n", ""),
     ["memory.hbm_bandwidth_gb_per_s", "is missing (required)"]),
    ("missing_top_level_key",
     lambda t: _replace(t, 'vendor = "NVIDIA"\n', ""),
     ["vendor", "is missing (required)"]),
    ("zero_fp8_peak",
     lambda t: _replace(t, "fp8_tflops = 1979", "fp8_tflops = 0"),
     ["compute.fp8_tflops", "= 0", "must be a finite number in (0, "]),
    ("int_key_as_float",
     lambda t: _replace(t, "domain_gpus = 8", "domain_gpus = 8.5"),
     ["scale_up.domain_gpus", "= 8.5", "must be an integer"]),
    ("measured_without_peak",
     lambda t: _replace(t, "bf16_matmul_tflops = 794.5\n",
                        "bf16_matmul_tflops = 794.5\nfp4_matmul_tflops = 100\n"),
     ["measured.fp4_matmul_tflops", "fp4_tflops"]),
    ("empty_sources",
     lambda t: t[: t.index("[sources]")] + "[sources]\n" + t[t.index("[notes]"):],
     ["sources", "must not be empty"]),
    ("source_not_string",
     lambda t: _replace(t, "[sources]\n", "[sources]\nextra = 3\n"),
     ["sources.extra", "= 3", "must be a string"]),
]


@pytest.mark.parametrize("edit,expect", [(e, x) for _, e, x in HARDWARE_BAD],
                         ids=[i for i, _, _ in HARDWARE_BAD])
def test_bad_hardware_file(tmp_path, edit, expect):
    path = _write(tmp_path, "H100-SXM", edit(H100_TEXT))
    msg = _spec_error(load_hardware, path)
    for part in expect:
        assert part in msg, f"{part!r} missing from {msg!r}"


def test_bad_hardware_invalid_toml(tmp_path):
    path = _write(tmp_path, "H100-SXM", _replace(H100_TEXT, "hbm_capacity_gb = 80",
                                                  "hbm_capacity_gb 80"))
    msg = _spec_error(load_hardware, path)
    assert "not valid TOML" in msg
    assert re.search(r"line \d+", msg), msg


MODEL_BAD = [
    ("unknown_top_level_key",
     lambda t: "colour = \"red\"\n" + t,
     ["colour", "is not a known key", "'hf_repo'"]),
    ("unknown_attention_key",
     lambda t: _replace(t, "kind = \"gqa\"\n", "kind = \"gqa\"\nrotary = 1\n"),
     ["attention.rotary", "is not a known key"]),
    ("bad_kind",
     lambda t: _replace(t, 'kind = "gqa"', 'kind = "xyz"'),
     ["attention.kind", "= 'xyz'", "is not one of", "'gqa'", "'mha'", "'mla'"]),
    ("kv_heads_not_dividing",
     lambda t: _replace(t, "n_kv_heads = 8", "n_kv_heads = 5"),
     ["attention.n_kv_heads", "= 5", "n_q_heads = 32"]),
    ("negative_layers",
     lambda t: _replace(t, "n_layers = 32", "n_layers = -32"),
     ["architecture.n_layers", "= -32", "must be an integer in [1, "]),
    ("layers_wrong_type",
     lambda t: _replace(t, "n_layers = 32", 'n_layers = "32"'),
     ["architecture.n_layers", "= '32'", "must be an integer"]),
    ("missing_required_key",
     lambda t: _replace(t, "hidden_size = 4096\n", ""),
     ["architecture.hidden_size", "is missing (required)"]),
    ("bad_weight_precision",
     lambda t: _replace(t, 'weight_precision = "bf16"', 'weight_precision = "int3"'),
     ["weight_precision", "= 'int3'", "is not one of"]),
    ("dense_layers_exceed_layers",
     lambda t: _replace(t, "dense_layers = 32", "dense_layers = 33"),
     ["ffn.dense_layers", "= 33", "n_layers = 32"]),
    ("missing_moe_table_for_moe_layers",
     lambda t: _replace(t, "dense_layers = 32", "dense_layers = 30"),
     ["moe", "table is missing (required)"]),
    ("missing_attention_table",
     lambda t: t[: t.index("[attention]")] + t[t.index("[ffn]"):],
     ["attention", "is missing (required)"]),
]


@pytest.mark.parametrize("edit,expect", [(e, x) for _, e, x in MODEL_BAD],
                         ids=[i for i, _, _ in MODEL_BAD])
def test_bad_model_file(tmp_path, edit, expect):
    path = _write(tmp_path, "Llama-3.1-8B", edit(LLAMA8_TEXT))
    msg = _spec_error(load_model, path)
    for part in expect:
        assert part in msg, f"{part!r} missing from {msg!r}"


def test_bad_model_invalid_toml(tmp_path):
    path = _write(tmp_path, "Llama-3.1-8B", _replace(LLAMA8_TEXT, "[ffn]", "[ffn"))
    msg = _spec_error(load_model, path)
    assert "not valid TOML" in msg


def test_unknown_key_message_names_value(tmp_path):
    path = _write(tmp_path, "H100-SXM", "bogus_key = 12345\n" + H100_TEXT)
    msg = _spec_error(load_hardware, path)
    assert "12345" in msg


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_non_finite_value_rejected(tmp_path, value):
    path = _write(tmp_path, "H100-SXM", _replace(H100_TEXT, "hbm_capacity_gb = 80",
                                                  f"hbm_capacity_gb = {value}"))
    msg = _spec_error(load_hardware, path)
    assert "memory.hbm_capacity_gb" in msg


# -- lookup by name, alias, path ------------------------------------------------------------


def test_unknown_hardware_name_lists_available():
    with pytest.raises(SpecError) as ei:
        load_hardware("nonexistent")
    msg = str(ei.value)
    _one_line(msg)
    assert "'nonexistent'" in msg
    assert "available" in msg and "H100-SXM" in msg and "MI300X" in msg


def test_unknown_model_name_lists_available():
    with pytest.raises(SpecError) as ei:
        load_model("GPT-5")
    msg = str(ei.value)
    _one_line(msg)
    assert "'GPT-5'" in msg and "DeepSeek-V3" in msg


@pytest.mark.parametrize("alias,expected", [
    ("h800", "H800-SXM"), ("H800", "H800-SXM"), ("h100 sxm", "H100-SXM"),
    ("h100-sxm", "H100-SXM"), ("MI355", "MI355X"), ("gb200-nvl72", "GB200"),
])
def test_hardware_alias_case_insensitive(alias, expected):
    assert load_hardware(alias).name == expected


@pytest.mark.parametrize("alias,expected", [
    ("deepseek-r1", "DeepSeek-V3"), ("DEEPSEEK-V3", "DeepSeek-V3"),
    ("kimi-k2-instruct", "Kimi-K2"), ("llama-3-70b", "Llama-3.1-70B"),
    ("mixtral-8x7b-v0.1", "Mixtral-8x7B"),
])
def test_model_alias_case_insensitive(alias, expected):
    assert load_model(alias).name == expected


@pytest.mark.parametrize("alias,expected", [
    ("deepseek-ai/DeepSeek-R1", "DeepSeek-V3"), ("openai/gpt-oss-120b", "gpt-oss-120b"),
])
def test_model_alias_with_slash(alias, expected):
    assert load_model(alias).name == expected


def test_missing_file_path(tmp_path):
    missing = tmp_path / "no-such-gpu.toml"
    with pytest.raises(SpecError) as ei:
        load_hardware(missing)
    msg = str(ei.value)
    _one_line(msg)
    assert str(missing) in msg and "not found" in msg
    with pytest.raises(SpecError) as ei:
        load_model(str(tmp_path / "no-such-model.toml"))
    assert str(tmp_path / "no-such-model.toml") in str(ei.value)


def test_non_string_name():
    with pytest.raises(SpecError) as ei:
        load_hardware(42)
    _one_line(str(ei.value))
    assert "42" in str(ei.value)


def test_flop_per_s_missing_precision():
    hw = load_hardware("H100-SXM")
    with pytest.raises(SpecError) as ei:
        hw.flop_per_s("fp4")
    msg = str(ei.value)
    _one_line(msg)
    assert "'fp4'" in msg and "'H100-SXM'" in msg
    assert "['bf16', 'fp16', 'fp8']" in msg


# ============================================================================================
# 5. INFERENCE_FACTORY_HARDWARE_DIR
# ============================================================================================


def test_hardware_dir_env_var(tmp_path, monkeypatch):
    text = _replace(H100_TEXT, 'name = "H100-SXM"', 'name = "My-GPU"')
    text = _replace(text, 'aliases = ["H100", "H100-SXM5", "H100 SXM", "H100-80GB"]',
                    'aliases = ["MyAlias"]')
    _write(tmp_path, "My-GPU", text)
    monkeypatch.setenv("INFERENCE_FACTORY_HARDWARE_DIR", str(tmp_path))

    assert data_dir("hardware") == tmp_path
    # the user's folder comes first on a search path; the bundled specs stay visible
    assert "My-GPU" in list_hardware() and "H100-SXM" in list_hardware()
    hw = load_hardware("my-gpu")
    assert hw.name == "My-GPU"
    assert Path(hw.path).parent == tmp_path
    assert load_hardware("myalias").name == "My-GPU"
    assert Path(load_hardware("H100-SXM").path).parent == bundled_dir("hardware")
    # a user's file shadows a bundled one of the same alias
    shadow = _replace(H100_TEXT, 'name = "H100-SXM"', 'name = "H100-custom"')
    _write(tmp_path, "H100-custom", shadow)
    assert load_hardware("H100").name == "H100-custom"
    with pytest.raises(SpecError) as ei:
        load_hardware("nope")
    assert "'My-GPU'" in str(ei.value) and str(tmp_path) in str(ei.value)
    # an explicit folder still wins over the environment
    assert "H100-SXM" in list_hardware(REPO / "hardware")

    monkeypatch.delenv("INFERENCE_FACTORY_HARDWARE_DIR")
    assert "H100-SXM" in list_hardware()
    assert "My-GPU" not in list_hardware()


# ============================================================================================
# 6. name lookup is cached, and still sees every edit
# ============================================================================================


def _my_gpu(capacity_gb: int, alias: str) -> str:
    text = _replace(H100_TEXT, 'name = "H100-SXM"', 'name = "My-GPU"')
    text = _replace(text, 'aliases = ["H100", "H100-SXM5", "H100 SXM", "H100-80GB"]',
                    f'aliases = ["{alias}"]')
    return _replace(text, "hbm_capacity_gb = 80", f"hbm_capacity_gb = {capacity_gb}")


def _edit_in_place(path: Path, text: str) -> None:
    """Rewrite a file in place (same inode, the folder untouched), its modification time
    moved by a whole second so the edit does not hinge on the clock's tick."""
    before = path.stat().st_mtime_ns
    with open(path, "r+", encoding="utf-8") as fh:
        fh.seek(0)
        fh.truncate()
        fh.write(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_spec_lookup_cache_sees_edits_additions_and_removals(tmp_path, monkeypatch):
    from inference_factory.specs import catalog as specs
    # every stamp trusted at once: the cache is used from the first call, so each change
    # below must be noticed through the stamps alone
    monkeypatch.setattr(specs, "_RACY_NS", -1)
    monkeypatch.setenv("INFERENCE_FACTORY_HARDWARE_DIR", str(tmp_path))
    path = _write(tmp_path, "My-GPU", _my_gpu(80, "MyAlias"))
    assert load_hardware("my-gpu").hbm_capacity_bytes == 80 * units.GB
    assert load_hardware("myalias").name == "My-GPU"
    cached = specs._INDEX_CACHE[str(tmp_path)]
    assert load_hardware("My-GPU") is load_hardware("my-gpu")       # parsed once
    assert specs._INDEX_CACHE[str(tmp_path)] is cached              # not read again

    # an edit in place (the folder's stamp does not move): new values, new alias, old gone
    _edit_in_place(path, _my_gpu(96, "OtherAlias"))
    assert load_hardware("my-gpu").hbm_capacity_bytes == 96 * units.GB
    assert load_hardware("otheralias").hbm_capacity_bytes == 96 * units.GB
    with pytest.raises(SpecError, match="unknown hardware 'myalias'"):
        load_hardware("myalias")

    # a file added, then the first one removed
    text = _replace(H100_TEXT, 'name = "H100-SXM"', 'name = "New-GPU"')
    _write(tmp_path, "New-GPU", _replace(text, 'aliases = ["H100", "H100-SXM5", "H100 SXM", '
                                         '"H100-80GB"]', 'aliases = ["NewAlias"]'))
    assert load_hardware("new-gpu").name == "New-GPU"
    assert load_hardware("NEWALIAS").name == "New-GPU"
    path.unlink()
    with pytest.raises(SpecError, match="unknown hardware 'my-gpu'"):
        load_hardware("my-gpu")
    # the bundled folder behind it is unaffected
    assert load_hardware("H100").name == "H100-SXM"


def test_spec_lookup_cache_distrusts_recent_stamps(tmp_path, monkeypatch):
    """A file edited within one tick of the file system's clock keeps its timestamps: files
    younger than ``_RACY_NS`` are read again on every call. Simulated here by stamps without
    times (a clock that never moves): an in-place edit of the same size is still seen."""
    from inference_factory.specs import catalog as specs
    monkeypatch.setattr(specs, "_stamp", lambda st: (st.st_dev, st.st_ino, st.st_size))
    monkeypatch.setenv("INFERENCE_FACTORY_HARDWARE_DIR", str(tmp_path))
    path = _write(tmp_path, "My-GPU", _my_gpu(80, "MyAlias1"))
    assert load_hardware("my-gpu").hbm_capacity_bytes == 80 * units.GB
    assert load_hardware("myalias1").name == "My-GPU"
    with open(path, "r+", encoding="utf-8") as fh:            # same size, same inode
        fh.write(_my_gpu(96, "MyAlias2"))
    assert load_hardware("my-gpu").hbm_capacity_bytes == 96 * units.GB
    assert load_hardware("myalias2").name == "My-GPU"


def test_a_recent_spec_file_keeps_its_object_while_its_bytes_are_unchanged(tmp_path,
                                                                            monkeypatch):
    """A file too recent for its stamp to be trusted is compared by content: repeated
    loads return the same object (the engine keys its compiled programs on it), an edit of
    the same size under the same stamp gives a new one."""
    from inference_factory.specs import catalog as specs
    monkeypatch.setattr(specs, "_stamp", lambda st: (st.st_dev, st.st_ino, st.st_size))
    monkeypatch.setattr(specs, "_RACY_NS", 10**18)               # never settled
    monkeypatch.setenv("INFERENCE_FACTORY_HARDWARE_DIR", str(tmp_path))
    path = _write(tmp_path, "My-GPU", _my_gpu(80, "MyAlias1"))
    first = load_hardware("my-gpu")
    assert load_hardware("my-gpu") is first
    with open(path, "r+", encoding="utf-8") as fh:              # same size, same inode
        fh.write(_my_gpu(96, "MyAlias2"))
    again = load_hardware("my-gpu")
    assert again is not first and again.hbm_capacity_bytes == 96 * units.GB
    assert load_hardware("my-gpu") is again


def test_a_recent_spec_file_keeps_its_object_once_it_settles(tmp_path, monkeypatch):
    """A file loaded while too recent for its stamp, then loaded again once its stamp can be
    trusted, unchanged: the same object (the engine would otherwise trace its programs
    again after every edit)."""
    from inference_factory.specs import catalog as specs
    monkeypatch.setenv("INFERENCE_FACTORY_HARDWARE_DIR", str(tmp_path))
    _write(tmp_path, "My-GPU", _my_gpu(80, "MyAlias1"))
    monkeypatch.setattr(specs, "_RACY_NS", 10**18)               # not settled yet
    first = load_hardware("my-gpu")
    assert load_hardware("my-gpu") is first
    monkeypatch.setattr(specs, "_RACY_NS", -1)                   # settled from now on
    assert load_hardware("my-gpu") is first
    assert load_hardware("my-gpu") is first


def test_realism_variants_are_one_object_each():
    """The engine keys its compiled one-point programs on the realism object: the same
    variant asked for twice is the same object, in any order of its terms."""
    from inference_factory.specs.realism import TERMS, Realism, load_realism
    base = load_realism()
    a, b = TERMS[0], TERMS[-1]
    assert base.without(a, b) is base.without(b, a) is base.without(a, b, a)
    assert base.without(a) is not base.without(b)
    assert Realism.ideal() is Realism.ideal()
    assert not any(getattr(Realism.ideal(), t) for t in TERMS)

