"""The fault proxy on the environment's links: Kafka errors with the real codes, cuts, resets and
delays on one link at a time, and everything else passed through unchanged.

The first section checks the proxy's Kafka encoders against the protocol's byte layout with a
reader written here from Kafka's message schemas; the rest talks to the real local servers.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from pymongo import MongoClient
from pymongo.errors import NetworkTimeout, ServerSelectionTimeoutError

from harness.environment import state
from harness.environment.base import Component, Link, LinkRule, LinkRuleRefused
from harness.environment.local import LocalEnvironment
from harness.environment.ports import LOOPBACK, free_ports
from harness.environment.proxy import RuleRejected
from harness.environment.proxy import kafka_messages as km
from harness.environment.proxy.listener import ListenerSpec
from harness.environment.proxy.server import ProxyServer
from harness.errors import BadInput
from harness.kafka.clients import (
    CONSUMER_CLIENT,
    HARNESS_CLIENT,
    PRODUCER_CLIENT,
    consumer_config,
    end_offsets,
    partition_offset,
    producer_config,
)
from harness.kafka.protocol import FAILABLE_APIS, ApiKey, api_name
from harness.kafka.topics import create_topic
from harness.kafka.wire import Malformed
from harness.readiness import NotReady, wait_for
from tests.support import leader_in_view, unique, value_text

NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS = 16, 14
OFFSET_COMMIT, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, API_VERSIONS = 8, 10, 11, 12, 18

# -- an independent codec, from Kafka's message schemas ----------------------------------------
#
# A field is (name, type, first version, last version or None, nullable from or None); a type
# is a primitive name, "[string]", or a list of fields (an array of structs).

Field = tuple[str, Any, int, int | None, int | None]

OFFSET_COMMIT_REQUEST: list[Field] = [
    ("group_id", "string", 0, None, None),
    ("generation_id", "int32", 1, None, None),
    ("member_id", "string", 1, None, None),
    ("group_instance_id", "string", 7, None, 7),
    ("retention_time_ms", "int64", 2, 4, None),
    (
        "topics",
        [
            ("name", "string", 0, None, None),
            (
                "partitions",
                [
                    ("partition_index", "int32", 0, None, None),
                    ("committed_offset", "int64", 0, None, None),
                    ("committed_leader_epoch", "int32", 6, None, None),
                    ("commit_timestamp", "int64", 1, 1, None),
                    ("committed_metadata", "string", 0, None, 0),
                ],
                0,
                None,
                None,
            ),
        ],
        0,
        None,
        None,
    ),
]
OFFSET_COMMIT_RESPONSE: list[Field] = [
    ("throttle_time_ms", "int32", 3, None, None),
    (
        "topics",
        [
            ("name", "string", 0, None, None),
            (
                "partitions",
                [
                    ("partition_index", "int32", 0, None, None),
                    ("error_code", "int16", 0, None, None),
                ],
                0,
                None,
                None,
            ),
        ],
        0,
        None,
        None,
    ),
]
FIND_COORDINATOR_REQUEST: list[Field] = [
    ("key", "string", 0, 3, None),
    ("key_type", "int8", 1, None, None),
    ("coordinator_keys", "[string]", 4, None, None),
]
FIND_COORDINATOR_RESPONSE: list[Field] = [
    ("throttle_time_ms", "int32", 1, None, None),
    ("error_code", "int16", 0, 3, None),
    ("error_message", "string", 1, 3, 1),
    ("node_id", "int32", 0, 3, None),
    ("host", "string", 0, 3, None),
    ("port", "int32", 0, 3, None),
    (
        "coordinators",
        [
            ("key", "string", 4, None, None),
            ("node_id", "int32", 4, None, None),
            ("host", "string", 4, None, None),
            ("port", "int32", 4, None, None),
            ("error_code", "int16", 4, None, None),
            ("error_message", "string", 4, None, 4),
        ],
        4,
        None,
        None,
    ),
]
JOIN_GROUP_RESPONSE: list[Field] = [
    ("throttle_time_ms", "int32", 2, None, None),
    ("error_code", "int16", 0, None, None),
    ("generation_id", "int32", 0, None, None),
    ("protocol_type", "string", 7, None, 7),
    ("protocol_name", "string", 0, None, 7),
    ("leader", "string", 0, None, None),
    ("skip_assignment", "bool", 9, None, None),
    ("member_id", "string", 0, None, None),
    (
        "members",
        [
            ("member_id", "string", 0, None, None),
            ("group_instance_id", "string", 5, None, 5),
            ("metadata", "bytes", 0, None, None),
        ],
        0,
        None,
        None,
    ),
]
HEARTBEAT_RESPONSE: list[Field] = [
    ("throttle_time_ms", "int32", 1, None, None),
    ("error_code", "int16", 0, None, None),
]
FLEXIBLE = {
    0: 9,
    OFFSET_COMMIT: 8,
    FIND_COORDINATOR: 3,
    JOIN_GROUP: 6,
    HEARTBEAT: 4,
    API_VERSIONS: 3,
}
FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "bool": ">?"}


def _present(field: Field, version: int) -> bool:
    _, _, first, last, _ = field
    return version >= first and (last is None or version <= last)


class Cursor:
    """Reads the protocol's primitives; every read checks it stays inside the buffer."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        assert n >= 0 and self.at + n <= len(self.data), f"read past the end at {self.at}"
        self.at += n
        return self.data[self.at - n : self.at]

    def fixed(self, kind: str) -> Any:
        fmt = FIXED[kind]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            (b,) = self.take(1)
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    def length(self, compact: bool, classic: str) -> int:
        return self.uvarint() - 1 if compact else self.fixed(classic)

    def no_tagged_fields(self) -> None:
        assert self.uvarint() == 0, "unexpected tagged fields"


def decode(spec: list[Field], data: Cursor, version: int, flexible: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in spec:
        if not _present(field, version):
            continue
        name, kind, _, _, nullable_from = field
        nullable = nullable_from is not None and version >= nullable_from
        if isinstance(kind, list) or kind == "[string]":
            count = data.length(flexible, "int32")
            assert count >= 0
            if kind == "[string]":
                out[name] = [data.take(data.length(True, "int16")).decode() for _ in range(count)]
            else:
                out[name] = [decode(kind, data, version, flexible) for _ in range(count)]
        elif kind in ("string", "bytes"):
            size = data.length(flexible, "int16" if kind == "string" else "int32")
            if size < 0:
                assert nullable, f"{name} is null but not nullable in v{version}"
                out[name] = None
            else:
                raw = data.take(size)
                out[name] = raw.decode() if kind == "string" else raw
        else:
            out[name] = data.fixed(kind)
    if flexible:
        data.no_tagged_fields()
    return out


def decode_response(frame: bytes, api_key: int, version: int, spec: list[Field]) -> Any:
    """(correlation id, body) of a whole response frame; every byte must be accounted for."""
    data = Cursor(frame)
    assert data.fixed("int32") == len(frame) - 4, "size prefix"
    correlation = data.fixed("int32")
    flexible = version >= FLEXIBLE[api_key]
    if flexible and api_key != API_VERSIONS:
        data.no_tagged_fields()  # response header v1
    body = decode(spec, data, version, flexible)
    assert data.at == len(frame), f"{len(frame) - data.at} bytes left over"
    return correlation, body


def encode(spec: list[Field], values: dict[str, Any], version: int, flexible: bool) -> bytes:
    out = bytearray()

    def length(n: int, classic: str) -> None:
        if flexible:
            n += 1
            while n > 0x7F:
                out.append((n & 0x7F) | 0x80)
                n >>= 7
            out.append(n)
        else:
            out.extend(struct.pack(FIXED[classic], n))

    for field in spec:
        if not _present(field, version):
            continue
        name, kind, *_ = field
        value = values[name]
        if isinstance(kind, list):
            length(len(value), "int32")
            for item in value:
                out.extend(encode(kind, item, version, flexible))
        elif kind == "[string]":
            length(len(value), "int32")
            for item in value:
                length(len(item.encode()), "int16")
                out.extend(item.encode())
        elif kind == "string":
            if value is None:
                length(-1, "int16")
            else:
                length(len(value.encode()), "int16")
                out.extend(value.encode())
        else:
            out.extend(struct.pack(FIXED[kind], value))
    if flexible:
        out.append(0)
    return bytes(out)


def request_frame(api_key: int, version: int, correlation: int, client: str, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, len(client)) + client.encode()
    if version >= FLEXIBLE.get(api_key, 1 << 15):
        header += b"\x00"  # request header v2: tagged fields
    return struct.pack(">i", len(header) + len(body)) + header + body


def offset_commit_request(version: int, topics: dict[str, list[int]]) -> bytes:
    values = {
        "group_id": "g",
        "generation_id": 3,
        "member_id": "member-1",
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [
            {
                "name": name,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": 100 + p,
                        "committed_leader_epoch": -1,
                        "commit_timestamp": -1,
                        "committed_metadata": "" if p % 2 else None,
                    }
                    for p in partitions
                ],
            }
            for name, partitions in topics.items()
        ],
    }
    return encode(OFFSET_COMMIT_REQUEST, values, version, version >= FLEXIBLE[OFFSET_COMMIT])


def answer(api_key: int, version: int, body: bytes, error: int, correlation: int = 7) -> bytes:
    frame = request_frame(api_key, version, correlation, CONSUMER_CLIENT, body)[4:]
    return km.error_response(km.parse_request_header(frame), frame, error)


# -- the encoders, version by version ----------------------------------------------------------


@pytest.mark.parametrize("version", range(10))
@pytest.mark.parametrize("error", [NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, -1, 32767])
def test_offset_commit_error_echoes_every_partition(version: int, error: int) -> None:
    topics = {"orders": [0, 1, 2], "ünïcode-topic": [7]}
    frame = answer(OFFSET_COMMIT, version, offset_commit_request(version, topics), error)
    correlation, body = decode_response(frame, OFFSET_COMMIT, version, OFFSET_COMMIT_RESPONSE)
    assert correlation == 7
    assert body.get("throttle_time_ms", 0) == 0 and ("throttle_time_ms" in body) == (version >= 3)
    assert [
        (t["name"], p["partition_index"], p["error_code"])
        for t in body["topics"]
        for p in t["partitions"]
    ] == [
        ("orders", 0, error),
        ("orders", 1, error),
        ("orders", 2, error),
        ("ünïcode-topic", 7, error),
    ]


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_error_names_no_node(version: int) -> None:
    flexible = version >= FLEXIBLE[FIND_COORDINATOR]
    values = {"key": "group-a", "key_type": 0, "coordinator_keys": ["group-a", "group-b"]}
    request = encode(FIND_COORDINATOR_REQUEST, values, version, flexible)
    frame = answer(FIND_COORDINATOR, version, request, NOT_COORDINATOR)
    _, body = decode_response(frame, FIND_COORDINATOR, version, FIND_COORDINATOR_RESPONSE)
    if version < 4:
        assert (body["error_code"], body["node_id"], body["host"], body["port"]) == (16, -1, "", -1)
        if version >= 1:
            assert "NOT_COORDINATOR" in body["error_message"]
    else:
        assert [(c["key"], c["error_code"], c["node_id"]) for c in body["coordinators"]] == [
            ("group-a", 16, -1),
            ("group-b", 16, -1),
        ]


@pytest.mark.parametrize("version", range(10))
def test_join_group_error_is_kafkas_error_response(version: int) -> None:
    frame = answer(JOIN_GROUP, version, b"", COORDINATOR_LOAD_IN_PROGRESS)
    _, body = decode_response(frame, JOIN_GROUP, version, JOIN_GROUP_RESPONSE)
    assert body["error_code"] == 14 and body["generation_id"] == -1 and body["members"] == []
    assert body["protocol_name"] == (None if version >= 7 else "")
    assert body["member_id"] == body["leader"] == ""
    assert body.get("skip_assignment", False) is False


@pytest.mark.parametrize("version", range(5))
def test_heartbeat_error(version: int) -> None:
    frame = answer(HEARTBEAT, version, b"", 7)
    _, body = decode_response(frame, HEARTBEAT, version, HEARTBEAT_RESPONSE)
    assert body["error_code"] == 7


def group_first(api_key: int, version: int, group: str) -> bytes:
    """A JoinGroup or Heartbeat body as far as its group id, the first field of every version
    (then bytes the proxy does not read for it)."""
    raw = group.encode()
    if version >= FLEXIBLE[api_key]:
        return bytes([len(raw) + 1]) + raw + b"\x00\x00\x00\x07"  # compact string (< 127)
    return struct.pack(">h", len(raw)) + raw + b"\x00\x00\x00\x07"


def group_ids_of(api_key: int, version: int, body: bytes) -> list[str]:
    frame = request_frame(api_key, version, 1, CONSUMER_CLIENT, body)[4:]
    return km.group_ids(km.parse_request_header(frame), frame)


def test_the_apis_a_rule_can_fail_are_those_the_proxy_can_answer() -> None:
    # Kafka's API keys are written once (harness.kafka.protocol); the proxy's error layouts
    # cover exactly the APIs a kafka-error rule may name, which the tests' own numbers agree on.
    assert set(km.ERROR_VERSIONS) == set(FAILABLE_APIS)
    assert [int(a) for a in FAILABLE_APIS] == [
        OFFSET_COMMIT,
        FIND_COORDINATOR,
        JOIN_GROUP,
        HEARTBEAT,
    ]
    assert api_name(ApiKey.OFFSET_COMMIT) == "OffsetCommit"
    assert api_name(ApiKey.INIT_PRODUCER_ID) == "InitProducerId"
    assert api_name(999) == "api 999"


def test_the_group_ids_a_request_is_for() -> None:
    """What a kafka-error rule with a group prefix matches, in every version it answers."""
    for version in range(10):
        request = offset_commit_request(version, {"orders": [0]})
        assert group_ids_of(OFFSET_COMMIT, version, request) == ["g"], version
        assert group_ids_of(JOIN_GROUP, version, group_first(JOIN_GROUP, version, "run.a")) == [
            "run.a"
        ]
    for version in range(5):
        body = group_first(HEARTBEAT, version, "run.b")
        assert group_ids_of(HEARTBEAT, version, body) == ["run.b"], version
    for version in range(7):
        values = {"key": "run.c", "key_type": 0, "coordinator_keys": ["run.c", "run.d"]}
        request = encode(FIND_COORDINATOR_REQUEST, values, version, version >= 3)
        expected = ["run.c"] if version < 4 else ["run.c", "run.d"]
        assert group_ids_of(FIND_COORDINATOR, version, request) == expected, version
    # A version it cannot answer, or a body it cannot read: no group (a prefix rule forwards it).
    assert group_ids_of(OFFSET_COMMIT, 10, b"") == []
    assert group_ids_of(HEARTBEAT, 4, b"\x05ab") == []


def test_what_the_proxy_cannot_answer_it_says_so() -> None:
    with pytest.raises(km.Unsupported):
        answer(OFFSET_COMMIT, 10, b"", NOT_COORDINATOR)
    with pytest.raises(ValueError, match="int16"):
        answer(HEARTBEAT, 3, b"", 1 << 15)
    # A body that is not the layout of its version is refused, never half-read.
    with pytest.raises(Malformed):
        answer(OFFSET_COMMIT, 9, offset_commit_request(8, {"t": [0]}) + b"\x00", 16)


def test_request_headers_and_acks_zero() -> None:
    frame = request_frame(0, 9, 5, "chaoslab-producer", b"\x00\x00\x00")[4:]  # null txn id, acks 0
    header = km.parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (0, 9, 5)
    assert header.client_id == "chaoslab-producer" and not km.expects_response(header, frame)
    acks_all = request_frame(0, 3, 6, "p", b"\xff\xff\xff\xff")[4:]  # null txn id, acks -1
    assert km.expects_response(km.parse_request_header(acks_all), acks_all)
    with pytest.raises(Malformed):
        km.parse_request_header(b"\x00\x03\x00")


# -- against the real servers ------------------------------------------------------------------


@pytest.fixture
def env(lab_env: LocalEnvironment) -> Iterator[LocalEnvironment]:
    """The shared environment, with no link rule left behind by a failing test."""
    try:
        yield lab_env
    finally:
        lab_env.clear_link_rules()


def produce(bootstrap: str, topic: str, values: list[str], **overrides: Any) -> None:
    errors: list[KafkaError] = []
    producer = Producer(producer_config(bootstrap, **overrides))
    for value in values:
        producer.produce(
            topic,
            key=value.encode(),
            value=value.encode(),
            headers={"h": value.encode()},
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
        producer.poll(0)
    left = producer.flush(30)
    assert left == 0 and not errors, f"{left} unacknowledged, errors {errors[:3]}"


def consume(consumer: Consumer, count: int, timeout: float) -> list[Message]:
    """Up to ``count`` messages, or fewer when ``timeout`` runs out."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=count - len(got), timeout=0.2):
            assert msg.error() is None, msg.error()
            got.append(msg)
    return got


@contextmanager
def group_consumer(
    env: LocalEnvironment, topic: str, **overrides: Any
) -> Iterator[tuple[Consumer, str]]:
    """A consumer on the consumer link, in a group of its own, subscribed to ``topic``."""
    group = unique("group")
    consumer = Consumer(
        consumer_config(env.kafka_bootstrap_for(Link.CONSUMER_KAFKA), group, **overrides)
    )
    consumer.subscribe([topic])
    try:
        yield consumer, group
    finally:
        consumer.close()


def committed(env: LocalEnvironment, topic: str, group: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, read by the harness's own client (no rule targets it)."""
    config = consumer_config(env.kafka_bootstrap, group, **{"client.id": HARNESS_CLIENT})
    reader = Consumer(config)
    try:
        tps = reader.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        reader.close()
    return {tp.partition: tp.offset for tp in tps}


@pytest.mark.servers
@pytest.mark.parametrize(
    "error", [NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS], ids=["NOT_COORDINATOR", "LOADING"]
)
def test_a_commit_fails_with_the_injected_error_until_the_rule_is_lifted(
    env: LocalEnvironment, error: int
) -> None:
    topic = unique("commits")
    create_topic(env.kafka_bootstrap, topic, 2)
    values = [f"m{i}" for i in range(40)]
    produce(env.kafka_bootstrap, topic, values)
    # A NOT_COORDINATOR commit takes librdkafka longer than the default 6 s session to give up
    # (coordinator lookups; docs/faults.md), and no heartbeat gets through meanwhile: with that
    # session the group would drop the assignment (ASSIGNMENT_LOST) before the test lifts the
    # rule.
    with group_consumer(env, topic, **{"session.timeout.ms": 30_000}) as (consumer, group):
        assert len(consume(consumer, len(values), 30)) == len(values)
        rule = LinkRule(Link.CONSUMER_KAFKA, "kafka-error", api_keys=(8,), error_code=error)
        rule_id = env.add_link_rule(rule)

        with pytest.raises(KafkaException) as caught:
            consumer.commit(asynchronous=False)
        assert caught.value.args[0].code() == error
        assert env.remove_link_rule(rule_id) >= 1  # the proxy answered each attempt itself...
        assert committed(env, topic, group, 2) == {0: -1001, 1: -1001}  # ...none reached Kafka

        result = consumer.commit(asynchronous=False)
        assert result is not None and all(tp.error is None for tp in result)
        mine = {tp.partition: tp.offset for tp in result}
    assert mine == end_offsets(env.kafka_bootstrap, topic)
    assert committed(env, topic, group, 2) == mine


@pytest.mark.servers
def test_a_rule_with_a_group_prefix_fails_only_those_groups(env: LocalEnvironment) -> None:
    """Two runs' consumers on one link: the rule for one run's groups (``matrix --together``)
    fails that run's commits and lets the other's through, at the same moment."""
    topic = unique("prefixed")
    create_topic(env.kafka_bootstrap, topic, 1)
    produce(env.kafka_bootstrap, topic, [f"m{i}" for i in range(10)])
    config = {"session.timeout.ms": 30_000}
    with (
        group_consumer(env, topic, **config) as (hit, hit_group),
        group_consumer(env, topic, **config) as (spared, spared_group),
    ):
        for consumer in (hit, spared):
            assert len(consume(consumer, 10, 30)) == 10
        rule = LinkRule(
            Link.CONSUMER_KAFKA, "kafka-error", api_keys=(8,), error_code=NOT_COORDINATOR,
            group_prefix=hit_group,
        )  # fmt: skip
        rule_id = env.add_link_rule(rule)
        try:
            result = spared.commit(asynchronous=False)
            assert result is not None and all(tp.error is None for tp in result)
            with pytest.raises(KafkaException) as caught:
                hit.commit(asynchronous=False)
            assert caught.value.args[0].code() == NOT_COORDINATOR
        finally:
            assert env.remove_link_rule(rule_id) >= 1
    assert committed(env, topic, spared_group, 1) == {0: 10}
    assert committed(env, topic, hit_group, 1) == {0: -1001}


@pytest.mark.servers
def test_5000_messages_pass_through_the_proxy_unchanged(env: LocalEnvironment) -> None:
    topic = unique("through")
    create_topic(env.kafka_bootstrap, topic, 3)
    values = [f"v{i}-" + "x" * (i % 64) for i in range(5000)]
    produce(env.kafka_bootstrap_for(Link.PRODUCER_KAFKA), topic, values)
    with group_consumer(env, topic) as (consumer, group):
        got = consume(consumer, len(values), 60)
        assert consume(consumer, 1, 0.5) == []  # and nothing more
        consumer.commit(asynchronous=False)
        brokers = consumer.list_topics(timeout=10).brokers
    assert sorted(value_text(m) for m in got) == sorted(values)
    assert all(m.key() == m.value() and m.headers() == [("h", m.value())] for m in got)
    for partition in range(3):
        offsets = sorted(o for p, o in map(partition_offset, got) if p == partition)
        assert offsets == list(range(len(offsets)))
    assert committed(env, topic, group, 3) == end_offsets(env.kafka_bootstrap, topic)
    # Every connection after bootstrap went through the proxy too: each node advertises its
    # listener of the proxy.
    advertised = sorted(f"{b.host}:{b.port}" for b in brokers.values())
    assert advertised == sorted(env.kafka_bootstrap.split(","))
    listeners = env.fault_proxy.stats()["listeners"]
    apis: dict[str, set[str]] = {}
    for node in (1, 2, 3):
        for client, used in listeners[f"kafka/{node}"]["apis"].items():
            apis.setdefault(client, set()).update(used)
    assert "Produce" in apis[PRODUCER_CLIENT]
    assert {"Fetch", "OffsetCommit", "JoinGroup", "Heartbeat"} <= apis[CONSUMER_CLIENT]


@pytest.mark.servers
def test_a_cut_consumer_link_spares_the_producer(env: LocalEnvironment) -> None:
    topic = unique("cut")
    create_topic(env.kafka_bootstrap, topic, 1)
    producer_link = env.kafka_bootstrap_for(Link.PRODUCER_KAFKA)
    produce(producer_link, topic, [f"before{i}" for i in range(10)])
    with group_consumer(env, topic) as (consumer, _):
        assert len(consume(consumer, 10, 30)) == 10
        rule_id = env.add_link_rule(LinkRule(Link.CONSUMER_KAFKA, "cut"))

        during = [f"during{i}" for i in range(20)]
        produce(producer_link, topic, during)  # every one acknowledged
        assert consume(consumer, 1, 2.0) == []
        assert env.remove_link_rule(rule_id) >= 1

        after = consume(consumer, len(during), 30)
        assert [value_text(m) for m in after] == during


@contextmanager
def captured(logger_name: str) -> Iterator[tuple[logging.Logger, list[str]]]:
    """A logger for librdkafka's log lines (confluent-kafka's ``logger`` setting)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(logger_name)
    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # librdkafka logs disconnects at INFO
    logger.propagate = False
    try:
        yield logger, lines
    finally:
        logger.removeHandler(handler)


@pytest.mark.servers
def test_a_reset_closes_the_consumers_connections_and_it_recovers(env: LocalEnvironment) -> None:
    topic = unique("reset")
    create_topic(env.kafka_bootstrap, topic, 1)
    producer_link = env.kafka_bootstrap_for(Link.PRODUCER_KAFKA)
    produce(producer_link, topic, [f"before{i}" for i in range(10)])
    errors: list[KafkaError] = []
    with (
        captured(unique("rdkafka")) as (logger, lines),
        group_consumer(env, topic, logger=logger, error_cb=errors.append) as (consumer, _),
    ):
        assert len(consume(consumer, 10, 30)) == 10
        rule_id = env.add_link_rule(LinkRule(Link.CONSUMER_KAFKA, "reset"))
        assert env.fault_proxy.affected(rule_id) >= 1  # its open connections, closed at once

        def reported() -> None:
            consumer.poll(0.1)  # serves the log and error callbacks
            if not any("Disconnected" in line and "reset by peer" in line for line in lines):
                raise NotReady(f"no disconnect logged yet: {lines[-5:]}")
            if not {e.code() for e in errors} & {
                KafkaError._TRANSPORT,
                KafkaError._ALL_BROKERS_DOWN,
            }:
                raise NotReady(f"errors so far: {errors}")

        wait_for(reported, what="the consumer to report the reset", timeout=15)
        produce(producer_link, topic, [f"during{i}" for i in range(10)])
        assert consume(consumer, 1, 1.0) == []  # new connections are reset too
        env.remove_link_rule(rule_id)

        after = consume(consumer, 10, 30)
        assert [value_text(m) for m in after] == [f"during{i}" for i in range(10)]


@pytest.mark.servers
def test_coordinator_errors_reach_the_consumer_by_name_and_it_recovers(
    env: LocalEnvironment,
) -> None:
    """Heartbeat and FindCoordinator answered by the proxy: librdkafka decodes each error (seed
    002's "coordinator is loading", "not the correct coordinator") and the group carries on."""
    topic = unique("coordinator")
    create_topic(env.kafka_bootstrap, topic, 2)
    producer_link = env.kafka_bootstrap_for(Link.PRODUCER_KAFKA)
    with (
        captured(unique("rdkafka")) as (logger, lines),
        group_consumer(env, topic, logger=logger, debug="cgrp") as (consumer, _),
    ):
        produce(producer_link, topic, ["first"])
        assert len(consume(consumer, 1, 30)) == 1
        consumer.commit(asynchronous=False)  # a rebalance must not bring "first" back
        heartbeat, find = "heartbeat error response", "FindCoordinator response error"
        phases = [
            ((HEARTBEAT,), COORDINATOR_LOAD_IN_PROGRESS, heartbeat, "load in progress"),
            ((HEARTBEAT, FIND_COORDINATOR), NOT_COORDINATOR, find, "NOT_COORDINATOR"),
        ]
        for apis, error, event, name in phases:
            lines.clear()
            rule_id = env.add_link_rule(
                LinkRule(Link.CONSUMER_KAFKA, "kafka-error", api_keys=apis, error_code=error)
            )

            def logged(event: str = event, name: str = name) -> None:
                consumer.poll(0.1)
                if not any(event in line and name in line for line in lines):
                    raise NotReady(f"no {event!r} with {name!r} logged")

            wait_for(logged, what=f"the consumer to log {name}", timeout=15)
            assert env.remove_link_rule(rule_id) >= 1
            assert not [line for line in lines if "parse" in line.lower()]
            produce(producer_link, topic, [f"after {name}"])
            got = [value_text(m) for m in consume(consumer, 1, 30)]
            assert got == [f"after {name}"]
            consumer.commit(asynchronous=False)


@pytest.mark.servers
def test_a_delay_adds_at_least_its_time_each_way(env: LocalEnvironment) -> None:
    topic = unique("delay")
    create_topic(env.kafka_bootstrap, topic, 1)
    producer = Producer(producer_config(env.kafka_bootstrap_for(Link.PRODUCER_KAFKA)))

    def kafka_round_trip() -> float:
        acked: list[float] = []
        started = time.monotonic()
        producer.produce(topic, b"x", on_delivery=lambda e, _m: acked.append(time.monotonic()))
        assert producer.flush(30) == 0
        return acked[0] - started

    kafka_round_trip()  # connected, metadata known: what follows is one request and its answer
    rule_id = env.add_link_rule(LinkRule(Link.PRODUCER_KAFKA, "delay", delay_ms=250))
    assert kafka_round_trip() >= 2 * 0.250  # the request, then the response, each held 250 ms
    assert env.remove_link_rule(rule_id) >= 2
    # On one node's link only: the partition's leader is slow, another node is not.
    leader = leader_in_view(env, topic)
    other = next(n for n in env.broker_ids if n != leader)
    rule_id = env.add_link_rule(LinkRule(Link.PRODUCER_KAFKA, "delay", delay_ms=250, broker=other))
    kafka_round_trip()
    assert env.remove_link_rule(rule_id) == 0  # nothing went to that node, nothing was held
    rule_id = env.add_link_rule(LinkRule(Link.PRODUCER_KAFKA, "delay", delay_ms=250, broker=leader))
    assert kafka_round_trip() >= 2 * 0.250
    assert env.remove_link_rule(rule_id) >= 2

    client: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri_for(Link.CONSUMER_MONGO))
    with client:
        client.admin.command("ping")
        rule_id = env.add_link_rule(LinkRule(Link.CONSUMER_MONGO, "delay", delay_ms=200))
        started = time.monotonic()
        client.admin.command("ping")
        assert time.monotonic() - started >= 2 * 0.200


@pytest.mark.servers
def test_mongo_through_the_proxy_transactions_and_a_cut(env: LocalEnvironment) -> None:
    uri = env.mongo_uri_for(Link.CONSUMER_MONGO)
    assert uri != env.mongo_uri and uri.endswith("/?directConnection=true")
    proxy_port = int(uri.split("//")[1].split("/")[0].split(":")[1])
    name = unique("db")
    timeouts: dict[str, Any] = {"serverSelectionTimeoutMS": 1000, "socketTimeoutMS": 1000}
    client: MongoClient[dict[str, Any]] = MongoClient(uri, connectTimeoutMS=1000, **timeouts)
    with client:
        db = client[name]
        db.create_collection("orders")
        db.create_collection("consumer_offsets")
        db.orders.insert_one({"_id": "a"})
        with client.start_session() as session, session.start_transaction():
            db.orders.insert_many([{"_id": f"t{i}"} for i in range(5)], session=session)
            db.consumer_offsets.update_one(
                {"_id": "g@t@0"}, {"$set": {"offset": 4}}, upsert=True, session=session
            )
        assert client.address == ("127.0.0.1", proxy_port)
        direct: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
        with direct:
            assert direct[name].orders.count_documents({}) == 6
            assert direct[name].consumer_offsets.find_one() == {"_id": "g@t@0", "offset": 4}

        rule_id = env.add_link_rule(LinkRule(Link.CONSUMER_MONGO, "cut"))
        with pytest.raises((NetworkTimeout, ServerSelectionTimeoutError)):
            db.orders.find_one({"_id": "a"})
        assert env.remove_link_rule(rule_id) >= 1

        def works() -> None:
            if db.orders.find_one({"_id": "a"}) != {"_id": "a"}:
                raise NotReady("document not found")

        wait_for(works, what="MongoDB through the proxy after the cut", timeout=30)


def test_link_rules_are_checked_before_anything_is_touched() -> None:
    with pytest.raises(LinkRuleRefused, match="MongoDB link") as caught:
        LinkRule(Link.CONSUMER_MONGO, "kafka-error", api_keys=(8,), error_code=NOT_COORDINATOR)
    assert isinstance(caught.value, BadInput)
    with pytest.raises(LinkRuleRefused, match="delay_ms"):
        LinkRule(Link.CONSUMER_KAFKA, "delay")
    with pytest.raises(LinkRuleRefused, match="APIs"):
        LinkRule(Link.CONSUMER_KAFKA, "kafka-error", api_keys=(3,), error_code=NOT_COORDINATOR)
    with pytest.raises(LinkRuleRefused, match="unknown link fault"):
        LinkRule(Link.PRODUCER_KAFKA, "drop")
    with pytest.raises(LinkRuleRefused, match="broker is for Kafka links"):
        LinkRule(Link.CONSUMER_MONGO, "delay", delay_ms=5, broker=1)


@pytest.mark.servers
def test_the_proxy_refuses_a_rule_it_cannot_apply(env: LocalEnvironment) -> None:
    with pytest.raises(RuleRejected, match="cannot tell clients apart"):
        env.fault_proxy.add_rule("mongo", "cut", clients=CONSUMER_CLIENT)
    with pytest.raises(RuleRejected, match="listener"):
        env.fault_proxy.add_rule("nowhere", "cut")
    assert env.fault_proxy.rules() == []


# -- the wire, by hand -------------------------------------------------------------------------


def first_node(env: LocalEnvironment) -> str:
    """The proxy's listener for node 1 (the bootstrap list names one per node)."""
    return env.kafka_bootstrap.split(",")[0]


def host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


@contextmanager
def raw_connection(address: str) -> Iterator[socket.socket]:
    sock = socket.create_connection(host_port(address), timeout=10)
    try:
        yield sock
    finally:
        sock.close()


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"connection closed after {len(data)} of {size} bytes"
        data += chunk
    return data


def recv_frame(sock: socket.socket) -> bytes:
    head = recv_exactly(sock, 4)
    return head + recv_exactly(sock, struct.unpack(">i", head)[0])


def refused(address: str) -> None:
    """Return if a connection to ``address`` is refused; raise ``NotReady`` if it is taken."""
    try:
        with raw_connection(address):
            pass
    except ConnectionRefusedError:
        return
    raise NotReady(f"{address} accepted a connection")


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def api_versions(correlation: int, client: str = HARNESS_CLIENT) -> bytes:
    return request_frame(API_VERSIONS, 0, correlation, client, b"")


@pytest.mark.servers
def test_made_up_responses_keep_their_place_among_the_brokers(env: LocalEnvironment) -> None:
    """Pipelined requests: the proxy's own answers wait for the broker's to earlier requests."""
    env.add_link_rule(
        LinkRule(Link.CONSUMER_KAFKA, "kafka-error", api_keys=(8,), error_code=NOT_COORDINATOR)
    )
    commits = {9: {"t": [0, 1]}, 2: {"a": [3], "b": [0]}}
    with raw_connection(first_node(env)) as sock:
        sock.sendall(
            api_versions(1, CONSUMER_CLIENT)
            + request_frame(8, 9, 2, CONSUMER_CLIENT, offset_commit_request(9, commits[9]))
            + api_versions(3, CONSUMER_CLIENT)
            + request_frame(8, 2, 4, CONSUMER_CLIENT, offset_commit_request(2, commits[2]))
        )
        frames = [recv_frame(sock) for _ in range(4)]
    assert [struct.unpack(">i", f[4:8])[0] for f in frames] == [1, 2, 3, 4]
    assert [struct.unpack(">h", f[8:10])[0] for f in (frames[0], frames[2])] == [0, 0]  # broker
    for frame, version in ((frames[1], 9), (frames[3], 2)):
        _, body = decode_response(frame, OFFSET_COMMIT, version, OFFSET_COMMIT_RESPONSE)
        echoed = {
            t["name"]: [p["partition_index"] for p in t["partitions"]] for t in body["topics"]
        }
        assert echoed == commits[version]
        assert {p["error_code"] for t in body["topics"] for p in t["partitions"]} == {16}


@pytest.mark.servers
def test_the_proxy_survives_garbage_and_a_broker_that_is_down(env: LocalEnvironment) -> None:
    for garbage in (struct.pack(">i", -5) + b"junk", struct.pack(">i", 3) + b"\x00\x12\x00"):
        with raw_connection(first_node(env)) as sock:
            sock.sendall(garbage)
            assert closed_by_peer(sock), f"the proxy kept a connection that sent {garbage!r}"
    assert "malformed Kafka frame" in env.log_path("proxy").read_text()

    env.kill_broker(broker=1)
    try:
        # Refused, as by the dead broker's own port. Which connection finds the broker gone
        # first is not this test's to say: the lab's own clients reconnect too (the one that
        # does is closed: the next test, on a proxy of its own).
        wait_for(lambda: refused(first_node(env)), what="node 1's listener refusing", timeout=10)
    finally:
        env.revive(Component.KAFKA, broker=1)
    # The listener takes connections again once node 1 does (it asks every 50 ms).
    sock = wait_for(lambda: socket.create_connection(host_port(first_node(env)), timeout=10),
                    what="node 1's listener accepting again", timeout=10)  # fmt: skip
    with sock:
        sock.sendall(api_versions(1))
        assert struct.unpack(">ih", recv_frame(sock)[4:10]) == (1, 0)
    proxy = {s.name: s for s in env.status().servers}["proxy"]
    assert proxy.ready and proxy.address == first_node(env)


@contextmanager
def proxy_in_thread(specs: list[ListenerSpec]) -> Iterator[None]:
    """A proxy of the test's own, on an event loop in a thread: no other client uses it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="proxy", daemon=True)
    thread.start()
    proxy = ProxyServer(specs)
    try:
        asyncio.run_coroutine_threadsafe(proxy.start(), loop).result(timeout=10)
        yield
    finally:
        asyncio.run_coroutine_threadsafe(proxy.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def test_a_listener_closes_what_finds_its_server_down_then_refuses_until_it_is_up() -> None:
    with state.ports_locked():
        port, upstream_port = free_ports(2, taken=state.reserved_ports())
    address = f"{LOOPBACK}:{port}"
    with proxy_in_thread([ListenerSpec("tcp", "tcp", port, LOOPBACK, upstream_port)]):
        # Accepted, then closed: only a connection to the server tells the proxy it is down.
        with raw_connection(address) as sock:
            sock.sendall(b"hello")
            assert closed_by_peer(sock)
        # Then refused - not accepted and closed, which a client takes for a live server.
        wait_for(lambda: refused(address), what="the listener refusing", timeout=10)
        with socket.create_server((LOOPBACK, upstream_port)) as upstream:
            upstream.settimeout(10)
            # The listener takes connections again once the server does (it asks every 50 ms).
            sock = wait_for(lambda: socket.create_connection(host_port(address), timeout=10),
                            what="the listener accepting again", timeout=10)  # fmt: skip
            with sock:
                sock.sendall(b"hello")
                assert first_bytes(upstream) == b"hello"


def first_bytes(server: socket.socket) -> bytes:
    """The first bytes a connection to ``server`` sends (the proxy's probes send none)."""
    while True:
        accepted, _ = server.accept()
        with accepted:
            accepted.settimeout(10)
            if data := accepted.recv(1024):
                return data
