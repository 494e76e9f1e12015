"""The fault schedule: a pure function of the scenario's faults and its seed.

Each fault becomes a ``FaultPlan``: the steps the nemesis takes, in order (each family says its
own, ``Fault.steps``). The first step fires ``at`` seconds after the run starts (plus a seeded
``jitter``) or once ``at_event`` records were acknowledged; each later step fires ``after``
seconds after the one before it - and a waiting step (``Step.waits``: a node gone, a node back,
every partition replicated) only once the cluster is so. Producer bursts are windows of the
workload's event stream, so their steps are marked by record counts. The same faults and seed
always give the same plans (``describe`` prints them for comparison).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.faults.base import Fault, Step


@dataclass(frozen=True)
class FaultPlan:
    fault: Fault
    steps: tuple[Step, ...]

    @property
    def name(self) -> str:
        return self.fault.name

    def describe(self) -> str:
        return f"{self.fault.name} ({self.fault.kind}): " + ", ".join(
            s.describe() for s in self.steps
        )


def plan(faults: tuple[Fault, ...], seed: int) -> tuple[FaultPlan, ...]:
    return tuple(FaultPlan(f, f.steps(seed)) for f in faults)


def describe(schedule: tuple[FaultPlan, ...]) -> str:
    return "\n".join(p.describe() for p in schedule)
