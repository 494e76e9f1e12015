"""The fault proxy's ``--rewrite-addresses``: the brokers a cluster the lab did not start
advertises are replaced, in the responses that name brokers, by the proxy's own listeners, so
that clients come back through the proxy after bootstrap.

The first section builds responses of every version from Kafka's message schemas
(MetadataResponse.json, FindCoordinatorResponse.json, DescribeClusterResponse.json of Kafka
4.3.1) and checks that only the mapped addresses change, byte for byte; the last runs a second
proxy in front of the local environment's brokers, with confluent-kafka clients through it.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from harness.environment import state
from harness.environment.local import LocalEnvironment
from harness.environment.ports import LOOPBACK, free_ports
from harness.environment.proxy import ProxyControl, ProxyError
from harness.environment.proxy import kafka_messages as km
from harness.environment.proxy.addresses import (
    AddressBook,
    ResponseAddresses,
    rewrite_response,
)
from harness.environment.proxy.listener import ListenerSpec
from harness.environment.proxy.server import ProxyServer
from harness.kafka.clients import (
    CONSUMER_CLIENT,
    HARNESS_CLIENT,
    PRODUCER_CLIENT,
    admin,
    consumer_config,
    producer_config,
)
from harness.kafka.topics import create_topic
from harness.kafka.wire import Malformed, Writer
from harness.readiness import NotReady, wait_for
from tests.support import unique, value_text

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60

MAPPED = ("broker-1.example.com", 9092)  # a listener forwards here ...
LISTENER_PORT = 24001  # ... from this port
UNMAPPED = ("broker-2.example.com", 9093)
PORTS = {MAPPED: LISTENER_PORT}
REWRITTEN = (LOOPBACK, LISTENER_PORT)
NO_NODE = ("", -1)  # what an error names

# A tagged field (tag 0, two bytes) where flexible versions allow them: copied, never dropped.
TAGGED = b"\x01\x00\x02\xab\xcd"

# -- responses, built from the schemas ---------------------------------------------------------


def frame(version_flexible: bool, body: bytes, correlation: int = 42) -> bytes:
    """Size, response header (v1 - tagged fields - when flexible), body."""
    w = Writer().int32(correlation)
    if version_flexible:
        w.raw(TAGGED)
    payload = w.raw(body).bytes()
    return Writer().int32(len(payload)).raw(payload).bytes()


def metadata(version: int, brokers: list[tuple[str, int]]) -> tuple[bytes, bytes]:
    """(whole frame, the bytes after the broker list) of a Metadata response."""
    c = version >= 9
    head = Writer()
    if version >= 3:
        head.int32(17)  # throttle time
    head.array_length(len(brokers), compact=c)
    for node, (host, port) in enumerate(brokers, 1):
        head.int32(node).string(host, compact=c).int32(port)
        if version >= 1:
            head.nullable_string("rack-a" if node == 1 else None, compact=c)
        if c:
            head.raw(TAGGED)
    tail = Writer()
    if version >= 2:
        tail.nullable_string("cluster-Ü", compact=c)
    if version >= 1:
        tail.int32(2)  # controller id
    tail.array_length(1, compact=c)  # topics
    tail.int16(0).string("orders", compact=c)
    if version >= 10:
        tail.raw(bytes(range(16)))  # topic id
    if version >= 1:
        tail.boolean(False)  # is internal
    tail.array_length(1, compact=c)  # partitions
    tail.int16(0).int32(0).int32(1)  # error, index, leader
    if version >= 7:
        tail.int32(5)  # leader epoch
    for _ in range(3 if version >= 5 else 2):  # replicas, isr, offline replicas
        tail.array_length(2, compact=c).int32(1).int32(2)
    if c:
        tail.raw(TAGGED)  # partition
    if version >= 8:
        tail.int32(-(2**31))  # topic authorized operations
    if c:
        tail.empty_tagged_fields()  # topic
    if 8 <= version <= 10:
        tail.int32(-(2**31))  # cluster authorized operations
    if version >= 13:
        tail.int16(0)  # error code
    if c:
        tail.raw(TAGGED)
    return frame(c, head.bytes() + tail.bytes()), tail.bytes()


def find_coordinator(version: int, coordinators: list[tuple[str, int]]) -> bytes:
    """A FindCoordinator response; one coordinator before v4, one per key from v4."""
    c = version >= 3
    w = Writer()
    if version >= 1:
        w.int32(0)
    if version <= 3:
        ((host, port),) = coordinators
        w.int16(0)
        if version >= 1:
            w.nullable_string(None, compact=c)
        w.int32(1).string(host, compact=c).int32(port)
    else:
        w.array_length(len(coordinators), compact=True)
        for node, (host, port) in enumerate(coordinators, 1):
            w.string(f"group-{node}", compact=True).int32(node if port >= 0 else -1)
            w.string(host, compact=True).int32(port)
            w.int16(0 if port >= 0 else 15).nullable_string(None, compact=True)
            w.raw(TAGGED)
    if c:
        w.empty_tagged_fields()
    return frame(c, w.bytes())


def describe_cluster(version: int, brokers: list[tuple[str, int]]) -> tuple[bytes, bytes]:
    w = Writer().int32(0).int16(0).nullable_string(None, compact=True)
    if version >= 1:
        w.int8(1)  # endpoint type: brokers
    w.string("cluster", compact=True).int32(1)
    w.array_length(len(brokers), compact=True)
    for node, (host, port) in enumerate(brokers, 1):
        w.int32(node).string(host, compact=True).int32(port).nullable_string(None, compact=True)
        if version >= 2:
            w.boolean(False)  # is fenced
        w.raw(TAGGED)
    tail = Writer().int32(-(2**31)).raw(TAGGED)
    return frame(True, w.bytes() + tail.bytes()), tail.bytes()


# -- rewriting, version by version -------------------------------------------------------------


@pytest.mark.parametrize("version", range(14))
def test_metadata_names_the_listener_of_a_mapped_broker_only(version: int) -> None:
    original, tail = metadata(version, [MAPPED, UNMAPPED])
    result = rewrite_response(original, METADATA, version, PORTS)
    expected, _ = metadata(version, [REWRITTEN, UNMAPPED])
    assert result.frame == expected
    assert result.frame.endswith(tail) and original.endswith(tail)
    assert result.unknown == (UNMAPPED,)


@pytest.mark.parametrize("version", range(14))
def test_metadata_naming_no_mapped_broker_is_the_same_bytes(version: int) -> None:
    original, _ = metadata(version, [UNMAPPED])
    assert rewrite_response(original, METADATA, version, PORTS).frame is original


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_names_the_listener_of_a_mapped_coordinator(version: int) -> None:
    if version <= 3:
        result = rewrite_response(find_coordinator(version, [MAPPED]), 10, version, PORTS)
        assert result.frame == find_coordinator(version, [REWRITTEN])
        assert result.unknown == ()
        unmapped = find_coordinator(version, [UNMAPPED])
        other = rewrite_response(unmapped, FIND_COORDINATOR, version, PORTS)
        assert other.frame is unmapped and other.unknown == (UNMAPPED,)
    else:
        original = find_coordinator(version, [MAPPED, UNMAPPED, NO_NODE])
        result = rewrite_response(original, FIND_COORDINATOR, version, PORTS)
        assert result.frame == find_coordinator(version, [REWRITTEN, UNMAPPED, NO_NODE])
        assert result.unknown == (UNMAPPED,)  # an error's empty node is no address


@pytest.mark.parametrize("version", range(3))
def test_describe_cluster_names_the_listener_of_a_mapped_broker(version: int) -> None:
    original, tail = describe_cluster(version, [UNMAPPED, MAPPED])
    result = rewrite_response(original, DESCRIBE_CLUSTER, version, PORTS)
    expected, _ = describe_cluster(version, [UNMAPPED, REWRITTEN])
    assert result.frame == expected and result.frame.endswith(tail)


def test_host_names_ignore_case() -> None:
    original, _ = metadata(12, [("BROKER-1.Example.com", 9092)])
    assert rewrite_response(original, METADATA, 12, PORTS).frame == metadata(12, [REWRITTEN])[0]


def test_what_does_not_decode_is_refused() -> None:
    original, _ = metadata(12, [MAPPED, UNMAPPED])
    with pytest.raises(Malformed):
        rewrite_response(original[:30], METADATA, 12, PORTS)
    with pytest.raises(Malformed):  # FindCoordinator is read whole: left-over bytes are a lie
        rewrite_response(find_coordinator(4, [MAPPED]) + b"\x00", FIND_COORDINATOR, 4, PORTS)
    with pytest.raises(km.Unsupported):
        rewrite_response(original, METADATA, 14, PORTS)


# -- what a connection does with it ------------------------------------------------------------


def request(api_key: int, version: int, correlation: int = 42) -> km.RequestHeader:
    return km.RequestHeader(api_key, version, correlation, "client", None)


SPECS = [
    ListenerSpec("kafka/1", "kafka", LISTENER_PORT, *MAPPED),
    ListenerSpec("kafka/2", "kafka", LISTENER_PORT + 1, "broker-3.example.com", 9094),
    ListenerSpec("mongo", "tcp", LISTENER_PORT + 2, *UNMAPPED),  # not Kafka: never an address
]


def test_without_the_flag_every_response_is_the_same_bytes() -> None:
    proxy = ProxyServer(SPECS)
    assert proxy.addresses is None and not proxy.stats_json()["rewrite_addresses"]
    responses = ResponseAddresses(proxy.addresses)
    original, _ = metadata(12, [MAPPED, UNMAPPED])
    responses.forwarded(request(METADATA, 12))
    assert responses.awaiting == {}
    assert responses.response(original, "kafka/1#1") is original


def test_with_the_flag_only_responses_to_recorded_requests_change() -> None:
    proxy = ProxyServer(SPECS, rewrite=True)
    assert proxy.addresses is not None and proxy.stats_json()["rewrite_addresses"]
    assert proxy.addresses.ports == {MAPPED: LISTENER_PORT, ("broker-3.example.com", 9094): 24002}
    responses = ResponseAddresses(proxy.addresses)
    original, _ = metadata(12, [MAPPED, UNMAPPED])
    responses.forwarded(request(18, 3, correlation=41))  # ApiVersions: nothing to rewrite
    responses.forwarded(request(METADATA, 12, correlation=42))
    assert responses.awaiting == {42: (METADATA, 12)}
    assert responses.response(frame(False, b"", correlation=41), "l") == frame(False, b"", 41)
    assert responses.response(original, "l") == metadata(12, [REWRITTEN, UNMAPPED])[0]
    assert responses.awaiting == {}
    assert responses.response(original, "l") is original  # answered already: not recorded


def test_unknown_addresses_and_versions_are_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    book = AddressBook(PORTS)
    original, _ = metadata(12, [MAPPED, UNMAPPED])
    with caplog.at_level(logging.WARNING, logger="chaoslab.proxy"):
        for _ in range(3):
            book.rewrite(original, METADATA, 12, "kafka/1#1")
            assert not book.tracks(METADATA, 14)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "broker-2.example.com:9093" in messages[0]
    assert "Metadata v14" in messages[1]
    assert book.tracks(METADATA, 13) and book.tracks(FIND_COORDINATOR, 6)
    assert not book.tracks(0, 9)  # Produce names no broker


def test_two_listeners_in_front_of_one_broker_are_refused() -> None:
    twice = [*SPECS, ListenerSpec("kafka/9", "kafka", 24009, *MAPPED)]
    with pytest.raises(ValueError, match="both forward to"):
        ProxyServer(twice, rewrite=True)
    ProxyServer(twice)  # without rewriting, nothing to choose


# -- against the real servers ------------------------------------------------------------------


@contextmanager
def second_proxy(
    upstreams: list[str], log: Path, *, rewrite: bool
) -> Iterator[tuple[ProxyControl, list[int]]]:
    """A proxy process of its own in front of ``upstreams`` (one Kafka listener each): its
    control client and its listeners' ports."""
    with state.ports_locked():
        control_port, *ports = free_ports(len(upstreams) + 1, taken=state.reserved_ports())
    argv = [sys.executable, "-m", "harness.environment.proxy", "--control", str(control_port)]
    for number, (upstream, port) in enumerate(zip(upstreams, ports, strict=True), 1):
        argv += ["--listener", f"kafka/{number},kafka,{port},{upstream}"]
    if rewrite:
        argv.append("--rewrite-addresses")
    with log.open("ab") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    control = ProxyControl(LOOPBACK, control_port)
    try:

        def answers() -> None:
            if process.poll() is not None:
                raise AssertionError(f"the proxy exited: {log.read_text()[-2000:]}")
            try:
                control.health()
            except ProxyError as exc:
                raise NotReady(str(exc)) from exc

        wait_for(answers, what="the second proxy", timeout=15)
        yield control, ports
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def advertised_ports(bootstrap: str) -> list[int]:
    """The ports of the brokers a Metadata response through ``bootstrap`` names."""
    brokers = admin(bootstrap).list_topics(timeout=10).brokers
    return sorted(b.port for b in brokers.values())


@pytest.mark.servers
def test_clients_through_a_rewriting_proxy_never_leave_it(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    # The local brokers advertise the first proxy's listeners: to a second proxy in front of
    # those, they are brokers that advertise addresses of their own, as an external cluster's do.
    upstreams = lab_env.kafka_bootstrap.split(",")
    upstream_ports = sorted(int(address.rsplit(":", 1)[1]) for address in upstreams)
    log = tmp_path / "proxy.log"

    with second_proxy(upstreams, log, rewrite=False) as (_, ports):
        bootstrap = ",".join(f"{LOOPBACK}:{port}" for port in ports)
        assert advertised_ports(bootstrap) == upstream_ports  # what rewriting is for

    with second_proxy(upstreams, log, rewrite=True) as (control, ports):
        bootstrap = ",".join(f"{LOOPBACK}:{port}" for port in ports)
        assert advertised_ports(bootstrap) == sorted(ports)

        topic = unique("rewritten")
        create_topic(bootstrap, topic, 2 * len(upstreams))  # a partition led by every broker
        values = [f"r{i}" for i in range(30)]
        errors: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                errors.append(error)

        producer = Producer(producer_config(bootstrap))
        for value in values:
            producer.produce(topic, value=value.encode(), on_delivery=delivered)
        assert producer.flush(30) == 0 and not errors, errors[:3]

        consumer = Consumer(consumer_config(bootstrap, unique("group")))
        consumer.subscribe([topic])
        got: list[str] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < len(values) and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=len(values), timeout=0.5):
                    assert message.error() is None, message.error()
                    got.append(value_text(message))
            consumer.commit(asynchronous=False)  # through the coordinator FindCoordinator named
            brokers = consumer.list_topics(timeout=10).brokers
        finally:
            consumer.close()
        assert sorted(got) == sorted(values)
        assert sorted(b.port for b in brokers.values()) == sorted(ports)

        listeners = control.stats()["listeners"]
        assert all(listeners[f"kafka/{n}"]["accepted"] >= 1 for n in range(1, len(ports) + 1))
        apis: dict[str, set[str]] = {}
        for listener in listeners.values():
            for client, used in listener["apis"].items():
                apis.setdefault(client, set()).update(used)
        assert "Metadata" in apis[HARNESS_CLIENT] and "Produce" in apis[PRODUCER_CLIENT]
        assert {"FindCoordinator", "Fetch", "OffsetCommit"} <= apis[CONSUMER_CLIENT]

    text = log.read_text()
    assert "rewriting broker addresses in responses" in text
    # Every address the brokers named had a listener, and every version a layout.
    assert "no Kafka listener forwards to" not in text and "cannot rewrite" not in text
