"""A kill's wait for what it aims at to be back: a consumer process (consumer-kill) or a Connect
worker (connect-worker-kill) that is down when the kill is due - killed earlier, its restart
not due yet - is waited for, up to BACK_WITHIN_S: a signal that reaches no process kills
nothing, and a scenario's count of kills would depend on how soon its restarts came.

What the wait says goes into the history as FAULT_STEP details, the same for both families:
that the kill waits, and for whom; after how long it killed; and each process aimed at and not
killed, ending in NOT_KILLED, which the family's ``why_unfired`` reports (``unkilled``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from harness.faults.base import Seen
from harness.history.events import EventKind

# How long a kill waits at most for a process it aims at that is down to be back: a restart
# delay that brings one back is an orchestrator's few seconds; a longer one (connect-worker-
# loss's 600 s) means it is gone for good, and waiting would hold the run past its work for a
# kill that could land on nothing.
BACK_WITHIN_S = 60.0
# Ends a FAULT_STEP's detail that names a process the kill was aimed at and did not kill.
NOT_KILLED = "not killed"

# The processes aimed at that are down, by name, each with when its supervisor starts it again
# (``time.monotonic``; None: never) - ``RuntimeSupervisor.down``.
Down = dict[str, float | None]


@dataclass
class BackWait:
    """One kill's wait: due when the kill was, over BACK_WITHIN_S later."""

    due: float = 0.0  # time.monotonic() when the kill was due

    def start(self) -> None:
        self.due = time.monotonic()

    @property
    def deadline(self) -> float:
        return self.due + BACK_WITHIN_S

    @property
    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    def coming(self, down: Down) -> bool:
        """Whether a process that is down is to be started again before the deadline."""
        return any(at is not None and at <= self.deadline for at in down.values())

    def waits(self, down: Down) -> str:
        """What the kill does, waiting for ``down`` to be back."""
        now = time.monotonic()
        soon = [at - now for at in down.values() if at is not None and at <= self.deadline]
        they = "it is" if len(down) == 1 else "they are"
        return (
            f"{', '.join(down)} down, restarting in {max(0.0, *soon):.1f} s: the kill waits "
            f"until {they} back"
        )

    def waited(self, awaited: Sequence[str]) -> str:
        """How long the kill waited for ``awaited`` ('' if for none), to end what it did."""
        if not awaited:
            return ""
        waited = time.monotonic() - self.due
        return f", after waiting {waited:.1f} s for {', '.join(awaited)} to be back"

    def not_killed(self, name: str, at: float | None) -> str:
        """Why ``name``, down (its restart due ``at``), was not killed."""
        now = time.monotonic()
        if at is None:
            why = "not to be started again"
        elif at > self.deadline:
            why = f"its restart due in {at - now:.0f} s, past the kill's {BACK_WITHIN_S:.0f} s"
        else:
            why = f"not back within {BACK_WITHIN_S:.0f} s"
        return f"{name} down, {why}: {NOT_KILLED}"


def ran_out(name: str) -> str:
    """The run ended while the kill waited for ``name``."""
    return f"{name} down until the run ended: {NOT_KILLED}"


def unkilled(fault: str, seen: Seen) -> str:
    """Why fault ``fault`` did not fire: each process it was aimed at and did not kill ('' if
    none), as its FAULT_STEPs said."""
    return "; ".join(
        e.detail
        for e in seen.events
        if e.kind is EventKind.FAULT_STEP and e.fault == fault and e.detail.endswith(NOT_KILLED)
    )
