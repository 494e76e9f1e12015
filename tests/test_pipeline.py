"""The pipeline under test, end to end against the local servers: workload -> Kafka ->
runtime (listener, spark) -> variant -> MongoDB, judged by the checker against the ledger."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.environment import state
from harness.environment.local import LocalEnvironment
from harness.history.events import EventKind, read_history
from harness.readiness import NotReady, wait_for
from harness.results.model import ScenarioResult, VariantResult
from harness.run.runner import run_scenario
from harness.scenario import parse_scenario
from harness.workload.ledger import read_ledger
from tests.support import chaoslab, processes_of, sigint_as_in_a_terminal
from tests.tiers import LIBRARY

pytestmark = pytest.mark.servers

VARIANTS = ["naive", "idempotent", "unique-index", "transactional"]


def run(env: LocalEnvironment, tmp_path: Path, **scenario: Any) -> dict[str, VariantResult]:
    """Run a scenario given as a dict; results by ``runtime/variant``."""
    spec = {"name": "test", "seed": 5, "pipeline": {"batch_size": 250}, **scenario}
    result: ScenarioResult = run_scenario(
        env, parse_scenario(spec), tmp_path / "run", progress=lambda _m: None
    )
    return {f"{r.runtime}/{r.variant}": r for r in result.variants}


def crashed_batch_size(result: VariantResult) -> int:
    """How many records the variant had written in the batch the crash point interrupted."""
    assert result.directory is not None
    events = read_history(result.directory / "history")
    crash = next(e for e in events if e.kind is EventKind.CRASH)
    written = [
        e for e in events
        if e.kind is EventKind.WRITTEN and e.batch == crash.batch and e.t <= crash.t
    ]  # fmt: skip
    assert written, "the crash came before the batch was written"
    return written[-1].count  # type: ignore[return-value]


def test_a_crash_between_write_and_commit_duplicates_only_the_naive_batch(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    """The listener's case; on Spark the same crash (a driver kill) and the replay from its
    checkpoint are cdc-crash-before-ack's, in the library (tests/test_library.py)."""
    results = run(
        scenario_env,
        tmp_path,
        workload={"events": 1200, "keys": 200, "poison_fraction": 0.01, "partitions": 3},
        runtimes=["listener"],
        variants=VARIANTS,
        faults=[{"kind": "consumer-crash", "point": "after_write_before_commit", "at_batch": 3}],
    )
    for r in results.values():
        assert (r.crashes, r.restarts) == (1, 1), r.variant
        assert r.verdict.lost == 0 and r.verdict.stale == 0, r.variant
    naive = results["listener/naive"]
    replayed = crashed_batch_size(naive)
    assert replayed > 0
    assert naive.verdict.duplicates == replayed
    assert naive.verdict.copies == {2: replayed}
    for fixed in VARIANTS[1:]:
        assert results[f"listener/{fixed}"].verdict.duplicates == 0, fixed
    assert results["listener/transactional"].verdict.offsets_consistent is True


def test_a_crash_in_the_middle_of_a_write(scenario_env: LocalEnvironment, tmp_path: Path) -> None:
    results = run(
        scenario_env,
        tmp_path,
        workload={"events": 1500, "keys": 150, "partitions": 3},
        runtimes=["listener"],
        variants=["naive", "transactional", "dedup-log", "idempotent", "processed-log-txn"],
        faults=[{"kind": "consumer-crash", "point": "mid_write", "at_batch": 2, "after_docs": 100}],
    )
    by_variant = {r.variant: r.verdict for r in results.values()}
    assert all(r.crashes == 1 for r in results.values())
    assert all(v.lost == 0 and v.stale == 0 for v in by_variant.values())
    # The first 100 documents were in MongoDB when the consumer died; the replay wrote them again.
    assert by_variant["naive"].duplicates == 100
    # The transaction never committed: nothing of the batch was there to duplicate.
    assert by_variant["transactional"].duplicates == 0
    # Seed 001's gap: the 100th record was written but still CONSUMING when the consumer died;
    # once its entry expired it was processed again. The 99 before it were CONSUMED.
    assert by_variant["dedup-log"].duplicates == 1
    assert by_variant["idempotent"].duplicates == 0
    # Seed 004's log is written in the batch's transaction: killed, it left neither.
    assert by_variant["processed-log-txn"].duplicates == 0


def test_crashes_before_the_write_and_after_the_commit_cost_nothing(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    results = run(
        scenario_env,
        tmp_path,
        workload={"events": 1500, "keys": 150, "partitions": 3},
        runtimes=["listener"],
        variants=["naive"],
        faults=[
            {"kind": "consumer-crash", "point": "before_write", "at_batch": 2},
            {"kind": "consumer-crash", "point": "after_commit", "at_batch": 3},
        ],
    )
    naive = results["listener/naive"]
    assert naive.crashes == 2
    assert (naive.verdict.duplicates, naive.verdict.lost) == (0, 0)
    assert naive.verdict.in_sink == naive.verdict.acked == 1500


def test_upstream_resends_need_a_business_key_to_be_deduplicated(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    results = run(
        scenario_env,
        tmp_path,
        workload={"events": 600, "keys": 100, "resend_fraction": 0.15, "partitions": 3},
        runtimes=["listener"],
        variants=[
            "dedup-log",
            {"name": "dedup-log", "key": "business"},
            "tests.custom_variant:UpsertByBusinessKey",
        ],
    )
    by_event_id = results["listener/dedup-log"]
    assert by_event_id.ledger is not None
    ledger = list(read_ledger(by_event_id.ledger))
    resends = sum(1 for row in ledger if row.kind == "resend")
    assert resends > 40
    # Keyed by event_id, every resend (a new id for an old change) got through as a copy.
    assert by_event_id.verdict.duplicates == resends
    assert by_event_id.verdict.lost == 0
    assert results["listener/dedup-log[key=business]"].verdict.duplicates == 0
    custom = results["listener/upsert-by-business-key"].verdict
    assert (custom.duplicates, custom.lost, custom.stale) == (0, 0, 0)


def start_cli(folder: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    """The CLI in ``folder`` (another folder, as a user would run it), acting on Ctrl-C as under
    a terminal; its output goes to ``folder/cli.log``."""
    with (folder / "cli.log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "harness.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
            env={**os.environ, **env},
            preexec_fn=sigint_as_in_a_terminal,
        )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_terminated_run_stops_its_runtimes_and_servers(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "run"
    # From another folder, by the library name, as a user would.
    cli = start_cli(tmp_path, "run", "baseline", "--runtime", "listener", "--events", "5000",
                    "--out", str(out))  # fmt: skip
    try:

        def runtimes_running() -> tuple[str, dict[int, str]]:
            found = state.load(out / "env")
            if found is None:
                raise NotReady("the run has not started its environment yet")
            running = processes_of(found.env_id)
            if not any(name.startswith("runtime-") for name in running.values()):
                raise NotReady(f"no runtime process yet among {sorted(running.values())}")
            return found.env_id, running

        env_id, running = wait_for(runtimes_running, what="the run's listeners", timeout=120)
        assert {"kafka-1", "kafka-2", "kafka-3", "mongo", "proxy"} <= set(running.values())
        cli.send_signal(sig)
        assert cli.wait(timeout=90) != 0
    finally:
        if cli.poll() is None:
            cli.kill()
    # Nothing carrying the environment's marker is left: no server, no listener, no child.
    assert processes_of(env_id) == {}, (tmp_path / "cli.log").read_text()[-2000:]


def connect_workers(env_id: str) -> list[int]:
    """The live Connect worker JVMs carrying an environment's marker."""
    found = []
    for pid in processes_of(env_id):
        try:
            if "org.apache.kafka.connect.cli.ConnectDistributed" in psutil.Process(pid).cmdline():
                found.append(pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # exited since it was listed
    return found


# Ctrl-C's clean stop of a run's consumers is test_a_terminated_run_stops_its_runtimes_and_servers'
# in make test; a Connect cluster's, the library tier's.
@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGINT, id="Ctrl-C", marks=LIBRARY),
        pytest.param(signal.SIGKILL, id="SIGKILL"),
    ],
)
def test_a_connect_clusters_workers_are_stopped_on_ctrl_c_and_after_a_sigkill_by_the_next_up(
    tmp_path: Path, sig: int
) -> None:
    """A run's Connect workers are its processes: Ctrl-C stops them with the rest; a SIGKILL runs
    no cleanup, and the next ``up`` stops what it left. The run's environment is registered in a
    registry of its own (``XDG_RUNTIME_DIR``): an environment started meanwhile by a test on the
    other xdist worker would otherwise reap the orphans before this test's ``up`` could."""
    out = tmp_path / "run"
    registry = str(tmp_path / "registry")
    cli = start_cli(
        tmp_path, "run", "connect-worker-loss", "--out", str(out), XDG_RUNTIME_DIR=registry
    )
    try:

        def both_workers_running() -> str:
            found = state.load(out / "env")
            if found is None:
                raise NotReady("the run has not started its environment yet")
            if len(workers := connect_workers(found.env_id)) < 2:
                raise NotReady(f"Connect workers so far: {workers}")
            return found.env_id

        env_id = wait_for(both_workers_running, what="the run's two Connect workers", timeout=240)
        cli.send_signal(sig)
        assert cli.wait(timeout=90) != 0
    finally:
        if cli.poll() is None:
            cli.kill()
    log = (tmp_path / "cli.log").read_text()[-2000:]
    if sig == signal.SIGKILL:
        assert len(connect_workers(env_id)) == 2, log  # orphans now
        up = chaoslab("up", "--dir", str(out / "env"), XDG_RUNTIME_DIR=registry)
        try:
            assert up.returncode == 0, up.stdout + up.stderr
            assert "left by a harness that died" in up.stdout
            assert connect_workers(env_id) == []
        finally:
            chaoslab("down", "--dir", str(out / "env"), XDG_RUNTIME_DIR=registry)
    else:
        assert "chaoslab: interrupted" in log, log
    assert processes_of(env_id) == {}, log


def test_ctrl_c_while_scenarios_run_together_stops_every_run_and_the_servers(
    tmp_path: Path,
) -> None:
    """Two scenarios together on the environment, and one whose fault acts on the environment
    (a cut of the consumers' MongoDB link) on a second one beside them: Ctrl-C stops all three
    runs and both environments."""
    out = tmp_path / "matrix"
    log_path = tmp_path / "cli.log"
    cli = start_cli(tmp_path, "matrix", "baseline", "producer-resend", "mongo-partition",
                    "--runtime", "listener", "--events", "20000", "--together", "2",
                    "--out", str(out))  # fmt: skip
    try:

        def all_consuming() -> tuple[str, str]:
            found, second = state.load(out / "env"), state.load(out / "env-2")
            text = log_path.read_text()
            started = ("baseline | [", "producer-resend | [", "mongo-partition | [")
            if found is None or second is None or not all(s in text for s in started):
                raise NotReady("the three scenarios have not all started")
            listeners = [n for n in processes_of(found.env_id).values() if n.startswith("runtime-")]
            if len(listeners) < 5 + 6:  # one listener per lane: baseline 5, producer-resend 6
                raise NotReady(f"consumers so far: {sorted(listeners)}")
            beside = [n for n in processes_of(second.env_id).values() if n.startswith("runtime-")]
            if len(beside) < 4:  # mongo-partition's four lanes, on the second environment
                raise NotReady(f"consumers on the second environment: {sorted(beside)}")
            return found.env_id, second.env_id

        env_ids = wait_for(all_consuming, what="the three scenarios' listeners", timeout=240)
        cli.send_signal(signal.SIGINT)
        assert cli.wait(timeout=120) != 0
    finally:
        if cli.poll() is None:
            cli.kill()
    text = log_path.read_text()
    for env_id in env_ids:
        assert processes_of(env_id) == {}, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
