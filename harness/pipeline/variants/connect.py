"""Kafka Connect with a sink connector as the variant: the pipeline most teams deploy, a
connector configuration as a deployment has it (what ``GET /connectors/NAME/config`` returns
pastes in), run on the run's Connect cluster (``harness.pipeline.connect.settings``).

    variants:
      - connect-default                              # MongoDB's sink connector, its defaults
      - connect-idempotent                           # keyed by the producer's event id
      - {name: connect, label: ours, config: {connector.class: ..., ...}, promised: at-least-once}

The lab fills in where the connector reads and writes - ``topics`` (the run's), ``connection.uri``
(through the fault proxy; the client settings a pasted one carries are kept), ``database`` (the
lane's own), the consumer's group (the lane's, which
the lab watches) and ``client.id`` (so the fault proxy's link and commit faults reach it) - and
``collection`` (``events``) unless the config names one; a dead-letter topic, if the config
names one, is the lane's (with Connect's context headers on, which say where each record came
from); everything else is passed as it is. The checker reads the collection a document per
record stored, named by the record's event id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

from harness.checker.promise import AT_LEAST_ONCE, EXACTLY_ONCE, PROMISES, Promise
from harness.kafka.clients import CONSUMER_CLIENT
from harness.pipeline.batch import Batch, dead_letter_topic
from harness.pipeline.connect.settings import SINK_CONNECTOR, ConnectSettings
from harness.pipeline.connect.watch import ConnectorWatch
from harness.pipeline.mongo_options import URI_OPTIONS, uri_with
from harness.pipeline.runtimes import CONNECT, Runtime
from harness.pipeline.variants.base import (
    Job,
    Key,
    Landing,
    Place,
    Variant,
    WriteContext,
    keyed_promise,
    option_text,
)

# Set by the lab for every lane (a pasted config's own are replaced): where it reads and writes.
LAB_SET = (
    "name",
    "topics",
    "topics.regex",
    "connection.uri",
    "database",
    "consumer.override.group.id",
    "consumer.override.client.id",
)
GROUP_ID, CLIENT_ID = LAB_SET[-2:]
DLQ = "errors.deadletterqueue.topic.name"
DLQ_HEADERS = "errors.deadletterqueue.context.headers.enable"
COLLECTION = "collection"
_ID_STRATEGY = "com.mongodb.kafka.connect.sink.processor.id.strategy"
_WRITE_MODEL = "com.mongodb.kafka.connect.sink.writemodel.strategy"
POSTGRES_HANDLER = "com.mongodb.kafka.connect.sink.cdc.debezium.rdbms.postgres.PostgresHandler"


@dataclass
class Connect(Variant):
    """A sink connector's config, run by Kafka Connect."""

    name: ClassVar[str] = "connect"
    parses_records: ClassVar[bool] = False
    config: Mapping[str, Any] = field(default_factory=dict)
    label: str = "connect"  # the lane's own name, not derived from the config
    promised: str = "exactly-once"
    # Its collection's unique index (a business key's fields), made before the run.
    unique_index: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.config, Mapping):
            problems.append(
                f"config: the connector's configuration, a mapping; got {self.config!r}"
            )
        elif not str(self.config.get("connector.class", "")).strip():
            problems.append("config: connector.class - which sink connector to run")
        if self.promised not in PROMISES:
            problems.append(f"promised: one of {', '.join(PROMISES)}, got {self.promised!r}")
        if problems:
            raise ValueError("; ".join(problems))

    def own_runtime(self) -> Runtime:
        return CONNECT

    def runs_on(self, runtime: Runtime) -> bool:
        return runtime is CONNECT

    @property
    def promise(self) -> Promise:
        return PROMISES[self.promised]

    @property
    def tasks(self) -> int:
        """The tasks Connect starts for it (``tasks.max``; a sink connector starts them all,
        each a member of the lane's consumer group, with partitions or without)."""
        return int(self.config.get("tasks.max", 1))

    @property
    def collection(self) -> str:
        return str(self.config.get(COLLECTION) or "events")

    def landing(self) -> Landing:
        return Landing(self.collection, event_id="event_id", current="")

    def connector_config(self, place: Place) -> dict[str, str]:
        """The config the lab puts on the cluster: the variant's, where the lane's are filled
        in (a pasted config's own addresses replaced)."""
        config = {k: option_text(v) for k, v in self.config.items() if k not in LAB_SET}
        if DLQ in self.config:  # the lane's own dead-letter topic, which the checker reads
            config[DLQ] = dead_letter_topic(place.name)
            config[DLQ_HEADERS] = "true"  # where each came from: how the checker places it
        config.update(
            {
                "name": place.name,
                "topics": place.topic,
                "connection.uri": uri_with(place.mongo_uri, self.client_settings()),
                "database": place.database,
                COLLECTION: self.collection,
                # The lane's group, which the lab watches; a client id the fault proxy's
                # consumer-link rules match.
                GROUP_ID: place.name,
                CLIENT_ID: f"{CONSUMER_CLIENT}-connect-{place.name}",
            }
        )
        return config

    def client_settings(self) -> dict[str, str]:
        """The client settings a pasted ``connection.uri`` carries (its write concern, retries,
        timeouts), kept on the lab's address: they decide outcomes. Its hosts, credentials, TLS
        and replica set are the deployment's, and go with it."""
        query = parse_qsl(urlsplit(str(self.config.get("connection.uri", ""))).query)
        known = {option.lower(): option for option in URI_OPTIONS}
        return {known[k.lower()]: v for k, v in query if k.lower() in known}

    def cluster_job(self, place: Place) -> Job:
        settings = ConnectSettings.from_json(place.cluster)
        return ConnectorWatch(settings, place.name, self.connector_config(place))

    def prepare(self, db: Any) -> None:
        """The unique index a business key relies on; the connector creates the collection."""
        if self.unique_index:
            db[self.collection].create_index([(f, 1) for f in self.unique_index], unique=True)

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        raise TypeError("a Kafka Connect sink connector writes its records itself")


class _BuiltIn(Connect):
    """A documented configuration of MongoDB's sink connector, a variant of its own name: its
    ``config`` entries go over the built-in's."""

    base: ClassVar[dict[str, str]]
    base_promise: ClassVar[Promise]

    def __post_init__(self) -> None:
        self.config = {**self.base, **dict(self.config or {})}
        if self.label == "connect":
            self.label = self.name
        super().__post_init__()

    @property
    def promise(self) -> Promise:
        return self.base_promise if self.promised == "exactly-once" else PROMISES[self.promised]


@dataclass
class ConnectDefault(_BuiltIn):
    """MongoDB's sink connector with its defaults: BsonOidStrategy mints a new ObjectId for
    every record it writes, ReplaceOneDefaultStrategy replaces by that _id - a redelivered
    record is a second document."""

    name = "connect-default"
    base: ClassVar[dict[str, str]] = {"connector.class": SINK_CONNECTOR}
    base_promise = AT_LEAST_ONCE


@dataclass
class ConnectIdempotent(_BuiltIn):
    """Keyed by the producer's event id under a unique index: ReplaceOneBusinessKeyStrategy
    replaces the document with that event id, or inserts it. (MongoDB's other documented form,
    ``_id: {event_id: ...}`` replaced by ReplaceOneDefaultStrategy, runs as a pasted config; on
    SecantusDB it slows as the collection grows - a document-valued ``_id`` is found by a
    scan: docs/connect.md.)"""

    name = "connect-idempotent"
    base: ClassVar[dict[str, str]] = {
        "connector.class": SINK_CONNECTOR,
        "document.id.strategy": f"{_ID_STRATEGY}.PartialValueStrategy",
        "document.id.strategy.partial.value.projection.type": "AllowList",
        "document.id.strategy.partial.value.projection.list": "event_id",
        "writemodel.strategy": f"{_WRITE_MODEL}.ReplaceOneBusinessKeyStrategy",
    }
    base_promise = keyed_promise(EXACTLY_ONCE, Key.EVENT_ID)
    unique_index: ClassVar[tuple[str, ...]] = ("event_id",)


@dataclass
class ConnectBusinessKey(_BuiltIn):
    """Seed 000's business key (the source transaction and the row's primary key) under a
    unique index: ReplaceOneBusinessKeyStrategy replaces the document that has that key."""

    name = "connect-business-key"
    base: ClassVar[dict[str, str]] = {
        "connector.class": SINK_CONNECTOR,
        "document.id.strategy": f"{_ID_STRATEGY}.PartialValueStrategy",
        "document.id.strategy.partial.value.projection.type": "AllowList",
        "document.id.strategy.partial.value.projection.list": "payload.source.txId,order_id",
        "writemodel.strategy": f"{_WRITE_MODEL}.ReplaceOneBusinessKeyStrategy",
    }
    base_promise = EXACTLY_ONCE
    unique_index: ClassVar[tuple[str, ...]] = ("payload.source.txId", "order_id")


@dataclass
class ConnectCdc(_BuiltIn):
    """MongoDB's sink connector applying a Debezium source's change events with its Postgres
    CDC handler: the current state, a document per row replaced by its primary key (``_id:
    {order_id: ...}``) and deleted on a delete (Debezium's tombstones skipped). It keeps no
    record of each change, so it is judged on its state against the database's final table
    (``harness.checker.state``), and reads only a Debezium source's records (JSON with their
    schema, as the source writes them)."""

    name = "connect-cdc"
    base: ClassVar[dict[str, str]] = {
        "connector.class": SINK_CONNECTOR,
        "change.data.capture.handler": POSTGRES_HANDLER,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
    }
    base_promise = EXACTLY_ONCE
    reads_change_events: ClassVar[bool] = True

    def landing(self) -> Landing:
        return Landing(self.collection, current="", row_key="_id.order_id")
