"""The package's floors (shared/DESIGN.md): one folder per layer, each importing only the layers
below it, in this order:

    vocabulary (errors, units, bounds, axes) < kernels < output < specs < engine < factory
    < analysis < cli

Kernels import numpy and nothing else; the analysis layer never imports click; output never
imports the physics or the analysis; the engine's physics never imports an execution backend
(only ``engine/fused.py``, the point-list path, runs one; the physics sees the backend through
``engine/xp.py``); prices and cost assumptions come from ``specs/``, never from ``factory/``;
there is no import cycle."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "inference_factory"
VOCABULARY = {"errors", "units", "bounds", "axes"}
FLOORS = ["kernels", "output", "specs", "engine", "factory", "analysis", "cli"]
MODULES = sorted(p for p in PKG.rglob("*.py"))


def _name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("").parts
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def imports(path: Path, *, top_level_only: bool = False) -> tuple[set[str], set[str]]:
    """(package modules, outside top-level packages) a module imports; with ``top_level_only``
    the imports run when the module is imported (not those inside functions)."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(PKG).with_suffix("").parts
    pkg = list(rel[:-1])
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:       # imports under `if`/`try` at module level run at import too,
        # except those under `if TYPE_CHECKING:` (annotations only)
        def runs(top):
            return not (isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                        or (isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test)))
        nodes = [n for top in tree.body if runs(top) for n in ast.walk(top)]
    inside, outside = set(), set()
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("inference_factory"):
                    inside.add(a.name.removeprefix("inference_factory").lstrip("."))
                else:
                    outside.add(a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            elif node.module.startswith("inference_factory"):
                mod = node.module.removeprefix("inference_factory").lstrip(".")
            else:
                outside.add(node.module.split(".")[0])
                continue
            for a in node.names:      # `from . import x` may name a module
                sub = f"{mod}.{a.name}".strip(".")
                p = PKG / sub.replace(".", "/")
                inside.add(sub if p.with_suffix(".py").exists() or p.is_dir() else mod)
    return inside, outside


def floor(module: str) -> int:
    """-1 for the package root and the vocabulary modules, else the index in FLOORS."""
    head = module.split(".")[0]
    return FLOORS.index(head) if head in FLOORS else -1


def test_the_top_holds_the_layer_folders_and_a_few_vocabulary_modules():
    files = {p.stem for p in PKG.glob("*.py")} - {"__init__", "__main__"}
    folders = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert files <= VOCABULARY, f"modules at the top beyond the vocabulary: {files - VOCABULARY}"
    assert folders == set(FLOORS), folders ^ set(FLOORS)


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_import_runs_back_up(path):
    me = _name(path)
    if floor(me) < 0 and me not in VOCABULARY:      # the package root re-exports lazily
        return
    inside, _ = imports(path)
    up = sorted(m for m in inside if m and floor(m) > floor(me))
    assert not up, f"{me} (floor {FLOORS[floor(me)] if floor(me) >= 0 else 'vocabulary'}) " \
                   f"imports {up}, a floor above it"
    if me in VOCABULARY:
        assert not any(m.split(".")[0] in FLOORS for m in inside), (me, inside)


@pytest.mark.parametrize("path", sorted((PKG / "kernels").glob("*.py")), ids=lambda p: p.name)
def test_kernels_import_only_numpy(path):
    inside, outside = imports(path)
    extra = (outside | inside) - {"__future__", "math", "numpy", "typing"}
    assert not extra, f"kernels/{path.name} imports {sorted(extra)}; kernels may import only numpy"


@pytest.mark.parametrize("path", [p for p in MODULES if floor(_name(p)) < FLOORS.index("cli")],
                         ids=_name)
def test_only_the_command_line_imports_click(path):
    assert "click" not in imports(path)[1], f"{_name(path)} imports click"


@pytest.mark.parametrize("path", sorted((PKG / "output").glob("*.py")), ids=lambda p: p.name)
def test_output_knows_arrays_and_files_not_the_physics(path):
    inside, _ = imports(path)
    bad = sorted(m for m in inside if m.split(".")[0] in {"kernels", "engine", "factory",
                                                          "analysis"})
    assert not bad, f"output/{path.name} imports {bad}"


ENTRY = {"engine.fused"}     # the engine's one import of a backend


@pytest.mark.parametrize("path", sorted((PKG / "engine").glob("*.py")), ids=lambda p: p.name)
def test_engine_physics_never_imports_a_backend(path):
    if _name(path) in ENTRY:
        return
    inside, outside = imports(path)
    bad = sorted(m for m in inside if m.startswith("engine.backends")) + sorted(
        outside & {"numba", "llvmlite"})
    assert not bad, f"{_name(path)} imports {bad}; the physics sees backends through engine/xp.py"


PRICE_NAMES = {"Price", "Economics", "load_prices", "resolve_price",
               "INPUT_TOKENS_PER_OUTPUT_TOKEN"}


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_nothing_takes_prices_from_the_factory(path):
    me = _name(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("config") \
                and (node.level or node.module.startswith("inference_factory")):
            got = {a.name for a in node.names} & PRICE_NAMES
            assert not got, f"{me} takes {sorted(got)} from factory/config.py; use specs.prices"


def test_there_is_no_import_cycle():
    """Among the imports that run at import time (function-level imports are lazy by design)."""
    graph = {}
    for p in MODULES:
        me = _name(p)
        graph[me] = {m for m in imports(p, top_level_only=True)[0] if m != me}
    known = set(graph)

    def resolve(m):      # `from .x import y` where y is a name: the module x
        while m and m not in known:
            m = m.rsplit(".", 1)[0] if "." in m else ""
        return m

    graph = {k: {resolve(m) for m in v} - {"", k} for k, v in graph.items()}
    # a package's __init__ importing its own submodules, and a submodule importing its
    # package's names, is the usual re-export, not a cycle of logic: drop child -> parent edges
    graph = {k: {m for m in v if not k.startswith(m + ".")} for k, v in graph.items()}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                raise AssertionError(" -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


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


def test_a_one_point_report_needs_neither_xarray_nor_pandas_once_tables_are_cached(tmp_path):
    """The one-point ``roofline`` report runs on arrays (engine.arrays) and reads the measured
    tables from the cache of parsed tables: after a first process has parsed them, the next
    imports neither xarray nor pandas (their import is most of a one-point answer's time)."""
    import os
    import subprocess
    import sys

    code = ("import sys; from inference_factory.cli import cli; "
            "cli.main(['roofline', '-m', 'Llama-3.1-70B', '-H', 'H100-SXM', '--tp', '8', "
            "'--batch-size', '64'], standalone_mode=False); "
            "print(','.join(m for m in ('xarray', 'pandas', 'numba') if m in sys.modules), "
            "file=sys.stderr)")
    env = dict(os.environ, INFERENCE_FACTORY_CACHE_DIR=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env=env)
    assert "pandas" in first.stderr and "decode (one step)" in first.stdout
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env=env)
    assert again.stderr.strip() == "" and again.stdout == first.stdout


def _policy_reads(path: Path) -> list[str]:
    """Where a module reads a serving engine's ``policy`` (``x.policy``, ``getattr(x,
    "policy")``) or compares a ``policy`` name: ``file:line``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "policy":
            out.append(node)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr" \
                and any(isinstance(a, ast.Constant) and a.value == "policy" for a in node.args):
            out.append(node)
        elif isinstance(node, ast.Compare) and any(
                isinstance(o, ast.Name) and o.id == "policy"
                for o in [node.left, *node.comparators]):
            out.append(node)
    return [f"{path.relative_to(PKG)}:{n.lineno}" for n in out]


def test_a_serving_engines_policies_are_its_methods():
    """No code outside ``specs/engines.py`` switches on a profile's ``policy``: what a policy
    means is a method of :class:`~inference_factory.specs.engines.ServingEngine`
    (``prefill_mixes_with_decode``, ``mixed_pass_tokens``), so a new policy is one entry
    there, never an ``if`` in shared code."""
    home = PKG / "specs" / "engines.py"
    found = [w for p in MODULES if p != home for w in _policy_reads(p)]
    assert not found, f"a profile's policy read outside specs/engines.py: {found}"
    assert _policy_reads(home), "the scan finds the reads it forbids elsewhere"
