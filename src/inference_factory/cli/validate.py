"""The ``validate`` command: predict every case of a case file and compare with the
published figure (text table, JSON, or a .json/.csv file)."""

from __future__ import annotations

import os

import click

from ..output.files import check_target, json_text, write_text_atomic
from ..output.tables import TABLE_WIDTH, human_header, render, value_band
from ..errors import SpecError


# --------------------------------------------------------------------------------------------
# validate
# --------------------------------------------------------------------------------------------

def _validation_json(results, summary) -> str:
    records = results.to_dict("records")
    return json_text({"cases": records, "summary": summary})


def _validation_text(results, summary) -> str:
    """The cases, the summary and (with bands) the coverage as tables a person reads, each
    within 100 columns (output.tables.render, human headers; the phase is in the metric's
    label, the device last and the first column dropped where the table is too wide, the
    JSON and CSV carry every field): the metric's own unit (TTFT and TPOT in ms),
    ratios to three decimals."""
    banded = "predicted_low" in results
    rows = []
    for r in results.itertuples():
        label, f = human_header(r.metric)
        row = {"case_id": r.case_id, "metric": label,
               "predicted": (value_band(f * r.predicted, f * r.predicted_low,
                                        f * r.predicted_high).replace(" [", "\n[")
                             if banded else f * r.predicted),
               "published": f * r.published, "ratio": round(r.ratio, 3),
               "abs_log_error": round(r.abs_log_error, 3)}
        rows.append({**row, **({"inside": bool(r.inside)} if banded else {}),
                     "hardware": r.hardware})
    groups = [("all", summary["overall"])]
    groups += [(f"phase {k}", v) for k, v in summary["by_phase"].items()]
    groups += [(f"hardware {k}", v) for k, v in summary["by_hardware"].items()]
    srows = [{"summary": name, "n_cases": s["n_cases"],
              **{k: round(s[k], 3) for k in ("median_abs_log_error", "worst_abs_log_error",
                                             "geomean_ratio")}, "worst_case": s["worst_case"]}
             for name, s in groups]
    import pandas as pd

    from .question_options import fit_columns, hidden_note

    cases, hidden = fit_columns(pd.DataFrame(rows), "table", width=TABLE_WIDTH, keep=("case_id",),
                                human=True)      # the device last: the first to go
    lines = [cases + hidden_note(hidden, TABLE_WIDTH, "--json or --output FILE.csv every value"), "",
             render(srows, human=True)]
    if banded:
        brows = [{"80% band": name, "n_cases": v["total"]["n_cases"],
                  "component_coverage_frac": round(v["component"]["coverage"], 2),
                  "component_median_width": round(v["component"]["median_width"], 2),
                  "total_coverage_frac": round(v["total"]["coverage"], 2),
                  "total_median_width": round(v["total"]["median_width"], 2),
                  "coverage_loo_frac": round(v["coverage_loo"], 2)}
                 for name, v in summary["bands"].items()]
        lines += ["", render(brows, human=True)]
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


