"""The KV-cache write inside NVIDIA's measured attention rows is not counted again.

Reference: aiconfigurator's attention collectors time the whole attention call of one
layer, the write of the new tokens' K and V included (sources beside configs/realism.toml
[other_kernels] kv_write); hand counts of one layer's small kernels from that table's
documented counts (MLA block 6, GQA block 4, dense FFN 1, MoE router 1, shared expert 1,
2 RMSNorms inside the fused TP all-reduce at decode sizes).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import inference_factory as inf
from inference_factory.engine import STRUCT_AXES
from inference_factory.engine import geometry as Gm
from inference_factory.engine import measured as M
from inference_factory.engine import ops as O


def _ops(model, device, realism=None, phase="decode", **struct):
    m, hw = inf.load_model(model), inf.load_hardware(device)
    rl = realism or inf.load_realism()
    g = Gm.validate_struct(m, hw, dict(STRUCT_AXES, weight_precision="fp8", kv_precision="fp8",
                                       **struct), rl)
    new = 1.0 if phase == "decode" else 1024.0
    ops = O.layer_ops(g, Gm.main_layers(m), seqs=1.0, new_tokens=new,
                      cached_tokens=1023.0 if phase == "decode" else 0.0, kv_len=1024.0,
                      logit_tokens_per_seq=1.0, phase=phase)
    return {o.name: o for o in ops}


def _kernels(ops):
    return float(np.asarray(ops["other_kernels"].params["kernels"]))


def test_llama_70b_b200_tp8_decode_layer_by_hand():
    """GQA block 4 - 2 RMSNorms in the fused all-reduce - 1 KV write in the measured
    attention row + SiLU-and-mul 1 = 2 per layer (quantisation timed with the GEMMs)."""
    ops = _ops("Llama-3.1-70B", "B200", tp=8)
    assert ops["attention"].covers_kernels == 1.0
    assert _kernels(ops) == 2.0


def test_deepseek_v3_h200_tp8_decode_layer_by_hand():
    """MLA block 6 - 2 fused norms - 1 KV write, plus per layer the FFN kernels: 3 dense
    layers with SiLU 1 and 58 MoE layers with router 1 + shared-expert SiLU 1, over 61."""
    ops = _ops("DeepSeek-V3", "H200-SXM", tp=8)
    assert ops["attention"].covers_kernels == 1.0
    assert _kernels(ops) == pytest.approx(6 - 2 - 1 + (3 * 1 + 58 * 2) / 61, rel=1e-12)


def test_prefill_rows_time_the_write_too():
    """The context-phase collectors run the same call (forward_extend writes the cache):
    Llama-3.1-70B TP8 prefill of 1024 tokens on H200 (within the fused all-reduce's 2048
    tokens): 4 - 2 norms - 1 KV write + 1 = 2."""
    ops = _ops("Llama-3.1-70B", "H200-SXM", phase="prefill", tp=8)
    assert ops["attention"].covers_kernels == 1.0
    assert _kernels(ops) == 2.0


def test_no_table_or_another_collector_keeps_the_kernel():
    """MI300X has no attention table (AITER GEMMs only): the write stays a kernel of its own;
    on the roofline realism too; and rows from a backend the realism does not name (here:
    only "aiter" named) keep it."""
    assert _ops("Llama-3.1-70B", "MI300X", tp=1)["attention"].covers_kernels == 0.0
    rl = inf.load_realism()
    assert _ops("Llama-3.1-70B", "B200", dataclasses.replace(rl, measured=False),
                tp=8)["attention"].covers_kernels == 0.0
    assert M.tables_for(inf.load_hardware("B200")).backends("attention_decode")
    other = dataclasses.replace(rl, kv_write_timed_by=("aiter",))
    ops = _ops("Llama-3.1-70B", "B200", other, tp=8)
    assert ops["attention"].covers_kernels == 0.0
    assert _kernels(ops) == 3.0
