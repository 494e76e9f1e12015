"""What the MongoDB driver's monitor saw, in the history: against the real server through the
real fault proxy, a cut link is one `mongo-error` ("heartbeat: ... timed out") per outage, however
many checks failed in it - and the next outage is one more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, monitoring

from harness.environment.base import Link, LinkRule
from harness.environment.local import LocalEnvironment
from harness.history.events import EventKind, HistoryWriter, read_history
from harness.pipeline.mongo_options import uri_with
from harness.pipeline.spark.driver_watch import driver_watch
from harness.readiness import wait_for

pytestmark = pytest.mark.servers


class FailedChecks(monitoring.ServerHeartbeatListener):
    """Counts the monitor's failed checks, as pymongo publishes them."""

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.ServerHeartbeatStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.ServerHeartbeatSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.ServerHeartbeatFailedEvent) -> None:
        self.count += 1


def test_a_cut_link_is_one_heartbeat_failure_per_outage(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    history = HistoryWriter(tmp_path / "history", "listener-0")
    checks = FailedChecks()
    uri = uri_with(lab_env.mongo_uri_for(Link.CONSUMER_MONGO), {"connectTimeoutMS": 1000})
    client: MongoClient[dict[str, Any]] = MongoClient(
        uri, heartbeatFrequencyMS=500, event_listeners=[*driver_watch(history), checks]
    )
    with client:
        client.admin.command("ping")
        for outage in (1, 2):

            def failed_thrice(before: int = checks.count) -> None:
                assert checks.count >= before + 3, f"{checks.count - before} checks failed"

            rule = lab_env.add_link_rule(LinkRule(Link.CONSUMER_MONGO, "cut"))
            try:
                wait_for(failed_thrice, timeout=60, what="three failed checks in the cut")
            finally:
                lab_env.remove_link_rule(rule)
            client.admin.command("ping")  # answered: a check succeeded since
            said = [
                e.detail
                for e in read_history(tmp_path / "history")
                if e.kind is EventKind.MONGO_ERROR and e.detail.startswith("heartbeat:")
            ]
            assert len(said) == outage, said
            assert "timed out" in said[-1], said
