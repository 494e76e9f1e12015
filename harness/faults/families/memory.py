"""A consumer killed by the kernel's OOM killer (the containers backend): its container's memory
limit is lowered below what it uses, the kernel kills it (SIGKILL, as a crash at whatever point
it had reached), and its supervisor starts it again in a new container, without the limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities
from harness.faults.base import (
    END,
    Actor,
    ContainerTarget,
    Context,
    Problem,
    Setting,
    Step,
    Timed,
    container_names,
    needs_containers,
    positive,
)
from harness.history import EventKind

LIMIT = "memory-limit"
MIB = 1024 * 1024


@dataclass
class _LimitActor(Actor):
    fault: MemoryLimit
    context: Context
    acted: list[str] = field(default_factory=list)

    @property
    def about(self) -> str:
        return ", ".join(self.acted) or "the consumers"

    def take(self, step: Step) -> None:
        if step.action != LIMIT:
            super().take(step)
            return
        self.acted = container_names(self.context, ContainerTarget.CONSUMER, 0)
        for name in self.acted:
            self.context.env.containers.limit_memory(name, self.fault.limit_mb * MIB)
        self.context.record(EventKind.FAULT_STEP, self.fault, count=len(self.acted),
                            detail=f"memory limit {self.fault.limit_mb} MiB on "
                            f"{', '.join(self.acted)}")  # fmt: skip


@dataclass(frozen=True)
class MemoryLimit(Timed):
    """Lower every consumer's memory limit to ``limit_mb`` MiB at a time: the kernel kills
    each that uses more (a Python consumer uses ~60-90 MiB, a Spark driver far more)."""

    kind: ClassVar[str] = "memory-limit"
    targets_consumers: ClassVar[bool] = True
    name: str
    limit_mb: int = 32
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0

    def problems(self) -> list[Problem]:
        return self.trigger_problems() + positive("limit_mb", self.limit_mb)

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (self.opening(seed), Step(LIMIT), Step(END))

    def actor(self, context: Context) -> Actor:
        return _LimitActor(self, context)

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        return needs_containers(backend)

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "limit_mb": 32}
