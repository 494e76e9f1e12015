"""``--images official``: the same topology from upstream images, for users whose engine can pull
from a registry - ``apache/kafka`` KRaft nodes, ``mongo`` as a 3-member replica set the lab
initiates, ``apache/spark`` for a standalone master and workers, ``postgres`` for a CDC
source. The fault proxy and the consumers stay on the lab's image (they are the lab's own
code).

Rendered and unit-tested here; never started in this project's CI, whose machines reach no
registry (README: "Backends").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.environment import jars
from harness.environment.containers.images import lab_ref
from harness.environment.containers.specs import (
    ANY,
    CONTROLLER,
    HOST,
    INTERNAL,
    NET,
    POSTGRES_PORT,
    PROXY_NET_BASE,
    ContainerSpec,
    Topology,
    port_names,
)
from harness.environment.servers.kafka import CLUSTER_SETTINGS, NODE_IDS, cluster_id
from harness.environment.servers.postgres import settings as postgres_settings

MONGO_IMAGE = "mongo:8.0"
POSTGRES_IMAGE = "postgres:15"  # the major version Debian's package gives the lab's image
MONGO_MEMBERS = ("mongo-1", "mongo-2", "mongo-3")
MONGO_PORT = 27017
OFFICIAL_REPLICA_SET = "rs0"
SPARK_MASTER_PORT = 7077


def kafka_image() -> str:
    return f"apache/kafka:{jars.kafka().version}"  # the version the local backend runs


def spark_image() -> str:
    return f"apache/spark:{jars.spark_kafka().version}"


def kafka_env(name: str) -> str:
    """``log.dirs`` as the apache/kafka image reads it from its environment: KAFKA_LOG_DIRS."""
    return "KAFKA_" + name.upper().replace(".", "_")


@dataclass(frozen=True)
class OfficialTopology:
    """The lab's topology (``specs.Topology``) with upstream server images."""

    lab: Topology

    def kafka(self, node: int) -> ContainerSpec:
        host_port = self.lab.ports[f"kafka-{node}-proxy"]
        settings: dict[str, object] = {
            "node.id": node,
            "process.roles": "broker,controller",
            "controller.quorum.voters": ",".join(
                f"{n}@{self.lab.ip(f'kafka-{n}')}:{CONTROLLER}" for n in NODE_IDS
            ),
            "listeners": f"INTERNAL://:{INTERNAL},NET://:{NET},HOST://:{HOST},"
            f"CONTROLLER://:{CONTROLLER}",
            "advertised.listeners": f"INTERNAL://{self.lab.ip(f'kafka-{node}')}:{INTERNAL},"
            f"NET://{self.lab.ip('proxy')}:{PROXY_NET_BASE + node},HOST://127.0.0.1:{host_port}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,NET:PLAINTEXT,HOST:PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
            "log.dirs": "/var/lib/kafka/data",
            **CLUSTER_SETTINGS,
        }
        env = {kafka_env(k): str(v) for k, v in settings.items()}
        env["CLUSTER_ID"] = cluster_id(self.lab.env_id)
        address = self.lab.ip(f"kafka-{node}")
        return ContainerSpec(
            f"kafka-{node}", "Kafka node (KRaft, apache/kafka)", kafka_image(), (), env=env,
            address=address,
        )  # fmt: skip

    def mongo(self, member: str) -> ContainerSpec:
        published = {MONGO_PORT: self.lab.ports["mongo"]} if member == MONGO_MEMBERS[0] else {}
        command = ("mongod", "--replSet", OFFICIAL_REPLICA_SET, "--bind_ip_all",
                   "--setParameter", "enableTestCommands=1")  # fmt: skip
        # The first member where the lab's SecantusDB is (the proxy's upstream), then .12, .13.
        index = MONGO_MEMBERS.index(member)
        address = self.lab.ip("mongo") if index == 0 else f"{self.lab.subnet}.{11 + index}"
        return ContainerSpec(
            member, f"MongoDB replica set member ({MONGO_IMAGE})", MONGO_IMAGE, command,
            published=published, address=address,
        )  # fmt: skip

    def spark_master(self) -> ContainerSpec:
        command = ("/opt/spark/bin/spark-class", "org.apache.spark.deploy.master.Master",
                   "--host", "spark-master", "--port", str(SPARK_MASTER_PORT))  # fmt: skip
        return ContainerSpec("spark-master", "Spark master (apache/spark)", spark_image(), command)

    def spark_worker(self, index: int) -> ContainerSpec:
        command = ("/opt/spark/bin/spark-class", "org.apache.spark.deploy.worker.Worker",
                   "--cores", "1", f"spark://spark-master:{SPARK_MASTER_PORT}")  # fmt: skip
        return ContainerSpec(
            f"spark-worker-{index}", "Spark worker (apache/spark)", spark_image(), command
        )

    def postgres(self) -> ContainerSpec:
        """The image's PostgreSQL with the lab's settings (logical decoding), its cluster made
        by the image's entrypoint. It trusts every client: it listens on the environment's
        network alone, and its published port binds 127.0.0.1. Its Unix socket stays the
        image's (the entrypoint's first, socket-only start of a new cluster needs it)."""
        pairs = postgres_settings(POSTGRES_PORT, listen=ANY)
        kept = [(flag, value) for flag, value in zip(pairs[::2], pairs[1::2], strict=True)
                if not value.startswith("unix_socket_directories=")]  # fmt: skip
        flags = [arg for pair in kept for arg in pair]
        return ContainerSpec(
            "postgres", f"PostgreSQL (logical decoding, {POSTGRES_IMAGE})", POSTGRES_IMAGE,
            ("postgres", *flags), env={"POSTGRES_HOST_AUTH_METHOD": "trust"},
            published={POSTGRES_PORT: self.lab.ports["postgres"]},
            address=self.lab.ip("postgres"), stop_signal="SIGINT",
        )  # fmt: skip

    def servers(self) -> list[ContainerSpec]:
        """Every server, in start order (the proxy from the lab's image)."""
        return [
            *(self.mongo(m) for m in MONGO_MEMBERS),
            self.lab.proxy(),
            *(self.kafka(n) for n in NODE_IDS),
            self.spark_master(),
            *(self.spark_worker(i) for i in (1, 2)),
        ]


def replica_set_config() -> dict[str, Any]:
    """``replSetInitiate``'s document for the three members (the first preferred as primary:
    its port is the one published for the harness)."""
    return {
        "_id": OFFICIAL_REPLICA_SET,
        "members": [
            {"_id": i, "host": f"{m}:{MONGO_PORT}", "priority": 2 if i == 0 else 1}
            for i, m in enumerate(MONGO_MEMBERS)
        ],
    }


def rendered(images: str, directory: Path) -> list[ContainerSpec]:
    """The containers ``up`` would start with ``--images lab|official`` (``--dry-run``), with
    example ports and id: nothing is claimed or started."""
    ports = dict(zip(port_names(), range(40001, 40001 + len(port_names())), strict=True))
    lab = Topology(directory, ports, "dry-run", lab_ref().tag)
    # The cluster and PostgreSQL: when a scenario asks for them.
    if images == "official":
        return [*OfficialTopology(lab).servers(), OfficialTopology(lab).postgres()]
    return [*lab.servers(), *lab.spark_cluster(), lab.postgres()]


def to_json(specs: list[ContainerSpec]) -> str:
    return json.dumps([asdict(s) for s in specs], indent=2, default=str)
