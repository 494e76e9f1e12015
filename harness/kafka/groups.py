"""A consumer group as an outsider sees it: its state, and the offsets it committed - what the
lab can know of a consumer it did not write (``harness.pipeline.observer``).

A group is watched through every broker fault with ListGroups and OffsetFetch only: librdkafka
can abort its process when DescribeConsumerGroups is polled while a broker restarts
(docs/environment.md). That is asked (``members``) only while a lane starts, before any fault
of its run can act: a group stable with fewer members than a black box's instances is still
forming, and the next instance's join rebalances it.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient

from harness.kafka.clients import HARNESS_SETTINGS, admin, consumer_config

# librdkafka's "no committed offset" (OFFSET_INVALID).
NO_OFFSET = -1001
UNLISTED = "unlisted"


def _name(state: ConsumerGroupState) -> str:
    return state.name.lower().replace("_", "-")


@dataclass(frozen=True)
class GroupView:
    # stable, preparing-rebalancing, completing-rebalancing, empty, dead, unknown - or unlisted:
    # no broker listed it (its coordinator is down or loading it, or it has no member yet)
    state: str
    committed: dict[int, int]  # partition -> next offset, for partitions with a commit

    @property
    def stable(self) -> bool:
        return self.state == "stable"


class GroupWatch:
    """Asks the cluster about one group and topic, again and again (close it when done).

    Its clients are made anew after a question they could not answer: clients kept across a
    broker's restart went on timing out after the cluster was whole again (a command
    consumer's commits were not seen for the rest of its run)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self._clients: tuple[AdminClient, Consumer] | None = None
        self._partitions: list[TopicPartition] = []

    def _connected(self) -> tuple[AdminClient, Consumer]:
        if self._clients is None:
            # Never subscribes: a consumer of the group's id only reads its committed offsets.
            offsets = Consumer(consumer_config(self.bootstrap, self.group, **HARNESS_SETTINGS))
            self._clients = (admin(self.bootstrap), offsets)
        return self._clients

    def view(self, timeout: float = 5.0) -> GroupView:
        """The group now; KafkaException (or TimeoutError) if the cluster cannot say."""
        try:
            return self._view(*self._connected(), timeout)
        except BaseException:
            self.close()
            raise

    def _view(self, admin_client: AdminClient, offsets: Consumer, timeout: float) -> GroupView:
        listed = admin_client.list_consumer_groups(request_timeout=timeout).result(timeout)
        states = {g.group_id: _name(g.state) for g in listed.valid}
        state = states.get(self.group, UNLISTED)
        if not self._partitions:
            meta = offsets.list_topics(self.topic, timeout=timeout).topics[self.topic]
            self._partitions = [TopicPartition(self.topic, p) for p in sorted(meta.partitions)]
        committed = {
            tp.partition: tp.offset
            for tp in offsets.committed(self._partitions, timeout=timeout)
            if tp.error is None and tp.offset != NO_OFFSET
        }
        return GroupView(state, committed)

    def members(self, timeout: float = 5.0) -> int:
        """How many members the group has now (DescribeConsumerGroups: not while a broker may
        restart, see above); KafkaException (or TimeoutError) if the cluster cannot say."""
        try:
            admin_client, _ = self._connected()
            (described,) = admin_client.describe_consumer_groups(
                [self.group], request_timeout=timeout
            ).values()
            return len(described.result(timeout).members)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._clients is not None:
            self._clients[1].close()
            self._clients = None
