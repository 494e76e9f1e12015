"""Debezium's PostgreSQL connector as a run's source: the connector config the lab puts on the
run's Connect cluster.

A deployment's Debezium config pastes in unchanged apart from where it reads and writes: the
database, the slot and publication (one of each per run, so runs sharing an environment never
read each other's changes, and dropped at the run's end), the topic prefix and the tables are
the lab's. The rest is the deployment's, else the lab's defaults below: pgoutput (PostgreSQL's
own decoder, nothing to install), heartbeats on (a quiet table's slot would otherwise hold WAL
back: Debezium's docs), JSON with schemas (seed 000's ``payload.source.txId``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from harness.errors import BadInput

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
SCHEMA = "public"
# What a deployment's config may not set: the lab's own (``Where``).
LABS_KEYS = (
    "connector.class",
    "database.hostname",
    "database.port",
    "database.user",
    "database.password",
    "database.dbname",
    "slot.name",
    "publication.name",
    "topic.prefix",
    "table.include.list",
    "topic.creation.default.partitions",
    "topic.creation.default.replication.factor",
)
HEARTBEAT_PREFIX = "__debezium-heartbeat"  # Debezium's default topic.heartbeat.prefix
DEFAULTS: Mapping[str, str] = {
    "plugin.name": "pgoutput",
    "tasks.max": "1",
    "snapshot.mode": "initial",
    "heartbeat.interval.ms": "1000",
    # The publication holds the run's tables alone (not FOR ALL TABLES: other runs' tables).
    "publication.autocreate.mode": "filtered",
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "true",
}


@dataclass(frozen=True)
class Where:
    """Where a run's Debezium reads and writes: its database, slot, publication and topics."""

    postgres_uri: str  # postgresql://USER[:PASSWORD]@HOST:PORT/DBNAME
    slot: str  # the replication slot, one per run
    topic_prefix: str  # the change topics are PREFIX.SCHEMA.TABLE
    tables: tuple[str, ...]  # in SCHEMA
    partitions: int = 3  # of each change topic, which Connect creates (the run's workload's)

    def topic(self, table: str) -> str:
        return f"{self.topic_prefix}.{SCHEMA}.{table}"

    @property
    def publication(self) -> str:
        return self.slot  # one each per run, under one name

    def settings(self) -> dict[str, str]:
        address = urlsplit(self.postgres_uri)
        if address.scheme not in ("postgresql", "postgres") or not address.hostname:
            raise BadInput(f"not a PostgreSQL URI: {self.postgres_uri!r}")
        return {
            "connector.class": CONNECTOR_CLASS,
            "database.hostname": address.hostname,
            "database.port": str(address.port or 5432),
            "database.user": address.username or "postgres",
            "database.password": address.password or "",
            "database.dbname": address.path.lstrip("/") or "postgres",
            "slot.name": self.slot,
            "publication.name": self.publication,
            "topic.prefix": self.topic_prefix,
            "table.include.list": ",".join(f"{SCHEMA}.{t}" for t in self.tables),
            "topic.creation.default.partitions": str(self.partitions),
            # The brokers' default.replication.factor (3) and min.insync.replicas (2).
            "topic.creation.default.replication.factor": "-1",
        }


@dataclass(frozen=True)
class DebeziumSource:
    """A scenario's Debezium source: a deployment's own settings (Debezium's names) over the
    lab's defaults."""

    options: Mapping[str, str] = field(default_factory=dict)

    def problems(self) -> list[tuple[str, str]]:
        """What a deployment's settings may not say, each as (key, why)."""
        return [
            (key, f"where the source reads and writes is the lab's (it sets {key} per run)")
            for key in self.options
            if key in LABS_KEYS
        ]

    @staticmethod
    def heartbeat_topic(config: Mapping[str, str]) -> str:
        """Where the connector with ``config`` writes its heartbeats (Debezium's name)."""
        prefix = config.get("topic.heartbeat.prefix", HEARTBEAT_PREFIX)
        return f"{prefix}.{config['topic.prefix']}"

    def config(self, where: Where) -> dict[str, str]:
        """The connector's config on the run's cluster."""
        if found := self.problems():
            raise BadInput("the Debezium source: " + "; ".join(f"{k}: {why}" for k, why in found))
        return {**DEFAULTS, **{k: str(v) for k, v in self.options.items()}, **where.settings()}
