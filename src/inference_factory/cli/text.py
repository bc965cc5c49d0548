"""Display helpers shared by the commands of :mod:`inference_factory.cli.main` and its
sibling modules: one-line messages, compact numbers, aligned tables and key-value lines, the
``--format``/``--json`` choice and JSON on stdout (through the one encoder,
:func:`inference_factory.output.files.json_text`)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import click

from ..output.files import json_text


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _g(value: float, digits: int = 6) -> str:
    """Compact number: 989, 3350, 794.5, 0.125."""
    return f"{value:.{digits}g}"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Sequence[int] = ()) -> str:
    from ..output.tables import render_rows

    return render_rows(headers, list(rows), right)


def _kv(pairs: Iterable[tuple[str, str]], indent: int = 2, width: int = 0) -> list[str]:
    """``key  value`` lines, keys padded to one column, each line wrapped within the table
    width (:func:`~inference_factory.output.tables.fit_lines`) with its continuations under
    the value column: a long source or note reads whole, nothing cut."""
    from ..output.tables import fit_lines

    pairs = list(pairs)
    if not pairs:
        return []
    width = max([width] + [len(k) for k, _ in pairs])
    hang = " " * (indent + width + 2)
    return [w for k, v in pairs
            for w in fit_lines(" " * indent + f"{k.ljust(width)}  {v}", indent=hang).split("\n")]


def _launch_lines(command: str, width: int | None = 98) -> str:
    """A launch command within ``width`` columns: a long shell line continued with `` \\``
    (still one command; never broken inside quotes), a long line of a heredoc (YAML) folded
    under its key (the same value once parsed); as given with ``width`` None (--wide, and
    --json carries the command as given)."""
    import re

    from ..output.tables import fit_lines

    out, doc = [], False
    for line in command.split("\n"):
        if width is None or len(line) <= width:
            out.append(line)
        elif doc:
            out.append(fit_lines(line, width, indent="    "))
        else:
            parts = [""]
            for tok in re.findall(r"(?:[^\s'\"]+|'[^']*'|\"[^\"]*\")+", line):
                if parts[-1].strip() and len(parts[-1]) + len(tok) + 3 > width:
                    parts.append("   ")
                parts[-1] += " " + tok if parts[-1] else tok
            out.append(" \\\n".join(parts))
        doc = line.strip() != "EOF" and (doc or line.rstrip().endswith("<<'EOF'"))
    return "\n".join(out)


def _format_option(func):
    from .params import format_option

    return format_option(func)


def _chosen_format(fmt, as_json):
    from ..output.tables import chosen_format

    return chosen_format(fmt, as_json)


def _render(df, fmt: str, header: str = "", human: bool = False) -> str:
    from ..output.tables import render

    return render(df, fmt, header=header, human=human)


def _dump_json(obj: Any) -> None:
    click.echo(json_text(obj))

