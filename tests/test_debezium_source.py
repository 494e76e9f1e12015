"""Debezium's PostgreSQL connector, fetched by ``chaoslab fetch``, on a Connect worker of the
lab's with the environment's PostgreSQL: each committed change reaches the topic with its real
transaction id and LSN - what a CDC source's stage counts against."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaError

from harness.environment import jars, process
from harness.environment.local import LocalEnvironment
from harness.environment.ports import free_ports
from harness.errors import BadInput
from harness.kafka.clients import consumer_config
from harness.pipeline.connect import ConnectRest, ConnectSettings
from harness.pipeline.connect_worker import CLASS_DATA, worker_command, worker_properties
from harness.readiness import NotReady, wait_for
from harness.sources.debezium import CONNECTOR_CLASS, DebeziumSource, Where

pytestmark = pytest.mark.servers


def test_a_deployments_config_may_not_say_where_the_source_reads_and_writes() -> None:
    where = Where("postgresql://postgres@127.0.0.1:5432/shop", "s1", "lab1", ("orders",))
    pasted = {"snapshot.mode": "no_data", "slot.name": "prod_slot", "topic.prefix": "prod"}
    with pytest.raises(BadInput) as refused:
        DebeziumSource(pasted).config(where)
    assert "slot.name: where the source reads and writes is the lab's" in str(refused.value)
    assert "topic.prefix:" in str(refused.value)
    config = DebeziumSource({"snapshot.mode": "no_data"}).config(where)
    assert config["snapshot.mode"] == "no_data"  # the deployment's own, over the lab's default
    assert (config["database.dbname"], config["slot.name"], config["plugin.name"]) == (
        "shop", "s1", "pgoutput"
    )  # fmt: skip


@pytest.fixture
def worker(
    scenario_env: LocalEnvironment, postgres_database: str, tmp_path: Path
) -> Iterator[ConnectSettings]:
    """One Connect worker of the environment's cluster with Debezium on its plugin path
    (stopped before ``postgres_database`` is dropped)."""
    settings = ConnectSettings(
        bootstrap=scenario_env.kafka_bootstrap, group=f"dbz-{uuid.uuid4().hex[:8]}",
        folder=str(tmp_path / "connect"), workers=1,
        plugins=(str(jars.debezium_postgres().directory),),
    )  # fmt: skip
    Path(settings.folder).mkdir()
    (port,) = free_ports(1)
    properties = Path(settings.folder) / "worker-0.properties"
    properties.write_text(worker_properties(settings, "127.0.0.1", port))
    settings.rest_file(0).write_text(f"http://127.0.0.1:{port}\n")
    name = f"test-{settings.group}"
    process.spawn(worker_command(properties, CLASS_DATA.java_options()), env_id=scenario_env.env_id,
                  server=name, log_path=settings.log(0))  # fmt: skip
    try:
        yield settings
    finally:
        process.terminate(process.marked(scenario_env.env_id, name), grace=20, what=name)


def test_debezium_streams_each_committed_change_with_its_transaction_id_and_lsn(
    scenario_env: LocalEnvironment, postgres_database: str, worker: ConnectSettings
) -> None:
    shop = postgres_database
    database = shop.rsplit("/", 1)[1]
    rest = ConnectRest(worker)

    def knows_debezium() -> None:
        try:
            found = rest.plugins()
        except Exception as exc:  # not listening yet
            raise NotReady(str(exc)) from None
        if CONNECTOR_CLASS not in found:
            raise NotReady(f"plugins: {found}")

    wait_for(knows_debezium, what="the worker listing Debezium's connector", timeout=180)
    where = Where(shop, slot=database, topic_prefix=database, tables=("orders",))
    rest.put_config("source", DebeziumSource().config(where))

    def streaming() -> None:
        state = rest.status("source")
        if state is None or not state.tasks or state.tasks[0].state != "RUNNING":
            raise NotReady(f"{state}")
        with psycopg.connect(shop) as conn:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (database,)
            ).fetchone()
        if not row or not row[0]:
            raise NotReady(f"slot {database}: {row}")

    wait_for(streaming, what="Debezium's task streaming from its slot", timeout=120)

    committed = []  # (op, xid, order_id) in commit order
    with psycopg.connect(shop) as conn:
        for statements, ops in (
            (
                ["INSERT INTO orders VALUES (1, 1, 'new', 100), (2, 1, 'new', 200)"],
                [("c", 1), ("c", 2)],
            ),
            (["UPDATE orders SET version = 2, status = 'paid' WHERE order_id = 1"], [("u", 1)]),
            (["DELETE FROM orders WHERE order_id = 2"], [("d", 2)]),
        ):
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
                xid = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
            assert xid is not None
            committed += [(op, xid[0], order) for op, order in ops]

    consumer = Consumer(consumer_config(scenario_env.kafka_bootstrap, f"reader-{database}",
                                        **{"auto.offset.reset": "earliest"}))  # fmt: skip
    consumer.subscribe([where.topic("orders")])
    seen: list[dict] = []

    def all_read() -> None:
        for m in consumer.consume(num_messages=100, timeout=0.5):
            error, value = m.error(), m.value()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise AssertionError(error)
            if error is None and value is not None:  # a delete's tombstone has none
                seen.append(json.loads(value))
        if len(seen) < len(committed):
            raise NotReady(f"{len(seen)} of {len(committed)} changes")

    try:
        wait_for(all_read, what="every committed change on the topic", timeout=120)
    finally:
        consumer.close()
    payloads = [r["payload"] for r in seen]
    got = sorted(
        (p["op"], p["source"]["txId"], (p["after"] or p["before"])["order_id"]) for p in payloads
    )
    assert got == sorted(committed), payloads  # each once, with its own transaction's id
    assert all(p["source"]["lsn"] > 0 and p["source"]["table"] == "orders" for p in payloads)
    update = next(p for p in payloads if p["op"] == "u")
    assert (update["before"]["version"], update["after"]["version"]) == (1, 2)
    assert "schema" in seen[0]  # JSON with schemas: seed 000's payload.source.txId
