"""A bug of the tests' own, for ``chaoslab explore`` to find: a variant that promises
exactly-once (the default) and keeps it - except in the first batch a consumer process writes,
which it inserts without its key. Only a fault that restarts a consumer and redelivers what it
had written (a crash after the write, a kill) makes that first batch a duplicate."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pymongo import ReplaceOne
from pymongo.database import Database
from pymongo.errors import PyMongoError

from harness.checker.promise import EXACTLY_ONCE, Promise
from harness.pipeline.batch import Batch
from harness.pipeline.variants import Variant, WriteContext
from harness.pipeline.variants.base import Key, keyed_promise, landing_doc, project
from harness.pipeline.variants.transactional import OFFSETS, Transactional


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


# The guided-search benchmark's bugs (tests/benchmarks/bench_guided.py): four of the kinds the
# post-mortems name, each keeping its exactly-once promise until a fault of its own kind comes.

MARKS = "processed"  # mark-before-data's log of processed messages


class _ByEventId:
    """Keyed by the event id, as each of the benchmark's variants is: an upstream resend (a new
    id for the same change) is not a duplicate it can see, and not its planted bug - stated as
    its promise, as the lab's own variants keyed so state theirs."""

    @property
    def promise(self) -> Promise:
        return keyed_promise(EXACTLY_ONCE, Key.EVENT_ID)


def _by_event_id(chunk: Sequence[dict[str, Any]]) -> list[ReplaceOne[dict[str, Any]]]:
    return [ReplaceOne({"_id": d["event_id"]}, {**d, "_id": d["event_id"]}, upsert=True)
            for d in chunk]  # fmt: skip


@dataclass
class MarkBeforeData(_ByEventId, Variant):
    """A processed-message log that marks a batch's messages processed before it writes their
    data (which mints its own ids: the log is the de-duplication). A write that stops between
    the two - a consumer killed in the middle of it, a write that fails - leaves marks for
    data never written, and the redelivery skips them: lost."""

    name = "mark-before-data"
    collections = (*Variant.collections, MARKS)

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        ids = [r.event.event_id for r in batch.records]
        done = {d["_id"] for d in ctx.db[MARKS].find({"_id": {"$in": ids}}, {"_id": 1})}
        fresh = [r for r in batch.records if r.event.event_id not in done]
        if fresh:
            ctx.db[MARKS].bulk_write(
                [ReplaceOne({"_id": r.event.event_id}, {"_id": r.event.event_id}, upsert=True)
                 for r in fresh],
                ordered=False,
            )  # fmt: skip
        for chunk in ctx.chunks([landing_doc(r, batch) for r in fresh]):
            ctx.db.events.insert_many([dict(d) for d in chunk])
        project(ctx.db.orders, fresh)


@dataclass
class CommitBeforeWrite(_ByEventId, Transactional):
    """Keeps its consumer positions in MongoDB where the transactional variant does, and keys
    its documents by the event id - but stores a batch's positions before it writes the batch,
    not in one transaction with it: a consumer killed in the write resumes past what it had not
    written: lost."""

    name = "commit-before-write"

    def prepare(self, db: Database[dict[str, Any]]) -> None:
        Variant.prepare(self, db)  # keyed by the event id: not the transactional's unique key

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        for partition, last in batch.last_offsets.items():
            ctx.db[OFFSETS].update_one(
                {"_id": batch.offsets_store_id(partition)}, {"$max": {"offset": last}}, upsert=True
            )
        for chunk in ctx.chunks([landing_doc(r, batch) for r in batch.records]):
            ctx.db.events.bulk_write(_by_event_id(chunk), ordered=False)
        project(ctx.db.orders, batch.records)


@dataclass
class RetryMintsId(_ByEventId, Variant):
    """Keys its documents by the event id - and when a write fails, writes the chunk again
    under ids of its own (a retry that "makes sure it lands"), until that lands: a write MongoDB
    had applied whose answer the client did not get is stored twice."""

    name = "retry-mints-id"

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        for chunk in ctx.chunks([landing_doc(r, batch) for r in batch.records]):
            try:
                ctx.db.events.bulk_write(_by_event_id(chunk), ordered=False)
            except PyMongoError:
                for attempt in range(RETRIES):
                    try:
                        ctx.db.events.insert_many([dict(d) for d in chunk])
                        break
                    except PyMongoError:
                        if attempt == RETRIES - 1:
                            raise
                        time.sleep(0.5)
        project(ctx.db.orders, batch.records)


RETRIES = 20  # retry-mints-id's, half a second apart: through a network cut of a few seconds
RECENT = "recent"  # expiring-dedup's marks


@dataclass
class ExpiringDedup(_ByEventId, Variant):
    """De-duplicates by the event id over a window: a message whose id it marked less than
    ``window_s`` ago is skipped; an older mark no longer counts (a TTL index's, a cache's
    expiry). Its writes mint their own ids. A redelivery soon after the first write - a crash
    and a quick restart - is absorbed; one that comes later - a consumer frozen past its
    session, whose batch another consumer wrote meanwhile - is stored twice."""

    name = "expiring-dedup"
    collections = (*Variant.collections, RECENT)
    window_s: float = 5.0

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        now = time.time()
        ids = [r.event.event_id for r in batch.records]
        recent = {
            d["_id"]
            for d in ctx.db[RECENT].find(
                {"_id": {"$in": ids}, "at": {"$gt": now - self.window_s}}, {"_id": 1}
            )
        }
        fresh = [r for r in batch.records if r.event.event_id not in recent]
        for chunk in ctx.chunks([landing_doc(r, batch) for r in fresh]):
            ctx.db.events.insert_many([dict(d) for d in chunk])
            ctx.db[RECENT].bulk_write(
                [ReplaceOne({"_id": d["event_id"]}, {"_id": d["event_id"], "at": now},
                            upsert=True) for d in chunk],
                ordered=False,
            )  # fmt: skip
        project(ctx.db.orders, fresh)
