"""A Debezium source whose task fails for good mid-stream: the run ends with what it had sent
(not at its deadline), the source's stage says it stopped and counts the changes it never
put on the topic, and every lane counts them lost too."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.environment.local import LocalEnvironment
from harness.environment.servers import postgres
from harness.report.write import write_report
from harness.run.runner import run_scenario
from harness.scenario import parse_scenario
from tests.support import lacking

pytestmark = pytest.mark.servers


def test_a_debezium_task_that_fails_for_good_ends_the_source_and_its_changes_are_lost(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    if postgres.installed()[0] is None:
        lacking(postgres.installed()[1])
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
