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
