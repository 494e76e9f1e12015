"""Kafka's API keys and error codes, as the protocol guide numbers them - written down once, for
the fault proxy (which reads and answers some requests itself), the commit fault (which names
them in a scenario) and the cluster queries (which send DescribeQuorum)."""

from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    """The APIs the lab reads, writes or logs by name."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    DESCRIBE_CONFIGS = 32
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72

    @property
    def title(self) -> str:
        """Kafka's own name of it, as its documentation and logs spell it: ``OffsetCommit``."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class ErrorCode(IntEnum):
    """The coordinator errors a commit fails with while group coordinators move (seed 002's log
    lines), which the fault proxy can answer with."""

    REQUEST_TIMED_OUT = 7
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16


# The group APIs a kafka-error rule of the fault proxy can fail (it has their error layouts).
FAILABLE_APIS = (ApiKey.OFFSET_COMMIT, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT)


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``api 99`` for one the lab does not know)."""
    try:
        return ApiKey(api_key).title
    except ValueError:
        return f"api {api_key}"


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
