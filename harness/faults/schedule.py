"""The fault schedule: a pure function of the scenario's faults and its seed.

Each fault becomes a ``FaultPlan``: the steps the nemesis takes, in order. The first step fires
``at`` seconds after the run starts (plus a seeded ``jitter``) or once ``at_event`` records were
acknowledged; each later step fires ``after`` seconds after the one before it - and a waiting
step (``Action.waits``: a node gone, a node back, every partition replicated) only once the
cluster is so. Producer bursts are windows of the event stream, so their steps are marked by
record counts. The same faults
and seed always give the same plans (``describe`` prints them for comparison).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import StrEnum

from harness.faults.kinds import (
    BrokerBounce,
    BrokerKill,
    BrokerPause,
    BrokerRollingRestart,
    CommitFailure,
    ConsumerCrash,
    ConsumerKill,
    ConsumerPause,
    Fault,
    MongoFailCommand,
    NetworkFault,
    ProducerBurst,
    Timed,
)


class Action(StrEnum):
    START = "start"  # the fault's window opens (recorded in the history)
    END = "end"  # and closes
    STOP_BROKER = "stop-broker"  # SIGTERM (SIGKILL when hard) to a Kafka node
    AWAIT_BROKER_STOPPED = "await-broker-stopped"
    START_BROKER = "start-broker"
    AWAIT_BROKER_READY = "await-broker-ready"  # a registered, unfenced broker again
    AWAIT_REPLICATED = "await-replicated"  # no partition under-replicated
    PAUSE_BROKER = "pause-broker"
    RESUME_BROKER = "resume-broker"
    KILL_CONSUMERS = "kill-consumers"
    COMMIT_FAILURE_ON = "commit-failure-on"
    COMMIT_FAILURE_OFF = "commit-failure-off"
    LINK_FAULT_ON = "link-fault-on"
    LINK_FAULT_OFF = "link-fault-off"
    FAILPOINT_ON = "failpoint-on"
    FAILPOINT_OFF = "failpoint-off"

    @property
    def waits(self) -> bool:
        """A step that is due only once a condition of the cluster holds."""
        return self in (
            Action.AWAIT_BROKER_STOPPED,
            Action.AWAIT_BROKER_READY,
            Action.AWAIT_REPLICATED,
        )


@dataclass(frozen=True)
class Step:
    action: Action
    at: float | None = None  # seconds after the run started (first step only)
    at_event: int | None = None  # acknowledged records (first step, or a producer burst's end)
    after: float = 0.0  # seconds after the previous step of the same fault (at least)
    rotation: int = 0  # which rotation of a rolling restart
    hard: bool = False  # STOP_BROKER: SIGKILL instead of SIGTERM

    def describe(self) -> str:
        when = (
            f"at {self.at:.2f}s"
            if self.at is not None
            else f"at event {self.at_event}"
            if self.at_event is not None
            else f"+{self.after:.2f}s"
        )
        suffix = f" (rotation {self.rotation + 1})" if self.rotation else ""
        return f"{when} {self.action.value}{suffix}"


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
    return tuple(FaultPlan(f, _steps(f, seed)) for f in faults)


def plan_has_steps(fault: Fault) -> bool:
    """False for faults armed inside the runtime (consumer crashes and pauses)."""
    return not isinstance(fault, ConsumerCrash | ConsumerPause)


def describe(schedule: tuple[FaultPlan, ...]) -> str:
    return "\n".join(p.describe() for p in schedule)


def _start(fault: Timed, seed: int) -> Step:
    offset = random.Random(f"{seed}:{fault.name}").uniform(0, fault.jitter) if fault.jitter else 0.0
    if fault.at_event is not None:
        return Step(Action.START, at_event=fault.at_event, after=offset)
    assert fault.at is not None  # a parsed fault has exactly one of at and at_event
    return Step(Action.START, at=fault.at + offset)


def _window(fault: Timed, seed: int, on: Action, off: Action, duration: float) -> tuple[Step, ...]:
    return (_start(fault, seed), Step(on), Step(off, after=duration), Step(Action.END))


def _restart(hard: bool, rotation: int = 0, down_for: float = 0.0) -> tuple[Step, ...]:
    """One node stopped, then started again once it is gone (``down_for`` seconds later)."""
    return (
        Step(Action.STOP_BROKER, rotation=rotation, hard=hard),
        Step(Action.AWAIT_BROKER_STOPPED, rotation=rotation),
        Step(Action.START_BROKER, rotation=rotation, after=down_for),
        Step(Action.AWAIT_BROKER_READY, rotation=rotation),
    )


def _steps(fault: Fault, seed: int) -> tuple[Step, ...]:
    match fault:
        case ConsumerCrash() | ConsumerPause():
            return ()  # armed inside the runtime, at its crash point
        case ProducerBurst():
            return (
                Step(Action.START, at_event=fault.start_event),
                Step(Action.END, at_event=fault.start_event + fault.events),
            )
        case BrokerBounce():
            return (_start(fault, seed), *_restart(fault.hard), Step(Action.END))
        case ConsumerKill():
            return (_start(fault, seed), Step(Action.KILL_CONSUMERS), Step(Action.END))
        case BrokerKill():
            return (_start(fault, seed), *_restart(True, down_for=fault.duration), Step(Action.END))
        case BrokerPause():
            return _window(fault, seed, Action.PAUSE_BROKER, Action.RESUME_BROKER, fault.duration)
        case CommitFailure():
            return _window(
                fault, seed, Action.COMMIT_FAILURE_ON, Action.COMMIT_FAILURE_OFF, fault.duration
            )
        case NetworkFault():
            return _window(fault, seed, Action.LINK_FAULT_ON, Action.LINK_FAULT_OFF, fault.duration)
        case MongoFailCommand():
            return _window(fault, seed, Action.FAILPOINT_ON, Action.FAILPOINT_OFF, fault.duration)
        case BrokerRollingRestart():
            return _rolling_restart(fault, seed)
    raise TypeError(f"no schedule for {fault!r}")


def _rolling_restart(fault: BrokerRollingRestart, seed: int) -> tuple[Step, ...]:
    """Rotation r restarts one node; the next begins once every partition is fully replicated
    again, plus ``interval`` seconds."""
    steps = [_start(fault, seed)]
    for r in range(fault.rotations):
        first, *rest = _restart(fault.hard, rotation=r)
        steps.append(replace(first, after=fault.interval) if r else first)
        steps += [*rest, Step(Action.AWAIT_REPLICATED, rotation=r)]
    steps.append(Step(Action.END))
    return tuple(steps)
