"""Does the topic hold what the broker acknowledged? The ledger is only ground truth if so.

A broker can acknowledge a record it does not keep (the lab's first broker, Tansu, did: an
idempotent producer's retry was answered "already stored" with nothing behind it; a Kafka
cluster with acks=all and min.insync.replicas=2 should not, but an unclean leader election
would). A loss like that is the environment's, not a variant's; this finds it before any verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.kafka.clients import read_topic
from harness.workload.ledger import LedgerRow


@dataclass(frozen=True)
class Missing:
    row: LedgerRow
    found: str | None  # the event_id at the acked offset, if another record is there


def topic_event_ids(bootstrap: str, topic: str) -> dict[tuple[int, int], str]:
    """(partition, offset) -> the event_id header of every record of ``topic``."""
    return {
        (r.partition, r.offset): r.headers.get("event_id", b"").decode()
        for r in read_topic(bootstrap, topic)
    }


def stored_again(stored: Mapping[tuple[int, int], str]) -> int:
    """Records beyond the first of each event id the topic holds: a producer's retry that the
    broker stored again (each is a copy every consumer is handed, whatever it does)."""
    ids = Counter(event_id for event_id in stored.values() if event_id)
    return sum(n - 1 for n in ids.values())


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
