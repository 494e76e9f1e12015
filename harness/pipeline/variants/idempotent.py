from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo import ReplaceOne
from pymongo.database import Database

from harness.checker.promise import EXACTLY_ONCE, Promise
from harness.pipeline.batch import Batch
from harness.pipeline.variants.base import (
    SEED_000_KEY,
    Key,
    Variant,
    WriteContext,
    keyed_promise,
    landing_doc,
    project,
    seed_000_key,
    write_ignoring_duplicates,
)


@dataclass
class Idempotent(Variant):
    """``replace_one(upsert=True)`` keyed by a stable id, backed by a unique index.

    Seed 002's fix: "let the producer mint the _id, ship it in the event payload ... Mongo's
    save becomes replaceOne({_id: X}, ..., upsert: true) ... Re-deliveries replace instead of
    duplicate." With ``key=business`` it is seed 000's version: the filter is the composite
    source txId + ``order_id`` under a unique index, which also absorbs an upstream
    resend (same change, new event_id) that the producer-minted id cannot recognise.
    """

    name = "idempotent"
    key: Key = Key.EVENT_ID

    @property
    def promise(self) -> Promise:
        return keyed_promise(EXACTLY_ONCE, self.key)

    def __post_init__(self) -> None:
        self.key = Key(self.key)

    def prepare(self, db: Database[dict[str, Any]]) -> None:
        super().prepare(db)
        if self.key is Key.BUSINESS:
            db.events.create_index(SEED_000_KEY, unique=True)

    def _replace(self, doc: dict[str, Any]) -> ReplaceOne[dict[str, Any]]:
        if self.key is Key.EVENT_ID:
            return ReplaceOne(
                {"_id": doc["event_id"]}, {**doc, "_id": doc["event_id"]}, upsert=True
            )
        return ReplaceOne(seed_000_key(doc), doc, upsert=True)

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        docs = [landing_doc(r, batch) for r in batch.records]
        for chunk in ctx.chunks(docs):
            ops = [self._replace(d) for d in chunk]
            # Two upserts of one new key can race to insert it; the loser's retry replaces.
            if write_ignoring_duplicates(ctx.db.events, ops):
                ctx.db.events.bulk_write(ops, ordered=False)
        project(ctx.db.orders, batch.records)
