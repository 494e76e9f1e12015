"""Kafka client settings tuned for the lab, and topic administration.

librdkafka's defaults suit a data centre: a 45 s session timeout and backoffs of up to 10 s
mean a bounced broker or a killed consumer takes a minute to notice. The lab wants faults and
recoveries to play out in seconds, so every client the lab makes starts from these settings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.environment.readiness import DeadlineExceeded, NotReady, wait_for

# Every client names its role in client.id: the environment's Kafka-aware fault proxy tells the
# producer link from the consumer link by it (they share the broker's one advertised address).
PRODUCER_CLIENT = "chaoslab-producer"
CONSUMER_CLIENT = "chaoslab-consumer"
HARNESS_CLIENT = "chaoslab-harness"  # the lab's own bookkeeping: never a fault target

_COMMON: dict[str, Any] = {
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "socket.connection.setup.timeout.ms": 5000,
    "topic.metadata.refresh.interval.ms": 5000,
}


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    return {
        **_COMMON,
        "bootstrap.servers": bootstrap,
        "client.id": PRODUCER_CLIENT,
        "acks": "all",
        "enable.idempotence": True,
        # Tansu stores each produce request as one S3 object and lists a partition's objects on
        # every fetch below its end: fewer, larger batches make a backlog drain ~6x faster.
        "linger.ms": 100,
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
    return AdminClient({**_COMMON, "bootstrap.servers": bootstrap, "client.id": HARNESS_CLIENT})


def create_topic(bootstrap: str, name: str, partitions: int, *, timeout: float = 30.0) -> None:
    """Create ``name`` and wait until its metadata shows every partition with a leader."""
    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(name, num_partitions=partitions)])
    futures[name].result(timeout=timeout)

    def has_leaders() -> None:
        topic = client.list_topics(name, timeout=5).topics.get(name)
        if topic is None or topic.error is not None or len(topic.partitions) != partitions:
            raise NotReady(f"topic {name} metadata: {topic.error if topic else 'missing'}")
        if any(p.leader < 0 for p in topic.partitions.values()):
            raise NotReady(f"topic {name} has partitions without a leader")

    wait_for(has_leaders, what=f"topic {name}", timeout=timeout)


def delete_topics(bootstrap: str, names: list[str], *, timeout: float = 30.0) -> None:
    """Delete ``names`` (Tansu's S3 engine deletes their stored batches and committed offsets)."""
    client = admin(bootstrap)
    for future in client.delete_topics(names, operation_timeout=timeout).values():
        future.result(timeout=timeout)


# Tansu answers a Fetch at or past a partition's end without reading its stored batches.
_PAST_ANY_END = 1 << 62
_FETCH_WAIT_MS = 5


class HighWatermarks:
    """Reads the high watermark (the next offset to be written) of each partition of a topic.

    Read from Fetch responses, not ListOffsets: on Tansu's S3 engine ListOffsets(LATEST)
    answers with the newest stored batch's base offset + 1, not the end of the partition.

    One consumer serves every ``read()`` (making one and connecting costs ~100 ms); its
    partitions are paused between reads, so an idle reader does not poll the broker. librdkafka
    caches the watermark of the last Fetch response, which may predate records produced since:
    a read takes a partition's watermark only once a Fetch sent after the read began has
    answered (see ``_Round``).
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        group: str = "chaoslab-watermarks",
        client_id: str = HARNESS_CLIENT,
    ) -> None:
        self.topic = topic
        settings = {
            "enable.partition.eof": True,
            # Should a Fetch return records, a few are enough. Tansu ignores the per-partition
            # limit; the request-wide one must not be below message.max.bytes.
            "fetch.max.bytes": 1024,
            "message.max.bytes": 1000,
            "max.partition.fetch.bytes": 1024,
            # Tansu holds a Fetch at the end of a partition this long: keep reads short.
            "fetch.wait.max.ms": _FETCH_WAIT_MS,
            "isolation.level": "read_uncommitted",
            "enable.auto.offset.store": False,
        }
        self._consumer = Consumer(
            consumer_config(bootstrap, group, **{"client.id": client_id, **settings})
        )
        self._assigned: set[int] = set()
        self._last: dict[int, int] = {}

    def read(self, timeout: float = 30.0) -> dict[int, int]:
        """The current high watermark of every partition, by partition number."""
        try:
            highs = self._start_round().finish(time.monotonic() + timeout, timeout)
        except KafkaException as exc:
            raise RuntimeError(f"cannot read the end offsets of {self.topic}: {exc}") from exc
        self._last.update(highs)
        return highs

    @property
    def last(self) -> dict[int, int]:
        """What the last ``read()`` found."""
        return dict(self._last)

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> HighWatermarks:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start_round(self) -> _Round:
        round_ = _Round(self._consumer, self.topic)
        for partition in sorted(self._assigned):
            round_.probe(partition)
        new = [p for p in self._partitions() if p not in self._assigned]
        if new:
            self._consumer.incremental_assign(
                [TopicPartition(self.topic, p, _PAST_ANY_END) for p in new]
            )
            self._assigned.update(new)
            round_.add_new(new)
        return round_

    def _partitions(self) -> list[int]:
        """The topic's partitions; none if it does not exist."""
        metadata = self._consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        if metadata.error is None:
            return sorted(metadata.partitions)
        if metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return []
        raise KafkaException(metadata.error)


class _Round:
    """One ``HighWatermarks.read()``: for each partition, a watermark proven current.

    A partition is *probed*: sought past its end, where Tansu answers each Fetch within the
    Fetch's max wait, with the watermark. (Below the watermark a Fetch makes Tansu list every
    stored batch of the partition in S3, ~100 ms and growing with the bucket.) A probe's answer
    brings no event, and the first answer after the round began may be to an older Fetch, so
    the partition's watermark counts as current when

    * it has changed twice during the round: librdkafka has at most one Fetch in flight per
      broker, so only the first answer after the round began can be to a Fetch sent before;
    * it has any value, for a partition assigned in this round (it was never fetched before);
    * an end-of-partition (or record) event comes after a *confirming* seek to the watermark:
      librdkafka drops what Fetches sent before a seek return, so the event answers a later
      Fetch. A partition is confirmed once its watermark has been still for ``STILL_S``
      (should records arrive just then, the confirming Fetch finds them and Tansu lists the
      stored batches: the longer the wait, the rarer that is); if the watermark moves
      meanwhile, it is probed again.

    (On a real Kafka broker a probe is out of range and the consumer falls back to the earliest
    offset; rounds should then end by confirmation. Untested: no Kafka broker runs here.)
    """

    STILL_S = 8 * _FETCH_WAIT_MS / 1000

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self.consumer, self.topic = consumer, topic
        self.waiting: set[int] = set()
        self.new: set[int] = set()
        self.confirming: set[int] = set()
        self.seen: dict[int, int] = {}
        self.changes: dict[int, int] = {}
        self.still_since: dict[int, float] = {}

    def probe(self, partition: int) -> None:
        self.consumer.resume([TopicPartition(self.topic, partition)])
        self._seek(partition, _PAST_ANY_END)
        self._watch(partition)

    def add_new(self, partitions: list[int]) -> None:
        """Partitions just assigned, past their end."""
        for partition in partitions:
            self._watch(partition)
        self.new.update(partitions)

    def finish(self, deadline: float, timeout: float) -> dict[int, int]:
        partitions = sorted(self.waiting)
        last_error: KafkaError | None = None
        while self.waiting:
            if time.monotonic() > deadline:
                what = f"end offsets of {self.topic} (partitions {sorted(self.waiting)})"
                cause = KafkaException(last_error) if last_error is not None else None
                raise DeadlineExceeded(what, timeout, cause)
            msg = self.consumer.poll(0.005)
            error = msg.error() if msg is not None else None
            if msg is not None and (error is None or error.code() == KafkaError._PARTITION_EOF):
                if msg.partition() in self.confirming:
                    self._done(msg.partition())
            elif error is not None:  # e.g. the broker is down: librdkafka reconnects by itself
                last_error = error
            for partition in sorted(self.waiting):
                self._check(partition)
        return {p: self._cached(p) for p in partitions}

    def _watch(self, partition: int) -> None:
        self.waiting.add(partition)
        self.seen[partition] = self._cached(partition)
        self.changes[partition] = 0
        self.still_since[partition] = time.monotonic()

    def _check(self, partition: int) -> None:
        high, now = self._cached(partition), time.monotonic()
        if high > self.seen[partition]:
            self.seen[partition], self.still_since[partition] = high, now
            self.changes[partition] += 1
            if partition in self.new or self.changes[partition] >= 2:
                self._done(partition)
            elif partition in self.confirming:
                self.confirming.discard(partition)
                self._seek(partition, _PAST_ANY_END)
        elif (
            high >= 0
            and partition not in self.confirming
            and now - self.still_since[partition] > self.STILL_S
        ):
            self.confirming.add(partition)
            self._seek(partition, high)

    def _seek(self, partition: int, offset: int) -> None:
        self.consumer.seek(TopicPartition(self.topic, partition, offset))

    def _done(self, partition: int) -> None:
        self.waiting.discard(partition)
        self.consumer.pause([TopicPartition(self.topic, partition)])

    def _cached(self, partition: int) -> int:
        tp = TopicPartition(self.topic, partition)
        high = self.consumer.get_watermark_offsets(tp, cached=True)[1]
        return high if high is not None and high >= 0 else -1


def end_offsets(bootstrap: str, topic: str, *, timeout: float = 30.0) -> dict[int, int]:
    """The high watermark (the next offset to be written) of each partition of ``topic``.

    Read from Fetch responses, not ListOffsets (see ``HighWatermarks``).
    """
    with HighWatermarks(bootstrap, topic) as watermarks:
        return watermarks.read(timeout)


@dataclass(frozen=True)
class StoredRecord:
    partition: int
    offset: int
    headers: dict[str, bytes]


def read_topic(bootstrap: str, topic: str, *, timeout: float = 120.0) -> list[StoredRecord]:
    """Every record of ``topic`` up to its current end, as the lab's own bookkeeping reads it."""
    ends = end_offsets(bootstrap, topic)
    total = sum(ends.values())
    records: list[StoredRecord] = []
    if total == 0:
        return records
    consumer = Consumer(
        consumer_config(bootstrap, "chaoslab-reader", **{"client.id": HARNESS_CLIENT})
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])

    def read_all() -> None:
        for m in consumer.consume(num_messages=5000, timeout=0.5):
            if m.error() is None:
                records.append(StoredRecord(m.partition(), m.offset(), dict(m.headers() or [])))
        if len(records) < total:
            raise NotReady(f"read {len(records)} of {total} records")

    try:
        # A stall (offsets without a record) becomes an error at the deadline, not a hang.
        wait_for(read_all, what=f"every record of {topic}", timeout=timeout)
    finally:
        consumer.close()
    return records
