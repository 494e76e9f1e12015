"""The workload as an OLTP application writes it: the seeded orders' changes as SQL transactions
on a table with a primary key, in every shape an application uses - single-row INSERTs,
multi-row ``INSERT ... VALUES``, ``COPY``, UPDATEs of one row and of many in one statement,
DELETEs, several statements in one transaction, and long transactions that stay open while
others commit.

Pure: the same spec gives the same transactions. What the database committed - the source's
truth - is read back from its log (``harness.sources.truth``), not taken from this plan.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from harness.workload.events import TABLE, Op
from harness.workload.generator import STATUSES, WorkloadSpec

COLUMNS = ("order_id", "version", "status", "amount_cents")
DDL = (
    f"CREATE TABLE {TABLE} (order_id bigint PRIMARY KEY, version int NOT NULL, "
    "status text NOT NULL, amount_cents bigint NOT NULL)"
)
# Every change carries its whole row in the log (before and after): Debezium's `before` of an
# update or a delete, and the truth's version of a deleted row.
REPLICA_IDENTITY = f"ALTER TABLE {TABLE} REPLICA IDENTITY FULL"
LONG_EVERY = 40  # about one transaction in this many stays open while others commit
LONG_SPANS = 3  # ... while this many others commit


class Shape(StrEnum):
    INSERT = "insert"  # INSERT ... VALUES (one row)
    INSERT_VALUES = "insert-values"  # INSERT ... VALUES (...), (...): several rows
    COPY = "copy"  # COPY ... FROM STDIN: several rows
    UPDATE = "update"  # one row
    UPDATE_MANY = "update-many"  # one statement, several rows
    DELETE = "delete"


CREATES = (Shape.INSERT, Shape.INSERT_VALUES, Shape.COPY)
# How often each shape is drawn where it can be (a create needs an absent order, an update or a
# delete a present one): mostly single-row changes, as an application writes them.
WEIGHTS = {
    Shape.INSERT: 4,
    Shape.INSERT_VALUES: 1,
    Shape.COPY: 1,
    Shape.UPDATE: 8,
    Shape.UPDATE_MANY: 1,
    Shape.DELETE: 1,
}
ROWS = {Shape.INSERT_VALUES: (2, 5), Shape.COPY: (3, 10), Shape.UPDATE_MANY: (2, 5)}


@dataclass(frozen=True)
class RowChange:
    """One row's change as planned: the row image it leaves (a delete: the values of the row
    it removed, at the order's next version)."""

    op: Op
    order_id: int
    version: int
    status: str
    amount_cents: int

    def row(self) -> tuple[Any, ...]:
        return (self.order_id, self.version, self.status, self.amount_cents)


@dataclass(frozen=True)
class Statement:
    shape: Shape
    changes: tuple[RowChange, ...]

    def sql(self) -> tuple[str, tuple[Any, ...]]:
        """The statement and its parameters (COPY's rows are written to it, ``changes``)."""
        columns = ", ".join(COLUMNS)
        one = "(%s, %s, %s, %s)"
        if self.shape in (Shape.INSERT, Shape.INSERT_VALUES):
            values = ", ".join([one] * len(self.changes))
            params = tuple(v for c in self.changes for v in c.row())
            return f"INSERT INTO {TABLE} ({columns}) VALUES {values}", params
        if self.shape is Shape.COPY:
            return f"COPY {TABLE} ({columns}) FROM STDIN", ()
        if self.shape is Shape.UPDATE:
            (c,) = self.changes
            return (
                f"UPDATE {TABLE} SET version = %s, status = %s, amount_cents = %s "
                "WHERE order_id = %s",
                (c.version, c.status, c.amount_cents, c.order_id),
            )
        if self.shape is Shape.UPDATE_MANY:
            # One statement for every row: each gets its own next version and values.
            values = ", ".join([one] * len(self.changes))
            params = tuple(v for c in self.changes for v in c.row())
            return (
                f"UPDATE {TABLE} AS t SET version = v.version, status = v.status, "
                f"amount_cents = v.amount_cents FROM (VALUES {values}) "
                f"AS v({columns}) WHERE t.order_id = v.order_id",
                params,
            )
        (c,) = self.changes
        return f"DELETE FROM {TABLE} WHERE order_id = %s", (c.order_id,)


@dataclass(frozen=True)
class Transaction:
    seq: int
    statements: tuple[Statement, ...]
    spans: int = 0  # a long one: stays open while this many later transactions commit

    @property
    def changes(self) -> tuple[RowChange, ...]:
        return tuple(c for s in self.statements for c in s.changes)


class _Table:
    """The table as the plan leaves it, to draw feasible changes from."""

    def __init__(self, spec: WorkloadSpec, rng: random.Random) -> None:
        self.rng = rng
        self.keys = spec.keys
        self.rows: dict[int, RowChange] = {}  # the orders present
        self.versions: dict[int, int] = {}  # each order's last version, deleted ones too
        # The orders an open long transaction changed: until it commits, no other transaction
        # touches them (it would wait for the long one's row locks, and the writer runs one
        # statement at a time) - so the commit order changes no row's history.
        self.held: set[int] = set()
        # The absent and the present orders, each kept in order: drawing from a list built
        # anew for every statement made a plan of a large table quadratic (minutes for 30,000
        # orders).
        self._absent = list(range(1, spec.keys + 1))
        self._present: list[int] = []

    def _draw(self, ordered: list[int], n: int) -> list[int]:
        free = [k for k in ordered if k not in self.held] if self.held else ordered
        return self.rng.sample(free, min(n, len(free)))

    def absent(self, n: int) -> list[int]:
        return self._draw(self._absent, n)

    def present(self, n: int) -> list[int]:
        return self._draw(self._present, n)

    def _move(self, order_id: int, source: list[int], target: list[int]) -> None:
        del source[bisect.bisect_left(source, order_id)]
        bisect.insort(target, order_id)

    def change(self, op: Op, order_id: int) -> RowChange:
        # A version counts an order's changes, as the producer's workload does: a delete is
        # the change after the row's last version (its identity is not the last update's).
        version = self.versions.get(order_id, 0) + 1
        if op is Op.DELETE:
            gone = self.rows.pop(order_id)
            self._move(order_id, self._present, self._absent)
            self.versions[order_id] = version
            return RowChange(Op.DELETE, order_id, version, gone.status, gone.amount_cents)
        row = RowChange(
            op, order_id, version, self.rng.choice(STATUSES), self.rng.randint(100, 100_000)
        )
        if order_id not in self.rows:
            self._move(order_id, self._absent, self._present)
        self.rows[order_id] = row
        self.versions[order_id] = version
        return row


def _statement(table: _Table, shape: Shape) -> Statement | None:
    low, high = ROWS.get(shape, (1, 1))
    n = table.rng.randint(low, high)
    if shape in CREATES:
        ids = table.absent(n)
        op = Op.CREATE
    else:
        ids = table.present(n)
        op = Op.DELETE if shape is Shape.DELETE else Op.UPDATE
    if len(ids) < low:
        return None  # not drawable now (no absent or present orders enough)
    return Statement(shape, tuple(table.change(op, k) for k in sorted(ids)))


def split(planned: list[Transaction], existing: int) -> tuple[list[Transaction], list[Transaction]]:
    """``planned`` as the transactions committed before a CDC source starts - whole ones,
    until ``existing`` row changes - and the rest."""
    changes, at = 0, 0
    while at < len(planned) and changes < existing:
        changes += len(planned[at].changes)
        at += 1
    return planned[:at], planned[at:]


def transactions(spec: WorkloadSpec) -> list[Transaction]:
    """The workload's transactions in the order they begin, about ``spec.events`` row changes
    in all; the first ones take each shape in turn, so that every shape is in any workload of
    a few dozen changes."""
    rng = random.Random(f"sql-{spec.seed}")
    table = _Table(spec, rng)
    shapes = list(WEIGHTS)
    first = [Shape.COPY, Shape.INSERT_VALUES, Shape.INSERT, Shape.UPDATE, Shape.UPDATE_MANY,
             Shape.DELETE]  # fmt: skip
    planned: list[Transaction] = []
    changes = 0
    open_for = 0  # commits left before the open long transaction commits (0: none open)
    while changes < spec.events:
        seq = len(planned)
        statements: list[Statement] = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            if first:
                shape = first.pop(0)
            else:
                shape = rng.choices(shapes, weights=[WEIGHTS[s] for s in shapes])[0]
            if (statement := _statement(table, shape)) is not None:
                statements.append(statement)
        if not statements:
            continue
        transaction = Transaction(seq, tuple(statements))
        if open_for:
            open_for -= 1
            if not open_for:
                table.held.clear()
        elif seq > 0 and rng.randrange(LONG_EVERY) == 0:
            transaction = Transaction(seq, tuple(statements), LONG_SPANS)
            open_for = LONG_SPANS
            table.held = {c.order_id for c in transaction.changes}
        planned.append(transaction)
        changes += len(transaction.changes)
    return planned


def commit_order(planned: list[Transaction]) -> list[Transaction]:
    """The transactions in the order they commit: a long one after the ``spans`` that begin
    after it (or at the end, if fewer follow)."""
    order: list[Transaction] = []
    waiting: list[tuple[int, Transaction]] = []  # (commits left, the long transaction)
    for transaction in planned:
        if transaction.spans:
            waiting.append((transaction.spans, transaction))
            continue
        order.append(transaction)
        waiting = [(left - 1, t) for left, t in waiting]
        order += [t for left, t in waiting if left == 0]
        waiting = [(left, t) for left, t in waiting if left > 0]
    return order + [t for _, t in waiting]


def final_rows(planned: list[Transaction]) -> dict[int, tuple[Any, ...]]:
    """The table once every transaction committed: each present order's row."""
    rows: dict[int, tuple[Any, ...]] = {}
    for transaction in commit_order(planned):
        for change in transaction.changes:
            if change.op is Op.DELETE:
                rows.pop(change.order_id, None)
            else:
                rows[change.order_id] = change.row()
    return rows
