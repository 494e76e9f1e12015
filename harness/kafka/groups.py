"""A consumer group as the cluster describes it to an outsider: its state, its members and what
each was given, and the offsets it committed - what the lab can know of a consumer it did not
write (``harness.pipeline.observer``)."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

# librdkafka's "no committed offset" (OFFSET_INVALID).
NO_OFFSET = -1001


@dataclass(frozen=True)
class Member:
    client_id: str
    partitions: tuple[int, ...]  # of the topic asked about


@dataclass(frozen=True)
class GroupView:
    state: str  # stable, preparing-rebalancing, completing-rebalancing, empty, dead, unknown
    members: tuple[Member, ...]
    committed: dict[int, int]  # partition -> next offset, for partitions with a commit

    @property
    def stable(self) -> bool:
        return self.state == "stable"

    def __str__(self) -> str:
        held = ", ".join(
            f"{m.client_id} {list(m.partitions)}" for m in sorted(self.members, key=str)
        )
        return f"{self.state}, {len(self.members)} member(s)" + (f": {held}" if held else "")


def _state(state: ConsumerGroupState) -> str:
    return state.name.lower().replace("_", "-")


def group_view(client: AdminClient, group: str, topic: str, *, timeout: float = 5.0) -> GroupView:
    """How ``group`` stands now, as far as ``topic`` goes; KafkaException if the cluster
    cannot say (a coordinator moving)."""
    described = client.describe_consumer_groups([group], request_timeout=timeout)[group]
    description = described.result(timeout)
    offsets = client.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout
    )[group].result(timeout)
    members = tuple(
        Member(
            m.client_id,
            tuple(
                sorted(
                    tp.partition
                    for tp in (m.assignment.topic_partitions if m.assignment else [])
                    if tp.topic == topic
                )
            ),
        )
        for m in description.members
    )
    committed = {
        tp.partition: tp.offset
        for tp in offsets.topic_partitions or []
        if tp.topic == topic and tp.error is None and tp.offset != NO_OFFSET
    }
    return GroupView(_state(description.state), members, dict(sorted(committed.items())))
