"""Seed 003's source stage: an application writing orders with their outboxes into a MongoDB
database of the run's own, in the scenario's shapes; the truth is what MongoDB acknowledged to
it (the written ledger).

The relays that carry the outboxes to Kafka are the pipelines under test, so they are the
run's lanes (runtime ``relay``, one process each, reading the application's change stream side
by side, each into target topics of its own), under the run loop's fault schedule like any lane
(``harness.run.runner``). Each relay is judged in two stages, as a Debezium source's lanes are:

    written -> published:  its target topics against the truth (copies, losses at publish)
    written -> stored:     what the scenario's sink variant stored of them (end to end)

The downstream sink reads a relay's topics once the relay has relayed the application's end
marker, in batches of ``pipeline.batch_size``, through the sink variant's own write: faults
downstream are the sink scenarios' business.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from harness.checker.check import check
from harness.checker.model import LedgerArrays, RelayStage, SinkSnapshot
from harness.checker.state import FinalState
from harness.environment.base import Environment
from harness.errors import LabError
from harness.faults.base import Target
from harness.history.events import EventKind, HistoryEvent
from harness.history.windows import fault_windows
from harness.kafka.clients import StoredRecord, create_topic, read_topic
from harness.outbox.relay import RELAYED, target, token_topic
from harness.outbox.stages import published_snapshot, written_ledger
from harness.outbox.workload import generate_writes
from harness.outbox.writer import SOURCE, read_written, write_all
from harness.pipeline.batch import RawRecord, split
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.sink import database_for, prepare_sink, read_sink, slug
from harness.pipeline.supervisor import RuntimeSupervisor
from harness.pipeline.variants import Variant, WriteContext
from harness.run.loop import ProducerThread, Progress, Watch
from harness.scenario import Scenario
from harness.workload.producer import Hold, ProduceSummary
from harness.workload.verify import StoredTwice


class OutboxSource:
    """The application of an outbox scenario (see the module's doc)."""

    database = ""  # its application writes MongoDB: no database of a CDC source

    def __init__(self, env: Environment, scenario: Scenario, run_id: str, ledger_path: Path):
        assert scenario.outbox is not None, "not an outbox scenario"
        # Its processes: none (the application is the lab's thread, the relays are lanes).
        self.targets: list[Target] = []
        self.supervisors: list[RuntimeSupervisor] = []
        self.env, self.scenario, self.run_id = env, scenario, run_id
        self.outbox = scenario.outbox
        self.topic = f"{scenario.name}.{run_id}"  # the prefix of the relays' target topics
        self.database = database_for(run_id, "app")
        self.ledger_path = ledger_path  # the entries MongoDB acknowledged, as written
        self._topics: list[str] = []  # every relay's, as its lane was made
        self._ledger: LedgerArrays | None = None

    def start(self) -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(self.env.mongo_uri)
        with client:
            client[self.database].create_collection(SOURCE)

    def relay(self, config: RuntimeConfig) -> None:
        """A relay lane's target topics and its token topic, made before it starts."""
        for topic in self.relay_topics(config):
            partitions = 1 if topic == token_topic(config) else self.scenario.partitions
            create_topic(self.env.kafka_bootstrap, topic, partitions)
            self._topics.append(topic)

    def relay_topics(self, config: RuntimeConfig) -> list[str]:
        return [target(config, t) for t in self.outbox.topics] + [token_topic(config)]

    def check(self) -> None:
        pass  # nothing of its own runs: the relays are the lanes, checked by the loop

    def await_ready(self, progress: Progress, stop: threading.Event | None) -> None:
        pass  # its relays, the lanes, are ready: the application starts after them

    def writer(self, hold: Hold | None) -> ProducerThread:
        """The application, in the writer's thread, at the outbox's own rate (``hold`` is a
        producer's)."""
        del hold

        def body(stop: threading.Event, on_ack: Callable[[int], None]) -> ProduceSummary:
            started = time.monotonic()
            # The application reaches MongoDB directly: link faults are the relays'.
            client: MongoClient[dict[str, Any]] = MongoClient(self.env.mongo_uri)
            with client:
                written = write_all(
                    client[self.database][SOURCE],
                    generate_writes(self.outbox, self.scenario.seed),
                    self.ledger_path,
                    cleanup=self.outbox.cleanup,
                    rate=self.outbox.rate,
                    stop=stop,
                    on_ack=on_ack,
                )
            return ProduceSummary(written, written, 0, time.monotonic() - started)

        return ProducerThread(body)

    def end_offsets(self) -> dict[int, int]:
        """What a relay commits once it has relayed the application's end marker."""
        return dict(RELAYED)

    @staticmethod
    def report(watches: Sequence[Watch], targets: dict[int, int] | None) -> str:
        """The wait's progress line: which relays have relayed the application's end."""
        state = ", ".join(
            f"{w.label} {'yes' if sum(w.committed.values()) else 'not yet'}" for w in watches
        )
        writing = "" if targets else " (the application is still writing)"
        return f"    relayed the application's end marker{writing}: {state}"

    def ledger(self) -> LedgerArrays:
        if self._ledger is None:
            self._ledger = written_ledger(list(read_written(self.ledger_path)))
        return self._ledger

    def final_state(self) -> FinalState:
        raise LabError("a current-state sink judges a database's tables: an outbox has none")

    def stage(self, progress: Progress) -> tuple[list[StoredTwice], RelayStage | None]:
        return [], None  # each relay's published stage is its lane's (``relayed``)

    def relayed(
        self, config: RuntimeConfig, sink: Variant, label: str, events: list[HistoryEvent]
    ) -> tuple[SinkSnapshot, RelayStage]:
        """A relay lane's two stages: its target topics against the entries written (the
        published stage), and what ``sink`` stored of them, as read back."""
        topics = [target(config, t) for t in self.outbox.topics]
        published = [(t, read_topic(self.env.kafka_bootstrap, t, contents=True)) for t in topics]
        database = database_for(self.run_id, f"sink-{slug(label)}")
        self._store(config, sink, published, database)
        written = self.ledger()
        records = (r for _, found in published for r in found)
        stage = RelayStage(
            check(written, published_snapshot(records), produced=len(written.order_id),
                  windows=fault_windows(events)),
            history_lost=sum(1 for e in events if e.kind is EventKind.HISTORY_LOST),
        )  # fmt: skip
        stored = read_sink(self.env.mongo_uri, database, sink, bootstrap=self.env.kafka_bootstrap,
                           topic=topics[0], group=config.group)  # fmt: skip
        return stored, stage

    def _store(
        self,
        config: RuntimeConfig,
        variant: Variant,
        records: list[tuple[str, list[StoredRecord]]],
        database: str,
    ) -> None:
        """The downstream sink: the scenario's sink variant writes what the relay published."""
        prepare_sink(self.env.mongo_uri, database, variant)
        client: MongoClient[dict[str, Any]] = MongoClient(self.env.mongo_uri)
        size = self.scenario.pipeline.batch_size
        with client:
            db = client[database]
            for topic, found in records:
                for n, start in enumerate(range(0, len(found), size), start=1):
                    raw = [
                        RawRecord(r.partition, r.offset, r.value)
                        for r in found[start : start + size]
                    ]
                    batch, _poison = split(n, topic, config.group, raw)
                    variant.write(batch, WriteContext(client, db, n, None, n))

    def close(self) -> list[str]:
        """Its topics, to delete: every relay's (the application's database stays, to look at)."""
        return list(self._topics)
