"""A node of the lab's Kafka cluster: Apache Kafka in KRaft mode, broker and controller in one
JVM, from the jars ``chaoslab fetch`` put in ``.chaoslab/jars`` (``harness.environment.jars``).

Three nodes make the cluster (a static quorum of three voters). Each listens on 127.0.0.1:

* INTERNAL - between brokers (replication), advertised as itself;
* CLIENT - for clients, advertised as the fault proxy's listener for this node, so that every
  client connection after bootstrap comes back through the proxy;
* CONTROLLER - the KRaft quorum.

Topics and ``__consumer_offsets`` have three replicas and ``min.insync.replicas=2``, as a
managed cluster has. Everything else is Kafka's default, so that faults play out as they do in
production (a SIGKILLed broker is fenced after ``broker.session.timeout.ms``, 9 s).
"""

from __future__ import annotations

import base64
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from confluent_kafka.admin import AdminClient

from harness.environment import jars
from harness.environment.base import ServerStartError
from harness.environment.class_data import ClassData
from harness.environment.jvm import LIGHT_JVM
from harness.environment.ports import LOOPBACK
from harness.environment.servers.base import LocalServer, ServerContext
from harness.kafka.clients import HARNESS_SETTINGS
from harness.readiness import NotReady, accepts_connections

NODE_IDS = (1, 2, 3)
LOG4J2 = Path(jars.POMS) / "kafka-log4j2.properties"
# 256 MB runs every fault (kills, pauses, rolling restarts) with no full GC; smaller heaps ran
# out of memory at start-up or hit full GCs (docs/environment.md). Kafka's log cleaner buffer
# (128 MiB by default, allocated once __consumer_offsets exists) is 16 MiB here: the lab's
# compacted topics are small.
HEAP = "256m"
CLEANER_BUFFER = 16 * 1024 * 1024
JVM_FLAGS: tuple[str, ...] = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", *LIGHT_JVM)
# A node starts at each environment's start and again at each restart a fault makes; the
# storage tool, on the same classpath, maps the node's archive too (harness.environment.kafka_cds).
CLASS_DATA = ClassData(
    name="kafka-node",
    program="the Kafka node",
    probe="harness.environment.kafka_cds",
    jars=lambda: jars.kafka().jars(),
)


# What every node of the lab's clusters has, whichever backend runs it.
CLUSTER_SETTINGS: Mapping[str, object] = {
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "INTERNAL",
    "num.partitions": 3,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    # 50 by default, all made at the first group's first request, which is slow on a small
    # machine (docs/performance.md); the lab's few groups need no more than 10.
    "offsets.topic.num.partitions": 10,
    "transaction.state.log.num.partitions": 10,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "group.initial.rebalance.delay.ms": 0,
    "log.cleaner.dedupe.buffer.size": CLEANER_BUFFER,
}


def port_names(node: int) -> tuple[str, ...]:
    """The ports a node needs, named as in the environment's port map."""
    return (
        f"kafka-{node}",
        f"kafka-{node}-client",
        f"kafka-{node}-controller",
        f"kafka-{node}-proxy",
    )


def cluster_id(env_id: str) -> str:
    """The environment's Kafka cluster id: a UUID in Kafka's URL-safe base64, derived from the
    environment id. Never one starting with "-", as Kafka's own Uuid.randomUuid() ensures: the
    storage tool would read it as an option (measured: "argument --cluster-id/-t: expected one
    argument")."""
    salt = 0
    while True:
        raw = uuid.uuid5(
            uuid.NAMESPACE_OID, f"chaoslab-{env_id}-{salt}" if salt else f"chaoslab-{env_id}"
        ).bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-"):
            return text
        salt += 1


def java() -> str:
    """``$JAVA_HOME/bin/java`` if JAVA_HOME is set, as Kafka's own scripts choose; else PATH's."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if found is None:
        raise ServerStartError("no java on PATH (Kafka and Spark need Java 17 or newer)")
    return found


class KafkaNode(LocalServer):
    role = "Kafka node (KRaft broker + controller)"
    ready_timeout = 120.0  # a margin over a JVM start on 2 busy cores (docs/performance.md)

    def __init__(self, ctx: ServerContext, node: int) -> None:
        super().__init__(ctx)
        self.node = node
        self.name = f"kafka-{node}"

    # -- addresses --------------------------------------------------------------------------

    def _port(self, suffix: str = "") -> int:
        return self.ctx.ports[f"kafka-{self.node}{suffix}"]

    @property
    def port(self) -> int:
        return self._port()  # INTERNAL: what the harness's own probes use

    @property
    def client_address(self) -> str:
        return f"{LOOPBACK}:{self._port('-client')}"

    @property
    def proxy_port(self) -> int:
        return self._port("-proxy")

    # -- files --------------------------------------------------------------------------------

    @property
    def data(self) -> Path:
        return self.ctx.directory / "kafka" / f"node-{self.node}"

    @property
    def config(self) -> Path:
        return self.ctx.directory / "kafka" / f"node-{self.node}.properties"

    def settings(self) -> Mapping[str, object]:
        ports = self.ctx.ports
        voters = ",".join(f"{n}@{LOOPBACK}:{ports[f'kafka-{n}-controller']}" for n in NODE_IDS)
        return {
            "process.roles": "broker,controller",
            "node.id": self.node,
            "controller.quorum.voters": voters,
            "listeners": f"INTERNAL://{self.address},CLIENT://{self.client_address},"
            f"CONTROLLER://{LOOPBACK}:{self._port('-controller')}",
            "advertised.listeners": f"INTERNAL://{self.address},"
            f"CLIENT://{LOOPBACK}:{self.proxy_port},"
            f"CONTROLLER://{LOOPBACK}:{self._port('-controller')}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
            "log.dirs": self.data,
            **CLUSTER_SETTINGS,
        }

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.settings().items()]
        self.config.write_text("# written by chaoslab\n" + "\n".join(lines) + "\n")

    def preparation(self) -> list[str]:
        """Format the node's storage for the environment's cluster (once, before its first
        start). With a static quorum (controller.quorum.voters) no other flag is needed."""
        return format_command(self.config, cluster_id(self.ctx.env_id), CLASS_DATA.java_options())

    def argv(self) -> list[str]:
        return node_command(self.config, self.log_path, CLASS_DATA.java_options())

    def probe(self) -> None:
        """Ready when this node is a registered, unfenced broker (it is in the metadata its own
        INTERNAL listener serves); registering needs a quorum leader, so that holds too."""
        accepts_connections(LOOPBACK, self.port)  # first: librdkafka logs every refusal
        broker_registered(self.node, self.address)


def format_command(config: Path, cluster: str, options: Sequence[str] = ()) -> list[str]:
    """Kafka's storage tool formatting a node's log folders for ``cluster``."""
    return [java(), "-Xmx128m", *LIGHT_JVM, *options, "-cp", jars.kafka().classpath(),
            "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(config)]  # fmt: skip


def node_command(config: Path, log: Path, options: Sequence[str] = ()) -> list[str]:
    """A node's JVM, configured by ``config``, logging to ``log``, with JVM ``options``."""
    return [java(), f"-Xms{HEAP}", f"-Xmx{HEAP}", *JVM_FLAGS, *options,
            "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={LOG4J2}", f"-Dchaoslab.log={log}",
            "-cp", jars.kafka().classpath(), "kafka.Kafka", str(config)]  # fmt: skip


def broker_registered(node: int, bootstrap: str) -> None:
    """Probe: raises unless ``node`` is a registered, unfenced broker in the metadata that
    ``bootstrap`` serves (registering needs a quorum leader, so that holds too)."""
    # While the nodes start, the metadata names peers not listening yet (HARNESS_SETTINGS: critical
    # errors only); the probe's answer is the metadata, its timeout names what did not come up.
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, **HARNESS_SETTINGS}
    )
    brokers = admin.list_topics(timeout=2).brokers
    if node not in brokers:
        raise NotReady(f"node {node} is not a registered broker yet ({sorted(brokers)})")
