"""The producer: sends the workload, keyed by order_id, and ledgers every acknowledgement."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from harness.kafka.clients import client_log, producer_config
from harness.workload.events import ChangeEvent
from harness.workload.ledger import LedgerRow, LedgerWriter

MODES = ("idempotent", "transactional")


@dataclass(frozen=True)
class ProducerSpec:
    """How the workload is produced. ``idempotent`` (the default): acks=all with idempotence.
    ``transactional``: Kafka transactions of ``transaction_size`` records, a seeded
    ``abort_fraction`` of them aborted - seed 002's "Kafka transactional commit": exactly once
    on the producer side, which read_committed consumers (the lab's) see, aborted ones never."""

    mode: str = "idempotent"
    transaction_size: int = 50
    abort_fraction: float = 0.0

    @property
    def transactional(self) -> bool:
        return self.mode == "transactional"

    def problems(self) -> list[tuple[str, str]]:
        found = []
        if self.mode not in MODES:
            found.append(("mode", f"must be one of {', '.join(MODES)}, got {self.mode!r}"))
        if self.transaction_size < 1:
            found.append(("transaction_size", f"must be >= 1, got {self.transaction_size}"))
        if not 0 <= self.abort_fraction < 1:
            found.append(("abort_fraction", f"must be in [0, 1), got {self.abort_fraction}"))
        if self.abort_fraction and not self.transactional:
            found.append(("abort_fraction", "only a transactional producer aborts"))
        return found


def aborted_ledger(ledger_path: Path) -> Path:
    """Where a transactional producer ledgers the records of the transactions it aborted: acked
    by the brokers, then aborted - no consumer of read_committed may ever see them."""
    return ledger_path.with_name(ledger_path.stem + ".aborted.csv")


@dataclass(frozen=True)
class Hold:
    """A pause in the workload: after ``after`` records, the producer waits until ``until`` is
    set (or it is stopped), then goes on at its rate from there. Runs side by side set it once
    every lane wrote a batch: a listener joins and writes long before a Spark driver's first
    batch is in on a loaded machine (docs/performance.md), and the listeners had consumed all
    but the end of commit-failure-window's workload when its fault's clock started (their
    commits then never failed: naive stored no duplicate)."""

    after: int
    until: threading.Event
    reserve: Reserve | None = None  # the workload's last records, kept for faults to come

    def at(self, spec: ProducerSpec) -> Hold:
        """Moved to the end of a transaction: a transactional producer's records are read
        (read_committed) only once it commits."""
        if not spec.transactional:
            return self
        size = spec.transaction_size
        reserve = self.reserve
        if reserve is not None:
            reserve = Reserve(-(-reserve.start // size) * size, reserve.flowing)
        return Hold(-(-self.after // size) * size, self.until, reserve)

    def pause(self, produced: int) -> threading.Event | None:
        """What the workload waits for before its record after ``produced`` (None: nothing)."""
        if produced == self.after and not self.until.is_set():
            return self.until
        reserve = self.reserve
        if reserve is not None and produced >= reserve.start and not reserve.flowing.is_set():
            return reserve.flowing
        return None


@dataclass(frozen=True)
class Reserve:
    """The workload's records from the ``start``-th on go out only while ``flowing`` is set:
    while a fault that starts once another's window has ended waits for that window, the
    stream is not to run dry before it. A managed upgrade's rolling restart took from 40 s to
    over 150 s on loaded machines, and a consumer pause after it found every record consumed
    and never fired (msk-rolling-upgrade-java); the post-mortem's stream ran throughout."""

    start: int
    flowing: threading.Event


PRODUCER_LOG = "producer.log"  # beside the ledger: what the Kafka client said during the run
LARGE_RECORD_BYTES = 64 * 1024 * 1024  # what the producer takes, uncompressed, of an oversize one


@dataclass(frozen=True)
class ProduceSummary:
    produced: int  # events handed to the client
    acked: int  # acknowledged by the broker (= ledger rows; committed, if transactional)
    failed: int  # delivery failed for good: not in the ledger, not expected anywhere
    seconds: float
    aborted: int = 0  # acked, then aborted with their transaction (see aborted_ledger)


def produce(
    events: Iterable[ChangeEvent],
    *,
    bootstrap: str,
    topic: str,
    ledger_path: Path,
    rate: float = 0.0,
    stop: threading.Event | None = None,
    on_progress: Callable[[int], None] | None = None,
    on_ack: Callable[[int], None] | None = None,
    spec: ProducerSpec = ProducerSpec(),
    seed: int = 0,
    hold: Hold | None = None,
    large: bool = False,
) -> ProduceSummary:
    """Send ``events`` in order; ``rate`` caps events per second (0: as fast as possible).
    ``on_ack`` is called with the number ledgered so far after each acknowledgement (for a
    transactional producer: after each commit, for the records of that transaction). ``hold``:
    where the workload pauses, and until when; ``large``: some records are over MongoDB's
    document limit."""
    started = time.monotonic()
    hold = None if hold is None else hold.at(spec)
    paced_from, paced = started, 0  # pacing restarts after a hold
    produced = failed = 0
    pending: list[LedgerRow] = []  # acked, not ledgered yet (a transaction's, until its end)
    aborted: list[LedgerRow] = []
    settings: dict[str, object] = {}
    if large:
        # A record past MongoDB's document limit reaches a topic of the brokers' default limits
        # as production's do: compressed, its batch far below them.
        settings |= {"compression.type": "zstd", "message.max.bytes": LARGE_RECORD_BYTES}
    if spec.transactional:
        # At least the producer's message timeout (librdkafka refuses a shorter one).
        settings |= {"transactional.id": f"chaoslab-{topic}", "transaction.timeout.ms": 120_000}
    with client_log(ledger_path.with_name(PRODUCER_LOG)) as log:
        producer = Producer(producer_config(bootstrap, logger=log, **settings))
        aborts = random.Random(f"{seed}:transactions")

        def delivered(event: ChangeEvent) -> Callable[[KafkaError | None, Message], None]:
            def callback(err: KafkaError | None, msg: Message) -> None:
                nonlocal failed
                if err is not None:
                    failed += 1
                    return
                # An ack without an offset happens (an idempotent retry the broker had already
                # stored); the ledger keeps the ack with offset -1.
                offset = msg.offset()
                partition = msg.partition()
                assert partition is not None  # a delivered record always has its partition
                pending.append(
                    LedgerRow(
                        event.seq, event.event_id, event.order_id, event.version, event.kind,
                        topic, partition, offset if offset is not None and offset >= 0 else -1,
                        time.time(),
                    )
                )  # fmt: skip

            return callback

        with LedgerWriter(ledger_path) as ledger:
            ledgered = 0

            def keep() -> None:
                nonlocal ledgered
                for row in pending:
                    ledger.append(row)
                    ledgered += 1
                    if on_ack is not None:
                        on_ack(ledgered)
                pending.clear()

            def end_transaction() -> None:
                producer.flush()  # every record of it acked first
                if aborts.random() < spec.abort_fraction:
                    producer.abort_transaction()
                    aborted.extend(pending)
                    pending.clear()
                else:
                    producer.commit_transaction()
                    keep()

            if spec.transactional:
                producer.init_transactions()
                producer.begin_transaction()

            def stopped() -> bool:
                return stop is not None and stop.is_set()

            for event in events:
                if stopped():
                    break
                waits = hold.pause(produced) if hold is not None else None
                if waits is not None:
                    while not waits.wait(0.05) and not stopped():
                        # What was sent is acknowledged (and ledgered) meanwhile.
                        producer.poll(0.05)
                        if not spec.transactional:
                            keep()
                    if stopped():
                        break
                    paced_from, paced = time.monotonic(), produced
                if rate > 0:
                    # Pace against the start, so a slow moment is caught up rather than lost.
                    lag = paced_from + (produced - paced) / rate - time.monotonic()
                    if lag > 0:
                        producer.poll(lag)
                while True:
                    try:
                        producer.produce(
                            topic,
                            key=event.key,
                            value=event.value(),
                            headers={"event_id": event.event_id.encode()},
                            on_delivery=delivered(event),
                        )
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        producer.poll(0.1)
                produced += 1
                producer.poll(0)
                if not spec.transactional:
                    keep()
                elif produced % spec.transaction_size == 0:
                    end_transaction()
                    producer.begin_transaction()
                if on_progress is not None and produced % 1000 == 0:
                    on_progress(produced)
            if spec.transactional:
                end_transaction()
            while producer.flush(1.0) > 0:
                if stop is not None and stop.is_set():
                    break
            keep()
        if aborted:
            with LedgerWriter(aborted_ledger(ledger_path)) as out:
                for row in aborted:
                    out.append(row)
        return ProduceSummary(produced, ledgered, failed, time.monotonic() - started, len(aborted))
