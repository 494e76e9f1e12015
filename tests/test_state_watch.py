"""The lab's watch of a current-state sink (harness.pipeline.state_watch) against the real
MongoDB: a row replaced by an older version of itself is seen going back, once per such write;
newer versions, a delete and the row made again at a newer version are not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from harness.environment.local import LocalEnvironment
from harness.history.events import EventKind, HistoryWriter, read_history
from harness.pipeline.state_watch import StateWatch
from harness.pipeline.variants.base import Landing
from harness.readiness import NotReady, wait_for
from tests.support import unique

pytestmark = pytest.mark.servers


def test_a_row_replaced_by_an_older_version_is_seen_going_back(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    database = unique("state").replace("-", "_")
    landing = Landing("events", current="", row_key="_id.order_id")
    watch = StateWatch(lab_env.mongo_uri, database, landing,
                       HistoryWriter(tmp_path, "state-watch", "connect-cdc"))  # fmt: skip
    client: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri)
    with client:
        events = client[database].events
        watch.start()
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
            watch.stop()
        client.drop_database(database)
    back = [e.detail for e in read_history(tmp_path) if e.kind is EventKind.WENT_BACK]
    assert back == ["order 1 v2 after v3", "order 2 v1 after v4"]
    assert watch.went_back == 2
