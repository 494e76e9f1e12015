"""Faults on the consumers: a crash or a freeze at a named crash point, armed inside the
runtime (``harness.pipeline.crash``); a kill, or a freeze for a while, at a time or a count of
acknowledged records, by the nemesis from outside (what a command consumer can take)."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities
from harness.faults.back import NOT_KILLED, BackWait, Down, ran_out, unkilled
from harness.faults.base import (
    END,
    Actor,
    Context,
    Fault,
    Seen,
    Setting,
    Space,
    Step,
    Target,
    Timed,
    positive,
)
from harness.history.events import EventKind
from harness.pipeline.crash import CrashPlan, CrashPoint
from harness.pipeline.supervisor import RuntimeSupervisor
from harness.records import Problem

# The points where a sink's consumer can be struck (the relay's is relay-crash's).
SINK_POINTS = (
    CrashPoint.BEFORE_WRITE, CrashPoint.MID_WRITE, CrashPoint.AFTER_WRITE_BEFORE_COMMIT,
    CrashPoint.AFTER_COMMIT,
)  # fmt: skip


def sink_point(point: CrashPoint) -> list[Problem]:
    """A consumer's crash point: the relay's is a relay-crash fault's."""
    if point is CrashPoint.AFTER_PUBLISH_BEFORE_TOKEN:
        return [("point", f"{point.value} is an outbox relay's: use kind relay-crash")]
    return []


class _AtPoint(Fault):
    """Armed inside the runtime at a crash point: the nemesis has no steps for it, and the
    history has no window (its CRASH / PAUSED events say where it struck)."""

    targets_consumers: ClassVar[bool] = True
    own_run_only: ClassVar[bool] = True
    point: CrashPoint
    at_batch: int
    after_docs: int

    def steps(self, seed: int) -> tuple[Step, ...]:
        return ()

    def aim(self) -> str:
        return f"a consumer at {self.point}"

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if not any(r.black_box for r in setting.runtimes):
            return []
        return [
            (
                "point",
                f"{self.point} needs the lab's code inside the consumer, and a command consumer "
                "is a program the lab only starts and signals: use consumer-kill or "
                "consumer-freeze (at seconds or at_event acknowledged records)",
            )
        ]

    def reach(self, setting: Setting) -> tuple[str, str]:
        batch_size, events, per_consumer = setting.batch_size, setting.events, setting.per_consumer
        if self.point is CrashPoint.MID_WRITE and self.after_docs > batch_size:
            return (
                f"waits for {self.after_docs} documents of one batch, and no batch holds "
                f"more than pipeline.batch_size ({batch_size})",
                "",
            )
        if self.point is CrashPoint.MID_WRITE and self.after_docs > per_consumer:
            return (
                f"waits for {self.after_docs} documents of one batch, and a consumer gets "
                f"at most {per_consumer} of the {events} events",
                "",
            )
        if self.at_any_batch:
            return "", ""
        if self.at_batch > per_consumer:
            return (
                f"is planned at batch {self.at_batch}, and a consumer gets at most "
                f"{per_consumer} of the {events} events",
                "",
            )
        full_batches = math.ceil(per_consumer / batch_size)
        if self.at_batch > full_batches:
            return "", (
                f"is planned at batch {self.at_batch}, but a consumer may read its "
                f"{per_consumer} records in {full_batches} batch(es) of up to {batch_size}; "
                f"give at least {self.at_batch * batch_size * setting.readers} events, or a "
                "smaller pipeline.batch_size"
            )
        return "", ""

    @property
    def at_any_batch(self) -> bool:
        """Any batch may draw it (a seeded probability)."""
        return False

    def why_unfired(self, seen: Seen) -> str:
        kinds = (EventKind.CRASH, EventKind.PAUSED)
        if any(e.kind in kinds and e.fault == self.name for e in seen.events):
            return ""
        batches = Counter(e.source for e in seen.events if e.kind is EventKind.BATCH)
        most = max(batches.values(), default=0)
        where = f"{self.point.value} of batch {self.at_batch}"
        if self.point is CrashPoint.MID_WRITE:
            where += f" after {self.after_docs} documents"
        return f"its point ({where}) was never reached: a consumer handled at most {most} batches"


@dataclass(frozen=True)
class ConsumerCrash(_AtPoint):
    """SIGKILL a consumer at a named crash point: once, every Nth batch, or with a seeded
    probability. The runtime is restarted after ``restart_after`` seconds."""

    kind: ClassVar[str] = "consumer-crash"
    name: str
    point: CrashPoint
    at_batch: int = 1
    every: int | None = None
    probability: float | None = None
    times: int = 1
    after_docs: int = 1
    restart_after: float | None = None  # default: the pipeline's restart_delay_s

    def crash_plan(self, seed: int) -> CrashPlan:
        return CrashPlan(
            self.point,
            at_batch=self.at_batch,
            every=self.every,
            probability=self.probability,
            seed=seed,
            times=self.times,
            after_docs=self.after_docs,
            name=self.name,
        )

    @property
    def at_any_batch(self) -> bool:
        return self.probability is not None

    def problems(self) -> list[Problem]:
        found = self.crash_plan(0).problems() + sink_point(self.point)
        if self.restart_after is not None:
            found += positive("restart_after", self.restart_after, allow_zero=True)
        return found

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return {"point": rng.choice(SINK_POINTS).value, **space.batch(rng),
                "times": rng.randint(1, 2)}  # fmt: skip

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {"point": "after_write_before_commit", "at_batch": 2}


@dataclass(frozen=True)
class ConsumerPause(_AtPoint):
    """SIGSTOP a consumer at a named point for ``duration`` seconds - a stalled (zombie) consumer
    whose partitions move on while it is frozen, then it wakes and finishes its batch."""

    kind: ClassVar[str] = "consumer-pause"
    name: str
    point: CrashPoint
    duration: float
    at_batch: int = 1
    after_docs: int = 1
    times: int = 1

    def crash_plan(self, seed: int) -> CrashPlan:
        return CrashPlan(
            self.point,
            at_batch=self.at_batch,
            seed=seed,
            times=self.times,
            after_docs=self.after_docs,
            pause_s=self.duration,
            name=self.name,
        )

    def problems(self) -> list[Problem]:
        # crash_plan() reports a bad duration too (as pause_s): once is enough.
        return (
            positive("duration", self.duration)
            + [p for p in self.crash_plan(0).problems() if p[0] != "duration"]
            + sink_point(self.point)
        )

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return {"point": rng.choice(SINK_POINTS).value, **space.batch(rng),
                "duration": space.seconds(rng, 2, 15)}  # fmt: skip

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {"point": "mid_write", "after_docs": 10, "at_batch": 2, "duration": duration}


KILL, KILL_WHEN_BACK = "kill-consumers", "kill-consumers-when-back"


class _OnTheConsumers(Timed):
    """A timed fault on the consumers: all of them, or the one at index ``consumer``."""

    targets_consumers: ClassVar[bool] = True
    own_run_only: ClassVar[bool] = True
    consumer: int | None

    def consumer_problems(self) -> list[Problem]:
        if self.consumer is not None and self.consumer < 0:
            return [("consumer", f"must be >= 0, got {self.consumer}")]
        return []

    def aim(self) -> str:
        return "every consumer" if self.consumer is None else "one consumer"

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if (self.consumer or 0) < setting.consumers:
            return []
        return [
            (
                "consumer",
                f"there are {setting.consumers} consumer(s) (pipeline.consumers, or a command's "
                f"instances); no consumer {self.consumer}",
            )
        ]


@dataclass
class _Group:
    """The consumers one supervisor runs, as a kill sees them: the lanes they serve (several
    when lanes share them: a Connect cluster's workers, a Spark driver's queries), each lane's
    history told the same, and those the kill waits for."""

    targets: list[Target]
    waits_for: list[str] = field(default_factory=list)

    @property
    def supervisor(self) -> RuntimeSupervisor:
        return self.targets[0].supervisor

    def record(self, fault: Fault, detail: str, count: int | None = None) -> None:
        for target in self.targets:
            target.history.record(EventKind.FAULT_STEP, fault=fault.name, detail=detail,
                                  count=count)  # fmt: skip


def _groups(targets: Sequence[Target]) -> list[_Group]:
    """The targets by supervisor: a process that serves several lanes is killed once."""
    groups: dict[int, _Group] = {}
    for target in targets:
        groups.setdefault(id(target.supervisor), _Group([])).targets.append(target)
    return list(groups.values())


@dataclass
class _Killer(Actor):
    """SIGKILLs the consumers it aims at. One that is down when the kill is due is waited for
    (``harness.faults.back``); the history says what it did (FAULT_STEP events): that the kill
    waits, and for whom; whom it killed (``count`` of them), and after how long a wait; and
    each consumer aimed at and not killed."""

    fault: ConsumerKill
    context: Context
    back: BackWait = field(default_factory=BackWait)
    waiting: list[_Group] = field(default_factory=list)

    def take(self, step: Step) -> None:
        if step.action == KILL:
            self.back.start()
            for group in _groups(self.context.targets):
                down = group.supervisor.down(self.fault.consumer)
                # A kill of every consumer that finds one down waits for it, then kills them
                # all at once - not those running now and the others as they come back: a
                # group killed whole leaves no member to take the others' partitions over,
                # and one killed instance by instance is another fault (a rolling kill).
                if self.back.coming(down):
                    group.waits_for = list(down)
                    self.waiting.append(group)
                    group.record(self.fault, self.back.waits(down))
                else:
                    self._kill(group, down)
        elif step.action == KILL_WHEN_BACK:
            for group in self.waiting:
                self._kill(group, group.supervisor.down(self.fault.consumer))
            self.waiting = []
        else:
            super().take(step)

    def holds(self, step: Step) -> bool:
        """Every consumer waited for is back, or will not be before the deadline."""
        if self.back.over:
            return True
        return not any(
            self.back.coming(g.supervisor.down(self.fault.consumer)) for g in self.waiting
        )

    def _kill(self, group: _Group, down: Down) -> None:
        """SIGKILL the group's consumers that run; say which were down, and why not killed."""
        killed = group.supervisor.kill(self.fault.consumer)
        if killed:
            waited = self.back.waited(group.waits_for)
            group.record(self.fault, f"{', '.join(killed)} SIGKILL{waited}", len(killed))
        for name, at in down.items():
            group.record(self.fault, self.back.not_killed(name, at))
        if not killed and not down:
            group.record(self.fault, f"no consumer process {self.fault.consumer}: {NOT_KILLED}")

    def undo(self) -> None:
        """The run ended while the kill waited: it killed none of those."""
        for group in self.waiting:
            for name in group.waits_for:
                group.record(self.fault, ran_out(name))
        self.waiting = []

    @property
    def about(self) -> str:
        return ", ".join(n for g in self.waiting for n in g.waits_for)


@dataclass(frozen=True)
class ConsumerKill(_OnTheConsumers):
    """SIGKILL the consumers (all, or the one at index ``consumer``) at a time."""

    kind: ClassVar[str] = "consumer-kill"
    name: str
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    consumer: int | None = None

    def problems(self) -> list[Problem]:
        return self.trigger_problems() + self.consumer_problems()

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (self.opening(seed), Step(KILL), Step(KILL_WHEN_BACK, waits=True), Step(END))

    def actor(self, context: Context) -> Actor:
        return _Killer(self, context)

    def why_unfired(self, seen: Seen) -> str:
        """Also: a consumer it was aimed at was down and not back in time (``_Killer``)."""
        return super().why_unfired(seen) or unkilled(self.name, seen)

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return {**space.when(rng), **_one_consumer_or_all(rng, space)}

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return cls.when(at, at_event)


def _one_consumer_or_all(rng: random.Random, space: Space) -> dict[str, Any]:
    consumers = space.setting.consumers
    return {"consumer": rng.randrange(consumers)} if rng.random() < 0.5 and consumers > 1 else {}


FREEZE, THAW = "freeze-consumers", "thaw-consumers"
# Ends a FAULT_STEP's detail that names a consumer a freeze was aimed at and did not stop.
NOT_FROZEN = "not frozen"


@dataclass
class _Freezer(Actor):
    fault: ConsumerFreeze
    context: Context
    frozen: bool = False

    def take(self, step: Step) -> None:
        if step.action == FREEZE:
            self.frozen = True
            for group in _groups(self.context.targets):
                # Down ones first: a consumer stopped by the freeze is not down.
                down = group.supervisor.down(self.fault.consumer)
                frozen = group.supervisor.freeze(self.fault.consumer)
                if frozen:
                    group.record(self.fault, f"{', '.join(frozen)} SIGSTOP", len(frozen))
                for name in down:
                    group.record(self.fault, f"{name} down: {NOT_FROZEN}")
                if not frozen and not down:
                    group.record(
                        self.fault, f"no consumer process {self.fault.consumer}: {NOT_FROZEN}"
                    )
        elif step.action == THAW:
            self.undo()
        else:
            super().take(step)

    def undo(self) -> None:
        if self.frozen:
            for target in self.context.targets:
                target.supervisor.thaw()
            self.frozen = False


@dataclass(frozen=True)
class ConsumerFreeze(_OnTheConsumers):
    """SIGSTOP the consumers (all, or the one at index ``consumer``) for ``duration`` seconds,
    then SIGCONT: a process that stops answering without dying (a long GC pause, a stalled VM),
    its session timing out while it holds a batch - from outside, so any program can take it."""

    kind: ClassVar[str] = "consumer-freeze"
    # Thawed, a program acts on what it held - its stale write, its failed commit, its own error
    # lines - and a run that stopped it at the thaw would cut that off.
    aftermath_s: ClassVar[float] = 5.0
    name: str
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    consumer: int | None = None

    def problems(self) -> list[Problem]:
        return (
            self.trigger_problems() + positive("duration", self.duration) + self.consumer_problems()
        )

    def steps(self, seed: int) -> tuple[Step, ...]:
        return self.window(seed, FREEZE, THAW, self.duration)

    def actor(self, context: Context) -> Actor:
        return _Freezer(self, context)

    def why_unfired(self, seen: Seen) -> str:
        """Also: it froze no process - each one it was aimed at was down (``_Freezer``)."""
        steps = [e for e in seen.events if e.kind is EventKind.FAULT_STEP and e.fault == self.name]
        if not steps or any(e.count for e in steps):
            return super().why_unfired(seen)
        return "; ".join(e.detail for e in steps)

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return {
            **space.when(rng),
            "duration": space.seconds(rng, 1, 15),
            **_one_consumer_or_all(rng, space),
        }

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration}
