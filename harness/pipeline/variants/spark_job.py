"""A user's own Spark job as a variant: the code they run in production, unchanged, under the
lab's faults, and judged like any variant.

    variants: [{name: spark-job, job: mypkg.jobs:ingest}]

``ingest(stream, sink)`` receives the Kafka stream - ``spark.readStream.format("kafka")`` on
the scenario's topic, as the lab's own runtime reads it - and a ``JobSink`` (where to write,
and the checkpoint to use); it returns either

* a ``foreachBatch`` function ``(DataFrame, batch_id) -> None``: the lab starts the query with
  it, and its crash points (before the write, after the write before the checkpoint commit)
  sit around the call - a driver killed between the job's write and Spark's commit replays the
  batch into the job; or
* a started ``StreamingQuery`` (checkpointed at ``sink.checkpoint``): the lab only watches it -
  a crash point inside the job cannot be reached, timed faults and ``after_commit`` can.

What the checker reads is the sink's contract: ``sink.events`` holds one document per change
the job stored, carrying the change's ``order_id`` and ``version`` (copies are separate
documents); ``sink.orders`` the current state, ``_id`` = ``order_id`` with its ``version``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.pipeline.batch import Batch
from harness.pipeline.runtimes import Runtime
from harness.pipeline.variants.base import Variant, WriteContext, import_callable


@dataclass(frozen=True)
class JobSink:
    """Where a user's job writes, and how its query is checkpointed and named."""

    mongo_uri: str
    database: str
    events: str  # one document per change stored (order_id, version)
    orders: str  # the current state: _id = order_id, version
    checkpoint: str  # the query's checkpointLocation
    query_name: str


def load_job(spec: str) -> Callable[..., Any]:
    """``module:callable``, imported; BadInput naming what is missing."""
    return import_callable(spec, "spark-job job")


@dataclass
class SparkJob(Variant):
    """The user's job (``job: module:callable``) writes its batches itself."""

    name = "spark-job"
    parses_records: ClassVar[bool] = False
    job: str = ""

    def runs_on(self, runtime: Runtime) -> bool:
        return runtime.spark  # its job is a Spark job

    def __post_init__(self) -> None:
        load_job(self.job)

    @property
    def label(self) -> str:
        return f"job-{self.job.partition(':')[2]}"

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        raise TypeError("a user's Spark job writes its batches itself (see SparkJob)")
