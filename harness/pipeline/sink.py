"""A variant's MongoDB database for a run: made ready before the consumers start
(``prepare_sink``), and read back afterwards as the snapshot the checker judges
(``read_sink``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from bson import ObjectId
from pymongo import MongoClient
from pymongo.database import Database

from harness.checker.bad_records import DeadLetter
from harness.checker.check import MAX_ORDER_ID
from harness.checker.model import SinkSnapshot
from harness.kafka.clients import read_topic
from harness.pipeline.batch import dead_letter_topic
from harness.pipeline.variants import Variant
from harness.pipeline.variants.base import Landing
from harness.workload.events import Kind
from harness.workload.ledger import read_ledger
from harness.workload.shapes import TRACE

CURSOR_BATCH = 10_000


def slug(text: str) -> str:
    """A label as a name part of a lane's folder, group, topic or database."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def database_for(run_id: str, lane: str) -> str:
    """The database of one variant's lane in one run: its own, so runs never share a sink
    (MongoDB allows 63 characters in a database name)."""
    return f"cl_{run_id}_{lane.replace('-', '_')}"[:63]


def prepare_sink(mongo_uri: str, database: str, variant: Variant) -> None:
    """Whatever ``variant`` needs in its fresh database before the first write (indexes...)."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    with client:
        variant.prepare(client[database])


# An event id the ledger does not hold (a phantom) stands for this change: no order has it.
UNKNOWN_CHANGE = (MAX_ORDER_ID, 0)


def read_sink(
    mongo_uri: str,
    database: str,
    variant: Variant,
    *,
    bootstrap: str,
    topic: str,
    group: str,
    ledger: Path | None = None,
) -> SinkSnapshot:
    """What ``variant`` left in ``database`` and in its dead-letter topic (``ledger``: where
    the run's event ids are, for a sink that names its changes by them)."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    landing = variant.landing()
    if landing.event_id and ledger is None:
        raise ValueError(f"{variant.label} names its changes by event id: pass the ledger")
    by_event = changes_by_event_id(ledger) if ledger is not None else {}
    with client:
        db = client[database]
        order_id, version, written, poison_stored = _changes(db, landing, by_event)
        current = _current(db, landing)
        stored_offsets = variant.stored_offsets(db, group, topic)
    dlq = dead_letters(bootstrap, group)
    return SinkSnapshot(
        order_id,
        version,
        written,
        *current,
        dead_lettered_partition=np.array([d.partition for d in dlq], dtype=np.int32),
        dead_lettered_offset=np.array([d.offset for d in dlq], dtype=np.int64),
        dead_lettered_reason=tuple(d.reason for d in dlq),
        stored_offsets=stored_offsets,
        projection_kept=bool(landing.current),
        poison_stored=poison_stored,
    )


def changes_by_event_id(ledger: Path) -> dict[str, tuple[int, int] | None]:
    """Every acked event id of the run, with the business change it carries (None: a poison
    record, which carries none)."""
    return {
        row.event_id: None if row.kind is Kind.POISON else (row.order_id, row.version)
        for row in read_ledger(ledger)
    }


def _changes(
    db: Database[dict[str, Any]],
    landing: Landing,
    by_event: Mapping[str, tuple[int, int] | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(order_id, version, written_at) of every document in the landing collection that is a
    change, and how many are poison records. A document keyed by its fields is a bad record's
    too when it carries a bad record's event id (a shape the consumer parsed: its order_id
    "17", a field added): not a copy of the change it names."""
    fields: tuple[str, ...] = (
        (landing.event_id, TRACE)
        if landing.event_id
        else (landing.order_id, landing.version, "event_id", TRACE)
    )
    found = db[landing.collection].find(
        {}, {"_id": 1, **dict.fromkeys(fields, 1), "_lab.written_at": 1}, batch_size=CURSOR_BATCH
    )
    order_ids, versions, written = [], [], []
    poison = 0
    for doc in found:
        # A bad record without an event id carries its own in lab_trace (workload.shapes).
        traced = str(doc.get(landing.event_id or "event_id", doc.get(TRACE)))
        if landing.event_id:
            change = by_event.get(traced, UNKNOWN_CHANGE)
            if change is None:
                poison += 1
                continue
            order_id, version = change
        elif by_event.get(traced, UNKNOWN_CHANGE) is None:
            poison += 1
            continue
        else:
            order_id, version = doc[landing.order_id], doc[landing.version]
        order_ids.append(order_id)
        versions.append(version)
        written.append(written_at(doc))
    return (
        np.array(order_ids, dtype=np.int64),
        np.array(versions, dtype=np.int64),
        np.array(written, dtype=np.float64),
        poison,
    )


def read_state(mongo_uri: str, database: str, landing: Landing) -> tuple[dict[int, int], int]:
    """A current-state sink's rows (order_id -> the version of its document, by
    ``landing.row_key``) and how many documents its collection holds."""
    assert landing.row_key, "not a current-state landing"
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    rows: dict[int, int] = {}
    with client:
        docs = list(client[database][landing.collection].find({}, batch_size=CURSOR_BATCH))
    for doc in docs:
        if (row := landing.row(doc)) is not None:
            rows[row[0]] = row[1]
    return rows, len(docs)


def written_at(doc: Mapping[str, Any]) -> float:
    """When a document was written: the lab's stamp; else, for a document whose _id the driver
    minted at the insert (an ObjectId: seed 002's listener), that id's second; else unknown
    (NaN: a user's program or Spark job that stamps nothing, keyed by its own id) - the report
    places no mark for it."""
    stamped = doc.get("_lab", {}).get("written_at")
    if stamped is not None:
        return float(stamped)
    if isinstance(doc.get("_id"), ObjectId):
        return float(doc["_id"].generation_time.timestamp())
    return math.nan


def _current(db: Database[dict[str, Any]], landing: Landing) -> tuple[np.ndarray, np.ndarray]:
    """(order_id, version) of every order in the current-state collection (if it keeps one)."""
    found = []
    if landing.current:
        found = list(db[landing.current].find({}, {"version": 1}, batch_size=CURSOR_BATCH))
    return (
        np.array([d["_id"] for d in found], dtype=np.int64),
        np.array([d["version"] for d in found], dtype=np.int64),
    )


# Where a dead-lettered record came from, and why it was sent: the lab's runtimes' headers, or
# Kafka Connect's (errors.deadletterqueue.context.headers.enable, which the lab sets on a Connect
# lane's DLQ; the exception's class and message).
ORIGIN_HEADERS = (
    ("origin-partition", "origin-offset", ("error",)),
    ("__connect.errors.partition", "__connect.errors.offset",
     ("__connect.errors.exception.class.name", "__connect.errors.exception.message")),
)  # fmt: skip


def dead_letters(bootstrap: str, group: str) -> list[DeadLetter]:
    """The original of every record in a group's dead-letter topic, with the reason given, in
    the topic's order (a sink reports a failed bulk's records in the bulk's order)."""
    found = []
    records = read_topic(bootstrap, dead_letter_topic(group))
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        partition, offset, why = next(h for h in ORIGIN_HEADERS if h[0] in r.headers)
        found.append(DeadLetter(int(r.headers[partition]), int(r.headers[offset]),
                                reason_of(r.headers, why)))  # fmt: skip
    return found


REASON_CHARS = 300  # a converter's message quotes the record's value: kept to its start


def reason_of(headers: dict[str, bytes], names: tuple[str, ...]) -> str:
    """What the headers ``names`` say, in order: a Java exception's class by its own name (the
    connector's dlq package's), then its message where it has one."""
    said = []
    for name in names:
        if value := headers.get(name):
            text = value.decode(errors="replace")
            said.append(text.rsplit(".", 1)[-1] if name.endswith(".class.name") else text)
    reason = ": ".join(said)
    return reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS] + "..."
