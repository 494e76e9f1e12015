"""The outbox workload (seed 003): an application saving business documents that carry an
``outbox`` array of messages for Kafka. The same spec and seed give the same writes.

A business document is an order, ``{"_id": order_id, "status": ..., "outbox": [entry...]}``.
An entry has the seed's fields (``_id``, ``createdAt``, ``entityName``, ``entityId``,
``messageName``, ``targetTopic``, ``payload``) and, so that the existing sink variants can
consume the target topics unchanged, the lab's change-event fields: ``event_id`` (the entry's
``_id``), ``order_id`` and ``version`` (the entry's number among its order's entries), with the
change in ``payload`` (``op``, ``after``, ``source.txId``) - the seed's payload is "anything
you want".

Each write is one of the seed's shapes, drawn from ``mix``:

* ``insert`` - a new order with its outbox (the first write of an order is always one);
* ``replace`` - the whole document again, with a new outbox;
* ``set`` - ``$set`` of the whole ``outbox`` array (the seed's supported update shape);
* ``push`` - ``$push`` of entries onto the existing array: the change stream reports them as
  ``updatedFields."outbox.N"``, the shape the seed says it does not handle.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from harness.workload.generator import BASE_TS_MS, STATUSES


class WriteOp(StrEnum):
    INSERT = "insert"
    REPLACE = "replace"
    SET = "set"
    PUSH = "push"


@dataclass(frozen=True)
class OutboxSpec:
    writes: int = 600  # application writes (each carries 1..entries_max outbox entries)
    documents: int = 150  # distinct orders
    entries_max: int = 2
    # The entries' targetTopic values (a list: the scenario file's YAML gives one).
    topics: list[str] = field(default_factory=lambda: ["orders", "billing"])
    # Relative weights of the update shapes once an order exists (its first write inserts it).
    mix: dict[str, float] = field(default_factory=lambda: {"replace": 1.0, "set": 1.0, "push": 1.0})
    cleanup: bool = False  # $unset the outbox right after each write (seed 003's cleanup)
    rate: float = 0.0  # writes per second; 0 = as fast as MongoDB takes them

    def problems(self) -> list[tuple[str, str]]:
        found = []
        for name in ("writes", "documents", "entries_max"):
            if getattr(self, name) < 1:
                found.append((name, f"must be >= 1, got {getattr(self, name)}"))
        if not self.topics or not all(isinstance(t, str) and t for t in self.topics):
            found.append(("topics", f"must be a list of topic names, got {list(self.topics)}"))
        updates = {op.value for op in WriteOp} - {WriteOp.INSERT.value}
        for op, weight in self.mix.items():
            if op not in updates:
                found.append((f"mix.{op}", f"unknown shape (known: {', '.join(sorted(updates))})"))
            elif not isinstance(weight, int | float) or weight < 0:
                found.append((f"mix.{op}", f"must be a number >= 0, got {weight!r}"))
        if not any(w > 0 for w in self.mix.values() if isinstance(w, int | float)):
            found.append(("mix", "needs a weight > 0 for at least one shape"))
        if self.rate < 0:
            found.append(("rate", f"must be >= 0, got {self.rate}"))
        return found


@dataclass(frozen=True)
class OutboxEntry:
    entry_id: str
    order_id: int
    version: int  # the entry's number among its order's entries (1, 2, ...)
    message_name: str
    target_topic: str
    created_ms: int
    after: dict[str, Any]

    def document(self) -> dict[str, Any]:
        """The entry as the application stores it in the document's outbox array."""
        return {
            "_id": self.entry_id,
            "createdAt": self.created_ms,
            "entityName": "Order",
            "entityId": str(self.order_id),
            "messageName": self.message_name,
            "targetTopic": self.target_topic,
            "event_id": self.entry_id,
            "order_id": self.order_id,
            "version": self.version,
            "payload": {
                "op": "c" if self.version == 1 else "u",
                "before": None,
                "after": self.after,
                "source": {"txId": self.entry_id, "ts_ms": self.created_ms, "table": "orders"},
            },
        }


@dataclass(frozen=True)
class OutboxWrite:
    seq: int
    op: WriteOp
    order_id: int
    status: str
    entries: tuple[OutboxEntry, ...]


def generate_writes(spec: OutboxSpec, seed: int) -> Iterator[OutboxWrite]:
    """The application's writes, in order: the same spec and seed give the same writes."""
    rng = random.Random(f"outbox:{seed}")
    shapes = [WriteOp(op) for op in sorted(spec.mix) if spec.mix[op] > 0]
    weights = [spec.mix[op.value] for op in shapes]
    versions: dict[int, int] = {}
    for seq in range(spec.writes):
        order_id = rng.randint(1, spec.documents)
        op = WriteOp.INSERT if order_id not in versions else rng.choices(shapes, weights)[0]
        status = rng.choice(STATUSES)
        entries = []
        for _ in range(rng.randint(1, spec.entries_max)):
            version = versions.get(order_id, 0) + 1
            versions[order_id] = version
            entries.append(
                OutboxEntry(
                    entry_id=f"m-{rng.getrandbits(64):016x}",
                    order_id=order_id,
                    version=version,
                    message_name="OrderCreated" if version == 1 else "OrderUpdated",
                    target_topic=rng.choice(spec.topics),
                    created_ms=BASE_TS_MS + seq * 10,
                    after={"order_id": order_id, "version": version, "status": status},
                )
            )
        yield OutboxWrite(seq, op, order_id, status, tuple(entries))
