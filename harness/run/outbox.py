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
downstream are the sink scenarios' business - or, with ``source: {kind: outbox, relay: R}``,
``RelaySource``'s: one relay is the source, and the scenario's variants are its lanes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from harness.checker.check import check
from harness.checker.load import load_ledger
from harness.checker.model import SOURCE as SOURCE_STAGE
from harness.checker.model import LedgerArrays, RelayStage, SinkSnapshot
from harness.checker.state import FinalState
from harness.environment.base import Environment, Link
from harness.errors import LabError
from harness.faults.base import Target
from harness.history.events import EventKind, HistoryEvent, HistoryTail, HistoryWriter, read_history
from harness.history.windows import fault_windows
from harness.kafka.clients import StoredRecord, past_last_records, read_topic
from harness.kafka.topics import create_topic
from harness.outbox.relay import RELAYED, target, token_topic
from harness.outbox.stages import published_changes, published_snapshot, written_ledger
from harness.outbox.workload import generate_writes
from harness.outbox.writer import SOURCE, read_written, write_all
from harness.pipeline.batch import RawRecord, split
from harness.pipeline.mongo_options import uri_with
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.runtimes import RELAY
from harness.pipeline.sink import database_for, prepare_sink, read_sink, slug
from harness.pipeline.supervisor import Lane, RuntimeSupervisor, stop_all
from harness.pipeline.variants import Variant, WriteContext, import_path
from harness.readiness import DeadlineExceeded, GaveUp, NotReady, wait_for
from harness.run.loop import ProducerThread, Progress, Stopped, Watch
from harness.scenario import Scenario, VariantSpec
from harness.sources.spec import SOURCE_LABEL
from harness.workload.ledger import Change, LedgerWriter, placed
from harness.workload.producer import Hold, ProduceSummary
from harness.workload.verify import StoredTwice


def create_application(env: Environment, database: str) -> None:
    """The application's database, with its business collection (whose change stream the
    relays read)."""
    client: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with client:
        client[database].create_collection(SOURCE)


def application(
    env: Environment, scenario: Scenario, database: str, written: Path
) -> Callable[[threading.Event, Callable[[int], None]], ProduceSummary]:
    """The application writing the scenario's outbox into ``database`` at the outbox's own rate,
    ledgering each entry MongoDB acknowledged in ``written``: a writer thread's body."""
    assert scenario.outbox is not None, "not an outbox scenario"
    outbox = scenario.outbox

    def body(stop: threading.Event, on_ack: Callable[[int], None]) -> ProduceSummary:
        started = time.monotonic()
        # The application reaches MongoDB directly: link faults are the relays'.
        client: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
        with client:
            count = write_all(client[database][SOURCE], generate_writes(outbox, scenario.seed),
                              written, cleanup=outbox.cleanup, rate=outbox.rate, stop=stop,
                              on_ack=on_ack)  # fmt: skip
        return ProduceSummary(count, count, 0, time.monotonic() - started)

    return body


def relay_config(
    env: Environment,
    scenario: Scenario,
    spec: VariantSpec,
    database: str,
    group: str,
    run_dir: Path,
) -> RuntimeConfig:
    """A relay's process: ``spec`` reading ``database``'s change stream into target topics
    named after ``group`` (its token's id and transactional.id too)."""
    return RuntimeConfig(
        runtime=RELAY.name,
        bootstrap=env.kafka_bootstrap_for(Link.CONSUMER_KAFKA),
        mongo_uri=uri_with(env.mongo_uri_for(Link.CONSUMER_MONGO), scenario.pipeline.mongo),
        mongo=scenario.pipeline.mongo,
        topic=group,
        group=group,
        database=database,
        variant=spec.name,
        variant_options=spec.options,
        run_dir=str(run_dir),
        crash_plans=scenario.crash_plans,
        import_path=import_path(spec.name, spec.options),  # a user's relay, for the process
    )


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
        create_application(self.env, self.database)

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
        return ProducerThread(application(self.env, self.scenario, self.database,
                                          self.ledger_path))  # fmt: skip

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

    def events(self) -> list[HistoryEvent]:
        return []  # its relays' are their lanes'

    def close(self) -> list[str]:
        """Its topics, to delete: every relay's (the application's database stays, to look at)."""
        return list(self._topics)


RELAY_READY_WITHIN_S = 120.0  # a relay process's start and its change stream's opening


class RelaySource:
    """``source: {kind: outbox, relay: R}``: seed 003's application, and one relay R carrying
    its outbox to the one target topic the run's lanes consume - any runtime's, the scenario's
    variants - as a deployment's sinks consume what its relay publishes.

    The truth is the entries MongoDB acknowledged to the application. The source's stage judges
    the target topic against them (the relay's copies and losses, as a relay lane's published
    stage does); each lane's sink is judged end to end against the same entries, each placed at
    its first record on the topic and every further record of it a copy the relay made
    (``harness.workload.ledger.placed``), so a sink's own copies are told apart from those it
    was handed. The relay is a process of the source's, restarted when it dies, its crash
    points armed by the scenario's relay-crash faults; its history is the source's."""

    report = None

    def __init__(
        self,
        env: Environment,
        scenario: Scenario,
        run_id: str,
        out_dir: Path,
        ledger_path: Path,
        progress: Progress = print,
    ) -> None:
        assert scenario.outbox is not None and len(scenario.relays) == 1, "not an outbox source"
        self.env, self.scenario, self.progress = env, scenario, progress
        self.spec = scenario.relays[0]
        self.database = database_for(run_id, "app")
        self.ledger_path = ledger_path  # the sinks' ledger, made from the entries at the end
        self.written = ledger_path.with_suffix(".written.csv")  # the entries, as acknowledged
        folder = (out_dir / f"{SOURCE_LABEL}-{run_id}").absolute()
        group = f"{scenario.name}.{run_id}.{SOURCE_LABEL}"
        self.config = relay_config(env, scenario, self.spec, self.database, group, folder)
        self.topic = target(self.config, scenario.outbox.topics[0])
        self.targets: list[Target] = []  # its faults are its crash points, armed in the relay
        self.supervisors: list[RuntimeSupervisor] = []
        self._tail = HistoryTail(self.config.history_dir)
        self._relayed = False
        self._ledger: LedgerArrays | None = None
        self._records: list[StoredRecord] = []

    def start(self) -> None:
        """The application's database, the target and token topics, and the relay's process."""
        env, scenario, config = self.env, self.scenario, self.config
        create_application(env, self.database)
        create_topic(env.kafka_bootstrap, self.topic, scenario.partitions)
        create_topic(env.kafka_bootstrap, token_topic(config), 1)
        folder = Path(config.run_dir)
        folder.mkdir(parents=True, exist_ok=True)
        config_path = folder / "runtime.json"
        config_path.write_text(config.to_json())
        history = HistoryWriter(config.history_dir, "harness", SOURCE_LABEL)
        history.record(EventKind.RUN_START,
                       detail=f"relay {self.spec.label} from {self.database}.{SOURCE} to "
                              f"{self.topic}")  # fmt: skip
        supervisor = RuntimeSupervisor(env, [Lane(config, config_path, history)], consumers=1,
                                       restart_delay=scenario.pipeline.restart_delay_s,
                                       log_dir=folder / "logs", runtime=RELAY)  # fmt: skip
        self.supervisors = [supervisor]
        supervisor.start()

    def check(self) -> None:
        """Its relay restarted when it dies; whether it has relayed the application's end."""
        for supervisor in self.supervisors:
            supervisor.check()
        for event in self._tail.new_events():
            if event.kind is EventKind.COMMIT and event.offsets == RELAYED:
                self._relayed = True

    def await_ready(self, progress: Progress, stop: threading.Event | None) -> None:
        """Until the relay's change stream is open: the application starts after it."""
        tail = HistoryTail(self.config.history_dir)
        seen: list[HistoryEvent] = []

        def reading() -> None:
            self.check()
            seen.extend(tail.new_events())
            if not any(e.kind is RELAY.ready for e in seen):
                raise NotReady(f"relay {self.spec.label} has not opened its change stream")

        def stopped() -> str | None:
            return "asked to stop" if stop is not None and stop.is_set() else None

        try:
            wait_for(reading, what=f"relay {self.spec.label}", timeout=RELAY_READY_WITHIN_S,
                     abort=stopped)  # fmt: skip
        except GaveUp as exc:
            raise Stopped(str(exc)) from None
        except DeadlineExceeded:
            logs = ", ".join(str(c.log) for s in self.supervisors for c in s.consumers)
            raise LabError(f"relay {self.spec.label} did not open its change stream within "
                           f"{RELAY_READY_WITHIN_S:.0f} s (see {logs})") from None  # fmt: skip
        progress(f"    the source: relay {self.spec.label} reads {self.database}.{SOURCE}'s "
                 f"change stream into {self.topic}")  # fmt: skip

    def writer(self, hold: Hold | None) -> ProducerThread:
        """The application (``hold`` is a producer's: it writes at the outbox's rate); done
        once the relay has relayed its end marker."""
        del hold
        body = application(self.env, self.scenario, self.database, self.written)
        return ProducerThread(body, delivered=lambda: self._relayed)

    def end_offsets(self) -> dict[int, int]:
        """Past the last record of each partition of the target topic (a transactional relay's
        partitions end in transaction markers, which no lane commits past)."""
        return past_last_records(self.env.kafka_bootstrap, self.topic)

    def ledger(self) -> LedgerArrays:
        """The entries written, each at its first record on the target topic, and the relay's
        copies (``placed``): written as the run's ledger file, as a producer's is. The topic is
        read once, after the run."""
        if self._ledger is None:
            entries = list(read_written(self.written))
            self._records = read_topic(self.env.kafka_bootstrap, self.topic, contents=True)
            expected = [Change(e.entry_id, e.order_id, e.version, e.acked_at) for e in entries]
            with LedgerWriter(self.ledger_path) as ledger:
                for row in placed(expected, published_changes(self._records), self.topic):
                    ledger.append(row)
            self._ledger = load_ledger(self.ledger_path)
        return self._ledger

    def final_state(self) -> FinalState:
        raise LabError("a current-state sink judges a database's tables: an outbox has none")

    def events(self) -> list[HistoryEvent]:
        return read_history(self.config.history_dir)

    def stage(self, progress: Progress) -> tuple[list[StoredTwice], RelayStage | None]:
        """The target topic against the entries written: the relay's copies and losses."""
        self.ledger()
        written = written_ledger(list(read_written(self.written)))
        events = self.events()
        verdict = check(written, published_snapshot(self._records),
                        produced=len(written.order_id), windows=fault_windows(events))  # fmt: skip
        lost = sum(1 for e in events if e.kind is EventKind.HISTORY_LOST)
        crashes = sum(s.crashes for s in self.supervisors)
        progress(
            f"    the source: {verdict.acked} entries written; relay {self.spec.label} published "
            f"{verdict.unique_in_sink} (+{verdict.duplicates} copies, {verdict.lost} lost)"
            + (f"; it was killed {crashes} time(s) and restarted" if crashes else "")
            + (f"; it lost its resume point {lost} time(s)" if lost else "")
        )
        return [], RelayStage(verdict, history_lost=lost, of=SOURCE_STAGE,
                              relayed_by=self.spec.label)  # fmt: skip

    def close(self) -> list[str]:
        """Its relay stopped; its topics (the application's database stays, to look at)."""
        stop_all(self.supervisors)
        self.supervisors = []
        return [self.topic, token_topic(self.config)]
