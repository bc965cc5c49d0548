"""Cost by token position (issue 28 item 6): the cost of a point is the op table's time x
price / tokens, the V3.2/V3.1 decode ratio follows from ``roofline``'s own outputs, every
operation of every bundled model has a group, and the command's edges."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from inference_factory.analysis.price_by_position import (
    _crossing, indexer_dominance, load_op_groups, model_kinds, price_by_position, price_table)
from inference_factory.analysis.economics import CostModel
from inference_factory.cli import cli
from inference_factory.engine import evaluate, evaluate_arrays
from inference_factory.errors import SpecError
from inference_factory.specs import list_models

from ..cli_helpers import fails, ok

SHAPE = {"dp": 16, "ep": 16}
RATE = 2.0                                   # $ per GPU-hour, given
POS = [2048.0, 131072.0]
MODELS = ["DeepSeek-V3.1", "DeepSeek-V3.2"]


@pytest.fixture(scope="module")
def v3():
    return price_by_position(MODELS, "H800-SXM", positions=POS, parallelism=SHAPE,
                             cost=CostModel(rental_usd_per_gpu_hour=RATE))


def test_a_point_is_the_op_tables_time_times_the_price_over_its_tokens(v3):
    """Decode of V3.2 at 128K and its marginal prefill at 2K, recomputed from ``evaluate``'s
    op table (a Dataset built by another path): sum of op times x $/GPU-s / tokens per GPU."""
    L, B = 131072, float(v3.tokens_per_step.sel(model="DeepSeek-V3.2", phase="decode",
                                                 position=131072).item())
    ds = evaluate("DeepSeek-V3.2", "H800-SXM", kv_len=L, batch_size=int(B), context_cv=0.0,
                  detail="ops", **SHAPE)
    step = float(np.nansum(ds.decode_op_time_s.values))
    want = step * RATE / 3600.0 / B * 1e6            # one GPU per rank (tp 1): B tokens a step
    got = v3.usd_per_mtok.sel(model="DeepSeek-V3.2", phase="decode", position=L).item()
    assert got == pytest.approx(want, rel=1e-9)
    split = v3.usd_per_mtok_by_group.sel(model="DeepSeek-V3.2", phase="decode", position=L)
    assert float(split.sum()) == pytest.approx(got, rel=1e-12)
    # bytes per token of the indexer: its ops' HBM bytes per step / tokens
    idx = float(np.nansum(ds.decode_op_hbm_bytes_per_gpu.sel(op=["indexer", "topk"]).values))
    assert v3.hbm_bytes_per_token_by_group.sel(
        model="DeepSeek-V3.2", phase="decode", position=L, group="indexer").item() == \
        pytest.approx(idx / B, rel=1e-12)

    c, L = 2048, 2048                                  # SGLang's 32,768 per pass / dp 16
    pre = evaluate("DeepSeek-V3.2", "H800-SXM", prompt_len=L + c, cache_hit_rate=L / (L + c),
                   context_cv=0.0, detail="ops", **SHAPE)
    want = float(np.nansum(pre.prefill_op_time_s.values)) * RATE / 3600.0 / c * 1e6
    got = v3.usd_per_mtok.sel(model="DeepSeek-V3.2", phase="prefill", position=L).item()
    assert got == pytest.approx(want, rel=1e-6)        # computed tokens P (1 - h): float


def _roofline(runner, model, **opts):
    args = ["roofline", "-m", model, "-H", "H800-SXM", "--dp", "16", "--ep", "16",
            "--context-cv", "0", "--json"]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return json.loads(ok(runner.invoke(cli, args)))


def test_v32_decode_cost_relative_to_v31_from_roofline_outputs(v3):
    """Expected ratio from the ``roofline`` command alone: the batch is min(16, the largest
    that fits at L) (SGLang's 256 running requests / dp 16), the cost per token
    step / batch; V3.2 is cheaper at 128K (the indexer reads 132 B per cached token where
    dense MLA reads the whole latent) and about as dear at 2K (its indexer costs a little)."""
    runner = CliRunner()
    ratio = {}
    for L in (2048, 131072):
        per_token = {}
        for m in MODELS:
            fit = _roofline(runner, m, kv_len=L)["max_batch_size"]
            B = int(min(16, math.floor(fit)))
            step = _roofline(runner, m, kv_len=L, batch_size=B)["decode_step_s"]
            per_token[m] = step / B
        ratio[L] = per_token["DeepSeek-V3.2"] / per_token["DeepSeek-V3.1"]
        got = (v3.usd_per_mtok.sel(model="DeepSeek-V3.2", phase="decode", position=L)
               / v3.usd_per_mtok.sel(model="DeepSeek-V3.1", phase="decode", position=L)).item()
        assert got == pytest.approx(ratio[L], rel=1e-9)
    assert ratio[131072] < 0.95
    assert 1.0 < ratio[2048] < 1.05


def test_every_operation_of_every_bundled_model_has_its_group():
    g = load_op_groups()
    shapes = [{}, {"tp": 8}, {"dp": 8}, {"dp": 8, "ep": 8}]
    seen = set()
    for m in list_models():
        kinds = model_kinds(m)
        for s in shapes:
            try:
                names = evaluate_arrays(m, "H200-SXM", detail="ops", **s)["op"]
            except SpecError:
                continue                                  # a shape the model refuses
            for n in map(str, names):
                assert g.split(n, kinds)[1] in g.ops, f"{m}: {n} has no group"
                seen.add(g.group(n, kinds))
    assert {"indexer", "sparse MLA core", "dense MLA attention", "full attention",
            "linear attention", "MoE", "communication"} <= seen
    assert g.group("gdn_attention", ["gqa", "gdn"]) == "linear attention"
    assert g.group("dsa2_attention", ["dsa"]) == "sparse MLA core"
    assert g.group("attention", ["mla"]) == "dense MLA attention"


def test_indexer_dominance_and_crossing():
    L = np.array([1024.0, 2048.0, 4096.0])
    assert _crossing(L, np.array([1.0, 2.0, 4.0]), np.array([2.0, 2.0, 2.0]))[0] == 4096.0
    first, at = _crossing(L, np.array([1.0, 1.0, 4.0]), np.array([2.0, 2.0, 2.0]))
    assert first == 4096.0 and at == pytest.approx(2048 * 2 ** (math.log(2) / math.log(4)))
    assert math.isnan(_crossing(L, np.zeros(3) + 1, np.zeros(3) + 2)[0])


def test_price_table_and_dominance_frames(v3):
    df = price_table(v3)
    assert len(df) == 2 * 2 * 2
    assert set(df.vs_first[df.model == "DeepSeek-V3.1"]) == {1.0}
    assert "usd_indexer" in df and "bytes_sparse MLA core" in df
    dom = indexer_dominance(v3)
    assert list(dom.model) == ["DeepSeek-V3.2", "DeepSeek-V3.2"]      # V3.1 has no indexer


def test_bad_inputs_are_one_line_errors(tmp_path):
    bad = tmp_path / "g.toml"
    bad.write_text('order = ["a"]\nattention = ["b"]\n[core]\n[ops]\n')
    with pytest.raises(SpecError, match="attention = 'b' is not a group"):
        load_op_groups(bad)
    with pytest.raises(SpecError, match="positions"):
        price_by_position("DeepSeek-V3", "H800-SXM", positions=[0], parallelism=SHAPE)
    r = CliRunner()
    assert "set by --decode-batch" in fails(r.invoke(cli, ["price-by-position",
                                                           "-a", "batch_size=4"]))
    assert "twice" in fails(r.invoke(cli, ["price-by-position", "-m",
                                           "DeepSeek-V3.2,DeepSeek-V3.2"]))


def test_command_csv_output_and_plot(tmp_path):
    out, png = tmp_path / "t.csv", tmp_path / "p.png"
    text = ok(CliRunner().invoke(cli, [
        "price-by-position", "-m", "DeepSeek-V3.1,DeepSeek-V3.2", "-H", "H800-SXM",
        "-p", "dp=16,ep=16", "--positions", "4096,65536", "--price-per-gpu-hour", "2",
        "--format", "csv", "-o", str(out), "--plot", str(png)]))
    assert text.splitlines()[0].startswith("phase,position,hardware,model,usd_per_mtok")
    assert out.read_text().strip() == text.strip()
    assert png.stat().st_size > 20_000
    table = ok(CliRunner().invoke(cli, [
        "price-by-position", "-m", "DeepSeek-V3.1,DeepSeek-V3.2", "--positions",
        "65536", "--price-per-gpu-hour", "2"]))
    assert "user rate 2 $/GPU-h" in table and "where the indexer starts to dominate" in table
