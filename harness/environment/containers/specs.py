"""What the containers backend runs, as records: one ``ContainerSpec`` per container, made from the
environment's ports and folder. The environment starts them with testcontainers; the tests and
``--images official`` read them as they are.

The topology, on a private network of the environment's own. Each server has a fixed address on
it (the network's subnet is picked free at ``up``), and every client and server is given
addresses, not names: the engine's DNS is not in the data path. With podman 4.3 and netavark,
while consumer containers were created and removed (a crash, a restart), lookups of the
servers' names in the proxy's container stalled and failed ("Temporary failure in name
resolution"), while connections to the same servers by address went through at once
(docs/environment.md); the names remain as aliases, for people.

* ``mongo`` - SecantusDB, a single-node replica set; its port published on 127.0.0.1 (the
  harness writes the ledger and checks the sink through it).
* ``kafka-1``..``kafka-3`` - Apache Kafka KRaft nodes. Each has two client listeners, both
  advertised as the fault proxy's, so that every client connection comes back through it:
  HOST (advertised ``127.0.0.1:P``, a port the proxy container publishes) for the harness's
  clients on this machine, NET (advertised as the proxy's address, port 1909N) for the
  consumers' containers.
* ``proxy`` - the lab's fault proxy: per node a host-side and a network-side Kafka listener
  (``kafka/N`` and ``kafka/N/net``: a rule on ``kafka/N`` covers both), the consumers' MongoDB
  link, and its control API (published).
* ``spark-master``, ``spark-worker-1``, ``spark-worker-2`` - a Spark standalone cluster, started
  at ``up --spark-standalone`` or when a scenario first asks for it; the drivers run in the
  consumers' containers and reach the master and their executors by address. The master's web
  UI is published (the lab reads its JSON to know the workers registered).
* ``postgres`` - PostgreSQL (Debian's, in the lab's image) with logical decoding on, started at
  ``up --postgres`` or when a CDC run first asks for it; its data in the container (PostgreSQL
  runs as its own user, which may not own the mounted folder), its port published.
* consumers - one container per consumer process, started by ``spawn_client``.

Every container has the environment's folder mounted at the same path, so configuration, data
and logs are where the local backend keeps them (``DIR/kafka``, ``DIR/mongo``, ``DIR/logs``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.environment import jars
from harness.environment.containers.images import IMAGE_HOME, IMAGE_PYTHON
from harness.environment.process import SERVER_VAR
from harness.environment.servers.kafka import (
    CLUSTER_SETTINGS,
    HEAP,
    JVM_FLAGS,
    NODE_IDS,
    cluster_id,
)
from harness.environment.servers.mongo import REPLICA_SET, options
from harness.environment.servers.postgres import SUPERUSER
from harness.environment.servers.postgres import settings as postgres_settings
from harness.environment.servers.spark_standalone import WORKER_CORES, WORKER_MEMORY
from harness.environment.spark import WORKERS

# Ports inside the containers (each has its own network namespace, so they are fixed); the
# published ones are the environment's, picked free at ``up`` and kept across restarts.
INTERNAL, NET, HOST, CONTROLLER = 9092, 9093, 9094, 9095
POSTGRES_PORT = 5432
POSTGRES_DATA = "/var/lib/postgresql/chaoslab"  # in the container: the postgres user's to own
PROXY_NET_BASE = 19090  # the proxy's network-side listener for node N: 19090 + N
PROXY_MONGO = 27018
PROXY_POSTGRES = 15432  # the proxy's plain TCP listener in front of PostgreSQL (source-postgres)
SPARK_MASTER, SPARK_MASTER_UI, SPARK_WORKER_UI = 7077, 8080, 8081
SPARK_CLASS = f"{IMAGE_HOME}/venv/bin/spark-class"  # pyspark's launcher, in the image's venv
LABEL_ENV = "chaoslab.env"  # every container and network of an environment carries it
LABEL_SERVER = "chaoslab.server"
ANY = "0.0.0.0"  # inside a container: its own interfaces (the network's, and published ports)
# tc in the container's own namespace (the netem faults) needs it; nothing outside it.
CAPS = ("NET_ADMIN",)


@dataclass(frozen=True)
class Mount:
    host: str
    container: str
    mode: str = "rw"


@dataclass(frozen=True)
class ContainerSpec:
    """One container: what runs, where it is reachable, what it may do."""

    name: str  # the server's name: network alias, state key, log file name
    role: str
    image: str
    command: tuple[str, ...]
    published: Mapping[int, int] = field(default_factory=dict)  # container port -> 127.0.0.1 port
    address: str | None = None  # on the environment's network (None: the engine picks one)
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    cap_add: tuple[str, ...] = CAPS
    stop_signal: str = "SIGTERM"  # what the engine's stop sends first (its clean shutdown)


# Fixed hosts of the servers; the engine gives clients addresses from the upper half.
HOSTS = {
    "mongo": 10,
    "proxy": 11,
    **{f"kafka-{n}": 20 + n for n in NODE_IDS},
    "spark-master": 30,
    **{f"spark-worker-{n}": 30 + n for n in WORKERS},
    "postgres": 40,
}
CLIENT_RANGE = 128  # .128/25


def port_names() -> list[str]:
    """The environment's published ports, named."""
    return [*(f"kafka-{n}-proxy" for n in NODE_IDS), "mongo", "proxy-control", "spark-master-ui",
            "postgres"]  # fmt: skip


def supervised(argv: list[str], log: Path, cwd: Path | None = None) -> tuple[str, ...]:
    """A client's ``argv`` as a local-backend consumer runs: in a session of its own (a crash
    point kills its process group - its Spark JVM too), with its output appended to ``log``.

    Not the container's first process: signals from inside a container's PID namespace to its
    init are dropped (measured: a consumer as PID 1 could not SIGKILL itself, and its
    ``killpg(1)`` was ``kill(-1)``). ``sh`` stays PID 1, waits, and exits with the consumer's
    status (137 for a SIGKILL), which becomes the container's. Its trap passes SIGTERM and
    SIGINT on to the consumer's group: init gets only the signals it has a handler for, so
    without one a stop asked from outside never reached the consumer (measured: every Spark
    driver was SIGKILLed after the 20 s grace instead of finishing its batch)."""
    script = (
        (f"cd {shlex.quote(str(cwd.resolve()))} || exit 127; " if cwd is not None else "")
        + "trap 'kill -TERM -\"$c\" 2>/dev/null' TERM INT; "
        f'setsid "$@" >>{log} 2>&1 & c=$!; '
        # wait returns early when the trap runs: wait again while the consumer lives.
        'while :; do wait "$c"; s=$?; kill -0 "$c" 2>/dev/null || exit "$s"; done'
    )
    return ("sh", "-c", script, "sh", *argv)


def logged(argv: list[str], log: Path) -> tuple[str, ...]:
    """``argv`` with its output appended to ``log`` (in the mounted folder, as the local backend
    keeps its logs), and ``exec``ed so that it is the container's first process."""
    return ("sh", "-c", f'exec "$@" >>{log} 2>&1', "sh", *argv)


@dataclass(frozen=True)
class Topology:
    """The lab's containers for one environment."""

    directory: Path
    ports: Mapping[str, int]
    env_id: str
    image: str
    subnet: str = "10.89.100"  # the network's first three octets: servers at fixed hosts

    def ip(self, server: str) -> str:
        """A server's fixed address on the network (clients get theirs from ``IP_RANGE``)."""
        return f"{self.subnet}.{HOSTS[server]}"

    def _mounts(self) -> tuple[Mount, ...]:
        return (Mount(str(self.directory), str(self.directory)),)

    def log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    # -- MongoDB ------------------------------------------------------------------------------

    def mongo(self) -> ContainerSpec:
        port = self.ports["mongo"]
        argv = [IMAGE_PYTHON, "-m", "harness.environment.servers.secantus_server",
                *options(config=str(self.directory / "secantusd.toml"), host=ANY, port=port,
                         storage_path=str(self.directory / "mongo"))]  # fmt: skip
        return ContainerSpec(
            "mongo",
            f"MongoDB replica set {REPLICA_SET} (SecantusDB)",
            self.image,
            logged(argv, self.log("mongo")),
            published={port: port},
            mounts=self._mounts(),
            address=self.ip("mongo"),
        )

    # -- Kafka --------------------------------------------------------------------------------

    def kafka_config(self, node: int) -> Path:
        return self.directory / "kafka" / f"node-{node}.properties"

    def kafka_settings(self, node: int) -> dict[str, object]:
        voters = ",".join(f"{n}@{self.ip(f'kafka-{n}')}:{CONTROLLER}" for n in NODE_IDS)
        host_port = self.ports[f"kafka-{node}-proxy"]
        me = self.ip(f"kafka-{node}")
        return {
            "process.roles": "broker,controller",
            "node.id": node,
            "controller.quorum.voters": voters,
            "listeners": f"INTERNAL://{ANY}:{INTERNAL},NET://{ANY}:{NET},HOST://{ANY}:{HOST},"
            f"CONTROLLER://{ANY}:{CONTROLLER}",
            "advertised.listeners": f"INTERNAL://{me}:{INTERNAL},"
            f"NET://{self.ip('proxy')}:{PROXY_NET_BASE + node},HOST://127.0.0.1:{host_port},"
            f"CONTROLLER://{me}:{CONTROLLER}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,NET:PLAINTEXT,HOST:PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
            "log.dirs": self.directory / "kafka" / f"node-{node}",
            **CLUSTER_SETTINGS,
        }

    def kafka(self, node: int) -> ContainerSpec:
        classpath = f"/opt/chaoslab/.chaoslab/jars/{jars.kafka().directory.name}/*"
        config = self.kafka_config(node)
        log4j = self.directory / "kafka" / "log4j2.properties"
        name = f"kafka-{node}"
        # Formatting is idempotent (--ignore-formatted), so a container started again after a
        # kill runs the same command; the storage is in the mounted folder and survives.
        script = (
            f"java -Xmx128m -cp '{classpath}' kafka.tools.StorageTool format --ignore-formatted "
            f"-t {cluster_id(self.env_id)} -c {config} >>{self.log(name)} 2>&1 && "
            f"exec java -Xms{HEAP} -Xmx{HEAP} {' '.join(JVM_FLAGS)} -XX:+ExitOnOutOfMemoryError "
            f"-Djava.awt.headless=true -Dlog4j2.configurationFile={log4j} "
            f"-Dchaoslab.log={self.log(name)} -cp '{classpath}' kafka.Kafka {config} "
            f">>{self.log(name)} 2>&1"
        )
        return ContainerSpec(
            name,
            "Kafka node (KRaft broker + controller)",
            self.image,
            ("sh", "-c", script),
            mounts=self._mounts(),
            address=self.ip(name),
        )

    # -- the fault proxy ----------------------------------------------------------------------

    def proxy(self) -> ContainerSpec:
        listeners: list[str] = []
        for n in NODE_IDS:
            host_port = self.ports[f"kafka-{n}-proxy"]
            node = self.ip(f"kafka-{n}")
            listeners += [f"kafka/{n},kafka,{host_port},{node}:{HOST}",
                          f"kafka/{n}/net,kafka,{PROXY_NET_BASE + n},{node}:{NET}"]  # fmt: skip
        listeners.append(f"mongo,mongo,{PROXY_MONGO},{self.ip('mongo')}:{self.ports['mongo']}")
        # There before PostgreSQL is (it starts when a CDC run first asks): a connection
        # through it fails until then, as one to the server would.
        listeners.append(f"postgres,tcp,{PROXY_POSTGRES},{self.ip('postgres')}:{POSTGRES_PORT}")
        control = self.ports["proxy-control"]
        argv = [IMAGE_PYTHON, "-m", "harness.environment.proxy", "--bind", ANY,
                "--control", str(control),
                *(arg for spec in listeners for arg in ("--listener", spec))]  # fmt: skip
        kafka_ports = [self.ports[f"kafka-{n}-proxy"] for n in NODE_IDS]
        published = {port: port for port in [*kafka_ports, control]}
        return ContainerSpec(
            "proxy",
            "fault proxy (Kafka, MongoDB, PostgreSQL links)",
            self.image,
            logged(argv, self.log("proxy")),
            published=published,
            mounts=self._mounts(),
            address=self.ip("proxy"),
        )

    # -- Spark standalone ---------------------------------------------------------------------

    @property
    def spark_master_url(self) -> str:
        return f"spark://{self.ip('spark-master')}:{SPARK_MASTER}"

    def _spark(
        self,
        name: str,
        role: str,
        argv: list[str],
        mounts: tuple[Mount, ...],
        published: Mapping[int, int] | None = None,
    ) -> ContainerSpec:
        # SPARK_LOCAL_IP: where the daemon binds and what it tells others (its fixed address).
        # SERVER_VAR: an executor-loss names the worker its executor ran on (``crash``).
        env = {"SPARK_LOCAL_IP": self.ip(name), SERVER_VAR: name}
        return ContainerSpec(name, role, self.image, logged([SPARK_CLASS, *argv], self.log(name)),
                             published=published or {}, address=self.ip(name), env=env,
                             mounts=mounts)  # fmt: skip

    def spark_master(self) -> ContainerSpec:
        argv = ["org.apache.spark.deploy.master.Master", "--host", self.ip("spark-master"),
                "--port", str(SPARK_MASTER), "--webui-port", str(SPARK_MASTER_UI)]  # fmt: skip
        ui = self.ports["spark-master-ui"]
        return self._spark("spark-master", "Spark standalone master", argv, self._mounts(),
                           published={SPARK_MASTER_UI: ui})  # fmt: skip

    def spark_worker(self, index: int, shared: tuple[str, ...] = ()) -> ContainerSpec:
        """Worker ``index``; ``shared``: folders its executors write into besides the
        environment's (a run's directory: crash plans and the history are kept there)."""
        name = f"spark-worker-{index}"
        argv = ["org.apache.spark.deploy.worker.Worker", self.spark_master_url,
                "--host", self.ip(name), "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
                "--webui-port", str(SPARK_WORKER_UI),
                "--work-dir", str(self.directory / "spark" / f"work-{index}")]  # fmt: skip
        mounts = (*self._mounts(), *(Mount(f, f) for f in shared if f != str(self.directory)))
        return self._spark(name, "Spark standalone worker", argv, mounts)

    def spark_cluster(self, shared: tuple[str, ...] = ()) -> list[ContainerSpec]:
        return [self.spark_master(), *(self.spark_worker(n, shared) for n in WORKERS)]

    # -- PostgreSQL ---------------------------------------------------------------------------

    def postgres(self) -> ContainerSpec:
        """Debian's PostgreSQL as its own user (it refuses root): its cluster made at the
        container's first start, kept in the container across its restarts."""
        as_postgres = "setpriv --reuid=postgres --regid=postgres --clear-groups"
        network = f"{self.subnet}.0/24"
        flags = " ".join(shlex.quote(a) for a in postgres_settings(POSTGRES_PORT, listen=ANY))
        script = (
            "bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1); "
            f"if [ ! -s {POSTGRES_DATA}/PG_VERSION ]; then "
            f"install -d -o postgres -g postgres -m 700 {POSTGRES_DATA} && "
            f'{as_postgres} "$bin/initdb" -D {POSTGRES_DATA} -A trust -U {SUPERUSER} -E UTF8 '
            "--locale=C --no-sync || exit 1; "
            # Clients on the environment's network alone (the host's, through the published
            # port, come from its gateway): initdb's trust covers the container's loopback.
            f"printf 'host all all {network} trust\\nhost replication all {network} trust\\n' "
            f">> {POSTGRES_DATA}/pg_hba.conf; fi; "
            f'exec {as_postgres} "$bin/postgres" -D {POSTGRES_DATA} {flags}'
        )
        return ContainerSpec(
            "postgres",
            "PostgreSQL (logical decoding)",
            self.image,
            logged(["sh", "-c", script], self.log("postgres")),
            published={POSTGRES_PORT: self.ports["postgres"]},
            mounts=self._mounts(),
            address=self.ip("postgres"),
            # Its fast shutdown: SIGTERM is its smart one, which waits for every client to
            # leave - a CDC source's replication connection never does.
            stop_signal="SIGINT",
        )

    def servers(self) -> list[ContainerSpec]:
        """Every server, in start order (the Spark cluster is started on demand)."""
        return [self.mongo(), self.proxy(), *(self.kafka(n) for n in NODE_IDS)]

    # -- addresses ----------------------------------------------------------------------------

    @property
    def kafka_bootstrap(self) -> str:
        """For the harness on this machine: the proxy's published host-side listeners."""
        return ",".join(f"127.0.0.1:{self.ports[f'kafka-{n}-proxy']}" for n in NODE_IDS)

    @property
    def network_kafka_bootstrap(self) -> str:
        """For the consumers' containers: the proxy's network-side listeners."""
        return ",".join(f"{self.ip('proxy')}:{PROXY_NET_BASE + n}" for n in NODE_IDS)

    @property
    def mongo_uri(self) -> str:
        # directConnection: SecantusDB's hello names the address it listens on (0.0.0.0 in its
        # container), which a replicaSet URI would go on to. Sessions and transactions work.
        return f"mongodb://127.0.0.1:{self.ports['mongo']}/?directConnection=true"

    @property
    def postgres_uri(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.ports['postgres']}/postgres"

    @property
    def network_postgres_uri(self) -> str:
        """For a CDC source's Connect workers, in their containers: through the proxy (the
        source-postgres link)."""
        return f"postgresql://{SUPERUSER}@{self.ip('proxy')}:{PROXY_POSTGRES}/postgres"

    @property
    def network_mongo_uri(self) -> str:
        return f"mongodb://{self.ip('proxy')}:{PROXY_MONGO}/?directConnection=true"
