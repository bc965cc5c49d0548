"""``evaluate_arrays(..., detail="ops")`` is ``evaluate(..., detail="ops")``'s op detail on
plain arrays (what the plan's footing reads without building a Dataset)."""

from __future__ import annotations

import numpy as np
import pytest

from inference_factory.engine import evaluate, evaluate_arrays
from inference_factory.errors import SpecError

KW = dict(tp=4, dp=4, ep=16, overlap="two-batch", prefill_batch_size=2.0, prompt_len=4096.0,
          kv_len=4608.0, final_len=5120.0)


@pytest.mark.parametrize("hw", ["H200-SXM", "MI355X"])
def test_ops_arrays_are_the_datasets(hw):
    ds = evaluate("DeepSeek-V3", hw, detail="ops", **KW, batch_size=[1.0, 64.0],
                  draft_depth=[0.0, 2.0])
    got = evaluate_arrays("DeepSeek-V3", hw, detail="ops", **KW,
                          batch_size=np.array([1.0, 64.0])[:, None],
                          draft_depth=np.array([0.0, 2.0])[None, :])
    assert list(got["op"]) == list(ds["op"].values)
    for phase in ("decode", "prefill"):
        for k in ("op_time_s", "op_flop_per_gpu", "op_hbm_bytes_per_gpu", "op_resource",
                  "op_source"):
            want = ds[f"{phase}_{k}"].transpose("op", "batch_size", "draft_depth").values
            assert np.array_equal(got[f"{phase}_{k}"], want, equal_nan=want.dtype.kind == "f")
        # each op's FLOPs and bytes add up to the pass's (the main pass: no draft)
        for k in ("flop_per_gpu", "hbm_bytes_per_gpu"):
            total = np.nansum(got[f"{phase}_op_{k}"], axis=0)[:, 0]
            np.testing.assert_allclose(total, np.broadcast_to(
                got[f"{phase}_{k}"], total.shape + (2,))[:, 0], rtol=1e-12)
    # the other outputs are unchanged by the detail
    plain = evaluate_arrays("DeepSeek-V3", hw, **KW, batch_size=np.array([1.0, 64.0])[:, None],
                            draft_depth=np.array([0.0, 2.0])[None, :])
    assert set(got) - set(plain) == {"op"} | {f"{p}_op_{k}" for p in ("decode", "prefill")
                                              for k in ("time_s", "flop_per_gpu",
                                                        "hbm_bytes_per_gpu", "resource",
                                                        "source")}
    for k, v in plain.items():
        assert np.array_equal(got[k], v, equal_nan=v.dtype.kind == "f")


def test_ops_one_point_and_bad_detail():
    got = evaluate_arrays("Llama-3.1-70B", "H100-SXM", tp=8, batch_size=64, kv_len=4096,
                          detail="ops")
    assert got["decode_op_time_s"].shape == got["op"].shape
    with pytest.raises(SpecError, match="detail"):
        evaluate_arrays("Llama-3.1-70B", "H100-SXM", detail="op")
