"""Attention kinds behind one dispatcher (engine/attention): a new kind is one module and one
registry line, and the whole package (evaluate, bench, plan, memory and ``fits``) takes it.

The toy kind (``tests/engine/toy_span.py``): every query attends to a fixed span of
``span_tokens`` tokens held in a ring per sequence. The test model
(``tests/data/models/Toy-Span-8B.toml``) is Llama-3.1-8B (GQA, its primary kind) with 24 of
its 32 layers of the toy kind, their span a parameter of that ``[[layers]]`` group (512). Reference values are
independent hand computations from the model's shapes (Llama-3.1-8B: 8 KV heads x 128 x 2
(K and V) x 2 B = 4,096 B per token and layer at BF16).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import attention
from inference_factory.engine.layer_mix import architecture
from inference_factory.errors import SpecError

from . import toy_span

TOY = Path(__file__).resolve().parents[1] / "data" / "models" / "Toy-Span-8B.toml"
B_TOK = 8 * 128 * 2 * 2          # bytes per token and layer, BF16 K and V
SPAN = 512


@pytest.fixture(autouse=True)
def toy_kind():
    attention.register(toy_span.KIND)          # the one registry line
    yield
    attention.KINDS.pop("fixed_span", None)


def test_an_unregistered_kind_is_refused_in_one_line_naming_the_file():
    attention.KINDS.pop("fixed_span")
    with pytest.raises(SpecError) as e:
        inf.load_model(str(TOY))
    msg = str(e.value)
    assert str(TOY) in msg and "layers.attention = 'fixed_span' is not one of" in msg
    assert "'gqa'" in msg and "'mla'" in msg and "\n" not in msg


def test_the_layer_mix_and_memory_terms_come_from_the_kinds():
    arch = architecture(inf.load_model(str(TOY)))
    assert sorted((at.kind, at.window, at.params, n) for at, n in arch.groups()) == [
        ("fixed_span", 0, (("span_tokens", SPAN),), 24), ("gqa", 0, (), 8)]
    # context term: only the 8 GQA layers keep every token
    assert arch.kv_bytes_per_token("bf16") == 8 * B_TOK
    # per-sequence term: the 24 rings of 512 tokens
    assert arch.state_bytes_per_sequence("bf16") == 24 * SPAN * B_TOK
    # on one GPU of TP2 both split over 2 of the 8 KV heads
    L = np.array([100.0, 10_000.0])
    np.testing.assert_allclose(arch.sequence_bytes("bf16", L, 2),
                               (8 * B_TOK * L + 24 * SPAN * B_TOK) / 2, rtol=1e-12)
    # what a prefill instance sends for a 1,000-token prompt; a state snapshot in a prefix
    # cache counted in tokens of KV: 24 x 512 x B over 8 x B
    assert arch.prefix_bytes("bf16", 1000.0) == 8 * B_TOK * 1000 + 24 * SPAN * B_TOK
    assert arch.snapshot_tokens("bf16") == 24 * SPAN / 8
    # parameters: same projections as Llama-3.1-8B's attention, so the same totals
    llama = architecture(inf.load_model("Llama-3.1-8B"))
    assert arch.total_params == pytest.approx(llama.total_params, rel=1e-12)


def test_evaluate_costs_the_toy_layers_independently_of_context():
    ds = inf.evaluate(str(TOY), "H100-SXM", tp=1, batch_size=8, kv_len=[1024, 16384],
                      ideal=True, detail="ops")
    hbm = ds.decode_hbm_bytes_per_gpu.values
    # only the 8 GQA layers read more KV at longer context: 8 seqs x 15,360 tokens x 8 x B
    assert hbm[1] - hbm[0] == pytest.approx(8 * (16384 - 1024) * 8 * B_TOK, rel=1e-9)
    ops = list(ds.op.values)
    # the primary kind (GQA) names its ops plainly, the toy kind with its name first
    assert {"qkv", "attention", "o_proj"} <= set(ops)
    assert {"fixed_span_qkv", "fixed_span_attention", "fixed_span_o_proj"} <= set(ops)
    # the toy attention reads its 24 rings of 512 tokens per sequence, whatever the context
    t = ds.decode_op_time_s
    span_t = t.sel(op="fixed_span_attention").values
    assert span_t[0] == pytest.approx(span_t[1], rel=1e-12)
    assert t.sel(op="attention").values[1] > 2 * t.sel(op="attention").values[0]


def test_a_prefix_hit_restores_the_per_sequence_state():
    """Prefill with a cached prefix restores each group's cached tokens and, for the toy
    layers, one ring per sequence (the per-sequence term), at the tier's bandwidth."""
    hw = inf.load_hardware("H100-SXM")
    ds = inf.evaluate(str(TOY), hw, tp=1, prefill_batch_size=2, prompt_len=4096,
                      cache_hit_rate=0.5, cache_tier="dram")
    cached = 4096 * 0.5                      # a hit rate of 0.5 of a 4,096-token prompt
    restored = 2 * (cached * 8 * B_TOK + 24 * SPAN * B_TOK)
    assert float(ds.prefill_restore_s) == pytest.approx(restored / hw.host_dram_bw_bytes_per_s,
                                                        rel=1e-9)


def test_the_per_sequence_term_moves_fits(tmp_path):
    small = inf.evaluate(str(TOY), "H100-SXM", tp=1, batch_size=1, kv_len=1024)
    bigger = tmp_path / "Toy-Span-8B.toml"
    bigger.write_text(TOY.read_text().replace("span_tokens = 512", "span_tokens = 65536"))
    big = inf.evaluate(str(bigger), "H100-SXM", tp=1, batch_size=1, kv_len=1024)
    # 24 layers x (65,536 - 512) tokens x B more per sequence
    extra = 24 * (65536 - SPAN) * B_TOK
    assert float(big.kv_bytes_per_gpu - small.kv_bytes_per_gpu) == pytest.approx(extra,
                                                                                 rel=1e-12)
    assert int(big.max_batch_size) < int(small.max_batch_size) / 2
    # a batch that fits with the small ring does not with the big one
    b = int(small.max_batch_size)
    assert bool(inf.evaluate(str(TOY), "H100-SXM", tp=1, batch_size=b, kv_len=1024).fits)
    assert not bool(inf.evaluate(str(bigger), "H100-SXM", tp=1, batch_size=b,
                                 kv_len=1024).fits)


def test_bench_and_plan_take_the_new_kind_and_its_memory(tmp_path):
    ds = inf.bench(str(TOY), "H100-SXM", tp=1, isl=1024, osl=256, concurrency=[1, 64])
    tput = ds["total_token_throughput_per_gpu"].values
    assert np.all(np.isfinite(tput)) and tput[1] > tput[0] > 0
    assert float(ds["decode_batch_per_rank"].sel(concurrency=64)) > 32
    # with a 65,536-token ring the per-sequence term caps bench's running batch at what fits
    bigger = tmp_path / "Toy-Span-8B.toml"
    bigger.write_text(TOY.read_text().replace("span_tokens = 512", "span_tokens = 65536"))
    cap = int(inf.evaluate(str(bigger), "H100-SXM", tp=1, batch_size=1,
                           kv_len=1024 + 256).max_batch_size)
    assert 1 <= cap < 32
    big = inf.bench(str(bigger), "H100-SXM", tp=1, isl=1024, osl=256, concurrency=[64])
    assert float(big["decode_batch_per_rank"].max()) <= cap
    plan = inf.plan(str(TOY), "H100-SXM", gpus=8, isl=1024, osl=256, tpot_s=0.05,
                    modes=("aggregated",))
    best = plan.recommendations
    assert len(best) == 1 and best.iloc[0]["hardware"] == "H100-SXM"
    assert best.iloc[0]["tpot_s"] <= 0.05


def test_unknown_kind_parameters_are_refused(tmp_path):
    bad = tmp_path / "Toy-Span-8B.toml"
    bad.write_text(TOY.read_text().replace("span_tokens = 512", "span_tokens = 512, spam = 1"))
    with pytest.raises(SpecError, match=r"layers\.params\.spam is not a parameter of kind "
                                        r"'fixed_span'"):
        inf.load_model(str(bad))
    bad.write_text(TOY.read_text().replace("span_tokens = 512", "span_tokens = 0"))
    with pytest.raises(SpecError, match=r"attention\.params\.span_tokens = 0 must be"):
        inf.load_model(str(bad))
    bad.write_text(TOY.read_text().replace('bias = false', 'bias = false\nparams = { x = 1 }'))
    with pytest.raises(SpecError, match=r"attention\.params\.x is not a parameter of kind\(s\) "
                                        r"\['gqa', 'fixed_span'\]"):
        inf.load_model(str(bad))


def test_a_model_without_kv_per_token_cannot_size_a_token_cache(tmp_path):
    """Every layer of the toy kind: memory per sequence only, none per token of context."""
    only = tmp_path / "Toy-Span-8B.toml"
    only.write_text(TOY.read_text().replace("count = 24", "count = 32")
                    .replace('[[layers]]\ncount = 8\nattention = "gqa"\nmlp = "dense"\n', ""))
    arch = architecture(inf.load_model(str(only)))
    assert arch.kv_bytes_per_token("bf16") == 0.0
    assert arch.state_bytes_per_sequence("bf16") == 32 * SPAN * B_TOK
    with pytest.raises(SpecError, match="keeps no KV per token"):
        arch.snapshot_tokens("bf16")

