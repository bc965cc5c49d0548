"""The ``validate`` command: predict every case of a case file and compare with the
published figure (text table, JSON, or a .json/.csv file)."""

from __future__ import annotations

import os

import click

from ..output.files import check_target, json_text, write_text_atomic
from ..output.tables import format_number, value_band
from ..errors import SpecError
from .text import _table


# --------------------------------------------------------------------------------------------
# validate
# --------------------------------------------------------------------------------------------

def _validation_json(results, summary) -> str:
    records = results.to_dict("records")
    return json_text({"cases": records, "summary": summary})


def _validation_text(results, summary) -> str:

    banded = "predicted_low" in results
    rows = [(r.case_id, r.phase, r.hardware, r.metric,
             value_band(r.predicted, r.predicted_low, r.predicted_high) if banded
             else format_number(r.predicted),
             format_number(r.published),
             f"{r.ratio:.3f}", f"{r.abs_log_error:.3f}") + (("yes" if r.inside else "no",)
                                                           if banded else ())
            for r in results.itertuples()]
    lines = [_table(["CASE", "PHASE", "HARDWARE", "METRIC", "PREDICTED", "PUBLISHED", "RATIO",
                     "|LN ERR|"] + (["INSIDE"] if banded else []), rows, right=(4, 5, 6, 7)), ""]
    groups = [("all", summary["overall"])]
    groups += [(f"phase {k}", v) for k, v in summary["by_phase"].items()]
    groups += [(f"hardware {k}", v) for k, v in summary["by_hardware"].items()]
    srows = [(name, str(s["n_cases"]), f"{s['median_abs_log_error']:.3f}",
              f"{s['worst_abs_log_error']:.3f}", f"{s['geomean_ratio']:.3f}", s["worst_case"])
             for name, s in groups]
    lines.append(_table(["SUMMARY", "CASES", "MEDIAN |LN ERR|", "WORST |LN ERR|", "GEOMEAN RATIO",
                         "WORST CASE"], srows, right=(1, 2, 3, 4)))
    if banded:
        brows = [(name, str(v["total"]["n_cases"]), f"{100 * v['component']['coverage']:.0f}%",
                  f"{v['component']['median_width']:.2f}x", f"{100 * v['total']['coverage']:.0f}%",
                  f"{v['total']['median_width']:.2f}x", f"{100 * v['coverage_loo']:.0f}%")
                 for name, v in summary["bands"].items()]
        lines += ["", _table(["80% BAND", "CASES", "COMPONENT COVERAGE", "COMPONENT WIDTH",
                              "COVERAGE", "WIDTH", "COVERAGE (LOO TERM)"], brows,
                             right=(1, 2, 3, 4, 5, 6))]
    return "\n".join(lines)


@click.command("validate")
@click.option("--cases", "cases_path", required=True, metavar="FILE.csv",
              help="Case file (columns in docs/VALIDATION.md), e.g. validation/dev_cases.csv.")
@click.option("--json", "as_json", is_flag=True, help="Print cases and summary as one JSON object.")
@click.option("--output", "-o", "output", default=None, metavar="FILE",
              help="Also write the results: FILE.json (cases + summary) or FILE.csv (cases).")
@click.option("--uncertainty", is_flag=True,
              help="Add each case's 80% band (predicted_low, predicted_high, inside) and the "
                   "coverage and median width of the bands (docs/MODEL.md section 13).")
def validate(cases_path: str, as_json: bool, output: str | None, uncertainty: bool) -> None:
    """Predict every case of a case file and compare with the published figure.

    Reports predicted, published, ratio (predicted / published) and |ln ratio| per case,
    then the median and worst |ln ratio| overall, by phase and by hardware. Nothing is
    fitted: the engine runs with the bundled realism constants.
    """
    from ..analysis import validation

    suffix = os.path.splitext(output)[1].lower().lstrip(".") if output else ""
    if output is not None and suffix not in ("json", "csv"):
        raise SpecError(f"--output {output!r}: the file name must end in .json or .csv")
    if output is not None:
        check_target(output)
    cases = validation.load_cases(cases_path)
    results = validation.predict(cases, uncertainty=True if uncertainty else None)
    summary = validation.summarize(results)
    json_text = _validation_json(results, summary)
    if output is not None:
        text = json_text + "\n" if suffix == "json" else results.to_csv(index=False)
        write_text_atomic(output, text)
    click.echo(json_text if as_json else _validation_text(results, summary))


