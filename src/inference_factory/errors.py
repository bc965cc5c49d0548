"""The one exception users see: a bad input, explained in one line."""


class SpecError(ValueError):
    """Bad input: unknown name, wrong type, out-of-range value, missing file.

    The message is one line naming the file (or argument), the field, the value and what is
    allowed. The CLI prints it and exits with status 2, without a traceback.
    """
