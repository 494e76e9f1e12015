"""What every server the lab starts has in common: a command, ports, a log, a probe (as a
process of this machine; the containers backend runs the same servers' commands in containers)."""

from __future__ import annotations

import signal
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from harness.environment.ports import LOOPBACK


@dataclass(frozen=True)
class ServerContext:
    directory: Path  # the environment's directory
    ports: Mapping[str, int]  # every port of the environment, picked once at ``up``
    env_id: str  # the environment's life (e.g. a cluster's id derives from it)


class LocalServer(ABC):
    """One server process. Subclasses say how to run it and how to tell it is ready."""

    name: str  # key in the state file, log file name
    role: ClassVar[str]  # what it is, for people
    ready_timeout: ClassVar[float] = 30.0
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM  # its own clean shutdown

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    @property
    def port(self) -> int:
        return self.ctx.ports[self.name]

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.ctx.directory / "logs" / f"{self.name}.log"

    @abstractmethod
    def argv(self) -> list[str]: ...

    def extra_env(self) -> dict[str, str]:
        return {}

    def prepare(self) -> None:  # noqa: B027 - an optional hook
        """Create what the server needs on disk; runs once, before the first start."""

    def preparation(self) -> list[str]:
        """A command to run once after ``prepare`` and before the first start (e.g. format
        the storage); the environment runs those of all its servers side by side."""
        return []

    @abstractmethod
    def probe(self) -> None:
        """Return if the server answers its protocol; raise otherwise. Must be quick."""
