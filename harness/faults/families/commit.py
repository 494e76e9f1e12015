"""Commits that fail after the sink was written (seed 002: coordinator moves made commits fail).

How it reaches the commits is the runtime's to say (``harness.pipeline.runtimes``): for a
listener the fault proxy answers the consumers' OffsetCommit (and the other ``apis``) with
``error`` - an emulation of the broker's answer, seen by the real client; for Spark, whose
commit is its checkpoint, the query's commit log becomes unwritable (``environment.readonly``)
and Spark's own commit write fails - the filesystem's error, not one the lab raises.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.environment import readonly
from harness.environment.base import BackendAbilities, Link, LinkRule
from harness.faults.base import (
    Actor,
    Context,
    FaultStuck,
    LinkRuleActor,
    Seen,
    Setting,
    Space,
    Step,
    Target,
    Timed,
    needs_link_proxies,
    positive,
)
from harness.history.events import EventKind, HistoryEvent
from harness.history.windows import fault_windows
from harness.kafka.protocol import FAILABLE_APIS, ErrorCode
from harness.pipeline.runtimes import CommitFailureVia, Runtime
from harness.records import Problem

# The APIs a scenario names, by Kafka's names of them (``OffsetCommit``).
KAFKA_APIS = {api.title: api for api in FAILABLE_APIS}
ON, OFF = "commit-failure-on", "commit-failure-off"
# A failure is recorded once the consumer has the answer back: one that comes this long after
# the window closed was still a request the window failed.
REPORTED_S = 2.0


@dataclass
class _CommitLogHold(Actor):
    """Spark's way: each query's checkpoint commit log is unwritable while the fault lasts, so
    Spark's own write of a batch's commit fails after the batch was written."""

    targets: Sequence[Target]  # the Spark lanes of the run

    def take(self, step: Step) -> None:
        if step.action == ON:
            for target in self.targets:
                try:
                    readonly.hold(readonly.commit_log(target.checkpoint))
                except readonly.NotHeld as exc:
                    self.undo()
                    raise FaultStuck(str(exc)) from None
        elif step.action == OFF:
            self.undo()
        else:
            super().take(step)

    def undo(self) -> None:
        for target in self.targets:
            readonly.release(readonly.commit_log(target.checkpoint))


@dataclass
class _EachWay(Actor):
    """A run whose lanes are on runtimes that fail commits in different ways (a listener's
    through the proxy, Spark's through its checkpoint): each way's actor takes every step."""

    actors: Sequence[Actor]

    def take(self, step: Step) -> None:
        for actor in self.actors:
            actor.take(step)

    def undo(self) -> None:
        for actor in self.actors:
            actor.undo()


@dataclass(frozen=True)
class CommitFailure(Timed):
    """Commits fail for ``duration`` seconds after the sink was written. Listener: the proxy
    answers the consumers' ``apis`` requests with ``error`` (the real error, seen by the real
    client). Spark: the checkpoint's commit log is unwritable, so Spark's commit of a batch it
    wrote fails (and the restarted query replays it)."""

    kind: ClassVar[str] = "commit-failure"
    # The proxy answers only the run's own groups; the checkpoints held are the run's own.
    own_run_only: ClassVar[bool] = True
    name: str
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    error: str = "NOT_COORDINATOR"
    apis: tuple[str, ...] = field(default=("OffsetCommit",))

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        if self.error not in ErrorCode.__members__:
            known = ", ".join(ErrorCode.__members__)
            found.append(("error", f"unknown Kafka error {self.error!r} ({known})"))
        if not self.apis:
            found.append(("apis", "name at least one API"))
        found += [
            ("apis", f"unknown Kafka API {api!r} ({', '.join(KAFKA_APIS)})")
            for api in self.apis
            if api not in KAFKA_APIS
        ]
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return self.window(seed, ON, OFF, self.duration)

    def aim(self) -> str:
        return "the group's " + ", ".join(self.apis)

    @classmethod
    def injects(cls, runtime: Runtime) -> frozenset[EventKind]:
        # The proxy's error code, as the client reports it; Spark's failed checkpoint write is
        # Spark's own (the lab only made the directory unwritable).
        if runtime.commit_failure is not CommitFailureVia.PROXY:
            return frozenset()
        return frozenset({
            EventKind.KAFKA_ERROR, EventKind.COMMIT_FAILED, EventKind.CONSUMER_LOG,
        })  # fmt: skip

    def actor(self, context: Context) -> Actor:
        rule = LinkRule(
            Link.CONSUMER_KAFKA,
            "kafka-error",
            api_keys=tuple(KAFKA_APIS[a] for a in self.apis),
            error_code=ErrorCode[self.error],
            # The run's own consumer groups (``{topic}.{lane}``): a scenario beside it is not hit.
            group_prefix=f"{context.topic}." if context.topic else "",
        )
        held = [
            t for t in context.targets if t.runtime.commit_failure is CommitFailureVia.CHECKPOINT
        ]
        actors: list[Actor] = [_CommitLogHold(held)] if held else []
        if len(held) < len(context.targets):  # lanes whose commits go through the proxy
            actors.append(LinkRuleActor(context, rule, ON, OFF))
        return actors[0] if len(actors) == 1 else _EachWay(actors)

    def why_unfired(self, seen: Seen) -> str:
        """It fired for a variant if the variant's consumers had a request of its ``apis``
        fail while it held (a commit the consumer saw fail; an error the client logged): a
        window that closed before the variant's next commit hit nothing, whatever it
        overlapped (Spark's first batch of records can outlast it: docs/scenarios.md)."""
        if why := super().why_unfired(seen):
            return why
        windows = [w for w in fault_windows(seen.events) if w.name == self.name]
        if any(
            self._failed(e) and any(w.start <= e.t <= w.end + REPORTED_S for w in windows)
            for e in seen.events
        ):
            return ""
        held = ", ".join(f"{seen.since(w.start)} to {seen.since(w.end)}" for w in windows)
        return (
            f"none of the variant's {', '.join(self.apis)} requests failed while it held ({held})"
        )

    def _failed(self, event: HistoryEvent) -> bool:
        """A failure of one of its requests: a failed commit, or a group error the client
        logged for one of its APIs (``ERROR API``)."""
        if event.kind is EventKind.COMMIT_FAILED:
            return "OffsetCommit" in self.apis
        return event.kind is EventKind.KAFKA_ERROR and event.detail.rsplit(" ", 1)[-1] in self.apis

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if CommitFailureVia.PROXY in setting.commit_failure:
            return needs_link_proxies(backend)
        return []

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        apis = [a.title for a in FAILABLE_APIS if a.title == "OffsetCommit" or rng.random() < 0.3]
        return {**space.when(rng), "duration": space.seconds(rng, 2, 20),
                "error": rng.choice([e.name for e in ErrorCode]), "apis": apis}  # fmt: skip

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration,
                "apis": ["OffsetCommit", "Heartbeat"]}  # fmt: skip
