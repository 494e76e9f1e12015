"""What an environment of server processes on this machine does whatever its servers are: claim a
directory and ports, launch each server in its own session marked with the environment's id,
wait until each answers, report their status, stop them all - and reap what a dead harness
left. The local backend (Kafka, MongoDB, the fault proxy, Spark) and the external one (only the
fault proxy, in front of servers the lab did not start) differ in their servers and options.

Ports are picked free at ``up`` and kept for the environment's life, so a restarted server comes
back on the address its clients already know. Every server is recorded in ``DIR/state.json``;
see ``harness.environment.process`` and ``harness.environment.state``.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Generic, Self, TypeVar

from harness.environment import process, readonly, state
from harness.environment.base import (
    Environment,
    EnvironmentBusy,
    EnvironmentStatus,
    KafkaStatus,
    LinkRule,
    NoEnvironment,
    ServerStartError,
    ServerStatus,
)
from harness.environment.options import ContainersOptions, ExternalOptions, LocalOptions
from harness.environment.ports import free_ports
from harness.environment.proxy.client import ProxyControl
from harness.environment.servers.base import LocalServer, ServerContext
from harness.environment.servers.proxy import FaultProxy
from harness.environment.spark import checkpoint_root
from harness.errors import BadInput
from harness.kafka.clients import lab_groups
from harness.readiness import DeadlineExceeded, GaveUp, wait_for

# Directories below DIR that belong to one environment's life and are wiped with it.
DATA_DIRS = ("mongo", "spark", "kafka", "postgres")
STARTING_LOCK = "starting.lock"  # held while a server is started on demand

Progress = Callable[[str], None]
Options = TypeVar("Options", LocalOptions, ExternalOptions, ContainersOptions)


def quiet(_message: str) -> None:
    pass


class ProcessEnvironment(Environment, Generic[Options]):
    """An environment whose servers are processes this machine runs (see the module)."""

    options_type: type[Options]  # its backend's options record (``environment.options``)

    def __init__(
        self,
        directory: Path | str,
        options: Options | None = None,
        *,
        progress: Progress | None = None,
    ) -> None:
        self.directory = Path(directory).expanduser().resolve()
        if self.directory.exists() and not self.directory.is_dir():
            raise BadInput(f"environment directory {self.directory} exists and is not a directory")
        self.options: Options = options if options is not None else self.options_type()
        self._progress = progress or quiet
        self._state: state.EnvironmentState | None = None

    # -- what a backend says ----------------------------------------------------------------------

    @abstractmethod
    def _port_names(self) -> Sequence[str]:
        """Every port the environment's servers listen on, named."""

    @abstractmethod
    def _servers(self) -> list[LocalServer]:
        """Every server, in start order."""

    @abstractmethod
    def _start_servers(self) -> None:
        """Launch the servers (``_launch``) and wait until each answers (``_await_ready``)."""

    @property
    @abstractmethod
    def _proxy(self) -> FaultProxy:
        """The environment's fault proxy (every backend of processes runs one)."""

    def _killed_first(self) -> list[str]:
        """Servers ``stop`` SIGKILLs rather than asks to stop (their data is thrown away)."""
        return []

    # -- the state ----------------------------------------------------------------------------

    @classmethod
    def attach(cls, directory: Path | str, *, progress: Progress | None = None) -> Self:
        """The environment running in ``directory`` (started by another process)."""
        env = cls(directory, progress=progress)
        env._reload()
        return env

    def _reload(self) -> state.EnvironmentState:
        """Read the state file again: another process may have restarted a server."""
        found = state.load(self.directory)
        if found is None:
            raise NoEnvironment(f"no environment in {self.directory} (start one: chaoslab up)")
        self._state = found
        self.options = self.options_type.from_dict(found.options)
        return found

    def _on_demand(self, option: str, start: Callable[[], None]) -> None:
        """``start`` the servers of ``option`` unless they run, one start at a time: runs side
        by side ask at once (two CDC scenarios of the library's matrix had two ``initdb`` into
        one folder, and one run handed a URI before its server was there)."""
        with state.locked(self.directory, STARTING_LOCK):
            if not self._reload().options.get(option):
                start()

    def _start_later(
        self, option: str, start: Callable[[], None], undo: Callable[[], None]
    ) -> None:
        """``start`` servers into a running environment, ``option`` set in its state (what the
        next ``attach``, ``status`` and ``down`` go by); if they fail to start, ``undo`` stops
        what started and ``option`` is unset again."""
        self._set_option(option, True)
        try:
            start()
        except BaseException:
            undo()
            self._set_option(option, False)
            raise

    def _needs_port(self, name: str, what: str) -> None:
        """BadInput unless the environment has port ``name`` (picked at ``up``) for ``what``."""
        if name not in self._st.ports:
            raise BadInput(
                f"the environment in {self.directory} was started by an older lab and has no "
                f"port for {what}: stop it (chaoslab down) and start it again"
            )

    def _set_option(self, option: str, value: bool) -> None:
        """``option`` set in the environment's state: what the next ``attach``, ``status`` and
        ``down`` go by (a server started on demand)."""
        with state.updating(self.directory) as st:
            st.options[option] = value
            self._state = st
        self.options = self.options_type.from_dict(self._st.options)

    @property
    def _st(self) -> state.EnvironmentState:
        if self._state is None:
            raise NoEnvironment(f"the environment in {self.directory} is not running")
        return self._state

    def _ctx(self) -> ServerContext:
        return ServerContext(self.directory, self._st.ports, self._st.env_id)

    def _server(self, name: str) -> LocalServer:
        for server in self._servers():
            if server.name == name:
                return server
        raise KeyError(f"no server {name!r} in this environment")

    def _record(self, name: str, **changes: object) -> None:
        with state.updating(self.directory) as st:
            record = st.servers.setdefault(name, state.ServerRecord())
            for key, value in changes.items():
                setattr(record, key, value)
            self._state = st

    def _wipe_data(self) -> None:
        # A fault may have left a checkpoint's commit log immutable (a harness killed mid-run):
        # released first, or it could not be deleted.
        readonly.release_under(checkpoint_root(self.directory))
        for name in DATA_DIRS:
            shutil.rmtree(self.directory / name, ignore_errors=True)

    @property
    def env_id(self) -> str:
        return self._st.env_id

    def log_path(self, server: str) -> Path:
        return self.directory / "logs" / f"{server}.log"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, *, detach: bool = False) -> Self:
        reap_orphans(self._progress)
        self._claim()
        started = time.monotonic()
        try:
            self._start_servers()
        except BaseException:
            try:  # a progress line that cannot be written (a closed pipe) does not stop the stop
                self._progress("stopping what was started")
            finally:
                self.stop()
            raise
        if detach:
            with state.updating(self.directory) as st:
                st.detached = True
                self._state = st
        self._progress(f"environment ready in {time.monotonic() - started:.1f}s")
        return self

    def _claim(self) -> None:
        """Create a fresh state for this directory, owned by this process."""
        with state.locked(self.directory):
            existing = state.load(self.directory)
            if existing is not None:
                if not existing.orphaned():
                    who = "chaoslab up" if existing.detached else f"PID {existing.owner_pid}"
                    raise EnvironmentBusy(
                        f"an environment is already running in {self.directory} "
                        f"(started by {who}); use it, or stop it with: "
                        f"chaoslab down --dir {self.directory}"
                    )
                process.reap(existing.env_id)
                state.unregister(existing.env_id)
            self._wipe_data()
            shutil.rmtree(self.directory / "logs", ignore_errors=True)
            me = process.handle_of(os.getpid())
            names = self._port_names()
            with state.ports_locked():
                ports = free_ports(len(names), taken=state.reserved_ports())
                self._state = state.EnvironmentState(
                    env_id=uuid.uuid4().hex[:12],
                    backend=self.backend,
                    directory=str(self.directory),
                    created_at=time.time(),
                    owner_pid=me.pid,
                    owner_create_time=me.create_time,
                    detached=False,
                    ports=dict(zip(names, ports, strict=True)),
                    options=asdict(self.options),
                )
                state.save(self.directory, self._state)
                state.reserve_ports(self._state.env_id, self.directory, ports)
            state.register(self._state.env_id, self.directory)

    def _launch(self, server: LocalServer) -> process.ProcessHandle:
        handle = process.spawn(
            server.argv(),
            env_id=self._st.env_id,
            server=server.name,
            log_path=server.log_path,
            extra_env=server.extra_env(),
            cwd=self.directory,
        )
        self._record(server.name, pid=handle.pid, create_time=handle.create_time, paused=False)
        return handle

    def _await_ready(self, server: LocalServer) -> None:
        record = self._st.servers[server.name]
        assert record.pid is not None and record.create_time is not None  # _launch set them
        handle = process.ProcessHandle(record.pid, record.create_time)

        def exited() -> str | None:
            return None if handle.alive() else "the process exited"

        started = time.monotonic()
        try:
            wait_for(
                server.probe,
                what=f"{server.role} on {server.address}",
                timeout=server.ready_timeout,
                abort=exited,
            )
        except (DeadlineExceeded, GaveUp) as exc:
            raise ServerStartError(
                f"{exc}\n--- last lines of {server.log_path} ---\n{self.log_tail(server.name)}"
            ) from None
        took = time.monotonic() - started
        self._progress(f"  {server.name:<14} {server.role:<34} {server.address:<16} {took:5.1f}s")

    def stop(self) -> None:
        try:
            found = self._reload()
        except NoEnvironment:
            return
        first = [p for name in self._killed_first() for p in process.marked(found.env_id, name)]
        process.kill(first)
        # The rest all at once: the order does not matter, and SecantusDB alone takes seconds.
        stopped = [p.pid for p in first] + process.reap(found.env_id, grace=10.0)
        with state.locked(self.directory):
            state.remove(self.directory)
            state.unregister(found.env_id)
            self._wipe_data()
        self._progress(
            f"stopped {len(stopped)} processes; the environment in {self.directory} is down"
        )

    # -- the fault proxy ------------------------------------------------------------------------

    @property
    def fault_proxy(self) -> ProxyControl:
        """The fault proxy's control API (rules in force, stats: which clients used which
        Kafka API versions, how often each rule acted)."""
        return self._proxy.control()

    def add_link_rule(self, rule: LinkRule) -> str:
        return self._proxy.add_rule(rule)

    def remove_link_rule(self, rule_id: str) -> int:
        return self.fault_proxy.remove_rule(rule_id)

    def clear_link_rules(self) -> None:
        self.fault_proxy.clear_rules()

    # -- status ---------------------------------------------------------------------------------

    def status(self) -> EnvironmentStatus:
        found = self._reload()
        servers = []
        for server in self._servers():
            record = found.servers.get(server.name, state.ServerRecord())
            alive = record.alive()
            servers.append(
                ServerStatus(
                    name=server.name,
                    role=server.role,
                    address=server.address,
                    pid=record.pid,
                    alive=alive,
                    paused=record.paused,
                    ready=alive and not record.paused and answers(server),
                    log=str(server.log_path),
                )
            )
        return self._status_of(found, servers)

    def _status_of(
        self, found: state.EnvironmentState, servers: Sequence[ServerStatus]
    ) -> EnvironmentStatus:
        kafka, kafka_error = self._kafka_status(servers)
        return EnvironmentStatus(
            backend=self.backend,
            directory=str(self.directory),
            env_id=found.env_id,
            detached=found.detached,
            owner_pid=found.owner_pid,
            kafka_bootstrap=self.kafka_bootstrap,
            mongo_uri=self.mongo_uri,
            spark_master=self.spark.master,
            servers=tuple(servers),
            postgres_uri=self._shown_postgres_uri(found),
            kafka=kafka,
            kafka_error=kafka_error,
        )

    def _shown_postgres_uri(self, found: state.EnvironmentState) -> str:
        """The PostgreSQL a status shows: the one the environment runs, if it does (asked only
        then: asking starts it)."""
        return self.postgres_uri() if found.options.get("postgres") else ""

    def _kafka_status(self, servers: Sequence[ServerStatus]) -> tuple[KafkaStatus | None, str]:
        """The cluster as the harness's client sees it, or why it did not answer."""
        try:
            view = self.cluster_view()
            groups = lab_groups(self.kafka_bootstrap)
        except Exception as exc:  # a status shows what answers, and why the rest does not
            return None, f"{type(exc).__name__}: {exc}"
        status = KafkaStatus(
            brokers=view.brokers,
            controller=view.controller,
            under_replicated=len(view.under_replicated()),
            coordinators={g: view.coordinator_of(g) for g in groups},
        )
        return status, ""


def answers(server: LocalServer) -> bool:
    try:
        server.probe()
    except Exception:
        return False
    return True


def reap_orphans(progress: Progress = quiet) -> list[int]:
    """Stop every environment of this user whose owning harness died without stopping it.

    Detached environments (``chaoslab up``) are left alone: ``chaoslab down`` owns them.
    Returns the PIDs that were stopped.
    """
    stopped: list[int] = []
    for env_id, directory in state.registered():
        with _lock_if_exists(directory):
            found = state.load(directory)
            ours = found is not None and found.env_id == env_id
            if found is not None and ours and not found.orphaned():
                continue
            pids = process.reap(env_id)
            if ours:
                state.remove(directory)
            state.unregister(env_id)
        if pids:
            progress(
                f"stopped {len(pids)} processes (PIDs {', '.join(map(str, pids))}) left by a "
                f"harness that died without stopping its environment in {directory}"
            )
        stopped += pids
    return stopped


@contextmanager
def _lock_if_exists(directory: Path) -> Iterator[None]:
    if directory.is_dir():
        with state.locked(directory):
            yield
    else:
        yield
