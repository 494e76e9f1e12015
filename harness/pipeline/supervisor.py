"""Runs a runtime's consumer processes for the harness, and restarts the ones that crash.

A consumer killed at a crash point (SIGKILL) is started again after ``restart_delay``, as an
orchestrator would restart a pod. A consumer that fails on its own (an exception) is restarted
too, but a few failures in a row stop the run with the end of its log: that is a bug to read,
not a fault to measure.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.environment import process as proc
from harness.environment.base import Environment, tail
from harness.errors import LabError
from harness.history.events import KILLED, EventKind, HistoryWriter
from harness.pipeline.command import environment
from harness.pipeline.connect import settings as connect
from harness.pipeline.observer import ERROR_LINE, Observer
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.runtimes import Runtime, get_runtime
from harness.pipeline.variants import make_variant
from harness.pipeline.variants.base import Place
from harness.pipeline.variants.connect import Connect

MAX_FAILURES_IN_A_ROW = 3


class RuntimeFailed(LabError):
    pass


@dataclass
class _Consumer:
    index: int
    name: str
    log: Path
    handle: proc.ProcessHandle | None = None
    restart_at: float | None = None
    starts: int = 0
    failures_in_a_row: int = 0
    stopped_since: float | None = None
    stopping: bool = False  # sent SIGTERM by a fault: its exit is the lab's doing


@dataclass(frozen=True)
class Lane:
    """What a supervised process runs for one variant: its configuration and its history."""

    config: RuntimeConfig
    config_path: Path
    history: HistoryWriter


class RuntimeSupervisor:
    """The consumer processes of one or more variants.

    A runtime with a process per consumer (the listener) gives its variant ``consumers``
    processes of its own. Otherwise (Spark) a variant gets one driver - or, given several lanes,
    one driver runs a query per variant (when no fault targets a single consumer process,
    sharing a JVM spares a driver's start-up CPU per variant: docs/performance.md).
    """

    def __init__(
        self,
        env: Environment,
        lanes: list[Lane],
        *,
        consumers: int,
        restart_delay: float,
        log_dir: Path,
        runtime: Runtime | None = None,  # default: the registered runtime the lanes name
    ) -> None:
        self.env = env
        self.lanes = lanes
        self.restart_delay = restart_delay
        self.runtime = runtime = runtime or get_runtime(lanes[0].config.runtime)
        if runtime.process_per_consumer and len(lanes) != 1 and not runtime.connect:
            raise ValueError(f"a {runtime.name} process serves one variant")
        count = consumers if runtime.process_per_consumer else 1
        # A Connect cluster's workers are Connect's, whoever runs them: ConnectSettings.log.
        name = "connect" if runtime.connect else runtime.name
        self.consumers = [
            _Consumer(i, f"{name}-{i}", log_dir / f"{name}-{i}.log") for i in range(count)
        ]
        self.crashes = 0
        pauses = [p.pause_s for lane in lanes for p in lane.config.crash_plans if p.pause_s]
        self.pause_s = max(pauses, default=0.0)
        self.frozen: set[int] = set()  # consumers a fault holds stopped: not thawed here
        # A black box is watched from outside while it runs (its own history says nothing);
        # the connectors of a Connect cluster each by their own lane's observer.
        self.observers = [self._observer(lane) for lane in lanes] if runtime.black_box else []

    @property
    def config(self) -> RuntimeConfig:
        return self.lanes[0].config

    def _observer(self, lane: Lane) -> Observer:
        variant = make_variant(lane.config.variant, lane.config.variant_options)
        config = lane.config
        place = Place(config.connect, config.group, config.topic, config.mongo_uri, config.database)
        return Observer(
            bootstrap=self.env.kafka_bootstrap,
            mongo_uri=self.env.mongo_uri,
            config=lane.config,
            landing=variant.landing(),
            label=lane.history.variant,
            logs=[c.log for c in self.consumers],
            job=variant.cluster_job(place),
            lines=connect.log_lines(config.group) if self.runtime.connect else ERROR_LINE,
            # A Connect lane's members are its connector's tasks, not the workers started here:
            # ready once every task is in - Connect restarts the tasks as each connector's task
            # configs land, and a worker killed while its tasks rejoined held no partition.
            instances=(
                variant.tasks
                if isinstance(variant, Connect)
                else None
                if self.runtime.connect
                else len(self.consumers)
            ),
        )

    def _record(self, kind: EventKind, detail: str) -> None:
        for lane in self.lanes:
            lane.history.record(kind, detail=detail)

    def _argv(self, consumer: _Consumer) -> list[str]:
        if not self.runtime.module:  # a command consumer: the user's program
            return list(self.config.command)
        module = self.runtime.module
        paths = [str(lane.config_path) for lane in self.lanes]
        if self.runtime.process_per_consumer:
            return [sys.executable, "-m", module, *paths, str(consumer.index)]
        return [sys.executable, "-m", module, *paths]

    def _process_name(self, consumer: _Consumer) -> str:
        return f"runtime-{self.config.group}-{consumer.name}"

    def client_names(self) -> list[str]:
        """The names its consumers were started under (``Environment.spawn_client``)."""
        return [self._process_name(c) for c in self.consumers]

    def _reads(self) -> list[Path]:
        """Folders its processes read that their arguments do not name: a Connect cluster's
        plugin folders (a container is given them)."""
        if not self.config.connect:
            return []
        return [Path(p) for p in connect.ConnectSettings.from_json(self.config.connect).plugins]

    def _start(self, consumer: _Consumer) -> None:
        config, black_box = self.config, self.runtime.black_box
        try:
            consumer.handle = self.env.spawn_client(
                self._argv(consumer),
                name=self._process_name(consumer),
                log_path=consumer.log,
                extra_env=environment(config, consumer.index) if black_box else None,
                cwd=Path(config.cwd) if config.cwd else None,
                image=config.image,
                reads=self._reads(),
            )
        except OSError as exc:  # a command that is not there, or not a program
            raise RuntimeFailed(
                f"{consumer.name} could not start {' '.join(self._argv(consumer))!r} "
                f"in {config.cwd or Path.cwd()}: {exc}"
            ) from None
        consumer.starts += 1
        consumer.restart_at = None
        if black_box:  # a program of the lab's own says so itself
            self._record(EventKind.RUNTIME_START, f"{consumer.name} pid {consumer.handle.pid}")

    def start(self) -> None:
        for consumer in self.consumers:
            self._start(consumer)
        for observer in self.observers:
            observer.start()

    def _aimed(self, index: int | None) -> list[_Consumer]:
        return [c for c in self.consumers if index is None or c.index == index]

    def freeze(self, index: int | None = None) -> list[str]:
        """SIGSTOP a consumer (or all) until ``thaw``: a fault's pause, from outside. The names
        of those it reached: one that is down has no process to stop."""
        reached = []
        for c in self._aimed(index):
            self.frozen.add(c.index)
            if self.env.signal_client(self._process_name(c), signal.SIGSTOP):
                reached.append(c.name)
        return reached

    def thaw(self) -> None:
        for c in self.consumers:
            if c.index in self.frozen:
                self.env.signal_client(self._process_name(c), signal.SIGCONT)
        self.frozen.clear()

    @property
    def restarts(self) -> int:
        return sum(max(c.starts - 1, 0) for c in self.consumers)

    def kill(self, index: int | None = None) -> list[str]:
        """SIGKILL a consumer (or all) with everything it started; ``check`` restarts it. The
        names of those it reached: one that is down (not started again yet) has no process."""
        return [
            c.name
            for c in self._aimed(index)
            if self.env.signal_client(self._process_name(c), signal.SIGKILL)
        ]

    def down(self, index: int | None = None) -> dict[str, float | None]:
        """The consumers aimed at (``index``, or all) that are not running now, by name, each
        with when ``check`` starts it again (``time.monotonic``; None: never - it is not
        supervised any more)."""
        now = time.monotonic()
        found: dict[str, float | None] = {}
        for c in self._aimed(index):
            if c.handle is None:
                found[c.name] = c.restart_at
            elif not c.handle.alive():  # ended, and ``check`` has not seen it yet
                found[c.name] = now + self.restart_delay
        return found

    def stop_cleanly(self, index: int) -> list[str]:
        """SIGTERM consumer ``index``: its own shutdown runs (a JVM's hooks: a Connect worker
        stops its tasks and commits their offsets); ``check`` restarts it. The names of those
        it reached: one that is down is not stopping, and its next exit is not a clean stop."""
        reached = []
        for c in self._aimed(index):
            if self.env.signal_client(self._process_name(c), signal.SIGTERM):
                c.stopping = True
                reached.append(c.name)
        return reached

    def handle(self, index: int) -> proc.ProcessHandle | None:
        """The process consumer ``index`` runs now (None while it is down): a fault that
        stopped it sees it gone when this one is no longer alive, however soon it restarts."""
        return next((c.handle for c in self._aimed(index)), None)

    def _thaw_paused(self, c: _Consumer, now: float) -> None:
        """A consumer that froze itself at a pause point is thawed after its pause."""
        if c.index in self.frozen:
            return  # a fault froze it, and thaws it
        proc_ = c.handle.process() if c.handle is not None else None
        try:
            stopped = proc_ is not None and proc_.status() == psutil.STATUS_STOPPED
        except psutil.NoSuchProcess:
            stopped = False
        if not stopped:
            c.stopped_since = None
            return
        if c.stopped_since is None:
            c.stopped_since = now
        elif now - c.stopped_since >= self.pause_s:
            self.env.signal_client(self._process_name(c), signal.SIGCONT)
            self._record(EventKind.RESUMED, f"{c.name} after {self.pause_s:g}s")
            c.stopped_since = None

    def check(self) -> None:
        """Notice consumers that ended and restart them when their delay has passed."""
        now = time.monotonic()
        for c in self.consumers:
            self._thaw_paused(c, now)
            if c.handle is not None and not c.handle.alive():
                code = self.env.client_exit_code(self._process_name(c), c.handle)
                c.handle = None
                c.restart_at = now + self.restart_delay
                if c.stopping:
                    c.stopping, c.failures_in_a_row = False, 0
                    how = f"stopped cleanly (SIGTERM; exit status {code})"
                elif code == -signal.SIGKILL:
                    self.crashes += 1
                    c.failures_in_a_row = 0
                    how = KILLED
                else:
                    c.failures_in_a_row += 1
                    how = f"exited with status {code}"
                self._record(EventKind.RUNTIME_EXIT, f"{c.name} {how}")
                if c.failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
                    raise RuntimeFailed(
                        f"{c.name} failed {c.failures_in_a_row} times in a row; last lines of "
                        f"{c.log}:\n{tail(c.log, 30)}"
                    )
            if c.handle is None and c.restart_at is not None and now >= c.restart_at:
                self._start(c)

    def processes(self) -> list[psutil.Process]:
        handles = [c.handle for c in self.consumers if c.handle is not None]
        return [p for h in handles if (p := h.process()) is not None]

    def forget(self) -> None:
        for c in self.consumers:
            c.handle = None
            c.restart_at = None

    def stop_observing(self) -> None:
        for observer in self.observers:
            observer.stop()


def stop_all(supervisors: list[RuntimeSupervisor], grace: float = 20.0) -> None:
    """Ask every consumer to finish its batch and stop, all at once; SIGKILL after ``grace``."""
    processes = [p for s in supervisors for p in s.processes()]
    for s in supervisors:
        s.thaw()  # a frozen process cannot hear SIGTERM
    proc.terminate(processes, grace=grace, what="stopping the consumers")
    for s in supervisors:
        s.forget()
        s.stop_observing()
