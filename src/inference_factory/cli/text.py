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
    pairs = list(pairs)
    if not pairs:
        return []
    width = max([width] + [len(k) for k, _ in pairs])
    return [" " * indent + f"{k.ljust(width)}  {v}" for k, v in pairs]


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

