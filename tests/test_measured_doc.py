"""docs/MEASURED.md says what the engine reads from measured tables per device today: it is
the output of calibration/measured_doc.py over the tables themselves, so it cannot drift."""

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_measured_doc_is_the_tables():
    mod = runpy.run_path(str(ROOT / "calibration" / "measured_doc.py"))
    text = mod["render"]()
    assert (ROOT / "docs" / "MEASURED.md").read_text() == text, \
        "docs/MEASURED.md is out of date: run python calibration/measured_doc.py"
    # what it must say (issue 30): the MI series are not on the roofline any more
    assert "| MI355X | own | aiter | attention_prefill, gemm, moe |" in text
    assert "| MI300X | own | aiter, rccl | allreduce, attention_prefill, gemm, moe |" in text
    assert "| H20-96GB | none |" in text and "| H800-SXM | H100-SXM |" in text
