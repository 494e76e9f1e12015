from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pymongo.client_session import ClientSession
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from harness.checker.promise import EXACTLY_ONCE, Promise
from harness.pipeline.batch import Batch, Record
from harness.pipeline.variants.base import (
    Key,
    Variant,
    WriteContext,
    keyed_promise,
    landing_doc,
    message_key,
    project,
)

LOG = "consumed_messages"


@dataclass
class ProcessedLogTxn(Variant):
    """A processed-message log written in the same MongoDB transaction as the business change.

    Seed 004: "the consumer should check the message_log table before processing any received
    message. If the table already contains the message ID, the processing should not happen.
    Otherwise, the consumer processes the message and records its ID in the message_log
    table", and "the onOrderEvent() method is also made transactional for reliability and
    consistency. If the business logic throws an error or saving the message ID to
    consumed_messages fails due to some reason, we will have a clean rollback."
    Unlike seed 001's log (``dedup-log``: CONSUMING, then the write, then CONSUMED, each its
    own write), there is no moment where the change is stored and its id is not: a consumer
    killed anywhere leaves both or neither, and a redelivered message finds its id. The write
    itself is a plain insert - the log alone keeps it single.
    One transaction holds a whole batch rather than one message: the same guarantee per
    message, one commit per batch (a commit costs about as much as the batch's inserts here).
    ``key=event_id`` (the seed's producer-minted message id) lets an upstream resend through,
    as seed 001 warns; ``key=business`` does not.
    """

    name = "processed-log-txn"
    collections = (*Variant.collections, LOG)
    key: Key = Key.EVENT_ID

    @property
    def promise(self) -> Promise:
        return keyed_promise(EXACTLY_ONCE, self.key)

    def __post_init__(self) -> None:
        self.key = Key(self.key)

    def _key(self, record: Record) -> str:
        return message_key(self.key, record)

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        db = ctx.db

        def body(session: ClientSession) -> None:
            keys = [self._key(r) for r in batch.records]
            seen = {
                d["_id"] for d in db[LOG].find({"_id": {"$in": keys}}, {"_id": 1}, session=session)
            }
            fresh: list[Record] = []
            for key, record in zip(keys, batch.records, strict=True):
                if key not in seen:  # a message twice in one batch counts once, too
                    seen.add(key)
                    fresh.append(record)
            docs = [landing_doc(r, batch) for r in fresh]
            for chunk in ctx.chunks(docs):
                db.events.insert_many(list(chunk), ordered=True, session=session)
            project(db.orders, fresh, session=session)
            if fresh:
                now = datetime.now(UTC)
                db[LOG].insert_many(
                    [{"_id": self._key(r), "consumed_at": now} for r in fresh], session=session
                )

        with ctx.client.start_session() as session:
            session.with_transaction(
                body,
                read_concern=ReadConcern("majority"),
                write_concern=WriteConcern("majority"),
                max_commit_time_ms=ctx.max_commit_time_ms,
            )
