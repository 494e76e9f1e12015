"""The nemesis: plays a fault schedule against the environment and the consumers of a run.

It is driven by the run's wait loop (``tick`` every ~100 ms with the seconds since every
variant's consumers handled their first batch - so that ``at: 5`` means five seconds into the
pipeline's work whether a listener or a far slower Spark driver had to start - and the
records acknowledged so far) rather than by a thread of its own, so a fault and
the supervision of the consumers never race. Every window is recorded in each variant's history
as FAULT_START / FAULT_END (source ``nemesis``), and only there: the checker and the report
derive the windows from it (``harness.history.windows.fault_windows``); ``restore`` undoes
whatever is still in force. The nemesis only dispatches: what a step does is its fault family's
business (``Fault.actor``; ``harness.faults.families``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.environment.base import Environment
from harness.faults.base import END, START, Actor, Context, FaultStuck, Step, Target
from harness.faults.schedule import FaultPlan
from harness.history.events import EventKind
from harness.readiness import DeadlineExceeded, NotReady, wait_for

CHECK_EVERY_S = 0.5  # how often a waiting step asks the cluster (a Metadata request or so)
# A node not gone, or not back, by then is a broken environment; a wait with a deadline of its
# own (``Actor.waits_until``) is given until then instead, if that is later.
WAIT_TIMEOUT_S = 240.0
# How long the end of a run waits for what the faults started again: a broker starts in seconds
# on an idle machine, in a minute or more under a suite's load.
SETTLE_TIMEOUT_S = 120.0


@dataclass
class _Progress:
    plan: FaultPlan
    actor: Actor
    next_step: int = 0
    last_fired: float | None = None  # monotonic time of the previous step
    reached_at: float | None = None  # when an at_event step's record count was reached
    checked_at: float = 0.0  # when a waiting step last asked the cluster
    waiting_since: float | None = None


@dataclass
class Nemesis:
    env: Environment
    schedule: Sequence[FaultPlan]
    targets: Sequence[Target]
    topic: str = ""  # the run's topic (leader-of picks among its partitions)
    sources: Sequence[Target] = ()  # the source's processes (``Context.sources``)
    database: str = ""  # a CDC source's database (``Context.database``)
    _context: Context = field(init=False)
    _progress: list[_Progress] = field(init=False)
    _opened: set[str] = field(default_factory=set, init=False)  # windows not ended yet
    _clock_started: bool = field(default=False, init=False)
    _ended: dict[str, float] = field(default_factory=dict, init=False)  # monotonic, by fault

    def __post_init__(self) -> None:
        self._context = Context(self.env, self.targets, self.topic, self.sources, self.database)
        self._progress = [
            _Progress(p, p.fault.actor(self._context)) for p in self.schedule if p.steps
        ]

    @property
    def done(self) -> bool:
        return all(p.next_step >= len(p.plan.steps) for p in self._progress)

    @property
    def busy(self) -> bool:
        """A fault has started and has steps left to take."""
        return any(0 < p.next_step < len(p.plan.steps) for p in self._progress)

    @property
    def awaiting(self) -> str:
        """The faults that start once another's window has ended, not started, whose window
        is under way: ``gc pause waits for managed upgrade's end`` (empty: none). Not one whose
        window has not started: that one may wait for records a held workload would never
        send."""
        return "; ".join(
            f"{p.plan.name} waits for {p.plan.steps[0].following}'s end"
            for p in self._progress
            if p.next_step == 0 and p.plan.steps[0].following in self._opened
        )

    @property
    def settling(self) -> bool:
        """A fault's window ended less than its ``aftermath_s`` ago."""
        now = time.monotonic()
        return any(
            now - self._ended[p.name] < p.fault.aftermath_s
            for p in self.schedule
            if p.name in self._ended
        )

    def under_way(self) -> str:
        """``rolling restart at await-broker-stopped (node 3)``, for each fault under way."""
        return "; ".join(
            f"{p.plan.name} at {p.plan.steps[p.next_step].action}"
            + (f" ({p.actor.about})" if p.actor.about else "")
            for p in self._progress
            if 0 < p.next_step < len(p.plan.steps)
        )

    def tick(
        self,
        elapsed: float | None,
        acked: int,
        *,
        produced_all: bool = False,
        started: float | None = None,
    ) -> None:
        """Take every step that is due: ``elapsed`` seconds since the consumers started (None
        until they have), ``acked`` records acknowledged; once the workload is ``produced_all``,
        a step waiting for a record count the workload never reached (``--events`` made it
        smaller than the scenario's bursts) is due at once. Never blocks on the cluster: a
        step that waits for it asks again at the next tick. ``started``: the wall time the
        clock started, which the history's schedule start is (by default, now less
        ``elapsed``)."""
        if elapsed is not None and not self._clock_started:
            self._clock_started = True
            zero = time.time() - elapsed if started is None else started
            for target in self.targets:
                target.history.append(EventKind.SCHEDULE_START, t=zero)
        for progress in self._progress:
            steps = progress.plan.steps
            while progress.next_step < len(steps):
                step = steps[progress.next_step]
                if not self._due(progress, step, elapsed, acked, produced_all):
                    break
                self._take(progress, step)
                progress.last_fired = time.monotonic()
                progress.waiting_since = None
                progress.next_step += 1

    def _due(
        self,
        progress: _Progress,
        step: Step,
        elapsed: float | None,
        acked: int,
        produced_all: bool,
    ) -> bool:
        now = time.monotonic()
        if step.at is not None and step.following:
            ended = self._ended.get(step.following)
            return ended is not None and now - ended >= step.at
        if step.at is not None:
            return elapsed is not None and elapsed >= step.at
        if step.at_event is not None:
            if acked < step.at_event:
                return produced_all
            # A start at a record count may carry a jitter: wait it out from the moment the
            # count was reached.
            if progress.reached_at is None:
                progress.reached_at = now
            return now - progress.reached_at >= step.after
        if progress.last_fired is None or now - progress.last_fired < step.after:
            return False
        if not step.waits:
            return True
        if progress.waiting_since is None:
            progress.waiting_since = now
        if now - progress.checked_at < CHECK_EVERY_S:
            return False
        progress.checked_at = now
        if progress.actor.holds(step):
            return True
        stuck = max(progress.waiting_since + WAIT_TIMEOUT_S, progress.actor.waits_until(step) or 0)
        if now > stuck:
            about = f" for {progress.actor.about}" if progress.actor.about else ""
            raise FaultStuck(
                f"{progress.plan.name}: {step.action}{about} did not come true within "
                f"{now - progress.waiting_since:.0f}s (see the servers' logs in "
                f"{self.env.directory}/logs)"
            )
        return False

    # -- actions --------------------------------------------------------------------------------

    def _take(self, progress: _Progress, step: Step) -> None:
        fault = progress.plan.fault
        if step.action == START:
            self._opened.add(fault.name)
            self._context.record(EventKind.FAULT_START, fault)
        elif step.action == END:
            self._opened.discard(fault.name)
            self._ended[fault.name] = time.monotonic()
            self._context.record(EventKind.FAULT_END, fault)
        else:
            progress.actor.take(step)

    def restore(self) -> None:
        """Undo every fault still in force (the run ended, or failed, inside a window): each
        actor lifts its rules and failpoints, thaws the nodes it paused and starts the ones it
        stopped (not waiting for them); every window still open is closed in the history."""
        for progress in self._progress:
            progress.actor.undo()
        faults = {p.name: p.fault for p in self.schedule}
        for name in sorted(self._opened):
            self._context.record(EventKind.FAULT_END, faults[name])
        self._opened.clear()

    def settle(self, timeout: float = SETTLE_TIMEOUT_S) -> list[str]:
        """Wait until what the faults started again is back - a broker a kill restarted, still
        starting when the run's stream was done: the next run on the environment (explore's, a
        matrix's, a repeat's) starts on a whole cluster, not one that refuses its topic's
        replicas (INVALID_REPLICATION_FACTOR). What is still not back at the deadline."""

        def back() -> None:
            if left := [what for p in self._progress for what in p.actor.unsettled()]:
                raise NotReady(", ".join(left))

        try:
            wait_for(back, what="what the faults started again", timeout=timeout)
        except DeadlineExceeded:
            return [what for p in self._progress for what in p.actor.unsettled()]
        return []
