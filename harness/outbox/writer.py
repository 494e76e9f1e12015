"""The application of seed 003: it saves business documents with their outbox, and ledgers
every entry MongoDB acknowledged - each is a message that must reach its topic.

The ledger (``written.csv``) is the outbox run's truth, as the producer's ledger is a sink run's:
one row per entry, appended (and flushed to the OS) as soon as MongoDB acknowledged its write.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

from pymongo.collection import Collection

from harness.outbox.workload import OutboxWrite, WriteOp

SOURCE = "orders"  # the business collection, in the run's application database
END_ID = 0  # the document the application writes last: relays that relayed it are done
COLUMNS = ("seq", "entry_id", "order_id", "version", "op", "target_topic", "acked_at")


@dataclass(frozen=True)
class WrittenEntry:
    seq: int  # the write that carried it
    entry_id: str
    order_id: int
    version: int
    op: WriteOp
    target_topic: str
    acked_at: float  # unix time MongoDB acknowledged the write


def read_written(path: Path) -> Iterator[WrittenEntry]:
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is not None and tuple(header) != COLUMNS:
            raise ValueError(f"{path} is not an outbox ledger (header {header})")
        for row in reader:
            if len(row) == len(COLUMNS):  # a torn last line is not a row
                seq, entry_id, order_id, version, op, topic, acked_at = row
                yield WrittenEntry(
                    int(seq), entry_id, int(order_id), int(version), WriteOp(op), topic,
                    float(acked_at),
                )  # fmt: skip


def apply(orders: Collection[dict[str, Any]], write: OutboxWrite) -> None:
    """One application write, in its shape."""
    outbox = [e.document() for e in write.entries]
    key = {"_id": write.order_id}
    if write.op is WriteOp.INSERT:
        orders.insert_one({**key, "status": write.status, "outbox": outbox})
    elif write.op is WriteOp.REPLACE:
        orders.replace_one(key, {"status": write.status, "outbox": outbox})
    elif write.op is WriteOp.SET:
        orders.update_one(key, {"$set": {"status": write.status, "outbox": outbox}})
    else:
        orders.update_one(
            key, {"$set": {"status": write.status}, "$push": {"outbox": {"$each": outbox}}}
        )


def write_all(
    orders: Collection[dict[str, Any]],
    writes: Iterable[OutboxWrite],
    ledger: Path,
    *,
    cleanup: bool,
    rate: float = 0.0,
    stop: threading.Event | None = None,
) -> int:
    """Apply ``writes`` in order (``rate`` per second, 0: as fast as they go), ledgering each
    entry once its write is acknowledged; then the end marker. Returns the entries written."""
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
            apply(orders, write)
            acked = time.time()
            for e in write.entries:
                out.writerow(
                    astuple(
                        WrittenEntry(
                            write.seq, e.entry_id, e.order_id, e.version, write.op,
                            e.target_topic, acked,
                        )
                    )
                )  # fmt: skip
                written += 1
            if cleanup:  # seed 003's cleanup: the outbox is emptied once written
                orders.update_one({"_id": write.order_id}, {"$unset": {"outbox": ""}})
    orders.insert_one({"_id": END_ID, "end": True})
    return written
