"""What the lab sees of a command consumer from outside, written into its lane's history as the
run goes: the group's state, the offsets it committed, the documents in its sink collection,
and the lines it logs that read as errors. A black box says nothing of its batches, so these
are the lane's story (source ``observer``: seen by the lab, not said by the program).

The loop reads the same events to know the lane is ready (ASSIGNED: its group is stable with
each of its instances, its partitions given out), running (documents in the sink) and caught
up (COMMITTED).

A lane that is a job on a cluster (a connector on a Kafka Connect cluster) is put on it and
followed by its ``Job`` from the same polls: the cluster's API says what the group cannot.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from harness.environment.process import LOG_HEADER
from harness.history.events import EventKind, HistoryWriter
from harness.kafka.groups import GroupView, GroupWatch
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.variants.base import Job, Landing

POLL_S = 0.5
# A line that reads as an error, in any language's log: what the timeline marks.
ERROR_LINE = re.compile(r"error|exception|fatal|fail", re.IGNORECASE)
# Per instance and run: a flood of one error is one story, not thousands of events.
MAX_LOG_LINES = 200
LINE_CHARS = 600  # a Java log line's prefix (time, thread, logger, client and group) is half of it


class Observer:
    """Polls one black-box lane from outside, in a thread of its own, until ``stop``."""

    def __init__(
        self,
        *,
        bootstrap: str,
        mongo_uri: str,
        config: RuntimeConfig,
        landing: Landing,
        label: str,
        logs: Sequence[Path],
        job: Job | None = None,
        lines: re.Pattern[str] = ERROR_LINE,  # the log lines it records
        # The members its group is ready with (a program's instances; None: once stable). A
        # group stable with the first instance alone is rebalanced by the next one's join: a
        # workload started then met a freeze mid-rebalance, so the frozen instance held no batch.
        instances: int | None = None,
    ) -> None:
        self.config, self.landing = config, landing
        self._instances = instances
        self.job, self._lines = job, lines
        self.history = HistoryWriter(config.history_dir, "observer", label)
        self._group_watch = GroupWatch(bootstrap, config.group, config.topic)
        self._mongo: MongoClient[dict[str, Any]] = MongoClient(
            mongo_uri, serverSelectionTimeoutMS=2000
        )
        self._logs = {path: 0 for path in logs}  # path -> bytes read
        self._logged = dict.fromkeys(logs, 0)  # path -> error lines recorded
        self._group = ""
        self._ready = False
        self._committed: dict[int, int] = {}
        self._count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"observe-{label}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        """One last look (the final counts), then done; a poll stuck past ``timeout`` is left
        to die with the process (a daemon thread)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)
        if not self._thread.is_alive():  # a poll stuck past the deadline still uses them
            self._group_watch.close()
            self._mongo.close()

    def _run(self) -> None:
        while True:
            self.poll()
            if self._stop.wait(POLL_S):
                self.poll()
                return

    def poll(self) -> None:
        if self.job is not None:
            self.job.poll(self.history)
        try:
            view = self._group_watch.view()
        except (KafkaException, OSError):
            view = None  # a coordinator moving: ask again
        if view is not None:
            self._saw_group(view)
        try:
            count = self._mongo[self.config.database][self.landing.collection]
            self._saw_count(count.estimated_document_count(maxTimeMS=2000))
        except PyMongoError:
            pass  # MongoDB restarting: ask again
        for path in self._logs:
            self._read_log(path)

    def _saw_group(self, view: GroupView) -> None:
        if view.state != self._group:
            self._group = view.state
            self.history.record(EventKind.GROUP, detail=view.state)
        if not self._ready and view.stable and self._every_instance_in():
            self._ready = True
            self.history.record(EventKind.ASSIGNED, offsets=view.committed, detail=view.state)
        if view.committed != self._committed:
            self._committed = view.committed
            self.history.record(EventKind.COMMITTED, offsets=view.committed)

    def _every_instance_in(self) -> bool:
        if self._instances is None:
            return True
        try:
            return self._group_watch.formed(self._instances)
        except (KafkaException, OSError):
            return False  # a coordinator moving: ask again

    def _saw_count(self, count: int) -> None:
        if count != self._count:
            self._count = count
            self.history.record(EventKind.SINK_COUNT, count=count)

    def _read_log(self, path: Path) -> None:
        try:
            with path.open("rb") as f:
                f.seek(self._logs[path])
                data = f.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written: next time
        self._logs[path] += len(complete)
        for raw in complete.decode(errors="replace").splitlines():
            if raw.startswith(LOG_HEADER) or not self._lines.search(raw):
                continue
            if self._logged[path] >= MAX_LOG_LINES:
                return
            self._logged[path] += 1
            self.history.record(EventKind.CONSUMER_LOG, detail=f"{path.stem}: {raw[:LINE_CHARS]}")
