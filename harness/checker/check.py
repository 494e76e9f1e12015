"""The checker: a pure function from (ledger, sink snapshot, fault windows) to a verdict.

It is vectorised with numpy so that a million-row ledger against a million-document sink is
judged in seconds: a business change (order_id, version) is encoded as one int64, and every
question ("which changes are missing", "how many copies") becomes a sort, a unique or a search
over those integers. The only Python loops run over fault windows, over partitions, and over
the at most `max_anomalies` anomalies that are materialised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.history.windows import FaultWindow
from harness.workload.events import Kind

from .model import KIND_CODES, Anomaly, LedgerArrays, SinkSnapshot, Verdict

# A business change is encoded as order_id * 2**VERSION_BITS + version: sorting the codes
# sorts by order then version, which is what finding "the highest version of an order" needs.
VERSION_BITS = 24
MAX_VERSION = 2**VERSION_BITS - 1
MAX_ORDER_ID = 2 ** (63 - VERSION_BITS) - 1
# A record in the topic, (partition, offset), is encoded the same way.
OFFSET_BITS = 40
MAX_OFFSET = 2**OFFSET_BITS - 1
MAX_PARTITION = 2 ** (63 - OFFSET_BITS) - 1

_POISON = KIND_CODES[Kind.POISON]
# When anomalies must be truncated, each kind gets a fair share of the room, in this order of
# precedence for what is left over; and anomalies at the same instant are listed in this order.
_KIND_ORDER = ("lost", "stale", "duplicate")


def check(
    ledger: LedgerArrays,
    sink: SinkSnapshot,
    *,
    produced: int,
    windows: Sequence[FaultWindow] = (),
    max_anomalies: int = 1000,
    stored_twice: Sequence[tuple[int, int]] = (),
    stopped: str = "",
) -> Verdict:
    """Judge one variant's sink against the ledger of what the broker acknowledged.

    * Expected business changes: distinct (order_id, version) over acked normal, resend and
      copy rows (a resend or a source's copy repeats a change: it is not a second change).
    * The sink's landing collection should hold each expected change exactly once: extra
      copies are duplicates, absent ones are lost, unexplained ones are phantoms.
    * The projection (current-state collection) should show, per order with acked changes,
      at least its highest acked version; below that (or missing) the order is stale.
    * Every acked poison record should be in the dead-letter topic.
    * A variant that stores offsets should have stored, per partition with acked rows, that
      partition's highest acked offset.
    * ``stored_twice``: the business change (order_id, version) of every record the topic
      holds beyond the first of its event id (a producer's retry Kafka stored again). Each is
      a copy every consumer was handed: a sink's copy it accounts for is the topic's
      (``topic_duplicates``), not the variant's (``duplicates``, ``copies``, the anomalies).
    * ``stopped``: why the variant's pipeline stopped for good, as its history says (its
      ``FAILED_FOR_GOOD``), if it did: what it had not stored by then is lost.

    Anomalies (one per duplicate copy, lost change, stale order) are attributed to the first
    fault window containing their time. When there are more than `max_anomalies`, the earliest
    of each kind are kept, the room shared fairly between kinds so that a flood of duplicates
    cannot hide a loss; `anomalies_total` counts them all. The list is in time order.

    Raises ValueError when an order_id, version, partition or offset is outside what the
    int64 encodings can hold (see VERSION_BITS, OFFSET_BITS).
    """
    if max_anomalies < 0:
        raise ValueError(f"max_anomalies must be >= 0, got {max_anomalies}")
    expected = _expected_changes(ledger)
    sink_changes = _sink_changes(sink, stored_twice)

    lost = ~_in_sorted(expected.keys, sink_changes.keys)
    phantom = ~_in_sorted(sink_changes.keys, expected.keys)
    stale = _stale_orders(expected, sink)
    dead_lettered, poison_missing = _poison(ledger, sink)
    own = sink_changes.counts - sink_changes.topic_share
    copies = own[own >= 2]
    histogram = dict(zip(*np.unique(copies, return_counts=True), strict=True))

    found = {
        "lost": Found(
            expected.keys[lost] >> VERSION_BITS,
            expected.keys[lost] & MAX_VERSION,
            expected.first_acked[lost],
        ),
        "stale": stale,
        "duplicate": Found(
            sink_changes.extra_keys >> VERSION_BITS,
            sink_changes.extra_keys & MAX_VERSION,
            sink_changes.extra_at,
        ),
    }
    in_sink = len(sink.changes_order_id)
    unique_in_sink = len(sink_changes.keys)
    topic_duplicates = int(sink_changes.topic_share.sum())
    return Verdict(
        produced=int(produced),
        acked=ledger.acknowledged,
        expected=len(expected.keys),
        in_sink=in_sink,
        unique_in_sink=unique_in_sink,
        duplicates=in_sink - unique_in_sink - topic_duplicates,
        duplicated_keys=len(copies),
        copies={int(n): int(count) for n, count in histogram.items()},
        lost=int(lost.sum()),
        phantoms=int(phantom.sum()),
        stale=len(stale.at),
        dead_lettered=dead_lettered,
        poison_missing=poison_missing,
        offsets_consistent=_offsets_consistent(ledger, sink.stored_offsets),
        anomalies=place_anomalies(found, windows, max_anomalies),
        anomalies_total=sum(len(f.at) for f in found.values()),
        topic_duplicates=topic_duplicates,
        stopped=stopped,
        poison_stored=sink.poison_stored,
    )


# --- encodings ------------------------------------------------------------------------------


def encode_changes(order_id: np.ndarray, version: np.ndarray, what: str) -> np.ndarray:
    """(order_id, version) pairs as single int64 codes, ordered as the pairs are."""
    bad = (order_id < 0) | (order_id > MAX_ORDER_ID) | (version < 0) | (version > MAX_VERSION)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{what}: business change (order_id={int(order_id[i])}, version={int(version[i])}) "
            f"at index {i} is out of the checker's range: it needs 0 <= order_id <= "
            f"{MAX_ORDER_ID} and 0 <= version <= {MAX_VERSION} (2**{VERSION_BITS} - 1)"
        )
    return (order_id.astype(np.int64) << VERSION_BITS) | version.astype(np.int64)


def encode_records(partition: np.ndarray, offset: np.ndarray, what: str) -> np.ndarray:
    """(partition, offset) pairs as single int64 codes."""
    bad = (partition < 0) | (partition > MAX_PARTITION) | (offset < 0) | (offset > MAX_OFFSET)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{what}: record (partition={int(partition[i])}, offset={int(offset[i])}) at index "
            f"{i} is out of the checker's range: it needs 0 <= partition <= {MAX_PARTITION} "
            f"and 0 <= offset <= {MAX_OFFSET}"
        )
    return (partition.astype(np.int64) << OFFSET_BITS) | offset.astype(np.int64)


def _in_sorted(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """Per value, whether it is in ``sorted_unique`` (sorted, no repeats): a binary search,
    where ``np.isin`` sorts both arrays together - on a large ledger its temporaries dominate
    the check's peak memory (docs/performance.md)."""
    if not len(sorted_unique):
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(sorted_unique, values)
    np.minimum(at, len(sorted_unique) - 1, out=at)
    found: np.ndarray = sorted_unique[at] == values
    return found


def _group_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Indices where a run of equal values starts in a sorted array."""
    if not len(sorted_keys):
        return np.empty(0, dtype=np.intp)
    return np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))


def _group_ends(sorted_keys: np.ndarray) -> np.ndarray:
    """Indices where a run of equal values ends (its last element) in a sorted array."""
    if not len(sorted_keys):
        return np.empty(0, dtype=np.intp)
    return np.flatnonzero(np.concatenate((sorted_keys[1:] != sorted_keys[:-1], [True])))


# --- the parts of the verdict ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Expected:
    keys: np.ndarray  # sorted distinct business changes of the rows not poison
    first_acked: np.ndarray  # per key: acked_at of its earliest acked row


@dataclass(frozen=True, eq=False)
class _SinkChanges:
    keys: np.ndarray  # sorted distinct business changes in the landing collection
    counts: np.ndarray  # per key: its number of copies
    topic_share: np.ndarray  # per key: how many of its extra copies the topic accounts for
    extra_keys: np.ndarray  # one per extra copy of the variant's own (see _sink_changes)
    extra_at: np.ndarray  # written_at of that extra copy


@dataclass(frozen=True, eq=False)
class Found:
    """Anomalies of one kind, as columns."""

    order_id: np.ndarray
    version: np.ndarray
    at: np.ndarray


def _expected_changes(ledger: LedgerArrays) -> _Expected:
    changes = ledger.kind != _POISON  # a poison row's version is meaningless
    keys = encode_changes(ledger.order_id[changes], ledger.version[changes], "ledger")
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    starts = _group_starts(keys)
    if not len(starts):
        return _Expected(keys, np.empty(0, dtype=np.float64))
    first_acked = np.minimum.reduceat(ledger.acked_at[changes][order], starts)
    return _Expected(keys[starts], first_acked)


def _sink_changes(sink: SinkSnapshot, stored_twice: Sequence[tuple[int, int]]) -> _SinkChanges:
    keys = encode_changes(sink.changes_order_id, sink.changes_version, "sink changes")
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = _group_starts(sorted_keys)
    counts = np.diff(np.append(starts, len(keys)))
    distinct = sorted_keys[starts]
    share = _topic_share(distinct, counts, stored_twice)
    # Only changes with several copies need their copies ordered by written_at (the first
    # written is the original): sorting just those is much cheaper than sorting every copy.
    copied = order[np.repeat(counts >= 2, counts)]
    copied = copied[np.lexsort((sink.changes_written_at[copied], keys[copied]))]
    # Each copy's rank among its change's copies: 0 is the original, the next ``share`` are
    # the topic's (its second record came right after the first), the rest the variant's own.
    group = _group_starts(keys[copied])
    rank = np.arange(len(copied)) - np.repeat(group, np.diff(np.append(group, len(copied))))
    topic = share[np.searchsorted(distinct, keys[copied])] if len(copied) else rank
    extra_rows = copied[rank > topic]
    return _SinkChanges(
        distinct, counts, share, keys[extra_rows], sink.changes_written_at[extra_rows]
    )


def _topic_share(
    distinct: np.ndarray, counts: np.ndarray, stored_twice: Sequence[tuple[int, int]]
) -> np.ndarray:
    """Per distinct change of the sink, how many of its extra copies are the topic's: one per
    extra record of it in the topic, at most all its copies but one."""
    share = np.zeros(len(distinct), dtype=np.int64)
    if not stored_twice or not len(distinct):
        return share
    pairs = np.asarray(stored_twice, dtype=np.int64).reshape(-1, 2)
    codes = encode_changes(pairs[:, 0], pairs[:, 1], "records stored twice")
    at = np.minimum(np.searchsorted(distinct, codes), len(distinct) - 1)
    present = distinct[at] == codes
    np.add.at(share, at[present], 1)
    capped: np.ndarray = np.minimum(share, counts - 1)
    return capped


def _stale_orders(expected: _Expected, sink: SinkSnapshot) -> Found:
    """Orders whose projection is behind their highest acked version (or missing)."""
    if not sink.projection_kept:
        none = np.zeros(0, dtype=np.int64)
        return Found(none, none, np.zeros(0, dtype=np.float64))
    # Keys are sorted by (order, version): each order's last key is its highest version.
    last = _group_ends(expected.keys >> VERSION_BITS)
    order_id = expected.keys[last] >> VERSION_BITS
    top_version = expected.keys[last] & MAX_VERSION
    top_acked = expected.first_acked[last]

    by_order = np.argsort(sink.projection_order_id, kind="stable")
    projected_orders = sink.projection_order_id[by_order]
    projected_versions = sink.projection_version[by_order]
    present = np.zeros(len(order_id), dtype=bool)
    projected = np.zeros(len(order_id), dtype=np.int64)  # 0 stands for "no projection"
    if len(projected_orders):
        i = np.minimum(np.searchsorted(projected_orders, order_id), len(projected_orders) - 1)
        present = projected_orders[i] == order_id
        projected = np.where(present, projected_versions[i], 0)
    stale = ~present | (projected < top_version)
    return Found(order_id[stale], projected[stale], top_acked[stale])


def _poison(ledger: LedgerArrays, sink: SinkSnapshot) -> tuple[int, int]:
    """(dead-lettered, missing) distinct acked poison records. A poison row acked without an
    offset (-1, see the ledger) cannot be matched to its dead letter and is left out."""
    poison = (ledger.kind == _POISON) & (ledger.offset >= 0)
    acked = np.unique(
        encode_records(ledger.partition[poison], ledger.offset[poison], "ledger poison rows")
    )
    dead = np.unique(
        encode_records(sink.dead_lettered_partition, sink.dead_lettered_offset, "dead_lettered")
    )
    found = int(np.isin(acked, dead, assume_unique=True).sum())
    return found, len(acked) - found


def _offsets_consistent(ledger: LedgerArrays, stored: Mapping[int, int] | None) -> bool | None:
    """Whether every partition with acked rows has its highest acked offset stored (rows
    acked without an offset, -1, say nothing about it)."""
    if stored is None:
        return None
    known = ledger.offset >= 0
    offsets, partitions = ledger.offset[known], ledger.partition[known]
    order = np.lexsort((offsets, partitions))
    partitions = partitions[order]
    last = _group_ends(partitions)  # per partition, its highest offset
    highest = offsets[order][last]
    return all(stored.get(int(p)) == int(o) for p, o in zip(partitions[last], highest, strict=True))


# --- anomalies ------------------------------------------------------------------------------


def place_anomalies(
    found: Mapping[str, Found], windows: Sequence[FaultWindow], limit: int
) -> list[Anomaly]:
    """At most `limit` anomalies, the earliest of each kind, fairly shared, in time order."""
    room = _share(limit, [len(found[kind].at) for kind in _KIND_ORDER])
    chosen = []
    for rank, (kind, n) in enumerate(zip(_KIND_ORDER, room, strict=True)):
        part = found[kind]
        pick = _earliest(part, n)
        chosen.append((rank, part.order_id[pick], part.version[pick], part.at[pick]))
    ranks = np.concatenate([np.full(len(c[1]), c[0], dtype=np.int8) for c in chosen])
    order_id = np.concatenate([c[1] for c in chosen])
    version = np.concatenate([c[2] for c in chosen])
    at = np.concatenate([c[3] for c in chosen]).astype(np.float64)
    timeline = np.lexsort((version, order_id, ranks, at))
    names = _window_names(at[timeline], windows)
    return [
        Anomaly(_KIND_ORDER[ranks[j]], int(order_id[j]), int(version[j]), float(at[j]), name)
        for j, name in zip(timeline, names, strict=True)
    ]


def _share(limit: int, counts: list[int]) -> list[int]:
    """Split `limit` between kinds with `counts` anomalies: each gets an equal share, what a
    kind does not need goes to the others, and a remainder goes to the earlier kinds."""
    room = [0] * len(counts)
    left = limit
    open_kinds = [k for k, n in enumerate(counts) if n > 0]
    while left > 0 and open_kinds:
        share = max(left // len(open_kinds), 1)
        for k in list(open_kinds):
            take = min(share, counts[k] - room[k], left)
            room[k] += take
            left -= take
            if room[k] == counts[k]:
                open_kinds.remove(k)
    return room


def _earliest(found: Found, n: int) -> np.ndarray:
    """Indices of the `n` earliest anomalies (ties broken by order_id, version)."""
    total = len(found.at)
    if n >= total:
        candidates = np.arange(total)
    elif n == 0:
        return np.empty(0, dtype=np.intp)
    else:
        # Partition first so that only the candidates, not all anomalies, are sorted.
        cutoff = np.partition(found.at, n - 1)[n - 1]
        candidates = np.flatnonzero(found.at <= cutoff)
    order = np.lexsort(
        (found.version[candidates], found.order_id[candidates], found.at[candidates])
    )
    return candidates[order][:n]


def _window_names(at: np.ndarray, windows: Sequence[FaultWindow]) -> list[str | None]:
    """The name of the first window containing each time, else None."""
    index = np.full(len(at), -1, dtype=np.int64)
    for w, window in enumerate(windows):
        inside = (index < 0) & (at >= window.start) & (at <= window.end)
        index[inside] = w
    return [windows[w].name if w >= 0 else None for w in index.tolist()]
