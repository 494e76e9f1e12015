"""Topic administration: a run's topics created (and known to every broker) and deleted."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.cimpl import (
    NewTopic,  # where it is defined: confluent_kafka.admin re-exports it implicitly
)

from harness.errors import LabError
from harness.kafka.clients import admin
from harness.kafka.cluster import topic_leaders
from harness.readiness import NotReady, wait_for


def create_topic(bootstrap: str, name: str, partitions: int, *, timeout: float = 30.0) -> None:
    """Create ``name`` and wait until every broker's metadata shows each partition with a
    leader. One broker's is not enough: a consumer group's leader that read the topic from a
    broker not yet told of it assigned no partitions, and librdkafka, whose subscription had
    already seen the topic, never rebalanced (its run's consumers committed nothing)."""
    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(name, num_partitions=partitions)])
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as exc:  # the cluster refused it: a run's error, not the lab's crash
        raise LabError(f"creating topic {name}: {exc.args[0]}") from exc

    def everywhere() -> None:
        brokers = client.list_topics(timeout=5).brokers.values()
        for broker in sorted(brokers, key=lambda b: b.id):
            try:
                # confluent_kafka types BrokerMetadata's host as None (see cluster_view).
                leaders = topic_leaders(broker.host, broker.port, name)  # type: ignore[arg-type]
            except OSError as exc:
                raise NotReady(f"broker {broker.id}: {exc}") from exc
            if len(leaders) != partitions or any(leader < 0 for leader in leaders.values()):
                raise NotReady(f"broker {broker.id} knows {name} as {leaders}")

    wait_for(everywhere, what=f"topic {name} on every broker", timeout=timeout)


def delete_topics(bootstrap: str, names: list[str], *, timeout: float = 30.0) -> None:
    """Delete ``names`` and wait until the cluster has."""
    client = admin(bootstrap)
    for future in client.delete_topics(names, operation_timeout=timeout).values():
        future.result(timeout=timeout)
