"""Helpers shared by the tests: run the CLI, inspect an environment's processes."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import NoReturn, TypedDict

import psutil
import pytest
from confluent_kafka import Message

from harness.environment import process, state
from harness.environment.base import Environment
from harness.environment.process import ProcessHandle
from harness.faults.base import Fault, Target
from harness.faults.nemesis import Nemesis
from harness.faults.schedule import plan
from harness.history.events import HistoryWriter
from harness.pipeline.runtimes import LISTENER
from harness.readiness import NotReady, wait_for

_counter = itertools.count()


def unique(prefix: str) -> str:
    """A name no other test (or earlier run against the same servers) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}-{next(_counter)}"


def value_text(message: Message) -> str:
    """A consumed record's value, decoded (every record the tests produce has one)."""
    value = message.value()
    assert value is not None, message
    return value.decode()


def chaoslab(
    *args: str, timeout: float = 180, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the chaoslab CLI in a child process, as a user would (from ``cwd``, if given)."""
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
        cwd=cwd,
    )


def sigint_as_in_a_terminal() -> None:
    """``preexec_fn`` for a child that must act on SIGINT (Ctrl-C) as under a terminal.

    A non-interactive shell starts a background job (``nohup make test &``) with SIGINT
    ignored; every descendant inherits that, and Python then installs no KeyboardInterrupt
    handler. A test that sends SIGINT sets the disposition it relies on."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Registry(TypedDict):
    XDG_RUNTIME_DIR: str


def private_registry(tmp_path: Path) -> Registry:
    """Environment variables that give a harness a registry of its own: otherwise an ``up`` by
    a test on the other xdist worker would reap what a SIGKILLed harness left, before the test's
    own ``up`` could."""
    return {"XDG_RUNTIME_DIR": str(tmp_path / "registry")}


def server_handles(directory: Path) -> dict[str, ProcessHandle]:
    """The servers recorded in an environment's state file."""
    found = state.load(directory)
    assert found is not None, f"no state file in {directory}"
    return {
        name: ProcessHandle(r.pid, r.create_time)
        for name, r in found.servers.items()
        if r.pid is not None and r.create_time is not None
    }


def still_alive(handles: dict[str, ProcessHandle]) -> dict[str, int]:
    """Those of ``handles`` whose process still runs (same PID and same creation time)."""
    return {name: h.pid for name, h in handles.items() if h.alive()}


def processes_started_in(directory: Path) -> list[int]:
    """PIDs of live processes whose working directory is ``directory`` (servers run there)."""
    found = []
    for proc in psutil.process_iter(["cwd", "status"]):
        if proc.info["cwd"] == str(directory) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc.pid)
    return found


def processes_of(env_id: str) -> dict[int, str]:
    """Live processes (PID -> server name) carrying an environment's marker, wherever they are
    in the process tree: servers, runtimes, and whatever those started."""
    found = {}
    for proc in process.marked(env_id):
        try:
            found[proc.pid] = proc.environ().get(process.SERVER_VAR, "?")
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # exited since it was listed
    return found


# Tests that start a Spark driver run one after another on one xdist worker: two JVMs starting
# Python workers at once on two cores can exceed Spark's fixed wait for a worker to connect back.
SPARK = pytest.mark.xdist_group("spark")


def leader_in_view(env: Environment, topic: str, partition: int = 0) -> int:
    """The partition's leader, once the environment's cluster view knows it (a fresh-clone
    suite read None there once, before ``create_topic`` waited for every broker to know a
    topic; a partition between leaders reads None too)."""

    def known() -> int:
        leader = env.cluster_view().leader_of(topic, partition)
        if leader is None:
            raise NotReady(f"no leader of {topic}[{partition}] in the cluster's view yet")
        return leader

    return wait_for(known, what=f"the leader of {topic}[{partition}]", timeout=30)


# `make test` installs what the suite's containers and browser tests need where it can (Debian, as
# root) and then says so in this variable; there, and under CI=true, a test that finds one
# missing fails: a skip would hide a broken install behind a green run.
TOOLS_VAR = "CHAOSLAB_TOOLS"


def nemesis_of(
    env: Environment, fault: Fault, history_dir: Path, topic: str
) -> tuple[Nemesis, HistoryWriter]:
    """A nemesis for ``fault`` alone on ``env``'s servers (no consumers), writing a listener
    lane's history into ``history_dir``."""
    history = HistoryWriter(history_dir, "nemesis", "naive")
    target = Target(history, supervisor=None, run_dir=history_dir, runtime=LISTENER)  # type: ignore[arg-type]
    return Nemesis(env, plan((fault,), 1), [target], topic=topic), history


def lacking(reason: str) -> NoReturn:
    """Skip a test for a tool this machine lacks - or fail it where the tool must be there."""
    if os.environ.get("CI", "").lower() == "true" or os.environ.get(TOOLS_VAR) == "required":
        pytest.fail(f"{reason}; make test installs it here ({TOOLS_VAR}=required or CI=true)")
    pytest.skip(reason)
