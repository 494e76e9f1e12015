"""What goes on the timeline, in seconds since the run started: pure functions of the records.

* fault windows - a FAULT_START .. FAULT_END pair of the same fault (by name), from the
  history only (``harness.history.windows.fault_windows``); a start that never ended lasts to the
  variant's end;
* consumer deaths - CRASH events (a crash point fired) and consumer exits the supervisor saw
  that no crash point explains; restarts - a consumer's RUNTIME_START after its first;
* anomalies - each at the time the checker gives it (a duplicate copy when it was written, a
  lost change when it was acked, a stale order at its last ack), in the fault window the
  checker named or, failing that, the first window of the history containing it (an outbox
  relay's row: its published stage's, where the relay made them);
* throughput - records written per second (WRITTEN counts; a command consumer's: its sink's
  document count as the lab polled it) and acked per second (ledger);
* a command consumer's error lines, as the lab read them from its output;
* errors the lab made a server answer with (harness.history.origin: the fault proxy's error
  code, a failCommand failpoint's) apart from the servers' and clients' own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from harness.checker.model import Verdict
from harness.faults.kinds import injects
from harness.history.events import EventKind, HistoryEvent
from harness.history.origin import Origin, origins
from harness.history.windows import FaultWindow, fault_windows
from harness.results.model import ScenarioResult, VariantResult

KINDS = ("duplicate", "lost", "stale")
# A supervisor's "killed by SIGKILL" this soon after a CRASH event is that crash, not another.
SAME_DEATH_S = 5.0
# A stretch this long with no batch in hand is shown (and told) as the consumers idling.
IDLE_S = 3.0
# Compared by value: pause points are newer than some histories a report may be asked to read.
PAUSED, RESUMED = "paused", "resumed"


@dataclass(frozen=True)
class Death:
    """A consumer process that died, in seconds since the run started."""

    t: float
    consumer: str  # e.g. listener-0, spark
    how: str  # the crash point that fired, or how the process ended
    planned: bool  # True when a crash point fired (a CRASH event)
    batch: int | None = None


@dataclass(frozen=True)
class Restart:
    t: float
    consumer: str
    next_batch: float | None = None  # its first batch after the restart, if any


@dataclass(frozen=True)
class Pause:
    """A consumer that froze itself at a point until the supervisor thawed it."""

    consumer: str
    start: float
    end: float | None  # None: never resumed
    point: str


@dataclass(frozen=True)
class Step:
    """An instant inside a fault window: a Kafka node taken down by a (rolling) restart."""

    t: float
    fault: str
    number: int  # 1-based, e.g. the rotation
    what: str = ""  # e.g. "node 2 SIGTERM"


@dataclass(frozen=True)
class BrokerError:
    """A broker's error answer to a consumer's group request (coordinator moves)."""

    t: float
    consumer: str
    error: str  # e.g. "NOT_COORDINATOR OffsetCommit"


@dataclass(frozen=True)
class LogLine:
    """A line a command consumer logged that reads as an error (the lab read it as it ran)."""

    t: float
    line: str


@dataclass(frozen=True)
class Mark:
    """One anomaly on the timeline."""

    kind: str  # duplicate | lost | stale
    t: float  # seconds since the run started
    window: str | None  # the fault window it fell in


@dataclass(frozen=True)
class TimelineRow:
    label: str  # runtime/variant
    group: str  # variants with one group ran side by side over one topic
    span: tuple[float, float] | None  # the variant's run, start to end
    windows: tuple[FaultWindow, ...]
    anomalies: tuple[Mark, ...]
    deaths: tuple[Death, ...]
    losses: tuple[Death, ...]  # Spark executors lost (their tasks retried; the driver lived)
    restarts: tuple[Restart, ...]
    pauses: tuple[Pause, ...]
    steps: tuple[Step, ...]
    idle: tuple[tuple[float, float], ...]  # stretches in which no batch was in hand
    broker_errors: tuple[BrokerError, ...]
    commit_failures: tuple[float, ...]  # when a consumer heard that its commit failed
    history_lost: tuple[float, ...]  # when a relay found its resume point gone from the oplog
    counts: dict[str, int]  # duplicate/lost/stale as the checker counted them (all of them)
    logged: tuple[LogLine, ...] = ()
    # Errors the lab made a server answer with, as the clients reported them (emulated): not in
    # broker_errors, commit_failures or logged, which are the systems' own.
    injected: tuple[BrokerError, ...] = ()
    # What the MongoDB driver saw: commands a server failed (its own answers, not the lab's),
    # and operations it retried and got answered.
    mongo_errors: tuple[BrokerError, ...] = ()
    retried: tuple[float, ...] = ()
    # A Spark query that stopped with an error (its words) and was started again; and the
    # pipeline's end for good, if it came (the rest of the run went on without it).
    query_failures: tuple[BrokerError, ...] = ()
    stopped: BrokerError | None = None
    # A current-state sink's rows that went back (a replayed older change over a newer one).
    went_back: tuple[BrokerError, ...] = ()
    task_failures: tuple[BrokerError, ...] = ()  # write tasks Spark's driver lost (its log)
    # A Connect connector's or task's state, as the REST API said it when it changed.
    connector_states: tuple[BrokerError, ...] = ()
    # The lab holding its workload's last records back for a fault to come, and letting it go
    # on (the lab's doing: harness.workload.producer.Reserve).
    held: tuple[BrokerError, ...] = ()

    def times(self, kind: str) -> list[float]:
        return [m.t for m in self.anomalies if m.kind == kind]


@dataclass(frozen=True)
class Timeline:
    rows: tuple[TimelineRow, ...]  # a lane's each, in the run's order
    source: TimelineRow | None = None  # a CDC source's, drawn above its lanes

    def groups(self) -> list[tuple[str, list[TimelineRow]]]:
        """Rows by side-by-side group, in the order the groups ran (a source's first, in its
        lanes' group)."""
        grouped: dict[str, list[TimelineRow]] = {}
        for row in [self.source, *self.rows] if self.source else self.rows:
            grouped.setdefault(row.group, []).append(row)
        return list(grouped.items())


@dataclass(frozen=True)
class Series:
    """A rate over time: ``rate[i]`` records/s in [t[i], t[i] + bucket)."""

    label: str
    t: np.ndarray
    rate: np.ndarray
    bucket: float = 1.0


def origin(run: ScenarioResult) -> float:
    """The run's start in unix seconds: results.json's started_at, else the first event."""
    if run.started_at > 0:
        return run.started_at
    return min((e.t for v in run.variants for e in v.events), default=0.0)


def variant_span(events: Sequence[HistoryEvent], t0: float) -> tuple[float, float] | None:
    """RUN_START .. RUN_END of the variant (else its first .. last event)."""
    if not events:
        return None
    starts = [e.t for e in events if e.kind is EventKind.RUN_START]
    ends = [e.t for e in events if e.kind is EventKind.RUN_END]
    start = min(starts) if starts else events[0].t
    end = max(ends) if ends else events[-1].t
    return start - t0, max(end, start) - t0


def windows_of(
    events: Sequence[HistoryEvent], t0: float, end: float | None = None
) -> tuple[FaultWindow, ...]:
    """The history's fault windows in seconds since ``t0``; ``end`` (unix seconds) closes a
    window that never ended (default: the last event)."""
    return tuple(w.shifted(t0) for w in fault_windows(events, end))


def said(events: Sequence[HistoryEvent], t0: float, kind: EventKind) -> tuple[BrokerError, ...]:
    """What a server or client said, as events of ``kind``: when, who, the words."""
    return tuple(BrokerError(e.t - t0, e.source, e.detail) for e in events if e.kind is kind)


def broker_errors(events: Sequence[HistoryEvent], t0: float) -> tuple[BrokerError, ...]:
    return said(events, t0, EventKind.KAFKA_ERROR)


def fault_steps(events: Sequence[HistoryEvent], t0: float) -> tuple[Step, ...]:
    return tuple(
        Step(e.t - t0, e.fault, e.count or 0, e.detail)
        for e in events
        if e.kind is EventKind.FAULT_STEP
    )


def consumer_deaths(events: Sequence[HistoryEvent], t0: float) -> tuple[Death, ...]:
    crashes = [e for e in events if e.kind is EventKind.CRASH]
    deaths = [Death(e.t - t0, e.source, e.detail, True, e.batch) for e in crashes]
    for e in events:
        # The supervisor (source "harness") records "<consumer> <how>" for each exit it sees;
        # a consumer stopping by itself at the end of the run records "stopped".
        if e.kind is not EventKind.RUNTIME_EXIT or e.source != "harness":
            continue
        consumer, how = e.consumer, e.detail.partition(" ")[2]
        explained = any(
            _same_process(c.source, consumer) and 0 <= e.t - c.t <= SAME_DEATH_S for c in crashes
        )
        if not explained and how != "stopped":
            deaths.append(Death(e.t - t0, consumer, how or "exited", False))
    return tuple(sorted(deaths, key=lambda d: d.t))


def _same_process(source: str, consumer: str) -> bool:
    """Whether the supervisor's ``consumer`` (listener-1, spark-0) is the process that wrote as
    ``source``: a Spark driver writes as its runtime (spark), one driver per supervisor."""
    return consumer == source or consumer.rsplit("-", 1)[0] == source


def executor_losses(events: Sequence[HistoryEvent], t0: float) -> tuple[Death, ...]:
    return tuple(
        Death(e.t - t0, e.source, e.detail, True, e.batch)
        for e in events
        if e.kind is EventKind.EXECUTOR_LOST
    )


def consumer_restarts(events: Sequence[HistoryEvent], t0: float) -> tuple[Restart, ...]:
    ordered = sorted(events, key=lambda e: e.t)
    seen: set[str] = set()
    restarts = []
    for i, e in enumerate(ordered):
        if e.kind is EventKind.RUNTIME_START:
            consumer = e.consumer
            if consumer in seen:
                batch = next(
                    (
                        b.t - t0
                        for b in ordered[i + 1 :]
                        if b.kind is EventKind.BATCH and b.source == consumer
                    ),
                    None,
                )
                restarts.append(Restart(e.t - t0, consumer, batch))
            seen.add(consumer)
    return tuple(restarts)


def consumer_pauses(events: Sequence[HistoryEvent], t0: float) -> tuple[Pause, ...]:
    """PAUSED (written by the consumer) .. RESUMED (the supervisor's "<consumer> after Ns")."""
    open_at: dict[str, HistoryEvent] = {}
    pauses = []
    for e in sorted(events, key=lambda e: e.t):
        if e.kind == PAUSED:
            open_at.setdefault(e.source, e)
        elif e.kind == RESUMED:
            consumer = e.consumer  # the supervisor's: "<consumer> after Ns"
            if consumer in open_at:
                p = open_at.pop(consumer)
                pauses.append(Pause(consumer, p.t - t0, e.t - t0, p.detail))
    pauses += [Pause(c, p.t - t0, None, p.detail) for c, p in open_at.items()]
    return tuple(sorted(pauses, key=lambda p: p.start))


def idle_stretches(v: VariantResult, t0: float, at_least: float) -> list[tuple[float, float]]:
    """Stretches of at least ``at_least`` seconds, after the variant's first write, in which
    none of its consumers had a batch in hand (a slow write is not idle; a dead consumer is)."""
    in_hand: dict[str, bool] = {}
    idle_since: float | None = None
    found = []
    for e in sorted(v.events, key=lambda e: e.t):
        if e.kind is EventKind.BATCH:
            if idle_since is not None and e.t - idle_since >= at_least:
                found.append((idle_since - t0, e.t - t0))
            in_hand[e.source] = True
            idle_since = None
        elif e.kind is EventKind.WRITTEN or (
            e.kind in (EventKind.CRASH, EventKind.RUNTIME_START) and in_hand.get(e.source)
        ):
            in_hand[e.source] = False
            if not any(in_hand.values()) and idle_since is None:
                idle_since = e.t
    return found


def drawn(v: VariantResult) -> Verdict:
    """The verdict a row draws: an outbox relay's published stage (its copies at the time it
    published them, its losses when the entry was written - where the relay made them; the
    sink stores the topics after the relays are done), else the variant's own (a CDC source's
    lanes consume as the source writes: theirs is where the copies were stored)."""
    return v.relay.published if v.relay is not None and not v.relay.source else v.verdict


def anomaly_marks(v: VariantResult, windows: Sequence[FaultWindow], t0: float) -> tuple[Mark, ...]:
    marks = []
    for a in drawn(v).anomalies:
        if math.isnan(a.at):  # a copy whose writing time no one recorded: no place to draw it
            continue
        t = a.at - t0
        window = a.window or next((w.name for w in windows if w.contains(t)), None)
        marks.append(Mark(a.kind, t, window))
    return tuple(sorted(marks, key=lambda m: m.t))


def timeline_row(v: VariantResult, t0: float) -> TimelineRow:
    made = origins(v.events, injects(v.runtime))
    events = [e for e, o in zip(v.events, made, strict=True) if o is not Origin.INJECTED]
    injected = [e for e, o in zip(v.events, made, strict=True) if o is Origin.INJECTED]
    span = variant_span(v.events, t0)
    end = t0 + span[1] if span else None
    windows = windows_of(events, t0, end)
    return TimelineRow(
        label=v.label + (" (published)" if drawn(v) is not v.verdict else ""),
        group=v.group,
        span=span,
        windows=windows,
        anomalies=anomaly_marks(v, windows, t0),
        deaths=consumer_deaths(events, t0),
        losses=executor_losses(events, t0),
        restarts=consumer_restarts(events, t0),
        pauses=consumer_pauses(events, t0),
        steps=fault_steps(events, t0),
        idle=tuple(idle_stretches(v, t0, IDLE_S)),
        injected=tuple(BrokerError(e.t - t0, e.source, f"{e.kind} {e.detail}") for e in injected),
        broker_errors=broker_errors(events, t0),
        commit_failures=tuple(e.t - t0 for e in events if e.kind is EventKind.COMMIT_FAILED),
        history_lost=tuple(e.t - t0 for e in events if e.kind is EventKind.HISTORY_LOST),
        logged=tuple(
            LogLine(e.t - t0, e.detail) for e in events if e.kind is EventKind.CONSUMER_LOG
        ),
        mongo_errors=said(events, t0, EventKind.MONGO_ERROR),
        retried=tuple(e.t - t0 for e in events if e.kind is EventKind.MONGO_RETRIED),
        query_failures=said(events, t0, EventKind.QUERY_FAILED),
        task_failures=said(events, t0, EventKind.TASK_FAILED),
        connector_states=said(events, t0, EventKind.CONNECTOR_STATE),
        stopped=next(iter(said(events, t0, EventKind.FAILED_FOR_GOOD)), None),
        went_back=said(events, t0, EventKind.WENT_BACK),
        held=said(events, t0, EventKind.WORKLOAD_HELD),
        counts={
            "duplicate": drawn(v).duplicates,
            "lost": drawn(v).lost,
            "stale": drawn(v).stale,
        },
    )


def timeline(run: ScenarioResult) -> Timeline:
    t0 = origin(run)
    return Timeline(tuple(timeline_row(v, t0) for v in run.variants), source_row(run, t0))


def source_row(run: ScenarioResult, t0: float) -> TimelineRow | None:
    """A CDC source's row, above its lanes': the change topic's copies (the source's
    re-emissions, at their records' times) and losses, under the run's faults."""
    lane = next((v for v in run.variants if v.relay is not None and v.relay.source), None)
    if lane is None or lane.relay is None:
        return None
    faults = tuple(e for e in lane.events if e.source == "nemesis")  # the faults alone
    topic = f"relay {lane.relay.relayed_by}" if lane.relay.relayed_by else "the change topic"
    stage = replace(lane, runtime="source", variant=topic,
                    verdict=lane.relay.published, relay=None, events=faults)  # fmt: skip
    return timeline_row(stage, t0)


def clusters(times: Iterable[float], gap: float) -> list[tuple[float, float, int]]:
    """Runs of times no more than ``gap`` apart, as (first, last, how many): a batch written
    again puts hundreds of duplicates at one instant, which the plot labels with their number."""
    ordered = sorted(times)
    found: list[tuple[float, float, int]] = []
    for t in ordered:
        if found and t - found[-1][1] <= gap:
            first, _, n = found[-1]
            found[-1] = (first, t, n + 1)
        else:
            found.append((t, t, 1))
    return found


def rate(
    times: Iterable[float], counts: Iterable[float], bucket: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(bucket starts, records/s) from relative times and the records counted at each; every
    bucket from the first to the last is present, so a stall shows as zeros."""
    t = np.asarray(list(times), dtype=np.float64)
    c = np.asarray(list(counts), dtype=np.float64)
    if not len(t):
        return np.empty(0), np.empty(0)
    index = np.floor(t / bucket).astype(np.int64)
    first = int(index.min())
    sums = np.bincount(index - first, weights=c)
    starts = (np.arange(len(sums)) + first) * bucket
    return starts, sums / bucket


def written_per_second(v: VariantResult, t0: float, bucket: float = 1.0) -> Series:
    """What its consumers wrote per second (a command consumer's sink, as the lab polled it)."""
    written = [e for e in v.events if e.kind is EventKind.WRITTEN and e.count]
    if written:
        t, r = rate((e.t - t0 for e in written), (e.count or 0 for e in written), bucket)
        return Series(v.label, t, r, bucket)
    return _growth(v, EventKind.SINK_COUNT, lambda e: e.count or 0, t0, bucket)


def committed_per_second(v: VariantResult, t0: float, bucket: float = 1.0) -> Series:
    """The records its group committed per second, as the lab polled a command consumer's."""
    return _growth(v, EventKind.COMMITTED, lambda e: sum(e.offsets.values()), t0, bucket)


def _growth(
    v: VariantResult,
    kind: EventKind,
    total: Callable[[HistoryEvent], int],
    t0: float,
    bucket: float,
) -> Series:
    """The increases of a polled total, per second (a fall - documents deleted - is not)."""
    polled = [e for e in v.events if e.kind is kind]
    totals = np.array([0, *(total(e) for e in polled)], dtype=np.float64)
    t, r = rate((e.t - t0 for e in polled), np.maximum(np.diff(totals), 0), bucket)
    return Series(v.label, t, r, bucket)


def acked_per_second(run: ScenarioResult, bucket: float = 1.0) -> list[Series]:
    """The broker's acks per second, one series per ledger (side-by-side group)."""
    t0 = origin(run)
    firsts: dict[str, VariantResult] = {}
    runtimes: dict[str, dict[str, None]] = {}  # of each group, in run order
    for v in run.variants:
        if len(v.acked_at):
            firsts.setdefault(v.group, v)
            runtimes.setdefault(v.group, {})[v.runtime] = None
    series = []
    for group, v in firsts.items():
        t, r = rate(v.acked_at - t0, np.ones(len(v.acked_at)), bucket)
        series.append(Series(f"acked ({', '.join(runtimes[group])})", t, r, bucket))
    return series
