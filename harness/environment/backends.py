"""The backends an environment can run on, as registered records: each says how it opens an
environment and what it can do to its servers, so that a scenario it cannot play is refused
before anything starts (Jepsen's ``db/Kill``, ``db/Pause`` capabilities, asked of the backend
rather than decided elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.environment.base import BackendUnavailable, Environment
from harness.environment.docker import docker_engine_problem
from harness.environment.local import LocalEnvironment, LocalOptions, Progress
from harness.environment.local.kafka_node import NODE_IDS
from harness.errors import BadInput

Opener = Callable[[Path | str, LocalOptions | None, Progress | None], Environment]


@dataclass(frozen=True)
class BackendAbilities:
    """What a backend can do to its servers, for refusing a scenario before anything starts."""

    name: str
    nodes: tuple[int, ...]  # the Kafka cluster's node ids
    link_faults: bool  # a proxy on each link (network faults, Kafka commit errors)


@dataclass(frozen=True)
class Backend:
    abilities: BackendAbilities
    open: Opener  # an environment in a directory, not yet started

    @property
    def name(self) -> str:
        return self.abilities.name


def _open_local(
    directory: Path | str, options: LocalOptions | None, progress: Progress | None
) -> Environment:
    return LocalEnvironment(directory, options, progress=progress)


def _open_docker(
    directory: Path | str, options: LocalOptions | None, progress: Progress | None
) -> Environment:
    problem = docker_engine_problem()
    if problem:
        raise BackendUnavailable(f"the docker backend cannot run here: {problem}")
    raise BackendUnavailable(
        "the docker backend is not built yet in this version of chaoslab; use --backend local"
    )


REGISTRY: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(BackendAbilities("local", nodes=NODE_IDS, link_faults=True), _open_local),
        # Not built yet: opening it fails with its own reason first.
        Backend(BackendAbilities("docker", nodes=NODE_IDS, link_faults=False), _open_docker),
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
