"""Faults on Spark's own processes: an executor lost in the middle of a task's write.

Armed inside the runtime, like a consumer crash (``harness.pipeline.crash``): the task's
Python worker, after writing ``after_docs`` documents of its Kafka partition, SIGKILLs the
executor JVM it runs under (with that executor's Python workers) - a worker machine lost, or
its container OOM-killed. Nothing is injected into Spark: the driver sees its executor die,
marks the task failed and runs it again on the other worker's executor, which writes the whole
partition's share of the batch again. The batch then commits once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities
from harness.environment.spark import SparkCluster
from harness.faults.base import Fault, Seen, Setting, Space, Step
from harness.history.events import EventKind
from harness.pipeline.crash import CrashPlan, CrashPoint, Struck
from harness.records import Problem


@dataclass(frozen=True)
class ExecutorLoss(Fault):
    """SIGKILL the executor running a write task, ``after_docs`` documents into its partition's
    records, at the ``at_batch``-th batch (``times`` times in the run)."""

    kind: ClassVar[str] = "executor-loss"
    # The executor is its own application's (each application gets executors of its own).
    own_run_only: ClassVar[bool] = True
    # The variants may share a driver and its executors: an executor has one core, so the task
    # it loses is the one that reached the point, and the others' finished tasks stay finished
    # (a write job has no shuffle to recompute).
    name: str
    at_batch: int = 1
    after_docs: int = 1
    times: int = 1

    def aim(self) -> str:
        return "an executor"

    def crash_plan(self, seed: int) -> CrashPlan:
        return CrashPlan(
            CrashPoint.MID_WRITE,
            at_batch=self.at_batch,
            seed=seed,
            times=self.times,
            after_docs=self.after_docs,
            name=self.name,
            strikes=Struck.EXECUTOR,
        )

    def problems(self) -> list[Problem]:
        return self.crash_plan(0).problems()

    def steps(self, seed: int) -> tuple[Step, ...]:
        return ()

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        found: list[Problem] = []
        if others := sorted(r.name for r in setting.runtimes if not r.spark):
            found.append(
                ("", f"loses a Spark executor, and the scenario also runs {', '.join(others)}")
            )
        if setting.spark_cluster is not SparkCluster.STANDALONE:
            found.append(
                (
                    "",
                    "needs pipeline.spark_cluster: standalone (in local mode the executors run "
                    "inside the driver's JVM: losing one is a driver kill, consumer-crash)",
                )
            )
        return found

    def reach(self, setting: Setting) -> tuple[str, str]:
        # A task writes one Kafka partition's records of the batch.
        share = -(-setting.batch_size // setting.partitions)
        per_partition = -(-setting.events // setting.partitions)
        if self.after_docs > min(setting.batch_size, per_partition):
            return (
                f"waits for {self.after_docs} documents of one task, and a task writes one "
                f"partition's share of a batch (at most {min(setting.batch_size, per_partition)})",
                "",
            )
        if self.after_docs >= share:
            return "", (
                f"waits for {self.after_docs} documents of one task, and a batch of "
                f"{setting.batch_size} over {setting.partitions} partitions gives a task about "
                f"{share}; it fires in a later batch that gets that far, if any"
            )
        return "", ""

    def why_unfired(self, seen: Seen) -> str:
        if any(e.kind is EventKind.EXECUTOR_LOST and e.fault == self.name for e in seen.events):
            return ""
        return (
            f"no write task of batch {self.at_batch} or later reached {self.after_docs} "
            "documents of its partition"
        )

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return {**space.batch(rng), "times": rng.randint(1, 2)}

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {"at_batch": 2, "after_docs": 20}
