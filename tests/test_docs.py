"""The README and docs/ say what the tree holds: the README stays short, docs/architecture.md
lists every module and the layers tests/test_imports.py holds the package to, links resolve,
and code comments carry no dates (a measured figure and its date belong on a docs page)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from harness import paths
from harness.scenario import load_scenario
from tests.test_imports import LAYERS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 300


def tree_block(text: str) -> list[str]:
    """The lines of the page's ```text block under '## The tree'."""
    section = text.split("## The tree", 1)[1]
    return section.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def listed_modules(lines: list[str]) -> set[str]:
    """The paths a tree of two-space indentation names (``harness/kafka/wire.py``)."""
    found: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in lines:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        name = line.split()[0]
        stack = stack[:depth]
        path = "/".join([*(n for _d, n in stack), name]).replace("//", "/")
        if name.endswith("/"):
            stack.append((depth, name.rstrip("/")))
        else:
            found.add(path)
    return found


def test_the_architecture_page_lists_every_module() -> None:
    listed = listed_modules(tree_block(ARCHITECTURE.read_text()))
    actual = {p.relative_to(ROOT).as_posix() for p in (ROOT / "harness").rglob("*.py")}
    actual -= {p for p in actual if p.endswith("__init__.py") and p != "harness/__init__.py"}
    assert sorted(actual - listed) == [], "modules the page does not list"
    assert sorted(listed - actual) == [], "modules the page lists that do not exist"


def test_the_architecture_page_has_the_layers_the_imports_are_checked_against() -> None:
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", ARCHITECTURE.read_text(), re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))
    assert [f"harness.{room}" for _, room in rows] == list(LAYERS)


def test_the_readme_layout_names_every_room() -> None:
    layout = README.read_text().split("## Layout", 1)[1].split("```", 2)[1]
    for room in LAYERS:
        name = room.removeprefix("harness.")
        module = (ROOT / "harness" / f"{name}.py").exists()
        assert (f"{name}.py" if module else f"{name}/") in layout, name


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_links_between_the_pages_resolve() -> None:
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target in LINK.findall(page.read_text())
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert broken == []


DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b(?!T)")  # a constant's ISO timestamp is data


def comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module (test data strings are not)."""
    text = path.read_text()
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    return found


def test_code_comments_carry_no_dates() -> None:
    dated = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted([*(ROOT / "harness").rglob("*.py"), *(ROOT / "tests").rglob("*.py")])
        for line, text in comments_and_docstrings(path)
        if DATE.search(text)
    ]
    assert dated == []


def test_the_scenarios_page_names_each_scenarios_cut_as_its_file_has_it() -> None:
    """docs/scenarios.md's table says which cut `make test` runs of each library scenario: the
    file's own ``ci:`` (or ``demo:``) section, as ``Cut`` says it."""
    rows = re.findall(r"^\| \[`([\w.-]+)`\]\(#[\w-]+\) \| [^|]+ \| [^|]+ \| ([^|]+) \|$",
                      (DOCS / "scenarios.md").read_text(), re.M)  # fmt: skip
    named = {name: cut.strip() for name, cut in rows}
    for path in paths.library():
        section = load_scenario(path).section("ci")
        assert named.get(path.stem) == str(section), path.stem
