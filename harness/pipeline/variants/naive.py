from __future__ import annotations

from dataclasses import dataclass

from harness.checker.promise import NOTHING, Promise
from harness.pipeline.batch import Batch
from harness.pipeline.variants.base import Variant, WriteContext, landing_doc, project


@dataclass
class Naive(Variant):
    """Insert the batch as received, let the driver mint ``_id``, then commit.

    Seeds 000 and 002. Seed 000's first consumer: "If we crash here, after insertOne() but
    before this return, the message is processed but its offset is not committed." Seed 002's
    listener minted a fresh ``_id`` on every delivery, so "when the same event was delivered
    twice, the listener built two entities with two different _id values" - 2 documents after
    one redelivery, 3 after two. The projection is overwritten unconditionally: an old change
    delivered late rolls the order back.
    """

    name = "naive"

    @property
    def promise(self) -> Promise:
        # Its projection is overwritten unconditionally: a late old change rolls an order back.
        return NOTHING

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        docs = [landing_doc(r, batch) for r in batch.records]
        for chunk in ctx.chunks(docs):
            ctx.db.events.insert_many(list(chunk), ordered=True)
        project(ctx.db.orders, batch.records, guarded=False)
