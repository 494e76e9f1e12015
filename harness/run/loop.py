"""A run's middle: the producer sends the workload while the consumers work and the nemesis
plays the fault schedule, until every lane has committed past every acknowledged record.

The loop sees its parts only through narrow interfaces (Jepsen's ``core.clj`` run loop, with
its noop client and nemesis, is the model): a lane is its history, read as it grows; the
producer says how many records were acknowledged and when it is done; a supervisor is checked;
the nemesis ticks. So ``tests/test_run_loop.py`` drives it with histories it writes itself,
and no server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.errors import LabError
from harness.history.events import (
    EventKind,
    HistoryEvent,
    HistoryTail,
    HistoryWriter,
    connector_subject,
)
from harness.readiness import DeadlineExceeded, GaveUp, NotReady, wait_for
from harness.workload.producer import ProduceSummary, Reserve

Progress = Callable[[str], None]
# A wait's progress line from the lanes' watches and, once the writer is done, what they wait for
Report = Callable[[Sequence["Watch"], dict[int, int] | None], str]
log = logging.getLogger(__name__)
POLL_S = 0.1  # how often the loop looks at the histories, the producer and the consumers
PROGRESS_S = 10.0  # how often a wait says how far the lanes are


@dataclass
class Pace:
    """Whether a progress line is due: once every ``seconds``, counted from the wait's start."""

    seconds: float = PROGRESS_S
    last: float = field(default_factory=time.monotonic)

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last <= self.seconds:
            return False
        self.last = now
        return True


class RunTimeout(LabError):
    pass


class Stopped(LabError):
    """The run was asked to stop (Ctrl-C while scenarios ran side by side): what it started
    is stopped on the way out."""


class Producing(Protocol):
    @property
    def acked(self) -> int: ...  # records acknowledged so far

    @property
    def summary(self) -> ProduceSummary | None: ...

    def done(self) -> bool: ...  # raises if the producer failed


class Checked(Protocol):
    """Consumer processes: ``check`` restarts the ones that died, as the scenario says."""

    def check(self) -> None: ...


class Ticking(Protocol):
    """The nemesis."""

    @property
    def busy(self) -> bool: ...  # a fault has started and has steps left

    @property
    def settling(self) -> bool: ...  # a fault ended, and what it set off may be under way

    @property
    def awaiting(self) -> str: ...  # the faults that wait for another's window to end

    def under_way(self) -> str: ...  # the faults under way and the step each is at

    def tick(
        self,
        elapsed: float | None,
        acked: int,
        *,
        produced_all: bool = False,
        started: float | None = None,
    ) -> None: ...


@dataclass
class Watch:
    """One lane as the loop sees it: its history as it grows, and what its consumers committed."""

    label: str  # the variant's
    tail: HistoryTail
    history: HistoryWriter  # the harness's own writer in the lane's history (CAUGHT_UP)
    logs: Path  # where to look when it does not catch up
    ready_on: EventKind  # what its consumers write once they can consume (``Runtime.ready``)
    committed: dict[int, int] = field(default_factory=dict)  # partition -> next offset
    # Its consumers wrote records. Not merely handled a batch, nor wrote an empty one: a Spark
    # runtime's first batch of records is slow to write on its executors (Kafka consumers and
    # Python workers starting), and commit-failure-window's window, started at a BATCH event
    # or at Spark's empty first batch, closed before spark/naive's first commit - a fault that
    # hit nothing (docs/faults.md).
    running: bool = False
    ready: bool = False  # its consumers wrote ``ready_on``
    finished: bool = False  # committed past every acknowledged record
    failed: str = ""  # why its pipeline stopped for good: it is not waited for
    # Its connector's and each task's last state, as Connect's REST said it (a Connect lane): a
    # lane that does not catch up may be waiting on Connect (tasks UNASSIGNED for its scheduled
    # rebalance), which its committed offsets alone do not say.
    states: dict[str, str] = field(default_factory=dict)  # "connector", "task N" -> its detail

    def read(self) -> None:
        for event in self.tail.new_events():
            if event.kind is self.ready_on:
                self.ready = True
            if wrote_records(event):
                self.running = True
            if event.kind is EventKind.FAILED_FOR_GOOD:
                self.failed = event.detail
            if event.kind is EventKind.CONNECTOR_STATE:  # "task 0 RUNNING on ...", "connector ..."
                self.states[connector_subject(event.detail)] = event.detail
            # Committed: as a consumer said (COMMIT), or as the lab saw a black box's group.
            if event.kind in (EventKind.COMMIT, EventKind.COMMITTED):
                for p, offset in event.offsets.items():
                    self.committed[p] = max(self.committed.get(p, 0), offset)

    def caught_up(self, targets: dict[int, int] | None) -> bool:
        if self.failed:
            return True  # nothing more will come of it
        return targets is not None and all(
            self.committed.get(p, 0) >= end for p, end in targets.items()
        )


def wrote_records(event: HistoryEvent) -> bool:
    """Whether ``event`` says a lane's consumers wrote records: a batch written with records
    in it (a user's Spark job does not say how many: any of its batches), or poison records
    dead-lettered (a batch handled end to end, only none of it for the sink)."""
    if event.kind is EventKind.WRITTEN:
        return event.count is None or event.count > 0
    if event.kind is EventKind.SINK_COUNT:  # a black box's documents, as the lab saw them
        return bool(event.count)
    return event.kind is EventKind.DEAD_LETTER and bool(event.count)


def await_ready(
    watches: Sequence[Watch],
    supervisors: Sequence[Checked],
    *,
    what: str,
    timeout: float,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Until every lane's consumers are ready (``Watch.ready``), restarting consumers that die
    meanwhile; at each ``Pace``, ``progress`` hears which lanes it waits for. Spark drivers
    starting at once take minutes on a busy small machine (docs/performance.md), so
    ``timeout`` is the run's own, for a consumer that never gets there: ``RunTimeout`` names
    each lane not ready and where its logs are."""

    failed: list[LabError] = []  # a consumer that keeps failing ends the wait, named
    started, pace = time.monotonic(), Pace()

    def every_one_ready() -> None:
        for supervisor in supervisors:
            try:
                supervisor.check()
            except LabError as exc:
                failed.append(exc)
                raise
        for watch in watches:
            watch.read()
        waiting = [w.label for w in watches if not w.ready]
        if waiting:
            if progress is not None and pace.due():
                progress(
                    f"    {len(watches) - len(waiting)} of {len(watches)} lanes ready after "
                    f"{time.monotonic() - started:.0f} s; waiting for {', '.join(waiting)}"
                )
            raise NotReady(f"not ready yet: {', '.join(waiting)}")

    def stopped() -> str | None:
        if failed:
            return "a consumer failed"
        return "asked to stop" if stop is not None and stop.is_set() else None

    try:
        wait_for(every_one_ready, what=what, timeout=timeout, abort=stopped)
    except GaveUp as exc:
        if failed:
            raise failed[0] from None
        raise Stopped(str(exc)) from None
    except DeadlineExceeded:
        raise RunTimeout(
            f"{what} not ready within {timeout:.0f}s: "
            + "; ".join(f"{w.label} (see {w.logs})" for w in watches if not w.ready)
        ) from None


def wait_until_consumed(
    watches: Sequence[Watch],
    supervisors: Sequence[Checked],
    producer: Producing,
    nemesis: Ticking,
    end_offsets: Callable[[], dict[int, int]],
    timeout: float,
    progress: Progress,
    report: Report | None = None,
    stop: threading.Event | None = None,
    running: threading.Event | None = None,
    reserve: Reserve | None = None,
) -> ProduceSummary:
    """Until every lane's consumers committed past every acknowledged record (``end_offsets``,
    asked once the producer is done) and the fault schedule has played out, restarting
    consumers that crash; returns the producer's summary. The fault schedule's clock starts
    once every lane's consumers wrote a batch; ``running`` is set then (a workload held back
    until then goes on: ``harness.workload.producer.Hold``); a ``reserve`` flows while no
    fault that follows another's window waits for it, and the lanes' histories say when it is
    held. At each ``Pace``, ``report`` says how far the lanes are (by default: what each
    committed of the target). ``stop`` set ends it (``Stopped``)."""
    deadline = time.monotonic() + timeout
    targets: dict[int, int] | None = None
    pace = Pace()
    clock: float | None = None
    started: float | None = None
    held = False
    while True:
        if clock is None and all(w.running or w.failed for w in watches):
            # The wall time first: the schedule's start in the history is then never after
            # the clock's zero, and no fault's start looks earlier than its planned second.
            started, clock = time.time(), time.monotonic()
            if running is not None:
                running.set()
        nemesis.tick(
            None if clock is None else time.monotonic() - clock,
            producer.acked,
            produced_all=targets is not None,
            started=started,
        )
        if reserve is not None:
            held = reserve_held(reserve, nemesis, producer, watches, held)
        for supervisor in supervisors:
            supervisor.check()
        for watch in watches:
            watch.read()
        if targets is None and producer.done():
            targets = end_offsets()
        behind = [w for w in watches if not w.caught_up(targets)]
        for watch in watches:
            if watch not in behind and not watch.finished:
                watch.finished = True
                if not watch.failed:
                    watch.history.record(EventKind.CAUGHT_UP)
        # Once the work is done, a fault that has not started would hit nothing: it is not
        # started (it did not fire; the result says so). One under way plays out, and its
        # aftermath (a thawed consumer's stale write).
        if not behind and not nemesis.busy and not nemesis.settling:
            assert producer.summary is not None
            return producer.summary
        if stop is not None and stop.is_set():
            raise Stopped("the run was asked to stop")
        now = time.monotonic()
        if now > deadline:
            if not behind:
                raise RunTimeout(
                    f"every lane caught up, but a fault was still under way after "
                    f"{timeout:.0f}s: {nemesis.under_way()}"
                )
            raise RunTimeout(
                f"consumers did not catch up within {timeout:.0f}s: "
                + "; ".join(
                    f"{w.label} committed {w.committed} of {targets}"
                    + "".join(f", {s}" for s in w.states.values() if " RUNNING" not in s)
                    + f" (see {w.logs})"
                    for w in behind
                )
            )
        if pace.due():
            progress(
                report(watches, targets) if report else _committed(watches, targets, producer.acked)
            )
        time.sleep(POLL_S)


def reserve_held(
    reserve: Reserve, nemesis: Ticking, producer: Producing, watches: Sequence[Watch], held: bool
) -> bool:
    """Lets the reserve flow or not, as the nemesis stands; whether the producer is held at it
    now, each change in every lane's history."""
    waits = nemesis.awaiting
    (reserve.flowing.clear if waits else reserve.flowing.set)()
    now = bool(waits) and producer.acked >= reserve.start and not producer.done()
    if now != held:
        detail = (
            f"the lab holds the workload at record {producer.acked:,}: {waits}"
            if now
            else "the lab lets the workload go on"
        )
        for watch in watches:
            watch.history.record(EventKind.WORKLOAD_HELD, detail=detail)
    return now


def _committed(watches: Sequence[Watch], targets: dict[int, int] | None, acked: int) -> str:
    """What each lane committed, of the topic's end once the producer is done, else of what it
    has had acknowledged so far."""
    goal = f"of {sum(targets.values())}" if targets else f"({acked} produced so far)"
    done = ", ".join(f"{w.label} {sum(w.committed.values())}" for w in watches)
    return f"    committed {goal}: {done}"


class ProducerThread:
    """The producer runs beside the consumers, as it would in production. Where what it wrote
    reaches the topic through a process of the source's (Debezium, an outbox's relay), it is
    done once that says so too (``delivered``)."""

    def __init__(
        self,
        body: Callable[[threading.Event, Callable[[int], None]], ProduceSummary],
        delivered: Callable[[], bool] | None = None,
    ) -> None:
        self._stop = threading.Event()
        self._body = body
        self._delivered = delivered
        self.summary: ProduceSummary | None = None
        self.error: BaseException | None = None
        self.acked = 0  # written by the producer thread, read by the run's loop
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def _run(self) -> None:
        def count(acked: int) -> None:
            self.acked = acked

        try:
            self.summary = self._body(self._stop, count)
        except BaseException as exc:
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def done(self) -> bool:
        if self.error is not None:
            raise LabError(f"the producer failed: {self.error}") from self.error
        return self.summary is not None and (self._delivered is None or self._delivered())

    def stop(self, timeout: float = 60.0) -> None:
        """Ask the producer to stop, and wait for it up to ``timeout`` seconds (it flushes what
        it has in flight); a thread cannot be killed, so a producer stuck past that is logged
        and left to die with the process (it is a daemon thread)."""
        self._stop.set()
        if self._thread.ident is None:  # never started: a consumer failed to start first
            return
        self._thread.join(timeout=timeout)
        if self._thread.is_alive():
            log.warning("the producer did not stop within %.0f s; leaving it behind", timeout)
