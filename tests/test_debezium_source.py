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
from confluent_kafka import Consumer, KafkaError, Producer

from harness.checker.check import check
from harness.environment import process
from harness.environment.local import LocalEnvironment
from harness.environment.ports import free_ports
from harness.errors import BadInput
from harness.kafka.clients import StoredRecord, consumer_config, producer_config, read_topic
from harness.pipeline.connect.settings import ConnectError, ConnectRest, ConnectSettings
from harness.pipeline.connect.worker import CLASS_DATA, worker_command, worker_properties
from harness.readiness import NotReady, wait_for
from harness.sources import sql_writer, truth
from harness.sources.debezium import CONNECTOR_CLASS, DebeziumSource, Where
from harness.sources.sql_workload import transactions
from harness.sources.stages import committed_ledger, source_change, topic_snapshot
from harness.workload.events import parse
from harness.workload.generator import WorkloadSpec

pytestmark = pytest.mark.servers
# A worker's first PUT of Debezium's config loads the connector's classes and validates the config
# against the database before it answers: over 10 s once on a loaded machine (the suite's).
FIRST_PUT_S = 60.0


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
        debezium=True,
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


def start_source(
    rest: ConnectRest, config: dict[str, str], uri: str, slot: str, *, first: bool = False
) -> None:
    """Put the connector ``source`` on the worker and return once its task streams from its
    slot (``first``: once the worker, just started, lists Debezium's connector)."""

    def knows_debezium() -> None:
        try:
            found = rest.plugins()
        except ConnectError as exc:  # not listening yet
            raise NotReady(str(exc)) from None
        if CONNECTOR_CLASS not in found:
            raise NotReady(f"plugins: {found}")

    def streaming() -> None:
        state = rest.status("source")
        if state is None or not state.tasks or state.tasks[0].state != "RUNNING":
            raise NotReady(f"{state}")
        if not slot_active(uri, slot):
            raise NotReady(f"slot {slot} not streaming")

    if first:
        wait_for(knows_debezium, what="the worker listing Debezium's connector", timeout=180)
    rest.put_config("source", config)
    wait_for(streaming, what="Debezium's task streaming from its slot", timeout=120)


def test_debezium_streams_each_committed_change_with_its_transaction_id_and_lsn(
    scenario_env: LocalEnvironment, postgres_database: str, worker: ConnectSettings
) -> None:
    shop = postgres_database
    database = shop.rsplit("/", 1)[1]
    rest = ConnectRest(worker, timeout=FIRST_PUT_S)
    where = Where(shop, slot=database, topic_prefix=database, tables=("orders",))
    start_source(rest, DebeziumSource().config(where), shop, database, first=True)

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
    # What the lab's consumers parse of Debezium's own records: the same changes.
    parsed = [parse(json.dumps(r).encode()) for r in seen]
    assert sorted((e.op.value, int(e.tx_id), e.order_id) for e in parsed) == sorted(committed)


def test_the_topic_stage_catches_a_change_the_source_dropped_and_one_it_doubled(
    scenario_env: LocalEnvironment, postgres_database: str, worker: ConnectSettings
) -> None:
    """The seeded SQL workload through Debezium: each committed change on the topic once. Then
    two planted at the source: a change committed while the connector was away and its slot
    advanced past it (an operator's fix of a lagging slot), never emitted; and a record the
    topic holds twice, as a re-emission leaves it. The topic stage names both."""
    shop = postgres_database
    database = shop.rsplit("/", 1)[1]
    rest = ConnectRest(worker, timeout=FIRST_PUT_S)
    truth_slot = f"{database}_truth"
    truth.create_slot(shop, truth_slot)  # before the first write: the whole truth
    where = Where(shop, slot=database, topic_prefix=database, tables=("orders",))
    topic = where.topic("orders")
    config = DebeziumSource().config(where)

    def on_topic(count: int) -> list[StoredRecord]:
        def enough() -> list[StoredRecord]:
            records = read_topic(scenario_env.kafka_bootstrap, topic, contents=True)
            changes = [r for r in records if r.value is not None]
            if len(changes) < count:
                raise NotReady(f"{len(changes)} of {count} changes on {topic}")
            return records

        return wait_for(enough, what=f"{count} changes on {topic}", timeout=120)

    start_source(rest, config, shop, database, first=True)
    planned = transactions(WorkloadSpec(events=150, keys=40, seed=5))
    sql_writer.write(shop, planned)
    committed = truth.read(shop, truth_slot)
    records = on_topic(len(committed))
    whole = check(committed_ledger(committed), topic_snapshot(records), produced=len(committed))
    assert (whole.lost, whole.duplicates, whole.phantoms) == (0, 0, 0), whole
    # Each record's source identity is its committed change's: the same transaction and LSN.
    logged = {(c.xid, c.lsn) for c in committed}
    assert {(s.tx_id, s.lsn) for r in records if (s := source_change(r))} == logged

    # Dropped at the source: the connector away, a change committed, its slot advanced past it.
    rest.delete("source")
    wait_for(lambda: _slot_inactive(shop, database), what="Debezium's slot released", timeout=60)
    with psycopg.connect(shop) as conn:
        conn.execute("UPDATE orders SET version = version + 1 WHERE order_id = "
                     "(SELECT min(order_id) FROM orders)")  # fmt: skip
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (database,))
    start_source(rest, config, shop, database)
    with psycopg.connect(shop) as conn:  # one more, to see the stream goes on after it
        conn.execute("UPDATE orders SET version = version + 1 WHERE order_id = "
                     "(SELECT max(order_id) FROM orders)")  # fmt: skip
    after = truth.read(shop, truth_slot)
    assert len(after) == 2
    records = on_topic(len(committed) + 1)
    # Doubled at the source: one record on the topic again, as a re-emission leaves it.
    copied = next(r for r in records if r.value is not None)
    producer = Producer(producer_config(scenario_env.kafka_bootstrap))
    producer.produce(topic, value=copied.value, key=copied.key, partition=copied.partition)
    assert producer.flush(30) == 0
    records = on_topic(len(committed) + 2)

    stage = check(committed_ledger(committed + after), topic_snapshot(records),
                  produced=len(committed) + 2)  # fmt: skip
    assert (stage.lost, stage.duplicates, stage.phantoms) == (1, 1, 0), stage
    (lost,) = [a for a in stage.anomalies if a.kind == "lost"]
    assert (lost.order_id, lost.version) == (after[0].order_id, after[0].version)
    (copy,) = [a for a in stage.anomalies if a.kind == "duplicate"]
    again = source_change(copied)
    assert again is not None and (copy.order_id, copy.version) == (again.order_id, again.version)
    truth.drop_slot(shop, truth_slot)


def slot_active(uri: str, slot: str) -> bool | None:
    """Whether a client streams from ``slot`` (None: there is no such slot)."""
    with psycopg.connect(uri) as conn:
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return None if row is None else bool(row[0])


def _slot_inactive(uri: str, slot: str) -> None:
    if slot_active(uri, slot) is not False:
        raise NotReady(f"slot {slot} still streaming, or gone")
