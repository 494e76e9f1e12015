"""The state file of an environment, and the per-user registry of environments.

``DIR/state.json`` says what runs (PIDs, ports, directories) so that any process - ``chaoslab
status`` in another terminal, a fault runner, the next ``up`` - can find and act on the servers.
Writers hold ``DIR/state.lock``; the file is replaced atomically, so readers need no lock.

The registry (one small file per environment under the user's runtime directory) lets an ``up``
anywhere find environments whose owning harness died without stopping them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.environment import process

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"


@dataclass
class ServerRecord:
    pid: int | None = None
    create_time: float | None = None
    paused: bool = False

    def alive(self) -> bool:
        return process.alive(self.pid, self.create_time)


@dataclass
class EnvironmentState:
    env_id: str
    backend: str
    directory: str
    created_at: float
    owner_pid: int | None
    owner_create_time: float | None
    detached: bool
    ports: dict[str, int]
    options: dict[str, Any]
    servers: dict[str, ServerRecord] = field(default_factory=dict)

    def owner_alive(self) -> bool:
        return process.alive(self.owner_pid, self.owner_create_time)

    def orphaned(self) -> bool:
        """True when nobody will ever stop these servers: the owner died and the environment
        was not handed over to ``chaoslab down`` (detached)."""
        return not self.detached and not self.owner_alive()

    @classmethod
    def from_json(cls, text: str) -> EnvironmentState:
        raw = json.loads(text)
        raw["servers"] = {k: ServerRecord(**v) for k, v in raw.get("servers", {}).items()}
        return cls(**raw)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


def state_path(directory: Path) -> Path:
    return directory / STATE_FILE


def load(directory: Path) -> EnvironmentState | None:
    try:
        return EnvironmentState.from_json(state_path(directory).read_text())
    except FileNotFoundError:
        return None


def save(directory: Path, state: EnvironmentState) -> None:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".state.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(state.to_json())
    os.replace(tmp, state_path(directory))


@contextmanager
def locked(directory: Path, name: str = LOCK_FILE) -> Iterator[None]:
    """The environment's lock ``name`` held (the state file's, by default), across threads and
    processes alike: each caller opens the file anew, and flock locks an open file."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / name).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def updating(directory: Path) -> Iterator[EnvironmentState]:
    """Load the state under the lock, let the caller change it, write it back."""
    with locked(directory):
        state = load(directory)
        if state is None:
            raise FileNotFoundError(state_path(directory))
        yield state
        save(directory, state)


def remove(directory: Path) -> None:
    state_path(directory).unlink(missing_ok=True)


# -- registry --------------------------------------------------------------------------------


def registry_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"chaoslab-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def register(env_id: str, directory: Path) -> None:
    (registry_dir() / f"{env_id}.dir").write_text(str(directory.resolve()))


def unregister(env_id: str) -> None:
    (registry_dir() / f"{env_id}.dir").unlink(missing_ok=True)
    (reservations_dir() / f"{env_id}.json").unlink(missing_ok=True)
    shutil.rmtree(scratch_dir(env_id), ignore_errors=True)


def scratch_dir(env_id: str) -> Path:
    """The environment's short folder under the system's temporary folder (not created here),
    for what cannot live under its own folder (a unix socket's path is limited to 107 bytes).
    Removed when the environment is unregistered - by ``down``, and by the next ``up`` after a
    SIGKILLed harness: left there, one folder stayed in /tmp per containers test run."""
    return Path(tempfile.gettempdir()) / f"chaoslab-{env_id}"


# -- port reservations -----------------------------------------------------------------------
# An environment picks its ports at ``up`` and its servers bind them seconds later (a Kafka
# node's JVM: up to half a minute). Every environment of this user, whatever its registry
# (``XDG_RUNTIME_DIR``), reserves them here meanwhile, so that two starting at once never pick
# the same port.


def reservations_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"chaoslab-{os.getuid()}-ports"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


@contextmanager
def ports_locked() -> Iterator[None]:
    with locked(reservations_dir()):
        yield


def reserved_ports() -> set[int]:
    """Ports of the environments that hold them (call under ``ports_locked``); reservations of
    environments that are gone are dropped."""
    taken: set[int] = set()
    for entry in reservations_dir().glob("*.json"):
        try:
            raw = json.loads(entry.read_text())
        except (OSError, ValueError):
            entry.unlink(missing_ok=True)
            continue
        found = load(Path(raw["directory"]))
        if found is None or found.env_id != entry.stem:
            entry.unlink(missing_ok=True)  # that environment is down
            continue
        taken.update(raw["ports"])
    return taken


def reserve_ports(env_id: str, directory: Path, ports: list[int]) -> None:
    record = {"directory": str(directory.resolve()), "ports": ports}
    (reservations_dir() / f"{env_id}.json").write_text(json.dumps(record))


def registered() -> list[tuple[str, Path]]:
    """(env_id, directory) of every environment registered by this user."""
    entries = []
    for entry in sorted(registry_dir().glob("*.dir")):
        try:
            entries.append((entry.stem, Path(entry.read_text().strip())))
        except FileNotFoundError:
            continue  # removed by a concurrent down
    return entries
