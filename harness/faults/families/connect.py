"""Faults on a Kafka Connect cluster's own parts: a worker lost (SIGKILL, a machine gone) or
restarted cleanly (SIGTERM, a rolling deploy), and a task restarted through Connect's REST API
(what an operator, or a script watching the status, does to a FAILED task).

A worker is a process of the run's Connect lanes' supervisor (``harness.pipeline.connect``),
restarted after ``pipeline.restart_delay_s`` as an orchestrator would restart its pod. Which
worker: ``worker`` (its index), or the one running task ``task`` of the connector of the lane
``of`` names - asked of Connect when the fault acts, since Connect decides where tasks run.
Nothing is emulated: the workers' group notices the loss itself (its session timeout), and the
lost tasks wait for the scheduled rebalance (``scheduled.rebalance.max.delay.ms``). A worker
lost is a fault under way until Connect has placed every task of the run's connectors on a
worker that runs again - the scheduled rebalance, or the restarted worker, or a new leader's
assignment at once: the run does not end before the timeline shows it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities
from harness.environment.process import ProcessHandle
from harness.errors import LabError
from harness.faults.back import NOT_KILLED, BackWait, Down, ran_out, unkilled
from harness.faults.base import END, Actor, Context, Seen, Setting, Space, Step, Target, Timed
from harness.history.events import EventKind
from harness.pipeline.connect.settings import (
    ConnectError,
    ConnectorState,
    ConnectRest,
    ConnectSettings,
)
from harness.records import FieldError, Problem
from harness.sources.spec import SOURCE_LABEL, SourceKind

KILL_WORKER, RESTART_TASK = "kill-worker", "restart-task"
KILL_WORKER_WHEN_BACK, TASKS_PLACED = "kill-worker-when-back", "await-tasks-placed"
ROLES = ("leader", "follower")
# Connect's defaults of the worker settings a lost worker's tasks wait out: the workers' group
# notices the loss after its session timeout, and holds the tasks for the scheduled rebalance's
# delay from then (docs/connect.md).
REBALANCE_DELAY_MS, WORKER_SESSION_MS = 300_000, 10_000
# Beyond those: the rebalance itself and the tasks' start on the worker given them, slow on a
# loaded machine (connect-worker-loss's tasks started 71-73 s after the kill, of 60 s + 10 s).
PLACED_MARGIN_S = 30.0
# A task is placed once Connect started it on a worker: RUNNING, or FAILED there - a failed
# task stays failed (its lane stops for good) and waiting for it to run would only hold the
# run until the deadline.
PLACED = ("RUNNING", "FAILED")
LOOK_TIMEOUT_S = 2.0  # a worker that does not answer Connect's status soon is asked next time


def placed_within_s(settings: ConnectSettings) -> float:
    """How long after a worker's loss Connect may take to place its tasks on another: the
    workers' session timeout, the scheduled rebalance's delay and a margin."""
    delay = int(settings.worker.get("scheduled.rebalance.max.delay.ms", REBALANCE_DELAY_MS))
    session = int(settings.worker.get("session.timeout.ms", WORKER_SESSION_MS))
    return (delay + session) / 1000 + PLACED_MARGIN_S


def unplaced(lane: str, state: ConnectorState | None, live: Callable[[str], bool]) -> list[str]:
    """The tasks of ``lane``'s connector Connect has not placed on a worker that runs (``live``,
    asked of a worker's id), each as ``task 1 of LANE (RUNNING on HOST:PORT)`` - Connect's status
    says RUNNING on a dead worker until its scheduled rebalance."""
    if state is None or not state.tasks:
        return [f"{lane}'s tasks (Connect lists none)"]
    return [
        f"task {t.task} of {lane} ({t.state} on {t.worker})"
        for t in state.tasks
        if t.state not in PLACED or not live(t.worker)
    ]


@dataclass(frozen=True)
class WorkerSelector:
    """Which worker: ``worker: 1`` (its index), ``worker: leader`` (the one leading the
    workers' group when the fault acts: its successor knows no assignment to hold back, and
    gives every task out at once) or ``worker: follower`` (one that does not lead it: its tasks
    wait for the scheduled rebalance)."""

    index: int = 0
    role: str = ""

    @classmethod
    def parse(cls, value: Any) -> WorkerSelector:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return cls(index=value)
        if value in ROLES:
            return cls(role=str(value))
        raise FieldError("", f"a worker's index (0, 1...), leader or follower; got {value!r}")

    def __str__(self) -> str:
        return self.role or str(self.index)

    def pick(self, settings: ConnectSettings) -> tuple[int, str]:
        """(the worker's index, why it): asked of the workers' logs for a role."""
        if not self.role:
            return self.index, ""
        leader = settings.leader_index()
        if leader is None:
            raise ConnectError("no worker has logged who leads the workers' group yet")
        if self.role == "leader":
            return leader, ", the group's leader"
        return next(i for i in range(settings.workers) if i != leader), ", a follower"


class _OnConnect(Timed):
    """A timed fault on the run's Connect cluster: on worker ``worker``, or on the one running
    task ``task`` of lane ``of``'s connector."""

    own_run_only: ClassVar[bool] = True  # the cluster is the run's own
    action: ClassVar[str]  # its one step
    of: str
    task: int

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (self.opening(seed), Step(self.action), Step(END))

    @staticmethod
    def beside_connect(space: Space) -> bool:
        """Whether the run it is drawn for has a Connect lane (it is drawn only then)."""
        return any(r.connect for r in space.setting.runtimes)

    @staticmethod
    def on_source(setting: Setting) -> bool:
        """Whether the scenario's source runs on a Connect cluster of its own (Debezium)."""
        return setting.source == SourceKind.DEBEZIUM

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return cls.when(at, at_event)

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if self.of == SOURCE_LABEL:
            if self.on_source(setting):
                return []
            return [("of", "the scenario's source runs on no Connect cluster (source: debezium)")]
        if not any(r.connect for r in setting.runtimes) and not self.on_source(setting):
            return [("", "acts on a Kafka Connect cluster, and the scenario has no Connect lane")]
        if self.of and self.of not in setting.variants:
            return [("of", f"no lane {self.of!r} in the scenario")]
        return []

    def lanes(self, context: Context) -> list[Target]:
        """The lanes it acts on, once each: ``of``'s (``source``: the source's connector), or
        (by default) the first Connect lane's connector - the lanes share one cluster - or the
        source's, when no lane runs on Connect."""
        connect = [t for t in context.everyone if t.runtime.connect]
        chosen = [t for t in connect if self.of in (t.label, t.name)] if self.of else connect
        if not chosen:
            raise LabError(f"{self.name}: no Connect lane {self.of!r} in this run")
        return chosen[:1]

    def act(self, lane: Target) -> str:
        """Take its one step on ``lane``'s connector; what it did, for the history."""
        raise NotImplementedError

    def actor(self, context: Context) -> Actor:
        return _ConnectActor(self, context)

    @staticmethod
    def settings(lane: Target) -> ConnectSettings:
        return ConnectSettings.from_json(lane.supervisor.config.connect)

    def _task_worker(self, lane: Target) -> tuple[int, str]:
        """The index and Connect id of the worker running task ``task`` of ``lane``'s
        connector now."""
        settings = self.settings(lane)
        state = ConnectRest(settings).status(lane.group)
        task = next((t for t in state.tasks if t.task == self.task), None) if state else None
        if task is None:
            raise ConnectError(f"{self.name}: Connect has no task {self.task} of {lane.label}")
        index = settings.worker_index(task.worker)
        if index is None:
            raise ConnectError(f"{self.name}: no worker of this run is {task.worker}")
        return index, task.worker


@dataclass
class _ConnectActor(Actor):
    fault: _OnConnect
    context: Context

    def take(self, step: Step) -> None:
        if step.action != self.fault.action:
            super().take(step)
        for lane in self.fault.lanes(self.context):
            self.context.record(EventKind.FAULT_STEP, self.fault, detail=self.fault.act(lane))


@dataclass(frozen=True)
class ConnectWorkerKill(_OnConnect):
    """SIGKILL one Connect worker at a time: worker ``worker``, or with ``of`` the one running
    task ``task`` of that lane's connector. ``hard: false`` stops it cleanly instead (SIGTERM:
    Connect's own shutdown stops its tasks, commits their offsets and leaves the group), as a
    rolling deploy restarts a worker; either way it is started again after
    ``pipeline.restart_delay_s``."""

    kind: ClassVar[str] = "connect-worker-kill"
    action: ClassVar[str] = KILL_WORKER
    name: str
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    worker: WorkerSelector = WorkerSelector()
    of: str = ""
    task: int = 0
    hard: bool = True  # SIGKILL (a machine lost); false: SIGTERM, Connect's clean shutdown
    # Connect's placing the tasks again is seen by the nemesis and by each lane's watch
    # (harness.pipeline.connect.watch), each polling on its own: the run goes on a few of the
    # watch's polls, so each lane's history has the tasks' new workers too.
    aftermath_s: ClassVar[float] = 2.0

    def problems(self) -> list[Problem]:
        found = self.trigger_problems()
        if self.task < 0:
            found.append(("task", f"an index, >= 0; got {self.task}"))
        if self.of and self.worker != WorkerSelector():
            found.append(("worker", "give worker or of (the worker running its task), not both"))
        return found

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        found = super().refusals(setting, backend)
        if not self.of and not self.worker.role and self.worker.index >= setting.consumers:
            found.append(
                ("worker", f"the cluster has {setting.consumers} workers; no worker {self.worker}")
            )
        if self.worker.role and setting.consumers < 2:
            found.append(("worker", f"{self.worker}: a cluster of one worker has no other"))
        return found

    def aim(self) -> str:
        if self.of == SOURCE_LABEL:
            return "the source's Connect worker (Debezium's)"
        return "a Connect worker running a task" if self.of else "a Connect worker"

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (
            self.opening(seed),
            Step(KILL_WORKER),
            Step(KILL_WORKER_WHEN_BACK, waits=True),
            Step(TASKS_PLACED, waits=True),
            Step(END),
        )

    def actor(self, context: Context) -> Actor:
        return _WorkerKiller(self, context)

    def pick(self, lane: Target) -> tuple[int, str]:
        """The index of the worker it aims at now, and why that one (for the history)."""
        if self.of:
            index, worker = self._task_worker(lane)
            return index, f" ({worker}), which ran task {self.task} of {lane.label}"
        return self.worker.pick(self.settings(lane))

    def why_unfired(self, seen: Seen) -> str:
        """Also: the worker it was aimed at was down and not back in time (``_WorkerKiller``)."""
        return super().why_unfired(seen) or unkilled(self.name, seen)

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        # A machine lost or a rolling deploy's clean restart: which of the two costs copies
        # depends on whether the worker's last offsets were committed.
        hard = rng.random() < 0.5
        source = cls.on_source(space.setting)
        if source and (not cls.beside_connect(space) or rng.random() < 0.5):
            return {**space.when(rng), "of": SOURCE_LABEL, "hard": hard}  # Debezium's worker
        if not cls.beside_connect(space):
            return None
        workers = space.setting.consumers
        roles = ROLES if workers > 1 else ()
        return {**space.when(rng), "worker": rng.choice([*range(workers), *roles]), "hard": hard}


@dataclass
class _WorkerKiller(Actor):
    """Kills (or stops cleanly) the worker its fault picks - one that is down then is waited
    for (``harness.faults.back``) - then waits until Connect has placed every task of the run's
    Connect lanes' connectors on a worker that runs, up to ``placed_within_s`` after the kill.
    The history says (FAULT_STEP events) whom it killed, after what wait; when every task was
    placed again, or which were not by the deadline - the kill happened either way: Connect's
    being slow is a finding of the run, not a fault that did not fire."""

    fault: ConnectWorkerKill
    context: Context
    back: BackWait = field(default_factory=BackWait)
    lane: Target | None = None  # the Connect lane its worker was picked by
    index: int = 0  # the worker aimed at
    why: str = ""  # why that one, for the history
    waiting: str = ""  # the worker, while the kill waits for it to be back
    struck: ProcessHandle | None = None  # the process killed, while its tasks are not placed
    struck_at: float = 0.0  # time.monotonic() then
    placed_by: float = 0.0  # the wait's deadline
    unplaced: list[str] = field(default_factory=list)  # what Connect had not placed, last look

    def take(self, step: Step) -> None:
        if step.action == KILL_WORKER:
            self.back.start()
            self.lane = self.fault.lanes(self.context)[0]
            try:
                self.index, self.why = self.fault.pick(self.lane)
            except ConnectError as exc:
                # Connect's status names a worker no longer running (its scheduled rebalance
                # not come yet), or no worker answers: no task's worker to aim at now.
                self._record(f"{exc}: {NOT_KILLED}")
                return
            down = self._down()
            if self.back.coming(down):
                self.waiting = ", ".join(down)
                self._record(self.back.waits(down))
            else:
                self._strike(down)
        elif step.action == KILL_WORKER_WHEN_BACK:
            if self.waiting:
                self._strike(self._down())
        elif step.action == TASKS_PLACED:
            self._placed()
        else:
            super().take(step)

    def holds(self, step: Step) -> bool:
        if step.action == KILL_WORKER_WHEN_BACK:
            return not self.waiting or self.back.over or not self.back.coming(self._down())
        if step.action != TASKS_PLACED or self.struck is None:
            return True  # nothing killed: nothing to wait for
        self.unplaced = self._look()
        return not self.unplaced or time.monotonic() >= self.placed_by

    def waits_until(self, step: Step) -> float | None:
        return self.placed_by if step.action == TASKS_PLACED and self.struck is not None else None

    def _record(self, detail: str) -> None:
        self.context.record(EventKind.FAULT_STEP, self.fault, detail=detail)

    def _down(self) -> Down:
        assert self.lane is not None  # picked by the kill's first step
        return self.lane.supervisor.down(self.index)

    def _strike(self, down: Down) -> None:
        """Kill (or stop) the worker unless it is down still; say which, after what wait."""
        assert self.lane is not None
        awaited, self.waiting = self.waiting, ""
        supervisor = self.lane.supervisor
        for name, at in down.items():
            self._record(self.back.not_killed(name, at))
        if down:
            return
        handle = supervisor.handle(self.index)
        ran = self._tasks_on(self.index)  # asked before: a dead worker's status is not news
        stop = supervisor.kill if self.fault.hard else supervisor.stop_cleanly
        reached = stop(self.index)
        if not reached or handle is None:  # it ended between the look and the signal
            self._record(f"no worker process connect-{self.index}: {NOT_KILLED}")
            return
        self.struck, self.struck_at = handle, time.monotonic()
        self.placed_by = self.struck_at + placed_within_s(self.fault.settings(self.lane))
        waited = self.back.waited([awaited] if awaited else [])
        if self.fault.hard:
            self._record(f"SIGKILLed worker {reached[0]}{self.why}{waited}; {ran}")
        else:
            self._record(f"stopped worker {reached[0]} cleanly (SIGTERM){self.why}{waited}; {ran}")

    def _tasks_on(self, index: int) -> str:
        """Which tasks of the run's Connect lanes worker ``index`` runs, as Connect says: a
        lane whose tasks all ran elsewhere loses nothing to its loss, and the history says so."""
        said = self._statuses()
        if said is None:
            return "Connect did not say which tasks it ran (no worker answered)"
        ran = []
        for lane, settings, state in said:
            listed = state.tasks if state else ()
            tasks = [t.task for t in listed if settings.worker_index(t.worker) == index]
            if tasks:
                ran.append(f"{lane.label}'s task{'s' * (len(tasks) > 1)} "
                           f"{', '.join(map(str, tasks))}")  # fmt: skip
        return f"it ran {'; '.join(ran)}" if ran else "it ran none of the lanes' tasks"

    def _look(self) -> list[str]:
        """What Connect has not placed on a worker that runs yet (the worker struck not gone
        yet: nothing Connect says counts)."""
        assert self.struck is not None
        if self.struck.alive():
            return [f"connect-{self.index}, not gone yet"]
        said = self._statuses()
        if said is None:
            return ["the lanes' tasks (no worker answered)"]
        return [
            task
            for lane, settings, state in said
            for task in unplaced(lane.label, state, partial(_live, lane, settings))
        ]

    def _statuses(self) -> list[tuple[Target, ConnectSettings, ConnectorState | None]] | None:
        """Each Connect lane's connector's status, as Connect says it now (None: no worker
        answered)."""
        found = []
        for lane in [t for t in self.context.everyone if t.runtime.connect]:
            settings = self.fault.settings(lane)
            try:
                found.append(
                    (
                        lane,
                        settings,
                        ConnectRest(settings, timeout=LOOK_TIMEOUT_S).status(lane.group),
                    )
                )
            except ConnectError:
                return None
        return found

    def _placed(self) -> None:
        """The end of the wait for Connect: every task placed again, or the deadline."""
        if self.struck is None:
            return
        after = time.monotonic() - self.struck_at
        what = "kill" if self.fault.hard else "stop"
        if self.unplaced:
            self._record(
                f"Connect had not placed {', '.join(self.unplaced)} {after:.1f} s after the "
                f"{what} (its scheduled rebalance's delay, the workers' session timeout and "
                f"{PLACED_MARGIN_S:.0f} s more): the fault ends without them"
            )
        else:
            self._record(f"Connect's tasks all started on live workers again, {after:.1f} s "
                         f"after the {what}")  # fmt: skip
        self.struck, self.unplaced = None, []

    def undo(self) -> None:
        """The run ended while it waited: say for what."""
        if self.waiting:
            self._record(ran_out(self.waiting))
            self.waiting = ""
        if self.struck is not None:
            unplaced = ", ".join(self.unplaced) or "its tasks"
            self._record(f"the run ended before Connect placed {unplaced} again")
            self.struck = None

    @property
    def about(self) -> str:
        if self.waiting:
            return self.waiting
        return ", ".join(self.unplaced) if self.struck is not None else ""


def _live(lane: Target, settings: ConnectSettings, worker: str) -> bool:
    """Whether the worker Connect calls ``worker`` is one of ``lane``'s that runs now (a
    restarted worker listens on a new port: a dead one's id names none)."""
    index = settings.worker_index(worker)
    return index is not None and not lane.supervisor.down(index)


@dataclass(frozen=True)
class ConnectTaskRestart(_OnConnect):
    """Restart task ``task`` of every Connect lane's connector (or of ``of``'s) through REST
    (``POST /connectors/NAME/tasks/N/restart``): the task stops, its records since the last
    offset flush are handed to the new one again."""

    kind: ClassVar[str] = "connect-task-restart"
    action: ClassVar[str] = RESTART_TASK
    name: str
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0
    of: str = ""
    task: int = 0

    def problems(self) -> list[Problem]:
        found = self.trigger_problems()
        if self.task < 0:
            found.append(("task", f"an index, >= 0; got {self.task}"))
        return found

    def lanes(self, context: Context) -> list[Target]:
        """``of``'s lane, or every Connect lane's connector."""
        return (
            super().lanes(context) if self.of else [t for t in context.targets if t.runtime.connect]
        )

    def aim(self) -> str:
        return (
            "the source's Connect task (Debezium's)"
            if self.of == SOURCE_LABEL
            else "a Connect task"
        )

    def act(self, lane: Target) -> str:
        ConnectRest(self.settings(lane)).restart_task(lane.group, self.task)
        return f"restarted task {self.task} of {lane.label} through REST"

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        if cls.on_source(space.setting) and (not cls.beside_connect(space) or rng.random() < 0.5):
            return {**space.when(rng), "of": SOURCE_LABEL}  # Debezium's task
        return space.when(rng) if cls.beside_connect(space) else None
