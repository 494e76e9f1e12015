"""The lab's watch of a lane's landing collection (harness.pipeline.landing_watch) against the
real MongoDB: a current-state sink's row replaced by an older version of itself is seen going
back, once per such write (newer versions, a delete and the row made again at a newer version
are not); and every write is logged, in order, each traced to its record, to the last one
before ``stop``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from harness.checker.bad_records import Write
from harness.environment.local import LocalEnvironment
from harness.history.events import EventKind, HistoryWriter, read_history
from harness.pipeline.landing_watch import LandingFeed, LandingWatch
from harness.pipeline.variants.base import Landing
from harness.readiness import NotReady, wait_for
from tests.support import unique

pytestmark = pytest.mark.servers


def test_a_row_replaced_by_an_older_version_is_seen_going_back(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    database = unique("state").replace("-", "_")
    landing = Landing("events", current="", row_key="_id.order_id")
    watch = LandingWatch(database, landing, HistoryWriter(tmp_path, "landing-watch", "cdc"))
    feed = LandingFeed(lab_env.mongo_uri, [watch])
    client: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri)
    with client:
        events = client[database].events
        feed.start()
        try:

            def put(order_id: int, version: int) -> None:
                key = {"_id": {"order_id": order_id}}
                events.replace_one(key, {**key, "version": version}, upsert=True)

            for order_id, version in [(1, 1), (1, 2), (2, 1), (1, 3)]:
                put(order_id, version)
            put(1, 2)  # a replayed older update: back
            put(1, 3)
            put(2, 2)
            events.delete_one({"_id": {"order_id": 2}})
            put(2, 4)  # made again, newer: not back
            put(2, 1)  # a replayed insert after it: back
            put(3, 1)  # the last write, seen once the watch has read this far

            def seen_the_last() -> None:
                if 3 not in watch.highest:
                    raise NotReady("the watch has not read the last write yet")

            wait_for(seen_the_last, what="the watch reading every write", timeout=30.0)
        finally:
            feed.stop()
        client.drop_database(database)
    back = [e.detail for e in read_history(tmp_path) if e.kind is EventKind.WENT_BACK]
    assert back == ["order 1 v2 after v3", "order 2 v1 after v4"]
    assert watch.went_back == 2


def test_every_write_is_logged_in_order_traced_to_its_record_up_to_the_last(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    database, beside = (unique(name).replace("-", "_") for name in ("writes", "beside"))
    log, beside_log = tmp_path / "writes.jsonl", tmp_path / "beside.jsonl"
    watch = LandingWatch(database, Landing(event_id="event_id"),
                         HistoryWriter(tmp_path, "landing-watch", "naive"), log)  # fmt: skip
    # A second lane's watch on the same feed: each is handed its own database's writes.
    other = LandingWatch(beside, Landing(event_id="event_id"),
                         HistoryWriter(tmp_path / "b", "landing-watch", "idempotent"),
                         beside_log)  # fmt: skip
    feed = LandingFeed(lab_env.mongo_uri, [watch, other])
    client: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri)
    with client:
        events = client[database].events
        feed.start()
        try:
            client[beside].events.insert_one({"_id": 1, "event_id": "o-1"})
            events.insert_one({"_id": 1, "event_id": "g-1"})
            events.replace_one({"_id": 1}, {"event_id": "b-1"})  # a bad record over it
            events.insert_one({"_id": 2, "lab_trace": "b-2"})  # a shape without an event id
            events.insert_one({"_id": 3, "status": "paid"})  # traced to no record
            client[database].other.insert_one({"event_id": "elsewhere"})  # not the landing's
            events.delete_one({"_id": 1})
            # The last write, then at once the stop: its mark is read after every write.
            events.insert_many([{"_id": 10 + i, "event_id": f"g-{10 + i}"} for i in range(200)])
            client[beside].events.insert_one({"_id": 2, "event_id": "o-2"})
        finally:
            feed.stop()
        client.drop_database(database)
        client.drop_database(beside)
    assert watch.complete and watch.logged and other.complete
    beside_writes = [
        Write.from_json(json.loads(line)) for line in beside_log.read_text().splitlines()
    ]
    assert [w.trace for w in beside_writes] == ["o-1", "o-2"]
    writes = [Write.from_json(json.loads(line)) for line in log.read_text().splitlines()]
    assert [(w.op, w.doc, w.trace) for w in writes[:5]] == [
        ("insert", "1", "g-1"), ("replace", "1", "b-1"), ("insert", "2", "b-2"),
        ("insert", "3", ""), ("delete", "1", ""),
    ]  # fmt: skip
    assert [w.trace for w in writes[5:]] == [f"g-{10 + i}" for i in range(200)]
    assert [w.t for w in writes] == sorted(w.t for w in writes)
