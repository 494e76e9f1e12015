"""MongoDB restarted under the run: stopped (SIGTERM, or SIGKILL when ``hard``), down for
``down_for`` seconds, started again on the same address with its data. Every client's
connections break; a change stream resumes from its token, a write is retried or fails."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities, Component
from harness.faults.base import (
    END,
    MONGO_HELD,
    Actor,
    Context,
    Setting,
    Space,
    Step,
    Timed,
    needs_server_control,
    positive,
)
from harness.history.events import EventKind
from harness.records import Problem

STOP_MONGO, START_MONGO = "stop-mongo", "start-mongo"
# Waits until no other fault holds MongoDB down: two restarts at once would each undo the other.
AWAIT_MONGO = "await-mongo"


@dataclass
class _MongoActor(Actor):
    fault: MongoRestart
    context: Context
    down: bool = False

    @property
    def about(self) -> str:
        return "MongoDB"

    def holds(self, step: Step) -> bool:
        if step.action != AWAIT_MONGO:
            raise ValueError(f"{step.action} is not a waiting step of {self.fault.name}")
        return self.context.hold(MONGO_HELD, self.fault)

    def take(self, step: Step) -> None:
        env = self.context.env
        if step.action == AWAIT_MONGO:
            pass  # it holds MongoDB now
        elif step.action == STOP_MONGO:
            how = "SIGKILL" if self.fault.hard else "SIGTERM"
            self.context.record(EventKind.FAULT_STEP, self.fault, detail=f"MongoDB {how}")
            self.down = True  # until it is back: an interrupted restart is undone too
            if self.fault.down_for:
                env.kill(Component.MONGO)  # down for a while: killed now, revived at START_MONGO
            else:
                env.restart(Component.MONGO, hard=self.fault.hard)  # returns once it is back
                self.down = False
                self.context.release(self.fault)
        elif step.action == START_MONGO:
            self.undo()
        else:
            super().take(step)

    def undo(self) -> None:
        if self.down:
            # Whatever state a stop or start was left in (a Ctrl-C mid-restart): none left,
            # then one started and ready.
            self.context.env.kill(Component.MONGO)
            self.context.env.revive(Component.MONGO)
            self.down = False
        self.context.release(self.fault)


@dataclass(frozen=True)
class MongoRestart(Timed):
    """Restart MongoDB: SIGTERM (a clean shutdown) or SIGKILL when ``hard``, then start it again
    at once - or, with ``down_for`` seconds (SIGKILL only), after that long. The window ends
    once it is a writable primary again."""

    kind: ClassVar[str] = "mongo-restart"
    name: str
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    hard: bool = False
    down_for: float = 0.0

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("down_for", self.down_for, allow_zero=True)
        if self.down_for and not self.hard:
            found.append(("down_for", "a server left down is killed: add hard: true"))
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        start = (Step(START_MONGO, after=self.down_for),) if self.down_for else ()
        wait = Step(AWAIT_MONGO, waits=True)
        return (self.opening(seed), wait, Step(STOP_MONGO), *start, Step(END))

    def actor(self, context: Context) -> Actor:
        return _MongoActor(self, context)

    def aim(self) -> str:
        return "MongoDB"

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        return needs_server_control(backend, "MongoDB")

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        hard = rng.random() < 0.5
        down = {"down_for": space.seconds(rng, 0, 5)} if hard and rng.random() < 0.5 else {}
        return {**space.when(rng), "hard": hard, **down}

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "hard": True}
