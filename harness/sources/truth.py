"""A CDC source's truth: every row change PostgreSQL committed, read back from its own log
through a logical slot of the lab's (test_decoding, which ships with PostgreSQL), with its
transaction id and LSN - not what the writer meant to send.

The slot is made before the workload's first write and read as the run goes (``Truth``): a slot
holds the server's WAL until it is read, and a server that caps what a slot may hold
(``max_slot_wal_keep_size``, the slot-behind fault) invalidates one read only at the end. What
it returns is what the database committed, in commit order (an aborted transaction is never in
it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import psycopg

from harness.workload.events import TABLE, Op

PLUGIN = "test_decoding"
OPS = {"INSERT": Op.CREATE, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
# test_decoding's line for a row change, e.g.
#   table public.orders: UPDATE: old-key: order_id[bigint]:1 ... new-tuple: order_id[bigint]:1 ...
CHANGE = re.compile(
    r"^table (?P<schema>[^.]+)\.(?P<table>\S+): (?P<op>INSERT|UPDATE|DELETE): (?P<rest>.*)$"
)
COMMIT = re.compile(r"^COMMIT (?P<xid>\d+) \(at (?P<at>[^)]+)\)$")
COLUMN = re.compile(r"(?P<name>\w+)\[(?P<type>[^\]]+)\]:(?P<value>'(?:[^']|'')*'|\S+)")


def lsn_number(text: str) -> int:
    """``0/16B3748`` as the number Debezium writes as ``source.lsn``."""
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


@dataclass(frozen=True)
class CommittedChange:
    """One row change as the database's log has it: the row image it left (a delete: the one
    it removed, its version the order's next)."""

    lsn: int
    xid: int
    table: str
    op: Op
    order_id: int
    version: int
    row: dict[str, Any]
    committed_at: float = 0.0  # unix seconds: its transaction's commit, as the server logged it


def _value(raw: str) -> Any:
    if raw.startswith("'"):
        return raw[1:-1].replace("''", "'")
    if raw == "null":
        return None
    try:
        return int(raw)
    except ValueError:
        return raw


def parse(lsn: str, xid: int, line: str, table: str = TABLE) -> CommittedChange | None:
    """One line of the slot's output as a change of ``table`` (None: BEGIN, COMMIT, or
    another table's: the run's marks)."""
    found = CHANGE.match(line)
    if found is None or found["table"] != table:
        return None
    rest = found["rest"]
    if "new-tuple: " in rest:  # an update with the whole old row (REPLICA IDENTITY FULL)
        rest = rest.split("new-tuple: ", 1)[1]
    row = {m["name"]: _value(m["value"]) for m in COLUMN.finditer(rest)}
    op = OPS[found["op"]]
    version = int(row.get("version") or 0)
    # A delete is the order's change after the row's last version (sql_workload's identity).
    if op is Op.DELETE:
        version += 1
    return CommittedChange(
        lsn_number(lsn), xid, found["table"], op, int(row["order_id"]), version, row
    )


def create_slot(uri: str, slot: str) -> None:
    """The lab's own slot: from here on, every commit is kept for ``read``."""
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)", (slot, PLUGIN))


def read(uri: str, slot: str, table: str = TABLE) -> list[CommittedChange]:
    """Every change of ``table`` committed since the slot was made, in commit order (the slot
    is advanced past them: read once)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_get_changes("
            "%s, NULL, NULL, 'include-xids', '1', 'include-timestamp', '1', "
            "'skip-empty-xacts', '1')",
            (slot,),
        ).fetchall()
    changes: list[CommittedChange] = []
    pending: list[CommittedChange] = []  # the open transaction's, until its COMMIT line
    for lsn, xid, data in rows:
        if (commit := COMMIT.match(data)) is not None:
            at = datetime.fromisoformat(commit["at"]).timestamp()
            changes += [replace(c, committed_at=at) for c in pending]
            pending = []
        elif (change := parse(lsn, xid, data, table)) is not None:
            pending.append(change)
    return changes


@dataclass
class Truth:
    """The changes committed since the slot was made, read from it as the run goes
    (``catch_up``) and once more at the end."""

    uri: str
    slot: str
    changes: list[CommittedChange] = field(default_factory=list)
    # A slot read through SQL keeps its position on disk at checkpoints only: after a crash (a
    # hard restart) it decodes again from the last one, and a change read twice counts once.
    _seen: set[tuple[int, int]] = field(default_factory=set)

    def catch_up(self) -> int:
        """Read what was committed since the last read; how many changes were new."""
        new = [c for c in read(self.uri, self.slot) if (c.lsn, c.order_id) not in self._seen]
        self._seen.update((c.lsn, c.order_id) for c in new)
        self.changes += new
        return len(new)


def drop_slot(uri: str, slot: str) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (slot,),
        )
