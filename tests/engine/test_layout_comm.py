"""Every layout pays its communication (issue 21): an instance of more than one GPU that shares
a layer's work (TP, or the experts of an MoE under attention DP) moves activations between
its GPUs in every layer, whatever the split. A dense model's pure data parallelism (tp = 1)
is independent replicas, the one layout with nothing to move. Before the fix, attention-DP with
tensor-split experts (ep = 1) costed zero comm (``roofline -m DeepSeek-V3 -H H200 --dp 16 --ep
1`` printed comm 0.000 ms)."""

import itertools

import numpy as np
import pytest

import inference_factory as inf

KW = dict(batch_size=16, kv_len=2048, prompt_len=1024)


def _layouts(moe: bool, heads: int):
    for tp, dp in itertools.product((1, 2, 4, 8), (1, 2, 4, 8, 16)):
        if tp * dp == 1 or heads % tp or (not moe and tp == 1):
            continue
        for ep in ((1, tp * dp) if moe else (1,)):
            yield tp, dp, ep


@pytest.mark.parametrize("model,hw", [("Llama-3.1-70B", "H200-SXM"), ("DeepSeek-V3", "H200-SXM"),
                                      ("Qwen3-30B-A3B", "B200")])
def test_no_multi_gpu_layout_has_zero_comm(model, hw):
    m = inf.load_model(model)
    seen = 0
    for tp, dp, ep in _layouts(m.is_moe, m.n_q_heads):
        ds = inf.evaluate(model, hw, tp=tp, dp=dp, ep=ep, **KW)
        for phase in ("decode", "prefill"):
            comm = float(ds[f"{phase}_comm_s"])
            assert comm > 0, f"{model} tp{tp} dp{dp} ep{ep} {phase}: zero comm"
        seen += 1
    assert seen >= 8


def test_expert_tp_under_attention_dp_gathers_and_reduces():
    """DeepSeek-V3 at dp 8, ep 1 on H200 (one NVLink node): the gather and the post-expert
    all-reduce each move the 8 ranks' tokens (8 x 16 x 7168 x 2 B = 1.84 MB) and read SGLang's
    measured custom all-reduce at 8 GPUs: between the table's own latency at that message
    (a few 10 us) and not below its smallest measured row."""
    from inference_factory.engine import measured as M

    ds = inf.evaluate("DeepSeek-V3", "H200-SXM", tp=1, dp=8, ep=1, detail="ops", **KW)
    n_moe = inf.load_model("DeepSeek-V3").n_moe_layers
    per_call = {o: float(ds.decode_op_time_s.sel(op=o)) / n_moe for o in ("moe_gather", "moe_reduce")}
    rows = M.tables_for(inf.load_hardware("H200-SXM")).rows("allreduce")
    sel = (rows["kernel"] == "custom") & (rows["num_gpus"] == 8)
    msg, lat = rows["message_bytes"][sel].astype(float), rows["latency_us"][sel].astype(float)
    order = np.argsort(msg)
    expect = np.exp(np.interp(np.log(8 * 16 * 7168 * 2.0), np.log(msg[order]),
                              np.log(lat[order]))) * 1e-6
    for name, t in per_call.items():
        assert t == pytest.approx(expect, rel=0.15), name   # interpolation between rows
    assert set(ds.decode_op_source.sel(op=["moe_gather", "moe_reduce"]).values) <= {
        "measured", "interpolated"}
