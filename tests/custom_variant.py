"""A user's own variant, named ``tests.custom_variant:UpsertByBusinessKey`` in a scenario - the
README's example of plugging a sink strategy into the lab."""

from __future__ import annotations

from dataclasses import dataclass

from pymongo import ReplaceOne

from harness.pipeline.batch import Batch
from harness.pipeline.variants import Variant, WriteContext
from harness.pipeline.variants.base import landing_doc, project


@dataclass
class UpsertByBusinessKey(Variant):
    """Upsert each change under ``_id = "order_id:version"``: redeliveries and upstream resends
    of a change land on the same document."""

    name = "upsert-by-business-key"

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        docs = [landing_doc(r, batch) for r in batch.records]
        for chunk in ctx.chunks(docs):
            ops = [
                ReplaceOne(
                    {"_id": f"{d['order_id']}:{d['version']}"},
                    {**d, "_id": f"{d['order_id']}:{d['version']}"},
                    upsert=True,
                )
                for d in chunk
            ]
            ctx.db.events.bulk_write(ops, ordered=False)
        project(ctx.db.orders, batch.records)
