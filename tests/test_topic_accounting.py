"""A record the topic itself holds twice is the topic's copy, not a variant's duplicate: this
test puts one acknowledged record into the run's topic a second time while the lab's listeners
consume it (as a producer's retry that Kafka stored again would), and the run reports that
copy on its own line - counted for neither the naive listener, which stored it twice, nor the
idempotent one, which stored it once."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pymongo import MongoClient

from harness.environment.local import LocalEnvironment
from harness.history.events import EventKind, read_history
from harness.kafka.clients import producer_config
from harness.pipeline.runtime import RuntimeConfig
from harness.readiness import wait_for
from harness.report.write import write_report
from harness.run.runner import run_scenario
from harness.scenario import parse_scenario
from harness.workload.generator import WorkloadSpec, generate
from harness.workload.ledger import LedgerRow, read_ledger

pytestmark = pytest.mark.servers

EVENTS, COPIED = 900, 100  # the record put twice: the 100th acknowledged


def put_again(
    out: Path, spec: WorkloadSpec, bootstrap: str, stop: threading.Event
) -> LedgerRow | None:
    """Once the run's ledger holds COPIED + 50 acks, sends the COPIED-th acknowledged record
    to its topic again, byte for byte, with the lab's own producer settings."""

    def acked() -> list[LedgerRow]:
        ledgers = list(out.glob("*.ledger.csv"))
        rows = list(read_ledger(ledgers[0])) if ledgers else []
        assert len(rows) >= COPIED + 50 or stop.is_set(), f"{len(rows)} acknowledged so far"
        return rows

    rows = wait_for(acked, timeout=120, what="the run's first acknowledgements")
    if len(rows) < COPIED + 50:
        return None
    row = rows[COPIED]
    event = next(e for e in generate(spec) if e.event_id == row.event_id)
    producer = Producer(producer_config(bootstrap))
    headers: dict[str, str | bytes | None] = {"event_id": event.event_id.encode()}
    producer.produce(row.topic, key=event.key, value=event.value(), headers=headers)
    assert producer.flush(30) == 0, "the copy was not acknowledged"
    return row


def test_a_record_the_topic_holds_twice_is_reported_as_the_topics(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    scenario = parse_scenario(
        {
            "name": "stored-twice",
            "seed": 33,
            "workload": {"events": EVENTS, "keys": 150, "partitions": 3, "rate": 150},
            "runtimes": ["listener"],
            "pipeline": {"timeout_s": 180},
            "variants": ["naive", "idempotent"],
            "expect": {"*": {"duplicates": 0, "lost": 0}},
        },
        tmp_path / "stored-twice.yaml",
    )
    out, stop = tmp_path / "run", threading.Event()
    copied: list[LedgerRow | None] = []
    said: list[str] = []
    putter = threading.Thread(
        target=lambda: copied.append(
            put_again(out, scenario.workload, scenario_env.kafka_bootstrap, stop)
        )
    )
    putter.start()
    try:
        result = run_scenario(scenario_env, scenario, out, progress=said.append)
    finally:
        stop.set()
        putter.join(150)
    [row] = copied
    assert row is not None, "the run ended before its 150th acknowledgement"

    lanes = {v.variant: v for v in result.variants}
    naive, idempotent = lanes["naive"].verdict, lanes["idempotent"].verdict
    # The naive listener stored the event twice (a recount of its sink says so) ...
    assert naive.in_sink - naive.unique_in_sink == 1
    assert lanes["naive"].directory is not None
    config = RuntimeConfig.load(str(lanes["naive"].directory / "runtime.json"))
    client: MongoClient[dict[str, Any]] = MongoClient(scenario_env.mongo_uri)
    with client:
        events = client[config.database]["events"]
        assert events.count_documents({"event_id": row.event_id}) == 2
    # ... and it is the topic's copy, not a duplicate of the variant's: every expectation held.
    assert (naive.duplicates, naive.topic_duplicates, naive.copies) == (0, 1, {}), said
    assert (idempotent.duplicates, idempotent.topic_duplicates) == (0, 0)
    assert result.passed, [v.reason for v in result.variants]

    # In each lane's history, at the record's acknowledgement, with where both copies are.
    for lane in lanes.values():
        assert lane.directory is not None
        [twice] = [
            e for e in read_history(lane.directory / "history") if e.kind is EventKind.STORED_TWICE
        ]
        assert twice.t == row.acked_at and twice.count == 1
        assert twice.detail.startswith(f"{row.event_id} stored 2 times (p{row.partition}@")

    # On its own line in the report, and once in what happened.
    report = write_report(out).markdown.read_text()
    assert "**The topic's copies** (not in *duplicates*)" in report
    assert (
        "listener/naive 1" in report
        and "listener/idempotent" not in report.split("**The topic's copies**")[1].split("\n")[0]
    )
    lines = Counter(line for line in report.splitlines() if "The topic, not a consumer" in line)
    assert list(lines.values()) == [1] and row.event_id in next(iter(lines))
