"""Supervised server processes: spawn, signal, stop, and find the ones a dead harness left.

Every process the lab starts carries two environment variables, ``CHAOSLAB_ENV_ID`` and
``CHAOSLAB_SERVER``, which its children inherit (a Spark worker's executors, a runtime's JVM).
A process is "ours" only if it carries our marker, so signals never reach a stranger that was
given a recycled PID, and grandchildren that left the process group are still found.

A service whose children are another program's to manage is spawned with ``only`` its own
program's name (``CHAOSLAB_ONLY``): its children inherit the marker but are not ours. The podman
service's are: netavark starts one ``aardvark-dns`` for every network on the host and SIGHUPs the
PID in its PID file to reload it, so an aardvark-dns the lab killed left a stale PID file, and
the next container's network set-up SIGHUPed whatever process was given that PID next
(docs/environment.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

ENV_ID_VAR = "CHAOSLAB_ENV_ID"
SERVER_VAR = "CHAOSLAB_SERVER"
ONLY_VAR = "CHAOSLAB_ONLY"  # the one program the marker belongs to, where it is set
KILL_WAIT_S = 10.0  # after SIGKILL: only a process stuck in the kernel takes longer
SLOW_STOP_S = 5.0  # a stop step that takes longer is logged
MARKED_WAIT_S = 5.0  # for a new process's environment to be readable: an exec takes far less

log = logging.getLogger(__name__)

# Popen objects of the children this process spawned, so their exit status is collected
# (no zombies) when they are stopped from here.
_children: dict[int, subprocess.Popen[bytes]] = {}
# Exit statuses collected by ``reap_exited_children`` and not yet asked for with ``exit_code``:
# a reap for one server (the nemesis waiting for a node to stop) must not lose a consumer's
# SIGKILL (measured: a crash counted as "exited with status None").
_reaped: dict[int, int] = {}


@dataclass(frozen=True)
class ProcessHandle:
    """A process we started: PID plus creation time, which together survive PID reuse."""

    pid: int
    create_time: float

    def process(self) -> psutil.Process | None:
        """The live process this handle names, or None if it exited (or is a zombie)."""
        try:
            proc = psutil.Process(self.pid)
            if proc.create_time() != self.create_time or proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.NoSuchProcess:
            return None

    def alive(self) -> bool:
        return self.process() is not None


def handle_of(pid: int) -> ProcessHandle:
    return ProcessHandle(pid, psutil.Process(pid).create_time())


# The line the lab writes into a process's log before each start.
LOG_HEADER = "==== chaoslab: starting"


def spawn(
    argv: Sequence[str],
    *,
    env_id: str,
    server: str,
    log_path: Path,
    extra_env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    only: str | None = None,
) -> ProcessHandle:
    """Start ``argv`` in its own session (so terminal signals and process-group kills aimed at
    the harness do not reach it), appending its output to ``log_path``. With ``only`` (the
    program's process name), the processes it starts are not counted as the server's."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **(extra_env or {}), ENV_ID_VAR: env_id, SERVER_VAR: server}
    env.pop(ONLY_VAR, None)
    if only is not None:
        env[ONLY_VAR] = only
    with log_path.open("ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"{LOG_HEADER} {server} at {stamp}: {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    _reaped.pop(proc.pid, None)  # a status left by an earlier process with this pid
    handle = handle_of(proc.pid)
    _until_marked(handle, env_id, server)
    return handle


def _until_marked(handle: ProcessHandle, env_id: str, server: str) -> None:
    """Return once the new process carries its marker where ``marked`` reads it: Popen returns
    when the exec has closed the parent's pipe, before the kernel has set up the new program's
    environment, and in that window /proc/PID/environ reads empty - a signal sent by marker at
    once missed the process. Bounded by ``MARKED_WAIT_S``; a process that has already exited is
    not waited for."""
    deadline = time.monotonic() + MARKED_WAIT_S
    while time.monotonic() < deadline:
        proc = handle.process()
        if proc is None or _carries(proc, env_id, server):
            return
        time.sleep(0.001)


def _carries(proc: psutil.Process, env_id: str, server: str | None) -> bool:
    try:
        env = proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return False
    if env.get(ENV_ID_VAR) != env_id or (server is not None and env.get(SERVER_VAR) != server):
        return False
    only = env.get(ONLY_VAR)
    if only is None:
        return True
    # The process spawn started leads its own session; the program's own helpers (podman's
    # "container cleanup") do not.
    with contextlib.suppress(psutil.Error, OSError):
        return bool(proc.name() == only and os.getsid(proc.pid) == proc.pid)
    return False


def marked(env_id: str, server: str | None = None) -> list[psutil.Process]:
    """Every live process carrying this environment's marker (and this server's, if given)."""
    me = os.getpid()
    return [
        proc for proc in psutil.process_iter() if proc.pid != me and _carries(proc, env_id, server)
    ]


def _send(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            proc.send_signal(sig)


def _collect(procs: Iterable[psutil.Process]) -> None:
    for proc in procs:
        child = _children.pop(proc.pid, None)
        if child is not None:
            child.wait()


def _exited(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def wait_exited(procs: Sequence[psutil.Process], *, timeout: float) -> list[psutil.Process]:
    """Wait until each process has exited; returns those still running at the deadline.

    Not ``psutil.wait_procs``: for a process that is not our child it waits until the PID is
    gone, and a server another process started (``chaoslab run --env`` restarting the broker
    of an environment a test session owns) stays a zombie until that parent reaps it.
    """
    deadline = time.monotonic() + timeout
    running = [p for p in procs if not _exited(p)]
    while running and time.monotonic() < deadline:
        time.sleep(0.05)
        running = [p for p in running if not _exited(p)]
    return running


def signal_server(env_id: str, server: str, sig: int) -> int:
    """Send ``sig`` to every process of ``server``; returns how many received it."""
    procs = marked(env_id, server)
    _send(procs, sig)
    return len(procs)


def terminate(
    procs: Sequence[psutil.Process],
    *,
    grace: float,
    what: str = "",
    sig: signal.Signals = signal.SIGTERM,
) -> None:
    """``sig`` (a server's own clean stop: SIGTERM unless it says otherwise), then - for
    whatever still runs after ``grace`` seconds - SIGKILL to each one
    and its process group; returns once every process has exited (children of ours reaped).
    Bounded: ``grace`` plus ``KILL_WAIT_S``. An escalation, or a stop slower than
    ``SLOW_STOP_S``, is logged with ``what`` was being stopped."""
    started = time.monotonic()
    _send(procs, sig)
    _send(procs, signal.SIGCONT)  # a paused process would never act on the signal
    left = wait_exited(procs, timeout=grace)
    if left:
        log.warning(
            "%s: %d of %d processes (PIDs %s) still ran %.0f s after SIGTERM; killing them "
            "and their process groups",
            what or "stopping",
            len(left),
            len(procs),
            ", ".join(str(p.pid) for p in left),
            grace,
        )
        kill(left)
    _collect(procs)
    took = time.monotonic() - started
    if not left and took > SLOW_STOP_S:
        log.warning("%s took %.1f s", what or f"stopping {len(procs)} processes", took)


def with_descendants(procs: Sequence[psutil.Process]) -> list[psutil.Process]:
    found = {p.pid: p for p in procs}
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            found.update((c.pid, c) for c in proc.children(recursive=True))
    return list(found.values())


def kill(procs: Sequence[psutil.Process]) -> None:
    """SIGKILL each process, everything it started, and the process group it leads (a
    runtime's JVM and Python workers); wait up to ``KILL_WAIT_S`` until all are gone."""
    targets = with_descendants(procs)
    _send(targets, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
    alive = wait_exited(targets, timeout=KILL_WAIT_S)
    if alive:
        raise RuntimeError(
            f"processes survived SIGKILL for {KILL_WAIT_S:.0f} s: {[p.pid for p in alive]}"
        )
    _collect(targets)


def stop_server(env_id: str, server: str, *, hard: bool, grace: float = 10.0) -> None:
    procs = marked(env_id, server)
    if hard:
        kill(procs)
    else:
        terminate(procs, grace=grace, what=f"stopping {server}")


def reap(env_id: str, *, grace: float = 5.0) -> list[int]:
    """Stop every process of an environment; returns their PIDs."""
    procs = marked(env_id)
    terminate(procs, grace=grace, what=f"stopping environment {env_id}")
    return [p.pid for p in procs]


def alive(pid: int | None, create_time: float | None) -> bool:
    if pid is None or create_time is None:
        return False
    return ProcessHandle(pid, create_time).alive()


def reap_exited_children() -> None:
    """Collect the exit status of children that died on their own (a crashed server)."""
    for pid, child in list(_children.items()):
        code = child.poll()
        if code is not None:
            del _children[pid]
            _reaped[pid] = code


def exit_code(handle: ProcessHandle) -> int | None:
    """The exit status of a child of this process that is no longer alive (negative: killed by
    that signal); None when it still runs or is not our child.

    A killed multi-threaded process shows as a zombie while its other threads are still being
    torn down, and only then can its status be collected: so this waits for it.
    """
    if handle.pid in _reaped:
        return _reaped.pop(handle.pid)
    child = _children.get(handle.pid)
    if child is None or handle.alive():
        return None
    code = child.wait(timeout=60)
    del _children[handle.pid]
    return code
