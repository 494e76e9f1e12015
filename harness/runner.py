"""Running a scenario: every variant, on every runtime, over the same seeded workload.

One variant run: a fresh topic, consumer group and MongoDB database; the runtime's consumer
processes start; the producer sends the workload and ledgers each acknowledgement; the run
waits until the consumers have committed past the last acknowledged offset (restarting any
that crash); then the sink is read back and the checker judges it against the ledger.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.checker import LedgerArrays, check, load_ledger
from harness.environment import Environment, Link
from harness.errors import LabError
from harness.faults.base import Target
from harness.faults.fired import unfired
from harness.faults.nemesis import Nemesis
from harness.faults.schedule import plan
from harness.history import (
    EventKind,
    HistoryEvent,
    HistoryTail,
    HistoryWriter,
    fault_windows,
    read_history,
)
from harness.kafka import create_topic, delete_topics
from harness.pipeline.batch import dead_letter_topic
from harness.pipeline.kafka_log import harvest
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.runtimes import Runtime, get_runtime
from harness.pipeline.sink import prepare_sink, read_sink
from harness.pipeline.supervisor import Lane, RuntimeSupervisor, stop_all
from harness.pipeline.variants import Variant, make_variant
from harness.results import RESULTS, ScenarioResult, UntimedFault, VariantResult
from harness.scenario import Scenario, VariantSpec
from harness.workload.generator import generate
from harness.workload.ledger import read_ledger
from harness.workload.producer import ProduceSummary, produce
from harness.workload.verify import missing_from_topic, topic_event_ids

Progress = Callable[[str], None]
log = logging.getLogger(__name__)


class RunTimeout(LabError):
    pass


class BrokerLostData(LabError):
    """The broker acknowledged records it does not hold: a defect of the environment, not of
    the variant under test, so the run stops instead of reporting losses."""


def run_scenario(
    env: Environment,
    scenario: Scenario,
    out_dir: Path,
    *,
    versions: dict[str, str] | None = None,
    progress: Progress = print,
    keep_topics: bool = True,
) -> ScenarioResult:
    """Run every runtime x variant of ``scenario``. With ``keep_topics=False`` each run's topics
    are deleted once it is judged (``chaoslab matrix`` runs many scenarios on one environment,
    and each run's topics have three replicas of three partitions)."""
    started = time.time()
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[VariantResult] = []
    total = len(scenario.runtimes) * len(scenario.variants)

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

    for runtime in scenario.runtimes:
        # Side by side, variants share one topic and one broker's weather (as seed 002's
        # three channels did); one at a time, each has the machine to itself (throughput).
        groups = [list(scenario.variants)]
        if not scenario.pipeline.parallel:
            groups = [[spec] for spec in scenario.variants]
        for specs in groups:
            labels = ", ".join(s.label for s in specs)
            progress(f"[{len(results) + len(specs)}/{total}] {runtime}: {labels}")
            results.extend(
                run_side_by_side(env, scenario, runtime, specs, out_dir, progress, keep_topics)
            )
            so_far().write(out_dir / RESULTS)  # a later failure keeps what was measured
    return so_far()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


@dataclass
class _Lane:
    """One variant's consumers, database and history within a side-by-side run."""

    spec: VariantSpec
    variant: Variant
    config: RuntimeConfig
    config_path: Path
    history: HistoryWriter
    tail: HistoryTail
    committed: dict[int, int] = field(default_factory=dict)
    planned: RuntimeSupervisor | None = None  # set once the group's processes are planned

    @property
    def run_dir(self) -> Path:
        return Path(self.config.run_dir)

    @property
    def supervisor(self) -> RuntimeSupervisor:
        assert self.planned is not None, "a lane is used before its processes were planned"
        return self.planned


def _lane(
    env: Environment,
    scenario: Scenario,
    runtime: Runtime,
    spec: VariantSpec,
    topic: str,
    out_dir: Path,
) -> _Lane:
    variant = make_variant(spec.name, spec.options)
    slug = f"{runtime.name}-{_slug(variant.label)}"
    run_dir = out_dir / slug
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = topic.rsplit(".", 1)[-1]
    group = f"{topic}.{_slug(variant.label)}"
    database = f"cl_{run_id}_{slug.replace('-', '_')}"[:63]
    create_topic(env.kafka_bootstrap, dead_letter_topic(group), 1)
    prepare_sink(env.mongo_uri, database, variant)
    config = RuntimeConfig(
        runtime=runtime.name,
        bootstrap=env.kafka_bootstrap_for(Link.CONSUMER_KAFKA),
        mongo_uri=env.mongo_uri_for(Link.CONSUMER_MONGO),
        topic=topic,
        group=group,
        database=database,
        variant=spec.name,
        variant_options=spec.options,
        run_dir=str(run_dir),
        batch_size=scenario.pipeline.batch_size,
        crash_plans=scenario.crash_plans,
        write_retry_s=scenario.pipeline.write_retry_s,
        spark_settings=env.spark.to_json() if runtime.spark else "",
        checkpoint=env.spark.checkpoint(f"{run_id}-{slug}") if runtime.spark else "",
        trigger_ms=scenario.pipeline.trigger_ms,
        commit=scenario.pipeline.commit,
        kafka=scenario.pipeline.kafka,
    )
    config_path = run_dir / "runtime.json"
    config_path.write_text(config.to_json())
    history = HistoryWriter(config.history_dir, "harness", variant.label)
    history.record(EventKind.RUN_START, detail=f"{runtime.name} {variant.label} topic {topic}")
    return _Lane(spec, variant, config, config_path, history, HistoryTail(config.history_dir))


def _supervise(
    env: Environment, scenario: Scenario, runtime: Runtime, lanes: list[_Lane], out_dir: Path
) -> list[RuntimeSupervisor]:
    """Who runs which lane: a listener's consumers are processes of their own; Spark lanes share
    one driver unless a fault targets a consumer process, which must then be the lane's own
    (see ``harness.pipeline.runtimes``)."""
    targets_consumers = any(f.targets_consumers for f in scenario.faults)

    def supervisor(group: list[_Lane], log_dir: Path) -> RuntimeSupervisor:
        made = RuntimeSupervisor(
            env,
            [Lane(lane.config, lane.config_path, lane.history) for lane in group],
            consumers=scenario.pipeline.consumers,
            restart_delay=scenario.pipeline.restart_delay_s,
            log_dir=log_dir,
        )
        for lane in group:
            lane.planned = made
        return made

    if not runtime.process_per_consumer and not targets_consumers and len(lanes) > 1:
        return [supervisor(lanes, out_dir / f"{lanes[0].config.topic}.logs")]
    return [supervisor([lane], lane.run_dir / "logs") for lane in lanes]


def run_side_by_side(
    env: Environment,
    scenario: Scenario,
    runtime: str,
    specs: list[VariantSpec],
    out_dir: Path,
    progress: Progress = print,
    keep_topics: bool = True,
) -> list[VariantResult]:
    """Run ``specs`` at the same time over one topic that the workload is produced into once."""
    started = time.monotonic()
    rt = get_runtime(runtime)
    run_id = uuid.uuid4().hex[:6]
    topic = f"{scenario.name}.{runtime}.{run_id}"
    create_topic(env.kafka_bootstrap, topic, scenario.partitions)
    lanes = [_lane(env, scenario, rt, spec, topic, out_dir) for spec in specs]
    supervisors = _supervise(env, scenario, rt, lanes, out_dir)
    ledger_path = out_dir / f"{runtime}-{run_id}.ledger.csv"
    producer = _ProducerThread(
        lambda stop, on_ack: produce(
            generate(scenario.workload),
            bootstrap=env.kafka_bootstrap_for(Link.PRODUCER_KAFKA),
            topic=topic,
            ledger_path=ledger_path,
            rate=scenario.rate,
            stop=stop,
            on_ack=on_ack,
            spec=scenario.producer,
            seed=scenario.seed,
        )
    )
    schedule = plan(scenario.faults, scenario.seed)
    nemesis = Nemesis(
        env,
        schedule,
        rt,
        [
            Target(
                HistoryWriter(lane.config.history_dir, "nemesis", lane.variant.label),
                lane.supervisor,
                lane.run_dir,
                label=lane.variant.label,
                name=lane.spec.name,
                group=lane.config.group,
            )
            for lane in lanes
        ],
        topic=topic,
    )
    try:
        for supervisor in supervisors:
            supervisor.start()
        producer.start()
        summary = _wait_until_consumed(
            lanes,
            supervisors,
            producer,
            nemesis,
            ledger_path,
            scenario.pipeline.timeout_s,
            progress,
        )
    finally:
        producer.stop()
        nemesis.restore()
        stop_all(supervisors)
    # Checked once the consumers are done, not when the producer is: reading the whole topic
    # takes seconds on a three-node cluster, and the fault schedule must not wait for it
    # (measured: a bounce planned at +2.5 s started at +5.7 s).
    _verify_stored(env.kafka_bootstrap, topic, ledger_path)
    for lane in lanes:
        if rt.group_member:  # its client logs hold the coordinators' errors
            for consumer in lane.supervisor.consumers:
                harvest(consumer.log, lane.config.history_dir, consumer.name, lane.variant.label)

    ledger = load_ledger(ledger_path)
    seconds = time.monotonic() - started
    # The consumers' own faults (crash points) have no window in the history: named here.
    untimed = tuple(UntimedFault(p.name, p.fault.kind) for p in schedule if not p.steps)
    results = [
        _judge(env, scenario, lane, ledger, ledger_path, summary, seconds, untimed, progress)
        for lane in lanes
    ]
    if not keep_topics:
        topics = [topic] + [dead_letter_topic(lane.config.group) for lane in lanes]
        delete_topics(env.kafka_bootstrap, topics)
        progress(f"    deleted the run's {len(topics)} topics ({topic} and its dead-letter topics)")
    return results


def _judge(
    env: Environment,
    scenario: Scenario,
    lane: _Lane,
    ledger: LedgerArrays,
    ledger_path: Path,
    summary: ProduceSummary,
    seconds: float,
    untimed: tuple[UntimedFault, ...],
    progress: Progress,
) -> VariantResult:
    config = lane.config
    lane.history.record(EventKind.PRODUCED, count=summary.acked)
    sink = read_sink(
        env.mongo_uri,
        config.database,
        lane.variant,
        bootstrap=env.kafka_bootstrap,
        topic=config.topic,
        group=config.group,
    )
    lane.history.record(EventKind.RUN_END)
    lane.history.close()
    events = read_history(config.history_dir)
    verdict = check(ledger, sink, produced=summary.produced, windows=fault_windows(events))
    expectations = scenario.expectations_for(lane.spec, config.runtime)
    failures = tuple(f for e in expectations if (f := e.failure(verdict)) is not None)
    result = VariantResult(
        runtime=config.runtime,
        variant=lane.variant.label,
        verdict=verdict,
        events_per_s=_throughput(events, summary.acked),
        seconds=seconds,
        restarts=lane.supervisor.restarts,
        crashes=lane.supervisor.crashes,
        faults=untimed,
        expectations=tuple(str(e) for e in expectations),
        failures=failures,
        directory=lane.run_dir,
        ledger=ledger_path,
        unfired=unfired(scenario.faults, events, scenario.workload.events),
    )
    progress(
        f"    {lane.variant.label}: {verdict.in_sink} in sink of {verdict.acked} acked, "
        f"{verdict.duplicates} duplicates, {verdict.lost} lost, {verdict.stale} stale, "
        f"{verdict.dead_lettered} dead-lettered; {result.events_per_s:.0f} events/s; "
        f"{result.outcome.value.upper() if not result.passed else 'pass'}"
    )
    for u in result.unfired:
        progress(f"      {u}")
    return result


class _ProducerThread:
    """The producer runs beside the consumers, as it would in production."""

    def __init__(
        self, body: Callable[[threading.Event, Callable[[int], None]], ProduceSummary]
    ) -> None:
        self._stop = threading.Event()
        self._body = body
        self.summary: ProduceSummary | None = None
        self.error: BaseException | None = None
        self.acked = 0  # written by the producer thread, read by the run's loop
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def _run(self) -> None:
        def count(acked: int) -> None:
            self.acked = acked

        try:
            self.summary = self._body(self._stop, count)
        except BaseException as exc:
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def done(self) -> bool:
        if self.error is not None:
            raise LabError(f"the producer failed: {self.error}") from self.error
        return self.summary is not None

    def stop(self, timeout: float = 60.0) -> None:
        """Ask the producer to stop, and wait for it up to ``timeout`` seconds (it flushes what
        it has in flight); a thread cannot be killed, so a producer stuck past that is logged
        and left to die with the process (it is a daemon thread)."""
        self._stop.set()
        self._thread.join(timeout=timeout)
        if self._thread.is_alive():
            log.warning("the producer did not stop within %.0f s; leaving it behind", timeout)


def _end_offsets_of(ledger_path: Path) -> dict[int, int]:
    ledger = load_ledger(ledger_path)
    ends: dict[int, int] = {}
    for p, o in zip(ledger.partition.tolist(), ledger.offset.tolist(), strict=True):
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


def _wait_until_consumed(
    lanes: list[_Lane],
    supervisors: list[RuntimeSupervisor],
    producer: _ProducerThread,
    nemesis: Nemesis,
    ledger_path: Path,
    timeout: float,
    progress: Progress,
) -> ProduceSummary:
    """Until every lane's consumers committed past every acknowledged record and the fault
    schedule has played out, restarting consumers that crash; returns the producer's summary."""
    deadline = time.monotonic() + timeout
    targets: dict[int, int] | None = None
    reported = time.monotonic()
    running: set[str] = set()  # lanes whose consumers handled a batch
    clock: float | None = None  # when all of them had: the fault schedule's zero
    finished: set[str] = set()  # lanes whose consumers committed past every acknowledged record
    while True:
        if clock is None and len(running) == len(lanes):
            clock = time.monotonic()
        nemesis.tick(
            None if clock is None else time.monotonic() - clock,
            producer.acked,
            produced_all=targets is not None,
        )
        for supervisor in supervisors:
            supervisor.check()
        for lane in lanes:
            for event in lane.tail.new_events():
                if event.kind is EventKind.BATCH:
                    running.add(lane.config.group)
                if event.kind is EventKind.COMMIT:
                    for p, offset in event.offsets.items():
                        lane.committed[p] = max(lane.committed.get(p, 0), offset)
        if targets is None and producer.done():
            targets = _end_offsets_of(ledger_path)
        behind = [lane for lane in lanes if not _caught_up(lane.committed, targets)]
        for lane in lanes:
            if lane not in behind and lane.config.group not in finished:
                finished.add(lane.config.group)
                lane.history.record(EventKind.CAUGHT_UP)
        # Once the work is done, a fault that has not started would hit nothing: it is not
        # started (it did not fire; the result says so). One under way plays out.
        if not behind and not nemesis.busy:
            assert producer.summary is not None
            return producer.summary
        now = time.monotonic()
        if now > deadline:
            raise RunTimeout(
                "consumers did not catch up within "
                f"{timeout:.0f}s: "
                + "; ".join(
                    f"{lane.variant.label} committed {lane.committed} of {targets} "
                    f"(see {lane.run_dir}/logs)"
                    for lane in behind
                )
            )
        if now - reported > 10:
            goal = sum(targets.values()) if targets else "?"
            done = ", ".join(
                f"{lane.variant.label} {sum(lane.committed.values())}" for lane in lanes
            )
            progress(f"    committed of {goal}: {done}")
            reported = now
        time.sleep(0.1)


def _caught_up(committed: dict[int, int], targets: dict[int, int] | None) -> bool:
    return targets is not None and all(committed.get(p, 0) >= e for p, e in targets.items())


def _verify_stored(bootstrap: str, topic: str, ledger_path: Path) -> None:
    missing = missing_from_topic(read_ledger(ledger_path), topic_event_ids(bootstrap, topic))
    if missing:
        examples = "; ".join(
            f"{m.row.event_id} acked at partition {m.row.partition} offset {m.row.offset}"
            + (f" (holds {m.found})" if m.found else "")
            for m in missing[:3]
        )
        raise BrokerLostData(
            f"the broker acknowledged {len(missing)} records of {topic} it does not hold "
            f"(e.g. {examples}); this is a defect of the environment (see "
            "harness/workload/verify.py), so no verdict is given"
        )


def _throughput(history: list[HistoryEvent], records: int) -> float:
    events = [e for e in history if e.source != "harness"]
    first = next((e.t for e in events if e.kind is EventKind.BATCH), None)
    last = max((e.t for e in events if e.kind is EventKind.COMMIT), default=None)
    if first is None or last is None or last <= first:
        return 0.0
    return records / (last - first)
