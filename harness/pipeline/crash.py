"""Crash points: named places in both runtimes where an armed plan SIGKILLs the consumer.

The kill takes the consumer's whole process group (a Spark driver takes its JVM and Python
workers with it), like a pod killed mid-batch. How many times a plan has fired is kept in a
file in the run directory, so "once" still means once after the runtime is restarted.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import NoReturn, Self

import psutil

from harness.environment.process import SERVER_VAR
from harness.history.events import EventKind, HistoryWriter


class CrashPoint(StrEnum):
    BEFORE_WRITE = "before_write"  # batch polled, nothing written
    MID_WRITE = "mid_write"  # after k of the batch's documents were written
    AFTER_WRITE_BEFORE_COMMIT = "after_write_before_commit"  # seed 000's gap
    AFTER_COMMIT = "after_commit"  # written and committed: a restart must not redo anything
    # An outbox relay's (seed 003): a change's messages published and flushed, its resume token
    # not saved yet. ``batch`` counts the change events the relay process handled.
    AFTER_PUBLISH_BEFORE_TOKEN = "after_publish_before_token"


class Struck(StrEnum):
    """What a crash plan kills."""

    # The consumer: its process group (a listener; Spark's driver with its JVM and, in local
    # mode, the executors inside it).
    CONSUMER = "consumer"
    # The Spark executor running the task that reached the point: its JVM and Python workers,
    # on a standalone worker. The driver lives on and retries the task on another executor.
    EXECUTOR = "executor"


# How a standalone worker's executor JVM is told apart from the processes above a Python worker.
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class CrashPlan:
    """When to kill the consumer at ``point``.

    Fires at the ``at_batch``-th batch a consumer process handles, then (if ``every`` is set)
    at every ``every``-th batch after it, or - with ``probability`` - at any batch with that
    chance drawn from ``seed``; never more than ``times`` times in the whole run. A mid_write
    plan due in a batch that ends before ``after_docs`` documents fires in the next batch
    that gets that far.
    """

    point: CrashPoint
    at_batch: int = 1
    every: int | None = None
    probability: float | None = None
    seed: int = 0
    times: int = 1
    after_docs: int = 1  # for mid_write: documents written before the kill
    pause_s: float | None = None  # freeze (SIGSTOP) for this long instead of killing
    name: str = ""  # the scenario's fault this plan carries out (recorded when it fires)
    strikes: Struck = Struck.CONSUMER

    @property
    def action(self) -> str:
        return "pause" if self.pause_s is not None else "kill"

    def problems(self) -> list[tuple[str, str]]:
        found = []
        if self.at_batch < 1:
            found.append(("at_batch", f"must be >= 1, got {self.at_batch}"))
        if self.every is not None and self.every < 1:
            found.append(("every", f"must be >= 1, got {self.every}"))
        if self.probability is not None and not 0 < self.probability <= 1:
            found.append(("probability", f"must be in (0, 1], got {self.probability}"))
        if self.times < 1:
            found.append(("times", f"must be >= 1, got {self.times}"))
        if self.after_docs < 1:
            found.append(("after_docs", f"must be >= 1, got {self.after_docs}"))
        if self.pause_s is not None and self.pause_s <= 0:
            found.append(("duration", f"must be > 0, got {self.pause_s}"))
        return found

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Self:
        raw = json.loads(text)
        raw["point"] = CrashPoint(raw["point"])
        raw["strikes"] = Struck(raw.get("strikes", Struck.CONSUMER))
        return cls(**raw)

    def due(self, batch_no: int, rng: random.Random) -> bool:
        """Whether the plan wants a crash at this process's ``batch_no``-th batch (1-based)."""
        if self.probability is not None:
            return rng.random() < self.probability
        if batch_no == self.at_batch:
            return True
        return (
            self.every is not None
            and batch_no > self.at_batch
            and ((batch_no - self.at_batch) % self.every == 0)
        )


@dataclass(frozen=True)
class Armed:
    """A plan due in the batch under way, whose ``nth`` firing another process may claim."""

    index: int
    plan: CrashPlan
    nth: int

    def line(self, batch: int) -> str:
        """As the lab's Spark hooks read it: index, nth, after_docs, strikes, pause_s ('' for
        a kill), batch, fault name - tab-separated."""
        pause = "" if self.plan.pause_s is None else f"{self.plan.pause_s:g}"
        fields = (self.index, self.nth, self.plan.after_docs, self.plan.strikes.value, pause,
                  batch, self.plan.name)  # fmt: skip
        return "\t".join(str(f) for f in fields)


class Crasher:
    """The armed crash plans of one consumer process."""

    def __init__(
        self,
        plans: list[CrashPlan],
        counter_dir: Path,
        history: HistoryWriter,
        *,
        group: int | None = None,
    ) -> None:
        self.plans = plans
        # A process group to signal instead of this process's own: a Spark executor's Python
        # worker kills (or freezes) the runtime that runs the driver, on the same machine.
        self.group = group
        self.counter_dir = counter_dir
        self.history = history
        # Each process life draws its own sequence, still a function of the seed.
        self._rngs = [random.Random(f"{p.seed}:{self._fired(i)}") for i, p in enumerate(plans)]
        self._drawn: dict[int, int] = {}  # plan index -> the batch_no its due() was drawn for
        # Plans due and not yet fired. A mid_write plan stays armed when its batch ends before
        # ``after_docs`` documents: how many records a batch holds depends on timing, and
        # "freeze at batch 3 after 20 documents" should happen in every run, not only in those
        # whose third batch happened to be big enough.
        self._armed: set[int] = set()

    def _mark(self, index: int, nth: int | str) -> Path:
        return self.counter_dir / f"crash-{index}-{self.plans[index].point}.fired-{nth}"

    def _fired(self, index: int) -> int:
        return len(list(self.counter_dir.glob(self._mark(index, "*").name)))

    def _claim(self, index: int) -> bool:
        """Count one firing of plan ``index``, unless it fired ``times`` already. Atomic across
        processes (an exclusive create): two executors' tasks reaching a plan's point at once
        fire it once."""
        self.counter_dir.mkdir(parents=True, exist_ok=True)
        while (nth := self._fired(index) + 1) <= self.plans[index].times:
            try:
                os.close(os.open(self._mark(index, nth), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                continue  # another process took this one: count again
            return True
        return False

    def firing(
        self, point: CrashPoint, batch_no: int, docs_written: int | None = None
    ) -> list[CrashPlan]:
        """The plans that fire at ``point`` of this process's ``batch_no``-th batch, counted as
        fired: the decision, without the signal (``reached`` acts on it)."""
        fired = []
        for index, plan in enumerate(self.plans):
            if plan.point is not point or self._fired(index) >= plan.times:
                continue
            if self._drawn.get(index) != batch_no:  # once per batch, however often reached
                self._drawn[index] = batch_no
                if plan.due(batch_no, self._rngs[index]):
                    self._armed.add(index)
            if index not in self._armed:
                continue
            if point is CrashPoint.MID_WRITE and docs_written != plan.after_docs:
                continue
            self._armed.discard(index)
            if self._claim(index):
                fired.append(plan)
        return fired

    def arm(self, point: CrashPoint, batch_no: int) -> list[Armed]:
        """The plans due at ``point`` of this process's ``batch_no``-th batch (drawn as
        ``firing`` draws them), for a point reached in another process - a write task of
        MongoDB's Spark connector, in Spark's JVM - which fires and claims them itself
        (harness/environment/spark_hooks: ``Watch``). ``settle`` after the batch."""
        armed = []
        for index, plan in enumerate(self.plans):
            if plan.point is not point or (fired := self._fired(index)) >= plan.times:
                continue
            if self._drawn.get(index) != batch_no:
                self._drawn[index] = batch_no
                if plan.due(batch_no, self._rngs[index]):
                    self._armed.add(index)
            if index in self._armed:
                armed.append(Armed(index, plan, fired + 1))
        return armed

    def take_armed(self, point: CrashPoint, batch_no: int, indices: tuple[int, ...]) -> None:
        """The plans at ``point`` of this ``batch_no``-th batch are the ones another process
        armed (a Spark driver, for its executors' tasks: ``arm``), not drawn here; ``firing``
        fires them when their point is reached."""
        for index, plan in enumerate(self.plans):
            if plan.point is point:
                self._drawn[index] = batch_no
                if index in indices:
                    self._armed.add(index)
                else:
                    self._armed.discard(index)

    def settle(self, armed: list[Armed]) -> None:
        """After a batch: a plan the other process fired is no longer armed; one it did not
        reach stays armed for the next batch, as ``firing`` keeps a mid_write plan."""
        for a in armed:
            if self._mark(a.index, a.nth).exists():
                self._armed.discard(a.index)

    def reached(
        self,
        point: CrashPoint,
        batch_no: int,
        docs_written: int | None = None,
        *,
        batch_id: int | None = None,
    ) -> None:
        """Called by the runtime at ``point``; kills this process group if a plan says so.

        ``batch_no`` counts this process's batches (what plans are written in); ``batch_id``
        is the runtime's own id of the batch, recorded in the history. For mid_write the
        runtime calls it after each document chunk with the number written.
        """
        batch = batch_no if batch_id is None else batch_id
        for plan in self.firing(point, batch_no, docs_written):
            if plan.pause_s is not None:
                # Frozen, not dead: the supervisor thaws it after pause_s (a GC pause, a stuck
                # pod). Meanwhile its partitions may move to another consumer.
                self.history.record(
                    EventKind.PAUSED, batch=batch, detail=point.value, fault=plan.name
                )
                self._signal(signal.SIGSTOP)
                continue
            if plan.strikes is Struck.EXECUTOR:
                kill_own_executor(self.history, batch, point, plan.name)
            self.history.record(EventKind.CRASH, batch=batch, detail=point.value, fault=plan.name)
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.group is not None:
            os.killpg(self.group, sig)
        else:
            signal_own_process_group(sig)


def signal_own_process_group(sig: int) -> None:
    """Signal this process and, if it leads its process group (runtimes are started in their
    own session), everything in the group: the Spark JVM and Python workers too."""
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), sig)
    else:
        os.kill(os.getpid(), sig)


def kill_own_executor(
    history: HistoryWriter, batch: int, point: CrashPoint, fault: str
) -> NoReturn:
    """SIGKILL the executor JVM this Python worker runs under, with every process it started,
    this one last - a lost executor, as a dead machine or an OOM-killed container leaves it."""
    me = psutil.Process()
    executor = next((p for p in me.parents() if EXECUTOR_MAIN in p.cmdline()), None)
    if executor is None:
        raise RuntimeError(
            "an executor-loss plan fired outside a standalone executor (no "
            f"{EXECUTOR_MAIN} above PID {me.pid})"
        )
    where = executor.environ().get(SERVER_VAR, "?")
    history.record(
        EventKind.EXECUTOR_LOST,
        batch=batch,
        detail=f"{point.value}: executor PID {executor.pid} on {where}",
        fault=fault,
    )
    others = [p for p in executor.children(recursive=True) if p.pid != me.pid]
    for victim in (executor, *others):
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.kill()
    me.kill()
    raise SystemExit(137)  # not reached: SIGKILL
