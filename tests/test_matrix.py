"""The matrix's schedule, without servers: which scenarios may share the environment, and how
the runs that may share it run ``together`` at a time. ``run_one`` here stands for a scenario
run (the lab's own seam; the runs with servers are in tests/test_library.py)."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from harness import paths
from harness.console import say
from harness.results.model import ScenarioResult
from harness.run.loop import Progress, RunTimeout
from harness.run.matrix import Planned, RunOne, prefixed, run_matrix, split
from harness.scenario import Scenario, load_scenario

# Their faults act on a server or a link of the environment: they run alone.
ALONE = {
    "cdc-postgres-restart",  # PostgreSQL restarts: every CDC run's database with it
    "cdc-slot-behind",  # a cap on what every slot on the server may keep
    "connect-mongo-outage",  # the consumers' connections to MongoDB are reset
    "mongo-ack-lost",  # the replies on the consumers' link to MongoDB are dropped
    "mongo-partition",  # the consumers' link to MongoDB is cut
    "mongo-stepdown",  # MongoDB refuses every writer
    "msk-rolling-upgrade",  # brokers restart
    "msk-rolling-upgrade-java",  # brokers restart
    "connect-rolling-upgrade",  # brokers restart
    "outbox-history-lost",  # the oplog shrinks: every run's writes would roll it faster
    "outbox-server-restarts",  # MongoDB and a broker restart
    "spark-connector-replay",  # MongoDB steps down
}


def library() -> list[Planned]:
    scenarios = [load_scenario(f) for f in paths.library()]
    return [Planned(s, s.name, i) for i, s in enumerate(scenarios, 1)]


def by_name(*names: str) -> list[Planned]:
    return [r for r in library() if r.folder in names]


def test_scenarios_whose_faults_act_on_the_environment_run_alone() -> None:
    alone, shared = split(library(), together=2)
    assert {r.folder for r in alone} == ALONE
    assert {r.folder for r in shared} == {r.folder for r in library()} - ALONE
    assert "spark-executor-loss" in {r.folder for r in shared}  # its executor is its own
    # One at a time (the default): everything alone, in order.
    alone, shared = split(library(), together=1)
    assert [r.folder for r in alone] == [r.folder for r in library()] and shared == []
    # Variants one at a time measure throughput: such a scenario has the machine to itself.
    baseline = next(r for r in library() if r.folder == "baseline")
    serial = replace(
        baseline.scenario, pipeline=replace(baseline.scenario.pipeline, parallel=False)
    )
    assert split([baseline, replace(baseline, scenario=serial)], 2)[0] == [
        replace(baseline, scenario=serial)
    ]


def result(scenario: Scenario, folder: str) -> ScenarioResult:
    return ScenarioResult.of(scenario, "local", {}, 0.0, 1.0, (), Path(folder))


def test_shared_runs_run_together_and_results_keep_the_matrix_order() -> None:
    runs = library()
    _alone, shared = split(runs, 2)
    running: set[str] = set()
    most = 0
    lock = threading.Lock()
    both = threading.Barrier(2, timeout=10)  # the first two shared runs must be under way at once
    lines: list[str] = []

    def run_one(
        s: Scenario, folder: str, progress: Progress, stop: threading.Event
    ) -> ScenarioResult:
        nonlocal most
        with lock:
            running.add(folder)
            most = max(most, len(running))
        if folder in {r.folder for r in shared[:2]}:
            both.wait()
        progress(f"ran {folder}")
        with lock:
            running.discard(folder)
        return result(s, folder)

    results = run_matrix(runs, run_one, together=2, progress=lines.append)
    assert [r.name for r in results] == [r.folder for r in runs]
    assert most == 2
    # A shared run's lines carry its name (they interleave); an alone run's do not.
    assert f"{shared[0].folder} | ran {shared[0].folder}" in lines
    assert "ran msk-rolling-upgrade" in lines
    assert any(line.startswith(f"{shared[0].folder} | === [") for line in lines)


def test_a_failed_run_stops_the_others_and_its_error_is_raised() -> None:
    runs = [r for r in library() if r.folder in {"baseline", "cdc-crash-before-ack"}]
    started, stopped = threading.Event(), threading.Event()

    def run_one(
        s: Scenario, folder: str, progress: Progress, stop: threading.Event
    ) -> ScenarioResult:
        if folder == "baseline":
            assert started.wait(timeout=10)  # fails once the other is under way
            raise RuntimeError("the broker lost data")
        started.set()
        if not stop.wait(timeout=10):  # a run's loop looks at stop and ends
            raise AssertionError("the other run was not asked to stop")
        stopped.set()
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="the broker lost data"):
        run_matrix(runs, run_one, together=2, progress=lambda _line: None)
    assert stopped.is_set()


def test_a_run_that_fails_as_runs_can_is_its_result_and_the_others_go_on() -> None:
    runs = by_name("baseline", "cdc-crash-before-ack", "poison-records")
    lines: list[str] = []

    def run_one(
        s: Scenario, folder: str, progress: Progress, stop: threading.Event
    ) -> ScenarioResult:
        if folder == "cdc-crash-before-ack":
            raise RunTimeout("consumers did not catch up within 300s")
        assert not stop.is_set()
        return result(s, folder)

    results = run_matrix(runs, run_one, together=2, progress=lines.append)
    assert [(r.name, r.error) for r in results] == [
        ("baseline", ""),
        ("cdc-crash-before-ack", "consumers did not catch up within 300s"),
        ("poison-records", ""),
    ]
    assert not results[1].passed
    assert any("cdc-crash-before-ack failed, the others go on" in line for line in lines)


def test_runs_on_the_spark_standalone_cluster_take_turns() -> None:
    executor_loss = next(r for r in library() if r.folder == "spark-executor-loss")
    runs = [replace(executor_loss, folder=f"seed-{k}", index=k) for k in (1, 2, 3)]
    running = 0
    most = 0
    lock = threading.Lock()

    def run_one(
        s: Scenario, folder: str, progress: Progress, stop: threading.Event
    ) -> ScenarioResult:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        # Three workers for three runs: without the turns, the others start within this window
        # (a bounded wait for a violation to show; nothing waits on it to pass).
        stop.wait(0.3)
        with lock:
            running -= 1
        return result(s, folder)

    assert len(run_matrix(runs, run_one, together=3, progress=lambda _line: None)) == 3
    assert most == 1


def test_what_the_environment_says_for_a_run_together_carries_the_runs_name() -> None:
    """The environment's progress is ``prefixed`` too: a line it says in a run's thread (the
    Spark standalone cluster it starts when a run first asks) is that run's; one it says
    outside the runs (its start and stop) is nobody's."""
    lines: list[str] = []
    env_says = prefixed(lines.append)
    runs = by_name("baseline", "producer-exactly-once")

    def run_one(
        s: Scenario, folder: str, progress: Progress, stop: threading.Event
    ) -> ScenarioResult:
        env_says(f"asked by {folder}\n  a second line")
        return result(s, folder)

    env_says("environment ready")
    run_matrix(runs, run_one, together=2, progress=lines.append)
    env_says("stopped")
    assert lines[0] == "environment ready" and lines[-1] == "stopped"
    for run in runs:
        assert f"{run.folder} | asked by {run.folder}\n{run.folder} |   a second line" in lines


def test_given_a_second_environment_the_alone_runs_play_there_one_at_a_time_beside_the_rest() -> (
    None
):
    runs = library()
    alone, shared = split(runs, 2)
    where: dict[str, str] = {}
    running_alone = 0
    most_alone = 0
    lock = threading.Lock()
    # An alone run and a shared one must be under way at once.
    both = threading.Barrier(2, timeout=10)

    def on(name: str) -> RunOne:
        def run_one(
            s: Scenario, folder: str, progress: Progress, stop: threading.Event
        ) -> ScenarioResult:
            nonlocal running_alone, most_alone
            with lock:
                where[folder] = name
                if name == "second":
                    running_alone += 1
                    most_alone = max(most_alone, running_alone)
            if folder in (alone[0].folder, shared[0].folder):
                both.wait()
            progress(f"ran {folder}")
            with lock:
                if name == "second":
                    running_alone -= 1
            return result(s, folder)

        return run_one

    lines: list[str] = []
    results = run_matrix(
        runs, on("first"), together=2, progress=lines.append, run_alone=on("second")
    )
    assert [r.name for r in results] == [r.folder for r in runs]
    assert {f for f, n in where.items() if n == "second"} == ALONE
    assert {f for f, n in where.items() if n == "first"} == {r.folder for r in shared}
    assert most_alone == 1
    # Their lines interleave with the others': they carry their names too.
    assert "msk-rolling-upgrade | ran msk-rolling-upgrade" in lines


def test_a_failed_runs_error_is_kept_in_its_results(tmp_path: Path) -> None:
    (run,) = by_name("baseline")
    failed = replace(result(run.scenario, "baseline"), error="consumers did not catch up")
    failed.write(tmp_path / "results.json")
    read = ScenarioResult.from_json(json.loads((tmp_path / "results.json").read_text()))
    assert read.error == "consumers did not catch up" and not read.passed


class Unhurried(io.StringIO):
    """Standard output that hands the processor to another thread at every write, as a write
    to a pipe a slow reader drains (a CI log) may: whatever a line leaves between its writes,
    another thread's line takes."""

    def write(self, text: str) -> int:
        time.sleep(0)  # the interpreter's lock goes to a thread waiting for it
        return super().write(text)


def test_lines_said_by_runs_together_are_written_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands' ``say`` (chaoslab's progress) under runs side by side: every line written
    is a line some run said, each once (a CI log once read ``=== [2/6] concurrent-duplicates
    ===msk-rolling-upgrade | === [4/6] msk-rolling-upgrade ===``)."""
    out = Unhurried()
    monkeypatch.setattr(sys, "stdout", out)
    runs = [r for r in library() if r.scenario.keeps_to_its_runs][:4]
    said: list[str] = []

    def tee(message: str) -> None:
        said.append(message)
        say(message)

    def run_one(
        s: Scenario, folder: str, progress: Progress, stop: threading.Event
    ) -> ScenarioResult:
        for k in range(100):
            progress(f"line {k} of {folder}" + ("\n  and its second line" if k % 10 == 0 else ""))
        return result(s, folder)

    run_matrix(runs, run_one, together=len(runs), progress=tee)
    assert len(runs) == 4 and len(said) > 4 * 100
    lines = "\n".join(said).splitlines()
    written = out.getvalue().splitlines()
    known = set(lines)
    assert [line for line in written if line not in known][:3] == []  # none spliced
    assert Counter(written) == Counter(lines)  # none lost, none split
