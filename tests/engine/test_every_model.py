"""Every bundled model evaluates on one NVIDIA and one AMD device: finite, positive prefill and
decode throughput and times at one point (or a clean one-line SpecError), so a model file or an
attention kind cannot break silently. The list is read from models/ at collection time: a new
model is checked without editing this file. validation/smoke_all_models.py runs every command on
every model x device; this is its fast core."""

from __future__ import annotations

import math

import pytest

import inference_factory as inf

#: One device per vendor, both of which run FP4, FP8 and BF16 (so each model's shipped
#: precisions run) and hold every bundled model's weights on 8 GPUs but Kimi-K3's on B200
#: (fits is then False, and the throughput is still a finite figure of the point).
DEVICES = ("B200", "MI355X")
POSITIVE = ("decode_tokens_per_s_per_gpu", "decode_tokens_per_s_per_user", "tpot_s",
            "prefill_tokens_per_s_per_gpu", "ttft_s", "weight_bytes_per_gpu",
            "hbm_used_bytes_per_gpu")


@pytest.mark.parametrize("hardware", DEVICES)
@pytest.mark.parametrize("model", inf.list_models())
def test_model_evaluates_on_nvidia_and_amd(model, hardware):
    spec = inf.load_model(model)
    shape = dict(tp=8, ep=8) if spec.is_moe else dict(tp=8)
    try:
        ds = inf.evaluate(model, hardware, batch_size=8, kv_len=8192, prompt_len=8192, **shape)
    except inf.SpecError as exc:                     # a clean refusal: one line naming why
        assert "\n" not in str(exc) and str(exc), exc
        return
    for name in POSITIVE:
        value = float(ds[name].values)
        assert math.isfinite(value) and value > 0, (model, hardware, name, value)
    # one instance of 8 GPUs (dp = 1) decodes 8 sequences: per GPU = per user x 8 / 8 GPUs
    per_gpu = float(ds["decode_tokens_per_s_per_gpu"].values)
    per_user = float(ds["decode_tokens_per_s_per_user"].values)
    assert per_gpu == pytest.approx(per_user * 8 / 8, rel=1e-9)
    assert int(ds["max_batch_size"].values) >= 0
