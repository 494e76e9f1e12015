"""Kafka client settings tuned for the lab, and the reads the lab makes with them.

librdkafka's defaults suit a data centre: a 45 s session timeout and backoffs of up to 10 s
mean a bounced broker or a killed consumer takes a minute to notice. The lab wants faults and
recoveries to play out in seconds, so every client the lab makes starts from these settings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from harness.readiness import NotReady, wait_for

# Every client names its role in client.id: the environment's Kafka-aware fault proxy tells the
# producer link from the consumer link by it (they share the broker's one advertised address).
PRODUCER_CLIENT = "chaoslab-producer"
CONSUMER_CLIENT = "chaoslab-consumer"
HARNESS_CLIENT = "chaoslab-harness"  # the lab's own bookkeeping: never a fault target

QUIET = 3  # librdkafka's syslog levels: 3 errors only (7 debug)
# The lab's own bookkeeping clients log critical errors only: they ask the cluster while a fault
# has nodes down, and librdkafka logs each refused connection as an error - dozens of
# "%3|...|FAIL|... Connection refused" lines among a run's progress. A real problem is the
# question's timeout or exception, which names it.
HARNESS_SETTINGS: dict[str, str | int] = {"client.id": HARNESS_CLIENT, "log_level": 2}
_COMMON: dict[str, Any] = {
    # A client that once named a topic keeps asking for its metadata (every refresh interval,
    # until it is collected), and a producer's or admin client's ask makes the broker create a
    # topic that is not there: a run's topic deleted once judged came back, with the broker's
    # default partitions, from a harness client still alive. The lab creates every topic itself.
    "allow.auto.create.topics": False,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "socket.connection.setup.timeout.ms": 5000,
    "topic.metadata.refresh.interval.ms": 5000,
}


@contextmanager
def client_log(path: Path) -> Iterator[logging.Logger]:
    """A logger for a client's ``logger`` setting that writes to ``path`` only: what librdkafka
    says while a fault has brokers down (``FAIL ... Connection refused``, dozens of lines)
    belongs to the run's logs, not between the lab's progress lines on the terminal."""
    logger = logging.getLogger(f"chaoslab.client.{path}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        handler.close()


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    return {
        **_COMMON,
        "bootstrap.servers": bootstrap,
        "client.id": PRODUCER_CLIENT,
        # The producer runs in the harness: its disconnects during broker faults would fill
        # the terminal (they are expected); errors still show.
        "log_level": QUIET,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        # Keep retrying through a broker bounce instead of failing the delivery.
        "message.timeout.ms": 120_000,
        **overrides,
    }


def consumer_config(bootstrap: str, group: str, **overrides: Any) -> dict[str, Any]:
    return {
        **_COMMON,
        "bootstrap.servers": bootstrap,
        "client.id": CONSUMER_CLIENT,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "max.poll.interval.ms": 60_000,
        **overrides,
    }


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({**_COMMON, "bootstrap.servers": bootstrap, **HARNESS_SETTINGS})


class Watermarks:
    """Reads the high watermark (the next offset to be written) of each partition of a topic,
    with one consumer for every ``read()`` (making one and connecting is not free:
    docs/performance.md)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        group: str = "chaoslab-watermarks",
    ) -> None:
        self.topic = topic
        self._consumer = Consumer(consumer_config(bootstrap, group, **HARNESS_SETTINGS))
        self._last: dict[int, int] = {}

    def read(self, timeout: float = 30.0) -> dict[int, int]:
        """Every partition's high watermark; {} when the topic does not exist. Retried until
        ``timeout`` while a partition has no leader (a node restarting: NOT_LEADER...)."""

        def once() -> dict[int, int]:
            topics = self._consumer.list_topics(self.topic, timeout=timeout).topics
            metadata = topics[self.topic]
            if metadata.error is not None:
                if metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return {}
                raise KafkaException(metadata.error)
            try:
                return {p: self._high(p, timeout) for p in sorted(metadata.partitions)}
            except KafkaException as exc:
                if exc.args[0].retriable():
                    raise NotReady(str(exc)) from exc
                raise

        highs = wait_for(once, what=f"the end offsets of {self.topic}", timeout=timeout)
        self._last.update(highs)
        return highs

    def _high(self, partition: int, timeout: float) -> int:
        return self._consumer.get_watermark_offsets(
            TopicPartition(self.topic, partition), timeout=timeout
        )[1]

    @property
    def last(self) -> dict[int, int]:
        """What the last ``read()`` found."""
        return dict(self._last)

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> Watermarks:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def end_offsets(bootstrap: str, topic: str, *, timeout: float = 30.0) -> dict[int, int]:
    """The high watermark (the next offset to be written) of each partition of ``topic``."""
    with Watermarks(bootstrap, topic) as watermarks:
        return watermarks.read(timeout)


def await_group_coordinator(bootstrap: str, *, timeout: float = 120.0) -> None:
    """Until the cluster answers a consumer group's request, and every broker lists its groups.
    The first request makes Kafka create ``__consumer_offsets`` (slow on a small machine:
    docs/performance.md), which an environment does at start, not in its first run's consumers."""
    consumer = Consumer(consumer_config(bootstrap, "chaoslab-warm-up", **HARNESS_SETTINGS))

    def answers() -> None:
        try:
            consumer.committed([TopicPartition("chaoslab-warm-up", 0)], timeout=5)
        except KafkaException as exc:
            raise NotReady(str(exc)) from exc
        # Every broker's coordinators, not only the warm-up group's: `status` lists the groups
        # from all of them.
        lab_groups(bootstrap, timeout=5)

    try:
        wait_for(answers, what="the group coordinator", timeout=timeout)
    finally:
        consumer.close()


def lab_groups(bootstrap: str, *, timeout: float = 10.0) -> list[str]:
    """The consumer groups the cluster knows (the lab's: a run's groups are named after its
    topic), sorted."""
    # The client is held until its answer is in: one collected while its request is out loses
    # the answer now and then, never with it held (docs/environment.md). That was the `status`
    # that said Kafka was down ("TimeoutError: ").
    client = admin(bootstrap)
    found = client.list_consumer_groups(request_timeout=timeout).result(timeout)
    return sorted(g.group_id for g in found.valid)


def partition_offset(message: Message) -> tuple[int, int]:
    """(partition, offset) of a consumed record or a partition-EOF event, which always carry
    both (confluent_kafka types them Optional for other errors and for produced messages)."""
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None, message
    return partition, offset


@dataclass(frozen=True)
class StoredRecord:
    partition: int
    offset: int
    headers: dict[str, bytes]
    value: bytes | None = None
    key: bytes | None = None
    timestamp: float = 0.0  # unix seconds, the record's create time


def read_topic(
    bootstrap: str, topic: str, *, timeout: float = 120.0, contents: bool = False
) -> list[StoredRecord]:
    """Every committed record of ``topic`` up to its current end, as the lab's own bookkeeping
    reads it (read_committed: records of aborted transactions are not returned). Keys and
    values are kept only with ``contents`` (a run's topic is read whole after every run, for
    its headers)."""
    ends = end_offsets(bootstrap, topic)
    records: list[StoredRecord] = []
    if sum(ends.values()) == 0:
        return records
    settings = {
        **HARNESS_SETTINGS,
        "enable.partition.eof": True,
        # A partition's end shows as a fetch that returns nothing, which the broker holds for
        # fetch.wait.max.ms (500 ms by default); 10 ms makes reading a topic to every end many
        # times faster (docs/performance.md).
        "fetch.wait.max.ms": 10,
    }
    consumer = Consumer(consumer_config(bootstrap, "chaoslab-reader", **settings))
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    # A partition is read once the consumer reached its end; the end counts transaction
    # markers and aborted records, which it never returns, so records cannot be counted.
    at_end = {p for p, end in ends.items() if end == 0}

    def read_all() -> None:
        # Short polls, until every partition's end: a consume asking for more records than the
        # topic holds waits out its whole timeout, and a topic is read after every run (its
        # topic and each lane's dead-letter topic; docs/performance.md).
        while messages := consumer.consume(num_messages=5000, timeout=0.05):
            read(messages)
            if len(at_end) == len(ends):
                return
        raise NotReady(f"read {len(records)} records; at the end of {sorted(at_end)}")

    def read(messages: list[Message]) -> None:
        for m in messages:
            error = m.error()
            if error is None:
                # A consumed record's headers are (name, bytes) pairs; the client's type also
                # covers what a producer may send (a dict, str values).
                headers: dict[str, bytes] = dict(m.headers() or [])  # type: ignore[arg-type]
                stored = StoredRecord(*partition_offset(m), headers)
                if contents:
                    _, ms = m.timestamp()
                    stored = replace(stored, value=m.value(), key=m.key(), timestamp=ms / 1000)
                records.append(stored)
            elif error.code() == KafkaError._PARTITION_EOF:
                partition, offset = partition_offset(m)
                if offset >= ends[partition]:
                    at_end.add(partition)

    try:
        # A stall (offsets without a record) becomes an error at the deadline, not a hang.
        wait_for(read_all, what=f"every record of {topic}", timeout=timeout)
    finally:
        consumer.close()
    return records


def past_last_records(bootstrap: str, topic: str) -> dict[int, int]:
    """Past the last committed record of each partition of ``topic``: what a consumer commits
    once it has them all - not a partition's end, which counts the transaction markers of a
    transactional writer (an exactly-once source's, a transactional relay's)."""
    ends = dict.fromkeys(end_offsets(bootstrap, topic), 0)
    for record in read_topic(bootstrap, topic):
        ends[record.partition] = max(ends[record.partition], record.offset + 1)
    return ends
