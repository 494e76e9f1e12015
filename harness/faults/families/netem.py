"""Packets dropped or delayed by the kernel on one container's interface (the containers
backend), for ``duration`` seconds. Every connection of the container is affected, each packet
it sends - unlike the fault proxy's rules, which act on whole chunks of one link; a dropped
packet makes TCP retransmit.

* ``loss_percent``: an iptables rule (``statistic --mode random``) in the container's network
  namespace.
* ``delay_ms``: ``tc qdisc ... netem delay`` there - on kernels that have sch_netem. This
  project's machines do not ("Specified qdisc kind is unknown"): a delay fails the run there,
  with that message; the loss works.
"""

from __future__ import annotations

from dataclasses import dataclass
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

ON, OFF = "netem-on", "netem-off"


class _NetemActor(ContainersActor):
    fault: NetemFault

    def take(self, step: Step) -> None:
        if step.action == ON:
            fault = self.fault
            self.acted = container_names(self.context, fault.target, fault.broker, fault.worker)
            for name in self.acted:
                if fault.loss_percent:
                    self.context.env.containers.drop(name, fault.loss_percent)
                if fault.delay_ms:
                    self.context.env.containers.netem(name, fault.rule)
            what = f"{fault.describe} on {', '.join(self.acted)}"
            self.context.record(EventKind.FAULT_STEP, fault, count=len(self.acted), detail=what)
        elif step.action == OFF:
            self.undo()
        else:
            super().take(step)

    def undo(self) -> None:
        for name in self.acted:
            if self.fault.loss_percent:
                self.context.env.containers.drop(name, 0)
            if self.fault.delay_ms:
                self.context.env.containers.netem(name, [])
        self.acted = []


@dataclass(frozen=True)
class NetemFault(Timed):
    """Delay (``delay_ms``, give or take ``delay_jitter_ms``) and/or drop (``loss_percent``)
    the packets a container sends, for ``duration`` seconds."""

    kind: ClassVar[str] = "netem"
    name: str
    target: ContainerTarget
    duration: float
    delay_ms: int = 0
    delay_jitter_ms: int = 0
    loss_percent: float = 0.0
    broker: int = 1  # target broker: the node
    worker: int = 1  # target spark-worker: the worker
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0

    @property
    def targets_consumers(self) -> bool:  # type: ignore[override]
        return self.target is ContainerTarget.CONSUMER

    @property
    def rule(self) -> tuple[str, ...]:
        """The netem rule of the delay."""
        rule: tuple[str, ...] = ()
        if self.delay_ms:
            rule += ("delay", f"{self.delay_ms}ms")
            if self.delay_jitter_ms:
                rule += (f"{self.delay_jitter_ms}ms",)
        return rule

    @property
    def describe(self) -> str:
        parts = [f"loss {self.loss_percent:g}%"] if self.loss_percent else []
        return " ".join([*parts, *self.rule])

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        if not (self.delay_ms or self.loss_percent):
            found.append(("", "give delay_ms, loss_percent or both"))
        found += positive("delay_ms", self.delay_ms, allow_zero=True)
        found += positive("delay_jitter_ms", self.delay_jitter_ms, allow_zero=True)
        if not 0 <= self.loss_percent <= 100:
            found.append(("loss_percent", f"must be within 0-100, got {self.loss_percent}"))
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return self.window(seed, ON, OFF, self.duration)

    def actor(self, context: Context) -> Actor:
        return _NetemActor(self, context)

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        return target_problems(self.target, self.broker, self.worker, setting, backend)

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration, "target": "consumer",
                "delay_ms": 200, "loss_percent": 5}  # fmt: skip
