"""A consumer group as an outsider sees it: its state, and the offsets it committed - what the
lab can know of a consumer it did not write (``harness.pipeline.observer``).

A group is watched through every broker fault with ListGroups (each broker asked alone,
``harness.kafka.cluster.group_states``) and OffsetFetch only: librdkafka can abort its process
when DescribeConsumerGroups is polled while a broker restarts (docs/environment.md). That is
asked (``formed``) only while a lane starts, before any fault of its run can act: a group
stable with fewer members than a black box's instances is still forming, and the next
instance's join rebalances it.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from harness.kafka.clients import HARNESS_SETTINGS, admin, consumer_config
from harness.kafka.cluster import group_states
from harness.kafka.wire import Malformed

# librdkafka's "no committed offset" (OFFSET_INVALID).
NO_OFFSET = -1001
UNLISTED = "unlisted"


# Kafka's names of a classic group's states, as the history has always written them (librdkafka's
# names, which the watch once read); a state of another protocol is "unknown", as it was there.
STATES = {
    "Stable": "stable",
    "PreparingRebalance": "preparing-rebalancing",
    "CompletingRebalance": "completing-rebalancing",
    "Empty": "empty",
    "Dead": "dead",
}


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
        self._offsets: Consumer | None = None
        self._admin: AdminClient | None = None  # for formed() alone

    def _consumer(self) -> Consumer:
        if self._offsets is None:
            # Never subscribes: a consumer of the group's id only reads its committed offsets.
            self._offsets = Consumer(
                consumer_config(self.bootstrap, self.group, **HARNESS_SETTINGS)
            )
        return self._offsets

    def view(self, timeout: float = 5.0) -> GroupView:
        """The group now; KafkaException (or TimeoutError, OSError) if the cluster cannot
        say."""
        try:
            return self._view(self._consumer(), timeout)
        except BaseException:
            self.close()
            raise

    def _view(self, offsets: Consumer, timeout: float) -> GroupView:
        meta = offsets.list_topics(self.topic, timeout=timeout)
        states: dict[str, str] = {}
        answered = 0
        for broker in meta.brokers.values():
            try:
                states.update(group_states(broker.host, broker.port, timeout=timeout))
                answered += 1
            except (OSError, Malformed):
                continue  # a broker down: its groups are unlisted until it is back
        if not answered:
            raise KafkaException(f"no broker of {self.bootstrap} answered ListGroups")
        state = STATES.get(states[self.group], "unknown") if self.group in states else UNLISTED
        partitions = [
            TopicPartition(self.topic, p) for p in sorted(meta.topics[self.topic].partitions)
        ]
        committed = {
            tp.partition: tp.offset
            for tp in offsets.committed(partitions, timeout=timeout)
            if tp.error is None and tp.offset != NO_OFFSET
        }
        return GroupView(state, committed)

    def formed(self, instances: int, timeout: float = 5.0) -> bool:
        """Whether the group is stable with at least ``instances`` members, as one answer of
        its coordinator says (DescribeConsumerGroups: not while a broker may restart, see
        above); KafkaException (or TimeoutError) if the cluster cannot say. The state and the
        members from one answer: a state read before another instance's join and a member
        count read after it once made a group in its rebalance look formed."""
        try:
            if self._admin is None:
                self._admin = admin(self.bootstrap)
            (described,) = self._admin.describe_consumer_groups(
                [self.group], request_timeout=timeout
            ).values()
            group = described.result(timeout)
            return group.state is ConsumerGroupState.STABLE and len(group.members) >= instances
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
        self._offsets = self._admin = None
