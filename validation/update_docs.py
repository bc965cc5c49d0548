"""Regenerate the results block of docs/VALIDATION.md from a fresh run of the dev set.

    python validation/update_docs.py

Runs the same thing as ``inference-factory validate --cases validation/dev_cases.csv`` and
replaces the text between the markers in docs/VALIDATION.md with the results table and the
summary. tests/analysis/test_validation.py fails while the block is out of date.
"""

from __future__ import annotations

from pathlib import Path

from inference_factory.analysis import validation

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "validation" / "dev_cases.csv"
DOCS = REPO / "docs" / "VALIDATION.md"


def main() -> None:
    results = validation.predict(validation.load_cases(CASES))
    summary = validation.summarize(results)
    text = DOCS.read_text()
    head, rest = text.split(validation.DOCS_BEGIN, 1)
    _, tail = rest.split(validation.DOCS_END, 1)
    block = validation.markdown_table(results, summary)
    DOCS.write_text(f"{head}{validation.DOCS_BEGIN}\n{block}\n{validation.DOCS_END}{tail}")
    s = summary["overall"]
    print(f"{DOCS}: {s['n_cases']} cases, median |ln err| {s['median_abs_log_error']:.3f}, "
          f"worst {s['worst_abs_log_error']:.3f} ({s['worst_case']})")


if __name__ == "__main__":
    main()
