"""Fault windows, derived from the history: the one record of what the nemesis did (Jepsen's
``checker/perf`` derives its nemesis regions from the history alike)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from harness.history.events import EventKind, HistoryEvent

# A window shorter than this is drawn as an instant (a kill, a crash point).
INSTANT_S = 0.5


@dataclass(frozen=True)
class FaultWindow:
    """A named interval [start, end] (both inclusive) during which a fault held: unix seconds
    as the history has them, or seconds since a run started once ``shifted``."""

    name: str
    start: float
    end: float
    kind: str = ""  # e.g. broker-rolling-restart
    open_ended: bool = False  # no FAULT_END in the history: it lasts to the variant's end

    def __post_init__(self) -> None:
        if math.isnan(self.start) or math.isnan(self.end) or self.end < self.start:
            raise ValueError(
                f"fault window {self.name!r}: needs start <= end, got [{self.start}, {self.end}]"
            )

    @property
    def instant(self) -> bool:
        return self.end - self.start < INSTANT_S

    def contains(self, t: float) -> bool:
        return self.start <= t <= self.end

    def shifted(self, t0: float) -> FaultWindow:
        """The same window on a clock that starts at ``t0``."""
        return replace(self, start=self.start - t0, end=self.end - t0)


def fault_windows(events: Iterable[HistoryEvent], end: float | None = None) -> list[FaultWindow]:
    """The fault windows the nemesis recorded: each FAULT_START paired with the next FAULT_END
    of its name (Jepsen's checker/perf derives its nemesis regions from the history alike).

    A window with no end lasts until ``end`` (default: the last event), marked ``open_ended``.
    """
    ordered = sorted(events, key=lambda e: e.t)
    if end is None:
        end = ordered[-1].t if ordered else 0.0
    open_at: dict[str, HistoryEvent] = {}
    found: list[FaultWindow] = []
    for e in ordered:
        if e.kind is EventKind.FAULT_START:
            open_at.setdefault(e.fault, e)  # a repeated start of an open window is the same one
        elif e.kind is EventKind.FAULT_END and e.fault in open_at:
            start = open_at.pop(e.fault)
            found.append(FaultWindow(e.fault, start.t, e.t, start.detail))
    for name, start in open_at.items():
        found.append(FaultWindow(name, start.t, max(end, start.t), start.detail, open_ended=True))
    return sorted(found, key=lambda w: (w.start, w.name))
