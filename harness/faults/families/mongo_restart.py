"""MongoDB restarted under the run: stopped (SIGTERM, or SIGKILL when ``hard``), down for
``down_for`` seconds, started again on the same address with its data. Every client's
connections break; a change stream resumes from its token, a write is retried or fails.

``ServerRestart`` is any server of the environment restarted so; a CDC source's PostgreSQL is
the other (``postgres_restart``)."""

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
# Waits until no other fault holds the server down: two restarts at once would each undo the
# other.
AWAIT_MONGO = "await-mongo"


@dataclass
class _RestartActor(Actor):
    fault: ServerRestart
    context: Context
    down: bool = False

    @property
    def about(self) -> str:
        return self.fault.server

    def holds(self, step: Step) -> bool:
        if step.action != AWAIT_MONGO:
            raise ValueError(f"{step.action} is not a waiting step of {self.fault.name}")
        return self.context.hold(self.fault.held, self.fault)

    def take(self, step: Step) -> None:
        env, fault = self.context.env, self.fault
        if step.action == AWAIT_MONGO:
            pass  # it holds the server now
        elif step.action == STOP_MONGO:
            how = "SIGKILL" if fault.hard else fault.clean_stop
            self.context.record(EventKind.FAULT_STEP, fault, detail=f"{fault.server} {how}")
            self.down = True  # until it is back: an interrupted restart is undone too
            if fault.down_for:
                env.kill(fault.component)  # down for a while: killed now, revived at START_MONGO
            else:
                env.restart(fault.component, hard=fault.hard)  # returns once it is back
                self.down = False
                self.context.release(fault)
        elif step.action == START_MONGO:
            self.undo()
        else:
            super().take(step)

    def undo(self) -> None:
        if self.down:
            # Whatever state a stop or start was left in (a Ctrl-C mid-restart): none left,
            # then one started and ready.
            self.context.env.kill(self.fault.component)
            self.context.env.revive(self.fault.component)
            self.down = False
        self.context.release(self.fault)


@dataclass(frozen=True)
class ServerRestart(Timed):
    """Restart a server of the environment: its clean stop, or SIGKILL when ``hard``, then
    start it again at once - or, with ``down_for`` seconds (SIGKILL only), after that long. The
    window ends once it answers again."""

    server: ClassVar[str]  # what it is, for people
    component: ClassVar[Component]
    held: ClassVar[str]  # what Context.hold calls it
    clean_stop: ClassVar[str] = "SIGTERM"  # its clean shutdown's signal
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
        return _RestartActor(self, context)

    def aim(self) -> str:
        return self.server

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        return needs_server_control(backend, self.server)

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        hard = rng.random() < 0.5
        down = {"down_for": space.seconds(rng, 0, 5)} if hard and rng.random() < 0.5 else {}
        return {**space.when(rng), "hard": hard, **down}

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "hard": True}


@dataclass(frozen=True)
class MongoRestart(ServerRestart):
    """Restart MongoDB: SIGTERM (a clean shutdown) or SIGKILL when ``hard``, then start it again
    at once - or, with ``down_for`` seconds (SIGKILL only), after that long. The window ends
    once it is a writable primary again."""

    kind: ClassVar[str] = "mongo-restart"
    server: ClassVar[str] = "MongoDB"
    component: ClassVar[Component] = Component.MONGO
    held: ClassVar[str] = MONGO_HELD
