from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo.database import Database

from harness.checker.promise import AT_LEAST_ONCE, Promise
from harness.pipeline.batch import Batch
from harness.pipeline.variants.base import (
    Key,
    Variant,
    WriteContext,
    keyed_promise,
    landing_doc,
    project,
)


@dataclass
class CheckThenInsert(Variant):
    """Look up which of the batch's messages are already stored, insert the others.

    Seed 001's first attempt: "select * from t_order where order_no = ... if (order != null)
    return; // The message is repeated". It catches a redelivery that comes after the first
    delivery finished, but "in concurrent scenarios, there are still problems": a duplicate
    that arrives while the first is still being processed finds nothing yet, "penetrates the
    check baffle", and is inserted again. No unique index backs the check.
    """

    name = "check-then-insert"
    key: Key = Key.EVENT_ID

    @property
    def promise(self) -> Promise:
        # No index backs the check: a redelivery that overlaps the first delivery gets in.
        return keyed_promise(AT_LEAST_ONCE, self.key)

    def __post_init__(self) -> None:
        self.key = Key(self.key)

    def _filter(self, docs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.key is Key.EVENT_ID:
            return {"event_id": {"$in": [d["event_id"] for d in docs]}}
        return {"$or": [{"order_id": d["order_id"], "version": d["version"]} for d in docs]}

    def _key(self, doc: dict[str, Any]) -> object:
        return doc["event_id"] if self.key is Key.EVENT_ID else (doc["order_id"], doc["version"])

    def prepare(self, db: Database[dict[str, Any]]) -> None:
        super().prepare(db)
        # An index to make the check fast - deliberately not unique.
        field = "event_id" if self.key is Key.EVENT_ID else "order_id"
        db.events.create_index(field)

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        docs = [landing_doc(r, batch) for r in batch.records]
        if docs:
            seen = {self._key(d) for d in ctx.db.events.find(self._filter(docs), {"_id": 0})}
            docs = [d for d in docs if self._key(d) not in seen]
        for chunk in ctx.chunks(docs):
            ctx.db.events.insert_many(list(chunk), ordered=True)
        project(ctx.db.orders, batch.records)
