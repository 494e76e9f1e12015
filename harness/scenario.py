"""Scenario files: what to run, and what each variant is expected to show.

    name: baseline
    description: No faults. Every variant must deliver every change exactly once.
    seed: 7
    workload: {events: 2000, keys: 200, key_skew: 0.5, poison_fraction: 0.01, partitions: 3}
    runtimes: [listener, spark]
    pipeline: {batch_size: 250, consumers: 1}
    variants: [naive, idempotent, {name: dedup-log, key: business}]
    faults:
      - {kind: consumer-crash, point: after_write_before_commit, at_batch: 3}
      - {kind: broker-bounce, at: 5, hard: true}
    expect:
      "*": {duplicates: 0, lost: 0, stale: 0}
      naive: {duplicates: ">0"}

Every problem is reported as ``FILE: FIELD: what is wrong``, before anything starts.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar

import yaml

from harness.checker.model import FOLLOWED_COUNTS, RelayStage, Verdict
from harness.environment.backends import names as backend_names
from harness.environment.base import BackendAbilities
from harness.environment.spark import SparkCluster
from harness.errors import BadInput
from harness.faults.base import Fault, Setting, Timed
from harness.faults.kinds import parse_fault
from harness.outbox.relays import make_relay
from harness.outbox.workload import OutboxSpec
from harness.pipeline import mongo_options
from harness.pipeline.command import program_problem
from harness.pipeline.connect import settings as connect
from harness.pipeline.connect import validate as connect_validate
from harness.pipeline.crash import CrashPlan
from harness.pipeline.runtimes import DEFAULT as DEFAULT_RUNTIME
from harness.pipeline.runtimes import RELAY, Runtime, get_runtime, names
from harness.pipeline.variants import make_variant
from harness.pipeline.variants.connect import Connect
from harness.records import FieldError, FieldErrors, Problem, build, coerce
from harness.sources.spec import SourceSpec
from harness.workload.generator import Burst, WorkloadSpec
from harness.workload.producer import ProducerSpec

EXPECTABLE = (
    "duplicates", "duplicated_keys", "lost", "stale", "dead_lettered", "poison_missing",
    "poison_stored", "phantoms", "in_sink", "unique_in_sink", "acked", "offsets_consistent",
    "topic_duplicates",
    # Whether the pipeline stopped for good (true / false).
    "stopped",
    # An outbox relay's stage (seed 003): the target topics against what MongoDB acknowledged.
    "published_lost", "published_duplicates", "history_lost",
    # Where the bad records went, the lane's writes followed (harness.checker.bad_records).
    *FOLLOWED_COUNTS,
)  # fmt: skip
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le,
    ">": operator.gt, "<": operator.lt,
}  # fmt: skip


# Fields of the workload's record that a scenario file does not set: the lab does (its faults'
# bursts of the workload's own records).
INTERNAL_FIELDS = frozenset({"bursts"})
COMMIT_MODES = ("sync", "async")
# Consumer settings the runtimes need as they are (the topic, the group, manual commits).
RESERVED_KAFKA = frozenset(
    {"bootstrap.servers", "group.id", "client.id", "enable.auto.commit", "auto.offset.reset"}
)


class ScenarioError(BadInput):
    """Every problem of a scenario file, one ``FILE: FIELD: problem`` line each."""

    def __init__(self, path: Path | str, problems: Sequence[tuple[str, str]]) -> None:
        super().__init__(
            "\n".join(
                f"{path}: {where}: {what}" if where else f"{path}: {what}"
                for where, what in problems
            )
        )
        self.path = str(path)
        self.problems = list(problems)

    @classmethod
    def one(cls, path: Path | str, where: str, problem: str) -> ScenarioError:
        return cls(path, [(where, problem)])


class Problems:
    """The problems found so far in one file: parsing goes on past a bad field, so that the
    user sees every problem at once instead of one per try."""

    def __init__(self, path: Path | str) -> None:
        self.path = path
        self.found: list[tuple[str, str]] = []

    def add(self, where: str, problem: str) -> None:
        self.found.append((where, problem))

    def raise_any(self) -> None:
        if self.found:
            raise ScenarioError(self.path, self.found)


@dataclass(frozen=True)
class VariantSpec:
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    # The scenario's runtimes it runs on, where not all of them: a Spark connector's variant
    # beside the listener's in one run.
    runtimes: tuple[str, ...] = ()

    def on(self, runtime: str) -> bool:
        return not self.runtimes or runtime in self.runtimes

    @property
    def label(self) -> str:
        return make_variant(self.name, self.options).label

    @property
    def own_runtime(self) -> str | None:
        """The runtime it brings (a command consumer's), or None."""
        runtime = make_variant(self.name, self.options).own_runtime()
        return None if runtime is None else runtime.name


@dataclass(frozen=True)
class RelaySpec(VariantSpec):
    """An outbox relay of the scenario (seed 003), by name and options: the pipeline under test
    of an outbox scenario's lanes (runtime ``relay``), as a variant is of a sink scenario's."""

    @property
    def label(self) -> str:
        return make_relay(self.name, self.options).label

    @property
    def own_runtime(self) -> str | None:
        return RELAY.name


@dataclass(frozen=True)
class PipelineSpec:
    batch_size: int = 250  # records per poll (listener) / per trigger (spark)
    consumers: int = 1  # listener processes in the group
    restart_delay_s: float = 1.0  # before a crashed consumer is started again
    timeout_s: float = 300.0  # for one variant to consume everything
    trigger_ms: int = 200  # spark micro-batch interval
    # spark: local (executors in the driver's JVM) or standalone (the environment's master and
    # two workers; started when a scenario first asks)
    spark_cluster: str = SparkCluster.LOCAL.value
    write_retry_s: float = 60.0  # how long a failing sink write is retried
    parallel: bool = True  # variants side by side over one topic, or one at a time
    commit: str = "sync"  # listener: commit after each batch, waiting (sync) or not (async)
    # listener: librdkafka settings over the lab's (harness.kafka.clients.consumer_config), e.g.
    # {session.timeout.ms: 45000} - a production consumer's, not the lab's quick ones
    kafka: dict[str, Any] = field(default_factory=dict)
    # Every consumer's MongoDB client settings over the drivers' defaults (retryWrites, w,
    # wtimeoutMS, socketTimeoutMS, serverSelectionTimeoutMS, connectTimeoutMS, maxCommitTimeMS):
    # harness.pipeline.mongo_options
    mongo: dict[str, Any] = field(default_factory=dict)
    # connect: the run's Kafka Connect cluster - {workers: 2} and worker settings in Connect's
    # names (offset.flush.interval.ms...), Connect's defaults unless set
    # (harness.pipeline.connect.settings)
    connect: dict[str, Any] = field(default_factory=dict)

    def problems(self) -> list[tuple[str, str]]:
        found = mongo_options.problems(self.mongo)
        found += [(f"connect.{at}", why) for at, why in connect.problems(self.connect)]
        if self.spark_cluster not in set(SparkCluster):
            found.append(
                (
                    "spark_cluster",
                    f"must be one of {', '.join(SparkCluster)}, got {self.spark_cluster!r}",
                )
            )
        if self.commit not in COMMIT_MODES:
            found.append(
                ("commit", f"must be one of {', '.join(COMMIT_MODES)}, got {self.commit!r}")
            )
        for key, value in self.kafka.items():
            if key in RESERVED_KAFKA or not isinstance(value, str | int | float | bool):
                why = "the lab sets it" if key in RESERVED_KAFKA else "a string, number or boolean"
                found.append((f"kafka.{key}", f"cannot be set here ({why})"))
        for name in ("batch_size", "consumers", "trigger_ms"):
            if getattr(self, name) < 1:
                found.append((name, f"must be >= 1, got {getattr(self, name)}"))
        for name in ("restart_delay_s", "timeout_s", "write_retry_s"):
            if getattr(self, name) < 0:
                found.append((name, f"must be >= 0, got {getattr(self, name)}"))
        return found


CUTS = ("demo", "ci")  # the sections a scenario may cut itself by, and --cut's choices


@dataclass(frozen=True)
class Cut:
    """A smaller run of a library scenario that still shows its point, judged by the same
    expectations: ``demo:`` is ``chaoslab demo``'s first look, ``ci:`` the suite's (``make
    test``; the demo's cut where it has no ``ci:``). The variants that show its difference, on
    the runtimes that show it, over a smaller workload; the whole scenario is the library's
    (``make library``)."""

    variants: tuple[str, ...] = ()  # its variants' labels or names; all unless given
    runtimes: tuple[str, ...] = ()  # its runtimes; all unless given
    events: int | None = None  # the workload's events; the scenario's unless given
    faults: tuple[str, ...] = ()  # the names of the faults it keeps; all unless given
    # The file's own fields as the cut has them - shorter waits, where its point survives them:
    # a mapping is merged into the file's (``pipeline``, ``source``, ...), and under
    # ``faults`` or ``variants`` a fault's name or a variant's label names the entry to merge
    # into (``{faults: {outage: {duration: 40}}}``). Checked as the file is.
    settings: dict[str, Any] = field(default_factory=dict)
    # The lab's: the scenario with the settings in, where the cut has some (parse_scenario).
    base: Scenario | None = field(default=None, compare=False, repr=False)

    def problems(self) -> list[Problem]:
        if self.events is not None and self.events < 1:
            return [("events", f"must be >= 1, got {self.events}")]
        return []

    def __str__(self) -> str:
        """What it keeps, as docs/scenarios.md names it: ``naive, transactional on listener;
        1,200 events; faults: gc pause; settings: faults.outage.duration 40``, or ``whole``."""
        on = f" on {', '.join(self.runtimes)}" if self.runtimes else ""
        kept = [f"{', '.join(self.variants) or 'every variant'}{on}"]
        if self.events is not None:
            kept.append(f"{self.events:,} events")
        if self.faults:
            kept.append(f"faults: {', '.join(self.faults)}")
        if self.settings:
            kept.append(f"settings: {', '.join(f'{k} {v}' for k, v in _dotted(self.settings))}")
        return "whole" if self == Cut() else "; ".join(kept)


def _dotted(settings: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """A cut's nested settings as (dotted key, value) pairs, in the file's order."""
    pairs: list[tuple[str, Any]] = []
    for key, value in settings.items():
        if isinstance(value, Mapping):
            pairs += _dotted(value, f"{prefix}{key}.")
        else:
            pairs.append((f"{prefix}{key}", value))
    return pairs


@dataclass(frozen=True)
class Expectation:
    """``duplicates > 0``: of every run; with a ``rate``, of that share of the seeds at least
    (``duplicates: ">0 in 80%"``) - an outcome that is a race, judged by ``chaoslab run
    --repeat N`` and the soak, not by one run."""

    field: str
    op: str
    value: int | bool
    rate: float | None = None  # the share of runs (seeds, or a race's replays) it must hold in

    def holds(self, actual: int | bool | None) -> bool:
        return actual is not None and OPERATORS[self.op](actual, self.value)

    def actual(self, verdict: Verdict, relay: RelayStage | None = None) -> int | bool | None:
        """The value this expectation is about: the verdict's, or the relay stage's."""
        if self.field == "history_lost":
            return None if relay is None else relay.history_lost
        if self.field.startswith("published_"):
            stage = None if relay is None else relay.published
            return getattr(stage, self.field.removeprefix("published_"), None)
        if self.field == "stopped":
            return bool(verdict.stopped)
        if self.field in FOLLOWED_COUNTS and not verdict.followed:
            return None  # its writes were not followed: not known, which no expectation meets
        value: int | bool | None = getattr(verdict, self.field)
        return value

    def failure(self, verdict: Verdict, relay: RelayStage | None = None) -> str | None:
        """None if the verdict meets this expectation (or it is a rate, which one run does
        not decide); else what was expected and found."""
        actual = self.actual(verdict, relay)
        if self.rate is not None or self.holds(actual):
            return None
        return f"expected {self}, got {actual}"

    def __str__(self) -> str:
        of_runs = f" in {self.rate:.0%} of runs" if self.rate is not None else ""
        return f"{self.field} {self.op} {self.value}{of_runs}"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    path: str
    seed: int
    workload: WorkloadSpec
    partitions: int
    rate: float  # events per second from the producer; 0 = as fast as it goes
    runtimes: tuple[str, ...]
    pipeline: PipelineSpec
    variants: tuple[VariantSpec, ...]
    faults: tuple[Fault, ...]
    expect: dict[str, tuple[Expectation, ...]]
    producer: ProducerSpec = field(default_factory=ProducerSpec)
    backend: str | None = None  # the backend it needs, if only one can play it (containers)
    # Seed 003's way back: an application writing outboxes to MongoDB, relays carrying them to
    # Kafka, the scenario's (first) sink variant storing the target topics downstream; or, with
    # source: outbox, its one relay (source.relay) the source of the variants' lanes.
    outbox: OutboxSpec | None = None
    relays: tuple[RelaySpec, ...] = ()
    demo: Cut | None = None  # its cut for the demo; a scenario without one is not in it
    ci: Cut | None = None  # its cut for the suite, where the demo's is too big or absent
    # Where its records come from: the lab's producer, or a database through Debezium
    source: SourceSpec = field(default_factory=SourceSpec)
    # How many times one `chaoslab run` (or a matrix) runs it with its own seed: a race's
    # reproducer, whose rate expectations ("0 in 100%") are judged over them. --repeat (seed
    # after seed) takes its place where given.
    replays: int = 1

    @property
    def crash_plans(self) -> tuple[CrashPlan, ...]:
        """The consumer crashes and pauses, armed inside each runtime."""
        return tuple(p for f in self.faults if (p := f.crash_plan(self.seed)) is not None)

    @property
    def keeps_to_its_runs(self) -> bool:
        """Whether another scenario may run beside it on one environment: each of its faults
        acts on its own runs only (their consumers, workload or Spark application), and its
        variants run side by side (one at a time, each is to have the machine to itself)."""
        return self.pipeline.parallel and all(f.own_run_only for f in self.faults)

    @property
    def follows_bad_records(self) -> bool:
        """Whether each lane's writes are followed, for where each bad record went: where the
        producer's bad records take shapes beyond the default mix, or an expectation asks.
        Not for every run: following costs MongoDB a change stream's reading of every write
        (docs/performance.md)."""
        if self.source.cdc or self.outbox is not None or not self.workload.bad:
            return False
        asked = {e.field for entries in self.expect.values() for e in entries}
        return self.workload.shaped or bool(asked & set(FOLLOWED_COUNTS))

    @property
    def folder(self) -> Path:
        """Where its file is: a command consumer runs from there."""
        return Path(self.path).resolve().parent

    @property
    def lanes(self) -> tuple[tuple[str, VariantSpec], ...]:
        """The (runtime, variant) pairs it runs: each variant on each of its ``runtimes:``, or
        on the one it brings (a command consumer, once)."""
        if self.outbox is not None and not self.source.outbox:
            # Its relays side by side: the scenario's sink stores what each published.
            return tuple((RELAY.name, spec) for spec in self.relays)
        carried = [(spec.own_runtime, spec) for spec in self.variants]
        return (
            *((r, spec) for r in self.runtimes for own, spec in carried
              if own is None and spec.on(r)),
            *((own, spec) for own, spec in carried if own is not None),
        )  # fmt: skip

    def consumers_of(self, runtime: Runtime, spec: VariantSpec) -> int:
        """A lane's consumer processes: a Connect cluster's workers (the run's Connect lanes
        share them), a command's instances, or ``pipeline.consumers``."""
        if runtime.connect:
            return int(self.pipeline.connect.get(connect.WORKERS, connect.DEFAULT_WORKERS))
        if isinstance(spec, RelaySpec):
            return 1  # one relay process per change stream
        return make_variant(spec.name, spec.options).consumer_count(self.pipeline.consumers)

    @property
    def setting(self) -> Setting:
        """What its faults are checked against before a run."""
        return Setting(
            events=self.workload.events,
            batch_size=self.pipeline.batch_size,
            # The fewest any lane has: a command consumer's instances are its own.
            consumers=min(
                (self.consumers_of(get_runtime(r), s) for r, s in self.lanes),
                default=self.pipeline.consumers,
            ),
            partitions=self.partitions,
            variants=frozenset({v.name for v in self.variants} | {v.label for v in self.variants}),
            runtimes=frozenset(get_runtime(r) for r, _spec in self.lanes),
            spark_cluster=SparkCluster(self.pipeline.spark_cluster),
            relays=frozenset({r.name for r in self.relays} | {r.label for r in self.relays}),
            source=self.source.kind,
        )

    def expectations_for(self, variant: VariantSpec, runtime: str) -> list[Expectation]:
        """``*`` first, then the variant's name, its label, and ``label@runtime``; a later
        entry replaces an earlier one's expectation on the same field."""
        chosen: dict[str, Expectation] = {}
        label = variant.label
        for key in ("*", variant.name, label, f"{label}@{runtime}"):
            for e in self.expect.get(key, ()):
                chosen[e.field] = e
        return list(chosen.values())

    def with_overrides(
        self,
        *,
        seed: int | None = None,
        events: int | None = None,
        variants: Sequence[str | dict[str, Any]] | None = None,
        runtimes: list[str] | None = None,
    ) -> Self:
        """The scenario with command-line overrides applied (validated like the file); BadInput
        naming every problem of them at once."""
        new = self
        problems: list[str] = []  # the command line's own, the same for every file
        found: list[tuple[str, str]] = []  # this file's variants
        if seed is not None:
            new = replace(new, seed=seed, workload=replace(new.workload, seed=seed))
        if events is not None:
            if events < 0:
                problems.append(f"--events must be >= 0, got {events}")
            else:
                new = replace(new, workload=replace(new.workload, events=events))
        if runtimes:
            if unknown := [r for r in runtimes if r not in names()]:
                problems.append(f"--runtime: unknown {unknown} (choose from {', '.join(names())})")
            else:
                new = replace(new, runtimes=tuple(runtimes))
        if variants:
            # A label names one variant, a name the first of its variants (the label ``naive``
            # is the plain one, not the ``naive[retryWrites=false]`` after it).
            by_name = {v.name: v for v in reversed(self.variants)}
            known = by_name | {v.label: v for v in self.variants}
            chosen: list[VariantSpec] = []
            for entry in variants:
                # A name, or a scenario file's entry: {name: spark-job, job: mypkg.jobs:ingest}
                options = dict(entry) if isinstance(entry, dict) else {}
                name = str(options.pop("name", "")) if isinstance(entry, dict) else entry
                if name in known and not options:
                    chosen.append(known[name])
                elif problem := _variant_problem(name, options):
                    found.append(("--variants", problem))
                else:
                    chosen.append(VariantSpec(name, options))
            labels = [v.label for v in chosen]
            if twice := sorted({label for label in labels if labels.count(label) > 1}):
                # Two lanes of one label would share their topics, groups and database.
                found.append(("--variants", f"{', '.join(twice)} given twice"))
            new = replace(new, variants=tuple(chosen))
        if problems:
            raise BadInput(
                "\n".join([*problems, *([str(ScenarioError(self.path, found))] if found else [])])
            )
        if found:
            raise ScenarioError(self.path, found)
        return new

    def section(self, which: str) -> Cut | None:
        """Its ``which`` cut's section (``ci``: its own, else the demo's); None if it has none."""
        if which == "ci":
            return self.ci or self.demo
        return self.demo if which == "demo" else None

    def cut(self, which: str) -> Scenario:
        """The scenario as its ``which`` cut runs it (``CUTS``); itself where it has none."""
        section = self.section(which)
        if section is None:
            return self
        start = self if section.base is None else section.base
        cut = start.with_overrides(
            events=section.events,
            variants=list(section.variants) or None,
            runtimes=list(section.runtimes) or None,
        )
        if not section.faults:
            return cut
        faults = [f for f in start.faults if f.name in section.faults]
        # A burst of the workload (poison, resends) is a fault's: it goes with it.
        return replace(
            cut, faults=tuple(faults), workload=replace(cut.workload, bursts=_bursts(faults))
        )


# -- loading --------------------------------------------------------------------------------


def load_scenario(path: Path | str) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError.one(path, "", f"cannot read the file ({exc.strerror})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError.one(path, "", f"YAML syntax error at {where}: {problem}") from None
    return parse_scenario(raw, path)


def parse_scenario(raw: Any, path: Path | str = "<scenario>") -> Scenario:
    """The scenario of a file's YAML document; ScenarioError lists every problem in it."""
    pr = Problems(path)
    top = _mapping(pr, "", raw)
    if top is None:
        pr.raise_any()
    assert top is not None
    _only(pr, "", top, {f.name for f in fields(Scenario)} - {"path"})
    name = _field(pr, "name", str, top.get("name"), required=True)
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,40}", name):
        pr.add("name", f"use letters, digits, '-', '_' or '.', got {name!r}")
    seed = _field(pr, "seed", int, top.get("seed", 1))
    replays = _field(pr, "replays", int, top.get("replays", 1))
    if replays is not None and replays < 1:
        pr.add("replays", f"must be >= 1, got {replays}")
    workload_raw = dict(_mapping(pr, "workload", top.get("workload", {})) or {})
    partitions = _field(pr, "workload.partitions", int, workload_raw.pop("partitions", 3))
    if partitions is not None and partitions < 1:
        pr.add("workload.partitions", f"must be >= 1, got {partitions}")
    rate = _field(pr, "workload.rate", float, workload_raw.pop("rate", 0))
    if rate is not None and rate < 0:
        pr.add("workload.rate", f"must be >= 0, got {rate}")
    workload = _section(
        pr, "workload", WorkloadSpec, {**workload_raw, "seed": seed or 1}, INTERNAL_FIELDS
    )
    runtimes = tuple(
        _field(pr, "runtimes", list[str], top.get("runtimes", [DEFAULT_RUNTIME.name])) or ()
    )
    for i, runtime in enumerate(runtimes):
        if runtime not in names():
            pr.add(f"runtimes[{i}]", f"unknown runtime {runtime!r} ({', '.join(names())})")
    pipeline = _section(pr, "pipeline", PipelineSpec, top.get("pipeline", {}))
    backend = _field(pr, "backend", str, top["backend"]) if "backend" in top else None
    if backend is not None and backend not in backend_names():
        pr.add("backend", f"unknown backend {backend!r} ({', '.join(backend_names())})")
    producer = _section(pr, "producer", ProducerSpec, top.get("producer", {}))
    cuts = {
        w: _section(pr, w, Cut, top[w], frozenset({"base"})) if w in top else None for w in CUTS
    }
    outbox = _section(pr, "outbox", OutboxSpec, top["outbox"]) if "outbox" in top else None
    source = _section(pr, "source", SourceSpec, SourceSpec.of(top.get("source", {})))
    if source is not None and source.cdc:
        for at, why in connect.problems(source.connect):
            pr.add(f"source.connect.{at}", why)
        if outbox is not None:
            pr.add("source", "an outbox scenario's source is its application: no source: here")
    relays = [
        _relay(pr, f"relays[{i}]", r)
        for i, r in enumerate(_field(pr, "relays", list[Any], top.get("relays", [])) or ())
    ]
    if source is not None and source.outbox:
        _outbox_source_problems(pr, top, outbox)
        relays = [_relay(pr, "source.relay", source.relay)] if source.relay is not None else []
    elif "outbox" in top and not relays:
        pr.add("relays", "an outbox scenario needs at least one relay (e.g. [naive, seed-003])")
    if relays and "outbox" not in top:
        pr.add("relays", "relays carry an outbox workload: add an outbox: section")
    variants = [
        _variant(pr, f"variants[{i}]", v)
        for i, v in enumerate(
            _field(pr, "variants", list[Any], top.get("variants"), required=True) or ()
        )
    ]
    for i, v in enumerate(variants):
        if v is not None and (others := [r for r in v.runtimes if r not in runtimes]):
            pr.add(f"variants[{i}].runtimes", f"not the scenario's: {', '.join(others)} (it runs "
                                              f"{', '.join(runtimes)})")  # fmt: skip
        if v is not None and v.runtimes and v.own_runtime:
            pr.add(f"variants[{i}].runtimes", f"{v.name} runs on the runtime it brings "
                                              f"({v.own_runtime})")  # fmt: skip
    faults = [
        _fault(pr, i, raw)
        for i, raw in enumerate(_field(pr, "faults", list[Any], top.get("faults", [])) or ())
    ]
    seen: set[str] = set()
    for i, fault in enumerate(faults):
        if fault is not None and fault.name in seen:
            pr.add(f"faults[{i}].name", f"{fault.name!r} is used twice")
        seen |= {fault.name} if fault is not None else set()
    _sequence_problems(pr, faults)
    expect = {
        str(label): tuple(_expectations(pr, f"expect.{label}", spec))
        for label, spec in (_mapping(pr, "expect", top.get("expect", {})) or {}).items()
    }
    if all(v is not None for v in variants):
        labels = {"*"} | {v.name for v in variants if v} | {v.label for v in variants if v}
        labels |= {r.name for r in relays if r} | {r.label for r in relays if r}
        for key in expect:
            if key.split("@")[0] not in labels:
                pr.add(f"expect.{key}", f"no such variant (have: {sorted(labels)})")
        for which, cut in cuts.items():
            for i, label in enumerate(cut.variants if cut else ()):
                if label not in labels - {"*"}:
                    have = sorted(labels - {"*"})
                    pr.add(f"{which}.variants[{i}]", f"no such variant (have: {have})")
    for which, cut in cuts.items():
        for i, runtime in enumerate(cut.runtimes if cut else ()):
            if runtime not in runtimes:
                pr.add(f"{which}.runtimes[{i}]", f"not one of its runtimes ({', '.join(runtimes)})")
        _cut_fault_problems(pr, which, cut, [f for f in faults if f is not None])
        if cut is not None and cut.settings:
            cuts[which] = _with_settings(pr, path, which, top, cut, faults, variants)
    pr.raise_any()
    assert name is not None and seed is not None and workload is not None
    assert source is not None and replays is not None
    assert partitions is not None and rate is not None and pipeline is not None
    assert producer is not None
    return Scenario(
        name=name,
        description=str(top.get("description", "")).strip(),
        path=str(path),
        seed=seed,
        workload=replace(workload, bursts=_bursts([f for f in faults if f is not None])),
        partitions=partitions,
        rate=float(rate),
        runtimes=runtimes,
        pipeline=pipeline,
        variants=tuple(v for v in variants if v is not None),
        faults=tuple(f for f in faults if f is not None),
        expect=expect,
        producer=producer,
        backend=backend,
        outbox=outbox,
        relays=tuple(r for r in relays if r is not None),
        demo=cuts["demo"],
        ci=cuts["ci"],
        source=source,
        replays=replays,
    )


def _mapping(pr: Problems, where: str, value: Any) -> Mapping[str, Any] | None:
    if not isinstance(value, Mapping):
        pr.add(where, f"{where or 'the file'} must be a mapping, got {type(value).__name__}")
        return None
    return value


def _only(pr: Problems, where: str, value: Mapping[str, Any], known: set[str]) -> None:
    for key in value:
        if key not in known:
            at = f"{where}.{key}" if where else str(key)
            pr.add(at, f"unknown field (known: {', '.join(sorted(known))})")


def _field(pr: Problems, where: str, hint: Any, value: Any, required: bool = False) -> Any:
    """``value`` as ``hint`` says (``harness.records``); otherwise the problem is noted and None
    returned."""
    if value is None and required:
        pr.add(where, "is required")
        return None
    try:
        return coerce(hint, value, where)
    except FieldError as exc:
        pr.add(exc.field, exc.problem)
        return None


class _Section(Protocol):
    def problems(self) -> list[Problem]: ...


S = TypeVar("S", bound=_Section)


def _section(
    pr: Problems, where: str, cls: type[S], raw: Any, internal: frozenset[str] = frozenset()
) -> S | None:
    """A section of the file as its record (``harness.records``), checked by its own
    ``problems()``; every problem noted, None if there is one in its fields."""
    try:
        instance = build(cls, raw, f"{where}.", internal=internal)
    except FieldErrors as exc:
        for at, problem in exc.problems:
            pr.add(at or where, problem)
        return None
    for name, problem in instance.problems():
        pr.add(f"{where}.{name}", problem)
    return instance


def _variant_problem(name: str, options: dict[str, Any]) -> str | None:
    try:
        make_variant(name, options)
    except BadInput as exc:
        return str(exc)
    return None


def _variant(pr: Problems, where: str, raw: Any) -> VariantSpec | None:
    on: list[str] = []
    if isinstance(raw, str):
        name, options = raw, {}
    else:
        spec = dict(_mapping(pr, where, raw) or {})
        name = _field(pr, f"{where}.name", str, spec.pop("name", None), required=True)
        on = _field(pr, f"{where}.runtimes", list[str], spec.pop("runtimes", [])) or []
        options = spec
    if name is None:
        return None
    problem = _variant_problem(name, options)
    if problem:
        pr.add(where, problem)
        return None
    return VariantSpec(name, options, tuple(on))


def _outbox_source_problems(
    pr: Problems, top: Mapping[str, Any], outbox: OutboxSpec | None
) -> None:
    """An outbox relay as the source of the lanes: one relay (``source.relay``), writing the one
    target topic the lanes consume (a lane reads one topic)."""
    if "relays" in top:
        pr.add("relays", "relays: puts relays side by side as the lanes; with source: outbox the "
                         "one relay is source.relay, and the variants are the lanes")  # fmt: skip
    if "outbox" not in top:
        pr.add("source", "an outbox source relays the scenario's outbox: add an outbox: section")
    elif outbox is not None and len(outbox.topics) != 1:
        pr.add("outbox.topics", "with source: outbox the relay's one target topic is the lanes' "
                                f"(a lane reads one topic); got {list(outbox.topics)}")  # fmt: skip


def _relay(pr: Problems, where: str, raw: Any) -> RelaySpec | None:
    if isinstance(raw, str):
        name, options = raw, {}
    else:
        options = dict(_mapping(pr, where, raw) or {})
        name = _field(pr, f"{where}.name", str, options.pop("name", None), required=True)
    if name is None:
        return None
    try:
        make_relay(name, options)
    except BadInput as exc:
        pr.add(where, str(exc))
        return None
    return RelaySpec(name, options)


def _fault(pr: Problems, index: int, raw: Any) -> Fault | None:
    where = f"faults[{index}]"
    default_name = f"{raw.get('kind')}#{index + 1}" if isinstance(raw, dict) else ""
    try:
        return parse_fault(raw, default_name)
    except FieldErrors as exc:
        for field_name, problem in exc.problems:
            pr.add(f"{where}.{field_name}" if field_name else where, problem)
        return None


def _sequence_problems(pr: Problems, faults: list[Fault | None]) -> None:
    """A fault that starts ``after`` another must name one with a window (steps the nemesis
    takes), and the chain must end: one waiting on itself through others would never start."""
    windows = {f.name: f for f in faults if f is not None and f.steps(0)}
    for i, fault in enumerate(faults):
        first = fault.after if isinstance(fault, Timed) else None
        if fault is None or first is None or first == fault.name:
            continue  # no sequence, or the family's own problems said so
        if first not in windows:
            have = sorted(n for n in windows if n != fault.name)
            pr.add(f"faults[{i}].after", f"no fault {first!r} with a window here (have: {have})")
            continue
        chain: list[str] = [fault.name]
        following: str | None = first
        while following is not None and following not in chain:
            chain.append(following)
            before = windows.get(following)
            following = before.after if isinstance(before, Timed) else None
        if following is not None:
            pr.add(f"faults[{i}].after", f"{' -> '.join([*chain, following])}: a cycle")


def _with_settings(
    pr: Problems,
    path: Path | str,
    which: str,
    top: Mapping[str, Any],
    cut: Cut,
    faults: Sequence[Fault | None],
    variants: Sequence[VariantSpec | None],
) -> Cut:
    """``cut`` with its ``base``: the file with the cut's settings merged in, parsed as the
    file is (its problems named under ``which.settings``)."""
    merged = {k: v for k, v in top.items() if k not in CUTS}
    named = {
        "faults": [None if f is None else f.name for f in faults],
        "variants": [None if v is None else v.label for v in variants],
    }
    for key, value in cut.settings.items():
        where = f"{which}.settings.{key}"
        if key in CUTS or key in ("name", "path"):
            pr.add(where, "not a setting a cut changes")
        elif key in named and isinstance(value, Mapping):
            entries = list(top.get(key) or [])
            for entry_name, patch in value.items():
                if entry_name not in named[key]:
                    have = ", ".join(str(n) for n in named[key] if n is not None)
                    pr.add(f"{where}.{entry_name}", f"no such {key[:-1]} (have: {have})")
                    continue
                i = named[key].index(entry_name)
                entry = {"name": entries[i]} if isinstance(entries[i], str) else entries[i]
                entries[i] = _merged(entry, patch)
            merged[key] = entries
        elif isinstance(value, Mapping) and isinstance(top.get(key), Mapping):
            merged[key] = _merged(top[key], value)
        else:
            merged[key] = value
    try:
        base = parse_scenario(merged, path)
    except ScenarioError as exc:
        for at, problem in exc.problems:
            pr.add(f"{which}.settings: {at}" if at else f"{which}.settings", problem)
        return cut
    return replace(cut, base=base)


def _merged(base: Mapping[str, Any], patch: Any) -> Any:
    """``patch`` merged into ``base``: mappings key by key, anything else replaced."""
    if not isinstance(patch, Mapping) or not isinstance(base, Mapping):
        return patch
    out = dict(base)
    for key, value in patch.items():
        out[key] = _merged(out[key], value) if key in out else value
    return out


def _cut_fault_problems(pr: Problems, which: str, cut: Cut | None, faults: list[Fault]) -> None:
    """A cut keeps faults the scenario has, and with each the one it starts ``after``."""
    named = {f.name: f for f in faults}
    for i, name in enumerate(cut.faults if cut else ()):
        fault = named.get(name)
        if fault is None:
            pr.add(f"{which}.faults[{i}]", f"no such fault (have: {sorted(named)})")
        elif isinstance(fault, Timed) and fault.after and cut and fault.after not in cut.faults:
            pr.add(
                f"{which}.faults[{i}]", f"starts after {fault.after!r}, which the cut leaves out"
            )


def _bursts(faults: list[Fault]) -> tuple[Burst, ...]:
    return tuple(b for f in faults if (b := f.burst()) is not None)


def runnable(scenario: Scenario, abilities: BackendAbilities) -> tuple[str, ...]:
    """Raise ScenarioError naming every fault this backend (or the pipeline) cannot perform,
    and every fault the workload cannot reach; return notes on faults it may not reach."""
    pr = Problems(scenario.path)
    setting = scenario.setting
    for i, spec in enumerate(scenario.variants):
        variant = make_variant(spec.name, spec.options)
        if variant.own_runtime() is not None:  # it runs on the one it brings
            # A program in a user's image is the image's: not looked for on this machine.
            problem = (
                ""
                if variant.container_image() or not variant.program()
                else program_problem(variant.program(), scenario.folder)
            )
            if problem:
                pr.add(f"variants[{i}]", problem)
            if variant.container_image() and not abilities.containers:
                pr.add(
                    f"variants[{i}].image",
                    f"runs the command in the image {variant.container_image()}: the "
                    f"containers backend only, and this is the {abilities.name} backend",
                )
            continue
        on = [r for r in scenario.runtimes if spec.on(r)]
        if others := [r for r in on if not variant.runs_with(get_runtime(r))]:
            pr.add(
                f"variants[{i}]",
                f"{spec.name} does not run on {', '.join(others)}, and the scenario runs it",
            )
    if scenario.source.cdc:
        _cdc_problems(pr, scenario, abilities)
    else:
        for i, spec in enumerate(scenario.variants):
            if make_variant(spec.name, spec.options).reads_change_events:
                pr.add(
                    f"variants[{i}]",
                    f"{spec.label} applies a Debezium source's change events (a row's primary "
                    "key, its schema): it needs source: {kind: debezium}",
                )
    connectors = {
        i: variant.connector_config(connect_validate.PLACE)
        for i, spec in enumerate(scenario.variants)
        if isinstance(variant := make_variant(spec.name, spec.options), Connect)
    }
    plugins = connect.plugin_folders(scenario.pipeline.connect, scenario.folder)
    for i, folder in enumerate(plugins):
        if not folder.is_dir():
            pr.add(f"pipeline.connect.plugins[{i}]", f"no folder {str(folder)!r}")
    if connectors and all(f.is_dir() for f in plugins):  # Connect's own word on each
        said = connect_validate.refusals(list(connectors.values()), plugins)
        for i, problems in zip(connectors, said, strict=True):
            for problem in problems:
                pr.add(f"variants[{i}].config", problem)
    for i, fault in enumerate(scenario.faults):
        for at, problem in fault.refusals(setting, abilities):
            pr.add(f"faults[{i}].{at}" if at else f"faults[{i}]", problem)
    if scenario.producer.transactional and (
        uncommitted := sorted(
            {r for r, _spec in scenario.lanes if not get_runtime(r).read_committed}
        )
    ):
        pr.add(
            "producer.mode",
            f"the {', '.join(uncommitted)} runtime(s) may read uncommitted records (Spark's "
            "Kafka source does; a command consumer's setting is its own): a transactional "
            "producer is for the listener runtime",
        )
    check = preflight(scenario)
    for where, problem in check.impossible:
        pr.add(where, problem)
    pr.raise_any()
    return check.doubtful


def _cdc_problems(pr: Problems, scenario: Scenario, abilities: BackendAbilities) -> None:
    """What a Debezium source cannot run with (yet): each named."""
    if not abilities.postgres:
        pr.add(
            "source",
            f"a Debezium source reads PostgreSQL, which the {abilities.name} backend does not "
            "run (the local and containers backends do; the external one is given it with "
            "--postgres-uri)",
        )
    for i, spec in enumerate(scenario.variants):
        variant = make_variant(spec.name, spec.options)
        if not variant.parses_records and not variant.reads_change_events:
            pr.add(
                f"variants[{i}]",
                f"{spec.label} reads its records its own way, and reading a Debezium source's is "
                "not built for it yet: a Debezium source's lanes are the lab's own variants, on "
                "the listener or Spark runtime",
            )


@dataclass(frozen=True)
class Preflight:
    """What the workload means for the faults, known before anything starts."""

    impossible: tuple[tuple[str, str], ...] = ()  # (field, why): the scenario is refused
    doubtful: tuple[str, ...] = ()  # faults that may not fire: said before the run


def preflight(scenario: Scenario) -> Preflight:
    """Faults that cannot fire with the scenario's workload (in batches of up to
    ``pipeline.batch_size``), and faults that may not: a consumer that gets full batches reads
    fewer than they need."""
    impossible: list[tuple[str, str]] = []
    doubtful: list[str] = []
    setting = scenario.setting
    for i, fault in enumerate(scenario.faults):
        cannot, may_not = fault.reach(setting)
        if cannot:
            impossible.append((f"faults[{i}]", f"{fault.name} {cannot}"))
        elif may_not:
            doubtful.append(f"{fault.name} {may_not}")
    return Preflight(tuple(impossible), tuple(doubtful))


_EXPRESSION = re.compile(r"^\s*(==|!=|>=|<=|>|<)?\s*(-?\d+)\s*(?:in\s+(\d+(?:\.\d+)?)\s*%)?\s*$")


def _expectations(pr: Problems, where: str, raw: Any) -> list[Expectation]:
    found = []
    for key, value in (_mapping(pr, where, raw) or {}).items():
        at = f"{where}.{key}"
        if key not in EXPECTABLE:
            pr.add(at, f"cannot expect this (can: {', '.join(EXPECTABLE)})")
        elif isinstance(value, int):  # bool included: offsets_consistent: true, stopped: true
            found.append(Expectation(key, "==", value))
        elif isinstance(value, str) and (m := _EXPRESSION.match(value)):
            rate = None if m.group(3) is None else float(m.group(3)) / 100
            if rate is not None and not 0 < rate <= 1:
                pr.add(at, f"a share of runs is over 0% and at most 100%, got {m.group(3)}%")
                continue
            found.append(Expectation(key, m.group(1) or "==", int(m.group(2)), rate))
        else:
            pr.add(at, f"expected a number, e.g. '>0', or a share of runs, e.g. '>0 in 80%'; "
                       f"got {value!r}")  # fmt: skip
    return found
