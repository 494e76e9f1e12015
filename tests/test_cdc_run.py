"""Runs of a Debezium source under its own faults: a task that fails for good mid-stream (the
run ends with what it had sent, not at its deadline; the source's stage says it stopped and
counts the changes it never put on the topic, and every lane counts them lost too), and long
transactions of another application on its database."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.environment.local import LocalEnvironment
from harness.environment.servers import postgres
from harness.faults.families.long_transaction import LongTransaction
from harness.history.events import EventKind, read_history
from harness.report.write import write_report
from harness.run.runner import run_scenario
from harness.scenario import Scenario, parse_scenario
from harness.sources.sql_workload import transactions
from harness.workload.ledger import read_ledger
from tests.support import lacking

pytestmark = pytest.mark.servers


@pytest.fixture(autouse=True)
def _postgres_installed() -> None:
    """Each of these runs a Debezium source: the machine's PostgreSQL, or what installs it."""
    if postgres.installed()[0] is None:
        lacking(postgres.installed()[1])


def test_a_debezium_task_that_fails_for_good_ends_the_source_and_its_changes_are_lost(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    # A deployment that retries nothing (Debezium's errors.max.retries: 0): the database's
    # restart is a retriable error, and its task FAILS instead of reconnecting.
    scenario = parse_scenario({
        "name": "cdc-no-retries", "seed": 3,
        "source": {"kind": "debezium", "config": {"errors.max.retries": 0}},
        "workload": {"events": 600, "keys": 100, "rate": 100},
        "variants": ["naive"],
        "faults": [{"kind": "postgres-restart", "name": "restart", "at_event": 200}],
        "pipeline": {"timeout_s": 240},
    })  # fmt: skip
    said: list[str] = []
    result = run_scenario(scenario_env, scenario, tmp_path / "run", progress=said.append)
    (lane,) = result.variants
    assert lane.relay is not None
    source = lane.relay.published
    assert "FAILED" in source.stopped, source.stopped
    assert source.lost > 0 and source.unique_in_sink + source.lost == source.expected
    # The changes the source never sent are lost for the lane too, and nothing else.
    assert (lane.verdict.lost, lane.verdict.duplicates) == (source.lost, 0)
    assert any("Debezium stopped for good" in line for line in said), said
    write_report(tmp_path / "run")
    report = (tmp_path / "run" / "report.md").read_text()
    assert "it stopped for good: task 0 FAILED" in report, report[:3000]


def test_a_long_transactions_rows_are_committed_changes_and_a_rolled_back_ones_are_not(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    # Another application's transactions on the source's database, one committed and one
    # rolled back after being held open while the workload commits on; Debezium's worker is
    # SIGKILLed while the first is open (the slot cannot move past it).
    scenario = parse_scenario({
        "name": "cdc-long-transaction", "seed": 3,
        "source": {"kind": "debezium", "connect": {"offset.flush.interval.ms": 2000}},
        "workload": {"events": 800, "keys": 100, "rate": 100},
        "variants": ["naive", "idempotent"],
        "faults": [
            {"kind": "long-transaction", "name": "batch", "rows": 20, "duration": 5,
             "at_event": 100},
            {"kind": "long-transaction", "name": "undone", "rows": 10, "duration": 2,
             "rollback": True, "at_event": 150},
            {"kind": "connect-worker-kill", "name": "kill", "of": "source", "at_event": 300},
        ],
    })  # fmt: skip
    result = run_scenario(scenario_env, scenario, tmp_path / "run")
    planned = sum(len(t.changes) for t in transactions(scenario.workload))
    steps = [e.detail for e in read_history(tmp_path / "run" / "source" / "history")
             if e.kind is EventKind.FAULT_STEP]  # fmt: skip
    assert any(s.endswith("open: 20 orders inserted (" + span(scenario, "batch", 20) + ")")
               for s in steps), steps  # fmt: skip
    assert any(" committed after " in s for s in steps), steps
    assert any(" rolled back after " in s for s in steps), steps
    for lane in result.variants:
        assert lane.relay is not None
        source = lane.relay.published
        # The committed one's 20 rows are in the truth, read from the log, and on the topic;
        # the rolled back one's are in neither.
        assert source.expected == planned + 20, (source.expected, planned)
        assert (source.lost, source.phantoms) == (0, 0)
        assert (lane.verdict.lost, lane.verdict.phantoms) == (0, 0), lane.label
    (ledger,) = {lane.ledger for lane in result.variants}
    assert ledger is not None
    batch = LongTransaction("batch", 5.0).first_id
    rows = [r for r in read_ledger(ledger) if batch <= r.order_id < batch + 1000]
    assert len({r.order_id for r in rows}) == 20 and all(r.partition >= 0 for r in rows)


def span(scenario: Scenario, name: str, rows: int) -> str:
    (fault,) = [f for f in scenario.faults if f.name == name]
    assert isinstance(fault, LongTransaction)
    return f"{fault.first_id}..{fault.first_id + rows - 1}"


def test_a_long_transaction_open_when_the_application_ends_is_waited_for(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    # Opened near the application's end and held past it: the end mark waits for its commit,
    # so its rows are on the topic before the run stops looking (they were once counted lost at
    # the source, the run having ended first: found by explore, beside a stopped connector).
    scenario = parse_scenario({
        "name": "cdc-outlived", "seed": 3,
        "source": {"kind": "debezium", "connect": {"offset.flush.interval.ms": 1000}},
        "workload": {"events": 400, "keys": 100, "rate": 100},
        "variants": ["idempotent"],
        "faults": [{"kind": "long-transaction", "name": "late", "rows": 7, "duration": 8,
                    "at_event": 300}],
    })  # fmt: skip
    said: list[str] = []
    result = run_scenario(scenario_env, scenario, tmp_path / "run", progress=said.append)
    assert any("the end mark waits for 1 transaction(s)" in line for line in said), said
    planned = sum(len(t.changes) for t in transactions(scenario.workload))
    (lane,) = result.variants
    assert lane.relay is not None
    source = lane.relay.published
    assert source.expected == planned + 7 and (source.lost, lane.verdict.lost) == (0, 0)
