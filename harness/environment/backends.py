"""The backends an environment can run on, as registered records: each says how it opens an
environment and what it can do to its servers, so that a scenario it cannot play is refused
before anything starts (Jepsen's ``db/Kill``, ``db/Pause`` capabilities, asked of the backend
rather than decided elsewhere).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness.environment import state
from harness.environment.base import BackendAbilities, BackendUnavailable, Environment
from harness.environment.containers.engine import engine_problem
from harness.environment.containers.environment import (
    CONTAINERS_ABILITIES,
    ContainersEnvironment,
    ContainersOptions,
)
from harness.environment.external import ExternalEnvironment, ExternalOptions, external_abilities
from harness.environment.local import LOCAL_ABILITIES, LocalEnvironment, LocalOptions
from harness.environment.process_environment import ProcessEnvironment, Progress
from harness.errors import BadInput
from harness.paths import project_root

Options = LocalOptions | ExternalOptions | ContainersOptions
T = TypeVar("T", LocalOptions, ExternalOptions, ContainersOptions)
Opener = Callable[[Path | str, Options | None, Progress | None], Environment]


@dataclass(frozen=True)
class Backend:
    abilities: BackendAbilities  # before an environment runs (``Environment.abilities`` after)
    open: Opener  # an environment in a directory, not yet started

    @property
    def name(self) -> str:
        return self.abilities.name


def _options(options: Options | None, kind: type[T], backend: str) -> T | None:
    if options is None or isinstance(options, kind):
        return options
    raise BadInput(f"the {backend} backend takes {kind.__name__}, got {type(options).__name__}")


def _open_local(
    directory: Path | str, options: Options | None, progress: Progress | None
) -> Environment:
    return LocalEnvironment(directory, _options(options, LocalOptions, "local"), progress=progress)


def _open_external(
    directory: Path | str, options: Options | None, progress: Progress | None
) -> Environment:
    chosen = _options(options, ExternalOptions, "external")
    return ExternalEnvironment(directory, chosen, progress=progress)


def _open_containers(
    directory: Path | str, options: Options | None, progress: Progress | None
) -> Environment:
    chosen = _options(options, ContainersOptions, "containers")
    problem = engine_problem()
    if problem:
        raise BackendUnavailable(f"the containers backend cannot run here: {problem}")
    return ContainersEnvironment(directory, chosen, progress=progress)


REGISTRY: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(LOCAL_ABILITIES, _open_local),
        Backend(external_abilities(), _open_external),
        Backend(CONTAINERS_ABILITIES, _open_containers),
    )
}


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get_backend(name: str) -> Backend:
    """The registered backend ``name``; BadInput naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise BadInput(f"unknown backend {name!r} (choose from: {', '.join(REGISTRY)})") from None


BACKENDS = names()


def default_directory() -> Path:
    """``$CHAOSLAB_DIR``, or ``.chaoslab/env`` in the project's folder (wherever the command
    runs: ``chaoslab up`` in one folder and ``chaoslab down`` in another find the same one)."""
    return Path(os.environ.get("CHAOSLAB_DIR") or project_root() / ".chaoslab" / "env")


def open_environment(
    backend: str = "local",
    directory: Path | str | None = None,
    options: Options | None = None,
    *,
    progress: Progress | None = None,
) -> Environment:
    """An environment of ``backend`` in ``directory``, not yet started."""
    directory = directory if directory is not None else default_directory()
    return get_backend(backend).open(directory, options, progress)


def attach(directory: Path | str | None = None, *, progress: Progress | None = None) -> Environment:
    """The environment already running in ``directory`` (e.g. started by ``chaoslab up``), of
    whichever backend started it."""
    directory = Path(directory if directory is not None else default_directory())
    found = state.load(directory.expanduser().resolve())
    kinds: dict[str, type[ProcessEnvironment[Any]]] = {
        "external": ExternalEnvironment,
        "containers": ContainersEnvironment,
    }
    kind = kinds.get(found.backend, LocalEnvironment) if found is not None else LocalEnvironment
    return kind.attach(directory, progress=progress)
