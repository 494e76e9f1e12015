"""The listener runtime: a confluent-kafka consumer in a group - poll a batch, hand it to the
variant, commit (synchronously, or asynchronously with ``pipeline.commit: async``) - the shape
of the seeds' listeners. One process per consumer.

    python -m harness.pipeline.listener.consumer CONFIG.json INDEX

librdkafka's group debug log (``debug=cgrp``) goes to the consumer's log: the coordinator
errors the brokers answer with (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS...) show only
there, as librdkafka retries most of them itself; ``harness.pipeline.kafka_log`` reads them
into the history after the run.
"""

from __future__ import annotations

import os
import sys

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from harness.history.events import EventKind
from harness.kafka.clients import CONSUMER_CLIENT, consumer_config, partition_offset
from harness.pipeline.batch import RawRecord
from harness.pipeline.crash import CrashPoint
from harness.pipeline.runtime import BatchHandler, RuntimeConfig, StopFlag


def run(config: RuntimeConfig, index: int) -> None:
    stop = StopFlag()
    handler = BatchHandler(config, source=f"listener-{index}")
    history = handler.history

    # Positions whose commit failed, by partition, with the batch they close. A live consumer
    # commits again with its next batch; when the topic has nothing more to give, it must
    # retry on its own or the group's lag never reaches zero.
    uncommitted: dict[int, tuple[int, int]] = {}

    def answered(offsets: list[TopicPartition], batch_id: int | None, error: str) -> None:
        """A commit's outcome, in the history and in ``uncommitted``."""
        if error:
            # The write is done; only the bookkeeping failed (seed 002). The records will
            # come again if the partition moves before a later commit succeeds.
            history.record(EventKind.COMMIT_FAILED, batch=batch_id, detail=error)
            uncommitted.update({tp.partition: (tp.offset, batch_id or 0) for tp in offsets})
            return
        for tp in offsets:
            uncommitted.pop(tp.partition, None)
        history.record(
            EventKind.COMMIT, batch=batch_id, offsets={tp.partition: tp.offset for tp in offsets}
        )

    def on_commit(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """An asynchronous commit's answer (``pipeline.commit: async``)."""
        failed = [tp for tp in partitions if tp.error is not None]
        error = err if err is not None else failed[0].error if failed else None
        answered(partitions, None, "" if error is None else str(error))

    settings: dict[str, object] = {
        "client.id": f"{CONSUMER_CLIENT}-listener-{index}",
        "debug": "cgrp",
        **config.kafka,
    }
    if config.commit == "async":
        settings["on_commit"] = on_commit
    consumer = Consumer(consumer_config(config.bootstrap, config.group, **settings))

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        uncommitted.clear()  # another member may have moved these partitions on since
        # A variant that keeps its positions in MongoDB (transactional) decides where to start,
        # and Kafka is told: a batch MongoDB committed before a crash was never acknowledged.
        positions = handler.variant.resume_positions(handler.db, config.group, config.topic)
        resumed = []
        for tp in partitions:
            if tp.partition in positions:
                tp.offset = positions[tp.partition]
                resumed.append(TopicPartition(tp.topic, tp.partition, tp.offset))
        c.assign(partitions)
        history.record(EventKind.ASSIGNED, offsets={tp.partition: tp.offset for tp in partitions})
        if resumed:
            commit(c, resumed, batch_id=None)

    def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
        uncommitted.clear()

    def commit(c: Consumer, offsets: list[TopicPartition], batch_id: int | None) -> None:
        if config.commit == "async":
            c.commit(offsets=offsets, asynchronous=True)  # on_commit records the answer
            return
        try:
            c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            answered(offsets, batch_id, str(exc))
        else:
            answered(offsets, batch_id, "")

    def retry_uncommitted(c: Consumer) -> None:
        offsets = [TopicPartition(config.topic, p, o) for p, (o, _) in uncommitted.items()]
        commit(c, offsets, max(b for _, b in uncommitted.values()))

    consumer.subscribe([config.topic], on_assign=on_assign, on_revoke=on_revoke)
    history.record(EventKind.RUNTIME_START, detail=f"pid {os.getpid()}")
    batch_id = 0
    try:
        while not stop:
            messages = consumer.consume(num_messages=config.batch_size, timeout=0.5)
            raw = []
            for m in messages:
                if m.error() is not None:
                    history.record(EventKind.POLL_ERROR, detail=str(m.error()))
                    continue
                raw.append(RawRecord(*partition_offset(m), m.value()))
            if not raw:
                if uncommitted:
                    retry_uncommitted(consumer)
                continue
            batch_id += 1
            batch = handler.handle(batch_id, raw)
            offsets = [
                TopicPartition(config.topic, p, last + 1) for p, last in batch.last_offsets.items()
            ]
            commit(consumer, offsets, batch_id)
            handler.reached(CrashPoint.AFTER_COMMIT)
    finally:
        consumer.close()
        history.record(EventKind.RUNTIME_EXIT, detail="stopped")


def main(argv: list[str]) -> None:
    config = RuntimeConfig.load(argv[0])
    config.use_import_path()
    run(config, int(argv[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
