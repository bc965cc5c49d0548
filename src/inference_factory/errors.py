"""The one exception users see: a bad input, explained in one line."""

from __future__ import annotations

from typing import Any, Iterable


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


def closest(name: Any, choices: Iterable[str]) -> str | None:
    """The one of ``choices`` ``name`` most likely misspells (case and punctuation ignored:
    difflib's ratio >= 0.6, else the only choice that starts with it or it starts with), or
    None."""
    import difflib

    def key(s: Any) -> str:
        return "".join(ch for ch in str(s).lower() if ch.isalnum())

    by_key: dict[str, str] = {}
    for c in choices:
        by_key.setdefault(key(c), c)
    k = key(name)
    if not k:
        return None
    near = difflib.get_close_matches(k, list(by_key), n=1, cutoff=0.6)
    if near:
        return by_key[near[0]]
    starts = [c for kk, c in by_key.items() if kk and (kk.startswith(k) or k.startswith(kk))]
    return starts[0] if len(starts) == 1 else None


def did_you_mean(name: Any, choices: Iterable[str]) -> str:
    """``"; did you mean 'B200'?"`` (:func:`closest`), else ``""``: the tail of an
    unknown-name message."""
    near = closest(name, choices)
    return f"; did you mean {near!r}?" if near is not None else ""


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
