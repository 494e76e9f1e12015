"""The Kafka node's class-data archive (``harness.environment.class_data``), dumped from a probe
node: a one-node cluster that starts, serves what a run asks of it - a topic made, records
produced idempotently and in a transaction, a group that consumes and commits - and stops.

    python -m harness.environment.kafka_cds OUT.jsa
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer

from harness.environment import process
from harness.environment.class_data import dump_options
from harness.environment.ports import LOOPBACK, free_ports
from harness.environment.servers.kafka import (
    CLUSTER_SETTINGS,
    broker_registered,
    cluster_id,
    format_command,
    node_command,
)
from harness.kafka.clients import HARNESS_SETTINGS
from harness.kafka.topics import create_topic
from harness.readiness import wait_for

STOP_TIMEOUT_S = 60.0
RECORDS = 300


def settings(folder: Path, port: int, controller: int) -> dict[str, object]:
    """The lab's node settings, for a cluster of one."""
    return {
        **CLUSTER_SETTINGS,
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller}",
        "listeners": f"INTERNAL://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": folder / "data",
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
    }


def exercise(bootstrap: str) -> None:
    """What a run asks of the cluster, once each."""
    common = {"bootstrap.servers": bootstrap, **HARNESS_SETTINGS}
    create_topic(bootstrap, "probe", 3, timeout=60)
    producer = Producer({**common, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce("probe", key=str(i % 30), value=str(i))
    producer.flush(60)
    transactional = Producer({**common, "transactional.id": "probe"})
    transactional.init_transactions(60)
    transactional.begin_transaction()
    transactional.produce("probe", key="t", value="t")
    transactional.commit_transaction(60)
    consumer = Consumer(
        {
            **common,
            "group.id": "probe",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(["probe"])
    seen = 0
    while seen < RECORDS:
        message = consumer.poll(30)
        if message is None:
            raise RuntimeError(f"the probe consumed {seen} of {RECORDS} records")
        if message.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()


@contextmanager
def probe_node(folder: Path, options: Sequence[str] = ()) -> Iterator[str]:
    """A one-node cluster in ``folder``, its JVM given ``options``, until the block ends (a
    clean stop); yields its bootstrap address."""
    folder.mkdir()
    port, controller = free_ports(2)
    config = folder / "node.properties"
    lines = [f"{k}={v}" for k, v in settings(folder, port, controller).items()]
    config.write_text("\n".join(lines) + "\n")
    cluster = cluster_id("class-data-probe")
    subprocess.run(format_command(config, cluster), check=True, capture_output=True, timeout=120)
    node = subprocess.Popen(
        node_command(config, folder / "node.log", options),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bootstrap = f"{LOOPBACK}:{port}"
    try:
        wait_for(lambda: broker_registered(1, bootstrap), what="the probe node", timeout=120)
        yield bootstrap
    finally:
        stop(node, "the probe node")


def stop(started: subprocess.Popen[bytes], what: str) -> None:
    """A clean stop (a probe's JVM dumps its archive as it exits), within a deadline."""
    with contextlib.suppress(psutil.NoSuchProcess):
        process.terminate([psutil.Process(started.pid)], grace=STOP_TIMEOUT_S, what=what)
    started.wait()


def _probe(out: Path) -> None:
    with probe_node(out.parent / "kafka-probe", dump_options(out)) as bootstrap:
        exercise(bootstrap)


if __name__ == "__main__":
    _probe(Path(sys.argv[1]))
