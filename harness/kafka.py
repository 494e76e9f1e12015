"""Kafka client settings tuned for the lab, and topic administration.

librdkafka's defaults suit a data centre: a 45 s session timeout and backoffs of up to 10 s
mean a bounced broker or a killed consumer takes a minute to notice. The lab wants faults and
recoveries to play out in seconds, so every client the lab makes starts from these settings.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.environment.readiness import NotReady, wait_for

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
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "max.poll.interval.ms": 60_000,
        **overrides,
    }


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({**_COMMON, "bootstrap.servers": bootstrap})


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


def end_offsets(bootstrap: str, topic: str, *, timeout: float = 30.0) -> dict[int, int]:
    """The high watermark (the next offset to be written) of each partition of ``topic``.

    Read from Fetch responses, not ListOffsets: on Tansu's S3 engine ListOffsets(LATEST)
    answers with the newest stored batch's base offset + 1, not the end of the partition.
    """
    consumer = Consumer(
        consumer_config(bootstrap, "chaoslab-watermarks", **{"max.partition.fetch.bytes": 1024})
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        tps = [TopicPartition(topic, p, 0) for p in partitions]
        consumer.assign(tps)

        def every_partition_fetched() -> dict[int, int]:
            consumer.consume(num_messages=1, timeout=0.2)  # drives the fetcher
            highs = {tp.partition: consumer.get_watermark_offsets(tp, cached=True)[1] for tp in tps}
            if any(high is None or high < 0 for high in highs.values()):
                raise NotReady(f"no fetch response yet for some partitions of {topic}: {highs}")
            return highs

        return wait_for(every_partition_fetched, what=f"end offsets of {topic}", timeout=timeout)
    except KafkaException as exc:
        raise RuntimeError(f"cannot read the end offsets of {topic}: {exc}") from exc
    finally:
        consumer.close()
