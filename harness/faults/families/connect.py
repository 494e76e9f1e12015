"""Faults on a Kafka Connect cluster's own parts: a worker lost (SIGKILL, a machine gone) or
restarted cleanly (SIGTERM, a rolling deploy), and a task restarted through Connect's REST API
(what an operator, or a script watching the status, does to a FAILED task).

A worker is a process of the run's Connect lanes' supervisor (``harness.pipeline.connect``),
restarted after ``pipeline.restart_delay_s`` as an orchestrator would restart its pod. Which
worker: ``worker`` (its index), or the one running task ``task`` of the connector of the lane
``of`` names - asked of Connect when the fault acts, since Connect decides where tasks run.
Nothing is emulated: the workers' group notices the loss itself (its session timeout), and the
lost tasks wait for the scheduled rebalance (``scheduled.rebalance.max.delay.ms``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities
from harness.errors import LabError
from harness.faults.base import END, Actor, Context, Setting, Space, Step, Target, Timed
from harness.history.events import EventKind
from harness.pipeline.connect import ConnectError, ConnectRest, ConnectSettings
from harness.records import FieldError, Problem

KILL_WORKER, RESTART_TASK = "kill-worker", "restart-task"
ROLES = ("leader", "follower")


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

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return cls.when(at, at_event)

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if not any(r.connect for r in setting.runtimes):
            return [("", "acts on a Kafka Connect cluster, and the scenario has no Connect lane")]
        if self.of and self.of not in setting.variants:
            return [("of", f"no lane {self.of!r} in the scenario")]
        return []

    def lanes(self, context: Context) -> list[Target]:
        """The lanes it acts on, once each: ``of``'s, or (by default) the first Connect lane's
        connector - the lanes share one cluster."""
        connect = [t for t in context.targets if t.runtime.connect]
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
        return "a Connect worker running a task" if self.of else "a Connect worker"

    def act(self, lane: Target) -> str:
        if self.of:
            index, worker = self._task_worker(lane)
            why = f" ({worker}), which ran task {self.task} of {lane.label}"
        else:
            index, why = self.worker.pick(self.settings(lane))
        if not self.hard:
            lane.supervisor.stop_cleanly(index)
            return f"stopped worker connect-{index} cleanly (SIGTERM){why}"
        lane.supervisor.kill(index)
        return f"SIGKILLed worker connect-{index}{why}"

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        if not cls.beside_connect(space):
            return None
        workers = space.setting.consumers
        roles = ROLES if workers > 1 else ()
        # A machine lost or a rolling deploy's clean restart: which of the two costs copies
        # depends on whether the worker's last offsets were committed.
        hard = rng.random() < 0.5
        return {**space.when(rng), "worker": rng.choice([*range(workers), *roles]), "hard": hard}


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
        return "a Connect task"

    def act(self, lane: Target) -> str:
        ConnectRest(self.settings(lane)).restart_task(lane.group, self.task)
        return f"restarted task {self.task} of {lane.label} through REST"

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return space.when(rng) if cls.beside_connect(space) else None
