"""Running a scenario: every variant, on every runtime, over the same seeded workload.

One run: the source's fresh topic (``harness.run.sources``: the lab's producer, or a database
through Debezium), and for each runtime x variant (a lane) a consumer group and MongoDB
database; every lane's consumers start, and once each can consume the source writes the
workload and keeps its truth; the run waits until every lane's consumers have committed past
the source's last record (restarting any that crash); then the source's stage is checked, and
each sink is read back and judged against the source's ledger. The lanes of a scenario run side
by side over one topic under one fault schedule, every runtime's at once - unless the scenario
runs its variants one at a time (``pipeline.parallel: false``, for throughput).
"""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.checker.bad_records import (
    BadRecord,
    Fate,
    GoodDeadLettered,
    Write,
    fates,
    good_dead_lettered,
)
from harness.checker.check import check
from harness.checker.explain import Explanation, explain
from harness.checker.model import LedgerArrays, RelayStage, SinkSnapshot, Verdict
from harness.checker.state import check_state
from harness.environment.base import Environment, Link, tail
from harness.environment.signals import stops_unwrapped
from harness.environment.spark import SparkCluster, SparkSettings
from harness.errors import LabError
from harness.faults.base import Target
from harness.faults.nemesis import SETTLE_TIMEOUT_S, Nemesis
from harness.faults.schedule import FaultPlan, plan
from harness.history.events import EventKind, HistoryEvent, HistoryTail, HistoryWriter, read_history
from harness.history.windows import fault_windows
from harness.kafka.topics import create_topic, delete_topics
from harness.outbox.writer import SOURCE
from harness.pipeline import kafka_log
from harness.pipeline.batch import dead_letter_topic
from harness.pipeline.connect.settings import ConnectSettings
from harness.pipeline.landing_watch import WRITES, LandingFeed, LandingWatch
from harness.pipeline.mongo_options import uri_with
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.runtimes import RELAY, Runtime, get_runtime
from harness.pipeline.sink import database_for, prepare_sink, read_sink, read_state, slug
from harness.pipeline.spark import log as spark_log
from harness.pipeline.supervisor import Lane, RuntimeSupervisor, stop_all
from harness.pipeline.variants import Variant, import_path, make_variant
from harness.results.fired import unfired
from harness.results.model import RESULTS, Judged, ScenarioResult, UntimedFault, VariantResult
from harness.run.loop import (
    Checked,
    Progress,
    Stopped,
    Watch,
    await_ready,
    wait_until_consumed,
)
from harness.run.outbox import OutboxSource, RelaySource, relay_config
from harness.run.sources import DebeziumSource, ProducerSource, Source
from harness.scenario import Scenario, VariantSpec
from harness.workload.events import Kind
from harness.workload.generator import generate
from harness.workload.ledger import read_ledger
from harness.workload.producer import Hold, ProduceSummary, Reserve
from harness.workload.verify import StoredTwice

log = logging.getLogger(__name__)


def run_scenario(
    env: Environment,
    scenario: Scenario,
    out_dir: Path,
    *,
    versions: dict[str, str] | None = None,
    progress: Progress = print,
    keep_topics: bool = True,
    stop: threading.Event | None = None,
) -> ScenarioResult:
    """Run every runtime x variant of ``scenario``. With ``keep_topics=False`` each run's topics
    are deleted once it is judged (``chaoslab matrix`` runs many scenarios on one environment,
    and each run's topics have three replicas of three partitions). ``stop`` set ends a run
    (``harness.run.loop.Stopped``), stopping what it started."""
    started = time.time()
    # Absolute: its lanes' processes run in folders of their own (a Spark executor in its
    # worker's), and results.json names its files for readers anywhere.
    out_dir = out_dir.absolute()
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[VariantResult] = []
    total = len(scenario.lanes)

    def so_far() -> ScenarioResult:
        return ScenarioResult.of(
            scenario,
            env.backend,
            versions or {},
            started,
            time.time() - started,
            tuple(results),
            out_dir,
        )

    # Ctrl-C or SIGTERM inside the Kafka client's C code is still that to the caller.
    with stops_unwrapped():
        try:
            # Side by side, every runtime's variants share one topic and one broker's weather
            # (as seed 002's three channels did), under one fault schedule; one at a time, each
            # variant has the machine to itself (throughput).
            groups = [list(scenario.lanes)]
            if not scenario.pipeline.parallel:
                groups = [[lane] for lane in scenario.lanes]
            for group in groups:
                progress(f"[{len(results) + len(group)}/{total}] {_labels(group)}")
                results.extend(
                    run_side_by_side(env, scenario, group, out_dir, progress, keep_topics, stop)
                )
                so_far().write(out_dir / RESULTS)  # a later failure keeps what was measured
            return so_far()
        except Stopped:
            raise
        except LabError as exc:  # its results.json says why, with what was measured before
            replace(so_far(), error=str(exc)).write(out_dir / RESULTS)
            raise


def _labels(group: list[tuple[str, VariantSpec]]) -> str:
    """``listener: naive, idempotent; spark: naive``."""
    by_runtime: dict[str, list[str]] = {}
    for runtime, spec in group:
        by_runtime.setdefault(runtime, []).append(spec.label)
    return "; ".join(f"{r}: {', '.join(labels)}" for r, labels in by_runtime.items())


@dataclass(frozen=True)
class _Lane:
    """One variant's consumers, database and history on one runtime, within a side-by-side
    run."""

    runtime: Runtime
    spec: VariantSpec
    label: str  # the variant's, or an outbox lane's relay's
    variant: Variant  # what writes its sink (an outbox lane's: the scenario's sink variant)
    config: RuntimeConfig
    config_path: Path
    history: HistoryWriter
    watch: Watch

    @property
    def run_dir(self) -> Path:
        return Path(self.config.run_dir)

    @property
    def group(self) -> str:
        return self.config.group

    @property
    def topics(self) -> list[str]:
        """Its own topics: a sink's dead letters (a relay's topics are its source's)."""
        return [] if self.runtime is RELAY else [dead_letter_topic(self.group)]


def _lane(
    env: Environment,
    scenario: Scenario,
    runtime: Runtime,
    spec: VariantSpec,
    source: Source,
    run_id: str,
    out_dir: Path,
) -> _Lane:
    label = spec.label
    lane_name = f"{runtime.name}-{slug(label)}"
    run_dir = (out_dir / lane_name).absolute()  # whoever calls: its processes run elsewhere
    run_dir.mkdir(parents=True, exist_ok=True)
    group = f"{scenario.name}.{run_id}.{lane_name}"
    if isinstance(source, OutboxSource):
        return _relay_lane(env, scenario, spec, source, group, run_dir)
    topic = source.topic
    variant = make_variant(spec.name, spec.options)
    database = database_for(run_id, lane_name)
    mongo = {**scenario.pipeline.mongo, **variant.mongo}  # the variant's settings over the run's
    # The scenario's Spark cluster (started now if it is the standalone one and not running).
    cluster = SparkCluster(scenario.pipeline.spark_cluster)
    spark = env.spark_on(cluster, out_dir) if runtime.spark else None
    create_topic(env.kafka_bootstrap, dead_letter_topic(group), 1)
    prepare_sink(env.mongo_uri, database, variant)
    config = RuntimeConfig(
        runtime=runtime.name,
        bootstrap=env.kafka_bootstrap_for(Link.CONSUMER_KAFKA),
        mongo_uri=uri_with(env.mongo_uri_for(Link.CONSUMER_MONGO), mongo),
        topic=topic,
        group=group,
        database=database,
        variant=spec.name,
        variant_options=spec.options,
        run_dir=str(run_dir),
        batch_size=scenario.pipeline.batch_size,
        crash_plans=scenario.crash_plans,
        write_retry_s=scenario.pipeline.write_retry_s,
        spark_settings=spark.to_json() if spark else "",
        connect=_connect_settings(env, scenario, run_id, out_dir) if runtime.connect else "",
        checkpoint=spark.checkpoint(f"{run_id}-{lane_name}") if spark else "",
        trigger_ms=scenario.pipeline.trigger_ms,
        commit=scenario.pipeline.commit,
        kafka=scenario.pipeline.kafka,
        mongo=mongo,
        import_path=import_path(spec.name, spec.options),
        command=variant.program(),
        # A command runs from its scenario's folder (paths in it are the file's neighbours).
        cwd=str(scenario.folder) if runtime.black_box else "",
        image=variant.container_image(),
    )
    return _made(runtime, spec, label, variant, config, f"{runtime.name} {label} topic {topic}")


def _relay_lane(
    env: Environment,
    scenario: Scenario,
    spec: VariantSpec,
    source: OutboxSource,
    group: str,
    run_dir: Path,
) -> _Lane:
    """An outbox scenario's lane: a relay reading the application's change stream into target
    topics of its own (named by ``topic``); the scenario's sink variant stores them once it
    has relayed everything (``OutboxSource.relayed``)."""
    config = relay_config(env, scenario, spec, source.database, group, run_dir)
    source.relay(config)
    sink = scenario.variants[0]
    return _made(RELAY, spec, spec.label, make_variant(sink.name, sink.options), config,
                 f"relay {spec.label} from {source.database}.{SOURCE}")  # fmt: skip


def _made(
    runtime: Runtime,
    spec: VariantSpec,
    label: str,
    variant: Variant,
    config: RuntimeConfig,
    started: str,
) -> _Lane:
    """A lane's configuration written for its processes, its history begun, its watch."""
    run_dir = Path(config.run_dir)
    config_path = run_dir / "runtime.json"
    config_path.write_text(config.to_json())
    history = HistoryWriter(config.history_dir, "harness", label)
    history.record(EventKind.RUN_START, detail=started)
    watch = Watch(
        f"{runtime.name}/{label}",
        HistoryTail(config.history_dir),
        history,
        run_dir / "logs",
        runtime.ready,
    )
    return _Lane(runtime, spec, label, variant, config, config_path, history, watch)


def _connect_settings(env: Environment, scenario: Scenario, run_id: str, out_dir: Path) -> str:
    """The run's Connect cluster (every Connect lane's the same): its workers' group, internal
    topics and folder are the run's own."""
    return ConnectSettings.for_run(
        scenario.pipeline.connect,
        bootstrap=env.kafka_bootstrap_for(Link.CONSUMER_KAFKA),
        group=f"{scenario.name}.{run_id}.connect",
        folder=out_dir / f"{scenario.name}.{run_id}.connect",
        base=scenario.folder,
    ).to_json()


def _supervise(
    env: Environment, scenario: Scenario, lanes: list[_Lane], name: str, out_dir: Path
) -> dict[str, RuntimeSupervisor]:
    """Who runs which lane: a listener's consumers are processes of their own; a runtime's
    lanes share one driver (Spark's) unless a fault targets a consumer process, which must
    then be the lane's own (see ``harness.pipeline.runtimes``)."""
    targets_consumers = any(f.targets_consumers for f in scenario.faults)

    def supervisor(group: list[_Lane], log_dir: Path) -> dict[str, RuntimeSupervisor]:
        made = RuntimeSupervisor(
            env,
            [Lane(lane.config, lane.config_path, lane.history) for lane in group],
            consumers=scenario.consumers_of(group[0].runtime, group[0].spec),
            restart_delay=scenario.pipeline.restart_delay_s,
            log_dir=log_dir,
        )
        return {lane.group: made for lane in group}

    supervisor_of: dict[str, RuntimeSupervisor] = {}
    for runtime in dict.fromkeys(lane.runtime for lane in lanes):
        mine = [lane for lane in lanes if lane.runtime is runtime]
        if runtime.connect:  # one cluster of workers, a connector per lane
            supervisor_of |= supervisor(
                mine, Path(ConnectSettings.from_json(mine[0].config.connect).folder)
            )
        elif not runtime.process_per_consumer and not targets_consumers and len(mine) > 1:
            logs = out_dir / f"{name}.{runtime.name}.logs"
            supervisor_of |= supervisor(mine, logs)
        else:
            for lane in mine:
                supervisor_of |= supervisor([lane], lane.run_dir / "logs")
    return supervisor_of


@dataclass(frozen=True)
class _Run:
    """Variants side by side over one topic: what the setup made, for the run and the check."""

    env: Environment
    scenario: Scenario
    source: Source  # what writes the topic and keeps the truth
    ledger_path: Path
    lanes: list[_Lane]
    supervisor_of: dict[str, RuntimeSupervisor]  # by the lane's consumer group
    schedule: tuple[FaultPlan, ...]
    started: float  # monotonic
    # The lanes whose landing collections are followed (by group), from the workload's start:
    # their writes where it has bad records, a current-state sink's rows.
    watches: dict[str, LandingWatch] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return self.source.topic

    @property
    def supervisors(self) -> list[RuntimeSupervisor]:
        return list(dict.fromkeys(self.supervisor_of.values()))


def run_side_by_side(
    env: Environment,
    scenario: Scenario,
    lanes: list[tuple[str, VariantSpec]],
    out_dir: Path,
    progress: Progress = print,
    keep_topics: bool = True,
    stop: threading.Event | None = None,
) -> list[VariantResult]:
    """Run ``lanes`` (runtime, variant) at the same time over one topic that the source writes
    once: set up, play the workload and the faults, check each variant."""
    run_id = uuid.uuid4().hex[:6]
    ledger_path = out_dir / f"{_runtimes(lanes)}-{run_id}.ledger.csv"
    source = _source(env, scenario, run_id, out_dir, ledger_path, progress)
    try:
        run = _set_up(env, scenario, source, run_id, [(get_runtime(r), s) for r, s in lanes],
                      out_dir)  # fmt: skip
        summary = _play(run, progress, stop)
        results = _check(run, summary, progress)
    finally:
        source_topics = source.close()
    if not keep_topics:
        topics = source_topics + [t for lane in run.lanes for t in lane.topics]
        # A Connect cluster's own topics (its configs, offsets, status) are the run's too.
        connect = [s.config.connect for s in run.supervisors if s.config.connect]
        topics += [t for c in connect for t in ConnectSettings.from_json(c).storage_topics.values()]
        delete_topics(env.kafka_bootstrap, topics)
        made = (
            "its relays'"
            if isinstance(source, OutboxSource)
            else f"{run.topic} and its dead-letter"
        )
        progress(
            f"    deleted the run's {len(topics)} topics ({made} topics"
            f"{', its Connect cluster' if connect else ''})"
        )
    return results


def _runtimes(lanes: list[tuple[str, VariantSpec]]) -> str:
    return "-".join(dict.fromkeys(runtime for runtime, _spec in lanes))


def _source(
    env: Environment,
    scenario: Scenario,
    run_id: str,
    out_dir: Path,
    ledger_path: Path,
    progress: Progress,
) -> Source:
    if scenario.source.cdc:
        return DebeziumSource(env, scenario, run_id, out_dir, ledger_path, progress)
    if scenario.source.outbox:
        return RelaySource(env, scenario, run_id, out_dir, ledger_path, progress)
    if scenario.outbox is not None:
        return OutboxSource(env, scenario, run_id, ledger_path)
    return ProducerSource(env, scenario, f"{scenario.name}.{run_id}", ledger_path)


def _set_up(
    env: Environment,
    scenario: Scenario,
    source: Source,
    run_id: str,
    lanes: list[tuple[Runtime, VariantSpec]],
    out_dir: Path,
) -> _Run:
    """The source's topic (and its processes), and each lane's consumer group, database,
    configuration, history and who supervises its consumers."""
    started = time.monotonic()
    source.start()
    made = [_lane(env, scenario, runtime, spec, source, run_id, out_dir) for runtime, spec in lanes]
    return _Run(
        env,
        scenario,
        source,
        source.ledger_path,
        made,
        _supervise(env, scenario, made, f"{scenario.name}.{run_id}", out_dir),
        plan(scenario.faults, scenario.seed),
        started,
    )


def _watches(scenario: Scenario, lanes: list[_Lane]) -> dict[str, LandingWatch]:
    """A watch of each lane's landing collection that is to be followed: its writes logged
    (``writes.jsonl``) where the scenario follows its bad records (``follows_bad_records``), for
    where each went; a current-state sink's rows, for what a replay does meanwhile."""
    bad = scenario.follows_bad_records
    watches = {}
    for lane in lanes:
        landing = lane.variant.landing()
        if bad or landing.row_key:
            history = HistoryWriter(lane.config.history_dir, "landing-watch", lane.label)
            writes = lane.run_dir / WRITES if bad else None
            watches[lane.group] = LandingWatch(lane.config.database, landing, history, writes)
    return watches


# A chained fault's reserve beyond its own delay: records still come through its first seconds.
RESERVE_S = 15.0


def reserve_for(scenario: Scenario, schedule: Sequence[FaultPlan]) -> Reserve | None:
    """A paced workload's last records, kept while a fault that starts once another's window
    has ended waits for it: the records of that fault's own delay and RESERVE_S more, so that
    it finds the stream under way however long the window before it lasted - never the first
    batch, which starts the faults' clock. None where no fault follows another."""
    leads = [step.at for plan in schedule for step in plan.steps
             if step.following and step.at is not None]  # fmt: skip
    if not leads:
        return None
    kept = math.ceil(scenario.rate * (max(leads) + RESERVE_S))
    start = max(scenario.pipeline.batch_size, scenario.workload.events - kept)
    return Reserve(start, threading.Event())


def _play(run: _Run, progress: Progress, stop: threading.Event | None) -> ProduceSummary:
    """Consumers, source and nemesis, until every lane has consumed everything; everything
    started here is stopped, and every fault undone, however it ends. Returns the source's
    summary."""
    env, scenario = run.env, run.scenario
    # Faults on the clock, and lanes of more than one runtime or a workload sent at a rate: the
    # workload's first batch, then the rest once every lane wrote a batch (when the clock
    # starts) - one lane is not to consume all of it while another's first batch is under way:
    # a listener beside a Spark driver, or beside a slower variant (mongo-stepdown's dedup-log
    # wrote its first batch 11 s after naive on a loaded machine, by when naive had consumed
    # everything and the step-down hit it after its work). Not for a workload sent at once on
    # one runtime: held, it reaches a Spark lane in other batches (cdc-crash-before-ack's first
    # batch shrank: docs/scenarios.md), and its counts would follow the timing.
    running = threading.Event()
    mixed = len({lane.runtime for lane in run.lanes}) > 1
    timed = any(step.at is not None for plan in run.schedule for step in plan.steps)
    paced = scenario.rate > 0
    reserve = reserve_for(scenario, run.schedule) if paced else None
    hold = (
        Hold(scenario.pipeline.batch_size, running, reserve) if timed and (mixed or paced) else None
    )
    producer = run.source.writer(hold)
    targets = [
        Target(
            HistoryWriter(lane.config.history_dir, "nemesis", lane.label),
            run.supervisor_of[lane.group],
            lane.run_dir,
            runtime=lane.runtime,
            label=lane.label,
            name=lane.spec.name,
            group=lane.group,
            checkpoint=lane.config.checkpoint,
        )
        for lane in run.lanes
    ]
    nemesis = Nemesis(env, run.schedule, targets, topic=run.topic, sources=run.source.targets,
                      database=run.source.database)  # fmt: skip
    supervisors = run.supervisors
    checked: list[Checked] = [*supervisors, run.source]
    run.watches.update(_watches(scenario, run.lanes))
    feed = LandingFeed(env.mongo_uri, list(run.watches.values()))
    try:
        feed.start()
        for supervisor in supervisors:
            supervisor.start()
        # The workload starts once every lane can consume: side by side, a listener joins its
        # group long before a Spark driver starts its queries (docs/performance.md), and a
        # listener had consumed all of commit-failure-window's workload before its fault's
        # clock started.
        await_ready(
            [lane.watch for lane in run.lanes],
            checked,
            what="the consumers of every lane",
            timeout=scenario.pipeline.timeout_s,
            progress=progress,
            stop=stop,
        )
        run.source.await_ready(progress, stop)
        producer.start()
        return wait_until_consumed(
            [lane.watch for lane in run.lanes],
            checked,
            producer,
            nemesis,
            run.source.end_offsets,
            scenario.pipeline.timeout_s,
            progress,
            run.source.report,
            stop=stop,
            running=running,
            reserve=reserve,
        )
    finally:
        producer.stop()
        nemesis.restore()
        stop_all([*supervisors, *run.source.supervisors])
        feed.stop()
        # Not after Ctrl-C or a stop asked for: stopping is to be prompt.
        stopping = isinstance(sys.exception(), (KeyboardInterrupt, Stopped))
        if not stopping and not (stop and stop.is_set()) and (left := nemesis.settle()):
            progress(f"not back {SETTLE_TIMEOUT_S:.0f} s after the run: {', '.join(left)}")


def _check(run: _Run, summary: ProduceSummary, progress: Progress) -> list[VariantResult]:
    """The source's stage (the topic against its truth); each lane's sink judged against the
    source's ledger."""
    # Checked once the consumers are done, not when the producer is: reading the whole topic
    # takes seconds on a three-node cluster, and the fault schedule must not wait for it (a
    # bounce started seconds late: docs/faults.md).
    again, stage = run.source.stage(progress)
    ledger = run.source.ledger()
    for lane in run.lanes:
        if lane.runtime.group_member:  # its client logs hold the coordinators' errors
            for consumer in run.supervisor_of[lane.group].consumers:
                kafka_log.harvest(consumer.log, lane.config.history_dir, consumer.name, lane.label)
        if lane.runtime.spark:  # its drivers' logs hold the tasks Spark lost
            spark_log.harvest(
                Path(SparkSettings.from_json(lane.config.spark_settings).log_dir),
                lane.config.history_dir,
                read_history(lane.config.history_dir),
                lane.label,
            )
    seconds = time.monotonic() - run.started
    # The consumers' own faults (crash points) have no window in the history: named here.
    untimed = tuple(UntimedFault(p.name, p.fault.kind) for p in run.schedule if not p.steps)
    logged = any(w.logged for w in run.watches.values())
    sent = _sent(run) if logged else None  # read once, for every lane whose writes were logged
    return [
        _judge(run, lane, ledger, summary, seconds, untimed, again, stage, progress, sent)
        for lane in run.lanes
    ]


def _judge(
    run: _Run,
    lane: _Lane,
    ledger: LedgerArrays,
    summary: ProduceSummary,
    seconds: float,
    untimed: tuple[UntimedFault, ...],
    twice_in_topic: list[StoredTwice],
    stage: RelayStage | None,
    progress: Progress,
    sent: _Sent | None = None,
) -> VariantResult:
    config, scenario, supervisor = lane.config, run.scenario, run.supervisor_of[lane.group]
    lane.history.record(EventKind.PRODUCED, count=summary.acked)
    for twice in twice_in_topic:  # at its acknowledgement: where in the run it happened
        lane.history.append(
            EventKind.STORED_TWICE, t=twice.row.acked_at, count=twice.extra, detail=twice.describe()
        )
    lane.history.record(EventKind.RUN_END)
    lane.history.close()
    events = read_history(config.history_dir)
    relayed = isinstance(run.source, OutboxSource)
    verdict, stage, explanation = _sink_verdict(run, lane, ledger, summary, events,
                                                twice_in_topic, stage, sent)  # fmt: skip
    # A pipeline that stopped for good has said why; it may have stopped before its first write.
    if lane.runtime.black_box and verdict.acked and not verdict.in_sink and not verdict.stopped:
        _wrote_nothing(lane, supervisor)
    judged = Judged.of(scenario.expectations_for(lane.spec, config.runtime), verdict, stage)
    unexplained = explanation.failure(verdict.duplicates)
    result = VariantResult(
        runtime=config.runtime,
        variant=lane.label,
        verdict=verdict,
        events_per_s=_throughput(events, summary.acked),
        seconds=seconds,
        restarts=supervisor.restarts,
        crashes=supervisor.crashes,
        faults=untimed,
        expectations=judged.expectations,
        failures=(*judged.failures, *([unexplained] if unexplained else [])),
        rates=judged.rates,
        unexplained=explanation.unexplained(verdict.duplicates),
        directory=lane.run_dir,
        ledger=run.ledger_path,
        # A fault the source fires itself (a relay's crash point) is seen in its history.
        unfired=unfired(
            scenario.faults,
            [*events, *run.source.events()],
            summary.produced if scenario.outbox is not None else scenario.workload.events,
        ),
        relay=stage,
    )
    outcome = result.outcome.value.upper() if not result.passed else "pass"
    if relayed and stage is not None:
        p = stage.published
        progress(
            f"    {result.label}: {verdict.acked} entries written; published {p.unique_in_sink} "
            f"(+{p.duplicates} copies, {p.lost} lost); stored {verdict.unique_in_sink} "
            f"(+{verdict.duplicates} copies, {verdict.lost} lost); {outcome}"
        )
    else:
        progress(
            f"    {result.label}: {verdict.in_sink} in sink of {verdict.acked} acked, "
            f"{verdict.duplicates} duplicates, {verdict.lost} lost, {verdict.stale} stale, "
            f"{verdict.dead_lettered} dead-lettered; {result.events_per_s:.0f} events/s; {outcome}"
        )
    if verdict.stopped:
        progress(f"      stopped for good: {verdict.stopped}")
    for u in result.unfired:
        progress(f"      {u}")
    return result


def _sink_verdict(
    run: _Run,
    lane: _Lane,
    ledger: LedgerArrays,
    summary: ProduceSummary,
    events: list[HistoryEvent],
    twice_in_topic: list[StoredTwice],
    stage: RelayStage | None,
    sent: _Sent | None = None,
) -> tuple[Verdict, RelayStage | None, Explanation]:
    """A lane's sink judged against its source's truth, its upstream stage, and what explains
    its copies: a relay's sink against the entries written (its topics its stage); a
    current-state sink against the database's final table; any other against the ledger."""
    config = lane.config
    windows = fault_windows(events)
    stopped = next((e.detail for e in events if e.kind is EventKind.FAILED_FOR_GOOD), "")
    landing = lane.variant.landing()
    if landing.row_key:  # a document per row: its state, not each change, is what it keeps
        rows, documents = read_state(run.env.mongo_uri, config.database, landing)
        verdict = check_state(run.source.final_state(), rows, ledger, produced=summary.produced,
                              in_sink=documents, windows=windows, stopped=stopped)  # fmt: skip
        return verdict, stage, Explanation(0, 0)  # a copy replaces its row: none to explain
    if isinstance(run.source, OutboxSource):  # a relay's: its topics, then what its sink stored
        sink, stage = run.source.relayed(config, lane.variant, lane.label, events)
        # The copies in its sink are those its relay put on its topics.
        explanation = Explanation(0, stage.published.duplicates)
    else:
        sink = read_sink(
            run.env.mongo_uri,
            config.database,
            lane.variant,
            bootstrap=run.env.kafka_bootstrap,
            topic=config.topic,
            group=config.group,
            ledger=run.ledger_path,
        )
        explanation = explain(events, ledger, black_box=lane.runtime.black_box)
    verdict = check(
        ledger,
        sink,
        produced=summary.produced,
        windows=windows,
        stored_twice=[
            (t.row.order_id, t.row.version) for t in twice_in_topic for _ in range(t.extra)
        ],
        stopped=stopped,
    )
    watch = run.watches.get(lane.group)
    if watch is not None and watch.logged and watch.complete and sent is not None:
        bad, good = _fates(sent, lane, sink, stopped=bool(stopped))
        verdict = replace(verdict, bad=bad, followed=True, dead_lettered_good=good)
    elif watch is not None and watch.logged:
        log.warning("%s: its writes were not all read (%s): where its bad records went is not "
                    "judged", lane.label, watch.broke or "its mark never came")  # fmt: skip
    return verdict, stage, explanation


@dataclass(frozen=True)
class _Sent:
    """The producer's bad records, each with its shape, and its good records' changes by event
    id: what every lane's bad records are followed against."""

    bad: tuple[BadRecord, ...]
    changes: dict[str, tuple[int, int]]


def _sent(run: _Run) -> _Sent:
    """The ledger's records and the workload's shapes (the same seed draws them again)."""
    shapes = {e.seq: e.poison for e in generate(run.scenario.workload) if e.poison is not None}
    rows = list(read_ledger(run.ledger_path))
    bad = tuple(
        BadRecord(r.event_id, str(shapes.get(r.seq, "")), r.partition, r.offset, r.order_id,
                  r.version)
        for r in rows if r.kind is Kind.POISON
    )  # fmt: skip
    return _Sent(bad, {r.event_id: (r.order_id, r.version) for r in rows
                       if r.kind is not Kind.POISON})  # fmt: skip


def _fates(
    sent: _Sent, lane: _Lane, sink: SinkSnapshot, *, stopped: bool
) -> tuple[tuple[Fate, ...], tuple[GoodDeadLettered, ...]]:
    """Where each bad record the producer sent went in ``lane`` - its write log, its dead
    letters, whether it stopped - and the good records it dead-lettered, with the bad record
    whose refused write skipped them (``harness.checker.bad_records``)."""
    with (lane.run_dir / WRITES).open() as f:
        writes = [Write.from_json(json.loads(line)) for line in f if line.endswith("\n")]
    dead = sink.dead_letters()
    found = fates(sent.bad, writes, dead, stopped=stopped, changes=sent.changes)
    return found, good_dead_lettered(sent.bad, dead, found)


def _wrote_nothing(lane: _Lane, supervisor: RuntimeSupervisor) -> None:
    """A command consumer that left its sink collection empty: a program writing elsewhere, or
    not writing at all - a mistake to name, not a loss to count."""
    landing = lane.variant.landing()
    logs = "\n".join(
        f"--- the last lines of {c.log}:\n{tail(c.log, 15)}" for c in supervisor.consumers
    )
    raise LabError(
        f"{lane.label} wrote no document to {lane.config.database}.{landing.collection} "
        f"(its sink: collection); the run's records were acknowledged. Does it write where "
        f"CHAOSLAB_DATABASE and the sink's collection say?\n{logs}"
    )


def _throughput(history: list[HistoryEvent], records: int) -> float:
    events = [e for e in history if e.source != "harness"]
    # A black box's first documents and its group's commits, as the lab saw them.
    # A relay's first entries published.
    starts, commits = (
        (EventKind.BATCH, EventKind.SINK_COUNT, EventKind.WRITTEN),
        (EventKind.COMMIT, EventKind.COMMITTED),
    )
    first = next((e.t for e in events if e.kind in starts), None)
    last = max((e.t for e in events if e.kind in commits), default=None)
    if first is None or last is None or last <= first:
        return 0.0
    return records / (last - first)
