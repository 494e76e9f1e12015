"""A CDC source's topic stage as the checker's inputs (pure: no servers).

The database's committed changes (``truth``) are the expected changes, each identified as the
sinks identify a change, (order_id, version); what the change topic holds is judged against
them like a sink's landing collection. So the stage is one ``check``:

    committed -> topic:  check(committed_ledger(truth), topic_snapshot(records))

Over a table that had rows when Debezium started, the expected changes are those rows, each at
its version (what a snapshot reads), then the changes committed after (``expected_changes``).

A copy on the topic is the source's (Debezium re-emitting what it had sent before its offsets
were flushed); a committed change never on the topic is lost at the source.

Each lane's sink is judged end to end, against the same commits: ``sink_ledger`` places each
committed change at its first record on the topic (where the lanes' consumers met it) and lists
every further record of it as a ``copy`` - a record handed to the consumers again, which a sink
keyed on the change's source identity stores once and a naive one stores again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.checker.model import LedgerArrays, SinkSnapshot
from harness.checker.state import FinalState
from harness.kafka.clients import StoredRecord
from harness.sources.truth import CommittedChange
from harness.workload.events import TABLE, Op, change_event_id, debezium_change
from harness.workload.ledger import Change, LedgerRow, placed


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
    """The change a record carries (None: a delete's tombstone). A snapshot's read is the
    change that made the row's version it read: a sink stores it as it stores that change."""
    if record.value is None:
        return None
    change = debezium_change(json.loads(record.value)["payload"])
    return SourceChange(
        record.partition, record.offset, int(change.tx_id), change.lsn, change.op,
        change.order_id, change.version, record.timestamp,
    )  # fmt: skip


def expected_changes(
    changes: Sequence[CommittedChange], snapshot: Mapping[int, int], boundary: int, at: float
) -> list[CommittedChange]:
    """What a source that started on a table with rows is to put on its topic: the rows its
    snapshot reads (``snapshot``: order_id -> version when Debezium started, at LSN
    ``boundary``, read at ``at``) - a snapshot carries a row's version, not the changes that
    made it - then every change committed after."""
    read = [CommittedChange(boundary, 0, TABLE, Op.CREATE, order_id, version, {}, at)
            for order_id, version in sorted(snapshot.items())]  # fmt: skip
    return read + [c for c in changes if c.lsn >= boundary]


def snapshots(records: Iterable[StoredRecord]) -> tuple[int, int]:
    """How many snapshots Debezium began and how many it finished on this topic (of one
    table): the records it marks as a snapshot's first and last (``source.snapshot``). A
    snapshot interrupted and taken again from the start shows as two begun and one finished."""
    marks = [json.loads(r.value)["payload"]["source"].get("snapshot") for r in records if r.value]
    # A snapshot marks its first and last record of each table, and of all of them: the run's
    # other table (its end mark) has a topic of its own.
    begun = sum(m in ("first", "first_in_data_collection") for m in marks)
    return begun, sum(m in ("last", "last_in_data_collection") for m in marks)


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


def sink_ledger(
    changes: Sequence[CommittedChange], records: Iterable[StoredRecord], topic: str
) -> list[LedgerRow]:
    """The committed changes as the sinks' ledger (``harness.workload.ledger.placed``), each at
    its commit time. Event ids are the records' own (``DebeziumChange.event_id``); a snapshot's
    read has the LSN Debezium gave it, not the one expected of it."""
    on_topic = (
        Change(change_event_id(s.lsn, s.order_id), s.order_id, s.version, s.timestamp,
               s.partition, s.offset)
        for record in records if (s := source_change(record)) is not None
    )  # fmt: skip
    expected = [Change(change_event_id(c.lsn, c.order_id), c.order_id, c.version, c.committed_at)
                for c in changes]  # fmt: skip
    return placed(expected, on_topic, topic)


def final_state(changes: Sequence[CommittedChange], rows: Mapping[int, int]) -> FinalState:
    """The database at the end, for a current-state sink: the table's ``rows`` (order_id ->
    version, as read from it), and each order whose last committed change deleted its row."""
    last: dict[int, CommittedChange] = {}
    for change in changes:  # commit order: an order's last is its newest
        last[change.order_id] = change
    deleted = {o: c.version for o, c in last.items() if c.op is Op.DELETE and o not in rows}
    return FinalState(dict(rows), deleted)
