"""Which planned faults fired, from one variant's history (pure).

A fault that did not fire leaves a run that says nothing about it: a crash planned at batch 2
of a consumer that only ever reads one batch would read as "0 duplicates". Each family says
how it knows (``Fault.why_unfired``). (Before a run, ``harness.scenario.preflight`` says which
faults cannot fire, or may not, with the scenario's workload.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from harness.faults.base import Fault, Seen
from harness.history.events import EventKind, HistoryEvent
from harness.results.outcome import UnfiredFault


def unfired(
    faults: Sequence[Fault], events: Sequence[HistoryEvent], workload_events: int
) -> tuple[UnfiredFault, ...]:
    """The faults that did not fire in the run whose history is ``events`` (one variant's).
    A variant whose pipeline stopped for good is not held to a fault that came after: nothing
    of it was left to strike (its stop is its finding)."""
    seen = Seen(
        events,
        workload_events,
        caught_up=min((e.t for e in events if e.kind is EventKind.CAUGHT_UP), default=math.inf),
        clock=min((e.t for e in events if e.kind is EventKind.SCHEDULE_START), default=None),
    )
    stopped = min((e.t for e in events if e.kind is EventKind.FAILED_FOR_GOOD), default=math.inf)
    return tuple(
        UnfiredFault(fault.name, fault.kind, reason)
        for fault in faults
        if (reason := fault.why_unfired(seen)) and not _after(stopped, fault, events)
    )


def _after(stopped: float, fault: Fault, events: Sequence[HistoryEvent]) -> bool:
    """Whether ``fault`` came after the variant stopped for good: a timed fault that started
    then, or one its consumers were to apply themselves (a crash point) - they were gone."""
    if stopped == math.inf:
        return False
    starts = [e.t for e in events if e.kind is EventKind.FAULT_START and e.fault == fault.name]
    return not starts or min(starts) >= stopped
