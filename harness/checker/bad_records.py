"""Where each bad record went, in one lane (pure: no servers).

A bad record (``harness.workload.shapes``) has exactly one outcome per lane:

* ``dead-lettered`` - in the lane's dead-letter topic (its origin in the headers);
* ``stored`` - a document of its own in the landing collection, that no other record's write
  took over;
* ``merged`` - its write went into a document another record's write had made (and that
  record's change is displaced: counted lost if it was a good change stored nowhere else), or
  another record's later write took its document over; a tombstone's delete of a document is
  one too;
* ``lane stopped`` - none of those, and the lane stopped for good;
* ``dropped`` - none of those: gone without trace.

The evidence is the lane's write log - every write to its landing collection, in order, as
MongoDB's change stream gave it (``harness.pipeline.landing_watch``) - with each document's
content traced to its record by the record's event id (``lab_trace`` where its shape has none).
A document's previous holder is the record whose write the log showed last on it: a write that
replaces a document names what it took over, which the final collection alone cannot say (19
records merged into one document look like 18 dropped and 1 stored there).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    DEAD_LETTERED = "dead-lettered"
    STORED = "stored"
    MERGED = "merged"
    STOPPED = "lane stopped"
    DROPPED = "dropped"


@dataclass(frozen=True)
class BadRecord:
    """A bad record the source acknowledged: its id (event id), shape and place on the topic;
    its order (the Kafka key a tombstone keeps) and version (a derived shape's change's)."""

    event_id: str
    shape: str
    partition: int
    offset: int
    order_id: int
    version: int


@dataclass(frozen=True)
class Write:
    """One write to the landing collection, as the change stream gave it: ``doc`` is the
    document's key (as JSON), ``trace`` the record its content came from ('' for a delete, or
    a document that names none)."""

    t: float
    op: str  # insert, replace, update, delete
    doc: str
    trace: str

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Write:
        return cls(float(raw["t"]), str(raw["op"]), str(raw["doc"]), str(raw.get("trace") or ""))


@dataclass(frozen=True)
class Fate:
    """One bad record's outcome in one lane: the document it went into (stored, merged), the
    record whose document it took over (``displaced``) or that took over its own (``by``)."""

    record: BadRecord
    outcome: Outcome
    document: str = ""
    displaced: str = ""
    by: str = ""
    change: tuple[int, int] | None = None  # the good change ``displaced`` carried, if one

    def to_dict(self) -> dict[str, Any]:
        r = self.record
        return {"event_id": r.event_id, "shape": r.shape, "partition": r.partition,
                "offset": r.offset, "order_id": r.order_id, "version": r.version,
                "outcome": self.outcome.value, "document": self.document,
                "displaced": self.displaced, "by": self.by,
                "change": list(self.change) if self.change else None}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Fate:
        record = BadRecord(
            str(raw["event_id"]), str(raw["shape"]), int(raw["partition"]), int(raw["offset"]),
            int(raw["order_id"]), int(raw["version"]),
        )  # fmt: skip
        change = raw.get("change")
        return cls(record, Outcome(raw["outcome"]), str(raw.get("document") or ""),
                   str(raw.get("displaced") or ""), str(raw.get("by") or ""),
                   (int(change[0]), int(change[1])) if change else None)  # fmt: skip

    def describe(self) -> str:
        """``key-as-string e-1f.. (partition 0, offset 41): merged into document {...},
        displacing change (17, 3) (e-9a..)``."""
        r = self.record
        what = f"{r.shape} {r.event_id} (partition {r.partition}, offset {r.offset}): "
        what += str(self.outcome)
        if self.document:
            what += (
                f" {'into' if self.outcome is Outcome.MERGED else 'as'} document {self.document}"
            )
        if self.change:
            what += f", displacing change {self.change} ({self.displaced})"
        elif self.displaced:
            what += f", over bad record {self.displaced}'s"
        if self.by:
            what += f", then taken over by record {self.by}"
        return what


def fates(
    bad: Sequence[BadRecord],
    writes: Iterable[Write],
    dead_lettered: Iterable[tuple[int, int]],
    *,
    stopped: bool,
    changes: Mapping[str, tuple[int, int]],
) -> tuple[Fate, ...]:
    """Each of ``bad``'s outcome in a lane whose landing collection saw ``writes`` (in order)
    and whose dead-letter topic holds ``dead_lettered`` origins (partition, offset);
    ``changes``: each good record's event id -> its change (order_id, version), to name what a
    bad record displaced, and for a delete to be a tombstone's (the Kafka key it keeps is its
    order's)."""
    orders = {event_id: change[0] for event_id, change in changes.items()}
    orders |= {r.event_id: r.order_id for r in bad}
    dead = set(dead_lettered)
    holder: dict[str, str] = {}  # document -> the record whose write it holds now
    first: dict[str, tuple[str, str]] = {}  # a record's first write: (document, taken over)
    taken_by: dict[str, str] = {}  # record -> the first other record to take its document over
    deletes: list[tuple[str, str]] = []  # (document, the record it held)
    for w in writes:
        before = holder.get(w.doc, "")
        if w.op == "delete":
            holder.pop(w.doc, None)
            deletes.append((w.doc, before))
            continue
        if not w.trace:
            continue
        holder[w.doc] = w.trace
        if w.trace not in first:
            first[w.trace] = (w.doc, before if before != w.trace else "")
        if before and before != w.trace:
            taken_by.setdefault(before, w.trace)
    tombstones = _deletes_of_tombstones(bad, deletes, orders)
    out = []
    for r in bad:
        if (r.partition, r.offset) in dead:
            out.append(Fate(r, Outcome.DEAD_LETTERED))
        elif r.event_id in first:
            doc, before = first[r.event_id]
            by = taken_by.get(r.event_id, "")
            outcome = Outcome.MERGED if before or by else Outcome.STORED
            out.append(Fate(r, outcome, doc, before, by, changes.get(before)))
        elif r.event_id in tombstones:
            doc, before = tombstones[r.event_id]
            out.append(Fate(r, Outcome.MERGED, doc, before, change=changes.get(before)))
        else:
            out.append(Fate(r, Outcome.STOPPED if stopped else Outcome.DROPPED))
    return tuple(out)


def _deletes_of_tombstones(
    bad: Sequence[BadRecord], deletes: Sequence[tuple[str, str]], orders: Mapping[str, int]
) -> dict[str, tuple[str, str]]:
    """Each delete of a document that held a change of an order, given to that order's
    earliest tombstone not given one yet: a sink deletes on a null value by its key."""
    waiting: dict[int, list[str]] = {}
    for r in bad:
        if r.shape == "tombstone":
            waiting.setdefault(r.order_id, []).append(r.event_id)
    found: dict[str, tuple[str, str]] = {}
    for doc, before in deletes:
        order = orders.get(before)
        if order is not None and waiting.get(order):
            found[waiting[order].pop(0)] = (doc, before)
    return found


def tally(found: Iterable[Fate]) -> dict[str, dict[str, int]]:
    """{shape: {outcome: count}}, shapes and outcomes in a stable order."""
    counted = Counter((f.record.shape, f.outcome.value) for f in found)
    table: dict[str, dict[str, int]] = {}
    for (shape, outcome), n in sorted(counted.items()):
        table.setdefault(shape, {})[outcome] = n
    return table
