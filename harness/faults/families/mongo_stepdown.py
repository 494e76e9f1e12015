"""MongoDB's primary steps down, through the server's own ``replSetStepDown`` (``force``, for
``duration`` seconds): ``hello`` reports a secondary and no primary, every write is refused with
10107 NotWritablePrimary, reads go on. That answer is the server's, not one the lab makes up:
the drivers see the topology change and do what they do against a replica set (a retryable
write waits for a primary and is sent again; a write without retries fails to the application).
The lab's MongoDB is a single node: no election and no rollback - the same node is primary again
when the period ends (SecantusDB implements the window, documented in its ``stepdown.py``)."""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from typing import Any, ClassVar

from pymongo import MongoClient
from pymongo.errors import AutoReconnect

from harness.environment.servers.mongo import writable_primary
from harness.faults.base import (
    END,
    MONGO_HELD,
    Actor,
    Context,
    Space,
    Step,
    Timed,
    positive,
)
from harness.history.events import EventKind
from harness.records import Problem

# Waits until no other fault holds MongoDB (a restart would end the step-down early).
AWAIT_MONGO = "await-mongo-free"
STEP_DOWN = "step-down"
AWAIT_PRIMARY = "await-primary"  # the window ends once the node is a writable primary again


@dataclass
class _StepDown(Actor):
    fault: MongoStepDown
    context: Context

    @property
    def about(self) -> str:
        return "MongoDB"

    def holds(self, step: Step) -> bool:
        if step.action == AWAIT_MONGO:
            return self.context.hold(MONGO_HELD, self.fault)
        if step.action == AWAIT_PRIMARY:
            try:
                writable_primary(self.context.env.mongo_uri)
            except Exception:  # any failure of the probe reads as "not yet"
                return False
            return True
        raise ValueError(f"{step.action} is not a waiting step of {self.fault.name}")

    def take(self, step: Step) -> None:
        if step.action == STEP_DOWN:
            seconds = self.fault.duration
            self.context.record(
                EventKind.FAULT_STEP, self.fault, detail=f"replSetStepDown {seconds:g} s (force)"
            )
            client: MongoClient[dict[str, Any]] = MongoClient(
                self.context.env.mongo_uri, serverSelectionTimeoutMS=10_000
            )
            # A server may close every connection as it steps down: done, then.
            with client, contextlib.suppress(AutoReconnect):
                # mongod takes a whole number of seconds; SecantusDB's window is exactly it.
                client.admin.command("replSetStepDown", max(1, round(seconds)), force=True)
        elif step.action == AWAIT_PRIMARY:
            self.context.release(self.fault)
        elif step.action != AWAIT_MONGO:
            super().take(step)

    def undo(self) -> None:
        # Nothing to lift: the period ends by itself. What this fault holds is let go.
        self.context.release(self.fault)


@dataclass(frozen=True)
class MongoStepDown(Timed):
    """The primary steps down for ``duration`` seconds (``replSetStepDown`` with ``force``);
    the window ends once it is a writable primary again."""

    kind: ClassVar[str] = "mongo-stepdown"
    name: str
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        if self.duration and round(self.duration) < 1:
            found.append(
                ("duration", f"replSetStepDown takes whole seconds, >= 1: {self.duration}")
            )
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (
            self.opening(seed),
            Step(AWAIT_MONGO, waits=True),
            Step(STEP_DOWN),
            Step(AWAIT_PRIMARY, after=self.duration, waits=True),
            Step(END),
        )

    def actor(self, context: Context) -> Actor:
        return _StepDown(self, context)

    def aim(self) -> str:
        return "MongoDB"

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return {**space.when(rng), "duration": float(rng.randint(1, 10))}

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": max(1.0, float(round(duration)))}
