"""The containers backend: the lab's servers and consumers in containers (podman here, Docker
where a user has one), the library's verdicts on it, the faults only containers make, and that
everything it labelled is gone after ``down`` - and after a SIGKILLed harness, at the next
``up``."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import docker
import pytest
import yaml

from harness.environment import ContainersEnvironment
from harness.environment.containers import images
from harness.environment.containers.engine import engine_problem
from harness.environment.containers.official import (
    MONGO_MEMBERS,
    OfficialTopology,
    kafka_env,
    replica_set_config,
)
from harness.environment.containers.specs import LABEL_ENV, Topology
from harness.environment.local.kafka_node import cluster_id
from harness.faults.kinds import parse_fault
from tests.support import chaoslab

ENGINE_PROBLEM = engine_problem()
needs_engine = pytest.mark.skipif(
    ENGINE_PROBLEM is not None, reason=f"no container engine: {ENGINE_PROBLEM}"
)
CONTAINERS = pytest.mark.xdist_group("containers")


def labelled(engine_url: str, env_id: str | None = None) -> list[str]:
    """Names of the containers (any state) and networks that carry the lab's label."""
    selector = f"{LABEL_ENV}={env_id}" if env_id else LABEL_ENV
    client = docker.DockerClient(base_url=engine_url)
    try:
        containers = [c.name for c in client.containers.list(all=True, filters={"label": selector})]
        networks = [n.name for n in client.networks.list(filters={"label": selector})]
    finally:
        client.close()
    return sorted(containers + networks)


@pytest.fixture(scope="module")
def containers_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainersEnvironment]:
    directory = tmp_path_factory.mktemp("containers")
    with ContainersEnvironment(directory, progress=print) as env:
        yield env


# -- without an engine -----------------------------------------------------------------------------


def test_the_official_images_render_the_same_topology() -> None:
    ports = {"kafka-1-proxy": 4001, "kafka-2-proxy": 4002, "kafka-3-proxy": 4003,
             "mongo": 4004, "proxy-control": 4005}  # fmt: skip
    lab = Topology(Path("/env"), ports, "abc123", "localhost/chaoslab-lab:x")
    official = OfficialTopology(lab)
    specs = {s.name: s for s in official.servers()}
    assert set(specs) == {"mongo-1", "mongo-2", "mongo-3", "proxy", "kafka-1", "kafka-2",
                          "kafka-3", "spark-master", "spark-worker-1",
                          "spark-worker-2"}  # fmt: skip
    kafka = specs["kafka-2"]
    assert kafka.image.startswith("apache/kafka:4.")
    assert kafka.env[kafka_env("node.id")] == "2"
    assert kafka.env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    # Clients reach it through the proxy, as on the lab's images: both client listeners are
    # advertised as the proxy's.
    assert "NET://proxy:19092" in kafka.env["KAFKA_ADVERTISED_LISTENERS"]
    assert "HOST://127.0.0.1:4002" in kafka.env["KAFKA_ADVERTISED_LISTENERS"]
    assert kafka.env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
    assert kafka.env["CLUSTER_ID"] == cluster_id("abc123")
    assert specs["proxy"].image == lab.image  # the lab's own code
    assert specs["mongo-1"].image.startswith("mongo:")
    assert "--replSet" in specs["mongo-1"].command
    # Only the first member is published, on 127.0.0.1 (the harness's writes and checks).
    assert specs["mongo-1"].published == {27017: 4004}
    assert not specs["mongo-2"].published
    config = replica_set_config()
    assert [m["host"] for m in config["members"]] == [f"{m}:27017" for m in MONGO_MEMBERS]
    assert specs["spark-worker-1"].command[-1] == "spark://spark-master:7077"
    assert specs["spark-master"].image.startswith("apache/spark:4.2")


def test_the_lab_image_pins_what_the_local_backend_runs() -> None:
    pins = dict(r.split("==") for r in images.requirements())
    for name in ("pyspark", "confluent-kafka", "pymongo", "secantusdb"):
        assert pins[name] == metadata.version(name)
    assert not {"jupyterlab", "papermill", "matplotlib"} & set(pins)
    assert images.base_ref() == images.base_ref()  # a content hash: the same inputs, one tag


def test_container_faults_are_refused_elsewhere_by_name(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "cut-consumers", "workload": {"events": 300}, "variants": ["naive"],
        "faults": [{"kind": "container", "target": "consumer", "action": "disconnect",
                    "at": 1, "duration": 3}],
    }))  # fmt: skip
    result = chaoslab("run", str(scenario), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the local backend runs no containers (use --backend containers)" in result.stderr
    netem = {"kind": "netem", "target": "broker", "duration": 2, "at": 1}
    assert parse_fault({**netem, "delay_ms": 200, "loss_percent": 5}, "n").rule == (  # type: ignore[attr-defined]
        "delay",
        "200ms",
        "loss",
        "5%",
    )
    with pytest.raises(ValueError, match="give delay_ms, loss_percent or both"):
        parse_fault({**netem, "delay_ms": 0}, "n")


# -- on the engine ---------------------------------------------------------------------------------


@pytest.mark.servers
@needs_engine
@CONTAINERS
def test_the_environment_runs_in_labelled_containers_on_loopback_ports(
    containers_env: ContainersEnvironment,
) -> None:
    status = containers_env.status()
    assert status.backend == "containers" and status.healthy, status
    assert {s.name for s in status.servers} == {"mongo", "proxy", "kafka-1", "kafka-2", "kafka-3"}
    assert status.kafka is not None and sorted(status.kafka.brokers) == [1, 2, 3]
    env_id = containers_env.env_id
    names = labelled(containers_env.engine.base_url, env_id)
    assert f"chaoslab-{env_id}" in names  # the network
    client = containers_env.engine.client()
    try:
        for container in client.containers.list(filters={"label": f"{LABEL_ENV}={env_id}"}):
            for bindings in (container.attrs["HostConfig"]["PortBindings"] or {}).values():
                assert all(b["HostIp"] == "127.0.0.1" for b in bindings), container.name
    finally:
        client.close()
