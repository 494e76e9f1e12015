"""A bug of the tests' own, for ``chaoslab explore`` to find: a variant that promises
exactly-once (the default) and keeps it - except in the first batch a consumer process writes,
which it inserts without its key. Only a fault that restarts a consumer and redelivers what it
had written (a crash after the write, a kill) makes that first batch a duplicate."""

from __future__ import annotations

from dataclasses import dataclass

from pymongo import ReplaceOne

from harness.pipeline.batch import Batch
from harness.pipeline.variants import Variant, WriteContext
from harness.pipeline.variants.base import landing_doc, project


@dataclass
class WarmUpInsert(Variant):
    name = "warm-up-insert"

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        docs = [landing_doc(r, batch) for r in batch.records]
        first = ctx.batch_no == 1  # this process's first batch: the planted bug
        for chunk in ctx.chunks(docs):
            if first:
                ctx.db.events.insert_many([dict(d) for d in chunk])
            else:
                key = lambda d: f"{d['order_id']}:{d['version']}"  # noqa: E731
                ctx.db.events.bulk_write(
                    [ReplaceOne({"_id": key(d)}, {**d, "_id": key(d)}, upsert=True) for d in chunk],
                    ordered=False,
                )
        project(ctx.db.orders, batch.records)


@dataclass
class DoubleInsert(Variant):
    """Writes every record twice, with no fault needed: copies nothing delivered twice."""

    name = "double-insert"

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        docs = [landing_doc(r, batch) for r in batch.records]
        for chunk in ctx.chunks(docs):
            ctx.db.events.insert_many([dict(d) for d in chunk] + [dict(d) for d in chunk])
        project(ctx.db.orders, batch.records)


@dataclass
class ForgetsAfterDrift(Variant):
    """A bug of the tests' own for explore's bad-record shapes: keyed by the event id (exactly
    once; a bad record is a document of its own), except that a record carrying a field its
    schema does not know (schema drift, ``discount_cents``) resets what it knows of that
    record's order - and the order's next change is never written. Only a bad record of the
    new-field shape makes it lose a good change, whatever the batches and the timing."""

    name = "forgets-after-drift"

    def __post_init__(self) -> None:
        self.forgotten: set[int] = set()  # orders whose next change it drops (not an option)

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        kept = []
        for r in batch.records:
            if "discount_cents" in r.event.document:
                self.forgotten.add(r.event.order_id)
            elif r.event.order_id in self.forgotten:
                self.forgotten.discard(r.event.order_id)
                continue
            kept.append(r)
        docs = [landing_doc(r, batch) for r in kept]
        for chunk in ctx.chunks(docs):
            ctx.db.events.bulk_write(
                [ReplaceOne({"_id": d["event_id"]}, {**d, "_id": d["event_id"]}, upsert=True)
                 for d in chunk],
                ordered=False,
            )  # fmt: skip
        project(ctx.db.orders, kept)
