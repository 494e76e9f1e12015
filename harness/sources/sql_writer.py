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
    rate: float | None = None,
    on_commit: Callable[[Committed], None] | None = None,
    stop: threading.Event | None = None,
) -> list[Committed]:
    """Run ``planned`` against the database at ``uri``, at most ``rate`` transactions a second;
    returns what committed, in commit order (a ``stop`` set ends it between transactions, a
    long one still open rolled back: never committed, so not the source's truth)."""
    committed: list[Committed] = []

    def done(seq: int, xid: int) -> None:
        committed.append(Committed(seq, xid))
        if on_commit is not None:
            on_commit(committed[-1])

    started = time.monotonic()
    with psycopg.connect(uri) as main, psycopg.connect(uri) as side:
        open_long: tuple[Transaction, int, int] | None = None  # (it, its xid, commits left)
        for index, transaction in enumerate(planned):
            if stop is not None and stop.is_set():
                break
            if rate:
                time.sleep(max(0.0, started + index / rate - time.monotonic()))
            conn = side if transaction.spans else main
            for statement in transaction.statements:
                _execute(conn, statement)
            xid = _xid(conn)
            if transaction.spans:
                open_long = (transaction, xid, transaction.spans)
                continue
            main.commit()
            done(transaction.seq, xid)
            if open_long is not None:
                long, long_xid, left = open_long
                open_long = (long, long_xid, left - 1) if left > 1 else None
                if left == 1:
                    side.commit()
                    done(long.seq, long_xid)
        if open_long is not None:
            if stop is not None and stop.is_set():
                side.rollback()
            else:
                side.commit()
                done(open_long[0].seq, open_long[1])
    return committed
