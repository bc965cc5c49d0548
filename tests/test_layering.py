"""The package's floors (shared/DESIGN.md): one folder per layer, each importing only the layers
below it, in this order:

    vocabulary (errors, units, bounds, axes) < kernels < output < specs < engine < factory
    < analysis < cli

Kernels import numpy and nothing else; the analysis layer never imports click; output never
imports the physics or the analysis; the engine's physics never imports an execution backend
(only ``engine/fused.py``, the point-list path, runs one; the physics sees the backend through
``engine/xp.py``); prices and cost assumptions come from ``specs/``, never from ``factory/``;
there is no import cycle, counting imports inside functions (only a heavy third-party import
may be deferred into a function); no module is over 450 lines; no private ``_name`` is imported
from another folder; analysis/ and cli/ reach the engine through the names its package
exports."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "inference_factory"
VOCABULARY = {"errors", "units", "bounds", "axes", "lazy"}
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


#: The tracer's vocabulary (engine/xp.py carries it for the backends): the physics calls
#: neutral array operations of xp instead and never asks whether it is traced.
TRACER_WORDS = {"is_traced", "take", "guarded", "concrete"}


def _identifiers(tree: ast.AST) -> set[str]:
    """Every name a module spells: variables, attributes, imported names and their aliases,
    functions, classes and arguments."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.update({node.name.split(".")[-1], node.asname or ""})
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return out - {""}


PHYSICS = ["grid", "block", "cost", "ops", "op", "layer_mix", "geometry",
           *(f"attention/{p.stem}" for p in sorted((PKG / "engine" / "attention").glob("*.py")))]


@pytest.mark.parametrize("name", PHYSICS)
def test_the_physics_does_not_know_it_is_traced(name):
    """The physics (the grid and cost of a table, a block, the ops and their builders, the
    attention kinds, the layer mix) never names the tracer's words: engine/xp.py carries
    them."""
    said = _identifiers(ast.parse((PKG / "engine" / f"{name}.py").read_text())) & TRACER_WORDS
    assert not said, f"engine/{name}.py says {sorted(said)}; ask engine/xp.py's array operations"


PRICE_NAMES = {"Price", "CostModel", "load_prices", "resolve_price",
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


# ---- the whole module graph: imports inside functions count -----------------------------------

def _lazy_names(init: Path) -> dict[str, str]:
    """A package's ``_LAZY`` map (public name -> defining module, relative), read from its
    ``__init__``: ``from package import name`` runs that module."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_LAZY"
                                                for t in node.targets):
            out = {}
            for k, v in zip(node.value.keys, node.value.values):
                v = ast.literal_eval(v)
                out[ast.literal_eval(k)] = v[0] if isinstance(v, tuple) else v
            return out
    return {}


def _resolve_lazy(pkg: str, rel: str) -> str:
    """``..closed_loop`` seen from package ``analysis.bench`` -> ``analysis.closed_loop``."""
    dots = len(rel) - len(rel.lstrip("."))
    base = pkg.split(".")[:len(pkg.split(".")) - dots + 1] if pkg else []
    return ".".join(base + [rel.lstrip(".")])


def full_graph() -> dict[str, set[str]]:
    """module -> package modules it imports anywhere (inside functions too; not what
    ``if TYPE_CHECKING:`` imports for annotations). ``from package import name`` where the
    package names it lazily (``_LAZY``) is an edge to the defining module; a submodule's
    edge to its own package (the usual re-export) is dropped."""
    lazy = {_name(p): _lazy_names(p) for p in MODULES if p.name == "__init__.py"}
    graph = {}
    for p in MODULES:
        tree = ast.parse(p.read_text())
        skip = {id(n) for top in ast.walk(tree) if isinstance(top, ast.If)
                and "TYPE_CHECKING" in ast.unparse(top.test) for n in ast.walk(top)}
        rel = p.relative_to(PKG).with_suffix("").parts
        pkg = list(rel[:-1])
        edges = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                edges |= {a.name.removeprefix("inference_factory").lstrip(".")
                          for a in node.names if a.name.startswith("inference_factory")}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    mod = ".".join(pkg[:len(pkg) - node.level + 1]
                                   + ([node.module] if node.module else []))
                elif node.module.startswith("inference_factory"):
                    mod = node.module.removeprefix("inference_factory").lstrip(".")
                else:
                    continue
                for a in node.names:
                    sub = f"{mod}.{a.name}".strip(".")
                    q = PKG / sub.replace(".", "/")
                    if q.with_suffix(".py").exists() or q.is_dir():
                        edges.add(sub)
                    elif a.name in lazy.get(mod, {}):
                        edges.add(_resolve_lazy(mod, lazy[mod][a.name]))
                    else:
                        edges.add(mod)
        graph[_name(p)] = edges
    known = set(graph)

    def resolve(m):      # `from .x import y` where y is a name: the module x
        while m and m not in known:
            m = m.rsplit(".", 1)[0] if "." in m else ""
        return m

    return {k: {m for m in (resolve(m) for m in v) if m and m != k
                and not k.startswith(m + ".")} for k, v in graph.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a -> ... -> a) per strongly connected component of two or more modules
    (Tarjan's algorithm, then a shortest way back within the component)."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    circles = []
    for comp in comps:
        start, inside = comp[0], set(comp)
        paths, seen = {start: [start]}, {start}
        frontier = [start]
        while frontier:            # breadth first, back to start
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & inside):
                    if w == start:
                        circles.append(paths[v] + [start])
                        frontier, nxt = [], []
                        break
                    if w not in seen:
                        seen.add(w)
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                else:
                    continue
                break
            frontier = nxt
    return circles


def test_there_is_no_import_circle_counting_imports_inside_functions():
    """DESIGN.md: no two modules import each other, counting imports inside functions (a
    function-level import of the package defers work; it does not make a circle go away).
    Only a heavy third-party import may be deferred, and those are not package edges."""
    circles = import_circles(full_graph())
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_circle_finder_finds_a_circle_behind_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}}
    assert import_circles(graph) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


MAX_LINES = 450


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_is_over_450_lines(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{_name(path)} has {n} lines (at most {MAX_LINES}: split it)"


def _folder_of(module: str) -> Path:
    q = PKG / module.replace(".", "/")
    return q if q.is_dir() else q.parent


def _from_imports(path: Path):
    """(node, module inside the package) of each ``from ... import`` of a module that reads
    the package (relative, or ``inference_factory...``)."""
    pkg = list(path.relative_to(PKG).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            yield node, ".".join(pkg[:len(pkg) - node.level + 1]
                                 + ([node.module] if node.module else []))
        elif node.module.startswith("inference_factory"):
            yield node, node.module.removeprefix("inference_factory").lstrip(".")


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_private_name_is_imported_from_another_folder(path):
    """A ``_name`` is its folder's own: another folder imports a public name (or the
    function moves where it belongs)."""
    bad = []
    for node, mod in _from_imports(path):
        for a in node.names:
            if a.name.startswith("_") and not a.name.startswith("__") \
                    and _folder_of(mod) != path.parent:
                bad.append(f"{mod}.{a.name}")
    assert not bad, f"{_name(path)} imports private names of another folder: {bad}"


@pytest.mark.parametrize("path", [p for p in MODULES if _name(p).split(".")[0]
                                  in ("factory", "analysis", "cli")], ids=_name)
def test_factory_analysis_and_cli_reach_the_engine_through_its_public_names(path):
    """``from ..engine import name`` with ``name`` in ``engine.__all__``: never a module
    inside the engine (``engine.geometry``, ``engine.arrays``...), which may change."""
    import inference_factory.engine as engine

    bad = [a.name for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.Import) for a in node.names
           if a.name.startswith("inference_factory.engine")]
    for node, mod in _from_imports(path):
        if mod.startswith("engine."):
            bad.append(mod)
        elif mod == "engine":
            bad += [f"engine.{a.name}" for a in node.names if a.name not in engine.__all__]
    assert not bad, f"{_name(path)} reaches into the engine: {sorted(set(bad))}"


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
