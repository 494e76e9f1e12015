"""The Kafka Connect worker's class-data archive (``harness.environment.class_data``), dumped
from a probe worker: one worker of a one-node cluster that starts, scans its plugin path (MongoDB's
connector), validates a sink config through its REST API, and stops.

    python -m harness.pipeline.connect.cds OUT.jsa
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.environment.class_data import dump_options
from harness.environment.kafka_cds import probe_node, stop
from harness.environment.ports import LOOPBACK, free_ports
from harness.pipeline.connect.settings import ConnectRest, ConnectSettings
from harness.pipeline.connect.worker import worker_command, worker_properties
from harness.readiness import NotReady, wait_for

SINK = "com.mongodb.kafka.connect.MongoSinkConnector"
ONE_NODE = {f"{topic}.storage.replication.factor": 1 for topic in ("config", "offset", "status")}


def _probe(out: Path) -> None:
    folder = out.parent
    with probe_node(folder / "kafka-probe") as bootstrap:
        settings = ConnectSettings(bootstrap, "probe", str(folder), workers=1, worker=ONE_NODE)
        (port,) = free_ports(1)
        properties = folder / "worker.properties"
        properties.write_text(worker_properties(settings, LOOPBACK, port))
        settings.rest_file(0).write_text(f"http://{LOOPBACK}:{port}\n")
        worker = subprocess.Popen(
            worker_command(properties, dump_options(out)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        rest = ConnectRest(settings)

        def has_the_sink() -> None:
            if SINK not in rest.plugins():
                raise NotReady("the worker has no MongoDB sink yet")

        try:
            wait_for(has_the_sink, what="the probe worker", timeout=180)
            rest.validate(SINK, {"connector.class": SINK, "topics": "probe"})
        finally:
            stop(worker, "the probe worker")


if __name__ == "__main__":
    _probe(Path(sys.argv[1]))
