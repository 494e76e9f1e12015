"""The local backend's Kafka: every acked message and every committed offset survives a clean
restart and a kill -9 of the broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness.environment import LocalEnvironment
from harness.kafka import consumer_config, create_topic, end_offsets, producer_config
from tests.support import server_handles, unique

MESSAGES = 10_000
PARTITIONS = 3


def produce_all(bootstrap: str, topic: str) -> dict[str, tuple[int, int]]:
    """Produce MESSAGES keyed messages; return value -> (partition, offset) as acknowledged."""
    acked: dict[str, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.value().decode()] = (msg.partition(), msg.offset())

    producer = Producer(producer_config(bootstrap))
    for i in range(MESSAGES):
        producer.produce(topic, key=f"k{i % 97}", value=f"m{i}", on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, f"{remaining} unacknowledged, errors: {errors[:3]}"
    return acked


def consume_in_group(bootstrap: str, topic: str, group: str) -> list[str]:
    """Consume until MESSAGES arrived, committing synchronously after every batch."""
    consumer = Consumer(consumer_config(bootstrap, group))
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + 90
    try:
        while len(seen) < MESSAGES and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=1000, timeout=1.0)
            for msg in batch:
                assert msg.error() is None, msg.error()
                seen.append(msg.value().decode())
            if batch:
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def read_back(bootstrap: str, topic: str) -> list[str]:
    """Every message of ``topic``, read from the beginning of each partition without a group."""
    consumer = Consumer(consumer_config(bootstrap, unique("reader")))
    ends = end_offsets(bootstrap, topic)
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    seen: list[str] = []
    deadline = time.monotonic() + 90
    try:
        while len(seen) < sum(ends.values()) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                assert msg.error() is None, msg.error()
                seen.append(msg.value().decode())
    finally:
        consumer.close()
    return seen


def committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    consumer = Consumer(consumer_config(bootstrap, group))
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}


@pytest.mark.servers
def test_messages_and_committed_offsets_survive_broker_restarts(lab_env: LocalEnvironment) -> None:
    bootstrap = lab_env.kafka_bootstrap
    topic, group = unique("orders"), unique("group")
    create_topic(bootstrap, topic, PARTITIONS)

    acked = produce_all(bootstrap, topic)
    assert len(acked) == MESSAGES
    assert {p for p, _ in acked.values()} == set(range(PARTITIONS))

    consumed = consume_in_group(bootstrap, topic, group)
    assert sorted(consumed) == sorted(acked), "the group did not see each message exactly once"
    ends = end_offsets(bootstrap, topic)
    assert sum(ends.values()) == MESSAGES
    assert committed(bootstrap, topic, group) == ends

    for hard in (False, True):
        before = server_handles(lab_env.directory)["kafka"]
        lab_env.restart_broker(hard=hard)
        after = server_handles(lab_env.directory)["kafka"]
        assert after != before and not before.alive(), "the broker was not actually restarted"

        how = "kill -9" if hard else "a clean restart"
        assert sorted(read_back(bootstrap, topic)) == sorted(acked), f"messages changed by {how}"
        assert end_offsets(bootstrap, topic) == ends, f"offsets moved after {how}"
        assert committed(bootstrap, topic, group) == ends, f"committed offsets lost by {how}"
