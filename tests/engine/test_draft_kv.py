"""A draft's own KV counts in the memory model: the MTP layers' (``[mtp] modules``,
num_nextn_predict_layers) or a draft model's, beside their weights (engine/block.py).

SGLang 0.5.6 model_executor/model_runner.py lines 1374-1380 sizes the draft worker's KV pool
with num_nextn_predict_layers layers and (lines 1698-1717) as many token slots as the
target's pool, so every token a sequence holds has its KV in the target's 61 layers and in
the MTP module's one (DeepSeek-V3 config.json: num_hidden_layers 61, num_nextn_predict_layers
1; both MLA layers of the same latent width)."""

import pytest

from inference_factory.engine import evaluate_arrays


def _kv(model, draft_depth, **kw):
    r = evaluate_arrays(model, "B200", batch_size=4.0, tp=8, kv_precision="fp8",
                        kv_len=8192.0, final_len=9216.0, draft_depth=draft_depth,
                        variables=["kv_bytes_per_gpu", "weight_bytes_per_gpu",
                                   "max_batch_size"], **kw)
    return {k: float(v) for k, v in r.items()}


def test_mtp_layer_kv_is_one_more_layer_of_62():
    no, mtp = _kv("DeepSeek-V3", 0.0), _kv("DeepSeek-V3", 2.0)
    assert mtp["kv_bytes_per_gpu"] / no["kv_bytes_per_gpu"] == pytest.approx(62 / 61, rel=1e-12)
    assert mtp["weight_bytes_per_gpu"] > no["weight_bytes_per_gpu"]     # the MTP module
    assert mtp["max_batch_size"] < no["max_batch_size"]


def test_a_draft_model_adds_its_own_kv():
    # Llama-3.1-8B drafting for Llama-3.1-70B: 32 layers of 8 KV heads of 128 beside 80 such
    # layers (both config.json), each split 8 ways at TP8: 112 / 80 of the target's alone
    no = _kv("Llama-3.1-70B", 0.0)
    with_draft = _kv("Llama-3.1-70B", 2.0, draft_model="Llama-3.1-8B")
    assert with_draft["kv_bytes_per_gpu"] / no["kv_bytes_per_gpu"] == pytest.approx(
        112 / 80, rel=1e-12)
