"""The local backend: a Kafka cluster (three Apache Kafka KRaft nodes), MongoDB (SecantusDB),
the fault proxy and Spark, as processes.

Ports are picked free at ``up`` and kept for the environment's life, so a restarted server comes
back on the address its clients already know. Every server runs in its own session, carries the
environment's marker, and is recorded in ``DIR/state.json``; see ``harness.environment.process``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

from harness.environment import process, readonly, state
from harness.environment.base import (
    Component,
    Environment,
    EnvironmentBusy,
    EnvironmentStatus,
    KafkaStatus,
    Link,
    LinkRule,
    NoEnvironment,
    ServerStartError,
    ServerStatus,
)
from harness.environment.local.fault_proxy import FaultProxy
from harness.environment.local.kafka_node import NODE_IDS, KafkaNode, port_names
from harness.environment.local.secantus import SecantusMongo
from harness.environment.local.server import LocalServer, ServerContext
from harness.environment.local.spark_standalone import (
    WORKERS,
    SparkMaster,
    SparkWorker,
    worker_ui_port_name,
)
from harness.environment.ports import free_ports
from harness.environment.proxy.client import ProxyControl
from harness.environment.spark import SparkCluster, SparkSettings, checkpoint_root
from harness.errors import BadInput
from harness.kafka import await_group_coordinator, lab_groups
from harness.readiness import DeadlineExceeded, GaveUp, wait_for

# Directories below DIR that belong to one environment's life and are wiped with it.
DATA_DIRS = ("mongo", "spark", "kafka")
PORT_NAMES = (
    *(name for node in NODE_IDS for name in port_names(node)),
    "mongo",
    "mongo-proxy",  # the consumers' MongoDB link
    "proxy-control",
    "spark-master",
    "spark-master-ui",
    *(worker_ui_port_name(index) for index in WORKERS),
)
PREPARATION_TIMEOUT_S = 120.0
KAFKA_STOP_GRACE_S = 30.0  # a controlled shutdown took 2.8-8.2 s on 2 busy cores

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


@dataclass(frozen=True)
class LocalOptions:
    spark_standalone: bool = False  # run a Spark master and worker as processes
    spark_cores: int = 2

    def __post_init__(self) -> None:
        if self.spark_cores < 1:
            raise BadInput(f"spark cores must be at least 1, got {self.spark_cores}")


class LocalEnvironment(Environment):
    backend = "local"

    def __init__(
        self,
        directory: Path | str,
        options: LocalOptions | None = None,
        *,
        progress: Progress | None = None,
    ) -> None:
        self.directory = Path(directory).expanduser().resolve()
        if self.directory.exists() and not self.directory.is_dir():
            raise BadInput(f"environment directory {self.directory} exists and is not a directory")
        self.options = options or LocalOptions()
        self._progress = progress or _quiet
        self._state: state.EnvironmentState | None = None

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
        self.options = LocalOptions(**found.options)
        return found

    # -- the servers ----------------------------------------------------------------------------

    @property
    def _st(self) -> state.EnvironmentState:
        if self._state is None:
            raise NoEnvironment(f"the environment in {self.directory} is not running")
        return self._state

    def _ctx(self) -> ServerContext:
        return ServerContext(self.directory, self._st.ports, self._st.env_id)

    def _servers(self) -> list[LocalServer]:
        """Every server, in start order."""
        ctx = self._ctx()
        servers: list[LocalServer] = [
            SecantusMongo(ctx),
            FaultProxy(ctx),
            *(KafkaNode(ctx, node) for node in NODE_IDS),
        ]
        if self.options.spark_standalone:
            servers += self._spark_cluster(ctx)
        return servers

    def _spark_cluster(self, ctx: ServerContext) -> list[LocalServer]:
        return [SparkMaster(ctx), *(SparkWorker(ctx, index) for index in WORKERS)]

    def _wipe_data(self) -> None:
        # A fault may have left a checkpoint's commit log immutable (a harness killed mid-run):
        # released first, or it could not be deleted.
        readonly.release_under(checkpoint_root(self.directory))
        for name in DATA_DIRS:
            shutil.rmtree(self.directory / name, ignore_errors=True)

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

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, *, detach: bool = False) -> Self:
        reap_orphans(self._progress)
        self._claim()
        started = time.monotonic()
        try:
            self._start_servers()
        except BaseException:
            self._progress("stopping what was started")
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
            with state.ports_locked():
                ports = free_ports(len(PORT_NAMES), taken=state.reserved_ports())
                self._state = state.EnvironmentState(
                    env_id=uuid.uuid4().hex[:12],
                    backend=self.backend,
                    directory=str(self.directory),
                    created_at=time.time(),
                    owner_pid=me.pid,
                    owner_create_time=me.create_time,
                    detached=False,
                    ports=dict(zip(PORT_NAMES, ports, strict=True)),
                    options=asdict(self.options),
                )
                state.save(self.directory, self._state)
                state.reserve_ports(self._state.env_id, self.directory, ports)
            state.register(self._state.env_id, self.directory)

    def _start_servers(self) -> None:
        self.spark.prepare()
        servers = {s.name: s for s in self._servers()}
        for server in servers.values():
            server.prepare()
        self._run_preparations(list(servers.values()))
        # Launch what has no dependency at once, then wait: start-up overlaps. The nodes of
        # the cluster start together (one alone has no quorum) after the proxy, whose
        # addresses they advertise.
        self._launch(servers["mongo"])
        self._launch(servers["proxy"])
        if master := servers.get("spark-master"):
            self._launch(master)
        self._await_ready(servers["proxy"])
        for node in servers.values():
            if isinstance(node, KafkaNode):
                self._launch(node)
        if master:
            self._await_ready(master)
            for worker in servers.values():
                if isinstance(worker, SparkWorker):
                    self._launch(worker)
        for server in servers.values():
            if server.name not in ("proxy", "spark-master"):
                self._await_ready(server)
        started = time.monotonic()
        await_group_coordinator(self.kafka_bootstrap)
        self._progress(f"  {'groups':<14} {'__consumer_offsets made':<34} {'':<16} "
                       f"{time.monotonic() - started:5.1f}s")  # fmt: skip

    def _run_preparations(self, servers: Sequence[LocalServer]) -> None:
        """Each server's one-off command (formatting a Kafka node's storage), side by side."""
        running = []
        for server in servers:
            if argv := server.preparation():
                log = server.log_path
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("ab") as out:
                    out.write(f"==== chaoslab: preparing: {' '.join(argv)}\n".encode())
                    out.flush()
                    child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
                running.append((server, child))
        deadline = time.monotonic() + PREPARATION_TIMEOUT_S
        failed = []
        for server, child in running:
            try:
                code = child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                code = child.wait()
            if code != 0:
                failed.append(f"{server.name} (exit {code}):\n{self.log_tail(server.name)}")
        if failed:
            raise ServerStartError("preparing the servers failed: " + "\n".join(failed))

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
        # The Kafka nodes are killed: their data is discarded with the environment, and a
        # cluster whose nodes all shut down cleanly at once took up to 6.5 s. The rest all at
        # once: the order does not matter, and SecantusDB alone takes seconds to shut down.
        nodes = [p for n in NODE_IDS for p in process.marked(found.env_id, f"kafka-{n}")]
        process.kill(nodes)
        stopped = [p.pid for p in nodes] + process.reap(found.env_id, grace=10.0)
        with state.locked(self.directory):
            state.remove(self.directory)
            state.unregister(found.env_id)
            self._wipe_data()
        self._progress(
            f"stopped {len(stopped)} processes; the environment in {self.directory} is down"
        )

    # -- what clients use -----------------------------------------------------------------------

    @property
    def _proxy(self) -> FaultProxy:
        proxy = self._server("proxy")
        assert isinstance(proxy, FaultProxy)
        return proxy

    @property
    def kafka_bootstrap(self) -> str:
        # Through the fault proxy, like every Kafka client: the nodes advertise its addresses.
        return self._proxy.kafka_address

    @property
    def mongo_uri(self) -> str:
        mongo = self._server("mongo")
        assert isinstance(mongo, SecantusMongo)
        return mongo.uri

    def mongo_uri_for(self, link: Link) -> str:
        if link is Link.CONSUMER_MONGO:
            # directConnection: SecantusDB's hello lists its own port, so a replicaSet URI would
            # discover it and go around the proxy. Sessions and transactions still work.
            return f"mongodb://{self._proxy.mongo_address}/?directConnection=true"
        return self.mongo_uri

    @property
    def spark(self) -> SparkSettings:
        cluster = SparkCluster.STANDALONE if self.options.spark_standalone else SparkCluster.LOCAL
        return self._spark_settings(cluster)

    def _spark_settings(self, cluster: SparkCluster) -> SparkSettings:
        if cluster is SparkCluster.STANDALONE:
            master = f"spark://127.0.0.1:{self._st.ports['spark-master']}"
        else:
            master = f"local[{self.options.spark_cores}]"
        return SparkSettings.for_directory(self.directory, master)

    def spark_on(self, cluster: SparkCluster) -> SparkSettings:
        if cluster is SparkCluster.STANDALONE and not self._reload().options["spark_standalone"]:
            self._start_spark_cluster()
        return self._spark_settings(cluster)

    def _start_spark_cluster(self) -> None:
        """The master and its workers, into a running environment (a scenario asked)."""
        self._progress("starting the Spark standalone cluster (a master, 2 workers)")
        with state.updating(self.directory) as st:
            st.options["spark_standalone"] = True
            self._state = st
        self.options = LocalOptions(**self._st.options)
        master, *workers = self._spark_cluster(self._ctx())
        try:
            self._launch(master)
            self._await_ready(master)
            for worker in workers:
                self._launch(worker)
            for worker in workers:
                self._await_ready(worker)
        except BaseException:
            self._stop([master, *workers], hard=True)
            with state.updating(self.directory) as st:
                st.options["spark_standalone"] = False
                self._state = st
            self.options = LocalOptions(**self._st.options)
            raise

    @property
    def env_id(self) -> str:
        return self._st.env_id

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
                    ready=alive and not record.paused and _answers(server),
                    log=str(server.log_path),
                )
            )
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
            kafka=self._kafka_status(servers),
        )

    def _kafka_status(self, servers: Sequence[ServerStatus]) -> KafkaStatus | None:
        if not any(s.ready for s in servers if s.name.startswith("kafka-")):
            return None
        try:
            view = self.cluster_view()
            groups = lab_groups(self.kafka_bootstrap)
        except Exception:  # a status shows what answers, whatever does not
            return None
        return KafkaStatus(
            brokers=view.brokers,
            controller=view.controller,
            under_replicated=len(view.under_replicated()),
            coordinators={g: view.coordinator_of(g) for g in groups},
        )

    def log_path(self, server: str) -> Path:
        return self.directory / "logs" / f"{server}.log"

    # -- what faults use ------------------------------------------------------------------------

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

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return NODE_IDS

    def _targets(self, component: Component, broker: int | None) -> list[LocalServer]:
        if component is Component.MONGO:
            return [self._server("mongo")]
        if broker is None:
            return [self._server(f"kafka-{n}") for n in NODE_IDS]
        if broker not in NODE_IDS:
            raise BadInput(f"the Kafka cluster's nodes are {list(NODE_IDS)}; there is no {broker}")
        return [self._server(f"kafka-{broker}")]

    def _stop(self, servers: Sequence[LocalServer], *, hard: bool) -> None:
        """Stop the servers given, all at once (SIGKILL, or SIGTERM with a deadline)."""
        procs = [p for s in servers for p in process.marked(self._st.env_id, s.name)]
        if hard:
            process.kill(procs)
        else:
            grace = KAFKA_STOP_GRACE_S if isinstance(servers[0], KafkaNode) else 10.0
            names = ", ".join(s.name for s in servers)
            process.terminate(procs, grace=grace, what=f"stopping {names}")
        for server in servers:
            self._record(server.name, pid=None, create_time=None, paused=False)

    def restart(
        self, component: Component, *, hard: bool = False, broker: int | None = None
    ) -> None:
        servers = self._targets(component, broker)
        self._stop(servers, hard=hard)
        for server in servers:
            self._launch(server)
        for server in servers:
            self._await_ready(server)

    def kill(self, component: Component, *, broker: int | None = None) -> None:
        self._stop(self._targets(component, broker), hard=True)

    def revive(self, component: Component, *, broker: int | None = None) -> None:
        servers = self._targets(component, broker)
        records = self._reload().servers
        running = [s.name for s in servers if records[s.name].alive()]
        if running:
            raise BadInput(f"{', '.join(running)}: running; only a killed server can be revived")
        for server in servers:
            self._launch(server)
        for server in servers:
            self._await_ready(server)

    def pause(self, component: Component, *, broker: int | None = None) -> None:
        for server in self._targets(component, broker):
            process.signal_server(self._st.env_id, server.name, signal.SIGSTOP)
            self._record(server.name, paused=True)

    def resume(self, component: Component, *, broker: int | None = None) -> None:
        for server in self._targets(component, broker):
            process.signal_server(self._st.env_id, server.name, signal.SIGCONT)
            self._record(server.name, paused=False)

    # -- one node, without waiting (the nemesis) ------------------------------------------------

    def begin_stop_broker(self, broker: int, *, hard: bool) -> None:
        (node,) = self._targets(Component.KAFKA, broker)
        process.signal_server(self._st.env_id, node.name, signal.SIGCONT)  # a paused one too
        sig = signal.SIGKILL if hard else signal.SIGTERM
        process.signal_server(self._st.env_id, node.name, sig)

    def broker_stopped(self, broker: int) -> bool:
        (node,) = self._targets(Component.KAFKA, broker)
        process.reap_exited_children()
        if process.marked(self._st.env_id, node.name):
            return False
        self._record(node.name, pid=None, create_time=None, paused=False)
        return True

    def begin_start_broker(self, broker: int) -> None:
        (node,) = self._targets(Component.KAFKA, broker)
        self._launch(node)

    def broker_ready(self, broker: int) -> bool:
        (node,) = self._targets(Component.KAFKA, broker)
        return _answers(node)


def _answers(server: LocalServer) -> bool:
    try:
        server.probe()
    except Exception:
        return False
    return True


def reap_orphans(progress: Progress = _quiet) -> list[int]:
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
