"""The write tasks Spark's driver lost, read from its log into a lane's history
(harness/pipeline/spark/log.py) - from lines as a driver of the lab wrote them, without Spark."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from harness.history.events import EventKind, HistoryEvent, read_history
from harness.pipeline.spark.log import harvest, lost_tasks

# A driver's log of a connector lane's batch 2 under a step-down (shortened traces), and an
# executor lost under the other lane's batch 1.
LOG = """\
2026-11-26T10:10:26.683Z ERROR Utils: Aborting task
2026-11-26T10:10:27.003Z WARN TaskSetManager: [queryId = fd96d] [batchId = 2] Lost task 0.0 \
in stage 7.0 (TID 18) (127.0.0.1 executor 0): com.mongodb.MongoNotPrimaryException: Command \
failed with error 10107 (NotWritablePrimary): 'not primary' on server 127.0.0.1:28513.
\tat com.mongodb.internal.connection.ProtocolHelper.createSpecialException(ProtocolHelper.java:253)
Caused by: java.lang.IllegalStateException: an inner cause
\tSuppressed: com.mongodb.spark.sql.connector.exceptions.DataException: Write aborted for: \
PartitionId: 0, TaskId: 18. Manual data clean up may be required.
\t\tat com.mongodb.spark.sql.connector.write.MongoDataWriter.abort(MongoDataWriter.java:139)
2026-11-26T10:10:27.100Z INFO DAGScheduler: something else
2026-11-26T10:09:38.982Z WARN TaskSetManager: [queryId = 0a1b2] [batchId = 1] Lost task 1.0 \
in stage 4.0 (TID 8) (127.0.0.1 executor 1): ExecutorLostFailure (executor 1 exited caused by \
one of the running tasks) Reason: Command exited with code 137
"""


def test_each_lost_task_with_its_error_and_the_connectors_abort() -> None:
    step_down, executor = list(lost_tasks(LOG.splitlines(keepends=True)))
    assert (step_down.query, step_down.batch, step_down.task) == (
        "fd96d",
        2,
        "task 0.0 in stage 7.0",
    )
    assert step_down.error.startswith("com.mongodb.MongoNotPrimaryException: Command failed")
    assert step_down.aborted and not executor.aborted
    assert step_down.t == datetime.fromisoformat("2026-11-26T10:10:27.003+00:00").timestamp()
    assert step_down.detail.endswith("; its write aborted - manual data clean up may be required")
    assert executor.error.startswith("ExecutorLostFailure (executor 1 exited")


def test_a_lane_gets_the_tasks_of_its_own_query_from_each_of_its_drivers(tmp_path: Path) -> None:
    logs, history = tmp_path / "logs", tmp_path / "history"
    logs.mkdir()
    (logs / "spark-driver-41.log").write_text(LOG)  # a driver shared with another lane's query
    started = [
        HistoryEvent(1.0, EventKind.RUNTIME_START, "spark", detail="pid 41, query fd96d3a0-77"),
        HistoryEvent(9.0, EventKind.RUNTIME_START, "spark", detail="pid 52, query fd96d3a0-77"),
    ]
    assert harvest(logs, history, started, "connector-sink") == 1
    (event,) = read_history(history)
    assert (event.kind, event.batch, event.variant) == (EventKind.TASK_FAILED, 2, "connector-sink")
    assert "NotWritablePrimary" in event.detail and "manual data clean up" in event.detail
    assert harvest(logs, tmp_path / "none", started[:0], "connector-sink") == 0
