"""Who made each event of a history: the lab, the lab in a system's place, or the systems (pure).

A count is only worth something if the failure came from the real system, so the history keeps
apart what the lab did (a fault's window and steps, a kill, a freeze, a crash point) from what
the servers and clients did - and, between the two, errors the lab made a server answer with
(the fault proxy's error code for a commit, a failCommand failpoint's): a real client saw them,
but no broker or primary decided them. Those are told by time: a client's error of the kinds a
fault makes up, inside that fault's window, on a lane the fault answers for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum

from harness.history.events import KILLED, EventKind, HistoryEvent
from harness.history.windows import fault_windows


class Origin(StrEnum):
    LAB = "the lab"  # the lab acted, or kept its own record
    INJECTED = "the lab, as a server"  # an error the lab made a server answer with (emulated)
    SYSTEM = "the systems"  # a server or a client did it


# The lab's own acts and records, whoever wrote them (a crash point fires inside the consumer,
# the supervisor thaws what a pause point froze).
_LAB = frozenset({
    EventKind.RUN_START, EventKind.RUN_END, EventKind.PRODUCED, EventKind.SCHEDULE_START,
    EventKind.FAULT_START, EventKind.FAULT_END, EventKind.FAULT_STEP, EventKind.CRASH,
    EventKind.EXECUTOR_LOST, EventKind.PAUSED, EventKind.RESUMED, EventKind.CAUGHT_UP,
    EventKind.WORKLOAD_HELD,
})  # fmt: skip

# Per fault kind, the event kinds its window makes up on a lane (none: its errors are real).
Injects = Callable[[str], frozenset[EventKind]]


def origin_of(event: HistoryEvent, injected: bool = False) -> Origin:
    """One event's origin; ``injected``: it lies in a window whose fault makes up its kind."""
    if event.kind in _LAB or (event.kind is EventKind.RUNTIME_EXIT and KILLED in event.detail):
        return Origin.LAB  # only the lab sends a consumer SIGKILL (a kill fault, a crash point)
    if event.kind is EventKind.RUNTIME_START and event.source == "harness":
        return Origin.LAB  # the lab's supervisor started it, as a process manager would
    return Origin.INJECTED if injected else Origin.SYSTEM


def origins(events: Sequence[HistoryEvent], injects: Injects) -> list[Origin]:
    """Each event's origin, in the order given: ``injects(kind)`` is what a fault of that kind
    makes up on this lane."""
    windows = [(w, injects(w.kind)) for w in fault_windows(events)]
    return [
        origin_of(e, any(e.kind in made and w.start <= e.t <= w.end for w, made in windows))
        for e in events
    ]
