"""How an exploration draws each run's schedule (pure): at random, or guided toward what the runs
so far have not reached.

Random search finds what its dice happen to reach. The guided draw takes several candidate
trials for a run and keeps the one that aims at the most that no run has reached yet: a fault
kind on a target that never fired, a crash point never reached, a history condition never seen
(``coverage.Condition``), and two conditions never seen in one run together. What a fault kind
brings about is read from the runs so far, and until a kind has fired in a few runs, from what
it is for (``PRIOR``). The feedback is the history's, as Mallory steers Jepsen's nemesis by what the
system was observed doing (CCS 2023).

A registry of strategies, as papermill's of engines: ``STRATEGIES[name](explored, seed, number,
runs)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from harness.explore.coverage import Condition, Exercised
from harness.explore.model import GUIDED, RANDOM, Reach, RunRecord, Unreached, aim_of
from harness.explore.trial import Explored, Trial, draw_trial

CANDIDATES = 8  # trials drawn for each guided run; the first is the random strategy's
# What each is worth: a condition is what a promise needs tested; a pair of them in one run
# less than either alone.
WORTH: Mapping[Reach, float] = {
    Reach.CONDITION: 2.0,
    Reach.FAULT: 1.0,
    Reach.POINT: 1.0,
    Reach.PAIR: 0.5,
}

C = Condition
# What each fault kind is for: the conditions it can bring about, before a run has shown which
# it does. Read from the fault families (a consumer-crash's point decides KILLED_MID_WRITE).
PRIOR: Mapping[str, frozenset[Condition]] = {
    "consumer-crash": frozenset({C.REDELIVERED, C.RESTARTED}),
    "consumer-kill": frozenset({C.KILLED_MID_WRITE, C.REDELIVERED, C.RESTARTED}),
    "consumer-freeze": frozenset({C.MOVED_IN_FLIGHT, C.COMMIT_FAILED, C.REDELIVERED}),
    "consumer-pause": frozenset({C.MOVED_IN_FLIGHT, C.COMMIT_FAILED, C.REDELIVERED}),
    "commit-failure": frozenset({C.COMMIT_FAILED, C.REDELIVERED}),
    "broker-bounce": frozenset({C.COORDINATOR_MOVED}),
    "broker-kill": frozenset({C.COORDINATOR_MOVED}),
    "broker-pause": frozenset({C.COORDINATOR_MOVED, C.COMMIT_FAILED}),
    "broker-rolling-restart": frozenset({C.COORDINATOR_MOVED}),
    "executor-loss": frozenset({C.EXECUTOR_LOST, C.REDELIVERED}),
    "mongo-ack-lost": frozenset({C.DRIVER_RETRIED, C.WRITE_RETRIED}),
    "mongo-failcommand": frozenset({C.WRITE_RETRIED}),
    "mongo-restart": frozenset({C.WRITE_RETRIED, C.DRIVER_RETRIED}),
    "mongo-stepdown": frozenset({C.WRITE_RETRIED, C.DRIVER_RETRIED}),
    "network": frozenset({C.WRITE_RETRIED, C.COMMIT_FAILED}),
    "connect-worker-kill": frozenset({C.REDELIVERED, C.MOVED_IN_FLIGHT, C.RESTARTED}),
    "connect-task-restart": frozenset({C.REDELIVERED}),
}
PRIOR_RUNS = 2  # a kind's prior is its guess until it has fired in this many runs
MID_WRITE = "mid_write"
CRASH = "consumer-crash"  # of the kinds with a point, the one that kills there (a pause stops)


@dataclass(frozen=True)
class Reached:
    """What the runs so far reached, on any lane."""

    conditions: frozenset[Condition] = frozenset()
    pairs: frozenset[frozenset[Condition]] = frozenset()  # two conditions in one lane's run
    fired: frozenset[tuple[str, str]] = frozenset()  # (kind, target) that fired
    points: frozenset[str] = frozenset()  # crash points reached
    # The conditions seen in the runs where each kind fired: what it brought about, measured.
    brought: Mapping[str, frozenset[Condition]] = field(default_factory=dict)
    fired_in: Mapping[str, int] = field(default_factory=dict)  # runs each kind fired in

    def expected(self, kind: str) -> frozenset[Condition]:
        """What ``kind`` is expected to bring about: what it did, and its prior until it has
        fired in PRIOR_RUNS runs without bringing that about (a timed kill rarely lands in a
        write: aimed at one, it took a guided search's runs one after another)."""
        prior = (
            PRIOR.get(kind, frozenset()) if self.fired_in.get(kind, 0) < PRIOR_RUNS else frozenset()
        )
        return prior | self.brought.get(kind, frozenset())


def reached(runs: Sequence[RunRecord]) -> Reached:
    """What ``runs`` reached, from their histories and their faults' firing."""
    seen: list[Exercised] = [e for r in runs for _, e in r.exercised]
    brought: dict[str, set[Condition]] = {}
    fired_in: Counter[str] = Counter()
    for r in runs:
        in_run = set().union(*(e.conditions for _, e in r.exercised))
        fired = {a.kind for a in r.aimed if a.fired}
        fired_in.update(fired)
        for kind in fired:
            brought.setdefault(kind, set()).update(in_run)
    return Reached(
        conditions=frozenset(c for e in seen for c in e.conditions),
        pairs=frozenset(frozenset(p) for e in seen for p in combinations(e.conditions, 2)),
        fired=frozenset((a.kind, a.target) for r in runs for a in r.aimed if a.fired),
        points=frozenset(p for e in seen for p in e.crash_points),
        brought={k: frozenset(v) for k, v in brought.items()},
        fired_in=dict(fired_in),
    )


@dataclass(frozen=True)
class Drawn:
    """A run's trial, and why it was drawn: what it aims at that no run has reached yet
    (empty for a random draw)."""

    trial: Trial
    aimed_at: tuple[Unreached, ...] = ()
    score: float = 0.0


PAIRS_SHOWN = 2  # a run's line names this many pairs, and counts the rest


def aimed_text(aimed_at: Sequence[Unreached]) -> str:
    """What a run was aimed at, in a line: every fault target, crash point and condition, and
    the first pairs of conditions (a draw predicting six conditions aims at fifteen pairs)."""
    pairs = [a for a in aimed_at if a.reach is Reach.PAIR]
    shown = [a.text for a in aimed_at if a not in pairs[PAIRS_SHOWN:]]
    more = len(pairs) - PAIRS_SHOWN
    return "; ".join(shown + ([f"{more} more pairs, never together"] if more > 0 else []))


def unreached_aims(trial: Trial, so_far: Reached) -> tuple[Unreached, ...]:
    """What ``trial`` aims at that no run reached, in a fixed order."""
    found: dict[Unreached, None] = {}  # ordered, without repeats
    predicted: set[Condition] = set()
    for entry in trial.faults:
        kind, target = str(entry["kind"]), aim_of(entry)
        if (kind, target) not in so_far.fired:
            found[Unreached(Reach.FAULT, f"{kind} on {target}, never fired")] = None
        point = entry.get("point")
        if isinstance(point, str):
            if point not in so_far.points:
                found[Unreached(Reach.POINT, f"crash point {point}, never reached")] = None
            if point == MID_WRITE and kind == CRASH:
                predicted.add(C.KILLED_MID_WRITE)
        predicted |= so_far.expected(kind)
    for c in sorted(predicted - so_far.conditions):
        found[Unreached(Reach.CONDITION, f"{c.value}, never seen")] = None
    for a, b in combinations(sorted(predicted), 2):
        if frozenset((a, b)) not in so_far.pairs:
            found[Unreached(Reach.PAIR, f"{a.value} with {b.value}, never together")] = None
    return tuple(found)


def steer(candidates: Sequence[Trial], so_far: Reached) -> Drawn:
    """The candidate that aims at the most no run has reached (the first, of equals)."""
    best: Drawn | None = None
    for trial in candidates:
        aims = unreached_aims(trial, so_far)
        score = sum(WORTH[a.reach] for a in aims)
        if best is None or score > best.score:
            best = Drawn(trial, aims, score)
    if best is None:
        raise ValueError("no candidate to steer between")
    return best


def candidates(explored: Explored, seed: int, number: int, count: int) -> Iterable[Trial]:
    """Run ``number``'s candidates: the random draw first, then others from streams of their
    own (pure, as the random draw is)."""
    return (draw_trial(explored, seed, number, candidate=k) for k in range(count))


def draw_random(explored: Explored, seed: int, number: int, runs: Sequence[RunRecord]) -> Drawn:
    return Drawn(draw_trial(explored, seed, number))


def draw_guided(explored: Explored, seed: int, number: int, runs: Sequence[RunRecord]) -> Drawn:
    return steer(list(candidates(explored, seed, number, CANDIDATES)), reached(runs))


Strategy = Callable[[Explored, int, int, Sequence[RunRecord]], Drawn]
STRATEGIES: Mapping[str, Strategy] = {RANDOM: draw_random, GUIDED: draw_guided}
