"""Command-line interface: ``inference-factory hardware|models|roofline``.

A thin layer over the library: it parses options, calls :func:`inference_factory.evaluate`
or the spec loaders, and formats the result. No physics lives here; values are only
converted from SI back to the vendor units of the spec files for display.

Any :class:`~inference_factory.SpecError` or command-line usage error is printed as one line
``error: <message>`` on stderr and the process exits with status 2 (no traceback).

This module holds the root group, its error handling and the entry point; each command lives
in a module of its own (``specs_show.py``: hardware and models, ``roofline.py``, ``validate.py``,
``factory.py``, ``questions.py``, ``sweep.py``, ``plan.py``, ``catalog.py``) and is registered
at the bottom; ``text.py`` holds the display helpers they share.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import click

from .. import __version__
from ..errors import SpecError
from .text import _one_line

PROG = "inference-factory"
EXIT_USAGE = 2


# --------------------------------------------------------------------------------------------
# error handling: one line on stderr, status 2
# --------------------------------------------------------------------------------------------


def _error(message: str) -> None:
    click.echo(f"error: {_one_line(message)}", err=True)


#: Exit status after Ctrl-C (SIGINT): 128 + 2, the shell's convention.
EXIT_INTERRUPTED = 130


def _show_warning(message, category, filename, lineno, file=None, line=None, _base=None):
    """A :class:`~inference_factory.errors.SpecWarning` as one ``warning: ...`` stderr line;
    other warnings as Python shows them."""
    from ..errors import SpecWarning

    if isinstance(message, SpecWarning) or (isinstance(category, type)
                                            and issubclass(category, SpecWarning)):
        click.echo(f"warning: {_one_line(str(message))}", err=True)
    elif _base is not None:
        _base(message, category, filename, lineno, file, line)


class _Group(click.Group):
    """Click group whose ``main`` turns SpecError and usage errors into one stderr line."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any):
        import functools
        import warnings

        no_args_help = getattr(click.exceptions, "NoArgsIsHelpError", None)
        try:
            with warnings.catch_warnings():
                warnings.showwarning = functools.partial(_show_warning,
                                                         _base=warnings.showwarning)
                rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                  standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except KeyboardInterrupt:
            _error("interrupted")
            code = EXIT_INTERRUPTED
        except SpecError as exc:
            _error(str(exc))
            code = EXIT_USAGE
        except click.UsageError as exc:
            if no_args_help is not None and isinstance(exc, no_args_help):
                # bare ``inference-factory`` (or a bare subgroup): show help, not an error
                click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
                code = 0
            else:
                hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
                _error(exc.format_message() + hint)
                code = EXIT_USAGE
        except click.ClickException as exc:
            _error(exc.format_message())
            code = exc.exit_code
        except click.Abort as exc:
            # click turns Ctrl-C (KeyboardInterrupt) into Abort; a prompt's EOF is an Abort too
            interrupted = isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt)
            _error("interrupted" if interrupted else "aborted")
            code = EXIT_INTERRUPTED if interrupted else 1
        if standalone_mode:
            sys.exit(code)
        return code


# --------------------------------------------------------------------------------------------
# root group
# --------------------------------------------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name=PROG)
def cli() -> None:
    """Explain and predict LLM-serving performance from hardware and model specs.

    Names are case-insensitive and may be aliases (e.g. h800) or paths to TOML files.
    INFERENCE_FACTORY_HARDWARE_DIR and INFERENCE_FACTORY_MODELS_DIR put your own spec
    folders in front of the bundled ones (they add to them and shadow same-named ones).
    """


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; exits with 0, or 2 on a bad input (one stderr line)."""
    return cli.main(args=list(argv) if argv is not None else None, prog_name=PROG)



# --------------------------------------------------------------------------------------------
# factory commands (defined in the factory layer, registered here)
# --------------------------------------------------------------------------------------------

from .factory import compare_cmd, simulate_cmd  # noqa: E402

cli.add_command(compare_cmd)
cli.add_command(simulate_cmd)

# questions (best-draft, max-batch, cheapest, pareto, tornado, montecarlo): questions_cli.py
from .questions import COMMANDS as _QUESTION_COMMANDS  # noqa: E402

for _cmd in _QUESTION_COMMANDS:
    cli.add_command(_cmd)

# price-by-position (cost per token by position, split by operation group): price_position.py
from .price_position import price_by_position_cmd  # noqa: E402

cli.add_command(price_by_position_cmd)

# sweep (grids to .nc/.zarr/.csv/.parquet, plots, dask): sweep_cli.py
from .sweep import sweep_cmd  # noqa: E402

cli.add_command(sweep_cmd)

# plan (GPU budget and targets -> recommended deployment): plan_cli.py
from .plan import plan_cmd  # noqa: E402
from .bench import bench_cmd  # noqa: E402

cli.add_command(plan_cmd)
cli.add_command(bench_cmd)

# prices list|show, configs list|show: catalog_cli.py
from .catalog import COMMANDS as _CATALOG_COMMANDS  # noqa: E402

for _cmd in _CATALOG_COMMANDS:
    cli.add_command(_cmd)

# hardware list|show, models list|show: specs_show.py; roofline: roofline.py; validate: validate.py
from .specs_show import hardware_group, models_group  # noqa: E402
from .roofline import roofline  # noqa: E402
from .validate import validate  # noqa: E402

for _cmd in (hardware_group, models_group, roofline, validate):
    cli.add_command(_cmd)


def _refuse_empty(cmd: click.Command) -> None:
    """Every text option and argument of ``cmd`` (and its subcommands) refuses an empty value
    (``-H ''``, ``--price-basis ''``, ``-c ''``), which some commands read as 'unset' and
    others as a name: one line naming the option, exit 2 (issue 30; one mechanism)."""
    for sub in getattr(cmd, "commands", {}).values():
        _refuse_empty(sub)
    for param in cmd.params:
        if getattr(param, "is_flag", False) or not isinstance(
                param.type, (click.types.StringParamType, click.Path)):
            continue

        def check(ctx, prm, value, _then=param.callback):
            values = value if isinstance(value, (tuple, list)) else (value,)
            if any(isinstance(v, str) and not v.strip() for v in values):
                raise click.BadParameter("an empty value; give a name, a file or leave the "
                                         "option out", ctx=ctx, param=prm)
            return _then(ctx, prm, value) if _then is not None else value
        param.callback = check


# last: every command above is registered before the group runs
_refuse_empty(cli)
if __name__ == "__main__":  # pragma: no cover
    main()
