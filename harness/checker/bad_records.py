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

A dead-lettered bad record keeps the reason the sink gave for it. A lane's dead-letter topic may
hold good records too: a sink whose bulk write is ordered stops at the write MongoDB refused and
reports every record after it as skipped (the MongoDB sink connector's ``WriteSkippedException``,
``errors.tolerance: all``). They are counted (``GoodDeadLettered``), each run of them with the
bad record whose refused write skipped them.

The evidence is the lane's write log - every write to its landing collection, in order, as
MongoDB's change stream gave it (``harness.pipeline.landing_watch``) - with each document's
content traced to its record by the record's event id (``lab_trace`` where its shape has none).
A document's previous holder is the record whose write the log showed last on it: a write that
replaces a document names what it took over, which the final collection alone cannot say (19
records merged into one document look like 18 dropped and 1 stored there).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
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
class DeadLetter:
    """A record in a lane's dead-letter topic: its origin on the run's topic, and the reason
    the sink gave ('' where its headers give none)."""

    partition: int
    offset: int
    reason: str = ""

    @property
    def skipped(self) -> bool:
        """Whether the sink sent it for a write before it that failed, not for itself."""
        return self.reason.startswith(SKIPPED)

    @property
    def refused(self) -> bool:
        """Whether the sink sent it because MongoDB refused its write."""
        return self.reason.startswith(REFUSED)


# The MongoDB sink connector's reasons (com.mongodb.kafka.connect.sink.dlq): a record whose
# write MongoDB refused in a bulk write, and one after it in an ordered bulk write, skipped with
# nothing wrong with it.
REFUSED = "WriteException"
SKIPPED = "WriteSkippedException"


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
    reason: str = ""  # a dead-lettered record's, as the sink gave it

    def to_dict(self) -> dict[str, Any]:
        r = self.record
        return {"event_id": r.event_id, "shape": r.shape, "partition": r.partition,
                "offset": r.offset, "order_id": r.order_id, "version": r.version,
                "outcome": self.outcome.value, "document": self.document,
                "displaced": self.displaced, "by": self.by,
                "change": list(self.change) if self.change else None,
                "reason": self.reason}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Fate:
        record = BadRecord(
            str(raw["event_id"]), str(raw["shape"]), int(raw["partition"]), int(raw["offset"]),
            int(raw["order_id"]), int(raw["version"]),
        )  # fmt: skip
        change = raw.get("change")
        return cls(record, Outcome(raw["outcome"]), str(raw.get("document") or ""),
                   str(raw.get("displaced") or ""), str(raw.get("by") or ""),
                   (int(change[0]), int(change[1])) if change else None,
                   str(raw.get("reason") or ""))  # fmt: skip

    def describe(self) -> str:
        """``key-as-string e-1f.. (partition 0, offset 41): merged into document {...},
        displacing change (17, 3) (e-9a..)``."""
        r = self.record
        what = f"{r.shape} {r.event_id} (partition {r.partition}, offset {r.offset}): "
        what += str(self.outcome)
        if self.reason:
            what += f" ({self.reason})"
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
    dead_lettered: Iterable[DeadLetter],
    *,
    stopped: bool,
    changes: Mapping[str, tuple[int, int]],
) -> tuple[Fate, ...]:
    """Each of ``bad``'s outcome in a lane whose landing collection saw ``writes`` (in order)
    and whose dead-letter topic holds ``dead_lettered``;
    ``changes``: each good record's event id -> its change (order_id, version), to name what a
    bad record displaced, and for a delete to be a tombstone's (the Kafka key it keeps is its
    order's)."""
    orders = {event_id: change[0] for event_id, change in changes.items()}
    orders |= {r.event_id: r.order_id for r in bad}
    dead = {(d.partition, d.offset): d.reason for d in dead_lettered}
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
            out.append(Fate(r, Outcome.DEAD_LETTERED, reason=dead[r.partition, r.offset]))
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


@dataclass(frozen=True)
class GoodDeadLettered:
    """A run of good records a lane dead-lettered, one after the other in its dead-letter topic,
    for one ``reason``; ``culprits``: the bad records whose refused write made the sink skip
    them, where they were skipped and the evidence names one."""

    count: int
    reason: str
    first: tuple[int, int]  # the run's first record's origin (partition, offset)
    culprits: tuple[BadRecord, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "reason": self.reason, "first": list(self.first),
                "culprits": [asdict(c) for c in self.culprits]}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> GoodDeadLettered:
        culprits = tuple(BadRecord(**c) for c in raw.get("culprits") or ())
        first = raw.get("first") or (0, 0)
        return cls(int(raw["count"]), str(raw["reason"]), (int(first[0]), int(first[1])),
                   culprits)  # fmt: skip

    def describe(self) -> str:
        """``108 good records (WriteSkippedException: ...), from partition 2 offset 470:
        skipped after the refused write of oversize e-..(partition 1, offset 467)``."""
        what = f"{self.count} good record{'s' if self.count != 1 else ''} ({self.reason}), "
        what += f"from partition {self.first[0]} offset {self.first[1]}"
        if self.culprits:
            named = ", ".join(f"{c.shape} {c.event_id} (partition {c.partition}, offset "
                              f"{c.offset})" for c in self.culprits)  # fmt: skip
            what += f": skipped after the refused write of {named}"
        elif self.reason.startswith(SKIPPED):
            what += ": skipped after a refused write the evidence does not name"
        return what


def good_dead_lettered(
    bad: Sequence[BadRecord], dead_lettered: Sequence[DeadLetter], found: Sequence[Fate]
) -> tuple[GoodDeadLettered, ...]:
    """The good records in a lane's ``dead_lettered`` (in its topic's order), in runs of one
    reason. A run skipped after a refused write (bad records skipped with it do not end it)
    names its culprit: the record the sink reported just before it as refused (the connector
    reports a failed bulk's records in the bulk's order: the refused one, then those it
    skipped) where that is a bad record; else - its report failed too, as a 16 MiB record's
    does - each bad record ``found`` written nowhere, or refused, whose next record on its
    partition is in the run (the bulk held the records after it)."""
    by_origin = {(r.partition, r.offset): r for r in bad}
    unwritten = {(f.record.partition, f.record.offset + 1): f.record for f in found
                 if f.outcome is Outcome.DROPPED or f.reason.startswith(REFUSED)}  # fmt: skip
    runs: list[GoodDeadLettered] = []
    for skipped, group in itertools.groupby(enumerate(dead_lettered), key=lambda i: i[1].skipped):
        letters = list(group)
        if skipped:
            good = [d for _, d in letters if (d.partition, d.offset) not in by_origin]
            if not good:
                continue
            at = letters[0][0]
            before = dead_lettered[at - 1] if at else None
            culprits: list[BadRecord] = []
            if before is not None and before.refused:
                if (b := by_origin.get((before.partition, before.offset))) is not None:
                    culprits.append(b)
            else:
                culprits = [unwritten[o] for o in dict.fromkeys((d.partition, d.offset)
                            for _, d in letters) if o in unwritten]  # fmt: skip
            first = (good[0].partition, good[0].offset)
            runs.append(GoodDeadLettered(len(good), good[0].reason, first, tuple(culprits)))
            continue
        # Each run of good records one after the other for one reason of their own.
        for (is_good, reason), same in itertools.groupby(
            (d for _, d in letters),
            key=lambda d: ((d.partition, d.offset) not in by_origin, d.reason),
        ):
            if is_good:
                one = list(same)
                runs.append(GoodDeadLettered(len(one), reason, (one[0].partition, one[0].offset)))
    return tuple(runs)


def tally(found: Iterable[Fate]) -> dict[str, dict[str, int]]:
    """{shape: {outcome: count}}, shapes and outcomes in a stable order."""
    counted = Counter((f.record.shape, f.outcome.value) for f in found)
    table: dict[str, dict[str, int]] = {}
    for (shape, outcome), n in sorted(counted.items()):
        table.setdefault(shape, {})[outcome] = n
    return table
