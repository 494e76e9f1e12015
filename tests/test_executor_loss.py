"""The executor-loss fault family, without servers: what it arms inside the Spark runtime, and
the scenarios it refuses before anything starts (it runs in ``spark-executor-loss``, on the
real standalone cluster - tests/test_library.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.environment.backends import get_backend
from harness.history.events import HistoryWriter
from harness.pipeline.crash import Crasher, CrashPlan, CrashPoint, Struck
from harness.scenario import ScenarioError, parse_scenario, runnable

LOCAL = get_backend("local").abilities


def scenario(**changes: Any) -> dict[str, Any]:
    return {
        "name": "s",
        "runtimes": ["spark"],
        "pipeline": {"batch_size": 300, "spark_cluster": "standalone"},
        "workload": {"events": 1500, "partitions": 3},
        "variants": ["naive"],
        "faults": [{"kind": "executor-loss", "at_batch": 2, "after_docs": 40}],
        **changes,
    }


def test_it_arms_a_mid_write_plan_that_strikes_the_executor() -> None:
    parsed = parse_scenario(scenario())
    assert runnable(parsed, LOCAL) == ()
    (plan,) = parsed.crash_plans
    assert (plan.point, plan.at_batch, plan.after_docs, plan.strikes) == (
        CrashPoint.MID_WRITE, 2, 40, Struck.EXECUTOR,
    )  # fmt: skip
    # It crosses into the executors' Python workers as JSON.
    assert CrashPlan.from_json(plan.to_json()) == plan
    assert not any(f.targets_consumers for f in parsed.faults)  # the variants share a driver


def test_it_is_refused_where_there_is_no_executor_to_lose() -> None:
    local = parse_scenario(scenario(runtimes=["listener", "spark"], pipeline={"batch_size": 300}))
    with pytest.raises(ScenarioError) as refused:
        runnable(local, LOCAL)
    message = str(refused.value)
    assert "the scenario also runs listener" in message
    assert "needs pipeline.spark_cluster: standalone" in message


def test_a_task_that_never_holds_enough_documents_is_refused() -> None:
    many = parse_scenario(
        scenario(faults=[{"kind": "executor-loss", "at_batch": 2, "after_docs": 600}])
    )
    with pytest.raises(ScenarioError, match="a task writes one partition's share"):
        runnable(many, LOCAL)


def test_a_bad_cluster_name_is_named() -> None:
    with pytest.raises(ScenarioError, match=r"pipeline.spark_cluster: must be one of local, "):
        parse_scenario(scenario(pipeline={"spark_cluster": "yarn"}))


def test_a_plan_due_at_a_batch_without_records_is_fired_by_a_later_batchs_task(
    tmp_path: Path,
) -> None:
    # The query's first batch can come before the workload's first records: its write tasks
    # had nothing to write. The driver arms the plan, and it stays armed into the next batch,
    # whose task - in a Python worker that never saw the first batch - fires it at its point.
    # (Drawn in each worker, the plan was due at a batch no task wrote in, and never fired:
    # spark-connector-replay's transactional lane, "executor-loss#1 never fired".)
    faults = [{"kind": "executor-loss", "at_batch": 1, "after_docs": 20}]
    (plan,) = parse_scenario(scenario(faults=faults)).crash_plans
    history = HistoryWriter(tmp_path / "history", "spark", "naive")
    driver = Crasher([plan], tmp_path / "crashes", history)
    driver.settle(driver.arm(CrashPoint.MID_WRITE, 1))  # no task had a record
    armed = driver.arm(CrashPoint.MID_WRITE, 2)
    assert [a.index for a in armed] == [0]
    worker = Crasher([plan], tmp_path / "crashes", history)
    worker.take_armed(CrashPoint.MID_WRITE, 2, tuple(a.index for a in armed))
    assert worker.firing(CrashPoint.MID_WRITE, 2, 19) == []
    assert worker.firing(CrashPoint.MID_WRITE, 2, 20) == [plan]
    # A retried task is handed the same plans: fired once already, it does not fire again.
    retried = Crasher([plan], tmp_path / "crashes", history)
    retried.take_armed(CrashPoint.MID_WRITE, 2, tuple(a.index for a in armed))
    assert retried.firing(CrashPoint.MID_WRITE, 2, 20) == []
    driver.settle(armed)
    assert driver.arm(CrashPoint.MID_WRITE, 3) == []  # fired: armed no more
