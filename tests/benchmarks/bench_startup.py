"""Benchmark (not a test): time from ``up`` to every server ready, Spark's cold start, and a
Kafka Connect worker's start with its plugins found by their manifests (the lab's) beside found
by scanning them (a scenario's own plugins), side by side, one of each per round.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_startup.py [ROUNDS]

Goal: the environment is ready within 20 s on 2 cores.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.environment.kafka_cds import probe_node, stop
from harness.environment.local import LocalEnvironment
from harness.environment.ports import LOOPBACK, free_ports
from harness.environment.spark import spark_session
from harness.pipeline.connect.cds import ONE_NODE, SINK
from harness.pipeline.connect.settings import ConnectRest, ConnectSettings
from harness.pipeline.connect.worker import CLASS_DATA, worker_command, worker_properties
from harness.readiness import NotReady, wait_for

GOAL_S = 20.0


def time_up(directory: Path) -> tuple[float, float]:
    env = LocalEnvironment(directory)
    start = time.monotonic()
    env.start()
    ready = time.monotonic() - start
    start = time.monotonic()
    env.stop()
    return ready, time.monotonic() - start


def time_spark(directory: Path) -> float:
    with LocalEnvironment(directory) as env:
        start = time.monotonic()
        session = spark_session(env.spark, "bench")
        session.range(10).count()
        took = time.monotonic() - start
        session.stop()
    return took


def time_connect_worker(folder: Path, bootstrap: str, discovery: str) -> float:
    """Seconds from a worker's JVM started to its REST API listing MongoDB's sink, with
    ``plugin.discovery`` ``discovery`` (stopped after)."""
    folder.mkdir()
    settings = ConnectSettings(bootstrap, folder.name, str(folder), workers=1, worker=ONE_NODE)
    (port,) = free_ports(1)
    properties = folder / "worker.properties"
    lines = worker_properties(settings, LOOPBACK, port).splitlines()
    lines = [line for line in lines if not line.startswith("plugin.discovery=")]
    properties.write_text("\n".join([*lines, f"plugin.discovery={discovery}"]) + "\n")
    settings.rest_file(0).write_text(f"http://{LOOPBACK}:{port}\n")
    rest = ConnectRest(settings)

    def has_the_sink() -> None:
        if SINK not in rest.plugins():
            raise NotReady("no MongoDB sink yet")

    start = time.monotonic()
    worker = subprocess.Popen(worker_command(properties, CLASS_DATA.java_options()),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(has_the_sink, what=f"a worker ({discovery})", timeout=300, interval=0.2)
        return time.monotonic() - start
    finally:
        stop(worker, "the bench's worker")


def time_connect(folder: Path, rounds: int) -> dict[str, list[float]]:
    """Each round, a worker finding its plugins by their manifests, then one scanning them."""
    took: dict[str, list[float]] = {"service_load": [], "only_scan": []}
    with probe_node(folder / "kafka") as bootstrap:
        for i in range(rounds):
            for discovery, times in took.items():
                times.append(time_connect_worker(folder / f"{discovery}-{i}", bootstrap, discovery))
            print(f"  round {i + 1}: " + ", ".join(f"{d} {t[-1]:5.2f} s" for d, t in took.items()),
                  flush=True)  # fmt: skip
    return took


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp:
        ups, downs = [], []
        for i in range(rounds):
            ready, down = time_up(Path(tmp) / f"env{i}")
            ups.append(ready)
            downs.append(down)
            print(f"  round {i + 1}: up -> ready {ready:5.2f} s, down {down:5.2f} s", flush=True)
        spark = time_spark(Path(tmp) / "spark")
        connect = time_connect(Path(tmp) / "connect", rounds)
    print()
    print(f"up -> ready, {rounds} rounds (3 Kafka nodes registered with a quorum leader and")
    print("  __consumer_offsets made; MongoDB; the fault proxy):")
    print(f"  min {min(ups):.2f} s  median {statistics.median(ups):.2f} s  max {max(ups):.2f} s")
    print(f"  goal <= {GOAL_S:.0f} s: {'met' if max(ups) <= GOAL_S else 'NOT met'}")
    print(f"down: median {statistics.median(downs):.2f} s")
    print(f"spark session cold start + first job (local[2]): {spark:.2f} s")
    print(f"a Connect worker's start to its REST API listing MongoDB's sink, {rounds} rounds side")
    print("  by side (plugin.discovery: the lab's plugins found by their manifests, a")
    print("  scenario's own scanned):")
    for discovery, times in connect.items():
        print(f"  {discovery:12} median {statistics.median(times):5.2f} s  "
              f"(min {min(times):.2f}, max {max(times):.2f})")  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
