"""The outbox relays under test (seed 003's way back: a MongoDB change stream -> Kafka), as
small variants like the sink's: how a change event is split into messages, how they are
published, and where the resume token is kept.

A relay reads the business collection's change stream, makes one message per outbox entry
(routed by ``targetTopic``, keyed by the document's ``_id``), publishes them, then saves the
change's resume token so that a restarted relay goes on from there. Where it saves the token,
and what it does between publishing and saving, is what the variants differ in:

* ``naive`` - no idempotence; publish, flush, then save the token in MongoDB;
* ``idempotent`` - an idempotent producer, each message carrying the entry ``_id`` in a header,
  the token saved after the flush (a restarted relay publishes again: a new producer id, so
  the broker cannot tell; the header lets a consumer tell);
* ``transactional`` - one Kafka transaction holds the messages of the changes the stream has
  ready (up to 100) AND the last one's resume token (a record in a token topic): both are
  committed or neither is, and a restarted relay resumes from the last committed token;
* ``seed-003`` - the seed's own handling: ``fullDocument.outbox`` for inserts and replaces,
  ``updateDescription.updatedFields.outbox`` for updates - and nothing for ``outbox.N``, the
  ``$push`` shape the seed says it does not support: those entries are silently not relayed.

A user's own relay is ``module:callable`` returning a ``Relay``.
"""

from __future__ import annotations

import json
from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.pipeline.variants.base import make_plugin

ENTRY_HEADER = "outbox-entry-id"


class TokenStore:
    """Where a relay keeps its resume token."""

    MONGO = "mongo"  # a document in the source database's relay_tokens collection
    KAFKA = "kafka"  # a record in the lane's token topic, in the messages' transaction


@dataclass(frozen=True)
class Message:
    """One outbox entry as a Kafka record."""

    topic: str  # the entry's targetTopic (the run maps it to its own topic name)
    key: bytes  # the document's _id
    value: bytes  # the entry, as JSON
    entry_id: str


def outbox_fields(change: Mapping[str, Any]) -> list[str]:
    """The change's fields that hold outbox entries: ``outbox`` and ``outbox.N``."""
    if change.get("operationType") in ("insert", "replace"):
        return ["outbox"] if (change.get("fullDocument") or {}).get("outbox") else []
    updated = (change.get("updateDescription") or {}).get("updatedFields") or {}
    return [f for f in updated if f == "outbox" or f.startswith("outbox.")]


class Relay(ABC):
    """A relay variant. Subclasses are dataclasses whose fields are its options."""

    name: ClassVar[str]
    tokens: ClassVar[str] = TokenStore.MONGO
    idempotent: ClassVar[bool] = False  # enable.idempotence, and the entry id in a header
    handles_push: ClassVar[bool] = True  # relays ``outbox.N`` ($push) fields

    @property
    def label(self) -> str:
        return self.name

    def entries(self, change: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The outbox entries a change event carries, as this relay finds them."""
        kind = change.get("operationType")
        if kind in ("insert", "replace"):
            return list((change.get("fullDocument") or {}).get("outbox") or [])
        if kind != "update":
            return []
        updated = (change.get("updateDescription") or {}).get("updatedFields") or {}
        found = list(updated.get("outbox") or [])
        if self.handles_push:
            # $push of k entries onto an array of n: "outbox.n" .. "outbox.n+k-1", each an
            # entry (or, from some servers, a list of entries).
            for name in sorted(
                (f for f in updated if f.startswith("outbox.")), key=lambda f: int(f[7:])
            ):
                value = updated[name]
                found.extend(value if isinstance(value, list) else [value])
        return found

    def messages(self, change: Mapping[str, Any]) -> list[Message]:
        key = str((change.get("documentKey") or {}).get("_id")).encode()
        return [
            Message(str(e["targetTopic"]), key, json.dumps(e, default=str).encode(), str(e["_id"]))
            for e in self.entries(change)
        ]

    def headers(self, message: Message) -> dict[str, str | bytes | None]:
        return {ENTRY_HEADER: message.entry_id.encode()} if self.idempotent else {}

    def producer_settings(self) -> dict[str, Any]:
        """librdkafka settings over the lab's producer's (harness.kafka.clients.producer_config)."""
        if self.idempotent:
            return {"enable.idempotence": True, "acks": "all"}
        return {"enable.idempotence": False, "acks": "all"}


@dataclass
class NaiveRelay(Relay):
    """Publish, flush, then save the token in MongoDB; no idempotence."""

    name: ClassVar[str] = "naive"


@dataclass
class IdempotentRelay(Relay):
    """An idempotent producer, the entry id in a header, the token saved after the flush."""

    name: ClassVar[str] = "idempotent"
    idempotent: ClassVar[bool] = True


@dataclass
class TransactionalRelay(Relay):
    """A Kafka transaction per batch of change events: their messages and the last one's resume
    token together (harness.outbox.relay)."""

    name: ClassVar[str] = "transactional"
    idempotent: ClassVar[bool] = True
    tokens: ClassVar[str] = TokenStore.KAFKA


@dataclass
class Seed003Relay(Relay):
    """Seed 003's transformer: ``outbox`` of inserts, replaces and updates; ``outbox.N`` is
    "a different format that is not yet supported", so its entries are not relayed."""

    name: ClassVar[str] = "seed-003"
    handles_push: ClassVar[bool] = False


BUILT_IN: dict[str, type[Relay]] = {
    cls.name: cls for cls in (NaiveRelay, IdempotentRelay, TransactionalRelay, Seed003Relay)
}


def make_relay(name: str, options: Mapping[str, Any] | None = None) -> Relay:
    """A built-in relay by name, or a user's own as ``module:callable``."""
    return make_plugin(name, options, BUILT_IN, Relay, "relay")
