"""The containers backend: the lab's servers and consumers in containers (podman here, Docker
where a user has one), the library's verdicts on it, the faults only containers make, and that
everything it labelled is gone after ``down`` - and after a SIGKILLed harness, at the next
``up``."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import docker
import psutil
import pytest
import yaml
from pymongo import MongoClient, errors

from harness.environment import process, state
from harness.environment.containers import images
from harness.environment.containers.engine import engine_for_building, engine_problem
from harness.environment.containers.environment import ContainersEnvironment
from harness.environment.containers.official import (
    MONGO_MEMBERS,
    OfficialTopology,
    kafka_env,
    replica_set_config,
)
from harness.environment.containers.specs import LABEL_ENV, Topology
from harness.environment.servers.kafka import cluster_id
from harness.faults.kinds import parse_fault
from harness.history.events import EventKind, read_history
from harness.paths import project_root
from harness.readiness import wait_for
from harness.scenario import load_scenario
from tests.connect_plugin import SINK, build_plugin, orders_scenario
from tests.support import chaoslab, lacking
from tests.test_library import replayed_by_crashes
from tests.tiers import LIBRARY

ENGINE_PROBLEM = engine_problem()


@pytest.fixture(scope="session")
def engine() -> None:
    """A container engine the lab can use: skipped without one, failed where `make test` set
    one up (tests.support.lacking)."""
    if ENGINE_PROBLEM is not None:
        lacking(f"no container engine: {ENGINE_PROBLEM}")


needs_engine = pytest.mark.usefixtures("engine")


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


# Per test worker, like the local environment (no xdist group: the suite's Spark chain already
# holds one worker, and these tests balance across both).
@pytest.fixture(scope="module")
def containers_env(
    engine: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ContainersEnvironment]:
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
    assert "NET://10.89.100.11:19092" in kafka.env["KAFKA_ADVERTISED_LISTENERS"]
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
    # Every server at a fixed address on the network, none twice.
    addresses = [s.address for s in specs.values() if not s.name.startswith("spark")]
    assert None not in addresses and len(set(addresses)) == len(addresses)


def test_the_official_postgres_image_runs_with_the_lab_settings() -> None:
    ports = {"postgres": 4006}
    lab = Topology(Path("/env"), ports, "abc123", "localhost/chaoslab-lab:x")
    spec = OfficialTopology(lab).postgres()
    assert spec.image == "postgres:15" and spec.command[0] == "postgres"
    assert "wal_level=logical" in spec.command and "listen_addresses=0.0.0.0" in spec.command
    # The image's entrypoint makes a new cluster through its Unix socket: that one stays.
    assert not any(a.startswith("unix_socket_directories") for a in spec.command)
    assert spec.published == {5432: 4006} and spec.address == lab.ip("postgres")
    assert spec.stop_signal == "SIGINT"  # its fast shutdown, as on the lab's image


def test_up_renders_the_official_images_and_does_not_start_them(tmp_path: Path) -> None:
    shown = chaoslab("up", "--backend", "containers", "--images", "official", "--dry-run",
                     "--dir", str(tmp_path))  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    images = {c["image"].split(":")[0] for c in json.loads(shown.stdout)}
    assert {"apache/kafka", "mongo", "apache/spark", "postgres", "localhost/chaoslab-lab"} == images
    refused = chaoslab("up", "--backend", "containers", "--images", "official",
                       "--dir", str(tmp_path))  # fmt: skip
    assert refused.returncode == 2 and "renders the upstream images' topology" in refused.stderr
    assert not (tmp_path / "state.json").exists()


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
    fault = parse_fault({**netem, "delay_ms": 200, "loss_percent": 5}, "n")
    assert fault.describe == "loss 5% delay 200ms"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="give delay_ms, loss_percent or both"):
        parse_fault({**netem, "delay_ms": 0}, "n")


def test_a_scenario_names_the_backend_it_needs(tmp_path: Path) -> None:
    partition = project_root() / "scenarios" / "containers" / "consumer-partition.yaml"
    assert load_scenario(partition).backend == "containers"
    assert load_scenario(project_root() / "scenarios" / "baseline.yaml").backend is None
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nbackend: kubernetes\nvariants: [naive]\n")
    result = chaoslab("run", str(bad), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "backend: unknown backend 'kubernetes' (local, external, containers)" in result.stderr
    # Given on the command line, another backend is refused by the scenario's own fault.
    result = chaoslab("run", str(partition), "--backend", "local", "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert "the local backend runs no containers" in result.stderr


def test_the_spark_cluster_runs_at_fixed_addresses_and_shares_the_runs_folder() -> None:
    ports = {"spark-master-ui": 4006}
    topology = Topology(Path("/env"), ports, "abc123", "localhost/chaoslab-lab:x", "10.89.101")
    master, one, two = topology.spark_cluster(("/runs/out",))
    assert topology.spark_master_url == "spark://10.89.101.30:7077"
    assert master.published == {8080: 4006}  # the UI, for the lab's readiness probe
    assert (one.address, two.address) == ("10.89.101.31", "10.89.101.32")
    assert one.env["SPARK_LOCAL_IP"] == "10.89.101.31"
    assert {m.container for m in one.mounts} == {"/env", "/runs/out"}  # same paths as here
    assert topology.spark_master_url in one.command


def test_a_spark_worker_fault_needs_the_standalone_cluster_in_containers(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "lose-a-worker", "backend": "containers", "workload": {"events": 300},
        "variants": ["naive"], "runtimes": ["listener", "spark"],
        "faults": [{"kind": "container", "target": "spark-worker", "worker": 3,
                    "action": "kill", "at": 1, "duration": 3}],
    }))  # fmt: skip
    result = chaoslab("run", str(scenario), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the Spark cluster's workers are [1, 2], not 3" in result.stderr
    assert "a Spark worker exists when the scenario runs only spark" in result.stderr


# -- the suite's smoke: make test (the tests after it are the library tier's) ----------------------


@pytest.mark.servers
@needs_engine
def test_an_environment_in_containers_runs_a_cut_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """The backend end to end, once: up in labelled containers on loopback ports, a library
    cut whose kills happen in the consumers' containers - one lane that must store copies, one
    that must not -, and after the stop no container, network, process or scratch folder of
    it left."""
    directory = tmp_path / "containers"
    with ContainersEnvironment(directory, progress=print) as env:
        env_id, status = env.env_id, env.status()
        assert status.backend == "containers" and status.healthy, status
        assert status.kafka is not None and sorted(status.kafka.brokers) == [1, 2, 3]
        client = env.engine.client()
        try:
            mine = client.containers.list(filters={"label": f"{LABEL_ENV}={env_id}"})
            assert len(mine) == 5, [c.name for c in mine]  # three nodes, MongoDB, the proxy
            for container in mine:
                for bindings in (container.attrs["HostConfig"]["PortBindings"] or {}).values():
                    assert all(b["HostIp"] == "127.0.0.1" for b in bindings), container.name
        finally:
            client.close()
        result, report = run_on(
            env, tmp_path / "run", "run", "cdc-crash-before-ack", "--cut", "ci",
            "--runtime", "listener",
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        assert report["backend"] == "containers"
        rows = {r["variant"]: r for r in report["results"]}
        assert set(rows) == {"naive", "transactional"}
        for variant, r in rows.items():
            assert (r["crashes"], r["lost"], r["phantoms"]) == (3, 0, 0), variant
        assert rows["naive"]["duplicates"] == replayed_by_crashes(rows["naive"]) > 0
        assert rows["transactional"]["duplicates"] == 0
    assert [p.pid for p in process.marked(env_id)] == []
    assert not state.scratch_dir(env_id).exists()
    with engine_for_building(tmp_path / "engine") as engine:
        assert labelled(engine.base_url, env_id) == []


# -- on the engine ---------------------------------------------------------------------------------


@pytest.mark.servers
@needs_engine
@LIBRARY
def test_the_environment_runs_in_labelled_containers_on_loopback_ports(
    containers_env: ContainersEnvironment,
) -> None:
    status = containers_env.status()
    assert status.backend == "containers" and status.healthy, status
    servers = {s.name for s in status.servers}
    # (and Spark's master and workers, and PostgreSQL, once a test on this environment asked)
    assert {"mongo", "proxy", "kafka-1", "kafka-2", "kafka-3"} <= servers
    on_demand = servers - {"mongo", "proxy", "postgres"}
    assert all(s.startswith("spark-") for s in on_demand if "kafka" not in s)
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
    if containers_env.engine.started_here:
        # The podman service is the environment's; the host's aardvark-dns it started carries
        # its marker but is podman's: stopped by the lab, aardvark-dns left a
        # stale PID that netavark later SIGHUPed (a Kafka node of another environment died).
        helpers = [p for p in psutil.process_iter(["name", "environ"])
                   if p.info["name"] in ("aardvark-dns", "conmon")
                   and (p.info["environ"] or {}).get(process.ENV_ID_VAR) == env_id]  # fmt: skip
        assert "aardvark-dns" in {p.info["name"] for p in helpers}, helpers
        assert {p.name() for p in process.marked(env_id)} == {"podman"}


def run_on(env: ContainersEnvironment, out: Path, *args: str) -> tuple[Any, dict[str, Any]]:
    result = chaoslab(*args, "--env", str(env.directory), "--out", str(out), timeout=900)
    report = (
        json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    )
    return result, report


@pytest.mark.servers
@needs_engine
@LIBRARY
@pytest.mark.parametrize(
    ("name", "variants"),
    [("cdc-crash-before-ack", "naive,transactional"), ("msk-rolling-upgrade", "naive,idempotent"),
     ("cdc-debezium-crash", "naive,idempotent")],
)  # fmt: skip
def test_library_scenarios_hold_their_expectations_on_containers(
    containers_env: ContainersEnvironment, tmp_path: Path, name: str, variants: str
) -> None:
    # The backend's part of them: consumers killed in their containers, broker containers
    # restarted - on the listener runtime, with a variant that stores copies and one that must
    # not (what every variant does under these faults is the local backend's test).
    result, report = run_on(
        containers_env, tmp_path / "run", "run", name, "--runtime", "listener",
        "--variants", variants,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert report["backend"] == "containers"
    rows = {r["variant"]: r for r in report["results"]}
    for variant, r in rows.items():
        assert (r["lost"], r["phantoms"]) == (0, 0), variant
    assert set(rows) == set(variants.split(","))
    if name == "cdc-crash-before-ack":  # as on the local backend: each kill re-delivers its batch
        for variant, r in rows.items():
            assert r["crashes"] == 3, variant
        assert rows["naive"]["duplicates"] == replayed_by_crashes(rows["naive"]) > 0
    if name == "cdc-debezium-crash":  # PostgreSQL in the lab's image, Debezium's worker killed
        for variant, r in rows.items():
            assert r["relay"]["published"]["duplicates"] > 0, variant  # re-emitted on the topic
        assert rows["naive"]["duplicates"] > 0 and rows["idempotent"]["duplicates"] == 0
        assert "postgres" in {s.name for s in containers_env.status().servers if s.ready}
        (source,) = (tmp_path / "run").glob("**/source/connect/connect-0.log")
        assert "PostgresConnectorTask" in source.read_text()
    if name == "msk-rolling-upgrade":  # the coordinators' own errors, from the real brokers
        events = read_history(Path(rows["naive"]["directory"]) / "history")
        errors = {e.detail.split()[0] for e in events if e.kind is EventKind.KAFKA_ERROR}
        assert "SESSION_TIMED_OUT" in errors, errors
        downs = [e.detail for e in events if e.kind is EventKind.FAULT_STEP and " SIG" in e.detail]
        assert len(downs) == 3 and all("SIGKILL" in d for d in downs), downs


@pytest.mark.servers
@needs_engine
@LIBRARY
def test_connect_workers_run_in_the_labs_image_with_the_scenarios_plugin_folder(
    containers_env: ContainersEnvironment, tmp_path: Path
) -> None:
    # The team's own sink from a plugin folder beside its scenario: each worker's container is
    # given the folder (its arguments name only the run's files) and its REST API listens on the
    # container network, where the other workers and the lab reach it.
    build_plugin(tmp_path)
    raw = {**orders_scenario(), "pipeline": {"connect": {"workers": 2, "plugins": ["plugins"]}}}
    path = tmp_path / "orders-sink.yaml"
    path.write_text(yaml.safe_dump(raw))
    result, report = run_on(containers_env, tmp_path / "run", "run", str(path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert report["backend"] == "containers"
    (row,) = report["results"]
    assert row["in_sink"] == row["acked"] == 300 and row["duplicates"] == row["lost"] == 0
    (cluster,) = (tmp_path / "run").glob("*.connect")
    for index in (0, 1):
        assert f"Added plugin '{SINK}'" in (cluster / f"connect-{index}.log").read_text()
        rest = (cluster / f"worker-{index}.rest").read_text().strip()
        assert rest.startswith("http://") and "127.0.0.1" not in rest, rest


@pytest.mark.servers
@needs_engine
@LIBRARY
def test_a_command_consumer_runs_in_the_labs_image_or_a_users_with_the_same_variables(
    containers_env: ContainersEnvironment, tmp_path: Path
) -> None:
    listener = project_root() / "examples" / "python-listener" / "listener.py"
    # A user's image: the lab's with a file of its own, which the command looks for.
    theirs = "localhost/chaoslab-test-users-image:1"
    client = docker.DockerClient(base_url=containers_env.engine.base_url)
    base = images.lab_ref().tag
    client.images.build(
        fileobj=io.BytesIO(f"FROM {base}\nRUN touch /theirs\n".encode()), tag=theirs, rm=True
    )
    try:
        check_users_image(containers_env, tmp_path, listener, theirs)
    finally:
        client.images.remove(theirs, force=True)
        client.close()


def check_users_image(
    containers_env: ContainersEnvironment, tmp_path: Path, listener: Path, theirs: str
) -> None:
    sink = {"collection": "landed", "event_id": "event_id"}
    # A killed instance's partitions are handed over after 6 s, not 45 s.
    args = f"{listener} upsert session.timeout.ms=6000"
    mine = {"name": "command", "label": "mine", "instances": 2, "sink": sink,
            "command": f"{sys.executable} {args}"}  # fmt: skip
    in_theirs = f"sh -c 'test -f /theirs && exec {images.IMAGE_PYTHON} \"$@\"' sh {args}"
    users = {"name": "command", "label": "theirs", "instances": 2, "sink": sink, "image": theirs,
             "command": in_theirs}  # fmt: skip

    def scenario(*variants: dict[str, Any]) -> Path:
        path = tmp_path / "own.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "name": "own-consumer",
                    "seed": 5,
                    "workload": {"events": 600, "keys": 50, "partitions": 3, "rate": 200},
                    "variants": list(variants),
                    "faults": [{"kind": "consumer-kill", "at_event": 200}],
                    "expect": {"*": {"duplicates": 0, "lost": 0}},
                }
            )
        )
        return path

    result, report = run_on(containers_env, tmp_path / "run", "run", str(scenario(mine, users)))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    rows = {r["variant"]: r for r in report["results"]}
    for row in rows.values():
        assert (row["runtime"], row["acked"], row["crashes"]) == ("command", 600, 2)
        # Started by the engine in a container (the local backend writes a header line into a
        # process's log before it starts it; a container's log has none).
        for log in (Path(row["directory"]) / "logs").glob("command-*.log"):
            assert "==== chaoslab: starting" not in log.read_text(), log

    # An image the engine does not have is named; the lab never pulls one.
    missing = {**users, "image": "localhost/chaoslab-no-such-image:1"}
    result, _ = run_on(containers_env, tmp_path / "missing", "run", str(scenario(missing)))
    assert result.returncode != 0
    assert "the engine has no image 'localhost/chaoslab-no-such-image:1'" in result.stderr


@pytest.mark.servers
@needs_engine
@LIBRARY
def test_a_partition_of_the_consumers_containers_shows_on_the_timeline(
    containers_env: ContainersEnvironment, tmp_path: Path
) -> None:
    scenario = project_root() / "scenarios" / "containers" / "consumer-partition.yaml"
    # Two variants' consumers off the network (the engine's part; the others' are the same).
    result, report = run_on(
        containers_env, tmp_path / "run", "run", str(scenario), "--variants", "naive,idempotent"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    for r in report["results"]:
        events = read_history(Path(r["directory"]) / "history")
        steps = [e for e in events if e.kind is EventKind.FAULT_STEP]
        # The engine took the consumer's own container off the network - not a proxy rule.
        assert len(steps) == 1 and steps[0].detail.startswith("disconnect runtime-"), steps
        start = next(e.t for e in events if e.kind is EventKind.FAULT_START)
        end = next(e.t for e in events if e.kind is EventKind.FAULT_END)
        assert 11.5 <= end - start <= 20, (start, end)
        # Cut off, the consumer's client reported the brokers gone (its own words).
        assert [e for e in events if e.kind is EventKind.KAFKA_ERROR], r["variant"]
    assert (tmp_path / "run" / "timeline.png").stat().st_size > 10_000
    # Back on the network at its fixed place: the environment is whole again.
    assert containers_env.status().healthy


@pytest.mark.servers
@needs_engine
@LIBRARY
def test_a_spark_worker_container_killed_mid_stream_loses_its_executor_and_nothing_else(
    containers_env: ContainersEnvironment, tmp_path: Path
) -> None:
    scenario = project_root() / "scenarios" / "containers" / "spark-worker-loss.yaml"
    # Two of its variants, a driver each (the backend's part is the worker's container killed
    # under them; what every variant does when an executor is lost is spark-executor-loss's):
    # naive, and MongoDB's Spark connector keyed by the event id - from the jars and hooks in the
    # lab's image - which must store no copy.
    keyed = "connector-sink[idFieldList=event_id]"
    result, report = run_on(
        containers_env, tmp_path / "run", "run", str(scenario), "--variants", f"naive,{keyed}"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    rows = {r["variant"]: r for r in report["results"]}
    assert set(rows) == {"naive", keyed}
    assert all((r["lost"], r["phantoms"], r["acked"]) == (0, 0, 1500) for r in rows.values())
    assert rows[keyed]["duplicates"] == 0
    for r in rows.values():
        events = read_history(Path(r["directory"]) / "history")
        steps = [e.detail for e in events if e.kind is EventKind.FAULT_STEP]
        assert steps == ["kill spark-worker-1"], steps
    # The driver (in a consumer's container) lost worker 1's executor - Spark's own words.
    worker_1 = containers_env.address("spark-worker-1")
    drivers = (containers_env.directory / "logs").glob("spark-driver-*.log")
    lines = [ln for log in drivers for ln in log.read_text().splitlines() if "Lost executor" in ln]
    assert any(f"on {worker_1}:" in line for line in lines), lines
    # Started again when the window closed, the worker registered anew: the cluster is whole.
    wait_for(lambda: _healthy(containers_env), what="the environment healthy again", timeout=120)
    names = {s.name for s in containers_env.status().servers}
    assert {"spark-master", "spark-worker-1", "spark-worker-2"} <= names


def _healthy(env: ContainersEnvironment) -> None:
    status = env.status()
    if not status.healthy:
        raise AssertionError([s.name for s in status.servers if not s.ready])


@pytest.mark.servers
@needs_engine
@LIBRARY
def test_container_faults_act_on_the_containers(containers_env: ContainersEnvironment) -> None:
    control = containers_env.containers
    control.pause("kafka-3")
    try:
        assert control.state("kafka-3") == "paused"
    finally:
        control.unpause("kafka-3")
    assert control.state("kafka-3") == "running"
    control.drop("mongo", 100)  # every packet it sends
    try:
        client: MongoClient[dict[str, Any]] = MongoClient(
            containers_env.mongo_uri, serverSelectionTimeoutMS=1500, connectTimeoutMS=1500
        )
        with client, pytest.raises(errors.PyMongoError):
            client.admin.command("ping")
    finally:
        control.drop("mongo", 0)
    wait_for(lambda: _ping(containers_env.mongo_uri), what="MongoDB answering again", timeout=30)


def _ping(uri: str) -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=2000)
    with client:
        client.admin.command("ping")


@pytest.mark.servers
@needs_engine
@LIBRARY
def test_what_a_sigkilled_harness_left_is_removed_by_the_next_up(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.harness_child", str(first), "containers"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, "the child harness did not start its environment"
        found = state.load(first)
        assert found is not None
        env_id = found.env_id
        engine_url = ContainersEnvironment.attach(first).engine.base_url
        assert len(labelled(engine_url, env_id)) == 6  # 5 servers and the network
        assert (state.scratch_dir(env_id) / "podman.sock").exists()  # the engine's socket
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    up = chaoslab("up", "--backend", "containers", "--dir", str(second), timeout=600)
    try:
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        assert "removed 5 containers left by environments nobody owns any more" in up.stdout
        new = ContainersEnvironment.attach(second)
        assert labelled(new.engine.base_url, env_id) == []
        assert not state.scratch_dir(env_id).exists()  # nothing of it left in /tmp either
        second_state = state.load(second)
        assert second_state is not None
        assert state.scratch_dir(second_state.env_id).exists()
    finally:
        down = chaoslab("down", "--dir", str(second), timeout=300)
    assert down.returncode == 0, down.stderr
    assert "removed 5 containers" in down.stdout + down.stderr
    assert not (second / "state.json").exists()
    assert not state.scratch_dir(second_state.env_id).exists()
