"""A CDC source's topic stage as the checker's inputs (pure: no servers).

The database's committed changes (``truth``) are the expected changes, each identified as the
sinks identify a change, (order_id, version); what the change topic holds is judged against
them like a sink's landing collection. So the stage is one ``check``:

    committed -> topic:  check(committed_ledger(truth), topic_snapshot(records))

A copy on the topic is the source's (Debezium re-emitting what it had sent before its offsets
were flushed); a committed change never on the topic is lost at the source.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.checker.model import LedgerArrays, SinkSnapshot
from harness.kafka.clients import StoredRecord
from harness.sources.truth import CommittedChange
from harness.workload.events import DEBEZIUM_READ, Op, debezium_change


@dataclass(frozen=True)
class SourceChange:
    """A change record on the topic, as Debezium wrote it: the source's identity of the change
    (its transaction and LSN) and the sinks' (order_id, version)."""

    partition: int
    offset: int
    tx_id: int
    lsn: int
    op: Op
    order_id: int
    version: int
    timestamp: float


def source_change(record: StoredRecord) -> SourceChange | None:
    """The change a record carries (None: a delete's tombstone, or a snapshot's read)."""
    if record.value is None:
        return None
    payload = json.loads(record.value)["payload"]
    if payload["op"] == DEBEZIUM_READ:
        return None
    change = debezium_change(payload)
    return SourceChange(
        record.partition, record.offset, int(change.tx_id), change.lsn, change.op,
        change.order_id, change.version, record.timestamp,
    )  # fmt: skip


def committed_ledger(changes: Sequence[CommittedChange]) -> LedgerArrays:
    """The committed changes as the checker's ledger (no Kafka position: -1), each at its
    commit time."""
    return LedgerArrays.of_changes([(c.order_id, c.version, c.committed_at) for c in changes])


def topic_snapshot(records: Iterable[StoredRecord]) -> SinkSnapshot:
    """The change topic's records as a snapshot: one change per record, at the record's
    timestamp; the projection is each order's newest version."""
    changes: list[tuple[int, int, float]] = []
    newest: dict[int, int] = {}
    for record in records:
        if (change := source_change(record)) is None:
            continue
        changes.append((change.order_id, change.version, change.timestamp))
        newest[change.order_id] = max(newest.get(change.order_id, 0), change.version)
    return SinkSnapshot.from_lists(changes, sorted(newest.items()))
