"""MongoDB's own fault: a ``failCommand`` failpoint for the consumers' commands."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pymongo import MongoClient

from harness.environment.base import BackendAbilities
from harness.faults.base import Actor, Context, Setting, Space, Step, Timed, positive
from harness.history.events import EventKind
from harness.pipeline.runtime import CONSUMER_APP
from harness.pipeline.runtimes import Runtime
from harness.records import Problem

ON, OFF = "failpoint-on", "failpoint-off"
# What a consumer's write sends, and the errors a primary that steps down or shuts down answers
# with (NotWritablePrimary, PrimarySteppedDown, ShutdownInProgress, InterruptedAtShutdown).
WRITE_COMMANDS = ("insert", "update", "commitTransaction")
RETRYABLE_CODES = (10107, 189, 91, 11600)


def draw_on_writes(
    rng: random.Random,
    space: Space,
    writes: Sequence[str],
    own: Callable[[random.Random], dict[str, Any]],
) -> dict[str, Any]:
    """A fault on MongoDB's write commands, drawn: which of ``writes``, when, for how long, the
    family's own fields (``own``), and now and then how many times."""
    commands = [c for c in writes if rng.random() < 0.6] or ["insert"]
    entry = {**space.when(rng), "duration": space.seconds(rng, 1, 10), "commands": commands,
             **own(rng)}  # fmt: skip
    if rng.random() < 0.3:
        entry["times"] = rng.randint(1, 5)
    return entry


@dataclass
class _Failpoint(Actor):
    fault: MongoFailCommand
    context: Context
    on: bool = False

    def _configure(self, mode: object, data: dict[str, object] | None = None) -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(self.context.env.mongo_uri)
        with client:
            command: dict[str, Any] = {"configureFailPoint": "failCommand", "mode": mode}
            if data is not None:
                command["data"] = data
            client.admin.command(command)

    def take(self, step: Step) -> None:
        if step.action == ON:
            fault = self.fault
            data: dict[str, object] = {
                "failCommands": list(fault.commands),
                "errorCode": fault.error_code,
                "appName": CONSUMER_APP,  # the consumers only, not the harness's own reads
            }
            if fault.labels:
                data["errorLabels"] = list(fault.labels)
            self._configure({"times": fault.times} if fault.times else "alwaysOn", data)
            self.on = True
        elif step.action == OFF:
            self.undo()
        else:
            super().take(step)

    def undo(self) -> None:
        if self.on:
            self._configure("off")
            self.on = False


@dataclass(frozen=True)
class MongoFailCommand(Timed):
    """A ``failCommand`` failpoint for the consumers' MongoDB commands, for ``duration`` seconds
    (or for its first ``times`` matching commands, whichever ends first)."""

    kind: ClassVar[str] = "mongo-failcommand"
    name: str
    commands: tuple[str, ...]
    error_code: int
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    labels: tuple[str, ...] = ()
    times: int | None = None

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        if not self.commands:
            found.append(("commands", "name at least one command, e.g. [commitTransaction]"))
        if self.times is not None and self.times < 1:
            found.append(("times", f"must be >= 1, got {self.times}"))
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return self.window(seed, ON, OFF, self.duration)

    @classmethod
    def injects(cls, runtime: Runtime) -> frozenset[EventKind]:
        # The failpoint's error code: MongoDB answers it because the lab told it to.
        return frozenset({EventKind.WRITE_FAILED, EventKind.MONGO_ERROR, EventKind.CONSUMER_LOG})

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if backend.test_commands:
            return []
        return [("", f"the {backend.name} environment did not start MongoDB: failCommand is a "
                 "test command (enableTestCommands) such a server may not have")]  # fmt: skip

    def actor(self, context: Context) -> Actor:
        return _Failpoint(self, context)

    def aim(self) -> str:
        return "MongoDB's " + ", ".join(self.commands)

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return draw_on_writes(
            rng, space, WRITE_COMMANDS, lambda r: {"error_code": r.choice(RETRYABLE_CODES)}
        )

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration,
                "commands": ["insert", "update"], "error_code": 10107}  # fmt: skip
