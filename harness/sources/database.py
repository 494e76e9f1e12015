"""A run's own database on the environment's PostgreSQL: made before the run with the workload's
tables, dropped after it with every slot in it (a slot left behind holds WAL back and one of
the server's few slots), so runs sharing a server never see each other's changes.

Beside ``orders``, the run's ``marks`` table: the application's last transaction inserts one row
into it, and a CDC source that has put that row on its topic has put everything committed
before it there too (a source emits in commit order), as the relays' end marker says for an
outbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from harness.readiness import NotReady, wait_for
from harness.sources.sql_workload import DDL, REPLICA_IDENTITY
from harness.sources.truth import lsn_number
from harness.workload.events import TABLE

MARKS = "marks"
MARKS_DDL = f"CREATE TABLE {MARKS} (mark text PRIMARY KEY)"
END = "end"  # the row the application's last transaction inserts


def uri_of(server_uri: str, name: str) -> str:
    """The URI of database ``name`` on the server of ``server_uri``."""
    return server_uri.rsplit("/", 1)[0] + f"/{name}"


def create(server_uri: str, name: str) -> str:
    """Database ``name`` with the workload's tables; its URI."""
    with psycopg.connect(server_uri, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    uri = uri_of(server_uri, name)
    with psycopg.connect(uri, autocommit=True) as conn:
        for statement in (DDL, REPLICA_IDENTITY, MARKS_DDL):
            conn.execute(statement)
    return uri


def others_open(uri: str) -> int:
    """How many transactions of other sessions that wrote are open in the database (another
    application's: a long transaction's commit would come after an end mark written now)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def ended(uri: str) -> bool:
    """Whether the application's end mark is committed."""
    with psycopg.connect(uri) as conn:
        row = conn.execute(f"SELECT 1 FROM {MARKS} WHERE mark = %s", (END,)).fetchone()
    return row is not None


def mark_end(uri: str) -> int:
    """The application's last transaction: the end mark; its transaction id."""
    with psycopg.connect(uri) as conn:
        conn.execute(f"INSERT INTO {MARKS} VALUES (%s)", (END,))
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    return int(row[0])


def current_lsn(uri: str) -> int:
    """Where the server's log is now (Debezium's number for an LSN)."""
    with psycopg.connect(uri) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return lsn_number(str(row[0]))


def table_rows(uri: str) -> dict[int, int]:
    """The workload table's rows at the end: order_id -> version."""
    with psycopg.connect(uri) as conn:
        found = conn.execute(f"SELECT order_id, version FROM {TABLE}").fetchall()
    return {int(order_id): int(version) for order_id, version in found}


@dataclass(frozen=True)
class Slot:
    """A replication slot of the database, as ``pg_replication_slots`` has it."""

    name: str
    plugin: str  # test_decoding: the truth's; pgoutput: Debezium's
    active: bool  # a client streams from it
    restart: int  # its restart LSN (0: none left, an invalidated slot)
    # What the server keeps of its WAL (reserved, extended, unreserved; lost: invalidated, it
    # can give no change again)
    wal_status: str
    now: int  # the server's current LSN

    @property
    def behind_mb(self) -> float:
        return (self.now - self.restart) / 2**20 if self.restart else 0.0


SLOTS_HERE = (
    "SELECT slot_name, plugin, active, restart_lsn::text, wal_status, "
    "pg_current_wal_lsn()::text FROM pg_replication_slots WHERE database = current_database()"
)


def slots(conn: psycopg.Connection[Any]) -> list[Slot]:
    """The slots of the database ``conn`` is connected to."""
    return [
        Slot(str(name), str(plugin), bool(active), lsn_number(restart) if restart else 0,
             str(status or ""), lsn_number(now))
        for name, plugin, active, restart, status, now in conn.execute(SLOTS_HERE).fetchall()
    ]  # fmt: skip


def slot(uri: str, name: str) -> Slot | None:
    """Slot ``name`` of the database at ``uri`` (None while there is none)."""
    with psycopg.connect(uri) as conn:
        return next((s for s in slots(conn) if s.name == name), None)


# What a slot may keep of the server's WAL (MB; -1: all it needs): server-wide, set by the
# slot-behind fault through ALTER SYSTEM for one checkpoint.
SLOT_CAP = "max_slot_wal_keep_size"


def reset_slot_cap(server_uri: str) -> str:
    """The cap a run left in force, ALTER SYSTEM's (a run that died inside slot-behind's
    checkpoint), taken back; what it was ('' when there was none)."""
    with psycopg.connect(server_uri, autocommit=True) as conn:
        row = conn.execute(
            "SELECT setting, sourcefile FROM pg_settings WHERE name = %s", (SLOT_CAP,)
        ).fetchone()
        if row is None or row[0] == "-1" or not str(row[1] or "").endswith("postgresql.auto.conf"):
            return ""
        conn.execute(f"ALTER SYSTEM RESET {SLOT_CAP}")
        conn.execute("SELECT pg_reload_conf()")
    return f"{row[0]} MB"


SLOTS = "SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = %s"
DROP_WITHIN_S = 30.0  # a terminated client's slot is released when its backend has exited


def drop(server_uri: str, name: str) -> None:
    """Database ``name`` gone, and every replication slot in it (an active one's client is
    cut off first: a slot in use cannot be dropped)."""
    with psycopg.connect(server_uri, autocommit=True) as admin:

        def slots_gone() -> None:
            found = admin.execute(SLOTS, (name,)).fetchall()
            for slot, pid in found:
                if pid is not None:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    continue
                admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            if any(pid is not None for _slot, pid in found):
                raise NotReady(f"slots in use: {found}")

        wait_for(slots_gone, what=f"the slots of database {name} dropped", timeout=DROP_WITHIN_S)
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
