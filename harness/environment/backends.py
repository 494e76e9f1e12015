"""The backends an environment can run on, as registered records: each says what it can do to
its servers (so that a scenario it cannot play is refused before anything starts: Jepsen's
``db/Kill``, ``db/Pause`` capabilities, asked of the backend rather than decided elsewhere), how
its options follow from what a user asked, and which module holds its environment.

A backend's own modules load only when it is asked for (``Backend.load``, with ``importlib``:
``tests/test_imports.py`` counts those imports as edges of the import graph): a listener process
or a local run never imports docker or testcontainers.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.environment import state
from harness.environment.base import BackendAbilities, BackendUnavailable, Environment
from harness.environment.options import (
    CONTAINERS_ABILITIES,
    LOCAL_ABILITIES,
    ContainersOptions,
    ExternalOptions,
    LocalOptions,
    Options,
    external_abilities,
)
from harness.environment.process_environment import ProcessEnvironment, Progress
from harness.environment.servers import postgres
from harness.errors import BadInput
from harness.paths import project_root


@dataclass(frozen=True)
class Request:
    """What a command line or a notebook asks of an environment; each backend's record makes
    its options of what it uses."""

    backend: str | None = None  # None: the default - or the one the addresses are for
    spark_cores: int = 2
    spark_standalone: bool = False
    postgres: bool = False  # start PostgreSQL at up (else when a run first asks for it)
    # Servers the lab did not start (the backend that takes addresses).
    kafka_bootstrap: str = ""
    mongo_uri: str = ""
    spark_master: str = ""
    postgres_uri: str = ""
    running: bool = False  # an environment already running is to be used instead

    @property
    def addresses(self) -> bool:
        return any((self.kafka_bootstrap, self.mongo_uri, self.spark_master, self.postgres_uri))


def _local(request: Request) -> LocalOptions:
    if request.postgres:
        postgres.required_bin_dir()  # BadInput naming what installs it, before anything starts
    return LocalOptions(
        spark_standalone=request.spark_standalone,
        spark_cores=request.spark_cores,
        postgres=request.postgres,
    )


def _containers(request: Request) -> ContainersOptions:
    return ContainersOptions(
        spark_cores=request.spark_cores,
        spark_standalone=request.spark_standalone,
        postgres=request.postgres,
    )


def _external(request: Request) -> ExternalOptions:
    options = ExternalOptions(
        kafka_bootstrap=request.kafka_bootstrap,
        mongo_uri=request.mongo_uri,
        spark_master=request.spark_master,
        spark_cores=request.spark_cores,
        postgres_uri=request.postgres_uri,
    )
    problems = options.problems()
    if request.spark_standalone:
        problems.append("--spark-standalone starts the lab's own cluster; give --spark-master")
    if request.postgres:
        problems.append("--postgres starts the lab's own database; give --postgres-uri")
    if request.running:
        problems.append("--env uses a running environment; the addresses would be ignored")
    if problems:
        raise BadInput("the external environment: " + "; ".join(problems))
    return options


@dataclass(frozen=True)
class Backend:
    abilities: BackendAbilities  # before an environment runs (``Environment.abilities`` after)
    module: str  # holds ENVIRONMENT, its environment class (and the backend's own commands)
    options: Callable[[Request], Options]  # its options of a request; BadInput names problems
    takes_addresses: bool = False  # its servers are the user's, named by address
    builds_images: bool = False  # ``chaoslab images`` builds its images (``build_images``)

    @property
    def name(self) -> str:
        return self.abilities.name

    def load(self) -> ModuleType:
        """Its module, imported now (the first time it is asked for)."""
        return importlib.import_module(self.module)

    def environment(self) -> type[ProcessEnvironment[Any]]:
        found: type[ProcessEnvironment[Any]] = self.load().ENVIRONMENT
        return found

    def open(
        self,
        directory: Path | str,
        options: Options | None = None,
        progress: Progress | None = None,
    ) -> Environment:
        """An environment of this backend in ``directory``, not yet started."""
        kind = self.environment()
        if options is not None and not isinstance(options, kind.options_type):
            raise BadInput(
                f"the {self.name} backend takes {kind.options_type.__name__}, "
                f"got {type(options).__name__}"
            )
        if problem := kind.unavailable():
            raise BackendUnavailable(problem)
        return kind(directory, options, progress=progress)


DEFAULT = "local"
REGISTRY: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(LOCAL_ABILITIES, "harness.environment.local", _local),
        Backend(
            external_abilities(),
            "harness.environment.external",
            _external,
            takes_addresses=True,
        ),
        Backend(
            CONTAINERS_ABILITIES,
            "harness.environment.containers.backend",
            _containers,
            builds_images=True,
        ),
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


def choose(request: Request) -> tuple[Backend, Options]:
    """The backend a request names, with its options: the one that takes addresses when they
    are given; BadInput naming every problem."""
    named = get_backend(request.backend or DEFAULT)
    if not request.addresses and not named.takes_addresses:
        return named, named.options(request)
    addressed = next(b for b in REGISTRY.values() if b.takes_addresses)
    if request.backend not in (None, DEFAULT, addressed.name):
        raise BadInput(
            f"the external environment: --backend {request.backend}: the addresses given are "
            f"for the {addressed.name} one"
        )
    return addressed, addressed.options(request)


def default_directory() -> Path:
    """``$CHAOSLAB_DIR``, or ``.chaoslab/env`` in the project's folder (wherever the command
    runs: ``chaoslab up`` in one folder and ``chaoslab down`` in another find the same one)."""
    return Path(os.environ.get("CHAOSLAB_DIR") or project_root() / ".chaoslab" / "env")


def open_environment(
    backend: str = DEFAULT,
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
    backend = REGISTRY.get(found.backend if found is not None else DEFAULT, REGISTRY[DEFAULT])
    return backend.environment().attach(directory, progress=progress)
