"""The orders team's own sink connector, as teams wrap MongoDB's: its source, built with javac
into a plugin folder of Connect's layout, and a scenario that runs it (shared by the plugin test
and the containers backend's test)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from harness.environment import jars

SINK = "com.example.orders.OrdersSink"
SOURCE = """package com.example.orders;

/** The orders team's sink: MongoDB's, with a version of its own. */
public class OrdersSink extends com.mongodb.kafka.connect.MongoSinkConnector {
    @Override
    public String version() {
        return "1.0-orders";
    }
}
"""


def build_plugin(folder: Path) -> Path:
    """``folder/plugins/orders-sink/``: the team's jar and MongoDB's connector it extends
    (one plugin: Connect loads each plugin folder in a class loader of its own)."""
    sources, classes = folder / "src", folder / "classes"
    (sources / "com/example/orders").mkdir(parents=True)
    (sources / "com/example/orders/OrdersSink.java").write_text(SOURCE)
    mongo = next(j for j in jars.mongo_kafka().jars() if j.name.startswith("mongo-kafka-connect"))
    against = f"{jars.connect().classpath()}:{mongo}"
    javac, jar = shutil.which("javac"), shutil.which("jar")
    assert javac and jar, "the suite's set-up installs a JDK"
    subprocess.run([javac, "--release", "17", "-nowarn", "-cp", against, "-d", str(classes),
                    str(sources / "com/example/orders/OrdersSink.java")], check=True)  # fmt: skip
    plugin = folder / "plugins" / "orders-sink"
    plugin.mkdir(parents=True)
    subprocess.run(
        [jar, "cf", str(plugin / "orders-sink.jar"), "-C", str(classes), "."], check=True
    )
    shutil.copy(mongo, plugin)
    return plugin.parent


def orders_scenario() -> dict[str, Any]:
    """A scenario of the team's sink, keyed by the event id (its plugin folder not named yet)."""
    return {
        "name": "orders-sink",
        "description": "the orders team's own sink connector; what to see: it runs",
        "workload": {"events": 300, "keys": 50, "partitions": 3, "rate": 150},
        "variants": [{"name": "connect", "label": "orders",
                      "config": {"connector.class": SINK, "tasks.max": 3,
                                 "document.id.strategy": "com.mongodb.kafka.connect.sink."
                                 "processor.id.strategy.PartialValueStrategy",
                                 "document.id.strategy.partial.value.projection.list": "event_id",
                                 "document.id.strategy.partial.value.projection.type": "allowlist",
                                 "writemodel.strategy": "com.mongodb.kafka.connect.sink."
                                 "writemodel.strategy.ReplaceOneBusinessKeyStrategy"},
                      "promised": "exactly-once"}],
        "expect": {"*": {"duplicates": 0, "lost": 0}},
    }  # fmt: skip
