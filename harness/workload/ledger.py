"""The ledger: what the broker acknowledged, one row per acked record - the checker's truth.

A row is appended (and flushed to the OS) inside the delivery callback, so a harness that
crashes loses no acknowledged row. The file is CSV: a million rows load in about a second.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
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
