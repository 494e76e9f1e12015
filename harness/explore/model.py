"""An exploration's records: each run, what broke a promise, and each finding shrunk."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from harness.checker.promise import AT_LEAST_ONCE, Promise
from harness.explore.coverage import Exercised
from harness.explore.shrink import Tried
from harness.explore.trial import Explored, Trial
from harness.faults.kinds import parse_fault
from harness.pipeline.variants import make_variant
from harness.results.model import ScenarioResult
from harness.scenario import Scenario

# Kept at the budget's end for stopping the last run, writing the report and stopping an
# environment the command started.
MARGIN_S = 30.0
REPLAYS = 5  # of the minimal trial, for its reproduction rate
SOURCE_PROMISE = AT_LEAST_ONCE  # Debezium's, in recovery: a change may come twice, never not
SOURCE_VIOLATOR = "source/debezium"  # a source's violation, named as a lane's are
FOUND = "found-{}"  # a finding's folder in the exploration's
SCENARIO_FILE = "scenario.yaml"
RANDOM = "random"  # how each run's schedule is drawn (guide.STRATEGIES)
GUIDED = "guided"
# Guided: in the benchmark (docs/explore.md) it found each planted bug in fewer runs than random
# at the median and reached more conditions per hour. Random stays for a search whose every
# draw follows from the seed alone.
DEFAULT_STRATEGY = GUIDED


@dataclass(frozen=True)
class Violation:
    """A variant that broke its own promise in one run."""

    variant: str  # runtime/label
    promise: str
    broken: tuple[str, ...]  # "duplicates 3"

    def __str__(self) -> str:
        return f"{self.variant} broke its promise ({self.promise}): {', '.join(self.broken)}"


@dataclass(frozen=True)
class Aimed:
    """A fault of a run as the coverage counts it: its kind, what it aimed at, the variant,
    and whether it fired for that variant."""

    name: str  # the fault's, in its trial
    kind: str
    target: str
    variant: str
    fired: bool


class Reach(StrEnum):
    """What a guided draw can aim at that no run reached."""

    FAULT = "fault"  # a fault kind on a target, never fired
    POINT = "point"  # a crash point, never reached
    CONDITION = "condition"  # a history condition, never seen
    PAIR = "pair"  # two conditions, never seen in one run


@dataclass(frozen=True)
class Unreached:
    """One thing a run was aimed at, as its line says it."""

    reach: Reach
    text: str  # "a consumer killed mid-write, never seen"

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class RunRecord:
    number: int
    trial: Trial
    seconds: float
    violations: tuple[Violation, ...] = ()
    error: str = ""  # the run did not finish (a consumer stuck past the timeout, a stop)
    directory: Path | None = None
    exercised: tuple[tuple[str, Exercised], ...] = ()  # (variant, what its history shows)
    aimed: tuple[Aimed, ...] = ()
    # Why its schedule was drawn: what it aimed at that no run before it had reached (a guided
    # exploration's; empty for a random draw).
    aimed_at: tuple[Unreached, ...] = ()

    @property
    def verdict(self) -> str:
        if self.error:
            return f"did not finish: {self.error.splitlines()[0]}"
        return "; ".join(map(str, self.violations)) or "every promise kept"


@dataclass(frozen=True)
class Aim:
    """One row of the coverage: a fault kind and target for a variant, the runs it was drawn
    for and the runs it fired in."""

    kind: str
    target: str
    variant: str
    drawn: int
    fired: int


def aims(runs: Sequence[RunRecord]) -> tuple[Aim, ...]:
    """Every (kind, target, variant) the runs drew, sorted."""
    drawn = Counter((a.kind, a.target, a.variant) for r in runs for a in r.aimed)
    fired = Counter((a.kind, a.target, a.variant) for r in runs for a in r.aimed if a.fired)
    return tuple(Aim(*key, drawn=n, fired=fired[key]) for key, n in sorted(drawn.items()))


@dataclass(frozen=True)
class Finding:
    """A violation shrunk: the minimal trial that still breaks the promise, and how often it
    did in replays with the same seeds."""

    number: int
    run: int  # the exploration's run that found it
    violations: tuple[Violation, ...]
    minimal: Trial
    trail: tuple[Tried, ...]
    reproduced: int
    replays: int
    directory: Path
    report: Path | None = None  # a replay's report.md that shows it
    # Later runs that broke a promise by the same cause (``same_cause``): counted, not shrunk.
    also: tuple[int, ...] = ()

    @property
    def scenario_file(self) -> Path:
        return self.directory / SCENARIO_FILE

    @property
    def runs(self) -> tuple[int, ...]:
        """Every run that broke a promise by its cause, the one that found it first."""
        return (self.run, *self.also)


def broken_clauses(v: Violation) -> tuple[str, ...]:
    """The promise's clauses a violation broke, without their counts: ``("duplicates",)``."""
    return tuple(sorted(b.split(" ", 1)[0] for b in v.broken))


def aim_of(entry: Mapping[str, Any]) -> str:
    """What a trial's fault entry aims at, as the coverage names it ("a consumer at
    mid_write")."""
    return parse_fault(dict(entry), str(entry.get("name", entry["kind"]))).aim()


def fault_aims(trial: Trial) -> frozenset[tuple[str, str]]:
    """Each fault of ``trial`` as its kind and what it aims at (a crash's point among them)."""
    return frozenset((str(f["kind"]), aim_of(f)) for f in trial.faults)


def same_cause(finding: Finding, record: RunRecord) -> bool:
    """Whether ``record`` broke a promise by the cause ``finding`` was shrunk to: each of its
    violations a lane the finding broke, in a clause the finding broke there, and every fault
    of the finding's minimal schedule, by kind and point or target, among the run's. A clause
    in common, not all of them: a crash mid-write that loses changes leaves a projection stale
    too only where an order's latest change was among them (one cause, lost or lost and
    stale)."""
    broke: dict[str, set[str]] = {}
    for v in finding.violations:
        broke.setdefault(v.variant, set()).update(broken_clauses(v))
    return all(
        broke.get(v.variant, set()) & set(broken_clauses(v)) for v in record.violations
    ) and (fault_aims(finding.minimal) <= fault_aims(record.trial))


def promises(scenario: Scenario) -> dict[str, Promise]:
    """Each lane's promise (``runtime/label``), as it applies to this scenario's workload."""
    resends = scenario.workload.resends
    found = {}
    for runtime, spec in scenario.lanes:
        promise = make_variant(spec.name, spec.options).promise.under(resends=resends)
        found[f"{runtime}/{spec.label}"] = promise
    return found


def violations(scenario: Scenario, result: ScenarioResult) -> tuple[Violation, ...]:
    """The lanes of a run that broke their promise."""
    kept = promises(scenario)
    found = []
    for v in result.variants:
        promise = kept[v.label]
        broken = promise.broken(v.verdict)
        if v.unexplained:  # whatever it promised: the lab or the sink counted a copy nobody made
            broken += (f"unexplained duplicates {v.unexplained}",)
        if broken:
            found.append(Violation(v.label, promise.name, broken))
    # A Debezium source's stage, every lane's: Debezium promises at-least-once in recovery.
    source = next((v.relay for v in result.variants if v.relay and v.relay.source), None)
    if source is not None and (broken := SOURCE_PROMISE.broken(source.published)):
        found.append(Violation(SOURCE_VIOLATOR, SOURCE_PROMISE.name, broken))
    return tuple(found)


@dataclass(frozen=True)
class Plan:
    explored: Explored
    seed: int
    budget_s: float
    out: Path
    replays: int = REPLAYS
    findings: int | None = None  # stop after this many (None: explore until the budget ends)
    strategy: str = DEFAULT_STRATEGY
    # No run is started after this many seconds of the budget (None: until it ends); the rest is
    # shrinking's (the guided benchmark's searches: the same search for both strategies, and
    # its finding shrunk whenever it came).
    search_s: float | None = None
    # When the budget began (monotonic): when the command was asked, so that starting an
    # environment is spent from it too.
    started: float = field(default_factory=time.monotonic)


@dataclass
class Exploration:
    """What an exploration did so far (the report is written from it at any point)."""

    plan: Plan
    runs: list[RunRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    interrupted: str = ""  # why it ended early ("Ctrl-C")
    shrinking_s: float = 0.0  # spent shrinking and replaying findings so far

    def left(self) -> float:
        return self.plan.budget_s - MARGIN_S - (time.monotonic() - self.plan.started)

    def search_left(self) -> float:
        """What is left for starting runs."""
        searching = self.plan.budget_s if self.plan.search_s is None else self.plan.search_s
        return min(self.left(), searching - (time.monotonic() - self.plan.started))
