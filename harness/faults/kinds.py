"""The fault kinds a scenario can schedule, one small record each, parsed from YAML.

Timed faults start ``at`` seconds after the run starts, or once ``at_event`` records have been
acknowledged, and last ``duration`` seconds. Consumer crashes and pauses are armed in the
runtime at a named crash point; producer bursts are windows of the workload's event stream.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, fields
from enum import Enum, StrEnum
from typing import Any, ClassVar, Union

from harness.environment.base import Link
from harness.pipeline.crash import CrashPlan, CrashPoint

# Kafka's error codes and API keys the commit-failure fault speaks (seed 002's log lines).
KAFKA_ERRORS = {
    "REQUEST_TIMED_OUT": 7,
    "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15,
    "NOT_COORDINATOR": 16,
}
KAFKA_APIS = {"OffsetCommit": 8, "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12}


# (field relative to the fault, what is wrong with it)
Problem = tuple[str, str]


class FieldError(ValueError):
    """A fault's field is wrong: ``field`` names it relative to the fault."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


class FieldErrors(ValueError):
    """Every problem of one fault entry, so that a user fixes them in one go."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{f}: {p}" if f else p for f, p in problems))
        self.problems = problems


class Timed:
    """Mixin: when a timed fault starts."""

    name: str
    at: float | None
    at_event: int | None
    jitter: float

    def trigger_problems(self) -> list[Problem]:
        if (self.at is None) == (self.at_event is None):
            return [("at", "give exactly one of 'at' (seconds) or 'at_event' (records)")]
        found = []
        if self.at is not None and self.at < 0:
            found.append(("at", f"must be >= 0, got {self.at}"))
        if self.at_event is not None and self.at_event < 0:
            found.append(("at_event", f"must be >= 0, got {self.at_event}"))
        return found + _positive("jitter", self.jitter, allow_zero=True)


def _positive(name: str, value: float, *, allow_zero: bool = False) -> list[Problem]:
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        return [(name, f"must be {bound}, got {value}")]
    return []


class Pick(StrEnum):
    """How a broker fault picks its Kafka node."""

    NODE = "node"  # a node id
    CONTROLLER = "controller"  # the KRaft quorum's leader
    COORDINATOR_OF = "coordinator-of"  # the group coordinator of a variant's consumer group
    LEADER_OF = "leader-of"  # the leader of a partition of the run's topic


@dataclass(frozen=True)
class BrokerSelector:
    """Which Kafka node a broker fault acts on, decided when it acts (the controller and the
    coordinators move). In a scenario: ``broker: 2``, ``broker: controller``,
    ``broker: {coordinator-of: naive}`` (a variant's label or name) or
    ``broker: {leader-of: 0}`` (a partition of the run's topic)."""

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


FIRST_NODE = BrokerSelector()


@dataclass(frozen=True)
class BrokerBounce(Timed):
    """Stop a Kafka node (SIGTERM: a controlled shutdown; SIGKILL when ``hard``), then start it
    again as soon as it is gone; the window ends once it is a registered broker again."""

    kind: ClassVar[str] = "broker-bounce"
    name: str
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    hard: bool = False
    broker: BrokerSelector = FIRST_NODE

    def problems(self) -> list[Problem]:
        return self.trigger_problems()


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
        found = self.trigger_problems() + _positive("interval", self.interval, allow_zero=True)
        if self.rotations < 1:
            found.append(("rotations", f"must be >= 1, got {self.rotations}"))
        return found


@dataclass(frozen=True)
class _BrokerWindow(Timed):
    name: str
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    broker: BrokerSelector = FIRST_NODE

    def problems(self) -> list[Problem]:
        return self.trigger_problems() + _positive("duration", self.duration)


@dataclass(frozen=True)
class BrokerKill(_BrokerWindow):
    """kill -9 a Kafka node and leave it down for ``duration`` seconds, then start it again;
    the window ends once it is a registered broker again."""

    kind: ClassVar[str] = "broker-kill"


@dataclass(frozen=True)
class BrokerPause(_BrokerWindow):
    """SIGSTOP a Kafka node for ``duration`` seconds: connections open, nothing answers."""

    kind: ClassVar[str] = "broker-pause"


@dataclass(frozen=True)
class ConsumerCrash:
    """SIGKILL a consumer at a named crash point: once, every Nth batch, or with a seeded
    probability. The runtime is restarted after ``restart_after`` seconds."""

    kind: ClassVar[str] = "consumer-crash"
    name: str
    point: CrashPoint
    at_batch: int = 1
    every: int | None = None
    probability: float | None = None
    times: int = 1
    after_docs: int = 1
    restart_after: float | None = None  # default: the pipeline's restart_delay_s

    def plan(self, seed: int) -> CrashPlan:
        return CrashPlan(
            self.point,
            at_batch=self.at_batch,
            every=self.every,
            probability=self.probability,
            seed=seed,
            times=self.times,
            after_docs=self.after_docs,
            name=self.name,
        )

    def problems(self) -> list[Problem]:
        found = self.plan(0).problems()
        if self.restart_after is not None:
            found += _positive("restart_after", self.restart_after, allow_zero=True)
        return found


@dataclass(frozen=True)
class ConsumerPause:
    """SIGSTOP a consumer at a named point for ``duration`` seconds - a stalled (zombie) consumer
    whose partitions move on while it is frozen, then it wakes and finishes its batch."""

    kind: ClassVar[str] = "consumer-pause"
    name: str
    point: CrashPoint
    duration: float
    at_batch: int = 1
    after_docs: int = 1
    times: int = 1

    def plan(self, seed: int) -> CrashPlan:
        return CrashPlan(
            self.point,
            at_batch=self.at_batch,
            seed=seed,
            times=self.times,
            after_docs=self.after_docs,
            pause_s=self.duration,
            name=self.name,
        )

    def problems(self) -> list[Problem]:
        # plan() reports a bad duration too (as pause_s): once is enough.
        return _positive("duration", self.duration) + [
            p for p in self.plan(0).problems() if p[0] != "duration"
        ]


@dataclass(frozen=True)
class ConsumerKill(Timed):
    """SIGKILL the consumers (all, or the one at index ``consumer``) at a time."""

    kind: ClassVar[str] = "consumer-kill"
    name: str
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    consumer: int | None = None

    def problems(self) -> list[Problem]:
        found = self.trigger_problems()
        if self.consumer is not None and self.consumer < 0:
            found.append(("consumer", f"must be >= 0, got {self.consumer}"))
        return found


@dataclass(frozen=True)
class CommitFailure(Timed):
    """Commits fail for ``duration`` seconds after the sink was written. Listener: the proxy
    answers the consumers' ``apis`` requests with ``error`` (the real error, seen by the real
    client). Spark: the batch fails between foreachBatch's write and the checkpoint commit."""

    kind: ClassVar[str] = "commit-failure"
    name: str
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    error: str = "NOT_COORDINATOR"
    apis: tuple[str, ...] = ("OffsetCommit",)

    def problems(self) -> list[Problem]:
        return (
            self.trigger_problems()
            + _positive("duration", self.duration)
            + _kafka_error("error", self.error)
            + _kafka_apis("apis", self.apis)
        )


class NetworkAction(StrEnum):
    CUT = "cut"  # nothing gets through either way; connections stay open
    RESET = "reset"  # connections are closed, new ones too
    DELAY = "delay"  # delay_ms added each way


@dataclass(frozen=True)
class NetworkFault(Timed):
    """Cut, reset or delay one link for ``duration`` seconds, through the environment's proxy."""

    kind: ClassVar[str] = "network"
    name: str
    link: Link
    action: NetworkAction
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    delay_ms: int = 0

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + _positive("duration", self.duration)
        if self.action is NetworkAction.DELAY:
            found += _positive("delay_ms", self.delay_ms)
        return found


@dataclass(frozen=True)
class MongoFailCommand(Timed):
    """A ``failCommand`` failpoint for the consumers' MongoDB commands, for ``duration`` seconds
    (or for its first ``times`` matching commands, whichever ends first)."""

    kind: ClassVar[str] = "mongo-failcommand"
    name: str
    commands: tuple[str, ...]
    error_code: int
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    labels: tuple[str, ...] = ()
    times: int | None = None

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + _positive("duration", self.duration)
        if not self.commands:
            found.append(("commands", "name at least one command, e.g. [commitTransaction]"))
        if self.times is not None and self.times < 1:
            found.append(("times", f"must be >= 1, got {self.times}"))
        return found


@dataclass(frozen=True)
class ProducerBurst:
    """Records ``start_event <= seq < start_event + events`` of the workload get ``fraction``
    more resends (an upstream retry storm) or poison records (a bad deploy)."""

    name: str
    start_event: int
    events: int
    fraction: float

    def problems(self) -> list[Problem]:
        found = _positive("start_event", self.start_event, allow_zero=True)
        found += _positive("events", self.events)
        if not 0 < self.fraction < 1:
            found.append(("fraction", f"must be in (0, 1), got {self.fraction}"))
        return found


@dataclass(frozen=True)
class ProducerResend(ProducerBurst):
    kind: ClassVar[str] = "producer-resend"


@dataclass(frozen=True)
class PoisonBurst(ProducerBurst):
    kind: ClassVar[str] = "poison"


Fault = (
    BrokerBounce
    | BrokerRollingRestart
    | BrokerKill
    | BrokerPause
    | ConsumerCrash
    | ConsumerPause
    | ConsumerKill
    | CommitFailure
    | NetworkFault
    | MongoFailCommand
    | ProducerResend
    | PoisonBurst
)
KINDS: dict[str, type] = {cls.kind: cls for cls in typing.get_args(Fault)}


def _kafka_error(field: str, error: str) -> list[Problem]:
    if error not in KAFKA_ERRORS:
        return [(field, f"unknown Kafka error {error!r} ({', '.join(KAFKA_ERRORS)})")]
    return []


def _kafka_apis(field: str, apis: tuple[str, ...]) -> list[Problem]:
    if not apis:
        return [(field, "name at least one API")]
    return [
        (field, f"unknown Kafka API {api!r} ({', '.join(KAFKA_APIS)})")
        for api in apis
        if api not in KAFKA_APIS
    ]


# -- parsing --------------------------------------------------------------------------------


def parse_fault(raw: Any, name: str) -> Fault:
    """A fault from its YAML mapping; ``FieldErrors`` names every field that is wrong."""
    if not isinstance(raw, dict):
        raise FieldErrors([("", f"a fault must be a mapping, got {type(raw).__name__}")])
    spec = dict(raw)
    kind = spec.pop("kind", None)
    if kind not in KINDS:
        raise FieldErrors([("kind", f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")])
    fault: Fault = _build(KINDS[kind], {"name": spec.pop("name", name), **spec}, "")
    problems = fault.problems()
    if problems:
        raise FieldErrors(problems)
    return fault


def _build(cls: type, raw: dict[str, Any], prefix: str) -> Any:
    """An instance of ``cls`` from ``raw``, or FieldErrors naming every field that is wrong."""
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    problems: list[Problem] = [
        (f"{prefix}{key}", f"unknown field (known: {', '.join(sorted(known))})")
        for key in raw
        if key not in known
    ]
    values = {}
    for name, f in known.items():
        if name in raw:
            try:
                values[name] = _coerce(hints[name], raw[name], f"{prefix}{name}")
            except FieldError as exc:
                problems.append((exc.field, exc.problem))
            except FieldErrors as exc:
                problems += exc.problems
        elif f.default is MISSING and f.default_factory is MISSING:
            problems.append((f"{prefix}{name}", "is required"))
    if problems:
        raise FieldErrors(problems)
    return cls(**values)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if value is None else _coerce(options[0], value, where)
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise FieldError(where, f"must be a list, got {value!r}")
        item = typing.get_args(hint)[0]
        return tuple(_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if hint is BrokerSelector:
        try:
            return BrokerSelector.parse(value)
        except FieldError as exc:
            raise FieldError(where, exc.problem) from None
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            choices = ", ".join(m.value for m in hint)
            raise FieldError(where, f"unknown {value!r} (choose from {choices})") from None
    if hint is bool:
        if not isinstance(value, bool):
            raise FieldError(where, f"must be true or false, got {value!r}")
        return value
    if hint in (int, float):
        ok = isinstance(value, int) if hint is int else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            raise FieldError(where, f"must be {'an integer' if hint is int else 'a number'}, "
                                    f"got {value!r}")  # fmt: skip
        return hint(value)
    if hint is str:
        if not isinstance(value, str):
            raise FieldError(where, f"must be a string, got {value!r}")
        return value
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        if not isinstance(value, dict):
            raise FieldError(where, f"must be a mapping, got {value!r}")
        return _build(hint, value, f"{where}.")
    raise TypeError(f"no coercion for {hint!r}")  # a programming error, not bad input


def example(
    kind: str, *, at: float = 3.0, at_event: int | None = None, duration: float = 5.0
) -> dict[str, Any]:
    """A scenario entry for one fault of ``kind`` starting at ``at`` seconds (or once
    ``at_event`` records were acknowledged) - what a notebook or a reader exploring the lab
    starts from before tuning the fields."""
    timed: dict[str, Any] = (
        {"kind": kind, "at": at}
        if at_event is None
        else {
            "kind": kind,
            "at_event": at_event,
        }
    )
    examples: dict[str, dict[str, Any]] = {
        "broker-bounce": {**timed, "hard": True},
        "broker-rolling-restart": {**timed, "rotations": 3},
        "broker-kill": {**timed, "duration": duration},
        "broker-pause": {**timed, "duration": duration},
        "consumer-crash": {"kind": kind, "point": "after_write_before_commit", "at_batch": 2},
        "consumer-pause": {
            "kind": kind,
            "point": "mid_write",
            "after_docs": 10,
            "at_batch": 2,
            "duration": duration,
        },
        "consumer-kill": {**timed},
        "commit-failure": {**timed, "duration": duration, "apis": ["OffsetCommit", "Heartbeat"]},
        "network": {**timed, "duration": duration, "link": "consumer-mongo", "action": "cut"},
        "mongo-failcommand": {
            **timed,
            "duration": duration,
            "commands": ["insert", "update"],
            "error_code": 10107,
        },
        "producer-resend": {"kind": kind, "start_event": 100, "events": 200, "fraction": 0.2},
        "poison": {"kind": kind, "start_event": 100, "events": 200, "fraction": 0.2},
    }
    if kind not in examples:
        raise FieldError("kind", f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    return examples[kind]
