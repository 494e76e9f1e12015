"""The nemesis: plays a fault schedule against the environment and the consumers of a run.

It is driven by the run's wait loop (``tick`` every ~100 ms with the seconds since every
variant's consumers handled their first batch - so that ``at: 5`` means five seconds into the
pipeline's work whether it took a listener 3 s or a Spark driver 30 s to start - and the
records acknowledged so far) rather than by a thread of its own, so a fault and
the supervision of the consumers never race. Every window is recorded in each variant's history
as FAULT_START / FAULT_END (source ``nemesis``), and only there: the checker and the report
derive the windows from it (``harness.history.fault_windows``); ``restore`` undoes whatever is
still in force.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from pymongo import MongoClient

from harness.environment import Component, Environment, Link, LinkRule
from harness.errors import LabError
from harness.faults.kinds import (
    KAFKA_APIS,
    KAFKA_ERRORS,
    BrokerBounce,
    BrokerKill,
    BrokerPause,
    BrokerRollingRestart,
    BrokerSelector,
    CommitFailure,
    ConsumerKill,
    Fault,
    MongoFailCommand,
    NetworkFault,
    Pick,
)
from harness.faults.schedule import Action, FaultPlan, Step
from harness.history import EventKind, HistoryWriter
from harness.pipeline.runtime import CONSUMER_APP, commit_failure_flag
from harness.pipeline.runtimes import CommitFailureVia, Runtime
from harness.pipeline.supervisor import RuntimeSupervisor

CHECK_EVERY_S = 0.5  # how often a waiting step asks the cluster (a Metadata request or so)
WAIT_TIMEOUT_S = 240.0  # a node not gone, or not back, by then is a broken environment


class FaultStuck(LabError):
    """A waiting step of a fault never came true (a node that did not come back)."""


@dataclass
class Target:
    """One variant's consumers, as the nemesis sees them."""

    history: HistoryWriter  # source "nemesis", in the variant's history directory
    supervisor: RuntimeSupervisor
    run_dir: Path
    label: str = ""  # the variant's label and name (coordinator-of: names either)
    name: str = ""
    group: str = ""  # its consumer group


@dataclass
class _Progress:
    plan: FaultPlan
    next_step: int = 0
    last_fired: float | None = None  # monotonic time of the previous step
    reached_at: float | None = None  # when an at_event step's record count was reached
    node: int | None = None  # the Kafka node its broker steps act on, once picked
    first: int | None = None  # a rolling restart's first node, picked at its first rotation
    checked_at: float = 0.0  # when a waiting step last asked the cluster
    waiting_since: float | None = None


@dataclass
class Nemesis:
    env: Environment
    schedule: Sequence[FaultPlan]
    runtime: Runtime  # says how a commit failure reaches its commits
    targets: Sequence[Target]
    topic: str = ""  # the run's topic (leader-of picks among its partitions)
    _progress: list[_Progress] = field(init=False)
    _rules: dict[str, str] = field(default_factory=dict, init=False)  # fault name -> rule id
    _down: set[int] = field(default_factory=set, init=False)  # nodes stopped by a fault
    _paused: set[int] = field(default_factory=set, init=False)
    _failpoint: bool = field(default=False, init=False)
    _opened: set[str] = field(default_factory=set, init=False)  # windows not ended yet
    _clock_started: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._progress = [_Progress(p) for p in self.schedule if p.steps]

    @property
    def done(self) -> bool:
        return all(p.next_step >= len(p.plan.steps) for p in self._progress)

    @property
    def busy(self) -> bool:
        """A fault has started and has steps left to take."""
        return any(0 < p.next_step < len(p.plan.steps) for p in self._progress)

    def tick(self, elapsed: float | None, acked: int, *, produced_all: bool = False) -> None:
        """Take every step that is due: ``elapsed`` seconds since the consumers started (None
        until they have), ``acked`` records acknowledged; once the workload is ``produced_all``,
        a step waiting for a record count the workload never reached (``--events`` made it
        smaller than the scenario's bursts) is due at once. Never blocks on the cluster: a
        step that waits for it asks again at the next tick."""
        if elapsed is not None and not self._clock_started:
            self._clock_started = True
            for target in self.targets:
                target.history.record(EventKind.SCHEDULE_START, detail=f"{elapsed:.3f}")
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
        if not step.action.waits:
            return True
        if progress.waiting_since is None:
            progress.waiting_since = now
        if now - progress.checked_at < CHECK_EVERY_S:
            return False
        progress.checked_at = now
        if self._holds(step.action, progress.node):
            return True
        if now - progress.waiting_since > WAIT_TIMEOUT_S:
            raise FaultStuck(
                f"{progress.plan.name}: {step.action.value} for node {progress.node} did not "
                f"come true within {WAIT_TIMEOUT_S:.0f}s (see the node's log in "
                f"{self.env.directory}/logs)"
            )
        return False

    def _holds(self, action: Action, node: int | None) -> bool:
        assert node is not None or action is Action.AWAIT_REPLICATED
        try:
            match action:
                case Action.AWAIT_BROKER_STOPPED if node is not None:
                    return self.env.broker_stopped(node)
                case Action.AWAIT_BROKER_READY if node is not None:
                    return self.env.broker_ready(node)
                case Action.AWAIT_REPLICATED:
                    view = self.env.cluster_view()
                    return not view.under_replicated() and len(view.brokers) == len(
                        self.env.broker_ids
                    )
        except (KafkaException, OSError):
            return False  # the cluster is busy: ask again
        raise ValueError(f"{action} is not a waiting step")

    def pick(self, selector: BrokerSelector) -> int:
        """The node ``selector`` names, now."""
        if selector.pick is Pick.NODE:
            return selector.node
        view = self.env.cluster_view()
        node: int | None
        match selector.pick:
            case Pick.CONTROLLER:
                node = view.controller
            case Pick.COORDINATOR_OF:
                groups = [t.group for t in self.targets if selector.variant in (t.label, t.name)]
                node = view.coordinator_of(groups[0]) if groups else None
            case Pick.LEADER_OF:
                node = view.leader_of(self.topic, selector.partition)
        if node is None:
            raise FaultStuck(f"cannot find {selector} in the cluster now")
        return node

    # -- actions --------------------------------------------------------------------------------

    def _take(self, progress: _Progress, step: Step) -> None:
        fault = progress.plan.fault
        match step.action:
            case Action.START:
                self._opened.add(fault.name)
                self._record(EventKind.FAULT_START, fault)
            case Action.END:
                self._opened.discard(fault.name)
                self._record(EventKind.FAULT_END, fault)
            case Action.STOP_BROKER:
                progress.node = self._node_for(progress, step.rotation)
                how = "SIGKILL" if step.hard else "SIGTERM"
                self._record(
                    EventKind.FAULT_STEP,
                    fault,
                    count=step.rotation + 1,
                    detail=f"node {progress.node} {how}",
                )
                self.env.begin_stop_broker(progress.node, hard=step.hard)
                self._down.add(progress.node)
            case Action.START_BROKER:
                assert progress.node is not None
                self.env.begin_start_broker(progress.node)
                self._down.discard(progress.node)
            case Action.PAUSE_BROKER:
                progress.node = self._node_for(progress, step.rotation)
                self.env.pause(Component.KAFKA, broker=progress.node)
                self._paused.add(progress.node)
            case Action.RESUME_BROKER:
                assert progress.node is not None
                self.env.resume(Component.KAFKA, broker=progress.node)
                self._paused.discard(progress.node)
            case Action.KILL_CONSUMERS:
                assert isinstance(fault, ConsumerKill)
                for target in self.targets:
                    target.supervisor.kill(fault.consumer)
            case Action.COMMIT_FAILURE_ON:
                assert isinstance(fault, CommitFailure)
                self._commit_failure_on(fault)
            case Action.COMMIT_FAILURE_OFF:
                self._commit_failure_off(fault.name)
            case Action.LINK_FAULT_ON:
                assert isinstance(fault, NetworkFault)
                rule = LinkRule(fault.link, fault.action.value, delay_ms=fault.delay_ms)
                self._rules[fault.name] = self.env.add_link_rule(rule)
            case Action.LINK_FAULT_OFF:
                self.env.remove_link_rule(self._rules.pop(fault.name))
            case Action.FAILPOINT_ON:
                assert isinstance(fault, MongoFailCommand)
                self._failpoint_on(fault)
            case Action.FAILPOINT_OFF:
                self._failpoint_off()
            case _:
                assert step.action.waits  # its condition came true: nothing to do

    def _node_for(self, progress: _Progress, rotation: int) -> int:
        """A rolling restart goes round the nodes in id order from the one its ``start`` picks
        (at its first rotation); the other broker faults pick theirs by ``broker``."""
        fault = progress.plan.fault
        if isinstance(fault, BrokerRollingRestart):
            nodes = self.env.broker_ids
            if progress.first is None:
                progress.first = self.pick(fault.start)
            return nodes[(nodes.index(progress.first) + rotation) % len(nodes)]
        assert isinstance(fault, BrokerBounce | BrokerKill | BrokerPause)
        return self.pick(fault.broker)

    def _record(
        self, kind: EventKind, fault: Fault, count: int | None = None, detail: str = ""
    ) -> None:
        for target in self.targets:
            target.history.record(kind, fault=fault.name, detail=detail or fault.kind, count=count)

    def _commit_failure_on(self, fault: CommitFailure) -> None:
        error, apis = fault.error, fault.apis
        if self.runtime.commit_failure is CommitFailureVia.FLAG:
            # Spark's commit is its checkpoint: the runtime fails each batch after the write.
            for target in self.targets:
                flag = commit_failure_flag(target.run_dir)
                flag.parent.mkdir(parents=True, exist_ok=True)
                flag.write_text(error)
            return
        rule = LinkRule(
            Link.CONSUMER_KAFKA,
            "kafka-error",
            api_keys=tuple(KAFKA_APIS[a] for a in apis),
            error_code=KAFKA_ERRORS[error],
        )
        self._rules[fault.name] = self.env.add_link_rule(rule)

    def _commit_failure_off(self, name: str) -> None:
        if self.runtime.commit_failure is CommitFailureVia.FLAG:
            for target in self.targets:
                commit_failure_flag(target.run_dir).unlink(missing_ok=True)
            return
        rule_id = self._rules.pop(name, None)
        if rule_id is not None:
            self.env.remove_link_rule(rule_id)

    def _failpoint_on(self, fault: MongoFailCommand) -> None:
        data: dict[str, object] = {
            "failCommands": list(fault.commands),
            "errorCode": fault.error_code,
            "appName": CONSUMER_APP,  # the consumers only, not the harness's own reads
        }
        if fault.labels:
            data["errorLabels"] = list(fault.labels)
        mode: object = {"times": fault.times} if fault.times else "alwaysOn"
        client: MongoClient[dict[str, Any]] = MongoClient(self.env.mongo_uri)
        with client:
            client.admin.command("configureFailPoint", "failCommand", mode=mode, data=data)
        self._failpoint = True

    def _failpoint_off(self) -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(self.env.mongo_uri)
        with client:
            client.admin.command("configureFailPoint", "failCommand", mode="off")
        self._failpoint = False

    def restore(self) -> None:
        """Undo every fault still in force (the run ended, or failed, inside a window): lift
        rules and failpoints, thaw paused nodes, start stopped ones (not waiting for them)."""
        for rule_id in self._rules.values():
            self.env.remove_link_rule(rule_id)
        self._rules.clear()
        for target in self.targets:
            commit_failure_flag(target.run_dir).unlink(missing_ok=True)
        if self._failpoint:
            self._failpoint_off()
        for node in sorted(self._paused):
            self.env.resume(Component.KAFKA, broker=node)
        self._paused.clear()
        for node in sorted(self._down):
            if not self.env.broker_stopped(node):
                self.env.kill(Component.KAFKA, broker=node)  # a stop still under way
            self.env.begin_start_broker(node)
        self._down.clear()
        faults = {p.name: p.fault for p in self.schedule}
        for name in sorted(self._opened):
            self._record(EventKind.FAULT_END, faults[name])
        self._opened.clear()
