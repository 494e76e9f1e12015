"""The workload as an OLTP application writes it (``harness.sources.sql_workload``), written into
the environment's PostgreSQL (``sql_writer``) and read back from the database's own log
(``truth``): what the database committed, each change with its transaction id and LSN."""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict

import psycopg
import pytest

from harness.readiness import NotReady, wait_for
from harness.sources import database, sql_writer, truth
from harness.sources.sql_workload import (
    Shape,
    commit_order,
    final_rows,
    transactions,
)
from harness.workload.events import Op
from harness.workload.generator import WorkloadSpec


def test_the_same_seed_plans_the_same_transactions_with_every_shape() -> None:
    spec = WorkloadSpec(events=400, keys=100, seed=7)
    planned = transactions(spec)
    assert planned == transactions(spec)
    assert planned != transactions(WorkloadSpec(events=400, keys=100, seed=8))
    assert sum(len(t.changes) for t in planned) >= 400
    # Every shape, in the first few dozen changes already; several statements in one
    # transaction; long ones.
    small = transactions(WorkloadSpec(events=40, keys=100, seed=7))
    assert {s.shape for t in small for s in t.statements} == set(Shape)
    assert any(len(t.statements) > 1 for t in planned)
    # ... some changing one order twice (seed 000's key, txId + the row's key, meets them)
    assert any(max(Counter(c.order_id for c in t.changes).values()) > 1 for t in planned)
    assert any(t.spans for t in planned)
    # Each order's history holds in commit order: every change one version on (a delete too,
    # so no two changes share an identity), a create only of an absent order.
    last: dict[int, int] = {}
    present: set[int] = set()
    for transaction in commit_order(planned):
        for change in transaction.changes:
            before = last.get(change.order_id, 0)
            if change.op is Op.CREATE:
                assert change.order_id not in present and change.version == before + 1
                present.add(change.order_id)
            elif change.op is Op.UPDATE:
                assert change.order_id in present and change.version == before + 1
            else:
                assert change.order_id in present and change.version == before + 1
                present.remove(change.order_id)
            last[change.order_id] = change.version
    assert set(final_rows(planned)) == present


@pytest.mark.servers
def test_the_database_log_holds_each_committed_change_in_commit_order(
    postgres_database: str,
) -> None:
    planned = transactions(WorkloadSpec(events=300, keys=60, seed=11))
    slot = f"truth_{uuid.uuid4().hex[:8]}"
    truth.create_slot(postgres_database, slot)
    try:
        committed = sql_writer.write(postgres_database, planned)
        found = truth.read(postgres_database, slot)
    finally:
        truth.drop_slot(postgres_database, slot)
    by_seq = {t.seq: t for t in planned}
    # The writer's commits: every transaction, in the order they commit (a long one after
    # the transactions that began while it was open).
    assert [c.seq for c in committed] == [t.seq for t in commit_order(planned)]
    # Each transaction's changes at its commit, with its own xid (within a statement of many
    # rows, in the order the database applied them: an UPDATE ... FROM joins in its own order).
    planned_changes = [
        (c.xid, sorted((ch.op, ch.order_id, ch.version) for ch in by_seq[c.seq].changes))
        for c in committed
    ]
    logged: dict[int, list[tuple[Op, int, int]]] = defaultdict(list)
    for f in found:
        logged[f.xid].append((f.op, f.order_id, f.version))
    assert list(logged) == [c.xid for c in committed]  # commit order
    at = [f.committed_at for f in found]
    assert at == sorted(at) and at[0] > 0  # each change at its transaction's commit time
    assert [(x, sorted(changes)) for x, changes in logged.items()] == planned_changes
    # A long transaction's changes were written before the commits that precede its own: in
    # the log they come at its commit, with the lower LSNs they were written at.
    longs = {c.xid for c in committed if by_seq[c.seq].spans}
    assert longs
    lsns: dict[int, list[int]] = defaultdict(list)
    for f in found:
        lsns[f.xid].append(f.lsn)
    order = [x for x in dict.fromkeys(f.xid for f in found)]
    for xid in longs:
        earlier = order[: order.index(xid)]
        assert any(min(lsns[xid]) < min(lsns[e]) for e in earlier), xid
    # A COPY's rows are one WAL record: they share its LSN, so the LSN alone does not identify
    # a change (a sink keyed on it would keep one row of each COPY); the other shapes' rows
    # each have their own.
    xid_of = {c.seq: c.xid for c in committed}
    for t in planned:
        for statement in t.statements:
            changed = {(ch.order_id, ch.version) for ch in statement.changes}
            mine = [f for f in found if f.xid == xid_of[t.seq]]
            shared = {f.lsn for f in mine if (f.order_id, f.version) in changed}
            assert len(shared) == (1 if statement.shape is Shape.COPY else len(changed)), statement
    # Every shape reached the log; the table holds what the plan's commits leave.
    assert Counter(f.op for f in found).keys() == {Op.CREATE, Op.UPDATE, Op.DELETE}
    with psycopg.connect(postgres_database) as conn:
        rows = conn.execute("SELECT order_id, version, status, amount_cents FROM orders").fetchall()
    assert {r[0]: tuple(r) for r in rows} == final_rows(planned)


@pytest.mark.servers
def test_the_truth_read_as_the_run_goes_is_the_truth_read_once_at_the_end(
    postgres_database: str,
) -> None:
    planned = transactions(WorkloadSpec(events=300, keys=60, seed=5))
    once, going = (f"truth_{uuid.uuid4().hex[:8]}_{n}" for n in (1, 2))
    for slot in (once, going):
        truth.create_slot(postgres_database, slot)
    try:
        reader = truth.Truth(postgres_database, going)
        first, rest = planned[: len(planned) // 2], planned[len(planned) // 2 :]
        sql_writer.write(postgres_database, first)
        new = reader.catch_up()
        assert new == len(reader.changes) > 0
        assert reader.catch_up() == 0  # nothing committed since: nothing again
        sql_writer.write(postgres_database, rest)
        reader.catch_up()
        assert reader.changes == truth.read(postgres_database, once)
        assert len(reader.changes) == sum(len(t.changes) for t in planned)
    finally:
        for slot in (once, going):
            truth.drop_slot(postgres_database, slot)


@pytest.mark.servers
def test_a_slot_cap_a_dead_run_left_in_force_is_taken_back(postgres_database: str) -> None:
    server = database.uri_of(postgres_database, "postgres")
    assert database.reset_slot_cap(server) == ""  # none in force: nothing done
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET {database.SLOT_CAP} = '16MB'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        cap_becomes(server, "16MB")
        assert database.reset_slot_cap(server) == "16 MB"
        cap_becomes(server, "-1")
    finally:
        database.reset_slot_cap(server)


def cap_becomes(uri: str, value: str) -> None:
    """Until a new session sees the server's cap at ``value`` (a reload is asynchronous)."""

    def seen() -> None:
        with psycopg.connect(uri) as conn:
            row = conn.execute(f"SHOW {database.SLOT_CAP}").fetchone()
        if row is None or row[0] != value:
            raise NotReady(f"{database.SLOT_CAP} is {row}")

    wait_for(seen, what=f"{database.SLOT_CAP} {value}", timeout=30)
