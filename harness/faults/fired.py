"""Which planned faults fired, from one variant's history (pure).

A fault that did not fire leaves a run that says nothing about it: ``chaoslab notebooks 01
-p events 200`` used to report "0 duplicates" for a crash planned at batch 2 of a consumer
that only ever read one batch. (Before a run, ``harness.scenario.preflight`` says which faults
cannot fire, or may not, with the scenario's workload.)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from harness.faults.kinds import ConsumerCrash, ConsumerPause, Fault, ProducerBurst
from harness.history import EventKind, HistoryEvent
from harness.outcome import UnfiredFault
from harness.pipeline.crash import CrashPoint


def unfired(
    faults: Sequence[Fault], events: Sequence[HistoryEvent], workload_events: int
) -> tuple[UnfiredFault, ...]:
    """The faults that did not fire in the run whose history is ``events`` (one variant's).

    A crash or pause fired if its point was reached (a CRASH / PAUSED event of that fault); a
    producer burst if the workload reached its first event; any other fault if its window opened
    before the variant had consumed everything (CAUGHT_UP) - later, it hit nothing.
    """
    caught_up = min((e.t for e in events if e.kind is EventKind.CAUGHT_UP), default=math.inf)
    clock = min((e.t for e in events if e.kind is EventKind.SCHEDULE_START), default=None)
    found = []
    for fault in faults:
        reason = _why_not(fault, events, workload_events, caught_up, clock)
        if reason:
            found.append(UnfiredFault(fault.name, fault.kind, reason))
    return tuple(found)


def _why_not(
    fault: Fault,
    events: Sequence[HistoryEvent],
    workload_events: int,
    caught_up: float,
    clock: float | None,
) -> str:
    def since(t: float) -> str:
        return f"+{t - clock:.1f}s" if clock is not None else f"at {t:.1f}"

    match fault:
        case ConsumerCrash() | ConsumerPause():
            kinds = (EventKind.CRASH, EventKind.PAUSED)
            if any(e.kind in kinds and e.fault == fault.name for e in events):
                return ""
            batches = Counter(e.source for e in events if e.kind is EventKind.BATCH)
            most = max(batches.values(), default=0)
            where = f"{fault.point.value} of batch {fault.at_batch}"
            if fault.point is CrashPoint.MID_WRITE:
                where += f" after {fault.after_docs} documents"
            return (
                f"its point ({where}) was never reached: a consumer handled at most {most} batches"
            )
        case ProducerBurst():
            if workload_events > fault.start_event:
                return ""
            return (
                f"the workload has {workload_events} events and the burst starts at event "
                f"{fault.start_event}"
            )
    starts = [e.t for e in events if e.kind is EventKind.FAULT_START and e.fault == fault.name]
    if starts and min(starts) <= caught_up:
        return ""
    done = f" (the variant had consumed everything at {since(caught_up)})"
    if not starts:
        return "it was due after the run's work was done" + (done if caught_up < math.inf else "")
    return f"it started at {since(min(starts))}, after the work was done{done}"
