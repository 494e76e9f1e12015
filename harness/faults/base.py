"""What every fault family is made of (Jepsen's ``nemesis/combined.clj`` packages are the model:
one family keeps its record, its schedule and its action together, in one module of
``harness.faults.families``).

A family's record is a frozen dataclass parsed from a scenario's YAML. It says

* ``problems()`` - what is wrong with its own fields;
* ``steps(seed)`` - the steps the nemesis takes, a pure function of the seed (``()`` for a
  fault armed inside the runtime, or one the workload carries);
* ``actor(context)`` - who takes those steps on an environment during one run, and undoes what
  is still in force when the run ends;
* ``refusals`` and ``reach`` - before anything starts: what the backend or the pipeline cannot
  do for it, and whether the workload reaches it;
* ``why_unfired`` - after the run, from one variant's history: why it did not fire;
* ``draw(rng, space)`` - one such fault at random, as a scenario entry (``chaoslab explore``):
  its parameter ranges live in its module, beside its record and its steps.

Everything else in the lab asks these of a fault and never asks which family it is.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities, Environment, LinkRule
from harness.environment.spark import WORKERS, SparkCluster
from harness.errors import LabError
from harness.history.events import EventKind, HistoryEvent, HistoryWriter
from harness.pipeline.crash import CrashPlan
from harness.pipeline.runtimes import DEFAULT as DEFAULT_RUNTIME
from harness.pipeline.runtimes import CommitFailureVia, Runtime
from harness.pipeline.supervisor import RuntimeSupervisor
from harness.records import Problem
from harness.sources.spec import SourceKind
from harness.workload.generator import Burst

START = "start"  # a fault's window opens (recorded in the history)
END = "end"  # and closes


class FaultStuck(LabError):
    """A waiting step of a fault never came true (a node that did not come back)."""


def needs_cdc_source(setting: Setting, does: str, at: str = "") -> list[Problem]:
    """The refusal of a fault that acts on a CDC source's database (``does`` says how), beside
    a source that has none."""
    if setting.source == SourceKind.DEBEZIUM:
        return []
    return [(at, f"{does}, and the scenario's source is {setting.source} (source: debezium)")]


def needs_link_proxies(backend: BackendAbilities) -> list[Problem]:
    """The refusal of a fault that acts through the environment's fault proxy."""
    return [] if backend.link_faults else [("", f"the {backend.name} backend has no link proxies")]


def needs_server_control(backend: BackendAbilities, what: str) -> list[Problem]:
    """The refusal of a fault that stops, kills or pauses ``what`` (a server)."""
    if backend.server_control:
        return []
    return [("", f"the {backend.name} environment did not start {what}: it cannot stop, kill or "
             "pause it")]  # fmt: skip


def needs_containers(backend: BackendAbilities) -> list[Problem]:
    """The refusal of a fault that acts on containers."""
    if backend.containers:
        return []
    return [("", f"the {backend.name} backend runs no containers (use --backend containers)")]


class ContainerTarget(StrEnum):
    """Which containers a container fault acts on."""

    CONSUMER = "consumer"  # every consumer of every variant running
    MONGO = "mongo"
    BROKER = "broker"  # the node the fault's ``broker`` names
    SPARK_WORKER = "spark-worker"  # the standalone worker the fault's ``worker`` names


def target_problems(
    target: ContainerTarget, broker: int, worker: int, setting: Setting, backend: BackendAbilities
) -> list[Problem]:
    """Why a container fault on ``target`` cannot run in ``setting`` on ``backend``."""
    found = needs_containers(backend)
    nodes = backend.nodes
    if target is ContainerTarget.BROKER and nodes is not None and broker not in nodes:
        found.append(("broker", f"the cluster's nodes are {list(nodes)}, not {broker}"))
    if target is ContainerTarget.SPARK_WORKER:
        if worker not in WORKERS:
            found.append(
                ("worker", f"the Spark cluster's workers are {list(WORKERS)}, not {worker}")
            )
        spark_only = all(r.spark for r in setting.runtimes)
        if not spark_only or setting.spark_cluster is not SparkCluster.STANDALONE:
            found.append(("target", "a Spark worker exists when the scenario runs only spark, "
                                    "with pipeline.spark_cluster: standalone"))  # fmt: skip
    return found


def positive(name: str, value: float, *, allow_zero: bool = False) -> list[Problem]:
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        return [(name, f"must be {bound}, got {value}")]
    return []


@dataclass(frozen=True)
class Step:
    """One step of a fault's plan. ``action`` is START, END or one of the family's own."""

    action: str
    at: float | None = None  # seconds after the run started (first step only)
    # The fault whose window's end starts ``at``'s clock instead (first step only): a
    # scenario's faults one after the other however long each took on a loaded machine.
    following: str = ""
    at_event: int | None = None  # acknowledged records (first step, or a producer burst's end)
    after: float = 0.0  # seconds after the previous step of the same fault (at least)
    rotation: int = 0  # which rotation of a rolling restart
    hard: bool = False  # a broker stop: SIGKILL instead of SIGTERM
    waits: bool = False  # due only once the actor says its condition holds (a node is back)

    def describe(self) -> str:
        when = (
            f"at the end of {self.following} +{self.at:.2f}s"
            if self.at is not None and self.following
            else f"at {self.at:.2f}s"
            if self.at is not None
            else f"at event {self.at_event}"
            if self.at_event is not None
            else f"+{self.after:.2f}s"
        )
        suffix = f" (rotation {self.rotation + 1})" if self.rotation else ""
        return f"{when} {self.action}{suffix}"


@dataclass(frozen=True)
class Target:
    """One variant's consumers, as the faults see them."""

    history: HistoryWriter  # source "nemesis", in the variant's history directory
    supervisor: RuntimeSupervisor
    run_dir: Path
    runtime: Runtime  # says how a commit failure reaches its commits
    label: str = ""  # the variant's label and name (coordinator-of: names either)
    name: str = ""
    group: str = ""  # its consumer group
    checkpoint: str = ""  # its Spark query's checkpoint ("" for other runtimes)


MONGO_HELD = "mongo"  # what Context.held calls MongoDB


@dataclass(frozen=True)
class Context:
    """What an actor may act on during one run: the environment, the consumers of every
    variant running side by side (on one runtime or several) and their topic."""

    env: Environment
    targets: Sequence[Target]
    topic: str = ""
    # A source's own processes, as a fault that names them reaches them (``of: source``): not
    # among ``targets``, which every other fault takes for the lanes' consumers.
    sources: Sequence[Target] = ()
    database: str = ""  # a CDC source's database (its URI), where its faults act
    # Kafka nodes a fault holds stopped or paused, and by which fault: another fault due on
    # such a node waits until it is back (two faults restarting one node at once would each
    # wait for a state the other undid); MongoDB likewise, under MONGO_HELD.
    held: dict[int | str, str] = field(default_factory=dict)

    def hold(self, server: int | str, fault: Fault) -> bool:
        """Take ``server`` for ``fault`` (a Kafka node id, or MONGO_HELD), unless another fault
        holds it; True if ``fault`` holds it now."""
        holder = self.held.setdefault(server, fault.name)
        return holder == fault.name

    @property
    def everyone(self) -> list[Target]:
        """The lanes' consumers and the source's processes."""
        return [*self.targets, *self.sources]

    def release(self, fault: Fault) -> None:
        """Let go of what ``fault`` holds."""
        for server in [s for s, holder in self.held.items() if holder == fault.name]:
            del self.held[server]

    def record(
        self, kind: EventKind, fault: Fault, count: int | None = None, detail: str = ""
    ) -> None:
        """An event of ``fault`` in every variant's history, and the source's."""
        for target in self.everyone:
            target.history.record(kind, fault=fault.name, detail=detail or fault.kind, count=count)


def container_names(
    context: Context, target: ContainerTarget, broker: int, worker: int
) -> list[str]:
    """The containers a fault on ``target`` acts on now."""
    match target:
        case ContainerTarget.CONSUMER:
            return [n for t in context.targets for n in t.supervisor.client_names()]
        case ContainerTarget.MONGO:
            return ["mongo"]
        case ContainerTarget.BROKER:
            return [f"kafka-{broker}"]
        case ContainerTarget.SPARK_WORKER:
            return [f"spark-worker-{worker}"]


class Actor:
    """Takes a fault's own steps (not START and END) during one run. This one has none."""

    def take(self, step: Step) -> None:
        raise ValueError(f"no action {step.action!r} here")

    def holds(self, step: Step) -> bool:
        """Whether a waiting step's condition is true now (asked again at the next tick if
        not; a transient error of the cluster counts as not yet)."""
        return True

    def waits_until(self, step: Step) -> float | None:
        """When a waiting step's own deadline comes (``time.monotonic()``), if it has one:
        ``holds`` says True by then whatever the servers do, and the nemesis does not give it
        up as stuck before - a wait that may outlast the nemesis's WAIT_TIMEOUT_S (Connect's
        scheduled rebalance, five minutes by default)."""
        return None

    def undo(self) -> None:
        """Undo whatever is still in force (the run ended, or failed, inside its window),
        without waiting for the servers."""

    def unsettled(self) -> list[str]:
        """What it started again that is not back yet, asked after ``undo`` until none is or a
        deadline passes (``Nemesis.settle``)."""
        return []

    @property
    def about(self) -> str:
        """What it acts on, for an error message (``node 2``)."""
        return ""


@dataclass
class ContainersActor(Actor):
    """Acts on containers (a container fault): remembers which, to undo and to name them."""

    fault: Fault
    context: Context
    acted: list[str] = field(default_factory=list)

    @property
    def about(self) -> str:
        return ", ".join(self.acted) or "containers"


@dataclass
class LinkRuleActor(Actor):
    """Puts a link rule in force between the steps ``on`` and ``off``. With ``tally`` (what
    the rule's acts are, e.g. "replies dropped"), the step ``off`` records how often it acted
    (a FAULT_STEP with that count): what a fault did that no client's history shows."""

    context: Context
    rule: LinkRule
    on: str
    off: str
    rule_id: str | None = None
    fault: Fault | None = None
    tally: str = ""

    def take(self, step: Step) -> None:
        if step.action == self.on:
            self.rule_id = self.context.env.add_link_rule(self.rule)
        elif step.action == self.off:
            acted = self.undo_rule()
            if self.tally and self.fault is not None and acted is not None:
                detail = f"{self.tally}: {acted}"
                self.context.record(EventKind.FAULT_STEP, self.fault, count=acted, detail=detail)
        else:
            super().take(step)

    def undo(self) -> None:
        self.undo_rule()

    def undo_rule(self) -> int | None:
        """Lift the rule if it is in force; how often it acted (None if it was not)."""
        if self.rule_id is None:
            return None
        rule_id, self.rule_id = self.rule_id, None
        return self.context.env.remove_link_rule(rule_id)


@dataclass(frozen=True)
class Setting:
    """What a fault is checked against before a run: the scenario's workload and pipeline."""

    events: int
    batch_size: int
    consumers: int
    partitions: int
    variants: frozenset[str]  # names and labels
    runtimes: frozenset[Runtime] = frozenset({DEFAULT_RUNTIME})
    spark_cluster: SparkCluster = SparkCluster.LOCAL
    relays: frozenset[str] = frozenset()  # an outbox scenario's relays (names and labels)
    source: str = "producer"  # where its records come from (harness.sources.spec.SourceKind)

    @property
    def commit_failure(self) -> frozenset[CommitFailureVia]:
        """How the scenario's runtimes fail commits."""
        return frozenset(r.commit_failure for r in self.runtimes)

    @property
    def readers(self) -> int:
        """Consumers that get records (no more than the partitions)."""
        return max(1, min(self.consumers, self.partitions))

    @property
    def per_consumer(self) -> int:
        """The most records one consumer gets."""
        return math.ceil(self.events / self.readers)


@dataclass(frozen=True)
class Space:
    """What a drawn fault may aim at, and when: the setting of the run it is drawn for, the
    backend's abilities, and about how long the run's work lasts."""

    setting: Setting
    backend: BackendAbilities
    horizon_s: float  # a timed fault starts within this many seconds of the schedule's clock

    def when(self, rng: random.Random) -> dict[str, Any]:
        """A timed fault's start: a time, or a count of acknowledged records (half each)."""
        if rng.random() < 0.5 and self.setting.events > 1:
            return {"at_event": rng.randrange(1, self.setting.events)}
        return {"at": round(rng.uniform(0.0, self.horizon_s), 1)}

    def broker(self, rng: random.Random) -> Any:
        """A broker selector's YAML: a node, the controller, a variant's group coordinator, a
        partition's leader (moved by the time it acts: decided then)."""
        variants = sorted(self.setting.variants)
        choices: list[Any] = [rng.choice(self.backend.nodes or (1, 2, 3)), "controller"]
        choices.append({"coordinator-of": rng.choice(variants)} if variants else "controller")
        choices.append({"leader-of": rng.randrange(self.setting.partitions)})
        return rng.choice(choices)

    @staticmethod
    def seconds(rng: random.Random, low: float, high: float) -> float:
        return round(rng.uniform(low, high), 1)

    def batch(self, rng: random.Random) -> dict[str, int]:
        """Which batch of a consumer a crash point strikes, and after how many documents."""
        batches = max(1, math.ceil(self.setting.per_consumer / self.setting.batch_size))
        most = min(self.setting.batch_size, self.setting.per_consumer)
        return {"at_batch": rng.randint(1, batches), "after_docs": rng.randint(1, max(1, most))}


@dataclass(frozen=True)
class Seen:
    """One variant's history, as a fault asks whether it fired."""

    events: Sequence[HistoryEvent]
    workload_events: int
    caught_up: float  # when the variant had consumed everything (inf if never)
    clock: float | None  # when the fault schedule started

    def since(self, t: float) -> str:
        return f"+{t - self.clock:.1f}s" if self.clock is not None else f"at {t:.1f}"


class Fault(ABC):
    """A fault of a scenario: the base of every family's record."""

    kind: ClassVar[str]
    # Needs each variant's own consumer processes (it kills or freezes one of them).
    targets_consumers: ClassVar[bool] = False
    # Acts only on its own run: its consumers, its workload, its Spark application - so another
    # scenario may run beside it unharmed (``harness.schedule_runs``). One that acts on a server
    # or a link of the environment (every run's) needs the environment to itself.
    own_run_only: ClassVar[bool] = False
    # Seconds the run goes on after the fault's window ended, however soon the work was done:
    # what the fault set off may still be under way then.
    aftermath_s: ClassVar[float] = 0.0
    name: str

    def problems(self) -> list[Problem]:
        return []

    @abstractmethod
    def steps(self, seed: int) -> tuple[Step, ...]:
        """The nemesis's steps, a pure function of the seed."""

    def actor(self, context: Context) -> Actor:
        return Actor()

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        """Why this backend or pipeline cannot perform it ([] if it can)."""
        return []

    def reach(self, setting: Setting) -> tuple[str, str]:
        """(why the workload cannot reach it, why it may not): '' where it will."""
        return "", ""

    def why_unfired(self, seen: Seen) -> str:
        """Why it did not fire in a run ('' if it did): a window fired if it opened before the
        variant had consumed everything - later, it hit nothing."""
        starts = [
            e.t for e in seen.events if e.kind is EventKind.FAULT_START and e.fault == self.name
        ]
        if starts and min(starts) <= seen.caught_up:
            return ""
        done = f" (the variant had consumed everything at {seen.since(seen.caught_up)})"
        if not starts:
            return "it was due after the run's work was done" + (
                done if seen.caught_up < math.inf else ""
            )
        return f"it started at {seen.since(min(starts))}, after the work was done{done}"

    def aim(self) -> str:
        """What it acts on, as a kind of target ("the controller", "one consumer"), not which
        node: what explore's coverage counts."""
        return "the workload"

    @classmethod
    def injects(cls, runtime: Runtime) -> frozenset[EventKind]:
        """The events its window makes up on a lane of ``runtime``: errors the lab has a server
        answer with instead of the server deciding them (harness.history.origin). None here:
        what a server or a client does under this fault is its own."""
        return frozenset()

    def crash_plan(self, seed: int) -> CrashPlan | None:
        """A crash or pause armed inside the runtime, if it is one."""
        return None

    def burst(self) -> Burst | None:
        """A window of the workload's own records, if it is one."""
        return None

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        """One such fault at random (a scenario entry without ``kind``), or None if it cannot
        be drawn for ``space``. Families that do not say are never drawn."""
        return None

    @classmethod
    @abstractmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        """A scenario entry for one such fault (without ``kind``)."""


@dataclass(frozen=True)
class _Following:
    # Another fault of the scenario: a timed fault's ``at`` counts from the end of its window
    # (Jepsen's generators compose phases so), not from the schedule's clock. Keyword-only, and
    # in a base of its own, so that each family's record keeps its fields in its own order.
    after: str | None = field(default=None, kw_only=True)


class Timed(_Following, Fault):
    """A fault that starts ``at`` seconds into the run - or, with ``after``, ``at`` seconds
    after the named fault's window ended - or once ``at_event`` records were acknowledged,
    plus a seeded ``jitter``."""

    at: float | None
    at_event: int | None
    jitter: float

    def trigger_problems(self) -> list[Problem]:
        if (self.at is None) == (self.at_event is None):
            return [("at", "give exactly one of 'at' (seconds) or 'at_event' (records)")]
        found = []
        if self.after is not None and self.at is None:
            found.append(("after", "counts 'at' seconds from that fault's end: give 'at'"))
        if self.after == self.name:
            found.append(("after", "names this fault itself"))
        if self.at is not None and self.at < 0:
            found.append(("at", f"must be >= 0, got {self.at}"))
        if self.at_event is not None and self.at_event < 0:
            found.append(("at_event", f"must be >= 0, got {self.at_event}"))
        return found + positive("jitter", self.jitter, allow_zero=True)

    def problems(self) -> list[Problem]:
        return self.trigger_problems()

    def opening(self, seed: int) -> Step:
        """The first step: its window opens."""
        offset = (
            random.Random(f"{seed}:{self.name}").uniform(0, self.jitter) if self.jitter else 0.0
        )
        if self.at_event is not None:
            return Step(START, at_event=self.at_event, after=offset)
        assert self.at is not None  # a parsed fault has exactly one of at and at_event
        return Step(START, at=self.at + offset, following=self.after or "")

    def window(self, seed: int, on: str, off: str, duration: float) -> tuple[Step, ...]:
        """Start; ``on``; ``off`` ``duration`` seconds later; end."""
        return (self.opening(seed), Step(on), Step(off, after=duration), Step(END))

    def reach(self, setting: Setting) -> tuple[str, str]:
        if self.at_event is not None and self.at_event > setting.events:
            return (
                f"starts once {self.at_event} records were acknowledged, and the workload has "
                f"{setting.events}",
                "",
            )
        return "", ""

    @staticmethod
    def when(at: float, at_event: int | None) -> dict[str, Any]:
        """The trigger of an example entry."""
        return {"at": at} if at_event is None else {"at_event": at_event}
