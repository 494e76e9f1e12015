"""The relay process: one outbox relay variant reading the business collection's change stream
and publishing each change's outbox entries to Kafka. One process per relay lane, started (and
restarted after a crash) by the runtime supervisor, like a listener.

    python -m harness.outbox.relay CONFIG.json 0

The configuration is a ``RuntimeConfig``: ``database`` is the application's database (the
change stream's and the MongoDB token's), ``topic`` the prefix of the lane's target topics
(``<topic>.<targetTopic>``), ``group`` the lane's name (its token's id, its transactional.id),
``variant`` the relay.

History: BATCH when a change event is read (count: the messages the relay made of it; detail:
the operation and its outbox fields), WRITTEN when they are published (and acknowledged, unless
a transaction holds them: its commit waits for that), COMMIT when the token is saved (after
each change; for a token in Kafka, with the transaction of the changes before it) - with
offsets {0: 1} at the application's end marker, HISTORY_LOST when
the stream cannot be resumed (the relay then starts again from the present; the gap is
counted).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from pymongo import MongoClient
from pymongo.change_stream import CollectionChangeStream
from pymongo.collection import Collection
from pymongo.errors import OperationFailure

from harness.history.events import EventKind, HistoryWriter
from harness.kafka.clients import producer_config, read_topic
from harness.outbox.relays import Message as OutboxMessage
from harness.outbox.relays import Relay, TokenStore, make_relay, outbox_fields
from harness.outbox.writer import END_ID, SOURCE
from harness.pipeline.crash import Crasher, CrashPoint
from harness.pipeline.runtime import CONSUMER_APP, RuntimeConfig, StopFlag

TOKENS = "relay_tokens"  # the MongoDB token store's collection, in the source database
HISTORY_LOST = 286  # ChangeStreamHistoryLost
TRANSACTION_CHANGES = 100  # at most, in one transaction of a relay keeping its token in Kafka
RELAY_CLIENT = "chaoslab-relay"
# What a relay's commit of the application's end marker records: the wait loop of the sink runs
# (harness.run.loop) reads it as position 1 of a one-partition stream, i.e. "everything relayed".
RELAYED = {0: 1}


def target(config: RuntimeConfig, topic: str) -> str:
    """The run's Kafka topic for an entry's targetTopic."""
    return f"{config.topic}.{topic}"


def token_topic(config: RuntimeConfig) -> str:
    return f"{config.group}.token"


class Tokens:
    """Loads and saves the lane's resume token where its relay keeps it."""

    def __init__(self, config: RuntimeConfig, relay: Relay, source: Collection[Any]) -> None:
        self.config = config
        self.kafka = relay.tokens == TokenStore.KAFKA
        self.mongo = source.database[TOKENS]

    def load(self) -> Mapping[str, Any] | None:
        if self.kafka:
            # The last committed token record: a killed relay's open transaction is aborted
            # when the next one starts (same transactional.id), and read_committed skips it.
            records = read_topic(self.config.bootstrap, token_topic(self.config), contents=True)
            last = max(records, key=lambda r: r.offset, default=None)
            return None if last is None or last.value is None else json.loads(last.value)
        found = self.mongo.find_one({"_id": self.config.group})
        return None if found is None else found["token"]

    def save_in_mongo(self, token: Mapping[str, Any]) -> None:
        self.mongo.replace_one({"_id": self.config.group}, {"token": dict(token)}, upsert=True)


def publish(
    producer: Producer,
    relay: Relay,
    config: RuntimeConfig,
    messages: list[OutboxMessage],
    *,
    flush: bool = True,
) -> None:
    """Produce a change's messages and wait for every acknowledgement (``flush``; in a
    transaction, its commit waits for them and fails if one failed)."""
    errors: list[str] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(str(err))

    for m in messages:
        producer.produce(
            target(config, m.topic),
            key=m.key,
            value=m.value,
            headers=dict(relay.headers(m)),
            on_delivery=delivered,
        )
    if not flush:
        return
    unsent = producer.flush(120)
    if unsent or errors:
        raise RuntimeError(f"{unsent} messages not acknowledged: {errors[:3]}")


def is_end(change: Mapping[str, Any]) -> bool:
    """The application's end marker (the lab's wait loop waits for its commit)."""
    return bool((change.get("documentKey") or {}).get("_id") == END_ID)


def commit(
    producer: Producer,
    tokens: Tokens,
    history: HistoryWriter,
    batch: list[Mapping[str, Any]],
    changes: int,
) -> None:
    """Save the token of the last change of ``batch`` (committing the open transaction, for a
    token kept in Kafka), and empty ``batch``. The application's end marker relayed: the lab's
    wait loop reads this COMMIT as "position 1 of the one-partition 'stream'"
    (``OutboxSource.end_offsets``)."""
    if not batch:
        return
    save(producer, tokens, batch[-1]["_id"], in_transaction=tokens.kafka)
    # The end marker is always a batch's last change: its transaction is committed at once.
    history.record(EventKind.COMMIT, batch=changes, offsets=RELAYED if is_end(batch[-1]) else {})
    batch.clear()


def save(
    producer: Producer,
    tokens: Tokens,
    token: Mapping[str, Any] | None,
    *,
    in_transaction: bool = False,
) -> None:
    """Save the resume token: in MongoDB, or as the token topic's record committed with the
    change's messages (``in_transaction``: the change's transaction is open)."""
    if token is None:
        raise RuntimeError("the change stream gave no resume token")
    if not tokens.kafka:
        tokens.save_in_mongo(token)
        return
    if not in_transaction:
        producer.begin_transaction()
    producer.produce(token_topic(tokens.config), value=json.dumps(token).encode())
    producer.commit_transaction()


@dataclass(frozen=True)
class Lost:
    """A resume point the oplog no longer holds: the token, and MongoDB's answer."""

    token: Mapping[str, Any] | None
    error: OperationFailure


def open_stream(
    source: Collection[Any], token: Mapping[str, Any] | None
) -> CollectionChangeStream[Any] | Lost:
    """The change stream from ``token`` (from now if None), or why it cannot be resumed."""
    try:
        return source.watch(resume_after=token, max_await_time_ms=250)
    except OperationFailure as exc:
        if exc.code != HISTORY_LOST:
            raise
        return Lost(token, exc)


def from_now(
    source: Collection[Any], producer: Producer, tokens: Tokens, history: HistoryWriter, lost: Lost
) -> CollectionChangeStream[Any]:
    """After a lost resume point: a stream from the present, then HISTORY_LOST in the history
    (so that every change acknowledged before that event and not relayed is the gap's, and
    everything after it is read), its position saved at once. The changes between the lost
    point and now are gone from the stream: the lab counts them, lost at publish. If the
    application's end marker is already written, it lies behind with them: the relay has nothing
    more to relay of the run, and says so (the lab's wait loop reads that COMMIT)."""
    stream = source.watch(max_await_time_ms=250)
    details = lost.error.details or {}
    history.record(
        EventKind.HISTORY_LOST,
        detail=f"resume token {lost.token}: {details.get('codeName', lost.error)}",
    )
    save(producer, tokens, stream.resume_token)
    if source.find_one({"_id": END_ID}, {"_id": 1}) is not None:
        history.record(EventKind.COMMIT, offsets=RELAYED, detail="the end marker is behind")
    return stream


def run(config: RuntimeConfig) -> None:
    stop = StopFlag()
    relay = make_relay(config.variant, config.variant_options)
    history = HistoryWriter(config.history_dir, "relay-0", relay.label)
    crasher = Crasher(list(config.crash_plans), Path(config.run_dir) / "crashes", history)
    client: MongoClient[dict[str, Any]] = MongoClient(
        config.mongo_uri, heartbeatFrequencyMS=500, appname=CONSUMER_APP
    )
    source = client[config.database][SOURCE]
    tokens = Tokens(config, relay, source)
    settings: dict[str, Any] = {"client.id": RELAY_CLIENT, **relay.producer_settings()}
    if tokens.kafka:
        settings |= {
            "transactional.id": f"chaoslab-{config.group}",
            "transaction.timeout.ms": 120_000,
        }
    producer = Producer(producer_config(config.bootstrap, **settings))
    if tokens.kafka:
        producer.init_transactions()  # fences a killed predecessor, aborting its transaction
    token = tokens.load()
    changes = 0
    opened = open_stream(source, token)
    if isinstance(opened, Lost):
        stream = from_now(source, producer, tokens, history, opened)
    else:
        stream = opened
        if token is None:
            # The stream's position before any change is saved at once: a relay killed before
            # its first change resumes from here, not from whatever is "now" when it restarts.
            save(producer, tokens, stream.resume_token)
    try:
        # Only now: the lab starts the application once every relay listens.
        history.record(
            EventKind.RUNTIME_START,
            detail=f"pid {os.getpid()}, {'resumed' if token else 'a new'} change stream",
        )
        # A relay that keeps its token in Kafka publishes in transactions: each holds the
        # changes the stream has ready (up to TRANSACTION_CHANGES) and the last one's token, as
        # Kafka Connect's exactly-once sources commit a poll's records with its offsets. One
        # transaction per change (begin, produce, commit) was too slow under load: the relay
        # was the outbox scenarios' longest lane by far (docs/performance.md).
        batch: list[Mapping[str, Any]] = []  # the changes published in the open transaction
        while not stop:
            try:
                change = stream.try_next()
            except OperationFailure as exc:
                # A live stream's position pruned from the oplog (it fell behind, or its
                # resume after a lost connection came too late): as at the start.
                if exc.code != HISTORY_LOST:
                    raise
                commit(producer, tokens, history, batch, changes)
                stream.close()
                stream = from_now(source, producer, tokens, history, Lost(stream.resume_token, exc))
                continue
            if change is None:
                commit(producer, tokens, history, batch, changes)
                continue
            changes += 1
            messages = relay.messages(change)
            history.record(
                EventKind.BATCH,
                batch=changes,
                count=len(messages),
                detail=f"{change['operationType']} {' '.join(outbox_fields(change)) or '-'}",
            )
            if tokens.kafka and not batch:
                producer.begin_transaction()
            publish(producer, relay, config, messages, flush=not tokens.kafka)
            history.record(EventKind.WRITTEN, batch=changes, count=len(messages))
            crasher.reached(CrashPoint.AFTER_PUBLISH_BEFORE_TOKEN, changes)
            batch.append(change)
            if not tokens.kafka or len(batch) >= TRANSACTION_CHANGES or is_end(change):
                commit(producer, tokens, history, batch, changes)
        commit(producer, tokens, history, batch, changes)  # asked to stop: what is open
    finally:
        stream.close()
        client.close()
    history.record(EventKind.RUNTIME_EXIT, detail="stopped")


def main(argv: list[str]) -> None:
    config = RuntimeConfig.load(argv[0])
    config.use_import_path()
    run(config)


if __name__ == "__main__":
    main(sys.argv[1:])
