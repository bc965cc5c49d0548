"""The one exception users see: a bad input, explained in one line."""

from __future__ import annotations

from typing import Any


class SpecError(ValueError):
    """Bad input: unknown name, wrong type, out-of-range value, missing file.

    The message is one line naming the file (or argument), the field, the value and what is
    allowed. The CLI prints it and exits with status 2, without a traceback.
    """


class SpecWarning(UserWarning):
    """A suspicious but valid input (a price of another model, a context beyond the model's,
    a TPOT target of seconds): one line naming the input and why it looks wrong. The CLI
    prints it as ``warning: <message>`` on stderr and carries on."""


def warn(message: str) -> None:
    """Emit a :class:`SpecWarning` (Python: the warnings machinery; the CLI: one stderr line)."""
    import warnings

    warnings.warn(message, SpecWarning, stacklevel=3)


def require(module: str | None, what: str, extra: str = "sweeps") -> None:
    """One-line SpecError when an optional dependency is missing."""
    if module is None:
        return
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise SpecError(f"{what} needs the '{module}' package: "
                        f"pip install 'inference-factory[{extra}]'")


def show(value: Any, limit: int = 60) -> str:
    """``repr`` of a value, shortened to one line of at most ``limit`` characters (an
    integer too long for ``repr`` is described by its digit count)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    try:
        s = repr(value)
    except ValueError:
        s = f"<{type(value).__name__}>"
    s = s.replace("\n", " ")
    return s if len(s) <= limit else s[:limit - 3] + "..."
