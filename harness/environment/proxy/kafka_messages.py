"""The few Kafka messages the proxy reads or writes itself.

It reads every request's header (to learn the client and the API), the acks of Produce requests
(acks=0 gets no response, which matters for ordering), and the bodies of OffsetCommit and
FindCoordinator requests it answers itself. It writes error responses for OffsetCommit,
FindCoordinator, JoinGroup and Heartbeat, in every version listed in ``ERROR_VERSIONS``,
exactly as a broker that hit the error would (Kafka's ``getErrorResponse`` of each request).
(Rewriting broker addresses, it also reads Metadata, FindCoordinator and DescribeCluster
responses: ``addresses``.)

Layouts follow clients/src/main/resources/common/message/*.json in apache/kafka. librdkafka 2.16
against Apache Kafka 4.3.1 negotiates OffsetCommit v9, FindCoordinator v2, JoinGroup v5,
Heartbeat v3 (the proxy's log says which versions each client uses).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.kafka.protocol import ApiKey, api_name, error_name
from harness.kafka.wire import Malformed, Reader, Writer

# The first flexible version (compact strings and arrays, tagged fields, request header v2,
# response header v1) of each API whose body the proxy reads or writes.
FLEXIBLE_FROM: dict[int, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.API_VERSIONS: 3,
    ApiKey.DESCRIBE_CLUSTER: 0,
}

# The versions the proxy can answer with an error: all that Kafka 3.x/4.0 define but OffsetCommit
# v10, which replaces topic names by topic ids (librdkafka 2.16 sends v9 to Kafka 4.3).
ERROR_VERSIONS: dict[int, range] = {
    ApiKey.OFFSET_COMMIT: range(0, 10),
    ApiKey.FIND_COORDINATOR: range(0, 7),
    ApiKey.JOIN_GROUP: range(0, 10),
    ApiKey.HEARTBEAT: range(0, 5),
}

INT16 = range(-(2**15), 2**15)


class Unsupported(ValueError):
    """The proxy cannot answer this request itself (an API or version it has no layout for)."""


def is_flexible(api_key: int, version: int) -> bool:
    first = FLEXIBLE_FROM.get(api_key)
    return first is not None and version >= first


@dataclass(frozen=True)
class RequestHeader:
    """Request header v1/v2 (v0 only for ControlledShutdown v0, which has no client id)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str  # '' when null
    body_offset: int | None  # where the body starts; None when unknown (the header's tagged
    # fields depend on the API's flexible versions, known only for FLEXIBLE_FROM's APIs)


def parse_request_header(frame: bytes) -> RequestHeader:
    """The header of a request frame (the bytes after the 4-byte size)."""
    r = Reader(frame)
    api_key, version, correlation_id = r.int16(), r.int16(), r.int32()
    client_id: str | None = None
    if not (api_key == ApiKey.CONTROLLED_SHUTDOWN and version == 0):
        # Never compact, even in header v2: brokers must read it before knowing the version.
        client_id = r.nullable_string(compact=False)
    body_offset: int | None = r.offset
    if is_flexible(api_key, version):
        r.skip_tagged_fields()
        body_offset = r.offset
    elif api_key not in FLEXIBLE_FROM:
        body_offset = None
    return RequestHeader(api_key, version, correlation_id, client_id or "", body_offset)


def expects_response(header: RequestHeader, frame: bytes) -> bool:
    """False only for Produce with acks=0, which the broker never answers."""
    if header.api_key != ApiKey.PRODUCE or header.body_offset is None:
        return True
    r = Reader(frame, header.body_offset)
    if header.api_version >= 3:
        # The transactional id.
        r.nullable_string(compact=is_flexible(ApiKey.PRODUCE, header.api_version))
    return r.int16() != 0


def can_answer(header: RequestHeader) -> bool:
    versions = ERROR_VERSIONS.get(header.api_key)
    return versions is not None and header.api_version in versions


def error_response(header: RequestHeader, frame: bytes, error_code: int) -> bytes:
    """The whole response frame (size included) a broker would send for this request had it
    failed with ``error_code``. Raises ``Unsupported`` or ``Malformed``."""
    if not can_answer(header):
        raise Unsupported(f"cannot answer {api_name(header.api_key)} v{header.api_version}")
    if error_code not in INT16:
        raise ValueError(f"error code {error_code} is not an int16")
    assert header.body_offset is not None  # every API in ERROR_VERSIONS is in FLEXIBLE_FROM
    version = header.api_version
    body = Reader(frame, header.body_offset)
    if header.api_key == ApiKey.OFFSET_COMMIT:
        encoded = offset_commit_error(version, read_offset_commit(body, version), error_code)
    elif header.api_key == ApiKey.FIND_COORDINATOR:
        encoded = find_coordinator_error(version, read_find_coordinator(body, version), error_code)
    elif header.api_key == ApiKey.JOIN_GROUP:
        encoded = join_group_error(version, error_code)
    else:
        encoded = heartbeat_error(version, error_code)
    return response_frame(header, encoded)


def group_ids(header: RequestHeader, frame: bytes) -> list[str]:
    """The consumer group ids a request of an API the proxy answers is for: OffsetCommit,
    JoinGroup and Heartbeat name one first in their body; FindCoordinator its keys ([] for a
    request it cannot read: no rule with a group prefix answers it)."""
    if not can_answer(header):
        return []
    assert header.body_offset is not None  # every API in ERROR_VERSIONS is in FLEXIBLE_FROM
    body = Reader(frame, header.body_offset)
    try:
        if header.api_key == ApiKey.FIND_COORDINATOR:
            return read_find_coordinator(body, header.api_version)
        return [body.string(compact=is_flexible(header.api_key, header.api_version))]
    except Malformed:
        return []


def response_frame(header: RequestHeader, body: bytes) -> bytes:
    """Size, response header (v1 - with tagged fields - for flexible versions, except for
    ApiVersions, whose response header is always v0), body."""
    w = Writer().int32(header.correlation_id)
    flexible = is_flexible(header.api_key, header.api_version)
    if flexible and header.api_key != ApiKey.API_VERSIONS:
        w.empty_tagged_fields()
    w.raw(body)
    payload = w.bytes()
    return Writer().int32(len(payload)).raw(payload).bytes()


def _message(error_code: int) -> str:
    return f"{error_name(error_code)} (injected by chaoslab's proxy)"


# -- request bodies ---------------------------------------------------------------------------


def read_offset_commit(r: Reader, version: int) -> list[tuple[str, list[int]]]:
    """(topic, [partition]) of an OffsetCommit request, in request order."""
    c = version >= 8
    r.string(compact=c)  # group id
    if version >= 1:
        r.int32()  # generation id / member epoch
        r.string(compact=c)  # member id
    if version >= 7:
        r.nullable_string(compact=c)  # group instance id
    if 2 <= version <= 4:
        r.int64()  # retention time

    def partition() -> int:
        index = r.int32()
        r.int64()  # committed offset
        if version >= 6:
            r.int32()  # committed leader epoch
        if version == 1:
            r.int64()  # commit timestamp
        r.nullable_string(compact=c)  # metadata
        if c:
            r.skip_tagged_fields()
        return index

    def topic() -> tuple[str, list[int]]:
        name = r.string(compact=c)
        partitions = r.array(partition, compact=c)
        if c:
            r.skip_tagged_fields()
        return name, partitions

    topics = r.array(topic, compact=c)
    if c:
        r.skip_tagged_fields()
    _at_end(r, "OffsetCommit", version)
    return topics


def read_find_coordinator(r: Reader, version: int) -> list[str]:
    """The coordinator keys a FindCoordinator request asks for (one before v4)."""
    c = version >= 3
    if version <= 3:
        keys = [r.string(compact=c)]
        if version >= 1:
            r.int8()  # key type
    else:
        r.int8()
        keys = r.array(lambda: r.string(compact=True), compact=True)
    if c:
        r.skip_tagged_fields()
    _at_end(r, "FindCoordinator", version)
    return keys


def _at_end(r: Reader, what: str, version: int) -> None:
    # Left-over bytes mean the layout assumed is not the client's: refuse rather than guess.
    if r.offset != len(r.data):
        raise Malformed(f"{what} v{version}: {len(r.data) - r.offset} bytes after the body")


# -- error response bodies --------------------------------------------------------------------


def offset_commit_error(version: int, topics: list[tuple[str, list[int]]], error: int) -> bytes:
    """Every topic and partition of the request, each with ``error``."""
    c = version >= 8
    w = Writer()
    if version >= 3:
        w.int32(0)  # throttle time
    w.array_length(len(topics), compact=c)
    for name, partitions in topics:
        w.string(name, compact=c)
        w.array_length(len(partitions), compact=c)
        for index in partitions:
            w.int32(index).int16(error)
            if c:
                w.empty_tagged_fields()
        if c:
            w.empty_tagged_fields()
    if c:
        w.empty_tagged_fields()
    return w.bytes()


def heartbeat_error(version: int, error: int) -> bytes:
    w = Writer()
    if version >= 1:
        w.int32(0)
    w.int16(error)
    if version >= 4:
        w.empty_tagged_fields()
    return w.bytes()


def join_group_error(version: int, error: int) -> bytes:
    """As Kafka's JoinGroupRequest.getErrorResponse: generation -1, empty member and leader,
    no members; the protocol name is '' before v7 and null from v7."""
    c = version >= 6
    w = Writer()
    if version >= 2:
        w.int32(0)
    w.int16(error).int32(-1)  # generation id
    if version >= 7:
        w.nullable_string(None, compact=c)  # protocol type
    w.nullable_string(None if version >= 7 else "", compact=c)  # protocol name
    w.string("", compact=c)  # leader
    if version >= 9:
        w.boolean(False)  # skip assignment
    w.string("", compact=c)  # member id
    w.array_length(0, compact=c)  # members
    if c:
        w.empty_tagged_fields()
    return w.bytes()


def find_coordinator_error(version: int, keys: list[str], error: int) -> bytes:
    """As Kafka's FindCoordinatorRequest.getErrorResponse: no node (-1, '', -1); from v4 one
    coordinator entry per requested key."""
    c = version >= 3
    w = Writer()
    if version >= 1:
        w.int32(0)
    if version <= 3:
        w.int16(error)
        if version >= 1:
            w.nullable_string(_message(error), compact=c)
        w.int32(-1).string("", compact=c).int32(-1)
    else:
        w.array_length(len(keys), compact=True)
        for key in keys:
            w.string(key, compact=True).int32(-1).string("", compact=True).int32(-1)
            w.int16(error).nullable_string(_message(error), compact=True)
            w.empty_tagged_fields()
    if c:
        w.empty_tagged_fields()
    return w.bytes()
