"""Many scenarios on one environment (``chaoslab matrix`` and ``demo``): one at a time, or
``together`` at a time for those that keep to their own runs.

A scenario whose faults act on a server or a link of the environment (a broker restart, a cut
of the consumers' link to MongoDB, the oplog shrinking) would hit every run on it, so it runs
alone. One whose faults act only on its own runs - its consumers crash, its workload carries
resends, the proxy fails its own groups' commits, its Spark application loses an executor - may
run beside others (``Scenario.keeps_to_its_runs``): its
topic, consumer groups and databases are its own, and what the checker counts comes from its
own ledger and histories. What they share is the machine and the servers' load: their wall
times and events/s overlap, and the report says which ran beside which (from the results'
own start times: ``beside``).

Runs side by side are threads of this process (the runs' consumers are processes of their
own; the harness mostly waits). A run that fails as runs can (its consumers never caught up, a
consumer kept failing: a ``LabError``) is the matrix's result for it, with its error, and the
others go on - one timeout must not cost a soak its hours. Ctrl-C, or a defect of the lab's (any
other exception), sets ``stop``: the other runs end at their next look
(``harness.run.loop.Stopped``), each stopping what it started.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass

from harness.environment.base import Environment
from harness.environment.spark import SparkCluster
from harness.errors import LabError
from harness.results.model import ScenarioResult
from harness.run.loop import Progress, Stopped
from harness.scenario import Scenario

# One scenario run: (scenario, its folder, its progress, stop) -> its result.
RunOne = Callable[[Scenario, str, Progress, threading.Event], ScenarioResult]
SECOND_ENV = "env-2"  # the folder of a matrix's second environment, in its output folder


@dataclass(frozen=True)
class Planned:
    """A scenario run of the matrix: the scenario (its seed set), its folder, its place."""

    scenario: Scenario
    folder: str
    index: int  # 1-based, in the matrix's order


def split(runs: Sequence[Planned], together: int) -> tuple[list[Planned], list[Planned]]:
    """(the runs that need the environment to themselves, the runs that may share it) - all
    alone when ``together`` is 1. Pure."""
    if together <= 1:
        return list(runs), []
    alone = [r for r in runs if not r.scenario.keeps_to_its_runs]
    return alone, [r for r in runs if r.scenario.keeps_to_its_runs]


def recorded(run_one: RunOne) -> RunOne:
    """``run_one``, with a run that failed as runs can returned as a result with its error."""

    def run(
        scenario: Scenario, folder: str, progress: Progress, stop: threading.Event
    ) -> ScenarioResult:
        try:
            return run_one(scenario, folder, progress, stop)
        except Stopped:
            raise
        except LabError as exc:
            progress(f"    {folder} failed, the others go on: {exc}")
            return ScenarioResult(name=scenario.name, seed=scenario.seed, error=str(exc))

    return run


def run_matrix(
    runs: Sequence[Planned],
    run_one: RunOne,
    *,
    together: int,
    progress: Progress,
    run_alone: RunOne | None = None,
) -> list[ScenarioResult]:
    """Every run, in the matrix's order in the result. Those that need an environment to
    themselves run one at a time: first, on the one environment - or, given ``run_alone`` (a
    second environment's), beside the others. The others run ``together`` at a time."""
    stop = threading.Event()
    results: dict[int, ScenarioResult] = {}
    run_one = recorded(run_one)
    run_alone = recorded(run_alone) if run_alone is not None else None
    alone, shared = split(runs, together)
    lanes = [_Lane(shared, run_one, together)] if shared else []
    if run_alone is not None and shared and alone:
        progress(
            f"\n=== {len(alone)} scenarios whose faults act on the environment, one at a time on "
            f"a second environment: {', '.join(r.folder for r in alone)} ==="
        )
        lanes.append(_Lane(alone, run_alone, 1))
    else:
        for run in alone:
            progress(f"\n=== [{run.index}/{len(runs)}] {run.folder} ===")
            results[run.index] = run_one(run.scenario, run.folder, progress, stop)
    if shared:
        names = ", ".join(r.folder for r in shared)
        progress(
            f"\n=== {len(shared)} scenarios that keep to their own runs, {together} at a time: "
            f"{names} ==="
        )
    if lanes:
        results |= _together(lanes, len(runs), progress, stop)
    return [results[run.index] for run in runs]


def run_on_environments(
    env: Environment,
    runs: Sequence[Planned],
    run_on: Callable[[Environment], RunOne],
    *,
    together: int,
    progress: Progress,
    stack: ExitStack,
    second: Callable[[], Environment] | None = None,
) -> list[ScenarioResult]:
    """``run_matrix`` on ``env`` - and, where a second environment of its backend can run
    beside it (``BackendAbilities.second``), the runs that need an environment to themselves
    on one made by ``second`` (started here, stopped with ``stack``): they had the machine
    mostly idle while they ran first, one at a time, on the one (docs/performance.md).
    ``second`` is None for an environment the caller did not start (``--env``)."""
    alone, shared = split(runs, together)
    run_alone = None
    if second is not None and env.abilities.second and alone and shared:
        run_alone = run_on(stack.enter_context(second()))
    return run_matrix(runs, run_on(env), together=together, progress=progress, run_alone=run_alone)


@dataclass(frozen=True)
class _Lane:
    """Runs played on one environment, up to ``at_once`` at a time."""

    runs: Sequence[Planned]
    run_one: RunOne
    at_once: int


# The run a thread of ``_together`` is playing: what it says is prefixed with its folder.
_speaking = threading.local()


def prefixed(progress: Progress) -> Progress:
    """``progress``, each line prefixed with the folder of the run whose thread says it while
    runs are under way together (their lines interleave), unchanged elsewhere. The environment
    is given one too: a line it says for a run - the Spark standalone cluster it starts when a
    run first asks - is that run's."""

    def said(line: str) -> None:
        folder = getattr(_speaking, "folder", None)
        if folder is None:
            progress(line)
        else:
            progress("\n".join(f"{folder} | {part}" for part in line.strip("\n").split("\n")))

    return said


def _together(
    lanes: Sequence[_Lane], total: int, progress: Progress, stop: threading.Event
) -> dict[int, ScenarioResult]:
    # A Spark standalone cluster's workers give each application one core: two applications
    # at once would queue for them, so its scenarios take turns.
    standalone = threading.Lock()

    def one(run: Planned, run_one: RunOne) -> ScenarioResult:
        said = prefixed(progress)
        _speaking.folder = run.folder
        uses_standalone = run.scenario.setting.spark_cluster is SparkCluster.STANDALONE
        if uses_standalone:
            standalone.acquire()
        try:
            said(f"=== [{run.index}/{total}] {run.folder} ===")
            return run_one(run.scenario, run.folder, said, stop)
        finally:
            if uses_standalone:
                standalone.release()
            _speaking.folder = None

    pools = [
        ThreadPoolExecutor(max_workers=lane.at_once, thread_name_prefix="scenario")
        for lane in lanes
    ]
    futures: dict[Future[ScenarioResult], Planned] = {}
    try:
        futures = {
            pool.submit(one, run, lane.run_one): run
            for pool, lane in zip(pools, lanes, strict=True)
            for run in lane.runs
        }
        done, _pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in done if f.exception() is not None]
        if failed:
            raise failed[0].exception()  # type: ignore[misc]
        return {futures[f].index: f.result() for f in done}
    except BaseException:
        stop.set()  # Ctrl-C or a failed run: the others end at their next look
        raise
    finally:
        for future in futures:
            future.cancel()  # those not started yet
        for pool in pools:
            pool.shutdown(wait=True)  # each run stops what it started, within its deadlines
