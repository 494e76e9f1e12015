"""The coordinator errors in a listener's librdkafka log become history events (pure)."""

from __future__ import annotations

from pathlib import Path

from harness.history.events import EventKind, read_history
from harness.pipeline.kafka_log import BrokerError, broker_errors, harvest

LOG = """\
==== chaoslab: starting runtime-x at 2026-11-22 11:00:00: python -m harness.pipeline.listener.consumer
%7|1795346780.100|HEARTBEAT|chaoslab-consumer-listener-0#consumer-2| [thrd:main]: GroupCoordinator/3: Heartbeat for group "g" generation id 1
%7|1795346785.206|HEARTBEAT|chaoslab-consumer-listener-0#consumer-2| [thrd:main]: Group "g" heartbeat error response in state up (join-state steady, 3 partition(s) assigned): Broker: Not coordinator
%7|1795346785.230|CGRP|chaoslab-consumer-listener-0#consumer-2| [thrd:main]: Group "g": heartbeat error response: Broker: Not coordinator: marking the coordinator (3) dead
%7|1795346786.400|COMMIT|chaoslab-consumer-listener-0#consumer-2| [thrd:main]: GroupCoordinator/1: OffsetCommit for 3 partition(s) in join-state steady: manual: returned: Broker: Coordinator load in progress
%4|1795346790.779|SESSTMOUT|chaoslab-consumer-listener-0#consumer-2| [thrd:main]: Consumer group session timed out (in join-state steady) after 6051 ms without a successful response from the group coordinator (broker 3, last error was Local: Broker transport failure): revoking assignment and rejoining group
%7|1795346791.000|CGRP|chaoslab-consumer-listener-0#consumer-2| [thrd:main]: Group "g" heartbeat error response in state up (join state wait-revoke-rebalance_cb, 1 partition(s) assigned): Broker: Group rebalance in progress
a line of the application's own
"""  # noqa: E501


def test_broker_errors_are_read_once_per_response_with_their_time_and_api() -> None:
    assert list(broker_errors(LOG.splitlines(keepends=True))) == [
        BrokerError(1795346785.206, "NOT_COORDINATOR", "Heartbeat"),  # one response, two lines
        BrokerError(1795346786.400, "COORDINATOR_LOAD_IN_PROGRESS", "OffsetCommit"),
        BrokerError(1795346790.779, "SESSION_TIMED_OUT", ""),
        BrokerError(1795346791.000, "REBALANCE_IN_PROGRESS", "Heartbeat"),
    ]


def test_harvest_writes_them_into_the_history(tmp_path: Path) -> None:
    log = tmp_path / "listener-0.log"
    log.write_text(LOG)
    assert harvest(log, tmp_path / "history", "listener-0", "naive") == 4
    events = read_history(tmp_path / "history")
    assert [(e.kind, e.source, e.detail) for e in events][:2] == [
        (EventKind.KAFKA_ERROR, "listener-0", "NOT_COORDINATOR Heartbeat"),
        (EventKind.KAFKA_ERROR, "listener-0", "COORDINATOR_LOAD_IN_PROGRESS OffsetCommit"),
    ]
    assert events[0].t == 1795346785.206
    assert harvest(tmp_path / "missing.log", tmp_path / "history", "listener-1", "naive") == 0


def test_a_session_time_out_is_one_whatever_its_last_error_was() -> None:
    line = (
        "%4|1795346790.779|SESSTMOUT|c#consumer-2| [thrd:main]: Consumer group session timed "
        "out (in join-state steady) after 10003 ms without a successful response from the "
        "group coordinator (broker 3, last error was Broker: Not coordinator): revoking "
        "assignment and rejoining group\n"
    )
    assert list(broker_errors([line])) == [BrokerError(1795346790.779, "SESSION_TIMED_OUT", "")]
