"""Everything the lab starts, it stops: on down, on an exception, on SIGTERM / SIGINT, and -
when its harness was SIGKILLed - at the next ``up``. Checked by PID."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.environment import process
from harness.environment.base import EnvironmentBusy, Link, LinkRule, ServerStartError
from harness.environment.local import LocalEnvironment
from harness.kafka.clients import end_offsets
from harness.kafka.topics import create_topic
from harness.readiness import NotReady, wait_for
from tests.support import (
    chaoslab,
    private_registry,
    processes_started_in,
    server_handles,
    still_alive,
    unique,
)

pytestmark = pytest.mark.servers


def test_down_stops_every_server(tmp_path: Path) -> None:
    # Its output read as `chaoslab up | head -1` reads it: a reader that goes away silences the
    # progress lines, not the start (a failed line once cut the stopping of what had started).
    up = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "up", "--dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert up.stdout is not None and up.stdout.readline().startswith("starting")
        up.stdout.close()
        _, errors = up.communicate(timeout=180)
        assert up.returncode == 0 and "Traceback" not in errors, errors
    except BaseException:
        LocalEnvironment(tmp_path).stop()  # what a failed start left
        raise
    handles = server_handles(tmp_path)
    assert set(handles) == {"kafka-1", "kafka-2", "kafka-3", "mongo", "proxy"}
    assert still_alive(handles) == {n: h.pid for n, h in handles.items()}

    status = chaoslab("status", "--dir", str(tmp_path), "--json")
    assert status.returncode == 0
    seen = json.loads(status.stdout)
    assert seen["healthy"] is True, seen["kafka_error"]
    assert seen["kafka"]["brokers"] == [1, 2, 3] and seen["kafka"]["controller"] in (1, 2, 3)
    shown = chaoslab("status", "--dir", str(tmp_path)).stdout
    assert "kafka brokers    1, 2, 3 registered; active controller: node " in shown

    down = chaoslab("down", "--dir", str(tmp_path))
    assert down.returncode == 0, down.stderr
    assert still_alive(handles) == {}
    assert not (tmp_path / "state.json").exists()
    assert chaoslab("status", "--dir", str(tmp_path)).returncode == 1


def test_an_exception_in_the_with_block_stops_every_server(tmp_path: Path) -> None:
    handles = {}
    with pytest.raises(RuntimeError, match="boom"), LocalEnvironment(tmp_path) as env:
        handles = server_handles(env.directory)
        assert len(still_alive(handles)) == 5
        raise RuntimeError("boom")
    assert len(handles) == 5
    assert still_alive(handles) == {}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_harness_stops_every_server(child_harness, sig: int) -> None:
    child, handles = child_harness
    os.kill(child.pid, sig)
    child.wait(timeout=60)
    assert still_alive(handles) == {}


def test_a_process_that_ignores_sigterm_is_killed_with_its_group_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A shell that ignores SIGTERM, and a child of it in its process group that does too
    # (ignored signals stay ignored across exec).
    handle = process.spawn(
        ["sh", "-c", "trap '' TERM; sleep 600 & wait"],
        env_id=unique("stubborn"),
        server="stubborn",
        log_path=tmp_path / "stubborn.log",
    )
    shell = handle.process()
    assert shell is not None

    def children() -> list[psutil.Process]:
        found = shell.children()
        if not found:
            raise NotReady("the shell has not started its child yet")
        return found

    started_children = wait_for(children, what="the shell's child", timeout=10)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        process.terminate([shell], grace=1.0, what="stopping stubborn")
    assert time.monotonic() - started < 1.0 + process.KILL_WAIT_S
    assert not handle.alive()
    assert process.wait_exited(started_children, timeout=0) == []  # the group went too
    assert "stopping stubborn: 1 of 1 processes" in caplog.text
    assert "still ran 1 s after SIGTERM; killing them and their process groups" in caplog.text


def test_servers_of_a_sigkilled_harness_are_stopped_by_the_next_up(
    child_harness,
    tmp_path: Path,
) -> None:
    child, handles = child_harness
    child.kill()
    child.wait()
    # SIGKILL runs no cleanup: the servers are orphans now.
    assert still_alive(handles) == {n: h.pid for n, h in handles.items()}

    other = tmp_path / "other"
    up = chaoslab("up", "--dir", str(other), **private_registry(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        assert "left by a harness that died" in up.stdout
        assert still_alive(handles) == {}
    finally:
        chaoslab("down", "--dir", str(other), **private_registry(tmp_path))


def test_a_server_that_cannot_start_shows_its_log_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    broken = home / "bin" / "java"
    broken.write_text("#!/bin/sh\necho 'java: cannot open the JVM (simulated)' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(home))  # Kafka's nodes run $JAVA_HOME/bin/java
    directory = tmp_path / "env"
    with pytest.raises(ServerStartError) as caught:
        LocalEnvironment(directory).start()
    message = str(caught.value)
    assert "preparing the servers failed: kafka-1 (exit 3)" in message
    assert "cannot open the JVM (simulated)" in message  # the log's tail
    assert processes_started_in(directory) == []
    assert not (directory / "state.json").exists()

    # A progress line that cannot be written (the terminal's pipe closed) does not stop the
    # stop: what was started is stopped, the directory left free.
    def closed_pipe(line: str) -> None:
        if line.startswith("stopping"):
            raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        LocalEnvironment(directory, progress=closed_pipe).start()
    assert processes_started_in(directory) == []
    assert not (directory / "state.json").exists()


def test_two_environments_run_side_by_side_and_a_directory_holds_one(tmp_path: Path) -> None:
    with LocalEnvironment(tmp_path / "a") as a, LocalEnvironment(tmp_path / "b") as b:
        assert a.status().healthy and b.status().healthy
        assert a.kafka_bootstrap != b.kafka_bootstrap and a.mongo_uri != b.mongo_uri
        with pytest.raises(EnvironmentBusy, match="already running"):
            LocalEnvironment(tmp_path / "a").start()
        again = chaoslab("up", "--dir", str(tmp_path / "b"))
        assert again.returncode == 2 and "already running" in again.stderr
        assert a.status().healthy and b.status().healthy  # the refused starts changed nothing


def test_pause_and_resume_a_node(lab_env: LocalEnvironment) -> None:
    lab_env.pause_broker(broker=2)
    try:
        servers = {s.name: s for s in lab_env.status().servers}
        assert servers["kafka-2"].alive and servers["kafka-2"].paused
        assert not servers["kafka-2"].ready and servers["kafka-1"].ready
    finally:
        lab_env.resume_broker(broker=2)

    def ready() -> None:
        if not {s.name: s for s in lab_env.status().servers}["kafka-2"].ready:
            raise NotReady("kafka-2 not ready")

    wait_for(ready, what="node 2 after resume", timeout=60)


def test_what_a_fault_left_undone_is_named_and_undone(lab_env: LocalEnvironment) -> None:
    """What the suite's fixture asks after each test of the shared environment: a test that
    fails between a fault and its undoing leaves no server down for the tests after it."""
    assert lab_env.left_down() == []
    lab_env.kill_broker(broker=3)
    lab_env.pause_mongo()
    rule = lab_env.add_link_rule(LinkRule(Link.CONSUMER_MONGO, "cut"))
    left = lab_env.left_down()
    assert left == [
        "kafka-3 down",
        "mongo paused",
        f"link rule {rule} (cut on mongo) in force",
    ]
    assert lab_env.restore() == left
    assert lab_env.left_down() == []
    servers = {s.name: s for s in lab_env.status().servers}
    assert servers["kafka-3"].ready and servers["mongo"].ready
    assert lab_env.fault_proxy.rules() == []


RESTART_FROM_ANOTHER_PROCESS = """
import sys
from harness.environment.backends import attach
env = attach(sys.argv[1])
env.restart_broker(hard=False, broker=1)
env.restart_broker(hard=True, broker=1)
print(env.status().kafka_bootstrap)
"""


def test_another_process_restarts_the_broker_of_an_environment_it_does_not_own(
    lab_env: LocalEnvironment,
) -> None:
    # `chaoslab run --env` bounces a node this process started: the old process stays a zombie
    # until this process reaps it, and the restart must not wait for that.
    before = server_handles(lab_env.directory)["kafka-1"]
    result = subprocess.run(
        [sys.executable, "-c", RESTART_FROM_ANOTHER_PROCESS, str(lab_env.directory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == lab_env.status().kafka_bootstrap
    after = server_handles(lab_env.directory)["kafka-1"]
    assert after.pid != before.pid and after.alive() and not before.alive()
    topic = unique("after-restart")
    create_topic(lab_env.kafka_bootstrap, topic, 1)
    assert end_offsets(lab_env.kafka_bootstrap, topic) == {0: 0}


def test_a_spawned_process_carries_its_marker_as_soon_as_spawn_returns(tmp_path: Path) -> None:
    # A fault aimed at a consumer started a moment ago finds it by its marker: Popen returns
    # before the kernel has set up the new program's environment, and a signal sent in that
    # window reached no one (a consumer kill at second 0 said "no consumer process"). The
    # spawns share one CPU with this thread, as on a busy machine: the parent, woken by the
    # exec, then runs while the child is still inside it (more than half of them read empty
    # before spawn waited for the marker).
    env_id = unique("marker")
    started: list[psutil.Process] = []
    missed = []
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        for i in range(50):
            server = f"sleeper-{i}"
            handle = process.spawn(
                ["sleep", "60"], env_id=env_id, server=server, log_path=tmp_path / "sleep.log"
            )
            started.append(psutil.Process(handle.pid))
            # Read at once, where ``marked`` reads it (its scan of every process can outlast
            # the window; it did not on a loaded CI machine).
            if started[-1].environ().get(process.SERVER_VAR) != server:
                missed.append(i)
    finally:
        os.sched_setaffinity(0, cpus)
        process.kill(started)  # every exit status collected
    assert not missed, f"{len(missed)} of 50 new processes without their marker: {missed}"


def test_a_service_spawned_with_only_its_name_is_ours_and_the_processes_it_starts_are_not(
    tmp_path: Path,
) -> None:
    # The podman service's helpers inherit its marker (aardvark-dns, conmon, its "container
    # cleanup"): killed as the lab's, aardvark-dns left a stale PID file, and netavark's next
    # reload SIGHUPed whoever had that PID then. Here: a bash that starts a sleep and another bash.
    env_id = unique("only")
    handle = process.spawn(
        ["bash", "-c", "sleep 60 & bash -c 'sleep 61; true' & wait"],
        env_id=env_id,
        server="engine",
        log_path=tmp_path / "service.log",
        only="bash",
    )
    service = psutil.Process(handle.pid)

    def started() -> list[psutil.Process]:
        found = service.children(recursive=True)
        if len(found) < 3:
            raise NotReady(f"the service has started {found} so far")
        return found

    try:
        helpers = wait_for(started, what="the service's children", timeout=10, interval=0.05)
        assert {p.name() for p in helpers} == {"sleep", "bash"}
        assert all(p.environ().get(process.ENV_ID_VAR) == env_id for p in helpers)
        assert [p.pid for p in process.marked(env_id)] == [service.pid]
        assert [p.pid for p in process.marked(env_id, "engine")] == [service.pid]
    finally:
        process.kill([service])  # the service and what it started
