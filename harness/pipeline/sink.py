"""A variant's MongoDB database for a run: made ready before the consumers start
(``prepare_sink``), and read back afterwards as the snapshot the checker judges
(``read_sink``)."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
from pymongo import MongoClient
from pymongo.database import Database

from harness.checker import SinkSnapshot
from harness.kafka.clients import read_topic
from harness.pipeline.batch import dead_letter_topic
from harness.pipeline.variants import Variant

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


def read_sink(
    mongo_uri: str, database: str, variant: Variant, *, bootstrap: str, topic: str, group: str
) -> SinkSnapshot:
    """What ``variant`` left in ``database`` and in its dead-letter topic."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    with client:
        return snapshot(client[database], variant, bootstrap=bootstrap, topic=topic, group=group)


def snapshot(
    db: Database[dict[str, Any]], variant: Variant, *, bootstrap: str, topic: str, group: str
) -> SinkSnapshot:
    changes = db.events.find(
        {}, {"_id": 0, "order_id": 1, "version": 1, "_lab.written_at": 1}, batch_size=CURSOR_BATCH
    )
    order_ids, versions, written = [], [], []
    for doc in changes:
        order_ids.append(doc["order_id"])
        versions.append(doc["version"])
        # A user's Spark job does not stamp its documents: when each copy was written is
        # unknown (NaN), and the report places no mark for it.
        written.append(doc.get("_lab", {}).get("written_at", math.nan))
    projection = list(db.orders.find({}, {"version": 1}, batch_size=CURSOR_BATCH))
    dlq = dead_letter_origins(bootstrap, group)
    return SinkSnapshot(
        changes_order_id=np.array(order_ids, dtype=np.int64),
        changes_version=np.array(versions, dtype=np.int64),
        changes_written_at=np.array(written, dtype=np.float64),
        projection_order_id=np.array([d["_id"] for d in projection], dtype=np.int64),
        projection_version=np.array([d["version"] for d in projection], dtype=np.int64),
        dead_lettered_partition=np.array([p for p, _ in dlq], dtype=np.int32),
        dead_lettered_offset=np.array([o for _, o in dlq], dtype=np.int64),
        stored_offsets=variant.stored_offsets(db, group, topic),
    )


def dead_letter_origins(bootstrap: str, group: str) -> list[tuple[int, int]]:
    """(partition, offset) of the original of every record in a group's dead-letter topic."""
    return [
        (int(r.headers["origin-partition"]), int(r.headers["origin-offset"]))
        for r in read_topic(bootstrap, dead_letter_topic(group))
    ]
