from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo import ASCENDING, InsertOne
from pymongo.database import Database

from harness.checker.promise import EXACTLY_ONCE, Promise
from harness.pipeline.batch import Batch
from harness.pipeline.variants.base import (
    Key,
    Variant,
    WriteContext,
    keyed_promise,
    landing_doc,
    project,
    write_ignoring_duplicates,
)


@dataclass
class UniqueIndex(Variant):
    """Plain inserts, a unique index on the message's key, duplicate-key treated as success.

    Seed 002, pattern 3: "Add a unique index on the business key and swallow the duplicate
    exception ... a defense-in-depth layer that catches any future producer-side path that
    forgets to send a key." ``key=event_id`` indexes the producer-minted id; ``key=business``
    indexes (order_id, version), which also refuses an upstream resend.
    """

    name = "unique-index"
    key: Key = Key.EVENT_ID

    @property
    def promise(self) -> Promise:
        return keyed_promise(EXACTLY_ONCE, self.key)

    def __post_init__(self) -> None:
        self.key = Key(self.key)

    def prepare(self, db: Database[dict[str, Any]]) -> None:
        super().prepare(db)
        if self.key is Key.EVENT_ID:
            db.events.create_index([("event_id", ASCENDING)], unique=True)
        else:
            db.events.create_index([("order_id", ASCENDING), ("version", ASCENDING)], unique=True)

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        docs = [landing_doc(r, batch) for r in batch.records]
        for chunk in ctx.chunks(docs):
            write_ignoring_duplicates(ctx.db.events, [InsertOne(d) for d in chunk])
        project(ctx.db.orders, batch.records)
