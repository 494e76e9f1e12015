"""A consumer of the lab's workload in plain Python - confluent-kafka and pymongo, nothing of
the lab's: what a team's own service looks like to `chaoslab`, which runs it as a command
consumer (README, "Your own consumer").

    python listener.py insert    # mints its own _id: a redelivered record is stored again
    python listener.py upsert    # _id = the producer's event_id: a redelivery overwrites it

Any further KEY=VALUE arguments are librdkafka consumer settings (session.timeout.ms=6000).
"""

import json
import os
import signal
import sys

from confluent_kafka import Consumer, KafkaException, Producer
from pymongo import MongoClient, ReplaceOne

env = os.environ
mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode not in ("insert", "upsert") or any("=" not in a for a in sys.argv[2:]):
    sys.exit("usage: listener.py insert|upsert [KEY=VALUE ...]")

consumer = Consumer(
    {
        "bootstrap.servers": env["CHAOSLAB_KAFKA_BOOTSTRAP"],
        "group.id": env["CHAOSLAB_GROUP_ID"],
        "client.id": env["CHAOSLAB_CLIENT_ID"],
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **dict(a.split("=", 1) for a in sys.argv[2:]),
    }
)
dead_letters = Producer({"bootstrap.servers": env["CHAOSLAB_KAFKA_BOOTSTRAP"]})
landed = MongoClient(env["CHAOSLAB_MONGO_URI"])[env["CHAOSLAB_DATABASE"]]["landed"]
stopping = False
signal.signal(signal.SIGTERM, lambda *_: globals().update(stopping=True))

consumer.subscribe([env["CHAOSLAB_TOPIC"]])
while not stopping:
    records = [m for m in consumer.consume(num_messages=200, timeout=0.5) if not m.error()]
    docs = []
    for m in records:
        try:
            event = json.loads(m.value())
            docs.append({"event_id": event["event_id"], "order_id": event["order_id"],
                         "version": event["version"], "op": event["payload"]["op"]})  # fmt: skip
        except (ValueError, KeyError, TypeError):  # poison: to the dead-letter topic
            origin = {"origin-partition": str(m.partition()), "origin-offset": str(m.offset())}
            dead_letters.produce(env["CHAOSLAB_DLQ_TOPIC"], m.value(), headers=origin)
    dead_letters.flush()
    if mode == "insert" and docs:
        landed.insert_many(docs)
    elif docs:
        landed.bulk_write([ReplaceOne({"_id": d["event_id"]}, d, upsert=True) for d in docs])
    if records:
        try:
            consumer.commit(asynchronous=False)  # after the write: at-least-once
        except KafkaException as exc:
            print(f"ERROR commit failed: {exc}", file=sys.stderr, flush=True)
consumer.close()
