"""The local backend: a Kafka cluster (three Apache Kafka KRaft nodes), MongoDB (SecantusDB),
the fault proxy, Spark and (for a CDC source) PostgreSQL, as processes on 127.0.0.1 (the life of
such processes - ports, state, start, stop, reaping - is ``processes``).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from harness.environment import process
from harness.environment.base import (
    Component,
    KafkaStatus,
    Link,
    ServerStartError,
    ServerStatus,
)
from harness.environment.options import LOCAL_ABILITIES, LocalOptions
from harness.environment.ports import LOOPBACK
from harness.environment.process_environment import ProcessEnvironment, answers
from harness.environment.servers.base import LocalServer, ServerContext
from harness.environment.servers.kafka import NODE_IDS, KafkaNode, port_names
from harness.environment.servers.mongo import SecantusMongo
from harness.environment.servers.postgres import PostgresServer, required_bin_dir
from harness.environment.servers.proxy import FaultProxy
from harness.environment.servers.spark_standalone import (
    SparkMaster,
    SparkWorker,
    worker_ui_port_name,
)
from harness.environment.spark import WORKERS, SparkCluster, SparkSettings
from harness.errors import BadInput
from harness.kafka.clients import await_group_coordinator

PORT_NAMES = (
    *(name for node in NODE_IDS for name in port_names(node)),
    "mongo",
    "mongo-proxy",
    "postgres",
    "postgres-proxy",  # a CDC source's link to PostgreSQL
    "proxy-control",
    "spark-master",
    "spark-master-ui",
    *(worker_ui_port_name(index) for index in WORKERS),
)
PREPARATION_TIMEOUT_S = 120.0
KAFKA_STOP_GRACE_S = 30.0  # a margin over a controlled shutdown (docs/performance.md)


class LocalEnvironment(ProcessEnvironment[LocalOptions]):
    abilities = LOCAL_ABILITIES
    options_type = LocalOptions

    def _port_names(self) -> Sequence[str]:
        return PORT_NAMES

    def _killed_first(self) -> list[str]:
        # The Kafka nodes are killed: their data is discarded with the environment, and a
        # clean shutdown of all the nodes at once takes seconds (docs/performance.md). So is
        # PostgreSQL: SIGTERM is its smart shutdown, which waits for a connected source.
        return [f"kafka-{n}" for n in NODE_IDS] + ["postgres"]

    # -- the servers ----------------------------------------------------------------------------

    def _servers(self) -> list[LocalServer]:
        """Every server, in start order."""
        ctx = self._ctx()
        servers: list[LocalServer] = [
            SecantusMongo(ctx),
            FaultProxy(
                ctx,
                kafka={n: f"{LOOPBACK}:{ctx.ports[f'kafka-{n}-client']}" for n in NODE_IDS},
                mongo=f"{LOOPBACK}:{ctx.ports['mongo']}",
                postgres=f"{LOOPBACK}:{ctx.ports['postgres']}",
            ),
            *(KafkaNode(ctx, node) for node in NODE_IDS),
        ]
        if self.options.spark_standalone:
            servers += self._spark_cluster(ctx)
        if self.options.postgres:
            servers.append(PostgresServer(ctx))
        return servers

    def _spark_cluster(self, ctx: ServerContext) -> list[LocalServer]:
        return [SparkMaster(ctx), *(SparkWorker(ctx, index) for index in WORKERS)]

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
        if postgres := servers.get("postgres"):
            self._launch(postgres)
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

    def postgres_uri_for(self, link: Link) -> str:
        uri = self.postgres_uri()
        if link is not Link.SOURCE_POSTGRES:
            return uri
        address = urlsplit(uri)
        user = address.netloc.rpartition("@")[0]  # its user (and password), as they were
        at = f"{user}@" if user else ""
        return urlunsplit(address._replace(netloc=f"{at}{self._proxy.postgres_address}"))

    def postgres_uri(self) -> str:
        self._on_demand("postgres", self._start_postgres)
        server = self._server("postgres")
        assert isinstance(server, PostgresServer)
        return server.uri

    def _start_postgres(self) -> None:
        """PostgreSQL, into a running environment (a CDC run asked)."""
        self._needs_port("postgres", "PostgreSQL")
        required_bin_dir()  # BadInput naming what installs it, before anything changes
        self._progress("starting PostgreSQL (a CDC source's database)")
        server = PostgresServer(self._ctx())

        def start() -> None:
            server.prepare()
            self._run_preparations([server])
            self._launch(server)
            self._await_ready(server)

        self._start_later("postgres", start, undo=lambda: self._stop([server], hard=True))

    def _spark_settings(self, cluster: SparkCluster) -> SparkSettings:
        if cluster is SparkCluster.STANDALONE:
            master = f"spark://127.0.0.1:{self._st.ports['spark-master']}"
        else:
            master = f"local[{self.options.spark_cores}]"
        return SparkSettings.for_directory(self.directory, master)

    def spark_on(self, cluster: SparkCluster, run_dir: Path | None = None) -> SparkSettings:
        # The workers are processes of this machine: they see every folder already.
        if cluster is SparkCluster.STANDALONE:
            self._on_demand("spark_standalone", self._start_spark_cluster)
        return self._spark_settings(cluster)

    def _start_spark_cluster(self) -> None:
        """The master and its workers, into a running environment (a scenario asked)."""
        self._progress("starting the Spark standalone cluster (a master, 2 workers)")
        master, *workers = self._spark_cluster(self._ctx())

        def start() -> None:
            self._launch(master)
            self._await_ready(master)
            for worker in workers:
                self._launch(worker)
            for worker in workers:
                self._await_ready(worker)

        servers = [master, *workers]
        self._start_later("spark_standalone", start, undo=lambda: self._stop(servers, hard=True))

    def _kafka_status(self, servers: Sequence[ServerStatus]) -> tuple[KafkaStatus | None, str]:
        if not any(s.ready for s in servers if s.name.startswith("kafka-")):
            return None, ""  # not worth the client's timeouts (the servers say it is down)
        return super()._kafka_status(servers)

    # -- what faults use ------------------------------------------------------------------------

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return NODE_IDS

    def _targets(self, component: Component, broker: int | None) -> list[LocalServer]:
        if component is Component.MONGO:
            return [self._server("mongo")]
        if component is Component.POSTGRES:
            return [self._server("postgres")]
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
            process.terminate(procs, grace=grace, what=f"stopping {names}",
                              sig=servers[0].stop_signal)  # fmt: skip
        for server in servers:
            self._record(server.name, pid=None, create_time=None, paused=False)

    def restart(
        self, component: Component, *, hard: bool = False, broker: int | None = None
    ) -> None:
        servers = self._targets(component, broker)
        self._stop(servers, hard=hard)
        self._start_again(servers)

    def kill(self, component: Component, *, broker: int | None = None) -> None:
        self._stop(self._targets(component, broker), hard=True)

    def revive(self, component: Component, *, broker: int | None = None) -> None:
        servers = self._targets(component, broker)
        records = self._reload().servers
        running = [s.name for s in servers if records[s.name].alive()]
        if running:
            raise BadInput(f"{', '.join(running)}: running; only a killed server can be revived")
        self._start_again(servers)

    def _start_again(self, servers: Sequence[LocalServer]) -> None:
        """Launch each server, then wait until each is ready (they start side by side)."""
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
            self._continue(server)

    def _continue(self, server: LocalServer) -> None:
        process.signal_server(self._st.env_id, server.name, signal.SIGCONT)
        self._record(server.name, paused=False)

    # -- what a fault left behind ---------------------------------------------------------------

    def left_down(self) -> list[str]:
        """What a fault left undone, read from the state file and the fault proxy alone (no
        server is probed, so it is cheap enough to ask after every test): each server that
        was started and has exited or is paused, and each link rule in force."""
        down, paused = self._not_running()
        return (
            [f"{s.name} down" for s in down]
            + [f"{s.name} paused" for s in paused]
            + [
                f"link rule {r.get('id')} ({r.get('action')} on {r.get('listener')}) in force"
                for r in self._rules()
            ]
        )

    def restore(self) -> list[str]:
        """Undo what ``left_down`` names: start each server that is down again, resume each
        paused one, lift every link rule; returns once each is ready, with what was undone
        (nothing, and nothing done, when nothing was left)."""
        undone = self.left_down()
        if undone:
            down, paused = self._not_running()
            for server in paused:
                self._continue(server)
            self._start_again(down)
            self.clear_link_rules()
        return undone

    def _not_running(self) -> tuple[list[LocalServer], list[LocalServer]]:
        """The started servers that have exited, and those paused (a server never started -
        the Spark cluster until a run asks for it - is neither)."""
        found = self._reload()
        started = [(s, found.servers[s.name]) for s in self._servers() if s.name in found.servers]
        return (
            [s for s, record in started if not record.alive()],
            [s for s, record in started if record.alive() and record.paused],
        )

    def _rules(self) -> list[dict[str, object]]:
        """The link rules in force; none while the proxy itself is down."""
        proxy = self._st.servers.get("proxy")
        return self.fault_proxy.rules() if proxy is not None and proxy.alive() else []

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
        return answers(node)


ENVIRONMENT = LocalEnvironment  # what the registry opens (harness.environment.backends)
