"""Does the topic hold what the broker acknowledged? The ledger is only ground truth if so.

Tansu can acknowledge records it never stored: its idempotent-producer path advances the
producer's sequence (in S3's meta.json) before it writes the batch, so a broker stopped in
between answers the client's retry with DUPLICATE_SEQUENCE_NUMBER, which librdkafka takes as
"already stored" - an ack with base offset -1 and nothing behind it. Real Kafka keeps that state
in the log itself. A loss like that is the environment's, not a variant's; this finds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from harness.environment.readiness import NotReady, wait_for
from harness.kafka import HARNESS_CLIENT, consumer_config, end_offsets
from harness.workload.ledger import LedgerRow


@dataclass(frozen=True)
class Missing:
    row: LedgerRow
    found: str | None  # the event_id at the acked offset, if another record is there


def topic_event_ids(bootstrap: str, topic: str) -> dict[tuple[int, int], str]:
    """(partition, offset) -> the event_id header of every record of ``topic``."""
    ends = end_offsets(bootstrap, topic)
    total = sum(ends.values())
    found: dict[tuple[int, int], str] = {}
    if total == 0:
        return found
    consumer = Consumer(
        consumer_config(bootstrap, "chaoslab-verify", **{"client.id": HARNESS_CLIENT})
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])

    def read_all() -> None:
        for m in consumer.consume(num_messages=5000, timeout=0.5):
            if m.error() is None:
                headers = dict(m.headers() or [])
                found[(m.partition(), m.offset())] = headers.get("event_id", b"").decode()
        if len(found) < total:
            raise NotReady(f"read {len(found)} of {total} records")

    try:
        # The offsets a broker leaves without a record (none expected here) would stall this;
        # the deadline turns that into an error rather than a hang.
        wait_for(read_all, what=f"every record of {topic}", timeout=120)
    finally:
        consumer.close()
    return found


def missing_from_topic(
    rows: Iterable[LedgerRow], stored: dict[tuple[int, int], str]
) -> list[Missing]:
    """Ledger rows whose record is not in the topic (at its offset, or anywhere when the ack
    carried no offset)."""
    ids = set(stored.values())
    missing = []
    for row in rows:
        if row.offset < 0:
            if row.event_id not in ids:
                missing.append(Missing(row, None))
        elif stored.get((row.partition, row.offset)) != row.event_id:
            missing.append(Missing(row, stored.get((row.partition, row.offset))))
    return missing
