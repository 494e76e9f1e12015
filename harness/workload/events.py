"""Change events for an ``orders`` table, in a Debezium-style envelope.

The Kafka value of an event::

    {"event_id": "e-…", "order_id": 17, "version": 3,
     "payload": {"op": "u", "before": {...}, "after": {...},
                 "source": {"txId": "tx-…", "ts_ms": 1700000000000, "table": "orders"}}}

``event_id`` is minted by the producer (seed 002's fix), ``order_id`` is the business key and
the Kafka key, ``version`` counts the changes of one order and only grows. A *business change*
is identified by ``(order_id, version)``: an upstream resend repeats one with a new event_id.

A consumer also parses Debezium's own records (a CDC source's: JSON with schemas, the change in
``payload``), which carry none of those fields: they are derived from the change itself
(``DebeziumChange``) and set at the top of the document a sink stores, as for the lab's records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from harness.workload import shapes
from harness.workload.shapes import PoisonKind

TABLE = "orders"


class Op(StrEnum):
    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"


class Kind(StrEnum):
    NORMAL = "normal"
    RESEND = "resend"  # the same business change again, with a new event_id
    # The same change again from a CDC source, with its own identity (the source's LSN): a
    # re-emission after Debezium resumed from offsets older than what it had sent.
    COPY = "copy"
    POISON = "poison"  # a record no consumer can parse: it must go to the dead-letter topic


@dataclass(frozen=True)
class ChangeEvent:
    seq: int  # position in the workload
    event_id: str
    order_id: int
    version: int
    op: Op
    kind: Kind
    tx_id: str
    ts_ms: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    poison: PoisonKind | None = None
    twin: int = 0  # a duplicate-keys record's other order (harness.workload.shapes)

    @property
    def key(self) -> bytes:
        return str(self.order_id).encode()

    def envelope(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "order_id": self.order_id,
            "version": self.version,
            "payload": {
                "op": self.op.value,
                "before": self.before,
                "after": self.after,
                "source": {"txId": self.tx_id, "ts_ms": self.ts_ms, "table": TABLE},
            },
        }

    def value(self) -> bytes | None:
        """The bytes sent to Kafka: a bad record's in its shape (None: a tombstone)."""
        if self.poison is not None:
            return shapes.value(self.poison, self.envelope(), self.twin)
        return shapes.compact(self.envelope()).encode()


DEBEZIUM_READ = "r"  # Debezium's op for a row its snapshot read


@dataclass(frozen=True)
class DebeziumChange:
    """A Debezium change record's payload as the lab identifies the change.

    * ``order_id``: the row's key (``after``, or ``before`` for a delete);
    * ``version``: the row's version; a delete is the order's change after the row's last
      version (``harness.sources.sql_workload``'s identity), a snapshot's read the row's;
    * ``tx_id``: ``source.txId``, the database's transaction id;
    * ``event_id``: ``source.lsn`` with the row's key - the LSN alone is not a change's: a
      COPY's rows are one WAL record and share its LSN.
    """

    op: Op
    order_id: int
    version: int
    tx_id: str
    lsn: int

    @property
    def event_id(self) -> str:
        return change_event_id(self.lsn, self.order_id)


def change_event_id(lsn: int, order_id: int) -> str:
    """A database change's identity: its LSN and the row's key."""
    return f"lsn-{lsn}-{order_id}"


def change_lsn(event_id: str) -> int:
    """The LSN in a database change's identity (``change_event_id``'s)."""
    return int(event_id.split("-")[1])


def debezium_change(payload: dict[str, Any]) -> DebeziumChange:
    """The change in a Debezium record's ``payload``; KeyError, TypeError or ValueError if it
    is not one."""
    op = Op.CREATE if payload["op"] == DEBEZIUM_READ else Op(payload["op"])
    row = payload["before"] if op is Op.DELETE else payload["after"]
    version = int(row["version"]) + (1 if op is Op.DELETE else 0)
    source = payload["source"]
    tx_id, lsn = str(source["txId"]), int(source["lsn"])
    return DebeziumChange(op, int(row["order_id"]), version, tx_id, lsn)


class ParseError(ValueError):
    """The record is poison; the message says why."""


@dataclass(frozen=True)
class ParsedEvent:
    """What a consumer knows of a record after parsing it."""

    event_id: str
    order_id: int
    version: int
    op: Op
    tx_id: str
    document: dict[str, Any]  # the envelope as received


def parse(value: bytes | None) -> ParsedEvent:
    """Parse a record's value, or raise ParseError naming what is wrong."""
    if value is None:
        raise ParseError("empty value")
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ParseError(f"malformed JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ParseError("value is not a JSON object")
    if "event_id" not in doc and "lsn" in (doc.get("payload") or {}).get("source", {}):
        return _parse_debezium(doc)
    try:
        payload = doc["payload"]
        return ParsedEvent(
            event_id=str(doc["event_id"]),
            order_id=int(doc["order_id"]),
            version=int(doc["version"]),
            op=Op(payload["op"]),
            tx_id=str(payload["source"]["txId"]),
            document=doc,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ParseError(f"missing or invalid field: {exc}") from None


def _parse_debezium(doc: dict[str, Any]) -> ParsedEvent:
    try:
        change = debezium_change(doc["payload"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ParseError(f"a Debezium record without a change the lab reads: {exc!r}") from None
    # What a sink stores: the change, with its identity at the top as the lab's records have
    # it; not the schema every record repeats (JSON with schemas).
    document = {
        "event_id": change.event_id,
        "order_id": change.order_id,
        "version": change.version,
        "payload": doc["payload"],
    }
    return ParsedEvent(
        change.event_id, change.order_id, change.version, change.op, change.tx_id, document
    )
