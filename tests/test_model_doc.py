"""docs/MODEL.md names the kernel of every equation: each ``kernels.<module>.<function>`` it cites
exists, and every public kernel function is cited (one formula, one place, one description)."""

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "MODEL.md"
KERNELS = ROOT / "src" / "inference_factory" / "kernels"
CITED = re.compile(r"`kernels\.(\w+)\.(\w+)`")


def _cited() -> set[tuple[str, str]]:
    return set(CITED.findall(DOC.read_text()))


def _public_kernels() -> list[tuple[str, str]]:
    """(module, function) of every public function defined in ``kernels/*.py``."""
    out = []
    for path in sorted(KERNELS.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                out.append((path.stem, node.name))
    return out


def test_the_document_cites_kernels_at_all():
    assert len(_cited()) >= 40, "docs/MODEL.md should name the kernel of each equation"


@pytest.mark.parametrize("module, name", sorted(_cited()), ids=lambda x: str(x))
def test_every_cited_kernel_exists(module, name):
    assert (KERNELS / f"{module}.py").exists(), f"docs/MODEL.md cites kernels.{module}, no such module"
    mod = importlib.import_module(f"inference_factory.kernels.{module}")
    fn = getattr(mod, name, None)
    assert inspect.isfunction(fn) and fn.__module__ == mod.__name__, \
        f"docs/MODEL.md cites kernels.{module}.{name}, which is not a function of that module"


@pytest.mark.parametrize("module, name", _public_kernels(), ids=lambda x: str(x))
def test_every_kernel_is_cited(module, name):
    assert (module, name) in _cited(), \
        f"kernels.{module}.{name} is not cited in docs/MODEL.md: name it at its equation"


def test_no_stale_code_references():
    """References the document once made to code that does not exist."""
    text = DOC.read_text()
    for stale in ("cost._op_bytes", "tape_exec", "tape_llvm.py`,", "`specs.py`", "`realism.py`",
                  "`plan.py`", "`economics.py`"):
        assert stale not in text, f"docs/MODEL.md still refers to {stale!r}"
