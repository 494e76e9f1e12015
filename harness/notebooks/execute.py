"""``chaoslab notebooks``: execute the notebooks with papermill, as regression tests.

Each notebook takes ``out_dir`` (and whatever else its ``parameters`` cell declares), records
its own expectations with ``harness.notebooks.lab.Checks`` into ``out_dir/results.json``, and is judged
by those verdicts - not merely by having run to the end. ``OUT/junit.xml`` has one test case
per recorded expectation, named by notebook, so CI shows which notebook check broke.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from harness.errors import BadInput
from harness.paths import notebooks_dir
from harness.report.junit import Case, junit_document, suite_element

RESULTS = "results.json"
JUNIT_XML = "junit.xml"


@dataclass(frozen=True)
class Check:
    """One expectation a notebook recorded (``harness.notebooks.lab.Checks.expect``)."""

    name: str
    passed: bool
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.name}: {self.detail}" if self.detail else self.name

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Check:
        return cls(str(raw["name"]), bool(raw["passed"]), str(raw.get("detail", "")))


@dataclass(frozen=True)
class NotebookResult:
    name: str
    executed: Path  # the executed copy, with its outputs
    seconds: float
    checks: tuple[Check, ...] = ()  # what it recorded
    error: str = ""  # what stopped it, or why nothing was recorded

    @property
    def failures(self) -> tuple[str, ...]:
        return tuple(str(c) for c in self.checks if not c.passed) + (
            (self.error,) if self.error else ()
        )

    @property
    def passed(self) -> bool:
        return not self.failures

    def cases(self) -> list[Case]:
        """JUnit test cases: one per recorded expectation (the first carries the notebook's
        time); what stopped the notebook, if anything, as one more."""
        cases = [
            Case(c.name, self.name, failure="" if c.passed else str(c), kind="expectation")
            for c in self.checks
        ]
        if self.error:
            error = Case("the notebook runs to the end", self.name, error=self.error)
            cases.append(replace(error, kind="notebook-error", text=self.error))
        return [replace(cases[0], seconds=self.seconds), *cases[1:]] if cases else []


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


def share_parameters(
    paths: Sequence[Path], parameters: Mapping[str, Any]
) -> dict[Path, dict[str, Any]]:
    """Each notebook's share of ``parameters``: those its ``parameters`` cell declares
    (papermill would pass the rest too, and only warn "Passed unknown parameter"). One that no
    chosen notebook declares is a mistake: every such one is named, with what each takes."""
    import papermill

    takes = {path: tuple(papermill.inspect_notebook(str(path))) for path in paths}
    unknown = [name for name in parameters if not any(name in t for t in takes.values())]
    if unknown:
        offered = "; ".join(f"{p.stem}: {', '.join(t)}" for p, t in takes.items())
        raise BadInput(f"no notebook takes {', '.join(unknown)} (they take - {offered})")
    return {path: {k: v for k, v in parameters.items() if k in takes[path]} for path in paths}


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
        error = f"cell {exc.exec_count} raised {exc.ename}: {exc.evalue}"
        checks, _ = _recorded(work)  # what it checked before it stopped
        return NotebookResult(path.stem, executed, time.monotonic() - started, checks, error)
    return NotebookResult(path.stem, executed, time.monotonic() - started, *_recorded(work))


def _recorded(work: Path) -> tuple[tuple[Check, ...], str]:
    """The expectations a notebook saved, and what is wrong if it saved none."""
    try:
        recorded = json.loads((work / RESULTS).read_text())
    except FileNotFoundError:
        return (), f"the notebook recorded no {RESULTS} (it must call Checks.save())"
    checks = tuple(Check.from_dict(e) for e in recorded["expectations"])
    return checks, "" if checks else "the notebook recorded no expectations"


def run_notebooks(
    paths: Sequence[Path],
    out_dir: Path,
    parameters: dict[str, Any],
    progress: Callable[[str], None] = print,
) -> list[NotebookResult]:
    shares = share_parameters(paths, parameters)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results = []
    for path in paths:
        left = [name for name in parameters if name not in shares[path]]
        if left:
            progress(f"  {path.stem} does not take {', '.join(left)}: its own defaults apply")
        result = run_notebook(path, out_dir, shares[path], progress)
        verdict = "pass" if result.passed else "FAIL: " + "; ".join(result.failures)
        progress(f"  {path.stem}: {verdict} ({result.seconds:.0f}s)")
        results.append(result)
        write_junit(results, out_dir / JUNIT_XML, started)  # a later failure keeps this
    return results


def write_junit(results: Sequence[NotebookResult], path: Path, started_at: float) -> Path:
    """One testsuite per notebook, one testcase per recorded expectation."""
    suites = [
        suite_element(r.name, r.cases(), index=i, seconds=r.seconds, started_at=started_at)
        for i, r in enumerate(results)
    ]
    junit_document(suites, "chaoslab notebooks").write(path, encoding="utf-8", xml_declaration=True)
    return path
