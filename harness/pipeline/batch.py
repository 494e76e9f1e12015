"""What both runtimes hand to a variant: a batch of parsed records, poison already removed.

Parsing and dead-lettering happen here, once, for every runtime and variant: a poison record
goes to ``<group>.dlq`` with the reason and its origin in headers, is counted, and never stops
the pipeline.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Producer

from harness.kafka.clients import producer_config
from harness.workload.events import ParsedEvent, ParseError, parse
from harness.workload.producer import LARGE_RECORD_BYTES
from harness.workload.shapes import MONGO_DOCUMENT_LIMIT

TOO_LARGE = f"a document over MongoDB's {MONGO_DOCUMENT_LIMIT // (1024 * 1024)} MiB limit"


@dataclass(frozen=True)
class RawRecord:
    """A record as the runtime received it from Kafka."""

    partition: int
    offset: int
    value: bytes | None


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    event: ParsedEvent


@dataclass(frozen=True)
class Poison:
    partition: int
    offset: int
    value: bytes | None
    reason: str


@dataclass(frozen=True)
class Batch:
    batch_id: int  # Spark's batch_id, or the listener process's batch counter
    topic: str
    group: str  # the consumer group (or Spark query) the batch belongs to
    records: tuple[Record, ...]  # the parsed records, in the order received
    last_offsets: dict[int, int]  # partition -> last offset in the batch, poison included

    def first_offsets(self) -> dict[int, int]:
        """Partition -> first offset of the batch's parsed records."""
        firsts: dict[int, int] = {}
        for r in self.records:
            firsts.setdefault(r.partition, r.offset)
        return firsts

    def offsets_store_id(self, partition: int) -> str:
        """Seed 000's ``consumer_offsets`` key: ``group@topic@partition``."""
        return f"{self.group}@{self.topic}@{partition}"


def split(
    batch_id: int, topic: str, group: str, raw: Iterable[RawRecord]
) -> tuple[Batch, list[Poison]]:
    records: list[Record] = []
    poison: list[Poison] = []
    last: dict[int, int] = {}
    for r in raw:
        last[r.partition] = max(last.get(r.partition, -1), r.offset)
        if r.value is None:
            # A tombstone (Debezium's after each delete, for compaction): no change to store,
            # and not poison.
            continue
        if len(r.value) > MONGO_DOCUMENT_LIMIT:
            # No write of it can succeed (the driver refuses it, DocumentTooLarge, before
            # sending): stored nowhere, it would be retried for ever.
            poison.append(Poison(r.partition, r.offset, r.value, TOO_LARGE))
            continue
        try:
            records.append(Record(r.partition, r.offset, parse(r.value)))
        except ParseError as exc:
            poison.append(Poison(r.partition, r.offset, r.value, str(exc)))
    return Batch(batch_id, topic, group, tuple(records), last), poison


def dead_letter_topic(group: str) -> str:
    """Each consumer group (one per variant) has its own dead-letter topic."""
    return f"{group}.dlq"


class DeadLetters:
    """Sends poison records to the dead-letter topic and waits for the acknowledgements."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.topic = dead_letter_topic(group)
        # A record over MongoDB's document limit goes there too: compressed, as it came.
        large = {"compression.type": "zstd", "message.max.bytes": LARGE_RECORD_BYTES}
        self._producer = Producer(producer_config(bootstrap, **large))

    def send(self, poison: list[Poison]) -> None:
        errors: list[str] = []

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        for p in poison:
            self._producer.produce(
                self.topic,
                value=p.value,
                headers={
                    "error": p.reason.encode(),
                    "origin-partition": str(p.partition).encode(),
                    "origin-offset": str(p.offset).encode(),
                },
                on_delivery=on_delivery,
            )
        unsent = self._producer.flush(120)
        if unsent or errors:
            # Committing past a record the dead-letter topic does not hold would lose it.
            raise RuntimeError(f"dead-letter topic did not take {unsent} records: {errors[:3]}")
