"""Faults the workload carries: a window of its records gets extra resends (an upstream retry
storm) or poison records (a bad deploy). The generator writes them (``Burst``); the nemesis only
marks the window in the history, by record counts."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities
from harness.faults.base import END, START, Fault, Seen, Setting, Space, Step, positive
from harness.records import Problem
from harness.sources.spec import SourceKind
from harness.workload.events import Kind
from harness.workload.generator import Burst, shape_problems
from harness.workload.shapes import DEFAULT, PoisonKind


@dataclass(frozen=True)
class _Burst(Fault):
    record_kind: ClassVar[Kind]
    own_run_only: ClassVar[bool] = True  # records of the run's own workload
    name: str
    start_event: int
    events: int
    fraction: float

    def problems(self) -> list[Problem]:
        found = positive("start_event", self.start_event, allow_zero=True)
        found += positive("events", self.events)
        if not 0 < self.fraction <= 1:
            found.append(("fraction", f"must be in (0, 1], got {self.fraction}"))
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (
            Step(START, at_event=self.start_event),
            Step(END, at_event=self.start_event + self.events),
        )

    def burst(self) -> Burst:
        return Burst(
            self.record_kind, self.start_event, self.start_event + self.events, self.fraction
        )

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if setting.source != SourceKind.PRODUCER:  # a database's changes are its application's
            return [("", f"shapes the lab producer's records, and the scenario's source is "
                         f"{setting.source}")]  # fmt: skip
        return super().refusals(setting, backend)

    def reach(self, setting: Setting) -> tuple[str, str]:
        if self.start_event >= setting.events:
            return (
                f"starts at event {self.start_event} of a workload of {setting.events} events",
                "",
            )
        return "", ""

    def why_unfired(self, seen: Seen) -> str:
        if seen.workload_events > self.start_event:
            return ""
        return (
            f"the workload has {seen.workload_events} events and the burst starts at event "
            f"{self.start_event}"
        )

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {"start_event": 100, "events": 200, "fraction": 0.2}


@dataclass(frozen=True)
class ProducerResend(_Burst):
    """Records ``start_event <= seq < start_event + events`` of the workload get ``fraction``
    more resends (an upstream retry storm)."""

    kind: ClassVar[str] = "producer-resend"
    record_kind: ClassVar[Kind] = Kind.RESEND

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        total = space.setting.events
        if total < 2:
            return None
        start = rng.randrange(total - 1)
        return {"start_event": start, "events": rng.randint(1, total - start),
                "fraction": round(rng.uniform(0.05, 0.5), 2)}  # fmt: skip


@dataclass(frozen=True)
class PoisonBurst(_Burst):
    """A ``fraction`` of records ``start_event <= seq < start_event + events`` are bad records
    (a bad deploy), each in one of ``shapes`` (``harness.workload.shapes``; the workload's
    default mix unless named)."""

    kind: ClassVar[str] = "poison"
    record_kind: ClassVar[Kind] = Kind.POISON
    shapes: tuple[PoisonKind, ...] = DEFAULT

    def problems(self) -> list[Problem]:
        return super().problems() + shape_problems("shapes", self.shapes)

    def burst(self) -> Burst:
        return replace(super().burst(), shapes=tuple(PoisonKind(s) for s in self.shapes))

    def aim(self) -> str:
        """The shapes of its bad records: what the coverage table tells apart."""
        return f"bad records: {', '.join(sorted(self.shapes))}"

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        """One to three shapes: a window of records of which a fraction are bad, or a single
        bad record (fraction 1 over one event) - the form a shrunk finding takes."""
        total = space.setting.events
        if total < 1:
            return None
        shapes = sorted(s.value for s in rng.sample(list(PoisonKind), rng.randint(1, 3)))
        start = rng.randrange(total)
        if rng.random() < 0.5:
            return {"start_event": start, "events": 1, "fraction": 1, "shapes": shapes}
        return {"start_event": start, "events": rng.randint(1, total - start),
                "fraction": round(rng.uniform(0.05, 0.5), 2), "shapes": shapes}  # fmt: skip
