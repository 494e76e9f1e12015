"""The application of seed 003: it saves business documents with their outbox, and ledgers
every entry MongoDB acknowledged - each is a message that must reach its topic.

The ledger (``written.csv``) is the outbox run's truth, as the producer's ledger is a sink run's:
one row per entry, appended (and flushed to the OS) as soon as MongoDB acknowledged its write.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

from pymongo.collection import Collection
from pymongo.errors import DuplicateKeyError

from harness.outbox.workload import OutboxWrite, WriteOp

SOURCE = "orders"  # the business collection, in the run's application database
END_ID = 0  # the document the application writes last: relays that relayed it are done
COLUMNS = ("seq", "entry_id", "order_id", "version", "op", "target_topic", "sent_at", "acked_at")


@dataclass(frozen=True)
class WrittenEntry:
    seq: int  # the write that carried it
    entry_id: str
    order_id: int
    version: int
    op: WriteOp
    target_topic: str
    sent_at: float  # unix time the write was sent: it cannot have been applied before
    acked_at: float  # unix time MongoDB acknowledged the write (applied some time before)


def read_written(path: Path) -> Iterator[WrittenEntry]:
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is not None and tuple(header) != COLUMNS:
            raise ValueError(f"{path} is not an outbox ledger (header {header})")
        for row in reader:
            if len(row) == len(COLUMNS):  # a torn last line is not a row
                seq, entry_id, order_id, version, op, topic, sent_at, acked_at = row
                yield WrittenEntry(
                    int(seq), entry_id, int(order_id), int(version), WriteOp(op), topic,
                    float(sent_at), float(acked_at),
                )  # fmt: skip


def apply(orders: Collection[dict[str, Any]], write: OutboxWrite) -> None:
    """One application write, in its shape, applied at most once.

    Each write stamps the order with its ``seq`` and updates only an order stamped with an
    earlier one: SecantusDB keeps its retryable-write records in memory, so a driver's retry of
    a write MongoDB applied just before it was killed (mongo-restart) is applied again - a
    ``$push`` would push its entries twice, an insert fail on its ``_id``. A real mongod answers
    such a retry from its record; the stamp makes the application's writes say the same
    wherever they run."""
    outbox = [e.document() for e in write.entries]
    key = {"_id": write.order_id}
    fields = {"status": write.status, "seq": write.seq}
    newer = {**key, "seq": {"$lt": write.seq}}
    if write.op is WriteOp.INSERT:
        insert_once(orders, {**key, **fields, "outbox": outbox})
    elif write.op is WriteOp.REPLACE:
        orders.replace_one(newer, {**fields, "outbox": outbox})
    elif write.op is WriteOp.SET:
        orders.update_one(newer, {"$set": {**fields, "outbox": outbox}})
    else:
        orders.update_one(newer, {"$set": fields, "$push": {"outbox": {"$each": outbox}}})


def insert_once(orders: Collection[dict[str, Any]], document: dict[str, Any]) -> None:
    """Insert ``document``; one already there (the same insert, retried) is this one."""
    try:
        orders.insert_one(document)
    except DuplicateKeyError:
        if orders.find_one({"_id": document["_id"]}, {"seq": 1}) != {
            "_id": document["_id"], "seq": document.get("seq")
        }:  # fmt: skip
            raise


def write_all(
    orders: Collection[dict[str, Any]],
    writes: Iterable[OutboxWrite],
    ledger: Path,
    *,
    cleanup: bool,
    rate: float = 0.0,
    stop: threading.Event | None = None,
    on_ack: Callable[[int], None] = lambda _written: None,
) -> int:
    """Apply ``writes`` in order (``rate`` per second, 0: as fast as they go), ledgering each
    entry once its write is acknowledged (``on_ack``: the entries written so far, after each
    write); then the end marker. Returns the entries written."""
    started = time.monotonic()
    written = 0
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with ledger.open("w", newline="", buffering=1) as f:
        out = csv.writer(f)
        out.writerow(COLUMNS)
        for n, write in enumerate(writes):
            if stop is not None and stop.is_set():
                break
            if rate > 0 and (lag := started + n / rate - time.monotonic()) > 0:
                time.sleep(lag)  # pacing, not waiting for a condition
            sent = time.time()
            apply(orders, write)
            acked = time.time()
            for e in write.entries:
                out.writerow(
                    astuple(
                        WrittenEntry(
                            write.seq, e.entry_id, e.order_id, e.version, write.op,
                            e.target_topic, sent, acked,
                        )
                    )
                )  # fmt: skip
                written += 1
            on_ack(written)
            if cleanup:  # seed 003's cleanup: the outbox is emptied once written
                orders.update_one({"_id": write.order_id}, {"$unset": {"outbox": ""}})
    insert_once(orders, {"_id": END_ID, "seq": None, "end": True})
    return written
