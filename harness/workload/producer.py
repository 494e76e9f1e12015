"""The producer: sends the workload, keyed by order_id, and ledgers every acknowledgement."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from harness.kafka import producer_config
from harness.workload.events import ChangeEvent
from harness.workload.ledger import LedgerRow, LedgerWriter


@dataclass(frozen=True)
class ProduceSummary:
    produced: int  # events handed to the client
    acked: int  # acknowledged by the broker (= ledger rows)
    failed: int  # delivery failed for good: not in the ledger, not expected anywhere
    seconds: float


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
) -> ProduceSummary:
    """Send ``events`` in order; ``rate`` caps events per second (0: as fast as possible).
    ``on_ack`` is called with the number acknowledged so far after each acknowledgement."""
    started = time.monotonic()
    produced = acked = failed = 0
    producer = Producer(producer_config(bootstrap))

    with LedgerWriter(ledger_path) as ledger:

        def delivered(event: ChangeEvent) -> Callable[[KafkaError | None, Message], None]:
            def callback(err: KafkaError | None, msg: Message) -> None:
                nonlocal acked, failed
                if err is not None:
                    failed += 1
                    return
                acked += 1
                # An ack without an offset happens (an idempotent retry the broker had
                # already stored); the ledger keeps the ack with offset -1.
                offset = msg.offset()
                ledger.append(
                    LedgerRow(
                        event.seq,
                        event.event_id,
                        event.order_id,
                        event.version,
                        event.kind,
                        topic,
                        msg.partition(),
                        offset if offset is not None and offset >= 0 else -1,
                        time.time(),
                    )
                )
                if on_ack is not None:
                    on_ack(acked)

            return callback

        for event in events:
            if stop is not None and stop.is_set():
                break
            if rate > 0:
                # Pace against the start, so a slow moment is caught up rather than lost.
                lag = started + produced / rate - time.monotonic()
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
            if on_progress is not None and produced % 1000 == 0:
                on_progress(produced)
        while producer.flush(1.0) > 0:
            if stop is not None and stop.is_set():
                break
    return ProduceSummary(produced, acked, failed, time.monotonic() - started)
