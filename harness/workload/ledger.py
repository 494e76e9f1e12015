"""The ledger: what the broker acknowledged, one row per acked record - the checker's truth.

A row is appended (and flushed to the OS) inside the delivery callback, so a harness that
crashes loses no acknowledged row. The file is CSV: a million rows load in about a second.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import IO, Self

from harness.workload.events import Kind

COLUMNS = (
    "seq",
    "event_id",
    "order_id",
    "version",
    "kind",
    "topic",
    "partition",
    "offset",
    "acked_at",
)


@dataclass(frozen=True)
class LedgerRow:
    seq: int  # position in the workload
    event_id: str
    order_id: int
    version: int
    kind: Kind
    topic: str
    partition: int
    offset: int  # -1 when the acknowledgement carried no offset
    acked_at: float  # unix time the acknowledgement reached the producer

    @classmethod
    def from_csv(cls, row: list[str]) -> Self:
        seq, event_id, order_id, version, kind, topic, partition, offset, acked_at = row
        return cls(
            int(seq), event_id, int(order_id), int(version), Kind(kind), topic, int(partition),
            int(offset), float(acked_at),
        )  # fmt: skip


assert tuple(f.name for f in fields(LedgerRow)) == COLUMNS


class LedgerWriter:
    """Appends rows to a ledger file; each row reaches the OS before ``append`` returns."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists() or path.stat().st_size == 0
        self._file: IO[str] = path.open("a", newline="", buffering=1)  # line-buffered
        self._csv = csv.writer(self._file)
        if new:
            self._csv.writerow(COLUMNS)

    def append(self, row: LedgerRow) -> None:
        self._csv.writerow(astuple(row))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def read_ledger(path: Path) -> Iterator[LedgerRow]:
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is not None and tuple(header) != COLUMNS:
            raise ValueError(f"{path} is not a ledger (header {header})")
        for row in reader:
            if len(row) == len(COLUMNS):  # a torn last line from a crash is not a row
                yield LedgerRow.from_csv(row)


@dataclass(frozen=True)
class Change:
    """A change as an upstream stage's truth names it, or as a record on a topic carries it:
    the sinks' identity of it (order_id, version), and the event id a sink's documents are
    traced back to it by. On a topic: its position and the record's timestamp; expected: the
    time it was committed or acknowledged (``at``), at no position."""

    event_id: str
    order_id: int
    version: int
    at: float
    partition: int = -1
    offset: int = -1


def placed(expected: Sequence[Change], records: Iterable[Change], topic: str) -> list[LedgerRow]:
    """The expected changes of a source that is not the lab's producer (a database's commits,
    an outbox's entries) as the sinks' ledger: each at its first record on the topic (never on
    it: no position), at its expected time; then each further record of an expected change as
    a ``copy``, at its record's position and timestamp - a record handed to the consumers
    again, which a sink keyed on the change's identity stores once and a naive one again. A
    record of no expected change is not in it (the source's stage counts it a phantom)."""
    first: dict[tuple[int, int], Change] = {}
    again: list[Change] = []
    for record in records:
        key = (record.order_id, record.version)
        if key in first:
            again.append(record)
        else:
            first[key] = record
    rows = []
    for change in expected:
        at = first.get((change.order_id, change.version))
        rows.append(change if at is None else
                    Change(at.event_id, change.order_id, change.version, change.at, at.partition,
                           at.offset))  # fmt: skip
    named = {(c.order_id, c.version) for c in expected}
    normal = [(c, Kind.NORMAL) for c in rows]
    copies = [(c, Kind.COPY) for c in again if (c.order_id, c.version) in named]
    return [
        LedgerRow(seq, c.event_id, c.order_id, c.version, kind, topic, c.partition, c.offset, c.at)
        for seq, (c, kind) in enumerate(normal + copies)
    ]
