"""``chaoslab explore``: draw trials from a seed, run each on one environment, hold every
variant to its own promise, and shrink each violation to a minimal scenario.

The budget is the whole command's: a run still going when it ends is stopped (the run's own
stop, which stops what it started), shrinking ends early enough to replay the minimal trial,
and the report is written whatever happened - Ctrl-C included.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import yaml

from harness.environment.base import Environment
from harness.errors import LabError
from harness.explore import report
from harness.explore.coverage import Exercised, exercised
from harness.explore.guide import STRATEGIES, aimed_text
from harness.explore.model import (
    FOUND,
    SOURCE_VIOLATOR,
    Aimed,
    Exploration,
    Finding,
    Plan,
    RunRecord,
    aim_of,
    promises,
    same_cause,
    violations,
)
from harness.explore.shrink import PASSED, STILL_FAILS, Replay, Verdict, reliably, shrink
from harness.explore.trial import Trial, refused
from harness.faults.kinds import injects
from harness.history.events import read_history
from harness.report import write_report
from harness.results.model import ScenarioResult
from harness.run.loop import Progress, Stopped
from harness.run.runner import run_scenario

# A run is not started with less than this left: it would be stopped before it shows anything.
SHORTEST_RUN_S = 20.0
# Shrinking and replaying findings, all of them, take at most this share of the budget: the
# rest is the search's (a search whose budget went into shrinking ran few runs, and a cause it
# reached late went unreported).
SHRINK_SHARE = 0.6
CTRL_C = "Ctrl-C"
# A race's reproducer (a minimal trial that broke its promise in some replays only) replays
# itself until, at the rate seen, all its runs hold one time in 1 / RACE_MISS, and no more often
# than RACE_REPLAYS_MAX (a 5% race would need 90).
RACE_MISS = 0.01
RACE_REPLAYS_MAX = 20
REPLAY_SLACK = 1.25  # what a replay may take over the failing runs before it (the shrink's room)


def replay_s(failing_s: Sequence[float]) -> float:
    """What a replay of the smallest failing trial may take: the slowest of the last three
    failing runs, and a quarter more (a large minimal's replays ran longer than its tries, and
    the last of them was cut by the budget's end)."""
    return REPLAY_SLACK * max(failing_s[-3:])


def no_room_left(left_s: float, replays: int, per_run_s: float) -> bool:
    """Whether one more shrink run would leave too little of ``left_s`` for the finding's own
    ``replays`` (its replays come after the shrink, and are what the reproducer's rate is of)."""
    return left_s < (replays + 1) * per_run_s + SHORTEST_RUN_S / 2


def explore(
    env: Environment, plan: Plan, *, progress: Progress = print, stop: threading.Event
) -> Exploration:
    """Run trials until the budget ends (or Ctrl-C); return what was found. The report is
    written into ``plan.out`` before it returns."""
    state = Exploration(plan)
    deadline = threading.Timer(max(0.0, state.left()), stop.set)
    deadline.daemon = True
    deadline.start()
    try:
        number = 0
        while (
            state.search_left() > SHORTEST_RUN_S
            and not stop.is_set()
            and not state.interrupted
            and not _enough(state)
        ):
            number += 1
            drawn = STRATEGIES[plan.strategy](plan.explored, plan.seed, number, state.runs)
            trial = drawn.trial
            if problem := refused(trial, plan.explored.backend):
                progress(f"run {number}: skipped, the backend cannot play it: {problem}")
                continue
            if drawn.aimed_at:
                progress(f"run {number:>3} aimed at: {aimed_text(drawn.aimed_at)}")
            record = run_one(env, trial, plan.out / "runs" / f"{number:03d}", number, stop)
            record = replace(record, aimed_at=drawn.aimed_at)
            state.runs.append(record)
            progress(f"run {number:>3} {_summary(record)}")
            if record.violations:
                _found(env, state, record, stop, progress)
    except KeyboardInterrupt:
        state.interrupted = CTRL_C
    finally:
        deadline.cancel()
    if state.interrupted:
        progress("interrupted: writing what was found")
    report.write(state)
    return state


def run_one(
    env: Environment, trial: Trial, directory: Path, number: int, stop: threading.Event
) -> RunRecord:
    """Run ``trial`` and judge every lane against its promise."""
    started = time.monotonic()
    scenario = trial.scenario()
    try:
        result = run_scenario(
            env, scenario, directory, progress=_quiet, keep_topics=False, stop=stop
        )
        error = result.error
    except Stopped:
        error = "stopped"
    except LabError as exc:
        error = str(exc)
    seconds = time.monotonic() - started
    if error:
        return RunRecord(number, trial, seconds, error=error, directory=directory)
    return RunRecord(
        number,
        trial,
        seconds,
        violations=violations(scenario, result),
        directory=directory,
        exercised=_exercised(result),
        aimed=_aimed(trial, result),
    )


def _shrink(
    env: Environment,
    state: Exploration,
    record: RunRecord,
    stop: threading.Event,
    progress: Progress,
) -> Finding:
    plan = state.plan
    started = time.monotonic()
    number = len(state.findings) + 1
    folder = plan.out / FOUND.format(number)
    violators = tuple(v.variant.split("/", 1)[1] for v in record.violations)
    broken = {v.variant for v in record.violations}
    tries = iter(range(1, 10_000))
    last_failing: list[RunRecord] = [record]
    progress(f"  found: {'; '.join(map(str, record.violations))}; shrinking")

    def per_run() -> float:
        return replay_s([r.seconds for r in last_failing])

    def no_room() -> bool:
        return no_room_left(state.left(), plan.replays, per_run())

    def replay(trial: Trial) -> Replay:
        # The finding's replays come after the shrink: a candidate's (up to plan.replays of them
        # between two checks of out_of_time) do not eat into their time.
        if no_room():
            return Replay(Verdict.UNJUDGED, "the finding's replays need the rest of the budget")
        try:
            attempt = run_one(env, trial, folder / "shrink" / f"try-{next(tries):03d}", 0, stop)
        except KeyboardInterrupt:  # Ctrl-C while shrinking keeps the smallest failing so far
            state.interrupted = CTRL_C
            return Replay(Verdict.UNJUDGED, CTRL_C)
        if any(v.variant in broken for v in attempt.violations):
            last_failing.append(attempt)
            return STILL_FAILS
        if attempt.error:
            return Replay(Verdict.UNJUDGED, attempt.verdict)
        # A fault that never fired for a lane that broke: the run tried less than the candidate.
        silent = sorted({a.name for a in attempt.aimed if a.variant in broken and not a.fired})
        if silent:
            return Replay(Verdict.UNJUDGED, f"{', '.join(silent)} never fired")
        return PASSED

    # The search's share is kept only while it has more to search for: after the last
    # finding asked for (--findings), shrinking may use what is left.
    search_after = plan.findings is None or number < plan.findings

    def out_of_time() -> bool:
        replays = plan.replays * per_run()
        spent = state.shrinking_s + time.monotonic() - started
        return (
            bool(state.interrupted)
            or stop.is_set()
            or no_room()
            or (search_after and spent + replays > SHRINK_SHARE * plan.budget_s)
        )

    minimal, trail = shrink(
        record.trial,
        violators,
        lambda trial, at_least: reliably(lambda: replay(trial), plan.replays, at_least),
        valid=lambda t: not refused(t, plan.explored.backend),
        out_of_time=out_of_time,
        clock=time.monotonic,
        said=progress,
    )
    minimal = _named(minimal, plan, record, number)
    reproduced, replays, shown = _replay(env, state, minimal, folder, broken, stop, progress)
    shown = shown or last_failing[-1]
    finding = Finding(
        number=number,
        run=record.number,
        violations=record.violations,
        minimal=minimal,
        trail=trail,
        reproduced=reproduced,
        replays=replays,
        directory=folder,
        report=_report(shown),
    )
    write_scenario(finding)
    state.shrinking_s += time.monotonic() - started
    progress(
        f"  shrunk in {len(trail)} tries to: {minimal.schedule()}; reproduced {reproduced} "
        f"of {replays} replays; {finding.scenario_file}"
    )
    return finding


def _replay(
    env: Environment,
    state: Exploration,
    trial: Trial,
    folder: Path,
    broken: set[str],
    stop: threading.Event,
    progress: Progress,
) -> tuple[int, int, RunRecord | None]:
    """Run the minimal trial again with the same seeds: how many of the replays broke the
    promise, how many ran, and one that broke it."""
    reproduced, ran, shown = 0, 0, None
    for k in range(1, state.plan.replays + 1):
        if state.interrupted or stop.is_set() or state.left() < SHORTEST_RUN_S / 2:
            break
        try:
            attempt = run_one(env, trial, folder / f"replay-{k}", 0, stop)
        except KeyboardInterrupt:
            state.interrupted = CTRL_C
            break
        if attempt.error == "stopped":
            break
        ran += 1
        if any(v.variant in broken for v in attempt.violations):
            reproduced += 1
            shown = shown or attempt
        progress(f"  replay {k}: {attempt.verdict}")
    return reproduced, ran, shown


def _named(trial: Trial, plan: Plan, record: RunRecord, number: int) -> Trial:
    what = "; ".join(map(str, record.violations))
    description = (
        f"Found by chaoslab explore --seed {plan.seed} (run {record.number}) and shrunk: "
        f"{what}. The lab drew this schedule; its seed ({trial.seed}) replays the workload, "
        f"the jitter and the crash points."
    )
    return replace(trial, name=f"found-{plan.seed}-{record.number}", description=description)


def race_replays(reproduced: int, replays: int) -> int:
    """How many runs of a race's reproducer break its promise at least once all but one time
    in RACE_MISS, at the rate its replays broke it (RACE_REPLAYS_MAX at most)."""
    if reproduced >= replays:
        return 1
    if reproduced <= 0:
        return RACE_REPLAYS_MAX
    needed = math.ceil(math.log(RACE_MISS) / math.log(1 - reproduced / replays))
    return min(RACE_REPLAYS_MAX, max(2, needed))


def write_scenario(finding: Finding) -> None:
    """The minimal trial as a library scenario whose expectations are the broken promises:
    ``chaoslab run`` of it fails while the violation reproduces. A race (a failure in some of
    its replays only) is replayed by the scenario itself, its promises expected in every run:
    one ``chaoslab run`` gives the finding's verdict."""
    scenario = finding.minimal.scenario()
    kept = promises(scenario)
    runs = race_replays(finding.reproduced, finding.replays)
    every: int | str = 0 if runs == 1 else "0 in 100%"
    expect: dict[str, dict[str, int | str]] = {
        label.split("/", 1)[1]: {name: every for name in kept[label].zero}
        for label in {v.variant for v in finding.violations}
        if label in kept
    }
    if any(v.variant == SOURCE_VIOLATOR for v in finding.violations):
        expect["*"] = {"published_lost": every}  # the source's stage, at-least-once
    finding.directory.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Reproduce: chaoslab run {finding.scenario_file}\n"
        f"# Reproduced in {finding.reproduced} of {finding.replays} replays with seed "
        f"{finding.minimal.seed}.\n"
    )
    if runs > 1 and finding.reproduced == 0:  # no rate seen: as rare as it gets
        header += (
            f"# Not reproduced in its replays: the run replays it {runs} times with that seed and "
            "fails if any breaks the promise; how often one does is not known.\n"
        )
    elif runs > 1:
        header += (
            f"# A race: the run replays it {runs} times with that seed and fails if any breaks "
            f"the promise - at the rate seen, all {runs} hold one time in {1 / RACE_MISS:.0f}.\n"
        )
    document = {**finding.minimal.document(expect), **({"replays": runs} if runs > 1 else {})}
    body = yaml.safe_dump(document, sort_keys=False, width=100)
    finding.scenario_file.write_text(header + body)


def _report(record: RunRecord) -> Path | None:
    if record.directory is None or record.error:
        return None
    try:
        return write_report(record.directory).markdown
    except (LabError, OSError, ValueError):
        return None  # the finding stands without its picture


def _enough(state: Exploration) -> bool:
    wanted = state.plan.findings
    return wanted is not None and len(state.findings) >= wanted


def _found(
    env: Environment,
    state: Exploration,
    record: RunRecord,
    stop: threading.Event,
    progress: Progress,
) -> None:
    """A run that broke a promise: counted with the finding of the same cause, or shrunk to a
    finding of its own."""
    for i, finding in enumerate(state.findings):
        if same_cause(finding, record):
            state.findings[i] = replace(finding, also=(*finding.also, record.number))
            progress(f"  the cause of found-{finding.number} again: counted, not shrunk")
            return
    state.findings.append(_shrink(env, state, record, stop, progress))


def _exercised(result: ScenarioResult) -> tuple[tuple[str, Exercised], ...]:
    found = []
    for v in result.variants:
        if v.directory is not None:
            events = read_history(v.directory / "history")
            found.append((v.label, exercised(events, injects(v.runtime))))
    return tuple(found)


def _aimed(trial: Trial, result: ScenarioResult) -> tuple[Aimed, ...]:
    return tuple(
        Aimed(
            str(entry["name"]),
            str(entry["kind"]),
            aim_of(entry),
            v.label,
            fired=entry["name"] not in {u.name for u in v.unfired},
        )
        for entry in trial.faults
        for v in result.variants
    )


def _summary(record: RunRecord) -> str:
    s = record.trial.shape
    workload = f"{s.events} events/{s.partitions}p/{s.consumers}c" + (
        f", {s.settings}" if s.mongo else ""
    )
    return f"[{workload}] {record.trial.schedule()} -> {record.verdict} ({record.seconds:.0f} s)"


def _quiet(_line: str) -> None:
    """A run's own progress lines: explore prints one line per run instead."""
