"""A run's source stage: what writes the run's topic and keeps the truth its lanes are judged
against. The run loop (``harness.run.runner``) sees a source through ``Source`` (an outbox's,
also to make and judge its relays' lanes):

* ``ProducerSource`` - the lab's producer sends the seeded workload; the truth is what the
  broker acknowledged (its ledger), and the topic is checked to hold each of those.
* ``DebeziumSource`` - the application writes the workload as SQL transactions into a database
  of the run's own on the environment's PostgreSQL; Debezium, on a Connect cluster of the
  source's own, puts each committed change on the change topic; the truth is what the database
  committed, read back from its log through a slot of the lab's (``harness.sources.truth``).
  Its topic stage judges the topic against those commits: the source's copies and losses.
* ``OutboxSource`` (``harness.run.outbox``) - seed 003's application writing outboxes into
  MongoDB; its relays are the run's lanes, each with a published stage of its own.
* ``RelaySource`` (``harness.run.outbox``) - the same application and one relay of the
  source's, whose target topic the lanes consume (``source: {kind: outbox, relay: ...}``);
  its stage is the relay's published one.

Each source's processes are stopped, its slot, publication and database dropped, however the
run ends (``close``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import psycopg

from harness.checker.check import check
from harness.checker.load import load_ledger
from harness.checker.model import SOURCE, LedgerArrays, RelayStage
from harness.checker.state import FinalState
from harness.environment.base import Environment, Link
from harness.errors import LabError
from harness.faults.base import Target
from harness.history.events import EventKind, HistoryEvent, HistoryWriter
from harness.kafka.clients import StoredRecord, Watermarks, past_last_records, read_topic
from harness.kafka.topics import create_topic
from harness.pipeline import observer
from harness.pipeline.connect import settings as connect
from harness.pipeline.connect.settings import ConnectSettings
from harness.pipeline.connect.watch import ConnectorWatch
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.runtimes import CONNECT_SOURCE
from harness.pipeline.supervisor import Lane, RuntimeSupervisor, stop_all
from harness.readiness import DeadlineExceeded, GaveUp, NotReady, wait_for
from harness.run.loop import ProducerThread, Progress, Report, Stopped
from harness.scenario import Scenario
from harness.sources import database, sql_writer, truth
from harness.sources.debezium import Where
from harness.sources.spec import SOURCE_LABEL
from harness.sources.sql_workload import Transaction, split, transactions
from harness.sources.stages import (
    committed_ledger,
    expected_changes,
    final_state,
    sink_ledger,
    snapshots,
    topic_snapshot,
)
from harness.workload.events import TABLE
from harness.workload.generator import generate
from harness.workload.ledger import LedgerWriter, read_ledger
from harness.workload.producer import Hold, ProduceSummary, produce
from harness.workload.verify import StoredTwice, missing_from_topic, stored_twice, topic_event_ids


class BrokerLostData(LabError):
    """The broker acknowledged records it does not hold: a defect of the environment, not of
    the variant under test, so the run stops instead of reporting losses."""


CONNECTOR = "source"  # the source's connector, on its own cluster
STREAMING_WITHIN_S = 180.0  # a worker's start and Debezium's first look at its slot
MARK_EVERY_S = 1.0  # how often the end mark's topic is looked at
# How often the truth's slot is read: a slot holds the WAL it has not given out, and a server
# capping that (max_slot_wal_keep_size) would otherwise invalidate the lab's own slot too.
TRUTH_EVERY_S = 1.0
QUIET_EVERY_S = 0.2  # how often the end mark looks for other applications' open transactions


class Source(Protocol):
    """What the run loop asks of a source."""

    topic: str  # the topic the lanes consume
    ledger_path: Path  # the truth, as the sinks' ledger (a producer's acknowledgements)
    targets: list[Target]  # its processes, for a fault that names the source
    supervisors: list[RuntimeSupervisor]  # checked by the loop: restarted when they die

    @property
    def database(self) -> str: ...  # a CDC source's database (its URI), where faults act

    def start(self) -> None: ...

    def check(self) -> None: ...  # each tick of the loop: its processes and its connector

    def await_ready(self, progress: Progress, stop: threading.Event | None) -> None: ...

    def writer(self, hold: Hold | None) -> ProducerThread: ...

    def end_offsets(self) -> dict[int, int]: ...  # once the writer is done: what lanes reach

    def ledger(self) -> LedgerArrays: ...  # the truth, as the sinks are judged against it

    # The topic's own copies of the producer's records; the source's stage (a CDC source's)
    def stage(self, progress: Progress) -> tuple[list[StoredTwice], RelayStage | None]: ...

    # The database's tables at the end, for a current-state sink (a Debezium source's only)
    def final_state(self) -> FinalState: ...

    # The wait's progress line, where the lanes' committed offsets are not what it waits for
    @property
    def report(self) -> Report | None: ...

    # Its own process's history, where a fault it fires itself is seen (an outbox's relay's)
    def events(self) -> list[HistoryEvent]: ...

    def close(self) -> list[str]: ...  # its processes stopped, its state dropped; its topics


@dataclass
class DebeziumRun:
    """What one run's Debezium source made: its database, slots, cluster and histories."""

    env: Environment
    scenario: Scenario
    run_id: str
    out_dir: Path
    server_uri: str = ""
    uri: str = ""  # the run's database
    where: Where | None = None
    supervisor: RuntimeSupervisor | None = None
    watch: ConnectorWatch | None = None
    history: HistoryWriter | None = None
    mark_lsn: int = 0  # the application's end mark's LSN, once it is on its topic
    flushed: bool = False  # Connect has committed Debezium's offsets past the mark
    looked: float = 0.0  # time.monotonic() of the last look for either
    polled: float = 0.0  # time.monotonic() of the connector's last status
    reader: truth.Truth | None = None  # the database's commits, read from the lab's slot
    caught_up: float = 0.0  # time.monotonic() of its last read
    slot_lost: str = ""  # why Debezium's slot can give no change again (the server's word)
    heartbeats: str = ""  # Debezium's heartbeat topic
    committed: list[truth.CommittedChange] = field(default_factory=list)  # all of them, at the end
    # A table with rows when Debezium started (``source.existing``): those rows (order_id ->
    # version), the LSN after their last commit, and when they were read.
    existing: dict[int, int] = field(default_factory=dict)
    boundary: int = 0
    existing_at: float = 0.0
    expected: list[truth.CommittedChange] = field(default_factory=list)  # what the topic owes
    records: list[StoredRecord] = field(default_factory=list)
    ledger: LedgerArrays | None = None  # the sinks', once read
    final: FinalState | None = None  # the table at the end, read with the truth

    @property
    def name(self) -> str:
        return f"cdc_{self.run_id}"

    @property
    def truth_slot(self) -> str:
        return f"{self.name}_truth"

    @property
    def stopped(self) -> str:
        """Why the source stopped for good ('' while it has not): its task FAILED, or its slot
        was invalidated."""
        return (self.watch.failure if self.watch is not None else "") or self.slot_lost


class DebeziumSource:
    """Seed 000's source: PostgreSQL's log through Debezium (see the module's doc)."""

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
        self.run = DebeziumRun(env, scenario, run_id, out_dir)
        self.progress = progress
        self.ledger_path = ledger_path
        prefix = f"{scenario.name}.{run_id}"
        self.topic = f"{prefix}.public.{TABLE}"
        self.targets: list[Target] = []
        self.supervisors: list[RuntimeSupervisor] = []
        self._prefix = prefix
        self._tail: list[Transaction] = []  # the application's, in the run

    @property
    def database(self) -> str:
        return self.run.uri

    def start(self) -> None:
        """The run's database and the truth's slot (before the first write), the change and
        mark topics, and the source's Connect workers; its connector is put on them once
        every worker is in their group (``ConnectorWatch``, polled by ``check``)."""
        run, scenario, env = self.run, self.run.scenario, self.run.env
        run.server_uri = env.postgres_uri()
        if left := database.reset_slot_cap(run.server_uri):
            self.progress(f"    PostgreSQL had {database.SLOT_CAP} {left} from a run that ended "
                          "inside its slot-behind fault: taken back")  # fmt: skip
        run.uri = database.create(run.server_uri, run.name)
        truth.create_slot(run.uri, run.truth_slot)
        run.reader = truth.Truth(run.uri, run.truth_slot)
        head, self._tail = split(transactions(scenario.workload), scenario.source.existing)
        if head:  # the rows a deployment's database had before it added CDC
            changes = sum(len(t.changes) for t in head)
            self.progress(f"    the table before Debezium starts: the application's first "
                          f"{changes} row changes ({len(head)} transactions)")  # fmt: skip
            began = time.monotonic()
            sql_writer.write(run.uri, head)
            run.existing, run.existing_at = database.table_rows(run.uri), time.time()
            run.boundary = database.current_lsn(run.uri)
            # Their changes decoded now, not at the run loop's first look: that look is in the
            # wait for the snapshot's first record, where the faults' clock starts.
            run.reader.catch_up()
            self.progress(f"    {len(run.existing)} rows in the table, written in "
                          f"{time.monotonic() - began:.0f} s")  # fmt: skip
        # Debezium reaches its database through the fault proxy where there is one (network
        # faults on the source-postgres link); the application and the truth's slot directly.
        debeziums = database.uri_of(env.postgres_uri_for(Link.SOURCE_POSTGRES), run.name)
        where = Where(debeziums, slot=run.name, topic_prefix=self._prefix,
                      tables=(TABLE, database.MARKS), partitions=scenario.partitions)  # fmt: skip
        run.where = where
        create_topic(env.kafka_bootstrap, self.topic, scenario.partitions)
        create_topic(env.kafka_bootstrap, where.topic(database.MARKS), 1)
        folder = (run.out_dir / SOURCE_LABEL).absolute()
        settings = ConnectSettings.for_run(
            {connect.WORKERS: 1, **scenario.source.connect},
            # Its workers run where the lanes' consumers run (each in a container of its own on
            # the containers backend): the brokers' address from there.
            bootstrap=env.kafka_bootstrap_for(Link.CONSUMER_KAFKA),
            group=f"{self._prefix}.source",
            folder=folder / "connect",
            base=scenario.folder,
        )
        settings = replace(settings, debezium=True)
        config = RuntimeConfig(
            runtime=CONNECT_SOURCE.name, bootstrap=settings.bootstrap, mongo_uri=env.mongo_uri,
            topic=self.topic, group=f"{self._prefix}.{SOURCE_LABEL}", database="",
            variant=SOURCE_LABEL,
            variant_options={}, run_dir=str(folder), connect=settings.to_json(),
        )  # fmt: skip
        config_path = folder / "runtime.json"
        config_path.write_text(config.to_json())
        run.history = HistoryWriter(config.history_dir, "harness", SOURCE_LABEL)
        run.history.record(EventKind.RUN_START, detail=f"debezium from {run.name} to {self.topic}")
        debezium = scenario.source.debezium()
        connector = debezium.config(where)
        # The heartbeats' topic made before the connector's first heartbeat, as the lab makes
        # every topic it uses: left to Connect's creation on the first send, the broker refused
        # that send (UNKNOWN_TOPIC_ID) while the new topic's metadata spread, and the retried
        # record held back Connect's first offset commit by a flush interval - a worker killed
        # then had no offsets, and Debezium snapshotted again from the present.
        run.heartbeats = debezium.heartbeat_topic(connector)
        create_topic(env.kafka_bootstrap, run.heartbeats, 1)
        run.watch = ConnectorWatch(settings, CONNECTOR, connector)
        run.supervisor = RuntimeSupervisor(
            env, [Lane(config, config_path, run.history)],
            consumers=settings.workers, restart_delay=scenario.pipeline.restart_delay_s,
            log_dir=Path(settings.folder), runtime=CONNECT_SOURCE,
        )  # fmt: skip
        self.supervisors = [run.supervisor]
        self.targets = [
            Target(
                HistoryWriter(config.history_dir, "nemesis", SOURCE_LABEL),
                run.supervisor,
                folder,
                runtime=CONNECT_SOURCE,
                label=SOURCE_LABEL,
                name=SOURCE_LABEL,
                group=CONNECTOR,
            )
        ]
        run.supervisor.start()

    def check(self) -> None:
        """Its workers restarted when they die; its connector put on them once they formed
        their group, and followed (a task that FAILED stays failed: the source has stopped for
        good, ``done``); the truth's slot read each second."""
        run = self.run
        assert run.supervisor is not None and run.watch is not None and run.history is not None
        run.supervisor.check()
        if time.monotonic() - run.caught_up >= TRUTH_EVERY_S:
            run.caught_up = time.monotonic()
            assert run.reader is not None
            # The database restarting (a fault's) is read at the next look.
            with contextlib.suppress(psycopg.OperationalError):
                run.reader.catch_up()
                self._look_at_slot()
        # Connect's REST API as often as a Connect lane's observer asks it, not at every tick of
        # the loop (a status call each 0.1 s).
        if time.monotonic() - run.polled >= observer.POLL_S:
            run.polled = time.monotonic()
            run.watch.poll(run.history)

    def _look_at_slot(self) -> None:
        """Whether the server invalidated Debezium's slot (``max_slot_wal_keep_size``: the
        slot-behind fault): its task does not fail then, it retries reading the slot for half
        an hour (Debezium's PostgresConnection: 900 attempts 2 s apart), RUNNING meanwhile. The
        source has stopped for good all the same; the history says so, as the server said it."""
        run = self.run
        if run.slot_lost or run.where is None:
            return
        if (found := database.slot(run.uri, run.where.slot)) and found.wal_status == "lost":
            run.slot_lost = (f"slot {run.where.slot} invalidated by PostgreSQL (wal_status lost: "
                             "behind more WAL than max_slot_wal_keep_size lets a slot keep); "
                             "Debezium can read no change from it again")  # fmt: skip
            assert run.history is not None
            run.history.record(EventKind.FAILED_FOR_GOOD, detail=run.slot_lost)

    def await_ready(self, progress: Progress, stop: threading.Event | None) -> None:
        """Until Debezium's task streams from its slot (its snapshot of the empty tables done):
        the application starts after its CDC, as a deployment's would. Over a table with rows,
        until its snapshot is under way (its first record on the topic): the application
        writes on, and the faults' clock starts, while Debezium reads the table."""
        run = self.run
        assert run.supervisor is not None and run.where is not None
        supervisor, slot = run.supervisor, run.where.slot
        # Over a table with rows: its change topic's ends, until the snapshot's first record.
        topic = Watermarks(run.env.kafka_bootstrap, self.topic) if run.existing else None

        def streaming() -> None:
            self.check()
            assert run.watch is not None
            if run.watch.failure:  # it never streamed: no run to speak of
                raise LabError(f"Debezium's {run.watch.failure}")
            if topic is not None:
                if not any(topic.read(timeout=5).values()):
                    raise NotReady(f"Debezium's snapshot of {len(run.existing)} rows not begun")
            elif not ((found := database.slot(run.uri, slot)) and found.active):
                raise NotReady(f"Debezium's slot {slot} not streaming yet")

        def stopped() -> str | None:
            return "asked to stop" if stop is not None and stop.is_set() else None

        try:
            # A snapshot is seconds long: its start is looked for often, for the faults' clock
            # to start while it is under way.
            wait_for(streaming, what="Debezium streaming from its slot",
                     timeout=STREAMING_WITHIN_S, abort=stopped,
                     most=0.05 if run.existing else 0.5)  # fmt: skip
        except GaveUp as exc:
            raise Stopped(str(exc)) from None
        except DeadlineExceeded:
            logs = ", ".join(str(c.log) for c in supervisor.consumers)
            raise LabError(
                f"Debezium did not stream from slot {slot} within {STREAMING_WITHIN_S:.0f} s "
                f"(see {logs})"
            ) from None
        finally:
            if topic is not None:
                topic.close()
        if run.existing:
            progress(f"    the source's snapshot is under way: Debezium reads the table's "
                     f"{len(run.existing)} rows into {self.topic}")  # fmt: skip
        else:
            progress(f"    the source streams: Debezium on slot {slot} into {self.topic}")

    def writer(self, hold: Hold | None) -> ProducerThread:
        """The application, in the writer's thread: the planned transactions, then the end
        mark. (``hold`` is a producer's: the application writes at its own pace.)"""
        run = self.run
        planned = self._tail

        def body(stop: threading.Event, on_ack: Callable[[int], None]) -> ProduceSummary:
            started = time.monotonic()
            committed = sql_writer.write(run.uri, planned, on_commit=on_ack, stop=stop,
                                         rate=run.scenario.rate)  # fmt: skip
            # The end mark after every transaction open now (another application's, a fault's
            # long one): committed before it in commit order, each is on the topic once the
            # mark is, and none commits after the run has stopped looking.
            said = False
            while not stop.is_set() and (open_now := database.others_open(run.uri)):
                if not said:
                    self.progress(f"    the end mark waits for {open_now} transaction(s) of "
                                  "another application to end")  # fmt: skip
                    said = True
                stop.wait(QUIET_EVERY_S)
            if not stop.is_set():
                database.mark_end(run.uri)
            done = {c.seq for c in committed}
            changes = sum(len(t.changes) for t in planned if t.seq in done)
            return ProduceSummary(changes, changes, 0, time.monotonic() - started)

        return ProducerThread(body, delivered=self.done)

    def done(self) -> bool:
        """Whether every change committed before the application's end mark is on the change
        topic, or lost there: the mark is on its topic, and Connect has committed Debezium's
        offsets past it - Connect commits a source's offsets only up to the records Kafka
        acknowledged, in order, while the mark alone says nothing of the other topic's
        partitions (a run's lanes were once waited for up to a partition that still had 130
        changes to come). Or whether Debezium stopped for good (its task FAILED)."""
        run = self.run
        assert run.where is not None and run.watch is not None
        if run.stopped:  # nothing more will come of it: the lanes get what it sent
            return True
        if run.flushed or time.monotonic() - run.looked < MARK_EVERY_S:
            return run.flushed
        run.looked = time.monotonic()
        if not run.mark_lsn:
            marks = read_topic(run.env.kafka_bootstrap, run.where.topic(database.MARKS),
                               contents=True)  # fmt: skip
            run.mark_lsn = max((change_lsn(r.value) for r in marks if r.value), default=0)
        if run.mark_lsn:
            run.flushed = self._offset_lsn() >= run.mark_lsn
        return run.flushed

    def _offset_lsn(self) -> int:
        """The LSN of the source offsets Connect last committed for Debezium (0: none yet, or
        a snapshot's under way: its records all carry the LSN it reads at, and the end mark,
        committed before it began, is one of its rows - it is past the mark only once it has
        put every row on the topic)."""
        settings = ConnectSettings.from_json(self.targets[0].supervisor.config.connect)
        records = read_topic(self.run.env.kafka_bootstrap, settings.storage_topics["offset"],
                             contents=True)  # fmt: skip
        latest = 0
        for record in records:  # a partition's records in order: its last is its newest
            if record.value is not None and self._prefix.encode() in (record.key or b""):
                offset = json.loads(record.value)
                latest = max(int(offset.get("lsn") or 0), int(offset.get("lsn_proc") or 0))
                if offset.get("snapshot") and not offset.get("last_snapshot_record"):
                    latest = 0
        return latest

    def end_offsets(self) -> dict[int, int]:
        """Past the last record of each partition of the change topic (an exactly-once
        source's partitions end in transaction markers)."""
        return past_last_records(self.run.env.kafka_bootstrap, self.topic)

    def ledger(self) -> LedgerArrays:
        """The committed changes, each at its first record on the change topic; the further
        records of each as the source's copies (``sink_ledger``): written as the run's ledger
        file, as a producer's is. The topic is read once, after the run, and the truth's last
        changes with it."""
        run = self.run
        if run.ledger is None:
            assert run.reader is not None
            run.reader.catch_up()
            run.committed = run.reader.changes
            run.expected = run.committed
            if run.boundary:
                run.expected = expected_changes(run.committed, run.existing, run.boundary,
                                                run.existing_at)  # fmt: skip
            run.records = read_topic(run.env.kafka_bootstrap, self.topic, contents=True)
            run.final = final_state(run.committed, database.table_rows(run.uri))
            with LedgerWriter(self.ledger_path) as ledger:
                for row in sink_ledger(run.expected, run.records, self.topic):
                    ledger.append(row)
            run.ledger = load_ledger(self.ledger_path)
        return run.ledger

    def final_state(self) -> FinalState:
        """The run's table at the end (read with the truth, before the database is dropped)."""
        self.ledger()
        assert self.run.final is not None
        return self.run.final

    def stage(self, progress: Progress) -> tuple[list[StoredTwice], RelayStage | None]:
        """The change topic against the database's commits: the source's copies and losses."""
        run = self.run
        self.ledger()  # the truth and the topic, read
        expected = len(run.expected)
        stopped = run.stopped
        verdict = check(committed_ledger(run.expected), topic_snapshot(run.records),
                        produced=expected, stopped=stopped)  # fmt: skip
        begun, finished = snapshots(run.records)
        what = f"{expected} changes committed"
        if run.boundary:
            what = (f"{len(run.existing)} rows for its snapshot and "
                    f"{expected - len(run.existing)} changes committed after")  # fmt: skip
        progress(
            f"    the source: {what}; on the topic {verdict.unique_in_sink}"
            f" (+{verdict.duplicates} copies re-emitted, {verdict.lost} lost at the source)"
            + (f"; snapshots begun {begun}, finished {finished}" if begun else "")
            + (f"; Debezium stopped for good: {stopped}" if stopped else "")
        )
        return [], RelayStage(verdict, of=SOURCE, snapshot_rows=len(run.existing),
                              snapshots=(begun, finished))  # fmt: skip

    def events(self) -> list[HistoryEvent]:
        return []  # its faults are the nemesis's, in every lane's history

    def close(self) -> list[str]:
        """Its workers stopped, its slots and database dropped; its topics (for a run that
        does not keep them)."""
        run = self.run
        if run.supervisor is not None:
            stop_all([run.supervisor])
            run.supervisor = None
        if run.uri:
            database.drop(run.server_uri, run.name)
            run.uri = ""
        topics = [self.topic]
        if run.where is not None:
            settings = ConnectSettings.from_json(self.targets[0].supervisor.config.connect)
            topics += [run.where.topic(database.MARKS), run.heartbeats,
                       *settings.storage_topics.values()]  # fmt: skip
        return topics


def change_lsn(value: bytes) -> int:
    """The LSN of the change a Debezium record carries."""
    return int(json.loads(value)["payload"]["source"]["lsn"])


class ProducerSource:
    """The lab's producer (see the module's doc)."""

    report = None
    database = ""  # no database of its own

    def __init__(self, env: Environment, scenario: Scenario, topic: str, ledger_path: Path) -> None:
        self.env, self.scenario, self.topic, self.ledger_path = env, scenario, topic, ledger_path
        self.targets: list[Target] = []
        self.supervisors: list[RuntimeSupervisor] = []
        self._ledger: LedgerArrays | None = None

    def start(self) -> None:
        create_topic(self.env.kafka_bootstrap, self.topic, self.scenario.partitions)

    def await_ready(self, progress: Progress, stop: threading.Event | None) -> None:
        return None

    def writer(self, hold: Hold | None) -> ProducerThread:
        scenario, env = self.scenario, self.env
        return ProducerThread(
            lambda stop, on_ack: produce(
                generate(scenario.workload),
                bootstrap=env.kafka_bootstrap_for(Link.PRODUCER_KAFKA),
                topic=self.topic,
                ledger_path=self.ledger_path,
                rate=scenario.rate,
                stop=stop,
                on_ack=on_ack,
                spec=scenario.producer,
                seed=scenario.seed,
                hold=hold,
                large=scenario.workload.oversize,
            )
        )

    def end_offsets(self) -> dict[int, int]:
        return self.ledger().end_offsets()

    def ledger(self) -> LedgerArrays:
        """The producer's ledger, read once it is done (complete then)."""
        if self._ledger is None:
            self._ledger = load_ledger(self.ledger_path)
        return self._ledger

    def final_state(self) -> FinalState:
        raise LabError("a current-state sink judges a database's tables: the producer has none")

    def stage(self, progress: Progress) -> tuple[list[StoredTwice], RelayStage | None]:
        """The topic holds every record the broker acknowledged (else ``BrokerLostData``);
        the records it holds more than once (a producer's retry Kafka stored again)."""
        stored = topic_event_ids(self.env.kafka_bootstrap, self.topic)
        rows = list(
            read_ledger(self.ledger_path)
        )  # read twice: for what is missing, and what twice
        missing = missing_from_topic(rows, stored)
        if missing:
            examples = "; ".join(
                f"{m.row.event_id} acked at partition {m.row.partition} offset {m.row.offset}"
                + (f" (holds {m.found})" if m.found else "")
                for m in missing[:3]
            )
            raise BrokerLostData(
                f"the broker acknowledged {len(missing)} records of {self.topic} it does not "
                f"hold (e.g. {examples}); this is a defect of the environment (see "
                "harness/workload/verify.py), so no verdict is given"
            )
        again = stored_twice(rows, stored)
        if again:
            progress(
                f"    the topic holds {sum(t.extra for t in again)} record(s) more than once (a "
                f"producer's retry Kafka stored again: "
                f"{'; '.join(t.describe() for t in again[:3])}): copies every consumer was "
                "handed, counted as the topic's, not a variant's"
            )
        return again, None

    def check(self) -> None:
        return None

    def events(self) -> list[HistoryEvent]:
        return []

    def close(self) -> list[str]:
        return [self.topic]
