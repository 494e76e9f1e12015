from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo import ReplaceOne
from pymongo.client_session import ClientSession
from pymongo.database import Database
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from harness.pipeline.batch import Batch
from harness.pipeline.variants.base import (
    SEED_000_KEY,
    Variant,
    WriteContext,
    landing_doc,
    project,
    seed_000_key,
)

OFFSETS = "consumer_offsets"


@dataclass
class Transactional(Variant):
    """One MongoDB transaction per batch writes the records AND the consumer offsets.

    Seed 000's final design: "we simulated it by co-locating the consumer offset within the
    same transactional boundary as our data ... If the crash happens after the MongoDB commit
    but before the RocketMQ acknowledgement, on restart, the messages are redelivered. However,
    our consumer logic first checks the stored offset in MongoDB. If the incoming message's
    offset is less than or equal to the stored offset, it's a duplicate and can be safely
    ignored." The write itself is still the seed's idempotent upsert on ``payload.source.txId``
    + ``order_id`` under a unique index ("Idempotency is still key. We use it as a safety net"),
    which also absorbs an upstream resend of a change - a new record, at a new offset.
    Offsets live in ``consumer_offsets`` with ``_id = group@topic@partition``; the
    listener seeks to them on assignment, the Spark runtime skips by them; Kafka (or Spark's
    checkpoint) is told only after MongoDB committed. Transient errors and an unknown commit
    result are retried the way the driver documents, through ``with_transaction``.
    """

    name = "transactional"
    collections = (*Variant.collections, OFFSETS)

    def prepare(self, db: Database[dict[str, Any]]) -> None:
        super().prepare(db)
        db.events.create_index(SEED_000_KEY, unique=True)

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        db = ctx.db

        def body(session: ClientSession) -> None:
            ids = [batch.offsets_store_id(p) for p in batch.last_offsets]
            stored = {
                d["_id"]: d["offset"]
                for d in db[OFFSETS].find({"_id": {"$in": ids}}, session=session)
            }
            fresh = [
                r
                for r in batch.records
                if r.offset > stored.get(batch.offsets_store_id(r.partition), -1)
            ]
            docs = [landing_doc(r, batch) for r in fresh]
            for chunk in ctx.chunks(docs):
                ops = [ReplaceOne(seed_000_key(d), d, upsert=True) for d in chunk]
                db.events.bulk_write(ops, ordered=False, session=session)
            project(db.orders, fresh, session=session)
            for partition, last in batch.last_offsets.items():
                store_id = batch.offsets_store_id(partition)
                if last > stored.get(store_id, -1):
                    db[OFFSETS].update_one(
                        {"_id": store_id}, {"$set": {"offset": last}}, upsert=True, session=session
                    )

        with ctx.client.start_session() as session:
            session.with_transaction(
                body,
                read_concern=ReadConcern("majority"),
                write_concern=WriteConcern("majority"),
                max_commit_time_ms=ctx.max_commit_time_ms,
            )

    def stored_offsets(
        self, db: Database[dict[str, Any]], group: str, topic: str
    ) -> dict[int, int]:
        prefix = f"{group}@{topic}@"
        return {
            int(d["_id"][len(prefix) :]): d["offset"]
            for d in db[OFFSETS].find({"_id": {"$regex": f"^{prefix}"}})
        }

    def resume_positions(
        self, db: Database[dict[str, Any]], group: str, topic: str
    ) -> dict[int, int]:
        return {p: offset + 1 for p, offset in self.stored_offsets(db, group, topic).items()}
