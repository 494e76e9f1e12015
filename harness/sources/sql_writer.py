"""The application: writes a planned SQL workload (``sql_workload``) into PostgreSQL, one
statement at a time, a long transaction on a second connection, open while others commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from harness.sources.sql_workload import Shape, Statement, Transaction


@dataclass(frozen=True)
class Committed:
    """A transaction the database said it committed, with its transaction id."""

    seq: int
    xid: int


def _execute(conn: psycopg.Connection, statement: Statement) -> None:
    sql, params = statement.sql()
    with conn.cursor() as cursor:
        if statement.shape is Shape.COPY:
            with cursor.copy(sql) as copy:
                for change in statement.changes:
                    copy.write_row(change.row())
        else:
            cursor.execute(sql, params)


def _xid(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    return int(row[0])


def write(
    uri: str,
    planned: list[Transaction],
    *,
    on_commit: Callable[[int], None] | None = None,
    stop: threading.Event | None = None,
    rate: float = 0.0,
) -> list[Committed]:
    """Run ``planned`` against the database at ``uri``; returns what committed, in commit
    order (a long transaction after the ``spans`` that begin while it is open). ``on_commit``
    hears the row changes committed so far after each commit (what a fault's ``at_event``
    counts); ``stop`` set ends it between transactions, an open long one rolled back.
    ``rate``: row changes per second at most (0: as fast as the database takes them)."""
    committed: list[Committed] = []
    changes = 0
    stop = stop or threading.Event()
    started = time.monotonic()

    def done(transaction: Transaction, xid: int) -> None:
        nonlocal changes
        committed.append(Committed(transaction.seq, xid))
        changes += sum(len(statement.changes) for statement in transaction.statements)
        if on_commit is not None:
            on_commit(changes)
        if rate > 0:  # paced: the next transaction when the changes so far are due
            stop.wait(max(0.0, started + changes / rate - time.monotonic()))

    with psycopg.connect(uri) as main, psycopg.connect(uri) as side:
        open_long: tuple[Transaction, int, int] | None = None  # (it, its xid, commits left)
        for transaction in planned:
            if stop.is_set():
                side.rollback()  # an open long transaction never commits
                return committed
            conn = side if transaction.spans else main
            for statement in transaction.statements:
                _execute(conn, statement)
            xid = _xid(conn)
            if transaction.spans:
                open_long = (transaction, xid, transaction.spans)
                continue
            main.commit()
            done(transaction, xid)
            if open_long is not None:
                long, long_xid, left = open_long
                open_long = (long, long_xid, left - 1) if left > 1 else None
                if left == 1:
                    side.commit()
                    done(long, long_xid)
        if open_long is not None:  # fewer transactions followed it than it spans
            side.commit()
            done(open_long[0], open_long[1])
    return committed
