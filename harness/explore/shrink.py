"""Shrinking a failing trial to a minimal one (Hypothesis's ``shrinker.py`` is the model): passes
that delete and simplify, each candidate replayed with the same seeds and kept only while it
still fails.

The passes, in order: keep only the variants that broke their promise; drop faults; a poison
window's bad records, each alone (a failure a bad record causes comes down to it); a timed
fault started at a count of records instead (a named point or a record count replays alike; a
time does not, on a machine whose speed varies); simplify each fault's fields (shorter, fewer,
earlier, softer); put the MongoDB client settings back to the driver's defaults; shrink the
workload.

A candidate is kept only where it fails reliably: ``reliably`` replays it until it has failed in
``KEEP_SHARE`` of the exploration's replays (4 of 5 by default) - and in as many as the trial it
would replace did, so that a trial that failed in every replay is never traded for a smaller one
that does not (shortening a pause toward a window's edge does that) - or can no longer, so a
reproducer a user runs once fails as the finding did. A pass that made
progress runs again on what it made; the round repeats until none does, or time is up. The
candidates are pure functions of the trial; only ``replay`` runs anything.

A replay can say nothing about its candidate: one of its faults never fired (a crash waiting for
a batch of 67 documents when every batch held fewer), or the run did not finish. Such a candidate
is neither kept nor remembered as passing, and the next simplification kept starts the round
again, so it is tried on the changed trial (often one whose fault now fires).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from harness.explore.trial import Shape, Trial, describe
from harness.faults.families.producer import PoisonBurst
from harness.workload.events import Kind
from harness.workload.generator import generate

# A field's simplest value, for any fault family that has one by that name: shorter windows,
# fewer repetitions, earlier starts. A candidate a family's record refuses is not tried.
SIMPLEST: dict[str, float] = {
    "duration": 1.0,
    "down_for": 0.0,
    "interval": 0.0,
    "jitter": 0.0,
    "rotations": 1,
    "times": 1,
    "at": 0.0,
    "at_event": 1,
    "at_batch": 1,
    "after_docs": 1,
    "delay_ms": 100,
    "start_event": 0,
    "events": 1,
    "fraction": 0.05,
}
KEEP_SHARE = 0.8  # of a candidate's replays that must fail for it to be kept: 4 of 5
SMALLEST_EVENTS = 50
FEWEST_KEYS = 10
BAD_RECORDS = 12  # of a poison window, tried alone (one replay each)


@dataclass(frozen=True)
class Candidate:
    trial: Trial
    what: str  # "drop commit-failure#2", "events 800 -> 50"


class Verdict(Enum):
    """What a candidate's replay showed."""

    FAILS = "still fails, kept"
    PASSES = "passes"
    UNJUDGED = "not judged"  # a fault of it never fired, or the run did not finish


@dataclass(frozen=True)
class Replay:
    verdict: Verdict
    why: str = ""  # for UNJUDGED: what left the run saying nothing
    failed: int = 0  # of ``runs`` replays of the candidate (0 and 0: one replay, not counted)
    runs: int = 0

    def __str__(self) -> str:
        rate = f" in {self.failed} of {self.runs}" if self.runs > 1 else ""
        shown = f"{self.verdict.value}{rate}"
        return f"{shown} ({self.why})" if self.why else shown


def reliably(replay: Callable[[], Replay], runs: int, at_least: int = 0) -> Replay:
    """Replay a candidate ``runs`` times, or until it can no longer fail in ``KEEP_SHARE`` of
    them and in ``at_least`` (PASSES), or at once where a run said nothing (UNJUDGED); FAILS
    where it did. Every replay of one that fails is run: how many failed is what a later
    candidate must reach."""
    need = min(runs, max(math.ceil(KEEP_SHARE * runs), at_least))
    failed = passed = 0
    while failed + passed < runs and passed <= runs - need:
        shown = replay()
        if shown.verdict is Verdict.UNJUDGED:
            return shown
        failed += shown.verdict is Verdict.FAILS
        passed += shown.verdict is Verdict.PASSES
    verdict = Verdict.FAILS if failed >= need else Verdict.PASSES
    return Replay(verdict, failed=failed, runs=failed + passed)


STILL_FAILS, PASSED = Replay(Verdict.FAILS), Replay(Verdict.PASSES)


@dataclass(frozen=True)
class Tried:
    """One step of the shrink trail: a candidate and what its replay showed."""

    what: str
    replay: Replay
    seconds: float

    @property
    def kept(self) -> bool:
        return self.replay.verdict is Verdict.FAILS


Pass = Callable[[Trial, tuple[str, ...]], Iterator[Candidate]]


def keep_violators(trial: Trial, violators: tuple[str, ...]) -> Iterator[Candidate]:
    """Only the variants that broke their promise (fewer lanes: faster, and nothing else)."""
    specs = trial.scenario().variants  # in the trial's order, with their labels
    kept = tuple(
        v for v, spec in zip(trial.variants, specs, strict=True) if spec.label in violators
    )
    if kept and len(kept) < len(trial.variants):
        yield Candidate(replace(trial, variants=kept), f"keep only {', '.join(violators)}")


def drop_faults(trial: Trial, violators: tuple[str, ...]) -> Iterator[Candidate]:
    for i, fault in enumerate(trial.faults):
        rest = trial.faults[:i] + trial.faults[i + 1 :]
        yield Candidate(trial.with_faults(rest), f"drop {describe(fault)}")


def pin_to_records(trial: Trial, violators: tuple[str, ...]) -> Iterator[Candidate]:
    """Each fault started at a time, started instead once as many records were acknowledged as
    the producer had sent by then, without its jitter: a count replays alike on any machine, a
    time does not. (A fault started ``after`` another keeps its time: it counts from that
    fault's end.)"""
    for i, fault in enumerate(trial.faults):
        at = fault.get("at")
        if not isinstance(at, int | float) or fault.get("after"):
            continue
        pinned = {k: v for k, v in fault.items() if k not in ("at", "jitter")}
        pinned["at_event"] = max(1, int(at * trial.shape.rate))
        faults = (*trial.faults[:i], pinned, *trial.faults[i + 1 :])
        yield Candidate(
            trial.with_faults(faults),
            f"{fault['name']}: at {at} s -> at_event {pinned['at_event']}",
        )


def simplify_faults(trial: Trial, violators: tuple[str, ...]) -> Iterator[Candidate]:
    for i, fault in enumerate(trial.faults):
        for key, value in fault.items():
            for simpler in _simpler(key, value):
                entry = {**fault, key: simpler}
                faults = (*trial.faults[:i], entry, *trial.faults[i + 1 :])
                yield Candidate(
                    trial.with_faults(faults), f"{fault['name']}: {key} {value} -> {simpler}"
                )


def one_bad_record(trial: Trial, violators: tuple[str, ...]) -> Iterator[Candidate]:
    """Each bad record of a poison window alone, earliest first (at most ``BAD_RECORDS``): the
    window made a single record of its shape, the one a failure can come down to."""
    bad = [e for e in generate(trial.scenario().workload) if e.kind is Kind.POISON]
    for i, fault in enumerate(trial.faults):
        single = fault.get("events") == 1 and fault.get("fraction") == 1
        if fault["kind"] != PoisonBurst.kind or (single and len(fault.get("shapes", ())) == 1):
            continue
        start, end = fault["start_event"], fault["start_event"] + fault["events"]
        for event in [e for e in bad if start <= e.seq < end][:BAD_RECORDS]:
            assert event.poison is not None
            alone = {**fault, "start_event": event.seq, "events": 1, "fraction": 1,
                     "shapes": [event.poison.value]}  # fmt: skip
            faults = (*trial.faults[:i], alone, *trial.faults[i + 1 :])
            what = f"{fault['name']}: only record {event.seq}, {event.poison}"
            yield Candidate(trial.with_faults(faults), what)


def shrink_workload(trial: Trial, violators: tuple[str, ...]) -> Iterator[Candidate]:
    """The smallest workload first, then halfway (as a fault's fields): a failure that needs no
    volume is at its smallest in one replay."""
    s = trial.shape
    for events in _smaller(s.events, SMALLEST_EVENTS):
        yield _shape(trial, replace(s, events=events), f"events {s.events} -> {events}")
    if s.consumers > 1:
        yield _shape(trial, replace(s, consumers=1), f"consumers {s.consumers} -> 1")
    if s.partitions > 1:
        yield _shape(trial, replace(s, partitions=1), f"partitions {s.partitions} -> 1")
    for keys in _smaller(s.keys, FEWEST_KEYS):
        yield _shape(trial, replace(s, keys=keys), f"keys {s.keys} -> {keys}")


def default_settings(trial: Trial, violators: tuple[str, ...]) -> Iterator[Candidate]:
    """The MongoDB client settings back to the driver's defaults: all at once first (one
    replay where none matters), then each."""
    settings = trial.shape.mongo
    if len(settings) > 1:
        yield _shape(
            trial, replace(trial.shape, mongo=()), f"mongo {trial.shape.settings} -> defaults"
        )
    for i, (name, value) in enumerate(settings):
        rest = trial.shape.mongo[:i] + trial.shape.mongo[i + 1 :]
        yield _shape(trial, replace(trial.shape, mongo=rest), f"mongo {name} {value} -> default")


PASSES: tuple[Pass, ...] = (
    keep_violators,
    drop_faults,
    one_bad_record,
    pin_to_records,
    simplify_faults,
    default_settings,
    shrink_workload,
)


def shrink(
    trial: Trial,
    violators: tuple[str, ...],
    replay: Callable[[Trial, int], Replay],
    *,
    valid: Callable[[Trial], bool],
    out_of_time: Callable[[], bool],
    clock: Callable[[], float],
    said: Callable[[str], None] = lambda _line: None,
    passes: Sequence[Pass] | None = None,
) -> tuple[Trial, tuple[Tried, ...]]:
    """The smallest trial the passes reach whose ``replay`` still fails, and the trail of
    tries. ``replay(candidate, at_least)`` judges a candidate that must fail in ``at_least`` of
    its replays: as many as the last one kept did. ``passes``: PASSES, in order, by default."""
    current, trail = trial, []
    bar = 0  # the replays the last kept candidate failed in
    passed: set[str] = set()  # candidates replayed that did not fail: not replayed again

    def first_failing(shrink_pass: Pass) -> tuple[Trial | None, bool]:
        """The pass's first candidate on ``current`` that still fails, if any, and whether a
        try of it was not judged."""
        nonlocal bar
        unjudged = False
        for candidate in shrink_pass(current, violators):
            if out_of_time():
                break
            key = json.dumps(candidate.trial.document(), sort_keys=True, default=str)
            if candidate.trial == current or key in passed or not valid(candidate.trial):
                continue
            started = clock()
            shown = replay(candidate.trial, bar)
            trail.append(Tried(candidate.what, shown, clock() - started))
            said(f"  shrink: {candidate.what}: {shown}")
            if shown.verdict is Verdict.FAILS:
                bar = max(bar, shown.failed)
                return candidate.trial, unjudged
            if shown.verdict is Verdict.PASSES:
                passed.add(key)
            unjudged = unjudged or shown.verdict is Verdict.UNJUDGED
        return None, unjudged

    progress = True
    while progress and not out_of_time():
        progress, unjudged, left = False, False, list(PASSES if passes is None else passes)
        while left and not out_of_time():
            accepted, not_judged = first_failing(left[0])
            unjudged = unjudged or not_judged
            if accepted is None:
                left.pop(0)  # it made nothing: the next pass (one that made something runs again)
                continue
            current, progress = accepted, True
            if unjudged:
                break  # the round again: what said nothing is tried on the changed trial
    return current, tuple(trail)


def _simpler(key: str, value: Any) -> list[Any]:
    """Simpler values of a fault's field: its simplest, then halfway; ``true`` -> ``false``."""
    if isinstance(value, bool):
        return [False] if value else []
    if key not in SIMPLEST or not isinstance(value, int | float):
        return []
    simplest = SIMPLEST[key]
    if value <= simplest:
        return []
    halfway: float = (value + simplest) / 2
    if isinstance(value, int):
        halfway, simplest = int(halfway), int(simplest)
    else:
        halfway = round(halfway, 1)
    return [v for v in dict.fromkeys([simplest, halfway]) if v < value]


def _smaller(value: int, smallest: int) -> list[int]:
    """``smallest``, then halfway to it, of those below ``value``."""
    return [v for v in dict.fromkeys([smallest, (value + smallest) // 2]) if v < value]


def _shape(trial: Trial, shape: Shape, what: str) -> Candidate:
    return Candidate(replace(trial, shape=shape), what)
