"""The checker's data types: the ledger and a sink snapshot as columns, fault windows, verdicts.

Everything here is a frozen dataclass. The bulk data are numpy arrays (one element per ledger
row or per sink document) because the checker has to judge a million events in seconds; the
arrays are stored as read-only views, so a value that was validated stays valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np
from numpy.typing import ArrayLike

from harness.checker.bad_records import DeadLetter, Fate, GoodDeadLettered, Outcome
from harness.workload.events import Kind
from harness.workload.ledger import LedgerRow

# The int8 code of each ledger kind in `LedgerArrays.kind`.
KIND_CODES: Mapping[Kind, int] = {Kind.NORMAL: 0, Kind.RESEND: 1, Kind.POISON: 2, Kind.COPY: 3}
KIND_NAMES: Mapping[int, Kind] = {code: kind for kind, code in KIND_CODES.items()}


def _column(name: str, values: Any, dtype: type[np.generic]) -> np.ndarray:
    """`values` as a read-only 1-D array of `dtype`, or a ValueError naming the column."""
    try:
        array = np.asarray(values, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{name}: cannot be read as {np.dtype(dtype).name}: {exc}") from None
    if array.ndim != 1:
        raise ValueError(f"{name}: must be one-dimensional, got shape {array.shape}")
    # A view, so that freezing it leaves the caller's own array writable.
    array = array.view()
    array.flags.writeable = False
    return array


def _same_length(what: str, columns: Mapping[str, np.ndarray]) -> None:
    lengths = {name: len(array) for name, array in columns.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name}={n}" for name, n in lengths.items())
        raise ValueError(f"{what}: columns differ in length ({listed})")


def _freeze_columns(obj: object, dtypes: Mapping[str, type[np.generic]]) -> None:
    for name, dtype in dtypes.items():
        object.__setattr__(obj, name, _column(name, getattr(obj, name), dtype))


@dataclass(frozen=True, eq=False)
class LedgerArrays:
    """The ledger as columns: one element per record the broker acknowledged.

    The ledger (harness.workload.ledger) is every record the broker acked: (seq, event_id,
    order_id, version, kind, topic, partition, offset, acked_at). The checker needs only the
    columns kept here. Kinds (`kind` holds their `KIND_CODES`):

    * ``normal`` - a business change, identified by (order_id, version);
    * ``resend`` - the same business change sent again upstream with a NEW event_id;
    * ``poison`` - an unparseable record that must end up in the dead-letter topic; its
      version is 0 and meaningless;
    * ``copy`` - a change a CDC source put on the topic again, with the same identity (its
      LSN): not a second change either.

    (partition, offset) identify a record only within one topic, so a ledger holds the rows of
    one topic: the loaders refuse a mix unless told which topic to keep.
    """

    KIND_CODES: ClassVar[Mapping[Kind, int]] = KIND_CODES

    order_id: np.ndarray  # int64
    version: np.ndarray  # int64
    kind: np.ndarray  # int8, see KIND_CODES
    partition: np.ndarray  # int32
    offset: np.ndarray  # int64
    acked_at: np.ndarray  # float64, unix seconds

    _DTYPES: ClassVar[Mapping[str, type[np.generic]]] = {
        "order_id": np.int64,
        "version": np.int64,
        "kind": np.int8,
        "partition": np.int32,
        "offset": np.int64,
        "acked_at": np.float64,
    }

    if TYPE_CHECKING:
        # The generated __init__ takes anything array-like; __post_init__ makes the arrays.
        def __init__(
            self,
            order_id: ArrayLike,
            version: ArrayLike,
            kind: ArrayLike,
            partition: ArrayLike,
            offset: ArrayLike,
            acked_at: ArrayLike,
        ) -> None: ...

    def __post_init__(self) -> None:
        _freeze_columns(self, self._DTYPES)
        _same_length("LedgerArrays", {name: getattr(self, name) for name in self._DTYPES})
        unknown = ~np.isin(self.kind, np.array(list(KIND_NAMES), dtype=np.int8))
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            raise ValueError(
                f"LedgerArrays: row {i} has kind code {int(self.kind[i])}, "
                f"expected one of {dict(KIND_NAMES)}"
            )

    def __len__(self) -> int:
        return len(self.order_id)

    @property
    def acknowledged(self) -> int:
        """Rows the source acknowledged: all but a CDC source's copies (a record put on the
        topic again is not a change committed again)."""
        return len(self) - int(np.count_nonzero(self.kind == KIND_CODES[Kind.COPY]))

    def end_offsets(self) -> dict[int, int]:
        """Partition -> the offset after its last acknowledged record: a consumer that
        committed that far has read everything (an ack without an offset, -1, counts 0)."""
        ends: dict[int, int] = {}
        for p, o in zip(self.partition.tolist(), self.offset.tolist(), strict=True):
            ends[p] = max(ends.get(p, 0), o + 1)
        return ends

    @classmethod
    def of_changes(cls, changes: Sequence[tuple[int, int, float]]) -> Self:
        """Expected changes ``(order_id, version, at)`` at no Kafka position (-1): a stage whose
        truth is not a producer's acknowledgements (an outbox's entries, a database's
        commits)."""
        return cls(
            order_id=[c[0] for c in changes],
            version=[c[1] for c in changes],
            kind=[KIND_CODES[Kind.NORMAL]] * len(changes),
            partition=[-1] * len(changes),
            offset=[-1] * len(changes),
            acked_at=[c[2] for c in changes],
        )

    @classmethod
    def from_rows(cls, rows: Iterable[LedgerRow], *, topic: str | None = None) -> Self:
        """Columns from ledger rows (e.g. ``read_ledger(path)``); see `select_topic`."""
        kept = [row for row in rows if topic is None or row.topic == topic]
        if topic is None:
            require_one_topic({row.topic for row in kept})
        return cls(
            order_id=[row.order_id for row in kept],
            version=[row.version for row in kept],
            kind=[KIND_CODES[Kind(row.kind)] for row in kept],
            partition=[row.partition for row in kept],
            offset=[row.offset for row in kept],
            acked_at=[row.acked_at for row in kept],
        )


def require_one_topic(topics: set[str]) -> None:
    if len(topics) > 1:
        raise ValueError(
            f"the ledger holds rows of several topics {sorted(topics)}; (partition, offset) "
            "is only unique within one topic: pass topic= to choose"
        )


@dataclass(frozen=True, eq=False)
class SinkSnapshot:
    """The final state one variant left in MongoDB (and in the dead-letter topic).

    * ``changes_*`` - one element per document in the variant's landing collection:
      (order_id, version, written_at in unix seconds). Copies of one business change are
      separate documents, which is what the checker counts.
    * ``projection_*`` - one element per order in the current-state collection: (order_id,
      version); a deleted order keeps a tombstone with its version. One entry per order.
    * ``dead_lettered_*`` - the (partition, offset) of every original record found in the
      dead-letter topic, in the topic's order; repeats are allowed (the checker counts distinct
      records). ``dead_lettered_reason``: the reason the sink gave for each, where read.
    * ``stored_offsets`` - for the transactional variant, {partition: last processed offset
      (inclusive)} as stored in MongoDB; None for variants that keep no offsets there.
    * ``projection_kept`` - False for a sink with no current-state collection (a user's
      program that keeps none): no order is stale then.
    """

    changes_order_id: np.ndarray  # int64
    changes_version: np.ndarray  # int64
    changes_written_at: np.ndarray  # float64
    projection_order_id: np.ndarray  # int64
    projection_version: np.ndarray  # int64
    dead_lettered_partition: np.ndarray  # int32
    dead_lettered_offset: np.ndarray  # int64
    stored_offsets: Mapping[int, int] | None = None
    projection_kept: bool = True
    # Documents of poison records in the landing collection: stored as if they were changes
    # (a sink that reads any JSON it is handed - Kafka Connect's - not the lab's consumers).
    poison_stored: int = 0
    dead_lettered_reason: tuple[str, ...] = ()

    _GROUPS: ClassVar[Mapping[str, Mapping[str, type[np.generic]]]] = {
        "changes": {
            "changes_order_id": np.int64,
            "changes_version": np.int64,
            "changes_written_at": np.float64,
        },
        "projection": {"projection_order_id": np.int64, "projection_version": np.int64},
        "dead_lettered": {"dead_lettered_partition": np.int32, "dead_lettered_offset": np.int64},
    }

    if TYPE_CHECKING:
        # The generated __init__ takes anything array-like; __post_init__ makes the arrays.
        def __init__(
            self,
            changes_order_id: ArrayLike,
            changes_version: ArrayLike,
            changes_written_at: ArrayLike,
            projection_order_id: ArrayLike,
            projection_version: ArrayLike,
            dead_lettered_partition: ArrayLike,
            dead_lettered_offset: ArrayLike,
            stored_offsets: Mapping[int, int] | None = None,
            projection_kept: bool = True,
            poison_stored: int = 0,
            dead_lettered_reason: tuple[str, ...] = (),
        ) -> None: ...

    def __post_init__(self) -> None:
        for group, dtypes in self._GROUPS.items():
            _freeze_columns(self, dtypes)
            _same_length(f"SinkSnapshot.{group}", {name: getattr(self, name) for name in dtypes})
        orders = np.sort(self.projection_order_id)
        repeated = orders[1:][orders[1:] == orders[:-1]]
        if len(repeated):
            # The current-state collection is keyed by order: two documents for one order
            # mean the snapshot was read wrongly, and "the" projected version is undefined.
            raise ValueError(
                f"SinkSnapshot.projection: order {int(repeated[0])} appears more than once "
                f"({len(np.unique(repeated))} orders repeated); expected one entry per order"
            )
        if self.stored_offsets is not None:
            object.__setattr__(self, "stored_offsets", _offsets(self.stored_offsets))
        reasons = len(self.dead_lettered_reason)
        if reasons and reasons != len(self.dead_lettered_partition):
            raise ValueError(
                f"SinkSnapshot.dead_lettered_reason: {reasons} reasons for "
                f"{len(self.dead_lettered_partition)} dead-lettered records"
            )

    def dead_letters(self) -> list[DeadLetter]:
        """The dead-lettered records in the topic's order, each with its reason."""
        reasons = self.dead_lettered_reason or ("",) * len(self.dead_lettered_partition)
        return [DeadLetter(int(p), int(o), r) for p, o, r in zip(
            self.dead_lettered_partition.tolist(), self.dead_lettered_offset.tolist(), reasons,
            strict=True)]  # fmt: skip

    @classmethod
    def from_lists(
        cls,
        changes: Sequence[tuple[int, int, float]] = (),
        projection: Sequence[tuple[int, int]] = (),
        dead_lettered: Sequence[tuple[int, int]] = (),
        stored_offsets: Mapping[int, int] | None = None,
    ) -> Self:
        """A snapshot from plain tuples: changes (order_id, version, written_at), projection
        (order_id, version), dead_lettered (partition, offset)."""
        c = _tuples("changes", changes, 3)
        p = _tuples("projection", projection, 2)
        d = _tuples("dead_lettered", dead_lettered, 2)
        return cls(
            changes_order_id=c[0],
            changes_version=c[1],
            changes_written_at=c[2],
            projection_order_id=p[0],
            projection_version=p[1],
            dead_lettered_partition=d[0],
            dead_lettered_offset=d[1],
            stored_offsets=stored_offsets,
        )


def _tuples(name: str, items: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Split tuples of `width` into `width` columns, naming the first malformed item."""
    for i, item in enumerate(items):
        if len(item) != width:
            raise ValueError(f"{name}[{i}]: expected a tuple of {width} values, got {item!r}")
    return [[item[j] for item in items] for j in range(width)]


def _offsets(stored: Mapping[int, int]) -> dict[int, int]:
    try:
        return {int(partition): int(offset) for partition, offset in stored.items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"stored_offsets: expected {{partition: offset}}: {exc}") from None


@dataclass(frozen=True)
class Anomaly:
    """One thing the sink got wrong, placed on the timeline.

    * ``duplicate`` - one per extra copy of a business change; ``at`` is that copy's
      written_at (copies ordered by written_at, every one but the first is extra).
    * ``lost`` - an expected business change absent from the sink; ``at`` is the acked_at of
      its earliest acked row.
    * ``stale`` - an order whose projection is behind its highest acked version; ``version``
      is the projection's version (0 when the order has no projection) and ``at`` the acked_at
      of the (earliest) acked row of the order's highest version.

    ``window`` is the name of the first fault window containing ``at``, else None.
    """

    kind: str  # "duplicate" | "lost" | "stale"
    order_id: int
    version: int
    at: float
    window: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "order_id": self.order_id,
            "version": self.version,
            "at": self.at,
            "window": self.window,
        }


# The counts of a lane's bad records' outcomes: known only where its writes were followed.
FOLLOWED_COUNTS = (
    "bad_stored", "bad_merged", "bad_dropped", "bad_stopped", "displaced", "good_dead_lettered",
)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """What the checker found for one variant. Counts are of business changes (order_id,
    version) unless said otherwise.

    * ``produced`` - events the workload tried to send (passed in); ``acked`` - ledger rows
      but a CDC source's copies (what the source acknowledged: a change committed once).
    * ``expected`` - distinct business changes over the acked rows that are not poison.
    * ``in_sink`` - documents in the landing collection; ``unique_in_sink`` - distinct business
      changes among them; ``duplicates`` - extra copies of the variant's own;
      ``duplicated_keys`` - business changes with more than one copy; ``copies`` - {number of
      copies: how many business changes have exactly that many}, for 2 copies and more.
    * ``lost`` - expected business changes absent from the sink.
    * ``phantoms`` - distinct business changes in the sink that no acked row explains (a lab
      bug indicator: should be 0).
    * ``stale`` - orders with acked changes whose projection is below their highest acked
      version, or missing. A projection ahead of the ledger is not stale.
    * ``dead_lettered`` - distinct acked poison records found in the dead-letter topic;
      ``poison_missing`` - distinct acked poison records not found there; ``poison_stored`` -
      documents of poison records in the landing collection (not changes: counted apart).
    * ``offsets_consistent`` - None when the variant stores no offsets; else True iff every
      partition with acked rows has a stored offset equal to its highest acked offset.
    * ``anomalies`` - at most max_anomalies `Anomaly` records (see `check` for which are
      kept); ``anomalies_total`` - how many there were before truncation.
    * ``topic_duplicates`` - extra copies that are the topic's: it held the record more than
      once (a producer's retry Kafka stored again), so every consumer was handed it again.
      ``duplicates``, ``duplicated_keys``, ``copies`` and the anomalies are the variant's own:
      in_sink - unique_in_sink = duplicates + topic_duplicates.
    * ``stopped`` - why the variant's pipeline stopped for good ('' if it did not): a Spark
      query that kept failing through a minute of restarts. The run went on without it.
    * ``bad`` - each bad record's outcome in the lane (``harness.checker.bad_records``), where
      its writes were followed; ``bad_stored``, ``bad_merged``, ``bad_dropped``,
      ``bad_stopped`` count them, and ``displaced`` the good changes whose documents a bad
      record took over. ``dead_lettered_good``: the good records in its dead-letter topic, in
      runs, each named with the bad record whose refused write skipped them where one did;
      ``good_dead_lettered`` counts them.
    """

    produced: int
    acked: int
    expected: int
    in_sink: int
    unique_in_sink: int
    duplicates: int
    duplicated_keys: int
    copies: dict[int, int]
    lost: int
    phantoms: int
    stale: int
    dead_lettered: int
    poison_missing: int
    offsets_consistent: bool | None
    anomalies: list[Anomaly]
    anomalies_total: int
    topic_duplicates: int = 0
    stopped: str = ""
    poison_stored: int = 0
    bad: tuple[Fate, ...] = ()
    # Whether the lane's writes were followed: without that, no outcome but dead-lettered
    # is known, and ``bad`` is empty.
    followed: bool = False
    dead_lettered_good: tuple[GoodDeadLettered, ...] = ()

    def _outcomes(self, outcome: Outcome) -> int:
        return sum(1 for f in self.bad if f.outcome is outcome)

    @property
    def bad_stored(self) -> int:
        return self._outcomes(Outcome.STORED)

    @property
    def bad_merged(self) -> int:
        return self._outcomes(Outcome.MERGED)

    @property
    def bad_dropped(self) -> int:
        return self._outcomes(Outcome.DROPPED)

    @property
    def bad_stopped(self) -> int:
        return self._outcomes(Outcome.STOPPED)

    @property
    def good_dead_lettered(self) -> int:
        return sum(g.count for g in self.dead_lettered_good)

    @property
    def displaced(self) -> int:
        """Bad records that took over a good change's document."""
        return sum(1 for f in self.bad if f.change is not None)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values: copies' keys become strings, anomalies and fates dicts."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "copies":
                value = {str(n): count for n, count in sorted(value.items())}
            elif f.name == "anomalies":
                value = [anomaly.to_dict() for anomaly in value]
            elif f.name in ("bad", "dead_lettered_good"):
                value = [item.to_dict() for item in value]
            out[f.name] = value
        for name in FOLLOWED_COUNTS:
            out[name] = getattr(self, name)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Verdict:
        """The inverse of ``to_dict`` (missing counts read as 0; other keys are ignored)."""

        def count(name: str) -> int:
            return int(raw.get(name) or 0)

        anomalies = [
            Anomaly(
                kind=str(a["kind"]),
                order_id=int(a.get("order_id", 0)),
                version=int(a.get("version", 0)),
                at=float(a["at"]),
                window=a.get("window"),
            )
            for a in raw.get("anomalies") or ()
        ]
        offsets_consistent = raw.get("offsets_consistent")
        return cls(
            produced=count("produced"),
            acked=count("acked"),
            expected=count("expected"),
            in_sink=count("in_sink"),
            unique_in_sink=count("unique_in_sink"),
            duplicates=count("duplicates"),
            duplicated_keys=count("duplicated_keys"),
            copies={int(n): int(c) for n, c in (raw.get("copies") or {}).items()},
            lost=count("lost"),
            phantoms=count("phantoms"),
            stale=count("stale"),
            dead_lettered=count("dead_lettered"),
            poison_missing=count("poison_missing"),
            offsets_consistent=None if offsets_consistent is None else bool(offsets_consistent),
            anomalies=anomalies,
            anomalies_total=int(raw.get("anomalies_total", len(anomalies)) or 0),
            topic_duplicates=count("topic_duplicates"),
            stopped=str(raw.get("stopped") or ""),
            poison_stored=count("poison_stored"),
            bad=tuple(Fate.from_dict(f) for f in raw.get("bad") or ()),
            dead_lettered_good=tuple(
                GoodDeadLettered.from_dict(g) for g in raw.get("dead_lettered_good") or ()
            ),
            followed=bool(raw.get("followed")),
        )


RELAY, SOURCE = "relay", "source"  # whose stage a RelayStage is


@dataclass(frozen=True)
class RelayStage:
    """The stage upstream of a lane's sink, beside the end-to-end verdict: ``published`` judges
    what the topic(s) hold against the upstream truth (duplicates: extra copies on them; lost:
    changes never put there).

    * ``of: relay`` - an outbox relay's (seed 003): its target topics against the entries
      MongoDB acknowledged; ``history_lost`` counts the times the relay could not resume its
      change stream (ChangeStreamHistoryLost);
    * ``of: source`` - a CDC source's (seed 000): the change topic against what the database
      committed, one stage every lane of the run shares; over a table that had rows, how many
      of the expected changes are the rows its snapshot was to read, and how many snapshots
      Debezium began and finished on the topic."""

    published: Verdict
    history_lost: int = 0
    of: str = RELAY
    snapshot_rows: int = 0
    snapshots: tuple[int, int] = (0, 0)  # (begun, finished)
    relayed_by: str = ""  # a source's that is an outbox's relay: the relay's label

    @property
    def source(self) -> bool:
        return self.of == SOURCE

    def to_dict(self) -> dict[str, Any]:
        return {"published": self.published.to_dict(), "history_lost": self.history_lost,
                "of": self.of, "snapshot_rows": self.snapshot_rows,
                "snapshots": list(self.snapshots), "relayed_by": self.relayed_by}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RelayStage:
        return cls(
            Verdict.from_dict(raw.get("published") or {}),
            int(raw.get("history_lost", 0)),
            str(raw.get("of") or RELAY),
            int(raw.get("snapshot_rows", 0)),
            tuple(raw.get("snapshots") or (0, 0)),
            str(raw.get("relayed_by") or ""),
        )
