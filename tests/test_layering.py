"""Imports go one way (shared/DESIGN.md): kernels <- specs/realism <- engine <- factory,
economics, questions, validation, sweep <- cli. Kernels import numpy and nothing else."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "inference_factory"


def imported(path: Path) -> set[str]:
    """Top-level names a module imports, with relative imports resolved inside the package."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(PKG).with_suffix("").parts
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel[:-node.level]) if node.level <= len(rel) else []
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [f"{mod}.{a.name}".strip(".") for a in node.names]
                out |= {"inference_factory." + n.split(".")[0] if n else "inference_factory"
                        for n in names}
            else:
                out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("path", sorted((PKG / "kernels").glob("*.py")), ids=lambda p: p.name)
def test_kernels_import_only_numpy(path):
    extra = imported(path) - {"__future__", "math", "numpy", "typing"}
    assert not extra, f"kernels/{path.name} imports {sorted(extra)}; kernels may import only numpy"


LOWER = {  # module -> package modules it must not import (the layers above it)
    "specs.py": {"engine", "factory", "economics", "questions", "validation", "sweep", "cli"},
    "realism.py": {"engine", "factory", "economics", "questions", "validation", "sweep", "cli"},
    **{f"engine/{p.name}": {"factory", "economics", "questions", "validation", "sweep", "cli"}
       for p in (PKG / "engine").glob("*.py")},
    "economics.py": {"questions", "validation", "sweep", "cli"},
}


@pytest.mark.parametrize("name", sorted(LOWER))
def test_lower_layers_do_not_import_upper_ones(name):
    got = {n.split(".", 1)[1] for n in imported(PKG / name) if n.startswith("inference_factory.")}
    assert not (got & LOWER[name]), f"{name} imports {sorted(got & LOWER[name])}"


@pytest.mark.parametrize("path", sorted((PKG / "factory").glob("*.py")), ids=lambda p: p.name)
def test_factory_does_not_import_the_surface(path):
    got = {n.split(".", 1)[1] for n in imported(path) if n.startswith("inference_factory.")}
    bad = got & {"questions", "validation", "sweep", "sweep_cli", "questions_cli"}
    if path.name != "cli_commands.py":
        bad |= got & {"cli"}
    assert not bad, f"factory/{path.name} imports {sorted(bad)}"


def test_the_command_line_starts_without_the_numeric_stack():
    """--help, --version and completion import the CLI modules only: numpy, xarray, pandas and
    scipy load inside the commands that use them (start time: benchmarks/bench_cli_start.py)."""
    import subprocess
    import sys

    # --help needs no spec (pydantic validates spec files, so 'hardware list' loads it)
    for command, heavy in (("", "'numpy', 'xarray', 'pandas', 'scipy', 'matplotlib', 'pydantic'"),
                           ("cli.main(['hardware', 'list'], standalone_mode=False); ",
                            "'numpy', 'xarray', 'pandas', 'scipy', 'matplotlib'")):
        code = ("import sys; from inference_factory.cli import cli; " + command +
                f"print(','.join(m for m in ({heavy}) if m in sys.modules), file=sys.stderr)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        assert out.stderr.strip() == "", (command, out.stderr)
