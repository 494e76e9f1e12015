"""Writing the report files of one run directory, or of several run together."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.paths import revision
from harness.results.model import ScenarioResult, load, missing

from .junit import write_junit
from .markdown import matrix_markdown, scenario_markdown, soak_markdown
from .plots import write_plots
from .story import what_happened
from .table import beside

REPORT_MD = "report.md"
JUNIT_XML = "junit.xml"


@dataclass(frozen=True)
class Report:
    """The files a report wrote."""

    markdown: Path
    junit: Path
    plots: tuple[Path, ...] = ()
    scenarios: tuple[Report, ...] = ()  # a matrix report: each scenario's own report
    runs: tuple[ScenarioResult, ...] = ()  # a matrix report: the results it read, errors included


def write_report(run_dir: Path) -> Report:
    """report.md, the plots and junit.xml for the run in ``run_dir`` (from its results.json,
    histories and ledgers), written into ``run_dir``."""
    return _write(load(Path(run_dir)))


def _write(run: ScenarioResult, others: Sequence[ScenarioResult] = ()) -> Report:
    """``others``: the runs of its matrix that were under way beside it."""
    assert run.directory is not None
    directory = run.directory
    plots = write_plots(run, directory) if not run.error else ()
    markdown = directory / REPORT_MD
    story = what_happened(run) if not run.error else []
    markdown.write_text(scenario_markdown(run, [p.name for p in plots], story, others))
    junit = write_junit([run], directory / JUNIT_XML, name=run.name)
    return Report(markdown, junit, plots)


def write_matrix_report(out_dir: Path, run_dirs: Sequence[Path]) -> Report:
    """Each scenario's own report, then ``out_dir/report.md`` (scenario x variant, linked to
    them) and ``out_dir/junit.xml`` (one testsuite per scenario). A run directory without
    readable results is reported as an error rather than left out."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts: list[Report] = []
    runs: list[ScenarioResult] = []
    for run_dir in map(Path, run_dirs):
        try:
            runs.append(load(run_dir))
        except (FileNotFoundError, ValueError) as exc:  # unreadable results.json included
            runs.append(missing(run_dir, str(exc)))
    links: list[str | None] = []
    for run_dir, run in zip(map(Path, run_dirs), runs, strict=True):
        if run_dir.is_dir():
            part = _write(run, beside(run, runs))
            parts.append(part)
            links.append(Path(os.path.relpath(part.markdown, out_dir)).as_posix())
        else:
            links.append(None)
    markdown = out_dir / REPORT_MD
    markdown.write_text(matrix_markdown(runs, links))
    junit = write_junit(runs, out_dir / JUNIT_XML)
    return Report(markdown, junit, scenarios=tuple(parts), runs=tuple(runs))


def write_soak_page(
    path: Path, run_dirs: Sequence[Path], *, wall_s: float, command: str, cores: int
) -> Path:
    """The soak's page (``make soak`` writes docs/soak.md): the runs' soak table, with what it
    was measured with. A run without readable results counts as one that died."""
    runs = []
    for run_dir in map(Path, run_dirs):
        try:
            runs.append(load(run_dir))
        except (FileNotFoundError, ValueError) as exc:
            runs.append(missing(run_dir, str(exc)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        soak_markdown(runs, wall_s=wall_s, command=command, revision=revision(), cores=cores)
    )
    return path
