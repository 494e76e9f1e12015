"""Running an outbox scenario (seed 003): the application writes, the relays publish, the sink
stores - and each stage is counted.

One run: an application database whose ``orders`` collection the application writes (with
its outbox, in the scenario's shapes) while every relay variant reads its change stream side by
side, each into target topics of its own, as a supervised process (killed and restarted like a
listener); the fault schedule plays meanwhile. Once every relay has relayed the application's
end marker, each relay's target topics are read back (the published stage) and the scenario's
sink variant stores them into a database of the relay's (the stored stage): the downstream sink
here reads the topics once the relay is done, in batches of ``pipeline.batch_size``, through the
sink variant's own write - faults downstream are the sink scenarios' business.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from harness.checker.check import check
from harness.checker.model import RelayStage
from harness.environment.base import Environment, Link
from harness.faults.base import Target
from harness.faults.nemesis import Nemesis
from harness.faults.schedule import plan
from harness.history.events import EventKind, HistoryTail, HistoryWriter, read_history
from harness.history.windows import fault_windows
from harness.kafka.clients import StoredRecord, create_topic, delete_topics, read_topic
from harness.outbox.relay import RELAYED, target, token_topic
from harness.outbox.relays import make_relay
from harness.outbox.stages import published_snapshot, written_ledger
from harness.outbox.workload import OutboxSpec, generate_writes
from harness.outbox.writer import SOURCE, WrittenEntry, read_written, write_all
from harness.pipeline.batch import RawRecord, split
from harness.pipeline.mongo_options import uri_with
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.runtimes import RELAY
from harness.pipeline.sink import database_for, prepare_sink, read_sink, slug
from harness.pipeline.supervisor import Lane, RuntimeSupervisor, stop_all
from harness.pipeline.variants import Variant, WriteContext, import_path, make_variant
from harness.results.fired import unfired
from harness.results.model import Judged, UntimedFault, VariantResult
from harness.run.loop import ProducerThread, Progress, Watch, await_ready, wait_until_consumed
from harness.scenario import RelaySpec, Scenario
from harness.workload.producer import ProduceSummary


@dataclass(frozen=True)
class _RelayLane:
    spec: RelaySpec
    label: str
    config: RuntimeConfig
    history: HistoryWriter
    supervisor: RuntimeSupervisor
    watch: Watch

    @property
    def run_dir(self) -> Path:
        return Path(self.config.run_dir)


def run_outbox(
    env: Environment,
    scenario: Scenario,
    out_dir: Path,
    progress: Progress = print,
    keep_topics: bool = True,
    stop: threading.Event | None = None,
) -> list[VariantResult]:
    """Every relay of ``scenario`` side by side over one application's writes; each judged.
    ``stop`` set ends the run (``harness.run.loop.Stopped``)."""
    outbox = scenario.outbox
    assert outbox is not None, "not an outbox scenario"
    started = time.monotonic()
    run_id = uuid.uuid4().hex[:6]
    app_db = database_for(run_id, "app")
    admin: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with admin:
        admin[app_db].create_collection(SOURCE)
    ledger = out_dir / f"outbox-{run_id}.written.csv"
    lanes = [_lane(env, scenario, spec, run_id, app_db, out_dir) for spec in scenario.relays]
    progress(
        f"[{len(lanes)} relays] {', '.join(lane.label for lane in lanes)} "
        f"-> sink {scenario.variants[0].label}"
    )
    writer = ProducerThread(
        lambda stop, on_ack: _write(env, outbox, scenario.seed, app_db, ledger, stop, on_ack)
    )
    targets = [
        Target(
            HistoryWriter(lane.config.history_dir, "nemesis", lane.label),
            lane.supervisor,
            lane.run_dir,
            runtime=RELAY,
            label=lane.label,
            name=lane.spec.name,
            group=lane.config.group,
        )
        for lane in lanes
    ]
    nemesis = Nemesis(env, plan(scenario.faults, scenario.seed), targets)
    supervisors = [lane.supervisor for lane in lanes]
    try:
        for supervisor in supervisors:
            supervisor.start()
        # The application starts after its relays, as a deployment's would.
        await_ready(
            [lane.watch for lane in lanes],
            supervisors,
            what="the relays' change streams",
            timeout=60.0,
            progress=progress,
            stop=stop,
        )
        writer.start()
        summary = wait_until_consumed(
            [lane.watch for lane in lanes],
            supervisors,
            writer,
            nemesis,
            lambda: dict(RELAYED),
            scenario.pipeline.timeout_s,
            progress,
            _relayed,
            stop=stop,
        )
    finally:
        writer.stop()
        nemesis.restore()
        stop_all(supervisors)
    seconds = time.monotonic() - started
    entries = list(read_written(ledger))
    results = [
        _judge(env, scenario, lane, entries, summary, ledger, run_id, seconds, progress)
        for lane in lanes
    ]
    if not keep_topics:
        topics = [t for lane in lanes for t in _topics(lane.config, outbox)]
        delete_topics(env.kafka_bootstrap, topics)
    return results


def _relayed(watches: Sequence[Watch], targets: dict[int, int] | None) -> str:
    """The wait loop's progress line: which relays have relayed the application's end."""
    state = ", ".join(
        f"{w.label} {'yes' if sum(w.committed.values()) else 'not yet'}" for w in watches
    )
    writing = "" if targets else " (the application is still writing)"
    return f"    relayed the application's end marker{writing}: {state}"


def _topics(config: RuntimeConfig, outbox: OutboxSpec) -> list[str]:
    return [target(config, t) for t in outbox.topics] + [token_topic(config)]


def _lane(
    env: Environment, scenario: Scenario, spec: RelaySpec, run_id: str, app_db: str, out_dir: Path
) -> _RelayLane:
    assert scenario.outbox is not None
    relay = make_relay(spec.name, spec.options)
    run_dir = (out_dir / f"relay-{slug(relay.label)}").absolute()  # the relay runs elsewhere
    run_dir.mkdir(parents=True, exist_ok=True)
    group = f"{scenario.name}.{run_id}.{slug(relay.label)}"
    config = RuntimeConfig(
        runtime=RELAY.name,
        bootstrap=env.kafka_bootstrap_for(Link.CONSUMER_KAFKA),
        mongo_uri=uri_with(env.mongo_uri_for(Link.CONSUMER_MONGO), scenario.pipeline.mongo),
        mongo=scenario.pipeline.mongo,
        topic=group,
        group=group,
        database=app_db,
        variant=spec.name,
        variant_options=spec.options,
        run_dir=str(run_dir),
        crash_plans=scenario.crash_plans,
        import_path=import_path(spec.name, spec.options),  # a user's relay, for the process
    )
    for topic in _topics(config, scenario.outbox):
        create_topic(
            env.kafka_bootstrap, topic, 1 if topic == token_topic(config) else scenario.partitions
        )
    config_path = run_dir / "runtime.json"
    config_path.write_text(config.to_json())
    history = HistoryWriter(config.history_dir, "harness", relay.label)
    history.record(EventKind.RUN_START, detail=f"relay {relay.label} from {app_db}.{SOURCE}")
    supervisor = RuntimeSupervisor(
        env,
        [Lane(config, config_path, history)],
        consumers=1,
        restart_delay=scenario.pipeline.restart_delay_s,
        log_dir=run_dir / "logs",
        runtime=RELAY,
    )
    watch = Watch(
        relay.label, HistoryTail(config.history_dir), history, run_dir / "logs", RELAY.ready
    )
    return _RelayLane(spec, relay.label, config, history, supervisor, watch)


def _write(
    env: Environment,
    outbox: OutboxSpec,
    seed: int,
    app_db: str,
    ledger: Path,
    stop: threading.Event,
    on_ack: Callable[[int], None],
) -> ProduceSummary:
    """The application, in the writer's thread."""
    started = time.monotonic()
    # The application reaches MongoDB directly: link faults are the relay's (its CONSUMER_MONGO).
    client: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with client:
        written = write_all(
            client[app_db][SOURCE],
            generate_writes(outbox, seed),
            ledger,
            cleanup=outbox.cleanup,
            rate=outbox.rate,
            stop=stop,
            on_ack=on_ack,
        )
    return ProduceSummary(written, written, 0, time.monotonic() - started)


def _store(
    env: Environment,
    scenario: Scenario,
    lane: _RelayLane,
    variant: Variant,
    records: list[tuple[str, list[StoredRecord]]],
    database: str,
) -> None:
    """The downstream sink: the scenario's sink variant writes what the relay published."""
    prepare_sink(env.mongo_uri, database, variant)
    client: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    size = scenario.pipeline.batch_size
    with client:
        db = client[database]
        for topic, found in records:
            for n, start in enumerate(range(0, len(found), size), start=1):
                raw = [
                    RawRecord(r.partition, r.offset, r.value) for r in found[start : start + size]
                ]
                batch, _poison = split(n, topic, lane.config.group, raw)
                variant.write(batch, WriteContext(client, db, n, None, n))


def _judge(
    env: Environment,
    scenario: Scenario,
    lane: _RelayLane,
    entries: list[WrittenEntry],
    summary: ProduceSummary,
    ledger: Path,
    run_id: str,
    seconds: float,
    progress: Progress,
) -> VariantResult:
    assert scenario.outbox is not None
    topics = [target(lane.config, t) for t in scenario.outbox.topics]
    published = [(t, read_topic(env.kafka_bootstrap, t, contents=True)) for t in topics]
    database = database_for(run_id, f"sink-{slug(lane.label)}")
    spec = scenario.variants[0]
    variant = make_variant(spec.name, spec.options)
    _store(env, scenario, lane, variant, published, database)
    lane.history.record(EventKind.PRODUCED, count=summary.acked)
    lane.history.record(EventKind.RUN_END)
    lane.history.close()
    events = read_history(lane.config.history_dir)
    windows = fault_windows(events)
    written = written_ledger(entries)
    relay_stage = RelayStage(
        check(written, published_snapshot(r for _, found in published for r in found),
              produced=len(entries), windows=windows),
        history_lost=sum(1 for e in events if e.kind is EventKind.HISTORY_LOST),
    )  # fmt: skip
    sink = read_sink(
        env.mongo_uri, database, variant, bootstrap=env.kafka_bootstrap, topic=topics[0],
        group=lane.config.group,
    )  # fmt: skip
    verdict = check(written, sink, produced=len(entries), windows=windows)
    judged = Judged.of(scenario.expectations_for(lane.spec, RELAY.name), verdict, relay_stage)
    untimed = tuple(
        UntimedFault(f.name, f.kind) for f in scenario.faults if not f.steps(scenario.seed)
    )
    result = VariantResult(
        runtime=RELAY.name,
        variant=lane.label,
        verdict=verdict,
        seconds=seconds,
        restarts=lane.supervisor.restarts,
        crashes=lane.supervisor.crashes,
        faults=untimed,
        expectations=judged.expectations,
        failures=judged.failures,
        rates=judged.rates,
        directory=lane.run_dir,
        ledger=ledger,
        unfired=unfired(scenario.faults, events, len(entries)),
        relay=relay_stage,
    )
    p = relay_stage.published
    progress(
        f"    {lane.label}: {verdict.acked} entries written; published {p.unique_in_sink} "
        f"(+{p.duplicates} copies, {p.lost} lost); stored {verdict.unique_in_sink} "
        f"(+{verdict.duplicates} copies, {verdict.lost} lost); "
        f"{'pass' if result.passed else result.outcome.value.upper()}"
    )
    for u in result.unfired:
        progress(f"      {u}")
    return result
