"""Faults on Kafka nodes: bounce, kill, pause one node, and a rolling restart of them all.

A node is picked when the fault acts (the controller and the coordinators move), by
``broker`` (or a rolling restart's ``start``). A stop or a start returns at once: the node takes
seconds to stop cleanly and longer to start (docs/performance.md), and the consumers'
supervision goes on meanwhile; the steps after it wait until the cluster says it is so.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, ClassVar

from confluent_kafka import KafkaException

from harness.environment.base import BackendAbilities, Component
from harness.faults.base import (
    END,
    Actor,
    Context,
    FaultStuck,
    Setting,
    Space,
    Step,
    Timed,
    needs_server_control,
    positive,
)
from harness.history.events import EventKind
from harness.records import FieldError, Problem


class Pick(StrEnum):
    """How a broker fault picks its Kafka node."""

    NODE = "node"  # a node id
    CONTROLLER = "controller"  # the KRaft quorum's leader
    COORDINATOR_OF = "coordinator-of"  # the group coordinator of a variant's consumer group
    LEADER_OF = "leader-of"  # the leader of a partition of the run's topic


@dataclass(frozen=True)
class BrokerSelector:
    """Which Kafka node a broker fault acts on, decided when it acts. In a scenario:
    ``broker: 2``, ``broker: controller``, ``broker: {coordinator-of: naive}`` (a variant's
    label or name) or ``broker: {leader-of: 0}`` (a partition of the run's topic)."""

    pick: Pick = Pick.NODE
    node: int = 1
    variant: str = ""  # coordinator-of
    partition: int = 0  # leader-of

    @classmethod
    def parse(cls, raw: Any) -> BrokerSelector:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return cls(Pick.NODE, node=raw)
        if raw == Pick.CONTROLLER.value:
            return cls(Pick.CONTROLLER)
        if isinstance(raw, dict) and len(raw) == 1:
            ((key, value),) = raw.items()
            if key == Pick.COORDINATOR_OF.value and isinstance(value, str) and value:
                return cls(Pick.COORDINATOR_OF, variant=value)
            if key == Pick.LEADER_OF.value and isinstance(value, int) and value >= 0:
                return cls(Pick.LEADER_OF, partition=value)
        raise FieldError(
            "",
            f"expected a node id, 'controller', {{coordinator-of: VARIANT}} or "
            f"{{leader-of: PARTITION}}, got {raw!r}",
        )

    def __str__(self) -> str:
        match self.pick:
            case Pick.NODE:
                return f"node {self.node}"
            case Pick.CONTROLLER:
                return "the controller"
            case Pick.COORDINATOR_OF:
                return f"the coordinator of {self.variant}"
        return f"the leader of partition {self.partition}"

    def aim(self) -> str:
        """The kind of node it picks (``Fault.aim``)."""
        return {
            Pick.NODE: "a node",
            Pick.CONTROLLER: "the controller",
            Pick.COORDINATOR_OF: "a group coordinator",
            Pick.LEADER_OF: "a partition leader",
        }[self.pick]

    def refusal(self, setting: Setting, backend: BackendAbilities) -> str:
        """Why the scenario or the backend has no such node ('' if it may)."""
        match self.pick:
            case Pick.NODE if backend.nodes is not None and self.node not in backend.nodes:
                nodes = ", ".join(map(str, backend.nodes))
                return (
                    f"the {backend.name} backend's Kafka nodes are {nodes}; "
                    f"there is no node {self.node}"
                )
            case Pick.COORDINATOR_OF if self.variant not in setting.variants:
                return (
                    f"coordinator-of: no variant {self.variant!r} "
                    f"(have: {sorted(setting.variants)})"
                )
            case Pick.LEADER_OF if self.partition >= setting.partitions:
                return (
                    f"leader-of: the topic has {setting.partitions} partition(s); "
                    f"there is no partition {self.partition}"
                )
        return ""

    def waiting(self, rotation: int = 0) -> tuple[Step, ...]:
        """The step before the one that stops or pauses the node: it waits until the cluster
        names the node and no other fault holds it."""
        return (Step(Do.AWAIT_TARGET, rotation=rotation, waits=True),)

    def found_in(self, context: Context) -> int | None:
        """The node this names now, or None while the cluster cannot say."""
        try:
            return self.node_in(context)
        except (FaultStuck, KafkaException, OSError):
            return None

    def node_in(self, context: Context) -> int:
        """The node this names, now."""
        if self.pick is Pick.NODE:
            return self.node
        view = context.env.cluster_view()
        node: int | None
        match self.pick:
            case Pick.CONTROLLER:
                node = view.controller
            case Pick.COORDINATOR_OF:
                targets = context.targets
                groups = [t.group for t in targets if self.variant in (t.label, t.name)]
                node = view.coordinator_of(groups[0]) if groups else None
            case Pick.LEADER_OF:
                node = view.leader_of(context.topic, self.partition)
        if node is None:
            raise FaultStuck(f"cannot find {self} in the cluster now")
        return node


FIRST_NODE = BrokerSelector()


class Do(StrEnum):
    # The node a selector names can be found: a controller being elected, a coordinator moving
    # while another fault holds a node down, is asked for again at each tick.
    AWAIT_TARGET = "await-target"
    STOP = "stop-broker"  # SIGTERM (SIGKILL when hard) to a Kafka node
    AWAIT_STOPPED = "await-broker-stopped"
    START = "start-broker"
    AWAIT_READY = "await-broker-ready"  # a registered, unfenced broker again
    AWAIT_REPLICATED = "await-replicated"  # no partition under-replicated
    PAUSE = "pause-broker"
    RESUME = "resume-broker"


def _restart(hard: bool, rotation: int = 0, down_for: float = 0.0) -> tuple[Step, ...]:
    """One node stopped, then started again once it is gone (``down_for`` seconds later)."""
    return (
        Step(Do.AWAIT_TARGET, rotation=rotation, waits=True),
        Step(Do.STOP, rotation=rotation, hard=hard),
        Step(Do.AWAIT_STOPPED, rotation=rotation, waits=True),
        Step(Do.START, rotation=rotation, after=down_for),
        Step(Do.AWAIT_READY, rotation=rotation, waits=True),
    )


@dataclass
class _NodeActor(Actor):
    """Stops, starts, pauses and resumes the node ``pick`` chooses for each rotation."""

    fault: Timed
    context: Context
    selector: BrokerSelector
    rotate: bool = False  # a rolling restart: rotation r acts on the r-th node after the first
    node: int | None = None
    first: int | None = None
    chosen: int | None = None  # found by the waiting step, for the step that acts
    down: set[int] = field(default_factory=set)
    paused: set[int] = field(default_factory=set)
    started: set[int] = field(default_factory=set)  # started again, not yet seen back

    @property
    def about(self) -> str:
        return f"node {self.node}"

    def _pick(self, rotation: int) -> int | None:
        """The node of ``rotation``, or None while the cluster cannot name it."""
        if not self.rotate:
            return self.selector.found_in(self.context)
        nodes = self.context.env.broker_ids
        if self.first is None:
            self.first = self.selector.found_in(self.context)
            if self.first is None:
                return None
        return nodes[(nodes.index(self.first) + rotation) % len(nodes)]

    def _hold(self, node: int) -> None:
        self.context.held[node] = self.fault.name

    def _release(self) -> None:
        """Let go of the node it holds (one at a time: a rolling restart's next rotation takes
        the next node once the last is back)."""
        self.context.release(self.fault)

    def take(self, step: Step) -> None:
        env = self.context.env
        match step.action:
            case Do.STOP:
                self.node = self._chosen(step.rotation)
                self._hold(self.node)
                how = "SIGKILL" if step.hard else "SIGTERM"
                self.context.record(
                    EventKind.FAULT_STEP,
                    self.fault,
                    count=step.rotation + 1,
                    detail=f"node {self.node} {how}",
                )
                env.begin_stop_broker(self.node, hard=step.hard)
                self.down.add(self.node)
            case Do.START:
                assert self.node is not None
                env.begin_start_broker(self.node)
                self.down.discard(self.node)
                self.started.add(self.node)
            case Do.PAUSE:
                self.node = self._chosen(step.rotation)
                self._hold(self.node)
                env.pause(Component.KAFKA, broker=self.node)
                self.paused.add(self.node)
            case Do.RESUME:
                assert self.node is not None
                env.resume(Component.KAFKA, broker=self.node)
                self.paused.discard(self.node)
                self._release()
            case Do.AWAIT_READY:
                self._release()  # it is back: another fault may take it
                self.started.discard(self.node)
            case _ if step.waits:
                pass  # its condition came true: nothing to do
            case _:
                super().take(step)

    def holds(self, step: Step) -> bool:
        env = self.context.env
        try:
            match step.action:
                case Do.AWAIT_TARGET:
                    node = self._pick(step.rotation)
                    free = node is not None and self.context.held.get(node, self.fault.name)
                    self.chosen = node if free == self.fault.name else None
                    return self.chosen is not None
                case Do.AWAIT_STOPPED if self.node is not None:
                    return env.broker_stopped(self.node)
                case Do.AWAIT_READY if self.node is not None:
                    if env.broker_stopped(self.node):
                        # It exited while starting: a node SIGKILLed and started at once can be
                        # refused by the controller (DUPLICATE_BROKER_REGISTRATION, until its old
                        # session is fenced) and Kafka then exits. Started again, as an operator
                        # or an orchestrator would.
                        self.context.record(
                            EventKind.FAULT_STEP,
                            self.fault,
                            detail=f"node {self.node} exited while starting: started again",
                        )
                        env.begin_start_broker(self.node)
                        return False
                    return env.broker_ready(self.node)
                case Do.AWAIT_REPLICATED:
                    view = env.cluster_view()
                    return not view.under_replicated() and len(view.brokers) == len(env.broker_ids)
        except (KafkaException, OSError):
            return False  # the cluster is busy: ask again
        raise ValueError(f"{step.action} is not a waiting step of {self.fault.name}")

    def _chosen(self, rotation: int) -> int:
        """The node the waiting step found (a scenario's own steps always have one before)."""
        chosen, self.chosen = self.chosen, None
        if chosen is not None:
            return chosen
        node = self._pick(rotation)
        if node is None:
            raise FaultStuck(f"cannot find {self.selector} in the cluster now")
        return node

    def undo(self) -> None:
        env = self.context.env
        self._release()
        for node in sorted(self.paused):
            env.resume(Component.KAFKA, broker=node)
        self.paused.clear()
        for node in sorted(self.down):
            if not env.broker_stopped(node):
                env.kill(Component.KAFKA, broker=node)  # a stop still under way
            env.begin_start_broker(node)
        self.started |= self.down
        self.down.clear()

    def unsettled(self) -> list[str]:
        env = self.context.env
        for node in sorted(self.started):
            try:
                if env.broker_stopped(node):  # exited while starting, as AWAIT_READY sees
                    env.begin_start_broker(node)
                elif env.broker_ready(node):
                    self.started.discard(node)
            except (KafkaException, OSError):
                pass  # the cluster is busy: not back yet
        return [f"Kafka node {node}" for node in sorted(self.started)]


class _OneNode(Timed):
    """A fault on the one node ``broker`` picks."""

    broker: BrokerSelector

    def actor(self, context: Context) -> Actor:
        return _NodeActor(self, context, self.broker)

    def aim(self) -> str:
        return self.broker.aim()

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        problem = self.broker.refusal(setting, backend)
        found = needs_server_control(backend, "the Kafka nodes")
        return found + ([("broker", problem)] if problem else [])


@dataclass(frozen=True)
class BrokerBounce(_OneNode):
    """Stop a Kafka node (SIGTERM: a controlled shutdown; SIGKILL when ``hard``), then start it
    again as soon as it is gone; the window ends once it is a registered broker again."""

    kind: ClassVar[str] = "broker-bounce"
    name: str
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    hard: bool = False
    broker: BrokerSelector = FIRST_NODE

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (self.opening(seed), *_restart(self.hard), Step(END))

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return {**space.when(rng), "hard": rng.random() < 0.5, "broker": space.broker(rng)}

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "hard": True}


@dataclass(frozen=True)
class _NodeWindow(_OneNode):
    """A fault on one node that lasts ``duration`` seconds."""

    name: str
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    broker: BrokerSelector = FIRST_NODE

    def problems(self) -> list[Problem]:
        return self.trigger_problems() + positive("duration", self.duration)

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return {
            **space.when(rng),
            "duration": space.seconds(rng, 2, 15),
            "broker": space.broker(rng),
        }

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration}


@dataclass(frozen=True)
class BrokerKill(_NodeWindow):
    """kill -9 a Kafka node and leave it down for ``duration`` seconds, then start it again;
    the window ends once it is a registered broker again."""

    kind: ClassVar[str] = "broker-kill"

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (self.opening(seed), *_restart(True, down_for=self.duration), Step(END))


@dataclass(frozen=True)
class BrokerPause(_NodeWindow):
    """SIGSTOP a Kafka node for ``duration`` seconds: connections open, nothing answers."""

    kind: ClassVar[str] = "broker-pause"

    def steps(self, seed: int) -> tuple[Step, ...]:
        opening, *window = self.window(seed, Do.PAUSE, Do.RESUME, self.duration)
        return (opening, *self.broker.waiting(), *window)


@dataclass(frozen=True)
class BrokerRollingRestart(Timed):
    """``rotations`` restarts, one node at a time, each node in turn in id order from the one
    ``start`` picks (node 1 by default: 1, 2, 3, 1, ...), as a managed service's rolling upgrade:
    a node is stopped (SIGTERM with a controlled shutdown, or SIGKILL when ``hard``), started
    again, and the next rotation begins once no partition is under-replicated, plus ``interval``
    seconds (seed 002's MSK upgrade)."""

    kind: ClassVar[str] = "broker-rolling-restart"
    name: str
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    rotations: int = 3
    interval: float = 0.0
    hard: bool = False
    start: BrokerSelector = FIRST_NODE

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("interval", self.interval, allow_zero=True)
        if self.rotations < 1:
            found.append(("rotations", f"must be >= 1, got {self.rotations}"))
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        """Rotation r restarts one node; the next begins once every partition is fully
        replicated again, plus ``interval`` seconds."""
        steps = [self.opening(seed)]
        for r in range(self.rotations):
            first, *rest = _restart(self.hard, rotation=r)
            steps.append(replace(first, after=self.interval) if r else first)
            steps += [*rest, Step(Do.AWAIT_REPLICATED, rotation=r, waits=True)]
        steps.append(Step(END))
        return tuple(steps)

    def actor(self, context: Context) -> Actor:
        return _NodeActor(self, context, self.start, rotate=True)

    def aim(self) -> str:
        return self.start.aim()

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        problem = self.start.refusal(setting, backend)
        found = needs_server_control(backend, "the Kafka nodes")
        return found + ([("start", problem)] if problem else [])

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        # A rotation waits for the cluster to be fully replicated again (tens of seconds): more
        # than two make a run long for little more exercised.
        return {**space.when(rng), "rotations": rng.randint(1, 2), "hard": rng.random() < 0.5,
                "interval": space.seconds(rng, 0, 3), "start": space.broker(rng)}  # fmt: skip

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "rotations": 3}
