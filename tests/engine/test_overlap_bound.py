"""Two-batch overlap hides communication behind the other micro-batch's compute: it can gain
at most the smaller of the two (the step never falls below the larger), and where there is
no second micro-batch (one sequence per rank) it gives nothing at all.

Reference values: the bound is computed by hand from the sequential step's own op breakdown
(``overlap="none"``, ``detail="ops"``: the comm ops' time and the rest); "nothing" is the
sequential step itself, to the last bit (the same pass runs)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import inference_factory as inf
from inference_factory.cli import cli

from tests.cli_helpers import ok

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _gain_and_bound(model, hw, **kw):
    off = inf.evaluate(model, hw, overlap="none", detail="ops", **kw)
    on = inf.evaluate(model, hw, overlap="two-batch", **kw)
    t = off.decode_op_time_s
    comm = t.where(off.decode_op_resource == "comm", 0.0).sum("op")
    rest = t.sum("op") - comm
    np.testing.assert_allclose(t.sum("op"), off.decode_step_s, rtol=1e-12)   # sequential
    return (off.decode_step_s - on.decode_step_s).values, np.minimum(comm, rest).values


def test_llama_70b_tp8_overlap_gains_nothing_at_one_sequence_and_never_beyond_its_comm():
    b = [1, 2, 8, 64, 256]
    gain, bound = _gain_and_bound("Llama-3.1-70B", "H100-SXM", tp=8, batch_size=b,
                                  kv_len=2048)
    # one sequence: nothing to split, the step is the sequential one (was 17.5 ms vs 9.0)
    assert gain[0] == 0.0
    assert bound[0] == pytest.approx(0.569e-3, rel=0.01)    # two all-reduces, 80 layers
    assert np.all(gain <= bound * (1 + 1e-12))
    # dense TP decode: each micro-batch streams the 70B weights again, so overlap loses
    assert np.all(gain[1:] < 0)


def test_moe_overlap_pays_at_large_batches_within_its_comm():
    gain, bound = _gain_and_bound("DeepSeek-V3", "H100-SXM", dp=32, ep=32, batch_size=[1, 256],
                                  kv_len=4096, weight_precision="fp8")
    assert gain[0] == 0.0
    assert 0 < gain[1] <= bound[1]


def test_factory_overlap_lever_gives_nothing_at_one_sequence(tmp_path):
    """Llama-3.1-70B on H100 TP8 at one sequence per instance (0.05 requests/s): the overlap
    lever on or off, the same decode rate (it halved it: 7 tokens/s per GPU against 14)."""
    base = (f'extends = "{ROOT / "configs" / "factory.toml"}"\nname = "x"\n'
            '[model]\nname = "Llama-3.1-70B"\nprice = "llama-3.1-70b-together-2025-08"\n'
            '[workload]\narrival_rate_per_s = 0.05\n'
            '[prefill]\nhardware = "H100-SXM"\ntp = 8\ndp = 1\nep = 1\nunit_gpus = 8\n'
            '[decode]\nhardware = "H100-SXM"\ntp = 8\ndp = 1\nep = 1\nunit_gpus = 8\n'
            '[levers]\npd_split = false\nprefix_cache = false\nspeculative = false\n'
            'expert_balancing = false\nlow_precision = false\noverlap = {lever}\n'
            '[slo]\nttft_s = 5.0\ntpot_s = 0.0095\n')   # one sequence's step: 9.0 ms
    out = {}
    for lever in ("true", "false"):
        cfg = tmp_path / f"overlap_{lever}.toml"
        cfg.write_text(base.replace("{lever}", lever))
        out[lever] = json.loads(ok(CliRunner().invoke(
            cli, ["simulate", "-c", str(cfg), "--requests", "300", "--json"])))["scenario"]
    on, off = out["true"], out["false"]
    assert on["decode_batch_per_gpu"] * 8 < 2            # under two sequences per instance
    assert on["decode_tokens_per_s_per_gpu"] == pytest.approx(
        off["decode_tokens_per_s_per_gpu"], rel=1e-12)
    # (TPOT moves by 0.02 %: the colocated prefill passes still split a prompt's tokens in two)
