"""The coordinator errors a listener's Kafka client got from the brokers, read from its log.

librdkafka retries NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and the like itself, so an
application sees few of them (a synchronous commit mostly just takes longer); they show in the
client's group debug log (``debug=cgrp``, which the listener turns on), one line per response,
each stamped by librdkafka with the time it happened::

    %7|1795346785.206|HEARTBEAT|chaoslab-consumer-listener-0#consumer-2| [thrd:main]: Group
    "orders.naive" heartbeat error response in state up (join-state steady, ...): Broker: Not
    coordinator

``harvest`` turns them into KAFKA_ERROR events of the history (detail: ``ERROR API``), so the
timeline shows when the brokers answered so, against the faults. Pure but for the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.history.events import EventKind, HistoryWriter

# librdkafka's text of a broker error -> Kafka's name of it (and the client's own timeout). In
# this order: a session time-out's line names the last error too ("last error was Broker: Not
# coordinator"), and it is the time-out.
ERRORS = {
    "Consumer group session timed out": "SESSION_TIMED_OUT",
    "Broker: Not coordinator": "NOT_COORDINATOR",
    "Broker: Coordinator load in progress": "COORDINATOR_LOAD_IN_PROGRESS",
    "Broker: Coordinator not available": "COORDINATOR_NOT_AVAILABLE",
    "Broker: Group rebalance in progress": "REBALANCE_IN_PROGRESS",
    "Broker: Unknown member": "UNKNOWN_MEMBER_ID",
    "Broker: Specified group generation id is not valid": "ILLEGAL_GENERATION",
    "Broker: Request timed out": "REQUEST_TIMED_OUT",
}
APIS = ("OffsetCommit", "Heartbeat", "JoinGroup", "SyncGroup", "LeaveGroup", "FindCoordinator")
_LINE = re.compile(r"^%\d\|(?P<t>\d+\.\d+)\|(?P<fac>[A-Z_]+)\|[^|]*\| (?P<msg>.*)$")
_SAME_S = 0.05  # librdkafka logs one response in a few lines: one event per error and API


@dataclass(frozen=True)
class BrokerError:
    t: float  # unix seconds, librdkafka's stamp
    error: str  # e.g. NOT_COORDINATOR
    api: str  # the request it answered, when the line says ('' otherwise)

    @property
    def detail(self) -> str:
        return f"{self.error} {self.api}".strip()


def broker_errors(lines: Iterable[str]) -> Iterator[BrokerError]:
    """The broker errors in librdkafka log lines, one per response."""
    last: dict[tuple[str, str], float] = {}
    for line in lines:
        match = _LINE.match(line.rstrip("\n"))
        if match is None:
            continue
        message = match["msg"]
        for text, name in ERRORS.items():
            if text not in message:
                continue
            api = _api(match["fac"], message)
            t = float(match["t"])
            if t - last.get((name, api), -1.0) > _SAME_S:
                yield BrokerError(t, name, api)
            last[(name, api)] = t
            break


def _api(facility: str, message: str) -> str:
    for api in APIS:
        if api.lower() in message.lower():
            return api
    return "Heartbeat" if facility == "HEARTBEAT" else ""


def harvest(log: Path, history_dir: Path, source: str, variant: str) -> int:
    """Record the broker errors of a consumer's log in the history; returns how many."""
    if not log.exists():
        return 0
    with log.open(errors="replace") as lines:
        found = list(broker_errors(lines))
    if not found:
        return 0
    writer = HistoryWriter(history_dir, source, variant)
    try:
        for e in found:
            writer.append(EventKind.KAFKA_ERROR, t=e.t, detail=e.detail)
    finally:
        writer.close()
    return len(found)
