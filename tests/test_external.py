"""The external environment: the lab's pipeline and faults against Kafka, MongoDB and a Spark
master it did not start - here, the ones the test's own local environment runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from harness.environment.external import ExternalEnvironment, postgres_problems, proxied_uri
from harness.environment.local import LocalEnvironment
from harness.environment.options import ExternalOptions, external_abilities
from harness.environment.spark import SparkCluster
from harness.errors import BadInput
from harness.run.runner import run_scenario
from harness.scenario import ScenarioError, load_scenario, parse_scenario, runnable
from tests.support import SPARK, chaoslab
from tests.tiers import LIBRARY


def test_bad_settings_are_named_together_before_anything_starts(tmp_path: Path) -> None:
    bad = ExternalOptions(
        kafka_bootstrap="broker-without-port", mongo_uri="mysql://x", spark_master="local[2]"
    )
    problems = "; ".join(bad.problems())
    assert "--kafka-bootstrap: not HOST:PORT: 'broker-without-port'" in problems
    assert "--mongo-uri" in problems
    assert "--spark-master: expected spark://HOST:PORT" in problems
    with pytest.raises(BadInput, match="--kafka-bootstrap is missing"):
        ExternalEnvironment(tmp_path / "env", ExternalOptions(mongo_uri="mongodb://h:1")).start()
    assert not (tmp_path / "env" / "state.json").exists()


def test_what_keeps_a_database_from_being_a_cdc_source_is_named_with_its_fix() -> None:
    found = postgres_problems("replica", replication=False, slots_free=1, senders_free=0)
    assert len(found) == 4, found
    assert "wal_level is replica: logical decoding needs logical" in found[0]
    assert "no REPLICATION privilege" in found[1]
    assert "1 free replication slots" in found[2] and "a run needs 2" in found[2]
    assert "0 free WAL senders" in found[3]
    assert postgres_problems("logical", replication=True, slots_free=2, senders_free=1) == []
    bad = ExternalOptions("127.0.0.1:9092", "mongodb://h:1", postgres_uri="mysql://db")
    assert bad.problems() == [
        "--postgres-uri: expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE, got "
        "'mysql://db'"
    ]


def test_unreachable_services_are_named_and_nothing_is_left(tmp_path: Path) -> None:
    # Nothing listens on port 1 of the loopback.
    options = ExternalOptions(
        kafka_bootstrap="127.0.0.1:1",
        mongo_uri="mongodb://127.0.0.1:1/?replicaSet=rs",
        spark_master="spark://127.0.0.1:1",
        postgres_uri="postgresql://postgres@127.0.0.1:1/shop",
    )
    with pytest.raises(BadInput) as refused:
        ExternalEnvironment(tmp_path / "env", options).start()
    message = str(refused.value)
    for service in (
        "Kafka at 127.0.0.1:1",
        "MongoDB at mongodb://",
        "Spark master spark://",
        "PostgreSQL at postgresql://postgres@127.0.0.1:1/shop did not answer",
    ):
        assert service in message
    assert not (tmp_path / "env" / "state.json").exists()


def test_the_consumers_mongodb_link_keeps_credentials_and_options() -> None:
    uri = "mongodb://u:p@db1:27017,db2:27017/app?replicaSet=rs0&authSource=admin&w=majority"
    assert proxied_uri(uri, "127.0.0.1:5000") == (
        "mongodb://u:p@127.0.0.1:5000/app?authSource=admin&w=majority&directConnection=true"
    )


def test_faults_it_cannot_perform_are_refused_by_name() -> None:
    abilities = external_abilities()
    upgrade = load_scenario(Path("scenarios/msk-rolling-upgrade.yaml"))
    with pytest.raises(ScenarioError) as refused:
        runnable(upgrade, abilities)
    assert "the external environment did not start the Kafka nodes" in str(refused.value)
    failpoint = parse_scenario(
        {
            "name": "failpoint",
            "variants": ["naive"],
            "faults": [{"kind": "mongo-failcommand", "at": 1, "duration": 2,
                        "commands": ["insert"], "error_code": 91}],
        }
    )  # fmt: skip
    with pytest.raises(ScenarioError, match="did not start MongoDB: failCommand is a test"):
        runnable(failpoint, abilities)
    # The proxy's faults and the consumer-side ones it performs.
    for name in ("mongo-partition", "cdc-crash-before-ack", "commit-failure-storm"):
        runnable(load_scenario(Path("scenarios") / f"{name}.yaml"), abilities)


def test_the_cli_refuses_before_starting_anything(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = chaoslab("run", "scenarios/baseline.yaml", "--kafka-bootstrap", "127.0.0.1:9092",
                    "--out", str(out))  # fmt: skip
    assert done.returncode == 2
    assert "--mongo-uri is missing" in done.stderr
    done = chaoslab("run", "scenarios/msk-rolling-upgrade.yaml", "--kafka-bootstrap",
                    "127.0.0.1:9092", "--mongo-uri", "mongodb://127.0.0.1:27017",
                    "--out", str(out))  # fmt: skip
    assert done.returncode == 2
    assert "faults[0]: the external environment did not start the Kafka nodes" in done.stderr
    assert not out.exists()


def _scenario(**changes: Any) -> dict[str, Any]:
    return {
        "name": "external",
        "seed": 4,
        "workload": {"events": 600, "keys": 150, "partitions": 3, "rate": 150},
        # Spark's Java client through the rewriting proxy, one driver: librdkafka through it is
        # tests/test_proxy_addresses.py's (suite time: the listener and a second variant made
        # this test far longer; docs/performance.md).
        "runtimes": ["spark"],
        "pipeline": {"batch_size": 100, "spark_cluster": "standalone"},
        "variants": ["naive"],
        "faults": [
            {"kind": "consumer-crash", "point": "after_write_before_commit", "at_batch": 2},
            {"kind": "network", "link": "consumer-kafka", "action": "cut", "at": 1, "duration": 3},
        ],
        "expect": {"*": {"lost": 0, "stale": 0, "duplicates": ">0"}},
        **changes,
    }


@pytest.mark.servers
@SPARK
@LIBRARY  # a Spark cluster's drivers through the proxy; make test runs the external backend's
# up, status and down below, and a listener through a rewriting proxy (test_proxy_addresses)
def test_the_pipeline_and_its_faults_run_against_a_cluster_the_lab_did_not_start(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    master = scenario_env.spark_on(SparkCluster.STANDALONE).master
    options = ExternalOptions(
        kafka_bootstrap=scenario_env.kafka_bootstrap,
        mongo_uri=scenario_env.mongo_uri,
        spark_master=master,
    )
    with ExternalEnvironment(tmp_path / "env", options) as env:
        # Every Kafka client of the run goes through the external environment's proxy: the
        # brokers' addresses it learns from Metadata are the proxy's, not the cluster's.
        assert set(env.broker_ids) == set(scenario_env.broker_ids)
        assert env.spark_on(SparkCluster.STANDALONE).master == master
        scenario = parse_scenario(_scenario())
        result = run_scenario(env, scenario, tmp_path / "run", progress=lambda _m: None)
        stats = env.fault_proxy.stats()
        status = env.status()
    assert status.backend == "external" and [s.name for s in status.servers] == ["proxy"]
    rows = {(r.runtime, r.variant): r for r in result.variants}
    assert set(rows) == {("spark", "naive")}
    for (runtime, variant), row in rows.items():
        assert row.outcome.value == "pass", (runtime, variant, row.failures)
        assert row.crashes == 1 and row.restarts == 1, (runtime, variant)
    # Spark's Java Kafka client (in the driver and the executors) reached the brokers through
    # the external environment's listeners only.
    kafka_listeners = {n: v for n, v in stats["listeners"].items() if n.startswith("kafka/")}
    assert len(kafka_listeners) == len(scenario_env.broker_ids)
    for name, listener in kafka_listeners.items():
        # Each node leads a partition: fetching from it through its own listener means the
        # client learnt the listener's address from the rewritten Metadata.
        fetchers = {c for c, apis in listener["apis"].items() if "Fetch" in apis}
        assert any(c.startswith("chaoslab-consumer-spark") for c in fetchers), (name, fetchers)
    # The cluster it ran against was not the lab's to stop, and still runs.
    assert scenario_env.status().healthy


@pytest.mark.servers
def test_up_status_and_down_of_an_external_environment(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    directory = tmp_path / "env"
    addresses = ["--kafka-bootstrap", lab_env.kafka_bootstrap, "--mongo-uri", lab_env.mongo_uri]
    # A CDC source's database: the shared environment's PostgreSQL, first as a user without
    # the REPLICATION privilege Debezium's slot needs - refused, naming it, nothing started.
    postgres = lab_env.postgres_uri()
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS reader")
        conn.execute("CREATE ROLE reader LOGIN")
    reader = postgres.replace("postgres@", "reader@", 1)
    refused = chaoslab("up", "--dir", str(directory), *addresses, "--postgres-uri", reader)
    if refused.returncode == 0:
        chaoslab("down", "--dir", str(directory))  # a start that should not have been
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"PostgreSQL at {reader}: the user has no REPLICATION privilege" in refused.stderr
    assert not (directory / "state.json").exists()
    up = chaoslab("up", "--dir", str(directory), *addresses, "--postgres-uri", postgres)
    assert up.returncode == 0, up.stderr
    try:
        status = chaoslab("status", "--dir", str(directory), "--json")
        assert status.returncode == 0, status.stdout
        found = json.loads(status.stdout)
        assert found["backend"] == "external" and found["healthy"]
        assert [s["name"] for s in found["servers"]] == ["proxy"]
        assert found["spark_master"] == "local[2]"
        assert found["postgres_uri"] == postgres
        shown = chaoslab("status", "--dir", str(directory)).stdout
        assert f"postgres uri     {postgres}" in shown
        assert sorted(found["kafka"]["brokers"]) == sorted(lab_env.broker_ids)
        # The brokers as the lab's clients see them: the proxy's listeners, not the cluster's.
        assert found["kafka_bootstrap"] != lab_env.kafka_bootstrap
    finally:
        down = chaoslab("down", "--dir", str(directory))
    assert down.returncode == 0 and "stopped 1 processes" in down.stdout + down.stderr
    assert lab_env.status().healthy
