"""Where an op's cost came from, per point: a measured table row, a fill between rows, or
beyond them. A table's rows need not fill a rectangle (aiconfigurator's H100 attention-decode
table has no batch 256 row past 2048 tokens of context, its GEMM table no n = k = 65536 cell):
the grid fills the holes, and a point reading a filled node must not be called "measured".

Reference values: the rows present in hardware/measured/H100-SXM/*.csv (read in the test),
and which side of the table's last row a query lies on (hand-picked shapes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import inference_factory as inf
from inference_factory.engine import grid as G
from inference_factory.specs.files import data_dirs

EXT, INT, MEAS = G.EXTRAPOLATED, G.INTERPOLATED, G.MEASURED


def _label(grid, *coords):
    return int(G.interpolate(grid, [np.log(np.asarray(c, float)) for c in coords])[1])


def test_filled_nodes_keep_where_their_value_came_from():
    # rows on m = 1, 2, 4 x n = 1, 2, without (2, 2) (a hole between rows of its line) and
    # (4, 2) (beyond the last row of its line)
    rows = [(1, 1), (2, 1), (4, 1), (1, 2)]
    g = G.grid_from_rows([np.array([r[0] for r in rows], float),
                          np.array([r[1] for r in rows], float)], np.zeros(len(rows)))
    assert g.node_source is not None and g.node_source.shape == (3, 2)
    assert _label(g, 2, 1) == MEAS            # a row
    assert _label(g, 1, 2) == MEAS
    assert _label(g, 3, 1) == INT             # between two rows
    # the line n = 2 has one row, m = 1: (2, 2) and (4, 2) are held beyond it
    assert _label(g, 2, 2) == EXT and _label(g, 4, 2) == EXT
    assert _label(g, 3, 1.5) == EXT           # a cell with a held corner
    assert _label(g, 8, 1) == EXT             # beyond the last row: clamped
    # a rectangle of rows carries no node labels: nothing changes for full tables
    full = G.grid_from_rows([np.array([1, 2, 1, 2], float), np.array([1, 1, 2, 2], float)],
                            np.zeros(4))
    assert full.node_source is None and _label(full, 2, 2) == MEAS


def test_a_hole_between_rows_is_interpolated_not_measured():
    rows = [(1, 1), (2, 1), (4, 1), (1, 2), (4, 2)]            # (2, 2) missing, inside
    g = G.grid_from_rows([np.array([r[0] for r in rows], float),
                          np.array([r[1] for r in rows], float)], np.zeros(len(rows)))
    assert _label(g, 2, 2) == INT and _label(g, 4, 2) == MEAS
    # fixing an axis (the GEMM's n, k) keeps the labels of the nodes it reads
    red, fsrc = G.reduce(g, {1: np.log(2.0)})
    assert fsrc == MEAS and _label(red, 2) == INT and _label(red, 4) == MEAS


def _attention_rows():
    path = next(d / "measured" / "H100-SXM" / "attention_decode.csv"
                for d in data_dirs("hardware")
                if (d / "measured" / "H100-SXM" / "attention_decode.csv").is_file())
    a = pd.read_csv(path, comment="#")
    # Llama-3.1-70B at TP8: 8 query heads, 1 KV head of 128 per GPU, a BF16 cache
    a = a[(a.num_heads == 8) & (a.num_kv_heads == 1) & (a.head_dim == 128)
          & (a.kv_dtype == "bf16")]
    return set(zip(a.batch_size, a.kv_len))


@pytest.fixture(scope="module")
def llama_ops():
    def src(**axes):
        ds = inf.evaluate("Llama-3.1-70B", "H100-SXM", tp=8, detail="ops", **axes)
        return dict(zip(ds.op.values, ds.decode_op_source.values.ravel()))
    return src


def test_llama_70b_on_h100_labels_follow_the_table_rows(llama_ops):
    rows = _attention_rows()
    assert (64, 8192) in rows and (256, 2048) in rows and (256, 8192) not in rows
    assert llama_ops(batch_size=64, kv_len=8192)["attention"] == "measured"
    # batch 256 has rows up to 2048 tokens only: 8192 reads a filled node (was "measured")
    assert llama_ops(batch_size=256, kv_len=8192)["attention"] == "extrapolated"
    # GEMMs: M = 4096 is a row of gemm.csv (o_proj n = 8192, k = 1024 at TP8), 3000 lies
    # between rows 1024 and 4096, 50000 beyond the last row (32768)
    assert llama_ops(batch_size=4096, kv_len=128)["o_proj"] == "measured"
    assert llama_ops(batch_size=3000, kv_len=128)["o_proj"] == "interpolated"
    beyond = llama_ops(batch_size=50000, kv_len=128)
    assert {beyond[k] for k in ("qkv", "o_proj", "ffn_gate_up", "ffn_down")} == {"extrapolated"}
