"""MongoDB's Spark connector as the sink: the writes teams make from Spark, under the lab's
faults, with the connector's own write options.

    variants:
      - connector-sink                                   # writeStream.format("mongodb")
      - {name: connector-batch, idFieldList: event_id}   # foreachBatch + write.format(...)
      - {name: connector-batch, operationType: insert, _id: event_id}

Each Kafka record's JSON becomes a row - ``event_id``, ``order_id``, ``version``, ``tx_id``,
``payload`` and the lab's ``_lab`` (the record's partition and offset) - and the connector
writes it as it would any DataFrame: by its ``operationType`` on the ``idFieldList`` fields, or
as an insert when the row lacks one of them (the connector's rule, whatever ``operationType``
says). With the connector's defaults (``replace`` on ``_id``) a row without ``_id`` is inserted
and the driver mints a new ObjectId: a replayed micro-batch is stored again. ``_id: event_id``
(the lab's option, not the connector's) gives each row the producer's event id as its ``_id``.

Where the connector replaces or updates by ``idFieldList`` fields, the lab makes a unique index on
them first, as MongoDB advises for an upsert's filter (``unique_index: false``, the lab's
option, leaves it out).

Options are the connector's write options (10.5.0: ``harness.environment.maven``), by their own
names - plain, or prefixed ``spark.mongodb.write.`` as in a Spark configuration - and checked as
the connector checks them, with its own words; a name the connector does not know is refused
here (the connector itself ignores it, silently). ``connection.uri`` and ``database`` are the
lab's (each lane writes to its own database, through the fault proxy); ``collection`` is where
the checker reads what was stored (default ``events``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.checker.promise import AT_LEAST_ONCE, AT_MOST_ONCE, EXACTLY_ONCE, NOTHING, Promise
from harness.pipeline.batch import Batch
from harness.pipeline.runtimes import Runtime
from harness.pipeline.variants.base import (
    Key,
    Landing,
    Variant,
    WriteContext,
    keyed_promise,
    option_text,
)

# How the connector reads a value (its config.AbstractMongoConfig): the refusal in its words.
Check = Callable[[str, str], str | None]


def _int(key: str, value: str) -> str | None:
    # Java's Integer.parseInt: an optional sign, then digits.
    if re.fullmatch(r"[+-]?[0-9]+", value) and -(2**31) <= int(value) < 2**31:
        return None
    return f"{key} did not contain a valid int, got: {value}"


def _boolean(key: str, value: str) -> str | None:
    return None if value.lower() in ("true", "false") else f"{value} is not a boolean string."


def _one_of(*allowed: str, what: str) -> Check:
    def check(key: str, value: str) -> str | None:
        if value.lower() in (a.lower() for a in allowed):
            return None
        return f"'{value}' is not a valid {what} (one of {', '.join(allowed)})"

    return check


def _w(key: str, value: str) -> str | None:
    # A number of nodes, or any other text as a tag set's name (refused by the server, if at all).
    if _int(key, value) is None and int(value) < 0:
        return "Invalid write concern configuration. (state should be: w >= 0)"
    return None


def _non_negative(key: str, value: str) -> str | None:
    if (problem := _int(key, value)) is not None:
        return f"Invalid write concern configuration. ({problem})"
    return None if int(value) >= 0 else "Invalid write concern configuration. (wTimeout >= 0)"


def _journal(key: str, value: str) -> str | None:
    problem = _boolean(key, value)
    return None if problem is None else f"Invalid write concern configuration. ({problem})"


def _anything(key: str, value: str) -> str | None:
    return None


@dataclass(frozen=True)
class WriteOption:
    """One of the connector's write options: its name, its default as the connector says it,
    and how the connector refuses a value."""

    name: str
    default: str
    check: Check


# The connector's write options (10.5.0's WriteConfig and MongoConfig), in its own order.
WRITE_OPTIONS: tuple[WriteOption, ...] = (
    WriteOption("operationType", "replace",
                _one_of("insert", "replace", "update", what="Write Operation Type")),
    WriteOption("idFieldList", "_id", _anything),
    WriteOption("upsertDocument", "true", _boolean),
    WriteOption("ordered", "true", _boolean),
    WriteOption("maxBatchSize", "512", _int),
    WriteOption("writeConcern.w", "", _w),
    WriteOption("writeConcern.journal", "", _journal),
    WriteOption("writeConcern.wTimeoutMS", "", _non_negative),
    WriteOption("convertJson", "false",
                _one_of("false", "any", "objectOrArrayOnly", what="Convert Json Type")),
    WriteOption("ignoreNullValues", "false", _boolean),
    WriteOption("comment", "", _anything),
)  # fmt: skip
_BY_NAME = {o.name.lower(): o for o in WRITE_OPTIONS}
# Set by the lab for every lane: where it writes (its own database, through the fault proxy).
LAB_SET = ("connection.uri", "database")
COLLECTION = "collection"
PREFIXES = ("spark.mongodb.write.", "spark.mongodb.")
ROW_ID = "_id"  # the lab's option: what the row's _id is
ROW_IDS = ("", "event_id")  # none (the driver mints one), or the producer's event id
UNIQUE_INDEX = "unique_index"  # the lab's option: the collection's index on idFieldList

# The fields of the row the lab hands the connector (``harness.pipeline.spark.connector``).
ROW_FIELDS = ("event_id", "order_id", "version", "tx_id", "payload", "_lab")


def write_options(raw: Mapping[str, Any]) -> tuple[dict[str, str], str, list[str]]:
    """A variant's options as the connector's (canonical name -> text, as given), the landing
    collection, and every problem: an option the connector does not know, a value it refuses."""
    options: dict[str, str] = {}
    collection = "events"
    problems = []
    for key, value in raw.items():
        name = str(key)
        for prefix in PREFIXES:
            if name.lower().startswith(prefix):
                name = name[len(prefix) :]
                break
        text = option_text(value)
        if name.lower() in LAB_SET:
            continue  # a deployment's own address: the lab's lane has its own
        if name.lower() == COLLECTION:
            if not text:
                problems.append(f"{key}: a collection name")
            collection = text
            continue
        option = _BY_NAME.get(name.lower())
        if option is None:
            known = ", ".join(o.name for o in WRITE_OPTIONS)
            problems.append(
                f"{key}: not a write option of MongoDB's Spark connector (which would ignore "
                f"it silently; its options: {known}, collection; the lab's: {ROW_ID}, "
                f"{UNIQUE_INDEX})"
            )
            continue
        if (refused := option.check(option.name, text)) is not None:
            problems.append(f"{key}: {refused}")
            continue
        options[option.name] = text
    return options, collection, problems


class ConnectorVariant(Variant):
    """MongoDB's Spark connector writes each batch (a Spark lane's JVM does, not the lab)."""

    name: ClassVar[str]
    parses_records: ClassVar[bool] = False
    # How the lane hands the rows to the connector (harness.pipeline.spark.connector).
    streaming_sink: ClassVar[bool]

    def __init__(self, **options: Any) -> None:
        row_id = options.pop(ROW_ID, "")
        unique_index = options.pop(UNIQUE_INDEX, True)
        self.options, self.collection, problems = write_options(options)
        self.row_id = row_id if isinstance(row_id, str) else ""
        self.unique_index = unique_index
        if self.row_id not in ROW_IDS:
            problems.append(
                f"{ROW_ID}: what the row's _id is - event_id (the producer's id), or leave it "
                f"out (the driver mints one); got {row_id!r}"
            )
        if not isinstance(unique_index, bool):
            problems.append(f"{UNIQUE_INDEX}: true or false, got {unique_index!r}")
        if problems:
            raise ValueError("; ".join(problems))

    def option(self, name: str) -> str:
        """An option as the connector will see it: as set, else its default."""
        return self.options.get(name, _BY_NAME[name.lower()].default)

    @property
    def label(self) -> str:
        """The name plus what was set, e.g. connector-batch[idFieldList=event_id]."""
        # A list's commas would read as the label's own: idFieldList=order_id+version.
        changed = [f"{k}={v.replace(',', '+')}" for k, v in self.options.items()]
        if self.row_id:
            changed.append(f"{ROW_ID}={self.row_id}")
        if self.collection != "events":
            changed.append(f"{COLLECTION}={self.collection}")
        if not self.unique_index:
            changed.append(f"{UNIQUE_INDEX}=false")
        return f"{self.name}[{','.join(changed)}]" if changed else self.name

    def runs_on(self, runtime: Runtime) -> bool:
        return runtime.spark

    def landing(self) -> Landing:
        # One collection, a document per change stored; no current-state projection.
        return Landing(self.collection, event_id="event_id", current="")

    def id_fields(self) -> tuple[str, ...]:
        return tuple(f.strip() for f in self.option("idFieldList").split(","))

    def every_row_inserted(self) -> bool:
        """Whether a row lacks an ``idFieldList`` field: the connector then inserts it."""
        row = {*ROW_FIELDS, *((ROW_ID,) if self.row_id else ())}
        return not set(self.id_fields()) <= row

    def keyed_by(self) -> Key | None:
        """What the filter (or the inserted ``_id``) names, if it names one change."""
        fields = set(self.id_fields())
        if self.every_row_inserted():
            fields = {ROW_ID}  # an insert is keyed by its _id, if the row has one
        if fields == {"event_id"} or (fields == {ROW_ID} and self.row_id == "event_id"):
            return Key.EVENT_ID
        if fields == {"order_id", "version"}:
            return Key.BUSINESS
        return None

    @property
    def promise(self) -> Promise:
        key = self.keyed_by()
        inserts = self.every_row_inserted() or self.option("operationType").lower() == "insert"
        if inserts:
            # A replayed row is a second document, or - under a unique _id - an E11000 that
            # fails the write: no copy, and what comes after it is not written.
            return AT_LEAST_ONCE if key is None else keyed_promise(AT_MOST_ONCE, key)
        if key is None:
            return NOTHING  # the filter names something else than a change: it overwrites
        if self.option("upsertDocument").lower() != "true":
            return NOTHING  # a change whose document is not there yet is never written
        return keyed_promise(EXACTLY_ONCE, key)

    def index_fields(self) -> tuple[str, ...]:
        """The fields a replace or update filters by, when a unique index on them is made:
        MongoDB's advice for an upsert's filter (without one, two upserts of one key at once
        can both insert; and each filter scans the collection)."""
        fields = self.id_fields()
        inserts = self.every_row_inserted() or self.option("operationType").lower() == "insert"
        if not self.unique_index or inserts or fields == (ROW_ID,):
            return ()  # an insert filters by nothing; _id has its index
        return fields

    def prepare(self, db: Any) -> None:
        """The unique index on the upsert's fields, as a team would make it (``unique_index:
        false`` leaves it out); the connector creates the collection it writes to."""
        if fields := self.index_fields():
            db[self.collection].create_index([(f, 1) for f in fields], unique=True)

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        raise TypeError("MongoDB's Spark connector writes the batch, in Spark's JVM")


class ConnectorBatch(ConnectorVariant):
    """``foreachBatch`` + ``df.write.format("mongodb").mode("append")``: the lab's crash points
    sit around the write, in the driver."""

    name = "connector-batch"
    streaming_sink = False


class ConnectorSink(ConnectorVariant):
    """The connector's own streaming sink, ``writeStream.format("mongodb")``: Spark writes and
    commits; the lab holds the query's checkpoint entries at its crash points."""

    name = "connector-sink"
    streaming_sink = True
