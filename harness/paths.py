"""Where the project's files are, wherever the lab is started from.

JupyterLab starts a notebook's kernel in the notebook's own folder, and people run the CLI from
anywhere: so the scenario library, the notebooks, the default run directory and the default
environment directory are found from the project's root, never from the current directory.

The root is the checkout this package was installed from (``pip install -e .``, as the
Makefile does): the folder above ``harness/`` that holds ``scenarios/``. ``$CHAOSLAB_HOME``
names another one (a copy of the library next to a non-editable install); failing both, the
current directory.
"""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path

from harness.errors import BadInput

HOME_VAR = "CHAOSLAB_HOME"
SCENARIO_SUFFIXES = (".yaml", ".yml")


@cache
def _installed_root() -> Path | None:
    root = Path(__file__).resolve().parent.parent
    return root if (root / "scenarios").is_dir() else None


def project_root() -> Path:
    """The project's folder: ``$CHAOSLAB_HOME``, the checkout of this package, or the cwd."""
    home = os.environ.get(HOME_VAR)
    if home:
        return Path(home).expanduser().resolve()
    return _installed_root() or Path.cwd()


def scenarios_dir() -> Path:
    return project_root() / "scenarios"


def notebooks_dir() -> Path:
    return project_root() / "notebooks"


def runs_dir() -> Path:
    """Where runs go unless told otherwise: ``runs/`` of the project (git ignores it)."""
    return project_root() / "runs"


def library() -> list[Path]:
    """The scenario library, the baseline first."""
    found = [p for p in scenarios_dir().iterdir() if p.suffix in SCENARIO_SUFFIXES]
    return sorted(found, key=lambda p: library_key(p.stem))


def library_key(name: str) -> tuple[bool, str]:
    """Where a scenario of this name sorts in the library: the baseline first, then by name."""
    return (name != "baseline", name)


def find_scenario(ref: str | Path) -> Path:
    """A scenario file from what a user typed: a path (from the current directory, or from the
    project's root as the README writes them: ``scenarios/baseline.yaml``) or a library name
    (``baseline``). Raises BadInput naming where it looked and what the library holds."""
    given = Path(ref).expanduser()
    candidates = [given]
    if not given.is_absolute():
        candidates.append(project_root() / given)
        if len(given.parts) == 1:
            candidates += [scenarios_dir() / f"{given.name}{s}" for s in ("", *SCENARIO_SUFFIXES)]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    names = ", ".join(p.stem for p in library()) if scenarios_dir().is_dir() else "none"
    if given.is_absolute():
        raise BadInput(f"{ref}: no such scenario file")
    places = ", ".join(dict.fromkeys(str(p) for p in (Path.cwd(), project_root())))
    raise BadInput(
        f"{ref}: no such scenario file (looked in {places}) and no library scenario of that "
        f"name (library: {names})"
    )


def revision() -> str:
    """The project checkout's git revision (``1fa3eb5``, ``-dirty`` when it has changes), or
    ``unknown`` outside a checkout: what a written figure was measured with."""
    try:
        found = subprocess.run(
            ["git", "-C", str(project_root()), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else "unknown"
