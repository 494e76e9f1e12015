"""The executor-loss fault family, without servers: what it arms inside the Spark runtime, and
the scenarios it refuses before anything starts (it runs in ``spark-executor-loss``, on the
real standalone cluster - tests/test_library.py)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.environment.backends import get_backend
from harness.pipeline.crash import CrashPlan, CrashPoint, Struck
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
