"""The sink strategies under test: one small protocol, and what every variant shares.

Each variant writes a batch into its own database:

* ``events`` - the landing zone: one document per change event received, carrying the
  envelope plus ``_lab`` (partition, offset, batch, written_at) so the checker can count copies
  of each business change and place each on the timeline;
* ``orders`` - the current-state projection per ``order_id`` (the seeds' staging-zone view);
  a tombstone marks a deleted order, keeping its version.

Variants differ in how they write (and whether a redelivered batch can add copies or roll the
projection back). A user's own variant is any ``module:callable`` returning a ``Variant``.
"""

from __future__ import annotations

import importlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, TypeVar, cast

from pymongo import ASCENDING, MongoClient, ReplaceOne, UpdateOne
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError

from harness.checker.promise import EXACTLY_ONCE, Promise
from harness.errors import BadInput
from harness.history.events import HistoryWriter
from harness.pipeline import mongo_options
from harness.pipeline.batch import Batch, Record
from harness.pipeline.crash import Crasher, CrashPoint
from harness.pipeline.runtimes import Runtime
from harness.workload.events import Op

DUPLICATE_KEY = 11000


class Key(StrEnum):
    """What identifies a message for de-duplication."""

    EVENT_ID = "event_id"  # the producer-minted id: a resend upstream gets a new one
    BUSINESS = "business"  # the business change itself: (order_id, version)


def keyed_promise(promise: Promise, key: Key) -> Promise:
    """A de-duplicating variant's promise with its key: by event id, an upstream resend (a new
    id for the same change) is not a duplicate it can see."""
    return promise.without_resends() if key is Key.EVENT_ID else promise


def message_key(key: Key, record: Record) -> str:
    """A record's de-duplication key: its event id, or its business change."""
    event = record.event
    return event.event_id if key is Key.EVENT_ID else f"{event.order_id}:{event.version}"


T = TypeVar("T")


@dataclass(frozen=True)
class Landing:
    """Where the checker reads what a variant stored: a collection with a document per change
    stored (copies are separate documents), naming the change by its business key fields or by
    the producer-minted event id; and the current-state collection ('' if it keeps none:
    staleness is then not judged)."""

    collection: str = "events"
    order_id: str = "order_id"
    version: str = "version"
    event_id: str = ""  # when set, the change is the ledger's for this event id
    current: str = "orders"
    # When set, the collection holds a document per row, not per change: this field (a dotted
    # path) is its order's id, and the lane is judged on state (harness.checker.state).
    row_key: str = ""

    def row(self, doc: Mapping[str, Any]) -> tuple[int, int] | None:
        """A current-state document's (order_id, version), by ``row_key``; None if it has
        neither."""
        order_id: Any = doc
        for part in self.row_key.split("."):
            order_id = order_id.get(part) if isinstance(order_id, Mapping) else None
        version = doc.get(self.version)
        if isinstance(order_id, int) and isinstance(version, int):
            return order_id, version
        return None


@dataclass
class WriteContext:
    """What a variant may use while writing one batch."""

    client: MongoClient[dict[str, Any]]
    db: Database[dict[str, Any]]
    batch_no: int  # this consumer process's batch counter, for crash plans
    crasher: Crasher | None = None
    batch_id: int | None = None  # the runtime's id of the batch, for the history
    max_commit_time_ms: int | None = None  # a transaction's commit deadline (pipeline.mongo)

    def chunks(self, docs: Sequence[dict[str, Any]]) -> Iterator[Sequence[dict[str, Any]]]:
        """The documents in the chunks a variant should write them in, stopping at the
        ``mid_write`` crash point (if one is armed) after the planned number of documents."""
        cuts = sorted(
            {p.after_docs for p in (self.crasher.plans if self.crasher else [])
             if p.point is CrashPoint.MID_WRITE and 0 < p.after_docs < len(docs)}
        )  # fmt: skip
        start = 0
        for cut in [*cuts, len(docs)]:
            if cut > start:
                yield docs[start:cut]
                self.written(cut)
            start = cut

    def written(self, count: int) -> None:
        """Tell the crash points that ``count`` documents of the batch are written."""
        if self.crasher is not None:
            self.crasher.reached(CrashPoint.MID_WRITE, self.batch_no, count, batch_id=self.batch_id)


MONGO_OPTION = "mongo"  # every variant's option: its MongoDB client settings


def option_text(value: Any) -> str:
    """A YAML value as a JVM's configuration takes it (a Spark option, a Connect config):
    booleans in lower case, lists comma-separated."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


class Job(Protocol):
    """A lane that is a job on a cluster (a connector on Kafka Connect): put on the cluster and
    followed, a poll at a time, by the lane's observer (``harness.pipeline.observer``)."""

    def poll(self, history: HistoryWriter) -> None: ...


@dataclass(frozen=True)
class Place:
    """Where a lane reads and writes, for a variant that is a job on a cluster."""

    cluster: str  # the cluster's settings, as the runtime's configuration holds them (JSON)
    name: str  # the job's: the lane's consumer group
    topic: str
    mongo_uri: str  # the consumers' link (through the fault proxy)
    database: str


class Variant(ABC):
    """A sink strategy. Subclasses are dataclasses whose fields are the variant's options."""

    name: ClassVar[str]
    # Its consumers' MongoDB client settings over the pipeline's (``make_variant`` sets them
    # from the option ``mongo``): e.g. retryWrites false beside the same variant with the
    # drivers' default, in one run.
    mongo: Mapping[str, Any] = MappingProxyType({})
    # Its collections: the landing zone and the projection, and whatever its own bookkeeping needs.
    collections: ClassVar[tuple[str, ...]] = ("events", "orders")
    # Its records are parsed by the lab (harness.workload.events.parse), which reads a Debezium
    # source's records too; a program, a connector or a user's job reads them its own way.
    parses_records: ClassVar[bool] = True
    # It reads a Debezium source's change events only (a CDC handler's): no producer's records.
    reads_change_events: ClassVar[bool] = False

    def runs_on(self, runtime: Runtime) -> bool:
        """Whether it can run on ``runtime`` (any, unless it says otherwise)."""
        return True

    def own_runtime(self) -> Runtime | None:
        """The runtime it brings with it (a command consumer's), or None: it runs on each of
        the scenario's ``runtimes:``."""
        return None

    def runs_with(self, runtime: Runtime) -> bool:
        """Whether a run of ``runtime``'s lanes can have it: it runs on that runtime, or on the
        one it brings, beside."""
        return self.own_runtime() is not None or self.runs_on(runtime)

    def consumer_count(self, default: int) -> int:
        """How many consumer processes it gets where each has its own (``pipeline.consumers``,
        unless it says)."""
        return default

    def landing(self) -> Landing:
        """Where the checker reads what it stored."""
        return Landing()

    def cluster_job(self, place: Place) -> Job | None:
        """What the lab puts on a cluster for it (None: its runtime's processes run it)."""
        return None

    def program(self) -> tuple[str, ...]:
        """The program a command consumer runs (() for a variant the lab's runtimes run)."""
        return ()

    def container_image(self) -> str:
        """The image a command consumer asks to run in ('': the lab's own)."""
        return ""

    @property
    def promise(self) -> Promise:
        """What it guarantees, whatever the faults (``chaoslab explore`` holds it to this):
        exactly-once unless it says less."""
        return EXACTLY_ONCE

    @property
    def label(self) -> str:
        """The name plus any option that differs from its default, e.g. dedup-log[key=business]."""
        changed = [
            f"{f.name}={getattr(self, f.name)}"
            for f in fields(self)  # type: ignore[arg-type]  # every subclass is a dataclass
            if getattr(self, f.name) != f.default
        ]
        changed += [f"{k}={mongo_options.text(v)}" for k, v in self.mongo.items()]
        return f"{self.name}[{','.join(changed)}]" if changed else self.name

    def prepare(self, db: Database[dict[str, Any]]) -> None:
        """Create the collections and indexes (before the first batch, once per run). Every
        collection is made here, before any write: a transaction cannot create one."""
        existing = set(db.list_collection_names())
        for name in self.collections:
            if name not in existing:
                db.create_collection(name)

    @abstractmethod
    def write(self, batch: Batch, ctx: WriteContext) -> None:
        """Make the batch's effects durable in MongoDB. Raising means: not done, redeliver."""

    def resume_positions(
        self, db: Database[dict[str, Any]], group: str, topic: str
    ) -> dict[int, int]:
        """Where to start reading each partition, if the variant keeps positions itself
        ({partition: next offset}); empty when Kafka's (or Spark's) own positions rule."""
        return {}

    def stored_offsets(
        self, db: Database[dict[str, Any]], group: str, topic: str
    ) -> dict[int, int] | None:
        """Offsets the variant stored in MongoDB (the checker compares them with the ledger)."""
        return None


def landing_doc(record: Record, batch: Batch) -> dict[str, Any]:
    doc = dict(record.event.document)
    # A message's own "_id" (an outbox entry's, seed 003) is not the landing document's: which
    # _id a document gets is the variant's choice (naive lets the driver mint one).
    doc.pop("_id", None)
    # payload.source.txId again at the top: SecantusDB upserts on a compound index of dotted
    # paths far slower than on top-level fields (docs/environment.md).
    doc["tx_id"] = record.event.tx_id
    doc["_lab"] = {
        "partition": record.partition,
        "offset": record.offset,
        "batch": batch.batch_id,
        "written_at": time.time(),
    }
    return doc


SEED_000_KEY = [("tx_id", ASCENDING), ("order_id", ASCENDING)]


def seed_000_key(doc: dict[str, Any]) -> dict[str, Any]:
    """Seed 000's idempotent filter: the source transaction id (``payload.source.txId``, copied
    to ``tx_id``) and the row's primary key - "a combination of the source table's primary key
    and the transaction ID"."""
    return {"tx_id": doc["tx_id"], "order_id": doc["order_id"]}


def _projection_doc(record: Record) -> dict[str, Any]:
    event = record.event
    payload = event.document["payload"]
    return {
        "version": event.version,
        "deleted": event.op is Op.DELETE,
        "row": payload.get("after"),
        "event_id": event.event_id,
        "updated_at": time.time(),
    }


def project(
    orders: Collection[dict[str, Any]],
    records: Sequence[Record],
    *,
    guarded: bool = True,
    session: ClientSession | None = None,
) -> None:
    """Bring the projection up to date with ``records``.

    Guarded, a change is applied only over an older version, so a redelivered or resent old
    change cannot roll an order back; the filter ``version < v`` with upsert either updates
    an older document or tries to insert a new one, which the ``_id`` index refuses when a
    newer version is already there - that refusal is the guard working, not a failure.
    Unguarded (how a naive consumer does it), the last write wins, whatever its version.
    """
    if not records:
        return
    if not guarded:
        ops: list[Any] = [
            ReplaceOne({"_id": r.event.order_id}, _projection_doc(r), upsert=True) for r in records
        ]
        orders.bulk_write(ops, ordered=True, session=session)
        return
    newest: dict[int, Record] = {}
    for r in records:
        current = newest.get(r.event.order_id)
        if current is None or r.event.version > current.event.version:
            newest[r.event.order_id] = r
    if session is not None and session.in_transaction:
        # Inside a transaction a refused write aborts the whole transaction, so the guard
        # cannot be a duplicate-key refusal: read the versions first. The transaction's
        # snapshot and write-conflict detection make the read-then-write safe.
        stored = {
            d["_id"]: d.get("version", -1)
            for d in orders.find({"_id": {"$in": list(newest)}}, {"version": 1}, session=session)
        }
        ops = [
            UpdateOne({"_id": order_id}, {"$set": _projection_doc(r)}, upsert=True)
            for order_id, r in newest.items()
            if r.event.version > stored.get(order_id, -1)
        ]
        if ops:
            orders.bulk_write(ops, ordered=False, session=session)
        return
    ops = [
        UpdateOne(
            {"_id": order_id, "version": {"$lt": r.event.version}},
            {"$set": _projection_doc(r)},
            upsert=True,
        )
        for order_id, r in newest.items()
    ]
    write_ignoring_duplicates(orders, ops, session=session)


def write_ignoring_duplicates(
    collection: Collection[dict[str, Any]],
    ops: Sequence[Any],
    *,
    session: ClientSession | None = None,
) -> int:
    """Unordered bulk write where a duplicate-key refusal counts as success (seed 002's
    pattern 3). Any other error is raised. Returns how many operations were refused."""
    if not ops:
        return 0
    try:
        collection.bulk_write(list(ops), ordered=False, session=session)
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
        others = [e for e in errors if e.get("code") != DUPLICATE_KEY]
        if others or exc.details.get("writeConcernErrors"):
            raise
        return len(errors)
    return 0


def make_plugin(
    name: str,
    options: Mapping[str, Any] | None,
    built_in: Mapping[str, type[T]],
    kind: type[T],
    what: str,
) -> T:
    """A built-in ``what`` (a sink variant, a relay) by name, or a user's own as
    ``module:callable`` called with the options as keyword arguments, which must return a
    ``kind``. BadInput names what is wrong."""
    options = dict(options or {})
    if ":" in name:
        factory = import_callable(name, what)
        try:
            made = factory(**options)
        except TypeError as exc:
            raise BadInput(f"{what} {name}: {exc}") from None
        if not isinstance(made, kind):
            raise BadInput(f"{what} {name} returned {type(made).__name__}, not a {kind.__name__}")
        return made
    cls = built_in.get(name)
    if cls is None:
        known = ", ".join(sorted(built_in))
        raise BadInput(f"unknown {what} {name!r} (built in: {known}; or module:callable)")
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"{what} {name}: {exc}") from None


def import_callable(spec: str, what: str) -> Callable[..., Any]:
    """``module:callable``, imported: a user's variant or Spark job. BadInput names what is
    missing (``what`` says which it is)."""
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise BadInput(f"{what}: must be module:callable, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BadInput(f"{what} {spec}: cannot import {module_name} ({exc})") from None
    found = getattr(module, attr, None)
    if not callable(found):
        raise BadInput(f"{what} {spec}: {module_name} has no callable {attr!r}")
    return cast(Callable[..., Any], found)
