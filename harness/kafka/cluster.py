"""What a Kafka cluster looks like from a client: its brokers, its active controller, each
partition's leader and in-sync replicas, and the group coordinator of a consumer group.

One ``ClusterView`` is one Metadata request (``list_topics``) plus one DescribeQuorum request.
The Admin API's DescribeCluster and DescribeConsumerGroups are avoided on purpose:

* in KRaft, DescribeCluster's "controller" is a random broker, not the active controller
  (docs/environment.md); DescribeQuorum names the leader, and
  confluent-kafka has no call for it, hence the few lines of protocol below;
* librdkafka 2.16 aborted the whole process when DescribeConsumerGroups was polled
  while a broker restarted (``rd_kafka_enq_once_del_source_return: Assertion ... refcnt > 0``),
  so a group's coordinator is computed as Kafka does: the leader of ``__consumer_offsets``
  partition ``abs(group.hashCode()) % partitions`` (it matched DescribeConsumerGroups in every
  run it was checked against).
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from harness.kafka.clients import HARNESS_CLIENT, HARNESS_SETTINGS
from harness.kafka.protocol import ApiKey
from harness.kafka.wire import Malformed, Reader, Writer

OFFSETS_TOPIC = "__consumer_offsets"
METADATA_TOPIC = "__cluster_metadata"
_correlation = itertools.count(1)


def java_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units, as a signed 32-bit int)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group``: Kafka's ``Utils.abs(hashCode) % n``
    (``Math.abs``, with MIN_VALUE taken as 0 - not ``hash & 0x7fffffff``)."""
    h = java_hash(group)
    return (0 if h == -(2**31) else abs(h)) % partitions


@dataclass(frozen=True)
class PartitionView:
    leader: int  # -1 when it has none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True)
class ClusterView:
    brokers: tuple[int, ...]  # registered and unfenced
    controller: int | None  # the KRaft quorum's leader
    partitions: Mapping[tuple[str, int], PartitionView]

    def under_replicated(self) -> list[tuple[str, int]]:
        return sorted(tp for tp, p in self.partitions.items() if p.under_replicated)

    def leader_of(self, topic: str, partition: int) -> int | None:
        found = self.partitions.get((topic, partition))
        return found.leader if found is not None and found.leader >= 0 else None

    def coordinator_of(self, group: str) -> int | None:
        """The broker coordinating ``group`` (None before ``__consumer_offsets`` exists)."""
        count = sum(1 for topic, _ in self.partitions if topic == OFFSETS_TOPIC)
        if not count:
            return None
        return self.leader_of(OFFSETS_TOPIC, offsets_partition(group, count))


def cluster_view(bootstrap: str, *, timeout: float = 10.0) -> ClusterView:
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000, **HARNESS_SETTINGS}
    )
    metadata = admin.list_topics(timeout=timeout)
    partitions = {
        (name, number): PartitionView(p.leader, tuple(p.replicas), tuple(p.isrs))
        for name, topic in metadata.topics.items()
        for number, p in topic.partitions.items()
    }
    controller = None
    for broker in sorted(metadata.brokers.values(), key=lambda b: b.id):
        try:
            # confluent_kafka's BrokerMetadata sets `host = None` unannotated, so mypy infers
            # None for what is always the broker's host name.
            controller = quorum_leader(broker.host, broker.port, timeout=timeout)  # type: ignore[arg-type]
            break
        except (OSError, Malformed):
            continue  # that broker is going away: ask the next
    return ClusterView(tuple(sorted(metadata.brokers)), controller, partitions)


def quorum_leader(host: str, port: int, *, timeout: float = 10.0) -> int | None:
    """The node leading the KRaft quorum, by DescribeQuorum (v0) to any broker (brokers
    forward it to the controllers); None while there is no leader."""
    body = (
        Writer()
        .uvarint(2)  # one topic (compact arrays carry count + 1)
        .nullable_string(METADATA_TOPIC, compact=True)
        .uvarint(2)  # one partition
        .int32(0)
        .uvarint(0)
        .uvarint(0)
        .uvarint(0)
    )
    r = _ask(host, port, ApiKey.DESCRIBE_QUORUM, 0, body, timeout)
    if r.int16() != 0:
        return None  # e.g. NOT_LEADER_OR_FOLLOWER while the quorum elects
    r.uvarint()  # topics
    r.string(compact=True)
    r.uvarint()  # partitions
    r.int32()  # partition index
    if r.int16() != 0:
        return None
    leader = r.int32()
    return leader if leader >= 0 else None


def topic_leaders(host: str, port: int, topic: str, *, timeout: float = 5.0) -> dict[int, int]:
    """Each partition's leader (-1: none) of ``topic`` as one broker's metadata has it: Metadata
    (v12) to that broker alone; {} while it does not know the topic. The Admin API asks any
    broker, and a broker learns of a new topic from the controller a moment after another."""
    body = (
        Writer()
        .uvarint(2)  # one topic
        .raw(bytes(16))  # no topic id: by name
        .nullable_string(topic, compact=True)
        .uvarint(0)
        .boolean(False)  # allow_auto_topic_creation
        .boolean(False)  # include_topic_authorized_operations
        .uvarint(0)
    )
    r = _ask(host, port, ApiKey.METADATA, 12, body, timeout)
    r.int32()  # throttle time

    def broker() -> None:
        r.int32(), r.string(compact=True), r.int32(), r.nullable_string(compact=True)
        r.skip_tagged_fields()

    def partition() -> tuple[int, int] | None:
        error, index, leader = r.int16(), r.int32(), r.int32()
        r.int32()  # leader epoch
        for _ in range(3):  # replicas, in-sync replicas, offline replicas
            r.array(r.int32, compact=True)
        r.skip_tagged_fields()
        return None if error else (index, leader)

    r.array(broker, compact=True)
    r.nullable_string(compact=True)  # cluster id
    r.int32()  # controller id
    leaders: dict[int, int] = {}
    for _ in range(r.uvarint() - 1):
        error = r.int16()
        r.nullable_string(compact=True), r.uuid(), r.int8()  # name, id, is_internal
        found = r.array(partition, compact=True)
        r.int32()  # authorized operations
        r.skip_tagged_fields()
        if not error:
            leaders.update(p for p in found if p is not None)
    return leaders


def group_states(host: str, port: int, *, timeout: float = 5.0) -> dict[str, str]:
    """The consumer groups one broker coordinates, by their state as Kafka names it
    (``Stable``, ``PreparingRebalance``...): ListGroups (v4) to that broker alone.

    Not the Admin API's ListConsumerGroups, which asks every broker at once: while one of them
    was down, librdkafka's main thread spun until the request timed out (a fifth of a core per
    client), and the lab watches a group every half second through every broker fault."""
    body = Writer().uvarint(1).uvarint(0)  # no states filter; tagged fields
    r = _ask(host, port, ApiKey.LIST_GROUPS, 4, body, timeout)
    r.int32()  # throttle time
    if r.int16() != 0:
        return {}  # e.g. COORDINATOR_LOAD_IN_PROGRESS: none listed yet
    states = {}
    for _ in range(r.uvarint() - 1):
        group = r.string(compact=True)
        r.string(compact=True)  # protocol type
        states[group] = r.string(compact=True)
        r.skip_tagged_fields()
    return states


def _ask(host: str, port: int, api: ApiKey, version: int, body: Writer, timeout: float) -> Reader:
    """One request of a flexible version (request header v2) on a connection of its own; the
    response past its header (v1)."""
    correlation = next(_correlation) & 0x7FFFFFFF
    request = (
        Writer()
        .int16(api)
        .int16(version)
        .int32(correlation)
        .nullable_string(HARNESS_CLIENT, compact=False)  # header v2: never compact
        .uvarint(0)  # header tagged fields
        .raw(body.bytes())
        .bytes()
    )
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", _read_exactly(conn, 4))[0]
        r = Reader(_read_exactly(conn, size))
    if r.int32() != correlation:
        raise Malformed(f"{api.title}: the response answers another request")
    r.skip_tagged_fields()  # response header v1
    return r


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(left)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
