"""A long transaction on a CDC source's database: another application's transaction (a batch
job, a report that writes) inserts ``rows`` orders of its own and stays open for ``duration``
seconds while the workload's application commits on, then commits (or rolls back).

What it does is PostgreSQL's and Debezium's own: pgoutput sends a transaction's changes at its
commit, in commit order, so its rows reach the topic after changes committed while it was open,
though they were written before them; and the slot cannot move its restart point past the open
transaction's first change, so a Debezium restarted meanwhile has its log decoded again from
there and must skip what it had sent (its offsets' ``lsn_commit`` and ``lsn_proc``). Its
rows are committed changes like any other: the truth, read from the log, has them (a rolled
back one is not), and every stage is judged on them.
"""

from __future__ import annotations

import random
import time
import zlib
from dataclasses import dataclass
from typing import Any, ClassVar

import psycopg

from harness.environment.base import BackendAbilities
from harness.faults.base import (
    END,
    Actor,
    Context,
    Setting,
    Space,
    Step,
    Timed,
    needs_cdc_source,
    positive,
)
from harness.history.events import EventKind
from harness.records import Problem
from harness.sources import database
from harness.sources.spec import SourceKind
from harness.sources.sql_workload import COLUMNS
from harness.workload.events import TABLE

AWAIT, OPEN, CLOSE = "await-database", "open-transaction", "end-transaction"
# Its orders' ids, past any workload's (each fault's own block, by its name): the application's
# transactions never wait for its row locks, and its rows are told apart in the table.
IDS_FROM = 1_000_000_000


@dataclass
class _Open(Actor):
    fault: LongTransaction
    context: Context
    conn: psycopg.Connection[Any] | None = None
    xid: int = 0
    opened: float = 0.0
    late: bool = False  # due after the application's end mark: not opened

    @property
    def about(self) -> str:
        return "the source's database"

    def holds(self, step: Step) -> bool:
        """AWAIT: a connection to the database (a restart under way refuses it: the
        transaction opens once the database is back)."""
        try:
            self.late = database.ended(self.context.database)
            if not self.late:
                self.conn = psycopg.connect(self.context.database, connect_timeout=2)
        except psycopg.OperationalError:
            return False
        return True

    def take(self, step: Step) -> None:
        if step.action == AWAIT:
            pass  # connected
        elif step.action == OPEN:
            self._open()
        elif step.action == CLOSE:
            self._close()
        else:
            super().take(step)

    def _open(self) -> None:
        fault = self.fault
        first = fault.first_id
        rows = [(first + i, 1, "created", 100 * (i + 1)) for i in range(fault.rows)]
        if self.late:  # its commit would come after the run's end: it would hit nothing
            detail = "not opened: the application had committed its end mark"
            self.context.record(EventKind.FAULT_STEP, fault, detail=detail)
            return
        conn, self.conn = self.conn, None  # not autocommit: one transaction
        assert conn is not None, "opened at AWAIT"
        columns = ", ".join(COLUMNS)
        try:
            with conn.cursor() as cursor:
                cursor.executemany(f"INSERT INTO {TABLE} ({columns}) VALUES (%s, %s, %s, %s)",
                                   rows)  # fmt: skip
                found = cursor.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        except psycopg.OperationalError as exc:  # the database went down since: none opened
            conn.close()
            detail = f"no transaction opened: {str(exc).strip().splitlines()[0]}"
            self.context.record(EventKind.FAULT_STEP, fault, detail=detail)
            return
        assert found is not None
        self.conn, self.xid, self.opened = conn, int(found[0]), time.monotonic()
        detail = (f"transaction {self.xid} open: {fault.rows} orders inserted "
                  f"({first}..{first + fault.rows - 1})")  # fmt: skip
        self.context.record(EventKind.FAULT_STEP, fault, count=fault.rows, detail=detail)

    def _close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        if not self.xid:  # connected, never opened: the run ended first
            conn.close()
            return
        held = time.monotonic() - self.opened
        how = "rolled back" if self.fault.rollback else "committed"
        try:
            conn.rollback() if self.fault.rollback else conn.commit()
        except psycopg.Error as exc:  # the database restarted meanwhile: lost with it
            how = f"lost with its connection ({str(exc).strip().splitlines()[0]})"
        finally:
            conn.close()
        detail = f"transaction {self.xid} {how} after {held:.1f} s open"
        self.context.record(EventKind.FAULT_STEP, self.fault, detail=detail)

    def undo(self) -> None:
        """The run ended inside the window: the transaction ends as the fault says."""
        self._close()


@dataclass(frozen=True)
class LongTransaction(Timed):
    """Open a transaction on the CDC source's database that inserts ``rows`` orders, hold it
    open ``duration`` seconds, then commit it (or roll it back: ``rollback``)."""

    kind: ClassVar[str] = "long-transaction"
    name: str
    duration: float
    rows: int = 20
    rollback: bool = False
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0

    @property
    def first_id(self) -> int:
        return IDS_FROM + zlib.crc32(self.name.encode()) % 1_000_000 * 1_000

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        if not 1 <= self.rows <= 1_000:
            found.append(("rows", f"from 1 to 1000, got {self.rows}"))
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (self.opening(seed), Step(AWAIT, waits=True), Step(OPEN),
                Step(CLOSE, after=self.duration), Step(END))  # fmt: skip

    def actor(self, context: Context) -> Actor:
        return _Open(self, context)

    def aim(self) -> str:
        return "the source's database"

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        return needs_cdc_source(setting, "holds a transaction open on a CDC source's database")

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        """Drawn beside a Debezium source only."""
        if space.setting.source != SourceKind.DEBEZIUM:
            return None
        return {**space.when(rng), "duration": space.seconds(rng, 2, 20),
                "rows": rng.randint(1, 50), "rollback": rng.random() < 0.25}  # fmt: skip

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration, "rows": 20}
