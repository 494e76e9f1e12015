"""The guided draw's pure part: what the runs so far reached, and the candidate it keeps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from harness.environment.base import BackendAbilities
from harness.errors import BadInput
from harness.explore import report
from harness.explore.coverage import Condition, Exercised
from harness.explore.guide import (
    CANDIDATES,
    STRATEGIES,
    aimed_text,
    candidates,
    draw_guided,
    reached,
    steer,
    unreached_aims,
)
from harness.explore.inputs import plan
from harness.explore.model import (
    GUIDED,
    RANDOM,
    Aimed,
    Exploration,
    Reach,
    RunRecord,
    Unreached,
    aim_of,
)
from harness.explore.trial import Explored, Shape, Trial, draw_trial, drawable

LOCAL = BackendAbilities("local", (1, 2, 3), link_faults=True)
LISTENER = Explored("listener", ("idempotent", "transactional"), drawable(), LOCAL)
SHAPE = Shape(events=400, keys=40, partitions=2, rate=200.0, batch_size=50, consumers=2)
MID_WRITE = {"kind": "consumer-crash", "name": "consumer-crash#1", "point": "mid_write",
             "at_batch": 2, "after_docs": 10}  # fmt: skip
BEFORE_WRITE = {"kind": "consumer-crash", "name": "consumer-crash#1", "point": "before_write",
                "at_batch": 2}  # fmt: skip
COMMIT_FAILURE = {"kind": "commit-failure", "name": "commit-failure#1", "at": 2.0,
                  "duration": 5.0}  # fmt: skip


def trial(*faults: dict[str, object]) -> Trial:
    return Trial("t", 1, "listener", ("idempotent",), SHAPE, tuple(faults))


def run(
    number: int, t: Trial, conditions: set[Condition], points: frozenset[str] = frozenset()
) -> RunRecord:
    """A run of ``t`` whose faults all fired and whose one lane's history showed
    ``conditions``."""
    fired = tuple(
        Aimed(str(f["name"]), str(f["kind"]), target, "listener/idempotent", fired=True)
        for f, target in zip(t.faults, [aim_of(f) for f in t.faults], strict=True)
    )
    seen = Exercised(frozenset(conditions), points)
    return RunRecord(number, t, 10.0, exercised=(("listener/idempotent", seen),), aimed=fired)


def texts(aims: tuple[Unreached, ...]) -> set[str]:
    return {a.text for a in aims}


def test_the_guided_draw_is_pure_and_its_first_candidate_is_the_random_draw() -> None:
    first = [draw_guided(LISTENER, 7, n, []) for n in range(1, 12)]
    assert first == [draw_guided(LISTENER, 7, n, []) for n in range(1, 12)]
    made = list(candidates(LISTENER, 7, 3, CANDIDATES))
    assert made[0] == draw_trial(LISTENER, 7, 3) == STRATEGIES[RANDOM](LISTENER, 7, 3, []).trial
    assert len({c.schedule() for c in made}) > 1  # the others are other trials
    assert STRATEGIES[RANDOM](LISTENER, 7, 3, []).aimed_at == ()


def test_before_any_run_a_crash_mid_write_aims_at_a_consumer_killed_mid_write() -> None:
    aims = texts(unreached_aims(trial(MID_WRITE), reached([])))
    assert "a consumer killed mid-write, never seen" in aims
    assert "crash point mid_write, never reached" in aims
    assert "consumer-crash on a consumer at mid_write, never fired" in aims
    assert "a consumer killed mid-write, never seen" not in texts(
        unreached_aims(trial(BEFORE_WRITE), reached([]))
    )
    # A pause at that point stops the consumer there; it kills nothing.
    paused = {**MID_WRITE, "kind": "consumer-pause", "name": "consumer-pause#1", "duration": 5.0}
    aims = texts(unreached_aims(trial(paused), reached([])))
    assert "crash point mid_write, never reached" in aims
    assert "a consumer killed mid-write, never seen" not in aims


def test_it_keeps_the_candidate_aimed_at_what_no_run_reached() -> None:
    # The runs so far crashed consumers before their writes, and saw batches redelivered and
    # consumers restarted: a crash mid-write aims at what they did not reach.
    before = trial(BEFORE_WRITE)
    runs = [
        run(1, before, {Condition.REDELIVERED, Condition.RESTARTED}, frozenset({"before_write"}))
    ]
    so_far = reached(runs)
    assert texts(unreached_aims(before, so_far)) == set()
    drawn = steer([before, trial(MID_WRITE)], so_far)
    assert drawn.trial == trial(MID_WRITE)
    assert "a consumer killed mid-write, never seen" in texts(drawn.aimed_at)
    # Of candidates that aim at nothing new, the first: the random draw.
    assert steer([before, before], so_far).trial is before


def test_what_a_kind_brought_about_is_learned_from_the_runs_it_fired_in() -> None:
    # A commit failure that, in a run, also moved partitions with a batch in flight: the guide
    # now expects that of it, and aims a commit failure at it no more once seen.
    failing = trial(COMMIT_FAILURE)
    runs = [run(1, failing, {Condition.COMMIT_FAILED, Condition.MOVED_IN_FLIGHT})]
    so_far = reached(runs)
    assert Condition.MOVED_IN_FLIGHT in so_far.brought["commit-failure"]
    assert so_far.fired == {("commit-failure", aim_of(COMMIT_FAILURE))}
    aims = texts(unreached_aims(failing, so_far))
    # Its prior's redelivery is still unseen, and with each condition it brought, never together.
    assert "a batch redelivered, never seen" in aims
    assert "a commit failed after its write, never seen" not in aims
    assert "a batch redelivered with a commit failed after its write, never together" in aims


def test_a_kind_that_fired_twice_without_what_it_is_for_is_no_longer_aimed_at_it() -> None:
    # A timed consumer-kill is for a kill mid-write, among others; one that fired in two runs
    # and never landed in a write is not expected to any more (a crash at mid_write still is).
    kill = {"kind": "consumer-kill", "name": "consumer-kill#1", "at": 1.0}
    killed = trial(kill)
    once = reached([run(1, killed, {Condition.RESTARTED})])
    assert "a consumer killed mid-write, never seen" in texts(unreached_aims(killed, once))
    twice = reached([run(1, killed, {Condition.RESTARTED}), run(2, killed, {Condition.RESTARTED})])
    assert twice.fired_in["consumer-kill"] == 2
    assert twice.expected("consumer-kill") == {Condition.RESTARTED}
    assert "a consumer killed mid-write, never seen" not in texts(unreached_aims(killed, twice))
    assert "a consumer killed mid-write, never seen" in texts(
        unreached_aims(trial(MID_WRITE), twice)
    )


def test_a_strategy_the_lab_has_not_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as refused:
        plan(runtime="listener", variants=[], kinds=None, backend=LOCAL, budget="60",
             seed=1, out=tmp_path, strategy="smart")  # fmt: skip
    assert "--strategy: one of random, guided, got 'smart'" in str(refused.value)
    chosen = plan(runtime="listener", variants=[], kinds=None, backend=LOCAL, budget="60",
                  seed=1, out=tmp_path, strategy=GUIDED)  # fmt: skip
    assert chosen.strategy == GUIDED


def test_each_run_of_the_page_says_what_it_was_aimed_at(tmp_path: Path) -> None:
    explored = plan(runtime="listener", variants=[], kinds=None, backend=LOCAL, budget="60",
                    seed=1, out=tmp_path, strategy=GUIDED)  # fmt: skip
    state = Exploration(explored)
    aimed = replace(
        run(1, trial(MID_WRITE), set()),
        aimed_at=(Unreached(Reach.CONDITION, "a consumer killed mid-write, never seen"),),
    )
    state.runs += [aimed, run(2, trial(BEFORE_WRITE), set())]
    page = report.write(state).read_text()
    assert "guided draws" in page
    assert "| a consumer killed mid-write, never seen | every promise kept |" in page
    assert "| - | every promise kept |" in page


def test_a_runs_line_names_two_pairs_of_conditions_and_counts_the_rest() -> None:
    aims = unreached_aims(trial(MID_WRITE), reached([]))
    pairs = [a.text for a in aims if a.reach is Reach.PAIR]
    assert len(pairs) >= 3  # a crash mid-write is expected to bring about three conditions
    line = aimed_text(aims)
    assert "a consumer killed mid-write, never seen" in line
    assert f"{pairs[0]}; {pairs[1]}; {len(pairs) - 2} more pairs, never together" in line
    assert pairs[2] not in line
    assert aimed_text(aims[:1]) == aims[0].text and aimed_text([]) == ""
