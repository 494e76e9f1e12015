"""A scenario's ``source:``, checked before anything starts, and a CDC source's ledger for the
sinks (pure: no servers). The run itself is the library's cdc-debezium-crash
(tests/test_library.py), recounted there from the topic and MongoDB."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import pytest

from harness.checker.check import check
from harness.checker.explain import explain
from harness.checker.model import KIND_CODES, LedgerArrays, SinkSnapshot
from harness.checker.state import FinalState, check_state
from harness.environment.options import (
    CONTAINERS_ABILITIES,
    LOCAL_ABILITIES,
    external_abilities,
)
from harness.faults.base import Space
from harness.faults.families.network import NetworkFault
from harness.kafka.clients import StoredRecord
from harness.scenario import ScenarioError, parse_scenario, runnable
from harness.sources.spec import SourceKind
from harness.sources.sql_workload import split, transactions
from harness.sources.stages import (
    committed_ledger,
    expected_changes,
    final_state,
    sink_ledger,
    snapshots,
    topic_snapshot,
)
from harness.sources.truth import CommittedChange
from harness.workload.events import Kind, Op, change_event_id, change_lsn
from harness.workload.generator import WorkloadSpec

BASE: dict[str, Any] = {"name": "cdc", "variants": ["naive"]}
DEBEZIUM = {"kind": "debezium", "config": {"snapshot.mode": "no_data"}}


def test_a_scenario_reads_from_the_producer_unless_it_names_its_source() -> None:
    assert parse_scenario(BASE).source.kind == SourceKind.PRODUCER
    assert parse_scenario({**BASE, "source": "producer"}).source.cdc is False
    cdc = parse_scenario({**BASE, "source": DEBEZIUM}).source
    assert cdc.cdc and cdc.debezium().options == {"snapshot.mode": "no_data"}


def test_every_problem_of_a_source_is_named_before_anything_starts() -> None:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario({**BASE, "source": {"kind": "mysql"}})
    assert "source.kind: one of producer, debezium, outbox; got 'mysql'" in str(refused.value)
    pasted = {"kind": "debezium", "config": {"slot.name": "prod", "topic.prefix": "prod"},
              "connect": {"workers": 9, "offset.flush.interval.ms": "soon"}}  # fmt: skip
    with pytest.raises(ScenarioError) as refused:
        parse_scenario({**BASE, "source": pasted})
    said = str(refused.value)
    for where in ("source.config.slot.name", "source.config.topic.prefix",
                  "source.connect.workers", "source.connect.offset.flush.interval.ms"):  # fmt: skip
        assert where in said, said
    with pytest.raises(ScenarioError) as refused:
        parse_scenario({**BASE, "source": {"kind": "producer", "config": {"a": 1}}})
    assert "source.config: a producer source has no config" in str(refused.value)


def test_what_a_debezium_source_cannot_run_with_is_refused_by_name() -> None:
    lanes = {"runtimes": ["listener", "spark"], "variants": ["naive", "connect-default"]}
    cdc = parse_scenario({**BASE, **lanes, "source": DEBEZIUM})
    with pytest.raises(ScenarioError) as refused:
        runnable(cdc, replace(CONTAINERS_ABILITIES, postgres=False))
    said = str(refused.value)
    assert "a Debezium source reads PostgreSQL, which the containers backend does not run" in said
    assert "variants[1]: connect-default reads its records its own way" in said
    assert "variants[0]" not in said  # naive, the lab's own, reads them
    both = parse_scenario({**BASE, "runtimes": ["listener", "spark"], "source": DEBEZIUM})
    assert runnable(both, LOCAL_ABILITIES) == ()
    assert runnable(both, CONTAINERS_ABILITIES) == ()  # PostgreSQL in the lab's image


def test_a_connect_fault_on_the_source_needs_a_source_on_connect() -> None:
    kill = {"kind": "connect-worker-kill", "name": "k", "of": "source", "at": 1}
    runnable(parse_scenario({**BASE, "source": DEBEZIUM, "faults": [kill]}), LOCAL_ABILITIES)
    with pytest.raises(ScenarioError) as refused:
        runnable(parse_scenario({**BASE, "faults": [kill]}), LOCAL_ABILITIES)
    assert "faults[0].of: the scenario's source runs on no Connect cluster" in str(refused.value)


def test_a_database_restart_needs_a_source_database() -> None:
    restart = {"kind": "postgres-restart", "name": "r", "at": 1, "hard": True}
    runnable(parse_scenario({**BASE, "source": DEBEZIUM, "faults": [restart]}), LOCAL_ABILITIES)
    with pytest.raises(ScenarioError) as refused:
        runnable(parse_scenario({**BASE, "faults": [restart]}), LOCAL_ABILITIES)
    assert "faults[0]: restarts a CDC source's database, and the scenario's source is producer" in (
        str(refused.value)
    )


def test_a_slot_behind_needs_a_source_database_the_lab_started() -> None:
    behind = {"kind": "slot-behind", "name": "b", "at": 1, "duration": 5, "keep_mb": 16}
    debezium = parse_scenario({**BASE, "source": DEBEZIUM, "faults": [behind]})
    runnable(debezium, LOCAL_ABILITIES)
    with pytest.raises(ScenarioError) as refused:
        runnable(parse_scenario({**BASE, "faults": [behind]}), LOCAL_ABILITIES)
    assert "faults[0]: puts a CDC source's slot behind, and the scenario's source is producer" in (
        str(refused.value)
    )
    # A server the lab did not start: no WAL written into it, no setting of it changed.
    with pytest.raises(ScenarioError) as refused:
        runnable(debezium, external_abilities())
    assert "the external environment did not start PostgreSQL" in str(refused.value)
    # Its own fields, each problem named.
    with pytest.raises(ScenarioError) as bad:
        parse_scenario({**BASE, "source": DEBEZIUM, "faults": [
            {**behind, "wal_mb": 8, "keep_mb": 0, "duration": -1}]})  # fmt: skip
    for field in ("wal_mb: from 16 to 4096", "keep_mb: from 1", "duration"):
        assert field in str(bad.value), (field, str(bad.value))


def test_a_producers_record_bursts_are_refused_beside_a_database_source() -> None:
    """Resends and poison shape the lab producer's records: a database's changes are its
    application's, so such a fault would never fire - it is refused by name."""
    burst = {"name": "b", "start_event": 10, "events": 50, "fraction": 0.2}
    for kind in ("producer-resend", "poison"):
        fault = {"kind": kind, **burst}
        runnable(parse_scenario({**BASE, "faults": [fault]}), LOCAL_ABILITIES)
        with pytest.raises(ScenarioError) as refused:
            runnable(parse_scenario({**BASE, "source": DEBEZIUM, "faults": [fault]}),
                     LOCAL_ABILITIES)  # fmt: skip
        assert (
            "faults[0]: shapes the lab producer's records, and the scenario's source is "
            "debezium" in str(refused.value)
        )


def record(partition: int, offset: int, lsn: int, order_id: int, version: int) -> StoredRecord:
    payload = {"op": "u", "before": None, "source": {"txId": lsn // 10, "lsn": lsn},
               "after": {"order_id": order_id, "version": version}}  # fmt: skip
    value = json.dumps({"schema": {}, "payload": payload}).encode()
    return StoredRecord(partition, offset, {}, value, timestamp=1000.0 + offset)


def committed(lsn: int, order_id: int, version: int) -> CommittedChange:
    return CommittedChange(lsn, lsn // 10, "orders", Op.UPDATE, order_id, version, {}, 10.0)


def test_the_sinks_ledger_places_each_commit_at_its_first_record_and_lists_the_copies() -> None:
    changes = [committed(100, 1, 2), committed(110, 2, 2), committed(120, 3, 2)]
    records = [
        record(0, 0, 100, 1, 2),
        record(1, 0, 110, 2, 2),
        record(0, 1, 100, 1, 2),  # re-emitted after a restart: the same change again
        record(1, 1, 999, 9, 9),  # no committed change: not the sinks' to expect
        StoredRecord(0, 2, {}, None),  # a delete's tombstone
    ]
    rows = sink_ledger(changes, records, "t")
    got = [(r.event_id, r.kind, r.partition, r.offset) for r in rows]
    assert got == [
        ("lsn-100-1", Kind.NORMAL, 0, 0),
        ("lsn-110-2", Kind.NORMAL, 1, 0),
        ("lsn-120-3", Kind.NORMAL, -1, -1),  # committed, never on the topic
        ("lsn-100-1", Kind.COPY, 0, 1),
    ]
    ledger = LedgerArrays.from_rows(rows)
    assert int((ledger.kind == KIND_CODES[Kind.COPY]).sum()) == 1
    # A sink that stored every record: the copy is a duplicate, explained by the source's copy;
    # the change never on the topic is lost.
    stored = SinkSnapshot.from_lists([(1, 2, 1.0), (1, 2, 2.0), (2, 2, 1.0)], [(1, 2), (2, 2)])
    verdict = check(ledger, stored, produced=len(rows))
    assert (verdict.duplicates, verdict.lost, verdict.phantoms) == (1, 1, 0)
    assert explain([], ledger).unexplained(verdict.duplicates) == 0


def test_the_cdc_handler_needs_a_debezium_source_and_is_refused_without_one() -> None:
    cdc = parse_scenario({**BASE, "variants": ["connect-cdc", "naive"], "source": DEBEZIUM})
    assert runnable(cdc, LOCAL_ABILITIES) == ()
    assert {r for r, _ in cdc.lanes} == {"connect", "listener"}
    with pytest.raises(ScenarioError) as refused:
        runnable(parse_scenario({**BASE, "variants": ["naive", "connect-cdc"]}), LOCAL_ABILITIES)
    said = str(refused.value)
    assert "variants[1]: connect-cdc applies a Debezium source's change events" in said, said
    assert "variants[0]" not in said


def test_a_current_state_sink_is_judged_on_each_row_against_the_final_table() -> None:
    """One order per outcome: the row at its version; absent (lost); behind (stale); ahead, and
    one the database never had (phantoms); a deleted row gone, and one still there (stale)."""
    changes = [(1, 2, 10.0), (2, 1, 11.0), (3, 3, 12.0), (4, 1, 13.0), (5, 2, 14.0), (6, 2, 15.0)]
    ledger = LedgerArrays.of_changes(changes)
    final = FinalState(rows={1: 2, 2: 1, 3: 3, 4: 1}, deleted={5: 2, 6: 2})
    stored = {1: 2, 3: 2, 4: 2, 6: 1, 9: 1}  # 2 absent; 3 behind; 4 ahead; 5 gone; 6 still there
    verdict = check_state(final, stored, ledger, produced=6, in_sink=6)
    assert (verdict.acked, verdict.expected, verdict.in_sink) == (6, 6, 6)
    assert (verdict.lost, verdict.stale, verdict.phantoms, verdict.duplicates) == (1, 2, 2, 0)
    assert verdict.unique_in_sink == 1  # order 1 alone holds the table's version
    said = {(a.kind, a.order_id, a.version, a.at) for a in verdict.anomalies}
    assert said == {("lost", 2, 1, 11.0), ("stale", 3, 2, 12.0), ("stale", 6, 1, 15.0)}
    # Order 2 stored at its version: nothing lost.
    assert check_state(final, {**stored, 2: 1}, ledger, produced=6, in_sink=7).lost == 0


def test_the_final_state_is_the_table_and_the_rows_whose_last_change_deleted_them() -> None:
    delete = CommittedChange(40, 4, "orders", Op.DELETE, 2, 2, {}, 10.0)
    again = CommittedChange(50, 5, "orders", Op.CREATE, 3, 3, {}, 10.0)
    gone = CommittedChange(30, 3, "orders", Op.DELETE, 3, 2, {}, 10.0)
    state = final_state([committed(10, 1, 1), committed(20, 2, 1), delete, gone, again],
                        {1: 1, 3: 3})  # fmt: skip
    assert state == FinalState(rows={1: 1, 3: 3}, deleted={2: 2})


def read(
    partition: int, offset: int, lsn: int, order_id: int, version: int, mark: str
) -> StoredRecord:
    """A snapshot's read of a row: every read of one snapshot has its LSN and transaction."""
    payload = {"op": "r", "before": None, "source": {"txId": 7, "lsn": lsn, "snapshot": mark},
               "after": {"order_id": order_id, "version": version}}  # fmt: skip
    value = json.dumps({"schema": {}, "payload": payload}).encode()
    return StoredRecord(partition, offset, {}, value, timestamp=1000.0 + offset)


def test_over_a_table_with_rows_the_source_owes_each_row_once_then_each_later_change() -> None:
    # Order 1 was changed twice and order 2 deleted before Debezium started (LSN 500): the
    # snapshot owes order 1's row at version 2 and nothing of order 2; after, order 1's update.
    before = [committed(100, 1, 1), committed(110, 1, 2), committed(120, 2, 1),
              CommittedChange(130, 13, "orders", Op.DELETE, 2, 2, {}, 10.0)]  # fmt: skip
    after = [committed(600, 1, 3)]
    expected = expected_changes(before + after, {1: 2}, 500, 50.0)
    assert [(c.order_id, c.version, c.lsn) for c in expected] == [(1, 2, 500), (1, 3, 600)]
    # The snapshot interrupted and taken again: its read of order 1 comes twice, with the LSN
    # of each snapshot; the change after once.
    records = [read(0, 0, 510, 1, 2, "first"), read(0, 1, 700, 1, 2, "first"),
               read(0, 2, 700, 3, 1, "last"), record(0, 3, 600, 1, 3)]  # fmt: skip
    assert snapshots(records) == (2, 1)
    rows = sink_ledger(expected, records, "t")
    got = [(r.event_id, r.kind, r.offset) for r in rows]
    # A read is the change that made the version it read; its event id its own LSN's.
    assert got == [("lsn-510-1", Kind.NORMAL, 0), ("lsn-600-1", Kind.NORMAL, 3),
                   ("lsn-700-1", Kind.COPY, 1)]  # fmt: skip
    # Order 3's read is of no change the database committed: the topic stage's phantom.
    verdict = check(committed_ledger(expected), topic_snapshot(records), produced=2)
    assert (verdict.duplicates, verdict.lost, verdict.phantoms) == (1, 0, 1)


def test_the_application_rows_before_debezium_are_whole_transactions() -> None:
    planned = transactions(WorkloadSpec(events=200, keys=50, seed=3))
    head, tail = split(planned, 40)
    assert head + tail == planned
    changes = [len(t.changes) for t in head]
    assert sum(changes) >= 40 > sum(changes[:-1])
    assert split(planned, 0) == ([], planned)


def test_an_existing_table_is_for_a_database_source_alone() -> None:
    cdc = parse_scenario({**BASE, "source": {**DEBEZIUM, "existing": 100}}).source
    assert cdc.existing == 100
    with pytest.raises(ScenarioError) as refused:
        parse_scenario({**BASE, "source": {"kind": "producer", "existing": 100}})
    assert "source.existing: a producer source has no existing" in str(refused.value)
    with pytest.raises(ScenarioError) as refused:
        parse_scenario({**BASE, "source": {**DEBEZIUM, "existing": -1}})
    assert "source.existing: a count of row changes, 0 or more; got -1" in str(refused.value)


def test_a_cut_of_the_sources_database_link_needs_a_database_source_and_its_proxy() -> None:
    cut = {"kind": "network", "name": "c", "link": "source-postgres", "action": "cut",
           "duration": 5, "at": 1}  # fmt: skip
    for backend in (LOCAL_ABILITIES, CONTAINERS_ABILITIES):  # each has a proxy in front of it
        runnable(parse_scenario({**BASE, "source": DEBEZIUM, "faults": [cut]}), backend)
    with pytest.raises(ScenarioError) as refused:
        runnable(parse_scenario({**BASE, "faults": [cut]}), LOCAL_ABILITIES)
    assert (
        "faults[0].link: source-postgres is a CDC source's link to its database, and the "
        "scenario's source is producer (source: debezium)" in str(refused.value)
    )
    external = external_abilities((1, 2, 3))
    with pytest.raises(ScenarioError) as refused:
        runnable(parse_scenario({**BASE, "source": DEBEZIUM, "faults": [cut]}), external)
    assert "the external backend has no proxy on source-postgres" in str(refused.value)
    # Drawn beside a Debezium source alone; the other links' draws as before.
    setting = parse_scenario({**BASE, "source": DEBEZIUM}).setting
    for source, drawn in (("debezium", True), ("producer", False)):
        space = Space(replace(setting, source=source), LOCAL_ABILITIES, 10.0)
        links = set()
        for k in range(200):
            entry = NetworkFault.draw(random.Random(k), space)
            assert entry is not None
            links.add(entry["link"])
        assert ("source-postgres" in links) is drawn, links


def test_a_database_changes_lsn_is_read_back_from_its_identity() -> None:
    # The Debezium checks of the library's runs count a COPY's rows by the LSN they share.
    assert change_lsn(change_event_id(2_415_919_104, 17)) == 2_415_919_104
    assert change_lsn(change_event_id(7, 2_415_919_104)) == 7
