"""Tables through one renderer (inference_factory.output.tables): one number format, and the
text, markdown, CSV and JSON formats agree and show units (issue 10)."""

from __future__ import annotations

import json

import pytest

from inference_factory.output.tables import format_number, render


@pytest.mark.parametrize("x, text", [(17320.4, "17,320"), (1927.0, "1,927"), (52.314, "52.31"),
                                     (0.20341, "0.2034"), (3, "3"), (float("nan"), "-"),
                                     (1.5e-5, "0.000015"), (True, "yes")])
def test_numbers_have_one_format(x, text):
    assert format_number(x) == text


def test_table_formats_agree_and_show_units():
    import pandas as pd

    df = pd.DataFrame({"batch_size": [1, 256], "tpot_s": [0.0123, 0.05],
                       "gross_margin_frac": [0.5, 0.25],
                       "decode_tokens_per_s_per_gpu": [17320.4, 1927.0]})
    table = render(df, "table")
    assert "tpot ms" in table and "gross_margin %" in table and "decode tok/s/GPU" in table
    assert "17,320" in table and "12.3" in table and "50" in table and "e+" not in table
    md = render(df, "markdown")
    assert md.splitlines()[1].startswith("|--")
    csv = render(df, "csv")
    assert csv.splitlines()[1] == "1,0.0123,0.5,17320.4"   # machine formats keep SI values
    js = json.loads(render(df, "json"))
    assert js["rows"][0]["tpot_s"] == 0.0123



def test_value_band_is_the_one_band_text():
    from inference_factory.output.tables import value_band

    assert value_band(52.31, 48.0, 57.5) == "52.31 [48-57.5]"
    assert value_band(1.5, 1.0, 2.0, lambda x: f"{x:.1f} ms") == "1.5 ms [1.0 ms-2.0 ms]"
