"""A Kafka Connect worker of a run's cluster, in distributed mode: writes its settings into the
run's Connect folder, says where its REST API listens (``ConnectSettings.rest_file``), and
becomes the worker's JVM - so that a kill is the worker's, as it would be on a machine of its
own.

    python -m harness.pipeline.connect.worker RUNTIME.JSON... INDEX

(the run's Connect lanes' configurations, as the supervisor starts every runtime's processes:
each holds the cluster's settings).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.environment import jars
from harness.environment.class_data import ClassData
from harness.environment.jvm import LIGHT_JVM
from harness.environment.ports import free_ports
from harness.pipeline.connect.settings import ConnectSettings, plugin_discovery, plugin_path
from harness.pipeline.runtime import RuntimeConfig

MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
LOG4J2 = jars.POMS / "connect-log4j2.properties"
HEAP = "-Xmx256m"  # enough for a worker of a few connectors (docs/connect.md)
# A run starts each worker again after each kill (harness.pipeline.connect.cds). Connect's
# validation JVM does without: its start is the plugin path's scan, not class loading (measured).
CLASS_DATA = ClassData(
    name="connect-worker",
    program="the Kafka Connect worker",
    probe="harness.pipeline.connect.cds",
    jars=lambda: jars.connect().jars(),
)


def own_address(bootstrap: str) -> str:
    """This machine's (or container's) address toward the brokers: where the other workers
    reach its REST API (127.0.0.1 for the local backend)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, int(port)))  # a UDP connect picks the route; nothing is sent
        address: str = probe.getsockname()[0]
    return address


def worker_properties(settings: ConnectSettings, host: str, port: int) -> str:
    """The worker's configuration: the run's cluster, JSON values without schemas (the
    workload's change events), its REST API, MongoDB's connector on the plugin path, and the
    scenario's worker settings (Connect's defaults unless set)."""
    topics = settings.storage_topics
    lines = {
        "bootstrap.servers": settings.bootstrap,
        "group.id": settings.group,
        "config.storage.topic": topics["config"],
        "offset.storage.topic": topics["offset"],
        "status.storage.topic": topics["status"],
        # The lab's cluster has three nodes; a worker's state survives one of them down.
        "config.storage.replication.factor": "3",
        "offset.storage.replication.factor": "3",
        "status.storage.replication.factor": "3",
        "offset.storage.partitions": "5",
        "status.storage.partitions": "3",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "listeners": f"http://{host}:{port}",
        "rest.advertised.host.name": host,
        "rest.advertised.port": str(port),
        "plugin.path": plugin_path(settings.plugins, settings.debezium),
        # Not the default (hybrid_warn), which scans every plugin's classes at every start.
        "plugin.discovery": plugin_discovery(settings.plugins),
        **{k: str(v) for k, v in settings.worker.items()},
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def main(argv: list[str]) -> None:
    """``python -m harness.pipeline.connect.worker RUNTIME.JSON... INDEX``"""
    config = RuntimeConfig.from_json(Path(argv[0]).read_text())
    settings, index = ConnectSettings.from_json(config.connect), int(argv[-1])
    host = own_address(settings.bootstrap)
    (port,) = free_ports(1)
    folder = Path(settings.folder)
    properties = folder / f"worker-{index}.properties"
    properties.write_text(worker_properties(settings, host, port))
    rest = settings.rest_file(index)
    partial = rest.with_suffix(".partial")
    partial.write_text(f"http://{host}:{port}\n")
    partial.replace(rest)
    sys.stdout.flush()
    argv = worker_command(properties, CLASS_DATA.java_options())
    os.execv(argv[0], argv)


def worker_command(properties: Path, options: Sequence[str] = ()) -> list[str]:
    """A worker's JVM, configured by ``properties``, with JVM ``options``."""
    java = shutil.which("java") or "java"
    return [java, HEAP, *LIGHT_JVM, *options, f"-Dlog4j2.configurationFile=file:{LOG4J2}",
            "-cp", jars.connect().classpath(), MAIN, str(properties)]  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
