"""The lab's environment: Kafka, MongoDB and Spark behind one interface (see ``base``).

Typical use: ``with open_environment("local", DIR) as env:`` then ``env.kafka_bootstrap``,
``env.mongo_uri``, ``spark_session(env.spark)``, ``env.restart_broker(hard=True)``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.environment import state
from harness.environment.backends import Options, get_backend, names
from harness.environment.base import (
    BackendAbilities,
    BackendUnavailable,
    Component,
    Environment,
    EnvironmentBusy,
    EnvironmentStatus,
    Link,
    LinkRule,
    LinkRuleRefused,
    NoEnvironment,
    ServerStartError,
    ServerStatus,
)
from harness.environment.containers.environment import ContainersEnvironment, ContainersOptions
from harness.environment.external import ExternalEnvironment, ExternalOptions
from harness.environment.local import LocalEnvironment, LocalOptions, Progress, reap_orphans
from harness.environment.local.processes import ProcessEnvironment
from harness.environment.spark import SparkCluster, SparkSettings, spark_session
from harness.paths import project_root

BACKENDS = names()

__all__ = [
    "BACKENDS",
    "BackendAbilities",
    "BackendUnavailable",
    "Component",
    "ContainersEnvironment",
    "ContainersOptions",
    "Environment",
    "EnvironmentBusy",
    "EnvironmentStatus",
    "ExternalEnvironment",
    "ExternalOptions",
    "Link",
    "LinkRule",
    "LinkRuleRefused",
    "LocalEnvironment",
    "LocalOptions",
    "NoEnvironment",
    "Options",
    "ServerStartError",
    "ServerStatus",
    "SparkCluster",
    "SparkSettings",
    "attach",
    "default_directory",
    "get_backend",
    "open_environment",
    "reap_orphans",
    "spark_session",
]


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
