from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from harness.environment.local import LocalEnvironment
from harness.environment.process import ProcessHandle
from harness.environment.servers import postgres
from harness.errors import BadInput
from harness.kafka.clients import admin
from harness.kafka.topics import delete_topics
from harness.readiness import NotReady, wait_for
from harness.run.shards import Shard
from harness.sources import database
from tests import tiers
from tests.support import (
    lacking,
    private_registry,
    server_handles,
    sigint_as_in_a_terminal,
)

# A test slower than this is named as it ends, with the machine's load then.
SLOW_S = 60.0
_SUITE_STARTED = time.monotonic()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaoslab", "the suite's tiers (tests/tiers.py)")
    group.addoption(
        "--shard",
        metavar="K/N",
        help="run the K-th of N shares of the selected tests, balanced by tests/durations.json",
    )
    group.addoption(
        "--record-times",
        metavar="FILE",
        type=Path,
        help="keep the passing tests' seconds in FILE (make library: tests/durations.json)",
    )


@pytest.hookimpl(trylast=True)  # after -m has deselected the other tier
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    text = config.getoption("--shard")
    if not text:
        return
    try:
        shard = Shard.parse(text)
    except BadInput as exc:
        raise pytest.UsageError(str(exc)) from exc
    mine = tiers.share([i.nodeid for i in items], shard, tiers.load_times(tiers.TIMES))
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in mine])
    items[:] = [i for i in items if i.nodeid in mine]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failure, or a slow test, named the moment it ends: CI's time limit kills the suite
    before pytest's summary, and a killed log otherwise shows dots and F's but no names."""
    config = _CONFIG.get("config")
    if config is None or hasattr(config, "workerinput"):
        return  # a worker: its controller reports
    _TIMING.add(report)
    slow = report.when == "call" and report.duration >= SLOW_S
    if not (report.failed or slow):
        return
    elapsed = int(time.monotonic() - _SUITE_STARTED)
    what = "FAILED" if report.failed else "slow"
    line = (
        f"[{elapsed // 60:3d}:{elapsed % 60:02d}] {what} {report.nodeid} ({report.when}, "
        f"{report.duration:.0f} s; load {os.getloadavg()[0]:.1f})"
    )
    crash = getattr(report.longrepr, "reprcrash", None)
    if report.failed and crash is not None:
        line += f": {crash.message.strip().splitlines()[0][:300]}"
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        terminal.write_line(line)


_CONFIG: dict[str, pytest.Config] = {}
_TIMING = tiers.Timing()


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG["config"] = config


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A whole tier's times for make bench; with --record-times, the split's times too."""
    config = session.config
    if hasattr(config, "workerinput") or not _TIMING.seconds:
        return
    tier = tiers.tier_of(config.getoption("markexpr") or "")
    whole = config.args_source is pytest.Config.ArgsSource.TESTPATHS
    if tier is not None and whole and not config.getoption("keyword"):
        shard = config.getoption("--shard")
        _TIMING.write_last(
            tier + (f"-shard-{shard.replace('/', 'of')}" if shard else ""), exitstatus
        )
    if (record := config.getoption("--record-times")) is not None:
        _TIMING.record(record)


# A margin over a stopped node's start and its partitions' catching up on 2 cores
# (docs/performance.md).
WHOLE_TIMEOUT_S = 180.0


@pytest.fixture(scope="session")
def lab_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEnvironment]:
    """One local environment per test worker, shared by every test that needs servers.

    Tests that bounce or stop a server leave it running again; tests about the environment's
    own life cycle start environments of their own. One, not one per test: a three-node cluster
    is slow and CPU-heavy to start (docs/performance.md), and each idle node keeps using CPU.
    """
    with LocalEnvironment(tmp_path_factory.mktemp("env")) as env:
        yield env


@pytest.fixture(autouse=True)
def _shared_env_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test of the shared environment: a server it left down or paused, or a link
    rule it left in force, is undone and fails that test. Left as it was, every later test of
    the worker waited out scenario_env's deadline and failed too, and the suite ran past CI's
    limit instead of naming the one test at fault. The topics the test made are deleted."""
    env: LocalEnvironment | None = (
        request.getfixturevalue("lab_env") if "lab_env" in request.fixturenames else None
    )
    before = _topics(env) if env is not None else set()
    yield
    if env is None:
        return
    undone = env.restore()
    _delete_made(env, before)
    if undone:
        pytest.fail(f"left the shared environment with {', '.join(undone)}: undone")


def _topics(env: LocalEnvironment) -> set[str]:
    return set(admin(env.kafka_bootstrap).list_topics(timeout=30).topics)


def _delete_made(env: LocalEnvironment, before: set[str]) -> None:
    """Delete the topics a test made on the shared environment (``chaoslab run`` keeps a run's
    for its user to read): each broker's idle work grows with the partitions it holds - 1,200
    more took an idle node from 3.6% to 6.8% of a core - and the suite is CPU-bound."""
    made = sorted(_topics(env) - before)
    if made:
        try:
            delete_topics(env.kafka_bootstrap, made)
        except KafkaException as exc:  # the next test's topics are its own either way
            print(f"note: the topics a test made were not all deleted: {exc}")


def _whole(env: LocalEnvironment) -> None:
    status = env.status()
    if not status.healthy:
        raise NotReady(f"not healthy: {[s for s in status.servers if not s.ready]}")
    view = env.cluster_view()
    if len(view.brokers) != len(env.broker_ids):
        raise NotReady(f"registered brokers: {view.brokers}")
    if view.under_replicated():
        raise NotReady(f"under-replicated: {view.under_replicated()[:5]}")


@pytest.fixture
def scenario_env(lab_env: LocalEnvironment) -> LocalEnvironment:
    """The shared environment for a test that runs scenarios, once it is whole again: every
    server running, every broker registered, no partition under-replicated (a scenario that
    counts what a fault did must not start on a cluster still healing from the last test).
    Each run has its own topic, consumer groups and databases, so runs do not see each other's
    data."""
    wait_for(
        lambda: _whole(lab_env),
        what="the shared environment whole again",
        timeout=WHOLE_TIMEOUT_S,
        interval=0.5,
    )
    return lab_env


@pytest.fixture
def postgres_database(scenario_env: LocalEnvironment) -> Iterator[str]:
    """The URI of a database of its own on the shared environment's PostgreSQL (started if it
    is not), with the workload's ``orders`` table; dropped afterwards with the slots in it (a
    slot left behind holds WAL and one of the server's few slots)."""
    if postgres.installed()[0] is None:
        lacking(postgres.installed()[1])
    uri = scenario_env.postgres_uri()
    name = f"shop_{uuid.uuid4().hex[:8]}"
    shop = database.create(uri, name)
    try:
        yield shop
    finally:
        database.drop(uri, name)


@pytest.fixture
def child_harness(
    tmp_path: Path,
) -> Iterator[tuple[subprocess.Popen[str], dict[str, ProcessHandle]]]:
    """A separate harness process that has brought an environment up in tmp_path/env.

    It registers its environment in a registry of its own (``XDG_RUNTIME_DIR``): otherwise any
    environment started meanwhile by a test on the other xdist worker would reap what a
    SIGKILLed child left, before this test's own ``up`` could."""
    directory = tmp_path / "env"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.harness_child", str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **private_registry(tmp_path)),
        preexec_fn=sigint_as_in_a_terminal,  # the SIGINT case relies on Python's handler
    )
    try:
        line = child.stdout.readline()  # type: ignore[union-attr]
        assert line, f"the child harness exited with {child.wait()} before reporting"
        pids = json.loads(line)
        handles = server_handles(directory)
        assert {n: h.pid for n, h in handles.items()} == pids
        yield child, handles
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        LocalEnvironment(directory).stop()
