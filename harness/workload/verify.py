"""Does the topic hold what the broker acknowledged? The ledger is only ground truth if so.

A broker can acknowledge a record it does not keep (the lab's first broker, Tansu, did: an
idempotent producer's retry was answered "already stored" with nothing behind it; a Kafka
cluster with acks=all and min.insync.replicas=2 should not, but an unclean leader election
would). A loss like that is the environment's, not a variant's; this finds it before any verdict.
"""

from __future__ import annotations

from collections import defaultdict
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


@dataclass(frozen=True)
class StoredTwice:
    """An acknowledged record the topic holds more than once (a producer's retry the broker
    stored again): each copy is one every consumer is handed, whatever it does."""

    row: LedgerRow  # its acknowledgement
    at: tuple[tuple[int, int], ...]  # (partition, offset) of every copy, in order

    @property
    def extra(self) -> int:
        return len(self.at) - 1

    def describe(self) -> str:
        where = ", ".join(f"p{p}@{o}" for p, o in self.at)
        return f"{self.row.event_id} stored {len(self.at)} times ({where})"


def stored_twice(
    rows: Iterable[LedgerRow], stored: Mapping[tuple[int, int], str]
) -> list[StoredTwice]:
    """The acknowledged records ``stored`` holds more than once (by event id), in ack order."""
    copies: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for where, event_id in sorted(stored.items()):
        if event_id:
            copies[event_id].append(where)
    found: dict[str, StoredTwice] = {}
    for row in rows:
        at = copies.get(row.event_id, ())
        if len(at) > 1 and row.event_id not in found:
            found[row.event_id] = StoredTwice(row, tuple(at))
    return list(found.values())


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
