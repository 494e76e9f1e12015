"""``chaoslab notebooks``: execute the notebooks with papermill, as regression tests.

Each notebook takes ``out_dir`` (and whatever else its ``parameters`` cell declares), records
its own expectations with ``harness.lab.Checks`` into ``out_dir/results.json``, and is judged
by those verdicts - not merely by having run to the end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.errors import BadInput
from harness.paths import notebooks_dir


@dataclass(frozen=True)
class NotebookResult:
    name: str
    executed: Path  # the executed copy, with its outputs
    seconds: float
    failures: tuple[str, ...]  # failed expectations, or the error that stopped the notebook

    @property
    def passed(self) -> bool:
        return not self.failures


def find(names: Sequence[str]) -> list[Path]:
    """The notebooks named (``01`` or ``01-quickstart`` or a path), or all of them."""
    every = sorted(notebooks_dir().glob("[0-9]*.ipynb"))
    if not names:
        if not every:
            raise BadInput(f"no notebooks in {notebooks_dir()}")
        return every
    chosen = []
    for name in names:
        path = Path(name)
        if path.suffix == ".ipynb" and path.exists():
            chosen.append(path)
            continue
        matches = [p for p in every if p.stem == name or p.stem.startswith(f"{name}-")]
        if len(matches) != 1:
            known = ", ".join(p.stem for p in every)
            raise BadInput(f"no single notebook matches {name!r} (have: {known})")
        chosen.append(matches[0])
    return chosen


def parse_parameters(pairs: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``-p name value`` pairs; values are read as YAML scalars (``600`` is a number)."""
    params: dict[str, Any] = {}
    for name, value in pairs:
        if not name.isidentifier():
            raise BadInput(f"-p {name}: a parameter name must be an identifier")
        params[name] = yaml.safe_load(value) if value else ""
    return params


def run_notebook(
    path: Path, out_dir: Path, parameters: dict[str, Any], progress: Callable[[str], None]
) -> NotebookResult:
    import papermill
    from papermill.exceptions import PapermillExecutionError

    work = (out_dir / path.stem).resolve()  # the kernel runs in the notebook's folder
    executed = out_dir / path.name
    started = time.monotonic()
    progress(f"running {path.name} -> {executed}")
    try:
        papermill.execute_notebook(
            str(path),
            str(executed),
            parameters={**parameters, "out_dir": str(work)},
            kernel_name="python3",
            cwd=str(path.resolve().parent),  # where JupyterLab starts a notebook's kernel
            progress_bar=False,
        )
    except PapermillExecutionError as exc:
        failure = f"cell {exc.exec_count} raised {exc.ename}: {exc.evalue}"
        return NotebookResult(path.stem, executed, time.monotonic() - started, (failure,))
    return NotebookResult(path.stem, executed, time.monotonic() - started, _verdicts(work))


def _verdicts(work: Path) -> tuple[str, ...]:
    try:
        recorded = json.loads((work / "results.json").read_text())
    except FileNotFoundError:
        return ("the notebook recorded no results.json (it must call Checks.save())",)
    if not recorded["expectations"]:
        return ("the notebook recorded no expectations",)
    return tuple(
        f"{e['name']}: {e['detail']}" if e["detail"] else e["name"]
        for e in recorded["expectations"]
        if not e["passed"]
    )


def run_notebooks(
    paths: Sequence[Path],
    out_dir: Path,
    parameters: dict[str, Any],
    progress: Callable[[str], None] = print,
) -> list[NotebookResult]:
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for path in paths:
        result = run_notebook(path, out_dir, parameters, progress)
        verdict = "pass" if result.passed else "FAIL: " + "; ".join(result.failures)
        progress(f"  {path.stem}: {verdict} ({result.seconds:.0f}s)")
        results.append(result)
    return results
