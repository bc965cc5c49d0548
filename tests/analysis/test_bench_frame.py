"""``bench(..., as_frame=True)`` is the tidy frame of ``bench``'s Dataset
(``ds.to_dataframe().reset_index()``, attributes included), built without xarray: the
command line's path."""

from __future__ import annotations

import pandas as pd
import pytest

from inference_factory.analysis.bench import bench

CASES = [
    dict(model="DeepSeek-R1", hardware="B200", tp=4, ep=4, weight_precision="fp4",
         moe_precision="fp4", kv_precision="fp8", isl=8192, osl=1024,
         concurrency=[4, 64, 1024]),
    dict(model="Llama-3.1-70B", hardware="H100-SXM", tp=8, isl=1024, osl=1024,
         concurrency=[1, 32], range_ratio=0.8, draft_depth=0),
    dict(model="DeepSeek-V3", hardware="H200-SXM", prefill_pool={"instances": 1, "tp": 8},
         decode_pool={"instances": 1, "dp": 8, "ep": 8}, kv_precision="fp8",
         concurrency=[8, 256]),
]


@pytest.mark.parametrize("kw", CASES)
def test_frame_is_the_datasets(kw):
    ds = bench(**kw)
    df = bench(**kw, as_frame=True)
    want = ds.to_dataframe().reset_index()
    pd.testing.assert_frame_equal(df, want, check_exact=True)
    assert df.attrs == ds.attrs


def test_frame_with_bands():
    kw = dict(CASES[1], uncertainty="components")
    ds = bench(**kw)
    df = bench(**kw, as_frame=True)
    pd.testing.assert_frame_equal(df, ds.to_dataframe().reset_index(), check_exact=True)
