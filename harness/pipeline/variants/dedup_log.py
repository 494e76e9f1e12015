from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ReturnDocument
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from harness.checker.promise import AT_LEAST_ONCE, Promise
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

CONSUMING = "CONSUMING"
CONSUMED = "CONSUMED"
LOG = "processed_messages"


@dataclass
class DedupLog(Variant):
    """A processed-message log with CONSUMING / CONSUMED states and an expiry.

    Seed 001: "when the message comes ... insert a record with status 'consuming' ... if it is
    consumed, return directly; if it is being consumed, delay consumption ... the record needs
    an expiration time, so that a consumer that crashed does not block the message forever."
    (Seed 004's log, written in the business change's own transaction, is
    ``processed-log-txn``.)
    Seed 001 also warns the key must be the business key, "because upstream producers resend
    with new ids": ``key=event_id`` lets an upstream resend through, ``key=business`` does not.
    A crash after the business write but before CONSUMED is marked leaves the record to expire
    and be processed again: the log narrows the window, it does not close it.
    """

    name = "dedup-log"
    collections = (*Variant.collections, LOG)
    key: Key = Key.EVENT_ID
    expiry_s: float = 10.0

    @property
    def promise(self) -> Promise:
        # A crash between the write and CONSUMED writes that message again after the expiry.
        return keyed_promise(AT_LEAST_ONCE, self.key)

    def __post_init__(self) -> None:
        self.key = Key(self.key)
        if self.expiry_s <= 0:
            raise ValueError(f"expiry_s must be > 0, got {self.expiry_s}")

    def _key(self, record: Record) -> str:
        return message_key(self.key, record)

    def _claim(self, db: Database[dict[str, Any]], key: str) -> bool:
        """True when this consumer may process the message, False when it was consumed.

        Waits (up to the expiry) while another consumer holds it in CONSUMING.
        """
        while True:
            now = datetime.now(UTC)
            expires = now + timedelta(seconds=self.expiry_s)
            try:
                db[LOG].insert_one({"_id": key, "status": CONSUMING, "expires_at": expires})
                return True
            except DuplicateKeyError:
                pass
            entry = db[LOG].find_one({"_id": key})
            if entry is None:
                continue  # removed in between; try to insert again
            if entry["status"] == CONSUMED:
                return False
            if entry["expires_at"].replace(tzinfo=UTC) <= now:
                # The holder died (or is too slow): take the message over.
                taken = db[LOG].find_one_and_update(
                    {"_id": key, "status": CONSUMING, "expires_at": entry["expires_at"]},
                    {"$set": {"expires_at": expires}},
                    return_document=ReturnDocument.AFTER,
                )
                if taken is not None:
                    return True
                continue
            time.sleep(0.05)  # another consumer is processing it right now: seed 001's "delay"

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        db = ctx.db
        written = 0
        for record in batch.records:
            key = self._key(record)
            if not self._claim(db, key):
                continue
            # The whole business change happens before CONSUMED is marked: a message marked
            # CONSUMED is skipped forever after, so nothing of it may be left for later.
            db.events.insert_one(landing_doc(record, batch))
            written += 1
            ctx.written(written)
            project(db.orders, [record])
            db[LOG].update_one({"_id": key}, {"$set": {"status": CONSUMED}})
