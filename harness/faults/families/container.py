"""Faults only containers make possible (the containers backend): a whole container killed,
stopped, frozen or cut from the environment's network, for ``duration`` seconds.

Unlike the link faults, nothing here goes through the lab's fault proxy: a ``disconnect`` takes
the container off its network (the engine's own operation), so every connection it has - to the
brokers and to MongoDB - stops answering, as a host whose switch port died. ``pause`` is the
cgroup freezer (every process of the container at once, not a signal to one).

Targets: ``consumer`` (every consumer of every variant running; a killed or stopped consumer is
started again by its supervisor, in a new container), ``mongo``, ``broker`` (the node ``broker``
names), or ``spark-worker`` (the standalone worker ``worker`` names, with its executors: their
tasks are retried on the other worker's); a server is started again when the window closes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities
from harness.faults.base import (
    Actor,
    ContainersActor,
    ContainerTarget,
    Context,
    Setting,
    Step,
    Timed,
    container_names,
    positive,
    target_problems,
)
from harness.history.events import EventKind
from harness.records import Problem

ON, OFF = "container-fault-on", "container-fault-off"


class ContainerAction(StrEnum):
    KILL = "kill"  # SIGKILL: the container stops
    STOP = "stop"  # SIGTERM, SIGKILL after a grace period
    PAUSE = "pause"  # the cgroup freezer
    DISCONNECT = "disconnect"  # off the network, back on when the window closes


class _ContainerActor(ContainersActor):
    fault: ContainerFault

    def take(self, step: Step) -> None:
        control = self.context.env.containers
        fault = self.fault
        if step.action == ON:
            self.acted = container_names(self.context, fault.target, fault.broker, fault.worker)
            for name in self.acted:
                match fault.action:
                    case ContainerAction.KILL:
                        control.kill(name)
                    case ContainerAction.STOP:
                        control.stop(name)
                    case ContainerAction.PAUSE:
                        control.pause(name)
                    case ContainerAction.DISCONNECT:
                        control.disconnect(name)
            self.context.record(EventKind.FAULT_STEP, fault, count=len(self.acted),
                                detail=f"{fault.action} {', '.join(self.acted)}")  # fmt: skip
        elif step.action == OFF:
            self.undo()
        else:
            super().take(step)

    def undo(self) -> None:
        control = self.context.env.containers
        for name in self.acted:
            match self.fault.action:
                case ContainerAction.PAUSE:
                    control.unpause(name)
                case ContainerAction.DISCONNECT:
                    control.reconnect(name)
                case _ if self.fault.target is not ContainerTarget.CONSUMER:
                    if control.state(name) != "running":
                        control.start(name)
                case _:
                    pass  # a consumer's supervisor starts it again, in a new container
        self.acted = []


@dataclass(frozen=True)
class ContainerFault(Timed):
    """Kill, stop, pause or disconnect containers for ``duration`` seconds."""

    kind: ClassVar[str] = "container"
    name: str
    target: ContainerTarget
    action: ContainerAction
    duration: float
    broker: int = 1  # target broker: the node
    worker: int = 1  # target spark-worker: the worker
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0

    @property
    def targets_consumers(self) -> bool:  # type: ignore[override]
        return self.target is ContainerTarget.CONSUMER

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        if self.target is ContainerTarget.BROKER and self.broker < 1:
            found.append(("broker", f"a node id (1, 2, 3), got {self.broker}"))
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return self.window(seed, ON, OFF, self.duration)

    def actor(self, context: Context) -> Actor:
        return _ContainerActor(self, context)

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        return target_problems(self.target, self.broker, self.worker, setting, backend)

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration, "target": "consumer",
                "action": "disconnect"}  # fmt: skip
