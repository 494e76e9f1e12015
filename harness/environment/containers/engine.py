"""The container engine the containers backend talks to: a Docker engine if the user has one,
else a podman service the lab starts itself.

* Docker: ``DOCKER_HOST`` if set, else the default socket, if it answers a ping.
* podman: ``podman system service`` on a socket of the lab's own, with a ``containers.conf`` of
  the lab's own (``CONTAINERS_CONF``). Why its settings, as found on these machines
  (docs/environment.md): crun fails on the kernel's cgroup layout ("cgroups in hybrid mode not
  supported"), so runc; the sandbox lacks CAP_SYS_RESOURCE, so podman's default rlimits fail
  ("setrlimit RLIMIT_NOFILE: Operation not permitted") unless lowered.

testcontainers-python drives either through the Docker API. Its configuration is set here, in
code, before it creates a client: Ryuk off (its image cannot be pulled without a registry; the
lab removes what it labelled itself, see ``labels``), and the Docker host's own address for
published ports (testcontainers otherwise guesses from ``/.dockerenv`` that it runs inside a
container and asks for a gateway that podman does not report).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from testcontainers.core.config import ConnectionMode
from testcontainers.core.config import testcontainers_config as tc_config

from harness.environment import process, state
from harness.environment.base import BackendUnavailable
from harness.readiness import DeadlineExceeded, GaveUp, NotReady, wait_for

DEFAULT_SOCKET = Path("/var/run/docker.sock")
PING_TIMEOUT_S = 3
SERVICE_READY_S = 30.0  # a wide margin over the podman service's start (docs/performance.md)
CONTAINERS_CONF = """\
# written by chaoslab: the podman service the lab starts reads this (CONTAINERS_CONF)
[containers]
# The sandbox lacks CAP_SYS_RESOURCE: podman's default nofile/nproc limits cannot be set.
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
# crun fails on this kernel's cgroup layout ("cgroups in hybrid mode not supported").
runtime = "runc"
"""
ENGINE_SERVER = "engine"  # the podman service's name among the environment's processes


@dataclass(frozen=True)
class Engine:
    """Where the Docker API answers, and what answers there."""

    kind: str  # "docker" or "podman"
    base_url: str  # unix:///... or tcp://...
    started_here: bool  # a podman service the lab started (and stops)

    def client(self, timeout: int = 60) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.base_url, timeout=timeout)

    def client_kw(self) -> dict[str, Any]:
        """``docker_client_kw`` for testcontainers' classes (it passes them to from_env)."""
        return {"environment": {"DOCKER_HOST": self.base_url}}


def configure_testcontainers() -> None:
    tc_config.ryuk_disabled = True
    tc_config.connection_mode_override = ConnectionMode.docker_host
    tc_config.tc_host_override = "127.0.0.1"


def _ping(base_url: str) -> str | None:
    """None if a Docker API answers at ``base_url``; otherwise why not."""
    try:
        client = docker.DockerClient(base_url=base_url, timeout=PING_TIMEOUT_S)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return f"no engine answers at {base_url} ({exc})"
    return None


def docker_engine() -> tuple[Engine | None, str]:
    """A Docker engine that answers, or None and why none does."""
    where = os.environ.get("DOCKER_HOST")
    if where is None and not DEFAULT_SOCKET.exists():
        return None, f"no Docker engine (DOCKER_HOST is not set and {DEFAULT_SOCKET} is absent)"
    url = where or f"unix://{DEFAULT_SOCKET}"
    problem = _ping(url)
    if problem:
        return None, problem
    return Engine("podman" if _is_podman(url) else "docker", url, started_here=False), "answers"


def _is_podman(base_url: str) -> bool:
    client = docker.DockerClient(base_url=base_url, timeout=PING_TIMEOUT_S)
    try:
        components = client.version().get("Components", [])
    finally:
        client.close()
    return any("podman" in str(c.get("Name", "")).lower() for c in components)


def podman_problem() -> str | None:
    """None if this machine can run a podman service for the lab; otherwise what it lacks."""
    missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
    if missing:
        return (
            f"no Docker engine, and {' and '.join(missing)} not installed (on Debian: "
            "apt-get install podman runc; make does it when run as root)"
        )
    return None


def engine_problem() -> str | None:
    """None if some engine can run the containers backend here; otherwise why not."""
    engine, why = docker_engine()
    if engine is not None:
        return None
    podman = podman_problem()
    return None if podman is None else f"{why}; {podman}"


def describe_engine() -> str:
    """Which engine the containers backend would use here, for ``doctor``."""
    engine, why = docker_engine()
    if engine is not None:
        return f"{engine.kind} at {engine.base_url}"
    podman = podman_problem()
    if podman is None:
        return f"podman {_podman_version()}, as a service the lab starts ({why})"
    return f"{why}; {podman}"


def _podman_version() -> str:
    out = subprocess.run(["podman", "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip().rsplit(" ", 1)[-1]


def socket_path(env_id: str) -> Path:
    # A unix socket's path is limited to 107 bytes: not under the environment's folder, which
    # may be deep (pytest's temporary folders are 70-90 bytes already).
    return state.scratch_dir(env_id) / "podman.sock"


def start_podman(directory: Path, env_id: str) -> Engine:
    """Start a podman service for the environment ``env_id`` (marked as its process, so ``down``
    and the reaping of a dead harness's environment stop it) and wait until it answers."""
    problem = podman_problem()
    if problem:
        raise BackendUnavailable(f"the containers backend cannot run here: {problem}")
    conf = directory / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    sock = socket_path(env_id)
    sock.parent.mkdir(parents=True, exist_ok=True)
    sock.unlink(missing_ok=True)
    url = f"unix://{sock}"
    handle = process.spawn(
        ["podman", "system", "service", "--time=0", url],
        env_id=env_id,
        server=ENGINE_SERVER,
        log_path=directory / "logs" / f"{ENGINE_SERVER}.log",
        extra_env={"CONTAINERS_CONF": str(conf)},
        only="podman",  # its conmons and the host's aardvark-dns are podman's (process.py)
    )

    def answers() -> None:
        if (problem := _ping(url)) is not None:
            raise NotReady(problem)

    try:
        wait_for(
            answers,
            what=f"the podman service on {sock}",
            timeout=SERVICE_READY_S,
            interval=0.2,
            abort=lambda: None if handle.alive() else "the podman service exited",
        )
    except (DeadlineExceeded, GaveUp) as exc:
        log = (directory / "logs" / f"{ENGINE_SERVER}.log").read_text(errors="replace")[-2000:]
        raise BackendUnavailable(f"{exc}\n--- its log ---\n{log}") from None
    return Engine("podman", url, started_here=True)


def find_or_start(directory: Path, env_id: str) -> Engine:
    """The user's Docker engine if one answers, else a podman service started for ``env_id``."""
    configure_testcontainers()
    engine, _why = docker_engine()
    return engine if engine is not None else start_podman(directory, env_id)


@contextmanager
def engine_for_building(directory: Path) -> Iterator[Engine]:
    """An engine for work outside an environment (building images, ``make bench``): the user's
    Docker, or a podman service that is stopped again on leaving."""
    configure_testcontainers()
    engine, _why = docker_engine()
    if engine is not None:
        yield engine
        return
    env_id = f"build-{os.getpid()}-{int(time.time())}"
    directory.mkdir(parents=True, exist_ok=True)
    engine = start_podman(directory, env_id)
    try:
        yield engine
    finally:
        process.reap(env_id, grace=10.0)
        shutil.rmtree(state.scratch_dir(env_id), ignore_errors=True)  # never registered
