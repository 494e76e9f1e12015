"""The scenario library, run from the CLI against the local backend: every file's expectations
hold, and what each seed's incident should show, shows."""

from __future__ import annotations

import itertools
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from harness.environment.local import LocalEnvironment
from harness.faults.schedule import describe, plan
from harness.history.events import EventKind, read_history, written_again
from harness.kafka.clients import admin, read_topic
from harness.outbox.relay import target
from harness.outbox.writer import read_written
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.variants import make_variant
from harness.pipeline.variants.connect import Connect
from harness.report.table import BESIDE_NOTE, beside
from harness.results.model import RESULTS, load
from harness.scenario import Scenario, VariantSpec, load_scenario
from harness.sources.sql_workload import RowChange, Transaction, split, transactions
from harness.sources.stages import snapshots, source_change
from harness.sources.truth import lsn_number
from harness.workload.events import Kind, Op, change_event_id, change_lsn
from harness.workload.ledger import LedgerRow, read_ledger
from harness.workload.producer import aborted_ledger
from harness.workload.shapes import TRACE
from tests.support import SPARK, chaoslab
from tests.tiers import LIBRARY as LIBRARY_TIER

pytestmark = pytest.mark.servers

LIBRARY = sorted(Path("scenarios").glob("*.yaml"))


def run_cli(env: LocalEnvironment, out: Path, *args: str) -> tuple[Any, dict[str, Any]]:
    """Run the CLI as a user in another folder does: from ``out``'s parent, ``--out`` relative
    (a Spark executor runs in a folder of its own: the lanes' paths must not be)."""
    given = [str(Path(a).absolute()) if a.endswith(".yaml") else a for a in args]
    result = chaoslab(
        *given, "--env", str(env.directory), "--out", out.name, cwd=out.parent, timeout=1500
    )
    written = out / RESULTS
    assert written.exists(), (
        f"chaoslab {' '.join(args)} exited {result.returncode} and wrote no {written.name};"
        f" its last output:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    report = json.loads(written.read_text())
    return result, report


def replayed_by_crashes(row: dict[str, Any]) -> int:
    """Records a variant had written in the batches its crashes interrupted."""
    events = read_history(Path(row["directory"]) / "history")
    crashes = [e for e in events if e.kind is EventKind.CRASH]
    total = 0
    for crash in crashes:
        written = [
            e for e in events
            if e.kind is EventKind.WRITTEN and e.source == crash.source and e.t <= crash.t
        ]  # fmt: skip
        assert written and written[-1].batch == crash.batch, "crash before the batch was written"
        count = written[-1].count
        assert count is not None  # a written event always counts its records
        total += count
    return total


def assert_stages_add_up(row: dict[str, Any]) -> None:
    """Every outbox entry written was published or lost at publish, and every entry published
    was stored or lost downstream."""
    published, variant = row["relay"]["published"], row["variant"]
    assert published["unique_in_sink"] + published["lost"] == row["expected"], variant
    assert row["unique_in_sink"] + row["lost"] == row["expected"], variant
    assert row["unique_in_sink"] <= published["unique_in_sink"], variant


def assert_bad_records_recount(
    env: LocalEnvironment, rows: dict[tuple[str, str], dict[str, Any]]
) -> None:
    """poison-shapes' outcomes, recounted apart from the checker: each lane's dead-letter topic
    (the origin its headers name, the lab's or Connect's) and its landing collection (each
    document's record, by event id or lab_trace) against each bad record's outcome."""
    mongo: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with mongo:
        for (_, variant), r in rows.items():
            assert r["followed"] is True and r["bad"], variant
            config = json.loads((Path(r["directory"]) / "runtime.json").read_text())
            letters = []
            for record in read_topic(env.kafka_bootstrap, f"{config['group']}.dlq"):
                h = record.headers
                p, o = (("origin-partition", "origin-offset") if "origin-offset" in h else
                        ("__connect.errors.partition", "__connect.errors.offset"))  # fmt: skip
                letters.append((int(h[p]), int(h[o])))
            dead = set(letters)
            # The good records among them (the tolerant connector's, skipped after the 16 MiB
            # record's refused write), each run named with that record where the run starts
            # with the record after it on its partition.
            bad_at = {(f["partition"], f["offset"]): f for f in r["bad"]}
            assert sum(1 for at in letters if at not in bad_at) == r["good_dead_lettered"]
            for run in r["dead_lettered_good"]:
                culprits = {(c["partition"], c["offset"]) for c in run["culprits"]}
                assert all(bad_at[at]["shape"] == "oversize" for at in culprits), (variant, run)
                before = (run["first"][0], run["first"][1] - 1)
                if before in bad_at and bad_at[before]["shape"] == "oversize":
                    assert culprits == {before}, (variant, run)
            landing = make_variant(config["variant"], config["variant_options"]).landing()
            docs = mongo[config["database"]][landing.collection].find({}, {"event_id": 1, TRACE: 1})
            held = Counter(str(d.get("event_id", d.get(TRACE))) for d in docs)
            for fate in r["bad"]:
                at, traced = (fate["partition"], fate["offset"]), held[fate["event_id"]]
                what = (variant, fate["shape"], fate["outcome"], at)
                assert (fate["outcome"] == "dead-lettered") == (at in dead), what
                if fate["outcome"] == "stored":
                    assert traced == 1, what
                elif fate["outcome"] in ("dropped", "lane stopped"):
                    assert traced == 0, what
                if fate["change"] is not None:  # the good change it displaced: in no document
                    assert held[fate["displaced"]] == 0, what
            displaced = sum(1 for f in r["bad"] if f["change"] is not None)
            assert displaced == r["displaced"] and (displaced == 0 or r["lost"] >= displaced)


def assert_relay_source_recounts(
    env: LocalEnvironment, rows: dict[tuple[str, str], dict[str, Any]]
) -> None:
    """An outbox relay as the source, recounted apart from the checker: the entries the
    application's ledger says MongoDB acknowledged, the relay's copies from its target topic's
    own records, each lane's documents from MongoDB, the relay's kills from its history."""
    (ledger,) = {r["ledger"] for r in rows.values()}
    written = {e.entry_id for e in read_written(Path(ledger).with_suffix(".written.csv"))}
    (topic,) = {row.topic for row in read_ledger(Path(ledger))}
    on_topic = Counter(
        json.loads(record.value or b"{}")["event_id"]
        for record in read_topic(env.kafka_bootstrap, topic, contents=True)
    )
    assert set(on_topic) <= written  # nothing the application did not write
    copies = sum(on_topic.values()) - len(on_topic)
    assert copies > 0
    (source,) = Path(next(iter(rows.values()))["directory"]).parent.glob("source-*")
    kills = [e for e in read_history(source / "history") if e.kind is EventKind.CRASH]
    assert len(kills) == 3, kills
    mongo: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with mongo:
        for (_, variant), r in rows.items():
            published = r["relay"]["published"]
            assert (published["duplicates"], published["lost"]) == (copies, 0), variant
            assert r["expected"] == len(written), variant
            config = json.loads((Path(r["directory"]) / "runtime.json").read_text())
            documents = list(mongo[config["database"]].events.find({}, {"event_id": 1}))
            assert len(documents) == r["in_sink"], variant
            stored = Counter(d["event_id"] for d in documents)
            if variant == "naive":  # every record: each copy too
                assert stored == on_topic and r["duplicates"] == copies, variant
            elif not r["stopped"]:  # keyed by the entry's id: each once
                assert set(stored) == set(on_topic) and len(documents) == len(on_topic), variant


def assert_cdc_recounts(
    env: LocalEnvironment, scenario: Scenario, rows: dict[tuple[str, str], dict[str, Any]]
) -> None:
    """A Debezium source's run, recounted apart from the checker: the changes the application
    committed (its plan; with the database restarted, what its log kept), the copies from the
    change topic's own records, the documents from MongoDB."""
    planned = transactions(scenario.workload)
    (ledger,) = {r["ledger"] for r in rows.values()}
    truth = [row for row in read_ledger(Path(ledger)) if row.kind is Kind.NORMAL]
    restarted = any(f.kind == "postgres-restart" for f in scenario.faults)
    if not restarted:  # each planned change committed once (a restart may cut a long one off)
        assert len(truth) == sum(len(t.changes) for t in planned)
    (topic,) = {row.topic for row in read_ledger(Path(ledger))}
    on_topic = Counter(
        change_event_id(c.lsn, c.order_id)
        for record in read_topic(env.kafka_bootstrap, topic, contents=True)
        if (c := source_change(record)) is not None
    )
    assert set(on_topic) <= {row.event_id for row in truth}  # nothing the database did not commit
    copies = sum(on_topic.values()) - len(on_topic)
    mongo: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with mongo:
        for (_, variant), r in rows.items():
            published = r["relay"]["published"]
            assert published["lost"] == len(truth) - len(on_topic), variant
            assert published["duplicates"] == copies, variant
            if variant == "connect-cdc":  # its state against the plan's last change of each row
                assert_state_recounts(mongo, planned, r)
                continue
            assert r["expected"] == len(truth), variant
            config = json.loads((Path(r["directory"]) / "runtime.json").read_text())
            documents = list(mongo[config["database"]].events.find({}, {"event_id": 1}))
            stored = Counter(d["event_id"] for d in documents)
            assert len(documents) == r["in_sink"], variant
            if variant == "naive":  # every record, each copy, and what its own crashes replayed
                assert set(stored) == set(on_topic) and on_topic - stored == Counter(), variant
                assert sum(stored.values()) - len(on_topic) == r["duplicates"], variant
                assert r["duplicates"] == copies + replayed_by_crashes(r), variant
            elif variant == "idempotent":  # keyed by the change's LSN: each once
                assert set(stored) == set(on_topic) and len(documents) == len(on_topic), variant
            elif variant == "idempotent[key=business]" and not restarted:
                # Seed 000's txId + order_id: a transaction's second change of an order
                twice = sum(
                    n - 1 for t in planned for n in Counter(c.order_id for c in t.changes).values()
                )
                assert len(documents) == len(truth) - twice, variant
                assert r["lost"] == twice > 0, variant


RESTARTED_INSIDE = re.compile(
    r"Will restart from LSN 'LSN\{([0-9A-F]+/[0-9A-F]+)\}' skipping first \d+ already-processed"
)


def debezium_source_run(row: dict[str, Any]) -> tuple[list[LedgerRow], Counter[int], str]:
    """A Debezium-sourced lane's ledger, how many committed rows share each LSN (a COPY's
    rows all do), and the source's Connect log."""
    ledger = list(read_ledger(Path(row["ledger"])))
    shared = Counter(change_lsn(r.event_id) for r in ledger if r.kind is Kind.NORMAL)
    log = (Path(row["directory"]).parent / "source" / "connect" / "connect-0.log").read_text()
    return ledger, shared, log


def assert_copies_are_debeziums_resume_inside_a_copy(row: dict[str, Any]) -> None:
    """Each copy of a change on a Debezium source's topic is a row of a COPY (an LSN several
    committed rows share) at whose LSN Debezium's own log says it restarted, skipping the rows
    its offset counted as processed (3.7.0's resume inside one LSN's rows, which puts one row
    on the topic again; docs/cdc-source.md) - no other copy, and at most one per restart."""
    ledger, shared, log = debezium_source_run(row)
    copies = [change_lsn(r.event_id) for r in ledger if r.kind is Kind.COPY]
    restarts = Counter(lsn_number(text) for text in RESTARTED_INSIDE.findall(log))
    assert len(copies) == row["relay"]["published"]["duplicates"], (copies, row["variant"])
    assert all(shared[c] > 1 for c in copies), (copies, shared)
    assert not Counter(copies) - restarts, (copies, restarts)


# Debezium's restart from an offset that counted one event processed at its change LSN.
RESTARTED_AFTER_ONE = re.compile(
    r"Looking for WAL restart position for last commit LSN '[^']*' and last change LSN "
    r"'LSN\{([0-9A-F]+/[0-9A-F]+)\}', events processed at LSN '1'"
)


def assert_losses_are_debeziums_restart_after_one(row: dict[str, Any]) -> None:
    """Each change a Debezium source committed and never put on its topic is a row of a COPY
    (an LSN several rows share) from whose LSN Debezium's own log says it restarted with one
    event processed there: 3.7.0 counts the events processed at an LSN only when more than one
    was, and otherwise resumes after the LSN, past the COPY's other rows (3.7.1 counts one too;
    docs/cdc-source.md). With exactly-once those rows were in the transaction the kill aborted:
    lost - all of them, and no other change. The lanes lose nothing more."""
    ledger, shared, log = debezium_source_run(row)
    never = Counter(
        change_lsn(r.event_id) for r in ledger if r.kind is Kind.NORMAL and r.partition < 0
    )
    restarts = {lsn_number(at) for at in RESTARTED_AFTER_ONE.findall(log)}
    assert sum(never.values()) == row["relay"]["published"]["lost"], (never, row["variant"])
    for at, count in never.items():
        assert at in restarts and count == shared[at] - 1, (at, count, shared[at], restarts)
    assert row["lost"] == row["relay"]["published"]["lost"] >= row["stale"], row["variant"]


def assert_slot_lost_after_its_cap(rows: dict[tuple[str, str], dict[str, Any]]) -> None:
    """cdc-slot-behind: the slot kept its WAL when nothing capped it, and was invalidated at the
    capped checkpoint, as PostgreSQL's own pg_replication_slots said in the source's history;
    the source stopped for good there, and lost nothing before the uncapped window ended."""
    (lane, *_) = rows.values()
    events = read_history(Path(lane["directory"]).parent / "source" / "history")
    said = {e.fault: e.detail for e in events
            if e.kind is EventKind.FAULT_STEP and "a checkpoint" in e.detail}  # fmt: skip
    assert " reserved (" in said["behind"] or " extended (" in said["behind"], said
    assert said["behind-capped"].endswith(" lost"), said
    (stopped,) = [e for e in events if e.kind is EventKind.FAILED_FOR_GOOD]
    assert "wal_status lost" in stopped.detail
    behind_ended = next(e.t for e in events
                        if e.kind is EventKind.FAULT_END and e.fault == "behind")  # fmt: skip
    never = [row for row in read_ledger(Path(lane["ledger"]))
             if row.kind is Kind.NORMAL and row.partition < 0]  # fmt: skip
    assert never and min(row.acked_at for row in never) > behind_ended
    for (_, variant), r in rows.items():
        assert r["relay"]["published"]["lost"] == len(never), variant


def assert_snapshot_recounts(
    env: LocalEnvironment, scenario: Scenario, rows: dict[tuple[str, str], dict[str, Any]]
) -> None:
    """A Debezium source over a table with rows, its snapshot interrupted: recounted from the
    plan (the rows its first changes left, then each later change), the change topic's own
    records and MongoDB."""
    head, tail = split(transactions(scenario.workload), scenario.source.existing)
    table: dict[int, int] = {}
    for change in (c for t in head for c in t.changes):
        if change.op is Op.DELETE:
            del table[change.order_id]
        else:
            table[change.order_id] = change.version
    expected = set(table.items()) | {(c.order_id, c.version) for t in tail for c in t.changes}
    (ledger,) = {r["ledger"] for r in rows.values()}
    (topic,) = {row.topic for row in read_ledger(Path(ledger))}
    records = read_topic(env.kafka_bootstrap, topic, contents=True)
    changes = [c for record in records if (c := source_change(record)) is not None]
    on_topic = Counter((c.order_id, c.version) for c in changes)
    assert set(on_topic) <= expected  # nothing the database did not commit
    assert snapshots(records) == (2, 1)  # the first cut off, the second whole
    copies = sum(on_topic.values()) - len(on_topic)
    mongo: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with mongo:
        for (_, variant), r in rows.items():
            assert r["relay"]["snapshots"] == [2, 1], variant
            assert r["relay"]["snapshot_rows"] == len(table), variant
            published = r["relay"]["published"]
            assert published["lost"] == len(expected - set(on_topic)) > 0, variant
            assert published["duplicates"] == copies > 0, variant
            assert r["expected"] == len(expected), variant
            # Each copy is the second snapshot's read of a row the first had sent: another
            # transaction and LSN, so no key of the change's source identity takes it once.
            assert r["duplicates"] == copies, variant
            config = json.loads((Path(r["directory"]) / "runtime.json").read_text())
            stored = mongo[config["database"]].events.count_documents({})
            assert stored == r["in_sink"] == len(on_topic) + copies, variant


def assert_state_recounts(
    mongo: MongoClient[dict[str, Any]], planned: list[Transaction], r: dict[str, Any]
) -> None:
    """A current-state sink's documents: each row of the plan's end at its version, no row the
    plan deleted; and its rows went back while the replays were under way (the lab's watch)."""
    last: dict[int, RowChange] = {}
    for t in planned:
        for c in t.changes:
            last[c.order_id] = c
    rows = {o: c.version for o, c in last.items() if c.op is not Op.DELETE}
    config = json.loads((Path(r["directory"]) / "runtime.json").read_text())
    documents = list(mongo[config["database"]].events.find({}))
    assert {d["_id"]["order_id"]: d["version"] for d in documents} == rows
    assert (r["lost"], r["stale"], r["expected"]) == (0, 0, len(last))
    events = read_history(Path(r["directory"]) / "history")
    assert any(e.kind is EventKind.WENT_BACK for e in events)


def assert_relay_crash_holds(rows: dict[tuple[str, str], dict[str, Any]]) -> None:
    """outbox-relay-crash: three kills of each relay between publish and token save; the naive
    and idempotent relays publish copies (stored again by the naive sink), the transactional
    one none - and each kill of a naive or idempotent relay is followed by copies of its own,
    published (the records' own timestamps) before the next kill."""
    for (_, variant), r in rows.items():
        assert r["crashes"] == 3, variant
        copies = (r["relay"]["published"]["duplicates"], r["duplicates"])
        if variant == "transactional":
            assert copies == (0, 0) and r["lost"] == 0
            continue
        assert copies[0] > 0 and copies[1] > 0, variant
        events = read_history(Path(r["directory"]) / "history")
        kills = [*sorted(e.t for e in events if e.kind is EventKind.CRASH), float("inf")]
        published_copies = [
            a["at"] for a in r["relay"]["published"]["anomalies"] if a["kind"] == "duplicate"
        ]
        for kill, next_kill in itertools.pairwise(kills):
            assert any(kill < t <= next_kill for t in published_copies), (variant, kill)


def lost_at_publish(env: LocalEnvironment, row: dict[str, Any], topics: list[str]) -> list[Any]:
    """The ledger's entries that are in none of the relay's target topics, read back here."""
    config = RuntimeConfig.load(str(Path(row["directory"]) / "runtime.json"))
    published = {
        json.loads(r.value)["_id"]
        for topic in topics
        for r in read_topic(env.kafka_bootstrap, target(config, topic), contents=True)
        if r.value is not None
    }
    return [e for e in read_written(Path(row["ledger"])) if e.entry_id not in published]


# Where the library's connectors store (none of its configs names a collection): said here, not
# asked of the variant the checker asks, so that a recount does not share the checker's mistake.
CONNECTORS_COLLECTION = "events"


def recount(env: LocalEnvironment, row: dict[str, Any]) -> tuple[int, int, int, int]:
    """(documents of changes, extra copies, changes lost, documents of poison records) of a
    lane's landing collection, counted here from its documents' event ids and the ledger - not
    by the lab's checker."""
    ledger = {r.event_id: r for r in read_ledger(Path(row["ledger"]))}
    expected = {(r.order_id, r.version) for r in ledger.values() if r.kind is not Kind.POISON}
    config = RuntimeConfig.load(str(Path(row["directory"]) / "runtime.json"))
    mongo: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with mongo:
        database = mongo[config.database]
        assert database.list_collection_names() != [], (row["variant"], "no collection at all")
        docs = list(database[CONNECTORS_COLLECTION].find({}, {"event_id": 1, TRACE: 1}))
    # A bad record without an event id is known by its lab_trace (harness.workload.shapes).
    rows = [ledger[str(d.get("event_id", d.get(TRACE)))] for d in docs]
    changes = [r for r in rows if r.kind is not Kind.POISON]
    stored = Counter((r.order_id, r.version) for r in changes)
    extra, lost = sum(n - 1 for n in stored.values()), len(expected - set(stored))
    return len(changes), extra, lost, len(rows) - len(changes)


def committed(row: dict[str, Any]) -> dict[int, int]:
    """Each partition's offset the lane committed last, from its history: what its consumers
    said (COMMIT) or what the lab saw of its group (COMMITTED)."""
    done: dict[int, int] = {}
    for e in read_history(Path(row["directory"]) / "history"):
        if e.kind in (EventKind.COMMIT, EventKind.COMMITTED):
            for p, offset in e.offsets.items():
                done[p] = max(done.get(p, 0), offset)
    return done


def poison_past_its_commits(row: dict[str, Any]) -> int:
    """The poison records at or after the offsets a lane committed: a lane that stopped read
    none past its last commit but those its commit lagged behind (Connect flushes on a clock)."""
    done = committed(row)
    return sum(
        1
        for r in read_ledger(Path(row["ledger"]))
        if r.kind is Kind.POISON and r.offset >= done.get(r.partition, 0)
    )


def counted(row: dict[str, Any]) -> tuple[int, int, int, int]:
    """The lab's figures for what ``recount`` counts. Its extra copies are the variant's
    duplicates and the topic's (a record a producer's retry stored twice in Kafka, written
    twice by a sink that mints its ids: seen in connect-rolling-upgrade's broker kills)."""
    extra = row["duplicates"] + row["topic_duplicates"]
    return row["in_sink"], extra, row["lost"], row.get("poison_stored", 0)


def assert_connector_replay(env: LocalEnvironment, rows: dict[tuple[str, str], Any]) -> None:
    """spark-connector-replay: every lane lost an executor mid-task and had its driver killed
    between its write and its checkpoint's commit; the connector's lanes, recounted."""
    for (_, variant), r in rows.items():
        events = read_history(Path(r["directory"]) / "history")
        lost = [e for e in events if e.kind is EventKind.EXECUTOR_LOST]
        assert len(lost) == 1 and "executor PID" in lost[0].detail, (variant, lost)
        crashes = [e for e in events if e.kind is EventKind.CRASH]
        if r["stopped"]:
            # It stopped on the lost task's batch: Spark's retry of the task inserted its first
            # 40 documents again (E11000), every restart of the query did, and it never reached
            # the batch whose commit the crash was to interrupt.
            failed = {e.batch for e in events if e.kind is EventKind.QUERY_FAILED}
            assert failed == {lost[0].batch} and not crashes, (variant, failed, crashes)
        else:
            assert [c.detail for c in crashes] == ["after_write_before_commit"], variant
            # Spark replayed the killed batch from its checkpoint: written again.
            written = [e.batch for e in events if e.kind is EventKind.WRITTEN]
            assert written.count(crashes[0].batch) >= 2, (variant, written)
        if variant.startswith("connector-"):
            assert recount(env, r) == counted(r), variant
    # The connector's defaults (a row without _id: an insert): the replays' copies.
    assert rows[("spark", "connector-sink")]["duplicates"] > 0
    keyed = rows[("spark", "connector-sink[idFieldList=event_id]")]
    assert (keyed["duplicates"], keyed["lost"]) == (0, 0)
    # insert on the event id: a replay is E11000, every time, and the lane stops (the whole
    # scenario's lane; its cut has none).
    insert = rows.get(("spark", "connector-batch[operationType=insert,_id=event_id]"))
    if insert is not None:
        assert insert["duplicates"] == 0 and insert["lost"] > 0
        assert "E11000" in insert["stopped"], insert["stopped"]


def assert_connect_worker_loss(
    env: LocalEnvironment, scenario: Scenario, rows: dict[tuple[str, str], Any]
) -> None:
    """connect-worker-loss: a worker of the run's cluster that does not lead its group
    SIGKILLed, gone for good; the tasks it ran waited for the scheduled rebalance; the lanes'
    documents, recounted. The waits are the run's own (its cut's shorter ones, or whole)."""
    delay_s = int(scenario.pipeline.connect["scheduled.rebalance.max.delay.ms"]) / 1000
    sessions = {
        spec.label: int(spec.options["config"].get("consumer.override.session.timeout.ms", 45000))
        / 1000
        for spec in scenario.variants
    }
    for (runtime, variant), r in rows.items():
        assert runtime == "connect"
        events = read_history(Path(r["directory"]) / "history")
        steps = [e for e in events if e.kind is EventKind.FAULT_STEP]
        killed = [e.detail for e in steps if e.detail.startswith("SIGKILLed")]
        assert len(killed) == 1 and ", a follower; it ran " in killed[0], killed
        # What it stores again is what the dead worker's tasks of it wrote: it had some there.
        assert variant != "connect-default" or "connect-default's task" in killed[0], killed
        exits = [e.detail for e in events if e.kind is EventKind.RUNTIME_EXIT]
        assert exits == [f"{killed[0].split()[2].rstrip(',')} killed by SIGKILL"], (variant, exits)
        # Connect moved the dead worker's tasks, and none before the scheduled rebalance's
        # delay had passed (the fault lasts until it has).
        kill = next(e.t for e in steps if e.detail.startswith("SIGKILLed"))
        moved = [e.t - kill for e in events if e.kind is EventKind.CONNECTOR_STATE
                 and e.t > kill and e.detail.startswith("task ")]  # fmt: skip
        assert moved and min(moved) >= delay_s, (variant, moved)
        if variant == "connect-default":
            # Its dead tasks' partitions went to its other tasks once their consumers' session
            # had timed out (less the heartbeat before the kill): what it stored again.
            taken = [e.t - kill for e in events if e.kind is EventKind.CONSUMER_LOG
                     and e.t > kill and "Adding newly assigned partitions" in e.detail]  # fmt: skip
            assert taken and min(taken) >= sessions[variant] - 5, taken
        assert recount(env, r) == counted(r), variant
    assert rows[("connect", "connect-default")]["duplicates"] > 0
    for keyed in ("connect-idempotent", "connect-business-key"):
        assert (rows[("connect", keyed)]["duplicates"], rows[("connect", keyed)]["lost"]) == (0, 0)


def assert_connect_rolling_upgrade(rows: dict[tuple[str, str], Any]) -> None:
    """connect-rolling-upgrade: every node killed once, one at a time from the coordinator of
    connect-default's group; the tasks' offset flushes failed while their coordinator moved
    (seed 002's failed commits, as the worker logged them); what the connectors stored is
    checked by the expectations and recounted."""
    failed = []
    for (runtime, variant), r in rows.items():
        assert runtime == "connect" and not r["unfired"], variant
        events = read_history(Path(r["directory"]) / "history")
        downs = [e.detail for e in events if e.kind is EventKind.FAULT_STEP and " SIG" in e.detail]
        first = int(downs[0].split()[1])
        assert downs == [f"node {(first - 1 + i) % 3 + 1} SIGKILL" for i in range(3)], downs
        said = [e.detail for e in events if e.kind is EventKind.CONSUMER_LOG]
        failed += [line for line in said if "Commit of offsets threw" in line]
        # A copy comes only from a partition delivered again: after the task's group took its
        # partitions away (short-session's race with the machine's load; the others' none).
        taken = [line for line in said if "Revoke previously" in line or "Lost previously" in line]
        assert r["duplicates"] == 0 or taken, (variant, r["duplicates"])
    assert failed, "no task's offset commit failed during the restarts"


def test_the_library_has_every_scenario_the_issue_names() -> None:
    assert {p.stem for p in LIBRARY} >= {
        "baseline", "cdc-crash-before-ack", "msk-rolling-upgrade", "commit-failure-window",
        "mongo-partition", "concurrent-duplicates", "producer-resend", "poison-records",
        "commit-failure-storm", "producer-exactly-once", "processed-log-crash",
        "outbox-push-shape", "outbox-relay-crash", "outbox-server-restarts", "outbox-history-lost",
        "spark-connector-replay", "connect-worker-loss", "connect-rolling-upgrade",
        "connect-mongo-outage", "connect-poison", "cdc-debezium-crash", "cdc-exactly-once-source",
        "cdc-postgres-restart", "cdc-mongo-cdc-handler", "cdc-snapshot-interrupted",
        "cdc-slot-behind", "outbox-relay-to-sinks", "poison-shapes",
    }  # fmt: skip
    for path in LIBRARY:
        scenario = load_scenario(path)
        # Which seed it reproduces - or that it comes from none (Spark's own failures).
        cites = ("seed 0", "not from a seed")
        assert any(c in scenario.description.lower() for c in cites) or scenario.name == "baseline"
        assert "what to see" in scenario.description.lower() or scenario.name == "baseline", path


def library_params(cut: str | None) -> list[Any]:
    """One parameter per scenario, run at ``cut`` (None: whole); a scenario with Spark lanes
    there waits its turn on the Spark worker (SPARK), and its whole run is the library tier's."""
    params = []
    for p in LIBRARY:
        scenario = load_scenario(p)
        runs = scenario.cut(cut) if cut else scenario
        marks = [SPARK] if "spark" in runs.runtimes else []
        params.append(pytest.param(p, marks=marks if cut else [*marks, LIBRARY_TIER], id=p.stem))
    return params


# One test per scenario, at its cut (its ci: or demo: section: the lanes and events that still
# show its point, judged by the same expectations), its runtimes side by side as `chaoslab run`
# and the demo run them.
@pytest.mark.parametrize("path", library_params("ci"))
def test_a_library_scenario_holds_its_expectations(
    scenario_env: LocalEnvironment, tmp_path: Path, path: Path
) -> None:
    check_library_run(scenario_env, tmp_path, path, "ci")


# The same checks of every scenario at full size: the library tier (make library).
@pytest.mark.parametrize("path", library_params(None))
def test_a_library_scenario_at_full_size_holds_its_expectations(
    scenario_env: LocalEnvironment, tmp_path: Path, path: Path
) -> None:
    check_library_run(scenario_env, tmp_path, path, None)


def check_library_run(
    scenario_env: LocalEnvironment, tmp_path: Path, path: Path, cut: str | None
) -> None:
    """``chaoslab run`` of a library scenario (at ``cut``, or whole): its expectations hold,
    and what each seed's incident should show, shows - recounted apart from the checker."""
    out = tmp_path / "run"
    result, report = run_cli(scenario_env, out, "run", str(path), *(["--cut", cut] if cut else []))
    failed = [f"{r['runtime']}/{r['variant']}: {r['reason']}" for r in report["results"]
              if r["expectation"] != "pass"]  # fmt: skip
    # A failure in CI is seen once, from its log: which changes it lost or stored stale, and
    # the run's own account of its faults and stages, are in the message.
    anomalies = [
        (r["variant"], a) for r in report["results"] if r["expectation"] != "pass"
        for a in [*r["anomalies"], *((r.get("relay") or {}).get("published") or {}).get(
            "anomalies", [])] if a["kind"] != "duplicate"
    ][:10]  # fmt: skip
    if result.returncode != 0:  # pytest.fail: an assertion's message is cut short in the log
        pytest.fail("\n".join([*failed, *map(str, anomalies), "--- stdout:", result.stdout[-3000:],
                               "--- stderr:", result.stderr[-2000:]]))  # fmt: skip
    # The Kafka client's own lines while brokers are down go to the run's producer.log, not
    # between the progress lines.
    assert "|FAIL|" not in result.stdout + result.stderr, result.stdout[-2000:]
    rows = {(r["runtime"], r["variant"]): r for r in report["results"]}
    loaded = load_scenario(path).cut(cut) if cut else load_scenario(path)
    runtimes = loaded.runtimes
    # Every lane of the cut ran, and no other (an outbox scenario's lanes are its relays, but
    # where one relay is the source).
    lanes = [(rt, spec.label) for rt, spec in loaded.lanes]
    assert set(lanes) == set(rows), (sorted(lanes), sorted(rows))

    # An outbox scenario's rows are its relays' (seed 003); a command consumer, or a connector,
    # runs on its own runtime beside the listed runtimes' variants (listed, or the default, when
    # some variant runs on them). The runtimes share one topic, one ledger, one schedule.
    own = {s.own_runtime for s in loaded.variants if s.own_runtime}
    listed = set(loaded.runtimes) if any(not s.own_runtime for s in loaded.variants) else set()
    relays = loaded.outbox and not loaded.source.outbox
    assert {rt for rt, _ in rows} == ({"relay"} if relays else listed | own)
    assert len({r["ledger"] for r in rows.values()}) == 1
    specs: dict[str, VariantSpec] = {s.label: s for _, s in loaded.lanes}
    for (rt, variant), r in rows.items():
        assert r["phantoms"] == 0, variant
        # Every poison record dead-lettered, or stored as a document (a Connect lane's: counted
        # apart) - but where the scenario expects some dropped; a lane that stopped, every one
        # before the point it stopped at. Where its writes were followed, each bad record's
        # outcome is recounted instead (poison-shapes': assert_bad_records_recount).
        expected = {e.field for e in loaded.expectations_for(specs[variant], rt)}
        vanished = r["poison_missing"] - r["poison_stored"]
        if r["stopped"]:
            assert vanished <= poison_past_its_commits(r), (variant, vanished, committed(r))
        elif "poison_missing" not in expected and not r["followed"]:
            assert vanished == 0, (variant, vanished)
        if variant == "transactional" and rt != "relay":  # the sink variant, not the relay
            assert (r["duplicates"], r["lost"]) == (0, 0)
            assert r["offsets_consistent"] is True

    name = report["scenario"]["name"]
    if name == "baseline":  # issue 3: every variant, both runtimes, exactly once
        variants = {"naive", "idempotent", "transactional", "unique-index", "dedup-log"}
        assert set(rows) == {(rt, v) for rt in runtimes for v in variants}
        for key, r in rows.items():
            assert (r["duplicates"], r["lost"], r["stale"]) == (0, 0, 0), key
            assert r["acked"] == r["produced"] == loaded.workload.events, key
            assert r["dead_lettered"] > 0, key
            assert r["in_sink"] == r["acked"] - r["dead_lettered"], key
        print("\nbaseline events/s:")  # printed, not asserted: figures for the closing note
        for (rt, variant), r in sorted(rows.items()):
            print(f"  {rt:<9} {variant:<14} {r['events_per_s']:>8.0f}")
    if name == "cdc-crash-before-ack":
        assert all(r["duplicates"] > 0 for (_, v), r in rows.items() if v == "naive")
    if name == "cdc-crash-before-ack":
        for (runtime, variant), r in rows.items():
            assert r["crashes"] == 3, variant
            if variant == "naive":  # each kill after the write re-delivers exactly that batch
                assert r["duplicates"] == replayed_by_crashes(r) > 0, runtime
                # Mostly 2 copies. 3 where a record was in two interrupted batches: measured once,
                # the restarted listener's first poll brought back only partition 1's part of the
                # batch the kill interrupted, and its second poll - partition 0's part and more -
                # was interrupted by the next kill (librdkafka returns what its fetches hold).
                assert "2" in r["copies"], runtime
                assert set(r["copies"]) <= {"2", "3"}, runtime
            if runtime == "spark":
                # Each restarted driver replayed the killed batch from its checkpoint: the same
                # batch id, the same Kafka offsets, the same records - written by the executors
                # both times, through Spark's Kafka connector.
                events = read_history(Path(r["directory"]) / "history")
                for crash in [e for e in events if e.kind is EventKind.CRASH]:
                    writes = [
                        e for e in events if e.kind is EventKind.WRITTEN and e.batch == crash.batch
                    ]  # fmt: skip
                    assert len(writes) == 2 and writes[0].t < crash.t < writes[1].t, variant
                    assert writes[0].offsets == writes[1].offsets and writes[0].offsets, variant
                    assert writes[0].count == writes[1].count, variant
    if name.startswith("outbox-"):
        for r in rows.values():
            assert_stages_add_up(r)
    if loaded.source.existing:
        assert_snapshot_recounts(scenario_env, loaded, rows)
    elif loaded.source.cdc:
        assert_cdc_recounts(scenario_env, loaded, rows)
    elif loaded.source.outbox:
        assert_relay_source_recounts(scenario_env, rows)
    if name == "cdc-debezium-crash":
        assert rows[("listener", "naive")]["relay"]["published"]["duplicates"] > 0
    if name == "poison-shapes":
        assert_bad_records_recount(scenario_env, rows)
        shapes = {f["shape"] for r in rows.values() for f in r["bad"]}
        assert len(shapes) == 19, shapes  # every shape met every lane
    if name == "cdc-postgres-restart":  # both restarts, as the history says
        for (_, variant), r in rows.items():
            steps = [e.detail for e in read_history(Path(r["directory"]) / "history")
                     if e.kind is EventKind.FAULT_STEP]  # fmt: skip
            assert "PostgreSQL fast shutdown (SIGINT)" in steps, (variant, steps)
            assert "PostgreSQL SIGKILL" in steps, (variant, steps)
        # Its link first, through the proxy: the reset closed Debezium's connections, the cut
        # held the ones its retry opened (the proxy's own count, in the history).
        (lane, *_) = rows.values()
        events = read_history(Path(lane["directory"]) / "history")
        tallies = {e.fault: e.count for e in events
                   if e.kind is EventKind.FAULT_STEP and e.count is not None}  # fmt: skip
        assert tallies.get("link-reset", 0) >= 1 and tallies.get("link-cut", 0) >= 1, tallies
    if name == "cdc-slot-behind":
        assert_slot_lost_after_its_cap(rows)
        for (_, variant), r in rows.items():  # Debezium 3.7.0's copies, and no other
            assert_copies_are_debeziums_resume_inside_a_copy(r)
            copies = r["relay"]["published"]["duplicates"]
            assert r["duplicates"] == (copies if variant == "naive" else 0), variant
    if name == "cdc-exactly-once-source":  # KIP-618's promise, under both bounces
        for (_, variant), r in rows.items():
            steps = [e.detail for e in read_history(Path(r["directory"]) / "history")
                     if e.kind is EventKind.FAULT_STEP]  # fmt: skip
            assert any(d.startswith("SIGKILLed worker") for d in steps), (variant, steps)
            assert any(d.startswith("stopped worker") for d in steps), (variant, steps)
            assert_losses_are_debeziums_restart_after_one(r)
            assert_copies_are_debeziums_resume_inside_a_copy(r)
            assert r["crashes"] == 1, variant
        # What exactly-once at the source does not cover: the sink's own replay (and each copy
        # Debezium put on the topic).
        naive = rows[("listener", "naive")]
        copies = naive["relay"]["published"]["duplicates"]
        assert naive["duplicates"] == replayed_by_crashes(naive) + copies > 0
    if name == "outbox-push-shape":
        pushed = [
            line
            for line in Path(rows[("relay", "seed-003")]["ledger"]).read_text().splitlines()
            if ",push," in line
        ]
        assert rows[("relay", "seed-003")]["relay"]["published"]["lost"] == len(pushed) > 0
        for relay in ("naive", "idempotent", "transactional"):
            assert rows[("relay", relay)]["relay"]["published"]["lost"] == 0, relay
    if name == "outbox-relay-crash":
        assert_relay_crash_holds(rows)
    if name == "outbox-history-lost":
        outbox = load_scenario(path).outbox
        assert outbox is not None
        for (_, variant), r in rows.items():
            assert r["crashes"] == 1 and r["relay"]["history_lost"] >= 1, variant
            # Never silently: every entry lost at publish was sent before a gap the relay
            # reported (it then read on from the present), none after its last. (Sent, not
            # acknowledged: a write applied before the relay's new stream opened can be
            # acknowledged to the application after the relay's HISTORY_LOST; docs/faults.md.)
            lost = lost_at_publish(scenario_env, r, list(outbox.topics))
            assert len(lost) == r["relay"]["published"]["lost"] > 0, variant
            events = read_history(Path(r["directory"]) / "history")
            last_gap = max(e.t for e in events if e.kind is EventKind.HISTORY_LOST)
            assert all(e.sent_at <= last_gap for e in lost), variant
    if name == "processed-log-crash":  # seed 004's log against seed 001's
        for (_, variant), r in rows.items():
            assert r["crashes"] == 2, variant
        assert rows[("listener", "dedup-log[expiry_s=5]")]["copies"] == {"2": 1}
        txn = rows[("listener", "processed-log-txn")]
        assert (txn["duplicates"], txn["lost"], txn["in_sink"]) == (0, 0, txn["acked"])
        # Every message stored has its id logged, and no id is logged without its message.
        database = json.loads((Path(txn["directory"]) / "runtime.json").read_text())["database"]
        mongo: MongoClient[dict[str, Any]] = MongoClient(scenario_env.mongo_uri)
        with mongo:
            db = mongo[database]
            logged = {d["_id"] for d in db.consumed_messages.find({}, {"_id": 1})}
            stored = {d["event_id"] for d in db.events.find({}, {"event_id": 1})}
        assert logged == stored and len(logged) == txn["acked"]
    if name == "msk-rolling-upgrade":
        # Nothing injected: the group coordinators' own errors are in the history, and the
        # listener's session timed out while a node was down. Which errors depends on when the
        # client asks: the new coordinator's UNKNOWN_MEMBER_ID, NOT_COORDINATOR from a live node
        # not holding the group; the killed node answers nothing
        # (docs/experiments/rolling-restart.md).
        events = read_history(Path(rows[("listener", "naive")]["directory"]) / "history")
        errors = {e.detail.split()[0] for e in events if e.kind is EventKind.KAFKA_ERROR}
        assert "SESSION_TIMED_OUT" in errors and errors & {
            "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS",
            "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION",
        }, errors  # fmt: skip
        # The duplicates' cause: commits after the write that failed (none is injected here),
        # and the partitions handed back from the last commit that succeeded - usually. The
        # commits queued while no coordinator answered can be taken by the new one before the
        # group moves the partitions, and then nothing comes again: 0 duplicates
        # (docs/experiments/rolling-restart.md). So the count is checked against
        # what the history says was delivered and written twice, whichever way it went.
        assert [e for e in events if e.kind is EventKind.COMMIT_FAILED]
        naive = rows[("listener", "naive")]
        assert naive["duplicates"] == written_again(events)
        # One node at a time, every node once, in id order from the one it started at (the
        # naive group's coordinator, wherever that was).
        downs = [e.detail for e in events if e.kind is EventKind.FAULT_STEP and " SIG" in e.detail]
        first = int(downs[0].split()[1])
        assert downs == [f"node {(first - 1 + i) % 3 + 1} SIGKILL" for i in range(3)], downs
        assert not [r for r in rows.values() if r["unfired"]]
    if name == "msk-rolling-upgrade-java":
        # The Java client's own words, as the lab read them from its log while it ran: the
        # coordinators moving during the restarts, then seed 002's failed commit in the pause.
        events = read_history(Path(rows[("command", "java-seed-002")]["directory"]) / "history")
        said = [e.detail for e in events if e.kind is EventKind.CONSUMER_LOG]
        assert any("coordinator" in line.lower() for line in said), said[:5]
        assert any("CommitFailedException" in line for line in said), said[-5:]
        fixed = rows[("command", "java-fixed")]
        assert (fixed["duplicates"], fixed["lost"]) == (0, 0)
        assert not [r for r in rows.values() if r["unfired"]]
    if name == "mongo-partition":
        # A production consumer's timeouts: the cut reached every listener as a timeout its driver
        # saw - a command's own, or the monitor's heartbeat (which then cancels the commands in
        # flight: "operation cancelled").
        for (runtime, variant), r in rows.items():
            if runtime != "listener":
                continue
            events = read_history(Path(r["directory"]) / "history")
            saw = [e.detail for e in events if e.kind is EventKind.MONGO_ERROR]
            assert any("timed out" in d for d in saw), (variant, saw)
    if name == "mongo-ack-lost":

        def seen(lane: tuple[str, str], kind: EventKind) -> list[str]:
            events = read_history(Path(rows[lane]["directory"]) / "history")
            return [e.detail for e in events if e.kind is kind]

        for rt in runtimes:
            # Retryable writes: the driver sent each write whose reply was dropped again, and
            # the server answered from its record - no copy, the consumer told nothing.
            naive = (rt, "naive")
            assert seen(naive, EventKind.MONGO_RETRIED), rt
            assert not seen(naive, EventKind.WRITE_FAILED), rt
            # Without them the consumer heard of a failure of a write that was applied, and
            # wrote it again: the copies are records it wrote more than once (else it fails).
            assert seen((rt, "naive[retryWrites=false]"), EventKind.WRITE_FAILED), rt
            # A commit whose reply was dropped: retried by the driver, not the batch again.
            for variant in ("transactional", "transactional[retryWrites=false]"):
                retried = seen((rt, variant), EventKind.MONGO_RETRIED)
                assert any(d.startswith("commitTransaction") for d in retried), (rt, retried)
        assert not [r for r in rows.values() if r["unfired"]]
    if name == "commit-failure-window":
        # One schedule for both runtimes: the proxy answers the listeners' commits with
        # NOT_COORDINATOR while the Spark queries' commit logs are unwritable, in one window.
        for (runtime, variant), r in rows.items():
            events = read_history(Path(r["directory"]) / "history")
            window = [e.t for e in events if e.kind in (EventKind.FAULT_START, EventKind.FAULT_END)]
            assert len(window) == 2, (runtime, variant)
            unwritten = [e for e in events if e.kind is EventKind.COMMIT_FAILED]
            answered = [e.detail for e in events if e.kind is EventKind.KAFKA_ERROR]
            if runtime == "listener":
                assert any("NOT_COORDINATOR" in d for d in answered), variant
            else:  # Spark's own write of the commit log failed; no Kafka group to answer it
                assert unwritten and not answered, variant
                # within the window (the commit that fails may be the one its end lets through)
                assert any(window[0] <= e.t <= window[1] + 5 for e in unwritten), variant
        # Spark's commit is its checkpoint: its own write of the commit log failed (the lab made
        # the directory unwritable, it raised nothing), and the restarted query replayed the
        # batch - naive wrote it again (the whole scenario's Spark lanes; its cut has none).
        if ("spark", "naive") in rows:
            events = read_history(Path(rows[("spark", "naive")]["directory"]) / "history")
            refused = [e for e in events if e.kind is EventKind.COMMIT_FAILED]
            assert refused and all("/commits/" in e.detail for e in refused), refused
            replayed = {e.batch for e in refused}
            written = [e.batch for e in events if e.kind is EventKind.WRITTEN]
            assert all(written.count(b) >= 2 for b in replayed), (replayed, written)
    if name == "spark-executor-loss":
        for (_, variant), r in rows.items():
            events = read_history(Path(r["directory"]) / "history")
            lost = [e for e in events if e.kind is EventKind.EXECUTOR_LOST]
            # One executor lost, killed from inside its own task; the driver never restarted.
            assert len(lost) == 1 and "executor PID" in lost[0].detail, (variant, lost)
            assert (r["crashes"], r["restarts"]) == (0, 0), variant
            # The driver retried the task, not the batch: the batch was written and committed
            # once (a replay from the checkpoint would show two WRITTEN events).
            written = [e.batch for e in events if e.kind is EventKind.WRITTEN]
            assert written.count(lost[0].batch) == 1, (variant, written)
            if variant == "naive":  # the lost task's 40 documents, written again by the retry
                assert (r["duplicates"], r["copies"]) == (40, {"2": 40}), r
    if name == "spark-connector-replay":
        assert_connector_replay(scenario_env, rows)
    if name == "connect-worker-loss":
        assert_connect_worker_loss(scenario_env, loaded, rows)
    if name == "connect-rolling-upgrade":
        assert_connect_rolling_upgrade(rows)
    # Every connector's collection of changes, recounted (connect-cdc's rows: assert_state_recounts)
    for (rt, variant), r in rows.items():
        if rt == "connect" and variant != "connect-cdc":
            assert recount(scenario_env, r) == counted(r), (name, variant)
    if name == "connect-mongo-outage":  # Connect's own words for the failed task
        stopped = rows[("connect", "connect-idempotent")]["stopped"]
        # The driver's own exception at the root: its server selection timed out after its wait
        # (30 s by default; the cut's 10 s), the connections it opened reset, or a write's own
        # socket was reset (which of the two fails the write varies run to run).
        spec = next(v for v in loaded.variants if v.label == "connect-idempotent")
        connector = make_variant(spec.name, spec.options)
        assert isinstance(connector, Connect)
        wait_ms = connector.client_settings().get("serverSelectionTimeoutMS", "30000")
        assert "FAILED" in stopped and "(caused by " in stopped, stopped
        root = stopped.rsplit("(caused by ", 1)[1]
        assert root.startswith((
            f"com.mongodb.MongoTimeoutException: Timed out after {wait_ms} ms while waiting to",
            "java.net.SocketException: Connection reset",
        )), root  # fmt: skip
    if name == "commit-failure-storm":
        naive = rows[("listener", "naive")]
        assert {"2", "3"} <= set(naive["copies"]), naive["copies"]  # seed 002's 2 and 3 copies
    if name == "producer-exactly-once":
        # The Kafka side was exactly once: no record of an aborted transaction reached a sink.
        ledger = Path(rows[("listener", "naive")]["ledger"])
        aborted = [row.event_id for row in read_ledger(aborted_ledger(ledger))]
        assert aborted, "the producer aborted no transaction"
        client: MongoClient[dict[str, Any]] = MongoClient(scenario_env.mongo_uri)
        with client:
            for key, r in rows.items():
                database = json.loads((Path(r["directory"]) / "runtime.json").read_text())
                sink = client[database["database"]].events
                found = sink.count_documents({"event_id": {"$in": aborted}})
                assert found == 0, (key, found)
    if name == "concurrent-duplicates":
        assert rows[("listener", "check-then-insert")]["duplicates"] > 0

    # The report is there and CI can read which expectation broke.
    assert (out / "report.md").read_text().count("|") > 10
    assert (out / "timeline.png").stat().st_size > 10_000
    cases = ET.parse(out / "junit.xml").getroot().iter("testcase")
    assert sum(1 for _ in cases) == len(rows)


@LIBRARY_TIER  # a claim over more seeds: the soak's kind of check
@pytest.mark.parametrize("seed", [32])
def test_the_relay_crash_holds_over_other_seeds(
    scenario_env: LocalEnvironment, tmp_path: Path, seed: int
) -> None:
    """outbox-relay-crash's claim over two seeds: its own (31, in the library test) and this
    (the soak holds it over more: docs/soak.md)."""
    path = Path("scenarios/outbox-relay-crash.yaml")
    result, report = run_cli(scenario_env, tmp_path / "run", "run", str(path), "--seed", str(seed))
    assert result.returncode == 0, result.stdout[-3000:]
    assert report["seed"] == seed
    rows = {(r["runtime"], r["variant"]): r for r in report["results"]}
    assert_relay_crash_holds(rows)
    for r in rows.values():
        assert_stages_add_up(r)


def test_scenarios_that_keep_to_their_runs_run_together_and_the_others_alone(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    out = tmp_path / "matrix"
    names = ("baseline", "producer-exactly-once", "mongo-partition")
    before = set(admin(scenario_env.kafka_bootstrap).list_topics(timeout=10).topics)
    result = chaoslab(
        "matrix", *names, "--runtime", "listener", "--events", "600", "--together", "2",
        "--env", str(scenario_env.directory), "--out", str(out), timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    runs = {n: load(out / n) for n in names}
    # mongo-partition cuts every consumer's link to MongoDB: it had the environment to itself.
    assert beside(runs["mongo-partition"], list(runs.values())) == []
    assert [r.name for r in beside(runs["baseline"], list(runs.values()))] == [
        "producer-exactly-once"
    ]
    assert all(run.passed for run in runs.values())
    # The lines of runs side by side carry their scenario's name; the table marks their walls.
    assert "=== [3/3] mongo-partition ===" in result.stdout
    assert "baseline | [5/5] listener: naive" in result.stdout
    assert "producer-exactly-once | " in result.stdout
    assert BESIDE_NOTE in result.stdout
    for name in names:
        report = json.loads((out / name / "results.json").read_text())
        assert {r["produced"] for r in report["results"]} == {600}
    suites = ET.parse(out / "junit.xml").getroot().findall("testsuite")
    assert len(suites) == 3
    assert "mongo-partition" in (out / "report.md").read_text()
    # Each run's topics were deleted once judged (they would slow the later runs); the
    # databases stay for inspection.
    assert result.stdout.count("deleted the run's") >= 3
    topics = set(admin(scenario_env.kafka_bootstrap).list_topics(timeout=10).topics) - before
    assert not [t for t in topics if t.startswith(tuple(f"{n}." for n in names))]
    client: MongoClient[dict[str, Any]] = MongoClient(scenario_env.mongo_uri)
    with client:
        for name in names:
            for r in json.loads((out / name / "results.json").read_text())["results"]:
                runtime = json.loads((Path(r["directory"]) / "runtime.json").read_text())
                assert client[runtime["database"]].events.count_documents({}) == r["in_sink"]


@LIBRARY_TIER  # a second environment of its own: three more Kafka nodes to start
def test_a_scenario_whose_fault_acts_on_the_environment_runs_on_a_second_one_beside_the_rest(
    tmp_path: Path,
) -> None:
    """``matrix --together 2`` on environments of its own: mongo-partition cuts the consumers'
    link to MongoDB of a second environment, while baseline runs on the first."""
    out = tmp_path / "matrix"
    names = ("baseline", "mongo-partition")
    result = chaoslab(
        "matrix", *names, "--runtime", "listener", "--events", "600", "--together", "2",
        "--out", str(out), timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    runs = {n: load(out / n) for n in names}
    assert [r.name for r in beside(runs["mongo-partition"], list(runs.values()))] == ["baseline"]
    assert all(run.passed for run in runs.values())
    # The cut was the second environment's proxy's: its log has the rule, the first's has none.
    cut = "'action': 'cut'"
    assert cut in (out / "env-2" / "logs" / "proxy.log").read_text()
    assert cut not in (out / "env" / "logs" / "proxy.log").read_text()
    assert "starting a second local environment" in result.stdout
    assert "mongo-partition | === [2/2] mongo-partition ===" in result.stdout
    assert "Ran beside" in (out / "mongo-partition" / "report.md").read_text()


DETERMINISM = """\
name: determinism
seed: {seed}
workload: {{events: 900, keys: 150, poison_fraction: 0.02, partitions: 3, rate: 150}}
runtimes: [listener]
pipeline: {{batch_size: 150}}
variants: [naive, idempotent, unique-index, transactional]
faults:
  - {{kind: consumer-crash, point: after_write_before_commit, at_batch: 2, times: 1}}
  - {{kind: broker-bounce, at: 1.5, jitter: 1.5, hard: true}}
expect:
  "*": {{lost: 0}}
"""
DETERMINISTIC = ("acked", "expected", "in_sink", "unique_in_sink", "duplicates", "lost",
                 "stale", "dead_lettered", "crashes")  # fmt: skip


def test_the_same_seed_replays_the_same_faults_and_counts(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    path = tmp_path / "determinism.yaml"
    path.write_text(DETERMINISM.format(seed=21))
    schedule = describe(plan(load_scenario(path).faults, 21))
    assert schedule == describe(plan(load_scenario(path).faults, 21))

    planned = plan(load_scenario(path).faults, 21)[1].steps[0].at
    assert planned is not None and 1.5 <= planned <= 3.0

    counts: list[dict[str, tuple]] = []
    for attempt in (1, 2):
        result, report = run_cli(scenario_env, tmp_path / f"run{attempt}", "run", str(path))
        assert result.returncode == 0, result.stderr[-2000:]
        counts.append({
            r["variant"]: tuple(r[k] for k in DETERMINISTIC)
            for r in report["results"] if r["variant"] != "naive"
        })  # fmt: skip
        # The bounce started at its planned (seeded, jittered) second of the nemesis's clock.
        events = read_history(Path(report["results"][0]["directory"]) / "history")
        clock = next(e.t for e in events if e.kind is EventKind.SCHEDULE_START)
        bounce = next(e.t for e in events if e.kind is EventKind.FAULT_START)
        assert 0 <= (bounce - clock) - planned < 0.5
    # Everything but naive is deterministic: same workload, same crash, same verdict.
    assert counts[0] == counts[1]


NEVER_FIRES = """\
name: late-faults
description: A bounce long after the work is done, and a crash that is almost never drawn.
seed: 5
workload: {events: 120, partitions: 1}
variants: [naive, idempotent]
faults:
  - {kind: broker-bounce, at: 240}
  - {kind: consumer-crash, point: before_write, probability: 0.000001}
  - {kind: consumer-crash, point: before_write, at_batch: 40}
"""


def test_faults_that_did_not_fire_are_named_and_the_run_is_not_a_pass(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    scenario = tmp_path / "late-faults.yaml"
    scenario.write_text(NEVER_FIRES)
    out = tmp_path / "run"
    result, report = run_cli(lab_env, out, "run", str(scenario))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    # Said before the run: 120 records may well come in one batch.
    assert (
        "note: " in result.stdout
        and "consumer-crash#3 is planned at batch 40, but a "
        "consumer may read its 120 records in 1 batch(es) of up to 250"
        in result.stdout
    )
    assert "2 of 2 variants FAILED (2 with faults that did not fire)" in result.stdout
    assert "UNFIRED: broker-bounce#1 never fired: it was due after the run's work was done" in (
        result.stdout
    )
    for row in report["results"]:
        assert row["expectation"] == "unfired", row["reason"]
        unfired = {u["name"]: u["reason"] for u in row["unfired"]}
        assert set(unfired) == {"broker-bounce#1", "consumer-crash#2", "consumer-crash#3"}
        assert unfired["consumer-crash#2"].startswith("its point (before_write of batch 1)")
        # The run did not wait 240 s for a fault that could only hit idle consumers.
        events = read_history(Path(row["directory"]) / "history")
        assert [e for e in events if e.kind is EventKind.FAULT_START] == []
        assert any(e.kind is EventKind.CAUGHT_UP for e in events)
        # The counts are still taken (and here, without faults, right).
        assert (row["duplicates"], row["lost"]) == (0, 0)
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("errors") == "2" and suite.get("failures") == "0"
    assert "**UNFIRED**: broker-bounce#1 never fired" in (out / "report.md").read_text()
