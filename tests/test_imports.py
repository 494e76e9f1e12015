"""The harness's import graph has no cycle, no import inside a function hides one, and no room
imports one above it (the layers of docs/architecture.md).

Read with the standard library's ``ast``, not by importing: a cycle that works only because of
the order modules happen to load in is still a cycle. Edges are the module-level imports
(``if TYPE_CHECKING:`` blocks excluded, they never run) plus, for ``import a.b.c``, the
packages Python runs on the way (``a``, ``a.b``), except the importer's own ancestors, which
are already loading when it runs. The modules found and imported with ``importlib`` count as
imported by their finder: the fault families by ``harness.faults.kinds``, the backends'
modules by ``harness.environment.backends``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from harness.environment.backends import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "harness"
# Modules that import others at run time (``importlib``), not by a statement: every module of a
# package (a prefix ending in "."), or the modules named.
DISCOVERED: dict[str, tuple[str, ...]] = {
    "harness.faults.kinds": ("harness.faults.families.",),
    "harness.environment.backends": tuple(b.module for b in REGISTRY.values()),
}
# The rooms, lowest first: a module imports from its own room and the rooms below it only.
LAYERS = (
    "harness.errors",
    "harness.paths",
    "harness.console",
    "harness.readiness",
    "harness.records",
    "harness.history",
    "harness.kafka",
    "harness.environment",
    "harness.workload",
    "harness.checker",
    "harness.sources",
    "harness.pipeline",
    "harness.outbox",
    "harness.faults",
    "harness.scenario",
    "harness.results",
    "harness.run",
    "harness.report",
    "harness.explore",
    "harness.notebooks",
    "harness.repair",
    "harness.cli",
)


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def targets(importer: str, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> set[str]:
    """The harness modules ``node`` (in module ``importer``) imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = importer.split(".")
            if known[importer].name != "__init__.py":
                package = package[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, base] if base else package)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    found = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != importer:
            found.add(name)
    return found


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for statement in tree.body:
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
            continue
        if isinstance(statement, ast.Import | ast.ImportFrom | ast.If | ast.Try):
            found += [n for n in ast.walk(statement) if isinstance(n, ast.Import | ast.ImportFrom)]
    return found


def graph() -> tuple[dict[str, set[str]], list[str]]:
    """Module -> the harness modules loading it loads; and the imports made inside functions."""
    known = modules()
    edges: dict[str, set[str]] = {}
    local: list[str] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        direct: set[str] = set()
        for node in module_level_imports(tree):
            direct |= targets(name, node, known)
        loaded = set(direct)
        for target in direct:  # `import a.b.c` runs a/__init__ and a/b/__init__ first
            parts = target.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent in known and not name.startswith(parent + "."):
                    loaded.add(parent)
        for found in DISCOVERED.get(name, ()):
            loaded |= {m for m in known if m.startswith(found) if found.endswith(".") or m == found}
        edges[name] = loaded - {name}
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(function):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        for target in targets(name, inner, known):
                            local.append(f"{name}.{function.name} imports {target}")
    return edges, local


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_harness_has_no_import_cycle() -> None:
    edges, _ = graph()
    assert len(edges) > 50  # the whole package was read
    assert cycles(edges) == []


def room(module: str) -> int:
    """The layer of a harness module (its room: a top-level module or package)."""
    top = ".".join(module.split(".")[:2])
    assert top in LAYERS, f"{top} is in no layer of LAYERS: place it"
    return LAYERS.index(top)


def upward_imports() -> list[str]:
    edges, _ = graph()
    return [
        f"{importer} imports {target}"
        for importer, targets in sorted(edges.items())
        if importer != PACKAGE
        for target in sorted(targets)
        if target != PACKAGE and room(target) > room(importer)
    ]


def test_no_room_imports_one_above_it() -> None:
    assert upward_imports() == []


def test_the_layer_check_finds_an_upward_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text("from harness import cli\n")
    (package / "cli.py").write_text("from harness.errors import LabError\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "DISCOVERED", {})
    assert upward_imports() == ["harness.errors imports harness.cli"]


def test_the_discovered_backends_are_edges_of_the_graph() -> None:
    edges, _ = graph()
    assert "harness.environment.local" in edges["harness.environment.backends"]
    assert "harness.environment.containers.backend" in edges["harness.environment.backends"]


def loaded_by(module: str) -> list[str]:
    """The modules importing ``module`` loads, in a fresh interpreter."""
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


BACKEND_MODULES = ("harness.environment.local", "harness.environment.external",
                   "harness.environment.containers", "docker", "testcontainers")  # fmt: skip


@pytest.mark.parametrize(
    "module",
    [
        "harness.pipeline.listener.consumer",
        "harness.outbox.relay",
        "harness.cli",
        "harness.run.runner",
    ],
)
def test_no_backend_loads_until_it_is_asked_for(module: str) -> None:
    # A listener process, a relay process, the CLI and a run on the local backend: none
    # loads a backend's modules (docker and testcontainers included) by being imported.
    loaded = loaded_by(module)
    assert module in loaded
    assert [m for m in loaded if m.startswith(BACKEND_MODULES)] == []


CONSUMER_PROCESSES = ("harness.pipeline.listener.consumer", "harness.outbox.relay",
                      "harness.pipeline.connect.worker")  # fmt: skip
CHECKING_LIBRARIES = ("numpy", "pyarrow", "pandas", "matplotlib")


@pytest.mark.parametrize("module", CONSUMER_PROCESSES)
def test_a_consumer_process_does_not_load_the_checkers_libraries(module: str) -> None:
    # Started hundreds of times a suite (each lane, each restart): numpy and pyarrow were half
    # a listener's start-up CPU, and only the run's checker uses them.
    loaded = loaded_by(module)
    assert module in loaded
    assert [m for m in loaded if m.split(".")[0] in CHECKING_LIBRARIES] == []


def test_a_backend_loads_when_asked_for() -> None:
    code = (
        "import sys\n"
        "from harness.environment.backends import get_backend\n"
        "get_backend('containers').environment()\n"
        "print('testcontainers' in sys.modules, 'harness.environment.local' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_the_discovered_fault_families_are_edges_of_the_graph() -> None:
    edges, _ = graph()
    assert "harness.faults.families.broker" in edges["harness.faults.kinds"]
    # ...so a family importing the registry back would be a cycle, not a hidden one.
    assert not any("harness.faults.kinds" in edges[m] for m in edges if ".families." in m)


def test_no_harness_module_is_imported_inside_a_function() -> None:
    # Third-party imports inside functions are fine (pyspark loads only where Spark runs); a
    # harness one is how a cycle hides.
    _, local = graph()
    assert local == []


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ({"a": "import harness.b\n", "b": "from harness import a\n"}, [["harness.a", "harness.b"]]),
        ({"a": "import harness.b\n", "b": "x = 1\n"}, []),
        ({"a": "import harness.b\n", "b": "def f():\n    import harness.a\n"}, []),
    ],
)
def test_the_cycle_finder_finds_a_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sources: dict[str, str], expected: list
) -> None:
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in sources.items():
        (package / f"{name}.py").write_text(text)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    edges, local = graph()
    assert cycles(edges) == expected
    assert bool(local) == ("def f" in "".join(sources.values()))
