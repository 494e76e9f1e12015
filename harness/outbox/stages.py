"""An outbox run's stages as the checker's inputs (pure: no servers).

The entries MongoDB acknowledged are the expected changes (an entry is (order_id, version));
what the target topics hold is judged against them like a sink's landing collection (copies,
losses), and so is what the downstream sink stored. So each stage is one ``check``:

    written -> published:  check(written, published)   lost at publish, copies in the topics
    written -> stored:     check(written, stored)      end to end

and the counts add up: expected = unique published + lost at publish.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from harness.checker.model import LedgerArrays, SinkSnapshot
from harness.kafka.clients import StoredRecord
from harness.outbox.writer import WrittenEntry
from harness.workload.ledger import Change


def written_ledger(entries: Sequence[WrittenEntry]) -> LedgerArrays:
    """The entries as the checker's ledger (no Kafka position: -1)."""
    return LedgerArrays.of_changes([(e.order_id, e.version, e.acked_at) for e in entries])


def published_snapshot(records: Iterable[StoredRecord]) -> SinkSnapshot:
    """The target topics' records as a snapshot: one change per record (its entry's order and
    version, at the record's timestamp); the projection is each order's newest version."""
    changes: list[tuple[int, int, float]] = []
    newest: dict[int, int] = {}
    for r in records:
        entry = json.loads(r.value or b"{}")
        order_id, version = int(entry["order_id"]), int(entry["version"])
        changes.append((order_id, version, r.timestamp))
        newest[order_id] = max(newest.get(order_id, 0), version)
    return SinkSnapshot.from_lists(changes, sorted(newest.items()))


def published_changes(records: Iterable[StoredRecord]) -> list[Change]:
    """The target topic's records as the changes they carry: each entry's event id (its
    ``_id``) and (order_id, version), at its position and timestamp."""
    changes = []
    for r in records:
        entry = json.loads(r.value or b"{}")
        order_id, version = int(entry["order_id"]), int(entry["version"])
        changes.append(
            Change(str(entry["event_id"]), order_id, version, r.timestamp, r.partition, r.offset)
        )
    return changes
