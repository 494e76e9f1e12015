"""Faults on an outbox relay (seed 003): SIGKILL the relay after a change's messages were
published and before its resume token was saved, armed inside the relay process like a
consumer's crash point (``harness.pipeline.crash``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities
from harness.faults.base import Fault, Seen, Setting, Step
from harness.history.events import EventKind
from harness.pipeline.crash import CrashPlan, CrashPoint
from harness.records import Problem


@dataclass(frozen=True)
class RelayCrash(Fault):
    """Kill the relay between publish and token save, at its ``at_change``-th change event
    (counted per relay process), then every ``every``-th, at most ``times`` times. The relay
    is restarted after the pipeline's ``restart_delay_s`` and resumes from its saved token."""

    kind: ClassVar[str] = "relay-crash"
    targets_consumers: ClassVar[bool] = True
    own_run_only: ClassVar[bool] = True
    name: str
    at_change: int = 1
    every: int | None = None
    times: int = 1

    def crash_plan(self, seed: int) -> CrashPlan:
        return CrashPlan(
            CrashPoint.AFTER_PUBLISH_BEFORE_TOKEN,
            at_batch=self.at_change,
            every=self.every,
            seed=seed,
            times=self.times,
            name=self.name,
        )

    def problems(self) -> list[Problem]:
        renamed = {"at_batch": "at_change"}
        return [(renamed.get(f, f), p) for f, p in self.crash_plan(0).problems()]

    def steps(self, seed: int) -> tuple[Step, ...]:
        return ()

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if setting.relays:
            return []
        return [("", "kills an outbox relay, and the scenario has none (add outbox: and relays:)")]

    def reach(self, setting: Setting) -> tuple[str, str]:
        return "", ""

    def why_unfired(self, seen: Seen) -> str:
        if any(e.kind is EventKind.CRASH and e.fault == self.name for e in seen.events):
            return ""
        changes = Counter(e.source for e in seen.events if e.kind is EventKind.BATCH)
        most = max(changes.values(), default=0)
        return (
            f"its point (change {self.at_change}) was never reached: a relay process handled "
            f"at most {most} change events"
        )

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {"at_change": 50, "every": 100, "times": 3}
