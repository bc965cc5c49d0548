"""The one exception users see: a bad input, explained in one line."""


class SpecError(ValueError):
    """Bad input: unknown name, wrong type, out-of-range value, missing file.

    The message is one line naming the file (or argument), the field, the value and what is
    allowed. The CLI prints it and exits with status 2, without a traceback.
    """


def require(module: str | None, what: str, extra: str = "sweeps") -> None:
    """One-line SpecError when an optional dependency is missing."""
    if module is None:
        return
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise SpecError(f"{what} needs the '{module}' package: "
                        f"pip install 'inference-factory[{extra}]'")
