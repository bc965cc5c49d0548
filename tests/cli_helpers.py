"""Assertions every CLI test shares: success, or one clean error line with status 2."""


def ok(result) -> str:
    """Status 0, nothing on stderr; returns stdout."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stderr == ""
    return result.stdout


def fails(result) -> str:
    """Status 2, nothing on stdout, exactly one 'error: ...' line on stderr, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    # SystemExit is how click reports the status; anything else escaped the handler
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.stdout == ""
    err = result.stderr
    assert "Traceback" not in err and "Traceback" not in result.output
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines[0]
    assert err.endswith("\n")
    return lines[0]


def title_lines(text: str) -> list[str]:
    """The lines of a command's output, its title's wrapped continuations (lines indented
    two, output.tables.fit_lines) joined back to the first: the title as one line."""
    lines = text.splitlines()
    i = 1
    while i < len(lines) and lines[i].startswith("  "):
        i += 1
    return [" ".join(s.strip() for s in lines[:i])] + lines[i:]


def title(text: str) -> str:
    """The title of a command's output as one line (:func:`title_lines`)."""
    return title_lines(text)[0]
