"""The application: writes a planned SQL workload (``sql_workload``) into PostgreSQL, one
statement at a time, a long transaction on a second connection, open while others commit; and
writes on when the database restarts, as an application with a reconnecting pool does."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from harness.readiness import NotReady, wait_for
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


RECONNECT_WITHIN_S = 120.0  # a restarted database's crash recovery, on a loaded machine


class _Lost(Exception):
    """The connection broke under a transaction."""


class _Application:
    """Two connections to the database, as an application holds them, made again when the
    database goes away (a restart): a transaction cut off before its commit is written again;
    one cut off at its commit is asked about (``pg_xact_status``) and written again only if it
    did not commit - so a restart neither drops nor doubles one of the plan's transactions."""

    def __init__(self, uri: str, stop: threading.Event) -> None:
        self.uri, self.stop = uri, stop
        self.main = self._connect()
        self.side = self._connect()

    def _connect(self) -> psycopg.Connection:
        def connected() -> psycopg.Connection:
            try:
                return psycopg.connect(self.uri, connect_timeout=5)
            except psycopg.OperationalError as exc:  # restarting, or in crash recovery
                raise NotReady(str(exc)) from None

        def stopped() -> str | None:
            return "asked to stop" if self.stop.is_set() else None

        return wait_for(connected, what="the database back", timeout=RECONNECT_WITHIN_S,
                        abort=stopped)  # fmt: skip

    def reconnect(self) -> None:
        for conn in (self.main, self.side):
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self.main, self.side = self._connect(), self._connect()

    def begin(self, conn: psycopg.Connection, transaction: Transaction) -> int:
        """Its statements, in a transaction left open; its xid."""
        try:
            for statement in transaction.statements:
                _execute(conn, statement)
            return _xid(conn)
        except psycopg.OperationalError as exc:
            raise _Lost(str(exc)) from None

    def commit(self, conn: psycopg.Connection, xid: int) -> bool:
        """True once the database committed it: said so, or - the connection lost at the
        commit - says so when asked again."""
        try:
            conn.commit()
            return True
        except psycopg.OperationalError:
            self.reconnect()
            row = self.main.execute("SELECT pg_xact_status(%s::text::xid8)", (xid,)).fetchone()
            self.main.commit()
            return bool(row and row[0] == "committed")

    def close(self) -> None:
        for conn in (self.main, self.side):
            with contextlib.suppress(psycopg.Error):
                conn.close()


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
    ``rate``: row changes per second at most (0: as fast as the database takes them). The
    database restarted meanwhile: see ``_Application``; a long transaction open then is lost
    with its connection, as an application's would be."""
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

    app = _Application(uri, stop)
    open_long: tuple[Transaction, int, int] | None = None  # (it, its xid, commits left)
    try:
        for transaction in planned:
            if stop.is_set():
                app.side.rollback()  # an open long transaction never commits
                return committed
            if transaction.spans:
                try:
                    open_long = (transaction, app.begin(app.side, transaction), transaction.spans)
                except _Lost:
                    app.reconnect()  # its own connection gone: it never commits
                continue
            while True:  # written again until the database has it
                try:
                    xid = app.begin(app.main, transaction)
                except _Lost:
                    app.reconnect()
                    open_long = None  # the long one's connection went with it
                    continue
                if app.commit(app.main, xid):
                    break
                open_long = None
            done(transaction, xid)
            if open_long is not None:
                long, long_xid, left = open_long
                open_long = (long, long_xid, left - 1) if left > 1 else None
                if left == 1 and app.commit(app.side, long_xid):
                    done(long, long_xid)
        if open_long is not None and app.commit(app.side, open_long[1]):
            done(open_long[0], open_long[1])  # fewer transactions followed it than it spans
    finally:
        app.close()
    return committed
