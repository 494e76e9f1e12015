"""The checker (harness.checker): pure, no servers. Exact counts throughout."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.checker.check import MAX_VERSION, check
from harness.checker.load import load_ledger
from harness.checker.model import (
    FOLLOWED_COUNTS,
    KIND_CODES,
    Anomaly,
    LedgerArrays,
    SinkSnapshot,
    Verdict,
)
from harness.history.windows import FaultWindow
from harness.scenario import parse_scenario
from harness.workload.events import Kind
from harness.workload.ledger import LedgerRow, LedgerWriter, read_ledger

TOPIC = "orders"

# --- building ledgers and sinks -------------------------------------------------------------


class Ledger:
    """Ledger rows built up as a test needs them: offsets and acked_at count up by themselves."""

    def __init__(self, partitions: int = 1) -> None:
        self.rows: list[LedgerRow] = []
        self._next_offset = [0] * partitions

    def add(
        self,
        order_id: int,
        version: int,
        kind: Kind = Kind.NORMAL,
        *,
        partition: int | None = None,
        acked_at: float | None = None,
    ) -> LedgerRow:
        seq = len(self.rows)
        if partition is None:
            partition = order_id % len(self._next_offset)  # keyed by order, like Kafka
        offset = self._next_offset[partition]
        self._next_offset[partition] += 1
        row = LedgerRow(
            seq, f"e-{seq:016x}", order_id, version, kind, TOPIC, partition, offset,
            float(seq) if acked_at is None else acked_at,
        )  # fmt: skip
        self.rows.append(row)
        return row

    def arrays(self) -> LedgerArrays:
        return LedgerArrays.from_rows(self.rows)

    def changes(self) -> list[tuple[int, int]]:
        """Distinct business changes, in first-acked order."""
        seen: dict[tuple[int, int], None] = {}
        for row in self.rows:
            if row.kind is not Kind.POISON:
                seen.setdefault((row.order_id, row.version), None)
        return list(seen)

    def projection(self) -> list[tuple[int, int]]:
        """The projection a correct sink ends with: each order at its highest version."""
        top: dict[int, int] = {}
        for order_id, version in self.changes():
            top[order_id] = max(top.get(order_id, 0), version)
        return sorted(top.items())

    def poison(self) -> list[tuple[int, int]]:
        return [(r.partition, r.offset) for r in self.rows if r.kind is Kind.POISON]

    def last_offsets(self) -> dict[int, int]:
        last: dict[int, int] = {}
        for row in self.rows:
            last[row.partition] = max(last.get(row.partition, -1), row.offset)
        return last


def perfect_sink(ledger: Ledger, **overrides: Any) -> SinkSnapshot:
    """Exactly once: every change once, projection up to date, all poison dead-lettered."""
    parts: dict[str, Any] = {
        "changes": [(o, v, 1000.0 + i) for i, (o, v) in enumerate(ledger.changes())],
        "projection": ledger.projection(),
        "dead_lettered": ledger.poison(),
        "stored_offsets": ledger.last_offsets(),
    }
    parts.update(overrides)
    return SinkSnapshot.from_lists(**parts)


def judge(ledger: Ledger, sink: SinkSnapshot, **kwargs: Any) -> Verdict:
    kwargs.setdefault("produced", len(ledger.rows))
    return check(ledger.arrays(), sink, **kwargs)


def mixed_ledger() -> Ledger:
    """Three partitions, 40 orders with 1-3 versions each, some resends and poison."""
    ledger = Ledger(partitions=3)
    for order_id in range(1, 41):
        for version in range(1, order_id % 3 + 2):
            ledger.add(order_id, version)
    for order_id in (3, 9, 27):
        ledger.add(order_id, 1, Kind.RESEND)
    for order_id in (5, 6, 7, 8):
        ledger.add(order_id, 0, Kind.POISON)
    return ledger


# The bad records' outcomes: the runner's, from a lane's write log (tests/test_bad_records.py).
FOLLOWED = {"bad", "followed", "dead_lettered_good", *FOLLOWED_COUNTS}


def counts(verdict: Verdict) -> dict[str, Any]:
    """The verdict without the anomaly list and the bad records' outcomes (``check`` makes
    none), for one-line comparisons."""
    return {k: v for k, v in verdict.to_dict().items() if k != "anomalies" and k not in FOLLOWED}


# --- the headline cases ---------------------------------------------------------------------


def test_a_perfect_sink_has_no_anomalies() -> None:
    ledger = mixed_ledger()
    verdict = judge(ledger, perfect_sink(ledger), produced=90)

    assert counts(verdict) == {
        "produced": 90,
        "acked": 87,  # 80 changes + 3 resends + 4 poison
        "expected": 80,
        "in_sink": 80,
        "unique_in_sink": 80,
        "duplicates": 0,
        "duplicated_keys": 0,
        "copies": {},
        "lost": 0,
        "phantoms": 0,
        "stale": 0,
        "dead_lettered": 4,
        "poison_missing": 0,
        "offsets_consistent": True,
        "anomalies_total": 0,
        "topic_duplicates": 0,
        "stopped": "",
        "poison_stored": 0,
    }
    assert verdict.anomalies == []


def test_a_sink_dropping_every_7th_event_and_writing_every_5th_twice() -> None:
    ledger = Ledger(partitions=4)
    events = [(i // 4 + 1, i % 4 + 1) for i in range(1000)]  # 250 orders x versions 1..4
    for order_id, version in events:
        ledger.add(order_id, version)
    changes = []
    for i, (order_id, version) in enumerate(events):
        if i % 7 == 0:
            continue
        for copy in range(2 if i % 5 == 0 else 1):
            changes.append((order_id, version, 2000.0 + i + copy / 10))
    verdict = judge(ledger, perfect_sink(ledger, changes=changes))

    # Counted independently, plainly.
    dropped = [i for i in range(1000) if i % 7 == 0]
    doubled = [i for i in range(1000) if i % 5 == 0 and i % 7 != 0]
    assert verdict.lost == len(dropped)
    assert verdict.duplicates == len(doubled)
    assert verdict.duplicated_keys == len(doubled)
    assert verdict.in_sink == 1000 - len(dropped) + len(doubled)
    assert verdict.unique_in_sink == 1000 - len(dropped)
    assert verdict.copies == {2: len(doubled)}
    # And by hand: 0, 7, ..., 994 are dropped; of the 200 multiples of 5, the 29 multiples of
    # 35 (0..980) were dropped, so 171 are doubled.
    assert (verdict.lost, verdict.duplicates, verdict.duplicated_keys) == (143, 171, 171)
    assert (verdict.in_sink, verdict.unique_in_sink, verdict.copies) == (1028, 857, {2: 171})
    assert (verdict.expected, verdict.phantoms, verdict.stale) == (1000, 0, 0)
    assert verdict.anomalies_total == 143 + 171
    assert len(verdict.anomalies) == 314
    kinds = Counter(a.kind for a in verdict.anomalies)
    assert kinds == {"lost": 143, "duplicate": 171}
    # Lost at the first ack of the change, duplicates at the second copy's write.
    lost_at = sorted(a.at for a in verdict.anomalies if a.kind == "lost")
    assert lost_at == [float(i) for i in dropped]
    dup_at = sorted(a.at for a in verdict.anomalies if a.kind == "duplicate")
    assert dup_at == [2000.0 + i + 0.1 for i in doubled]


def test_copies_histogram_counts_changes_with_2_and_3_copies() -> None:
    ledger = Ledger()
    for order_id in range(1, 21):
        ledger.add(order_id, 1)
    copies_of = {o: 1 for o in range(1, 21)} | {o: 2 for o in range(1, 11)}
    copies_of |= {o: 3 for o in range(11, 15)}
    changes = [(o, 1, 10.0 * o + c) for o, n in copies_of.items() for c in range(n)]
    verdict = judge(ledger, perfect_sink(ledger, changes=changes))

    assert verdict.copies == {2: 10, 3: 4}
    assert verdict.duplicated_keys == 14
    assert verdict.duplicates == 10 * 1 + 4 * 2
    assert verdict.in_sink == 20 + 18
    assert verdict.unique_in_sink == 20
    assert verdict.to_dict()["copies"] == {"2": 10, "3": 4}
    # One anomaly per extra copy, at the extra copy's written_at.
    order_11 = [a for a in verdict.anomalies if a.order_id == 11]
    assert order_11 == [
        Anomaly("duplicate", 11, 1, 111.0, None),
        Anomaly("duplicate", 11, 1, 112.0, None),
    ]


def test_extra_copies_are_those_written_after_the_first() -> None:
    ledger = Ledger()
    ledger.add(1, 1)
    # Listed out of time order: the copy written at 5.0 is the original.
    changes = [(1, 1, 9.0), (1, 1, 5.0), (1, 1, 7.0)]
    verdict = judge(ledger, perfect_sink(ledger, changes=changes))
    assert [a.at for a in verdict.anomalies] == [7.0, 9.0]


def test_copies_of_a_record_the_topic_holds_twice_are_the_topics() -> None:
    # Order 1's record is in the topic twice (a producer's retry stored again): a sink not keyed
    # by the event id stores both - the topic's copy, not the variant's. Order 2's third copy
    # and order 3's second are the variant's own.
    ledger = Ledger()
    for order_id in (1, 2, 3):
        ledger.add(order_id, 1)
    changes = [(1, 1, 1.0), (1, 1, 2.0), (2, 1, 3.0), (2, 1, 4.0), (2, 1, 5.0), (3, 1, 6.0),
               (3, 1, 7.0)]  # fmt: skip
    twice = [(1, 1), (2, 1)]
    verdict = judge(ledger, perfect_sink(ledger, changes=changes), stored_twice=twice)
    assert (verdict.duplicates, verdict.topic_duplicates) == (2, 2)
    assert verdict.in_sink - verdict.unique_in_sink == verdict.duplicates + verdict.topic_duplicates
    assert (verdict.copies, verdict.duplicated_keys) == ({2: 2}, 2)
    # The topic's copy is the first after the original (its second record came right after).
    assert [(a.order_id, a.at) for a in verdict.anomalies] == [(2, 5.0), (3, 7.0)]
    assert Verdict.from_dict(verdict.to_dict()) == verdict

    # Keyed by the event id, one copy: nothing is the topic's; and a copy the sink does not
    # hold is not taken from another change.
    once = judge(ledger, perfect_sink(ledger), stored_twice=[*twice, (9, 1)])
    assert (once.duplicates, once.topic_duplicates) == (0, 0)
    assert counts(once) == counts(judge(ledger, perfect_sink(ledger)))


def test_a_sources_copy_is_the_same_change_and_not_one_it_acknowledged() -> None:
    """A CDC source's re-emission: a record on the topic, not a second commit - the changes
    acknowledged are the database's, and a sink that stored both copies has one duplicate."""
    ledger = Ledger()
    ledger.add(1, 1, acked_at=5.0)
    ledger.add(1, 1, Kind.COPY, acked_at=6.0)
    ledger.add(2, 1)
    both = judge(ledger, perfect_sink(ledger, changes=[(1, 1, 10.0), (1, 1, 11.0), (2, 1, 12)]))
    assert (both.acked, both.expected, both.duplicates, both.lost) == (2, 2, 1, 0)


def test_a_resend_is_the_same_business_change() -> None:
    ledger = Ledger()
    first = ledger.add(1, 1, acked_at=5.0)
    again = ledger.add(1, 1, Kind.RESEND, acked_at=3.0)  # acked earlier (another partition)
    assert first.event_id != again.event_id
    ledger.add(2, 1)

    once = judge(ledger, perfect_sink(ledger))
    assert (once.acked, once.expected, once.duplicates, once.lost) == (3, 2, 0, 0)

    twice = judge(ledger, perfect_sink(ledger, changes=[(1, 1, 10.0), (1, 1, 11.0), (2, 1, 12)]))
    assert (twice.expected, twice.in_sink, twice.unique_in_sink) == (2, 3, 2)
    assert (twice.duplicates, twice.duplicated_keys, twice.copies) == (1, 1, {2: 1})

    missing = judge(ledger, perfect_sink(ledger, changes=[(2, 1, 12.0)]))
    # Lost "at" the earliest ack of the change, whichever row it was.
    assert missing.anomalies == [Anomaly("lost", 1, 1, 3.0, None)]


def test_poison_is_counted_once_per_record_dead_lettered_or_missing() -> None:
    ledger = Ledger(partitions=2)
    ledger.add(1, 1, partition=0)  # (0, 0)
    ledger.add(2, 0, Kind.POISON, partition=0)  # (0, 1)
    ledger.add(3, 0, Kind.POISON, partition=1)  # (1, 0)
    ledger.add(4, 0, Kind.POISON, partition=1)  # (1, 1)
    ledger.add(5, 0, Kind.POISON, partition=0)  # (0, 2)
    # (0, 1) three times; (1, 1) once; (0, 0) is a normal record (not poison); (7, 7) unknown.
    dlq = [(0, 1), (0, 1), (1, 1), (0, 1), (0, 0), (7, 7)]
    verdict = judge(ledger, perfect_sink(ledger, dead_lettered=dlq))

    assert (verdict.dead_lettered, verdict.poison_missing) == (2, 2)
    # Poison rows are not business changes: their version 0 is meaningless.
    assert (verdict.expected, verdict.lost, verdict.stale) == (1, 0, 0)

    none = judge(ledger, perfect_sink(ledger, dead_lettered=[]))
    assert (none.dead_lettered, none.poison_missing) == (0, 4)


def test_stale_projection_behind_missing_or_ahead() -> None:
    ledger = Ledger()
    for order_id, top in ((1, 3), (2, 2), (3, 2), (4, 1), (5, 2)):
        for version in range(1, top + 1):
            ledger.add(order_id, version, acked_at=10.0 * order_id + version)
    ledger.add(6, 0, Kind.POISON)  # an order with only poison has no acked change
    projection = [
        (1, 3),  # up to date
        (2, 1),  # behind
        (3, 5),  # ahead of the ledger: not stale
        # 4: missing
        (5, 2),  # up to date (a tombstone keeps its version)
        (9, 1),  # an order the ledger does not know: not stale
    ]
    verdict = judge(ledger, perfect_sink(ledger, projection=projection))

    assert verdict.stale == 2
    assert [a for a in verdict.anomalies if a.kind == "stale"] == [
        Anomaly("stale", 2, 1, 22.0, None),  # at: the ack of version 2
        Anomaly("stale", 4, 0, 41.0, None),  # version 0: no projection
    ]


def test_stale_counts_the_highest_version_even_when_only_resent() -> None:
    ledger = Ledger()
    ledger.add(1, 1, acked_at=1.0)
    ledger.add(1, 2, Kind.RESEND, acked_at=4.0)  # its normal row was never acked
    ledger.add(1, 2, Kind.RESEND, acked_at=2.0)
    verdict = judge(ledger, perfect_sink(ledger, projection=[(1, 1)]))
    assert verdict.anomalies == [Anomaly("stale", 1, 1, 2.0, None)]


def test_phantoms_are_changes_no_acked_row_explains() -> None:
    ledger = Ledger()
    ledger.add(1, 1)
    ledger.add(2, 0, Kind.POISON)
    changes = [(1, 1, 1.0), (1, 2, 2.0), (1, 2, 3.0), (2, 0, 4.0), (3, 1, 5.0)]
    verdict = judge(ledger, perfect_sink(ledger, changes=changes))

    # (1, 2), (2, 0) (a poison row is no change) and (3, 1): distinct changes, not copies.
    assert verdict.phantoms == 3
    assert (verdict.in_sink, verdict.unique_in_sink, verdict.duplicates) == (5, 4, 1)
    assert verdict.lost == 0


@pytest.mark.parametrize(
    ("stored", "consistent"),
    [
        ({0: 2, 1: 1, 2: 0}, True),
        ({0: 2, 1: 1, 2: 0, 5: 9}, True),  # a partition with no acked rows does not matter
        ({0: 1, 1: 1, 2: 0}, False),  # behind
        ({0: 3, 1: 1, 2: 0}, False),  # ahead of what was acked
        ({0: 2, 1: 1}, False),  # partition 2 missing
        ({}, False),
        (None, None),  # a variant that stores no offsets
    ],
)
def test_offsets_consistency(stored: dict[int, int] | None, consistent: bool | None) -> None:
    ledger = Ledger(partitions=3)
    for partition, n in ((0, 3), (1, 2), (2, 1)):
        for i in range(n):
            kind = Kind.POISON if (partition, i) == (0, 2) else Kind.NORMAL  # poison counts too
            ledger.add(partition * 10 + i, 1, kind, partition=partition)
    verdict = judge(ledger, perfect_sink(ledger, stored_offsets=stored))
    assert verdict.offsets_consistent is consistent


def test_offsets_of_an_empty_ledger_are_consistent() -> None:
    verdict = judge(Ledger(), perfect_sink(Ledger(), stored_offsets={}))
    assert verdict.offsets_consistent is True
    assert verdict.acked == verdict.expected == verdict.anomalies_total == 0


def test_anomalies_are_attributed_to_the_first_fault_window_containing_them() -> None:
    ledger = Ledger()
    for order_id, acked_at in ((1, 5.0), (2, 10.0), (3, 17.0), (4, 20.0), (5, 25.0), (6, 40.0)):
        ledger.add(order_id, 1, acked_at=acked_at)
    windows = [
        FaultWindow("broker-kill", 10.0, 20.0),
        FaultWindow("network-cut", 15.0, 30.0),  # overlaps the first
    ]
    verdict = judge(ledger, perfect_sink(ledger, changes=[]), windows=windows)

    assert [(a.order_id, a.at, a.window) for a in verdict.anomalies] == [
        (1, 5.0, None),
        (2, 10.0, "broker-kill"),  # start is inside
        (3, 17.0, "broker-kill"),  # in both: the first listed wins
        (4, 20.0, "broker-kill"),  # end is inside
        (5, 25.0, "network-cut"),
        (6, 40.0, None),
    ]
    no_windows = judge(ledger, perfect_sink(ledger, changes=[]))
    assert {a.window for a in no_windows.anomalies} == {None}


def test_a_fault_window_must_not_end_before_it_starts() -> None:
    with pytest.raises(ValueError, match=r"'bounce'.*start <= end"):
        FaultWindow("bounce", 10.0, 9.0)


def test_max_anomalies_truncates_fairly_and_counts_them_all() -> None:
    ledger = Ledger()
    for order_id in range(1, 101):
        ledger.add(order_id, 1, acked_at=float(order_id))
    # Orders 1-10 lost, 11-20 stale (projection missing), 21-100 written three times.
    changes = [(o, 1, 500.0 + o + c / 10) for o in range(21, 101) for c in range(3)]
    changes += [(o, 1, 300.0 + o) for o in range(11, 21)]
    projection = [(o, 1) for o in (*range(1, 11), *range(21, 101))]
    sink = perfect_sink(ledger, changes=changes, projection=projection)

    full = judge(ledger, sink)
    assert (full.lost, full.stale, full.duplicates) == (10, 10, 160)
    assert full.anomalies_total == len(full.anomalies) == 180

    some = judge(ledger, sink, max_anomalies=50)
    assert some.anomalies_total == 180
    assert len(some.anomalies) == 50
    # Lost and stale fit in their share (16 each), duplicates take the rest: the earliest 30.
    assert Counter(a.kind for a in some.anomalies) == {"lost": 10, "stale": 10, "duplicate": 30}
    earliest = sorted((a for a in full.anomalies if a.kind == "duplicate"), key=lambda a: a.at)
    assert [a for a in some.anomalies if a.kind == "duplicate"] == earliest[:30]
    assert [a.at for a in some.anomalies] == sorted(a.at for a in some.anomalies)

    none = judge(ledger, sink, max_anomalies=0)
    assert (none.anomalies, none.anomalies_total) == ([], 180)
    with pytest.raises(ValueError, match="max_anomalies"):
        judge(ledger, sink, max_anomalies=-1)


def test_the_verdict_is_plain_json() -> None:
    ledger = mixed_ledger()
    changes = [(o, v, 1.5) for o, v in ledger.changes()[:-1]] + [(1, 1, 2.5)]
    verdict = judge(ledger, perfect_sink(ledger, changes=changes, stored_offsets=None))
    as_dict = verdict.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert as_dict["copies"] == {"2": 1}
    assert as_dict["offsets_consistent"] is None
    assert as_dict["anomalies"][0] == {
        "kind": "duplicate",
        "order_id": 1,
        "version": 1,
        "at": 2.5,
        "window": None,
    }
    assert as_dict["stopped"] == ""
    assert (as_dict["bad"], as_dict["followed"]) == ([], False)
    for key, value in as_dict.items():
        if key not in ("copies", "anomalies", "offsets_consistent", "stopped", "bad", "followed",
                       "dead_lettered_good"):  # fmt: skip
            assert type(value) is int, key


def test_a_pipeline_that_stopped_for_good_is_in_the_verdict_and_can_be_expected() -> None:
    ledger = mixed_ledger()
    half = perfect_sink(ledger, changes=[(o, v, 1.0) for o, v in ledger.changes()[:20]])
    why = "the query failed 3 times in a row: E11000 duplicate key error"
    verdict = judge(ledger, half, stopped=why)
    assert verdict.stopped == why and verdict.lost > 0
    assert Verdict.from_dict(json.loads(json.dumps(verdict.to_dict()))).stopped == why
    expected = parse_scenario(
        {"name": "s", "workload": {"events": 10}, "variants": ["naive"],
         "expect": {"naive": {"stopped": True, "lost": ">0"}}}
    ).expect["naive"]  # fmt: skip
    assert [e.failure(verdict) for e in expected] == [None, None]
    going = judge(ledger, perfect_sink(ledger))
    assert [e.failure(going) for e in expected] == [
        "expected stopped == True, got False",
        "expected lost > 0, got 0",
    ]


# --- loading the ledger ---------------------------------------------------------------------


def write_ledger(path: Path, ledger: Ledger) -> None:
    with LedgerWriter(path) as writer:
        for row in ledger.rows:
            writer.append(row)


def assert_same_arrays(a: LedgerArrays, b: LedgerArrays) -> None:
    for name in ("order_id", "version", "kind", "partition", "offset", "acked_at"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)


def test_from_csv_reads_what_ledger_writer_wrote(tmp_path: Path) -> None:
    ledger = mixed_ledger()
    # Awkward floats must survive exactly: the checker compares times.
    ledger.add(99, 1, acked_at=1767225600.123456789)
    ledger.add(99, 2, acked_at=0.1 + 0.2)
    path = tmp_path / "ledger.csv"
    write_ledger(path, ledger)

    loaded = load_ledger(path)
    assert len(loaded) == len(ledger.rows) == 89
    assert_same_arrays(loaded, ledger.arrays())
    assert_same_arrays(loaded, LedgerArrays.from_rows(read_ledger(path)))
    assert loaded.acked_at[-2] == 1767225600.123456789
    assert loaded.kind[-1] == KIND_CODES[Kind.NORMAL]
    assert Counter(loaded.kind.tolist()) == {0: 82, 1: 3, 2: 4}


@pytest.mark.parametrize(
    "torn",
    [
        "87,e-00000000000000aa,12,3,nor",  # cut inside a field
        "87,e-00000000000000aa,12,3,normal,orders,0,",  # cut after a comma
        "87,e-00000000000000aa,12,3,normal,orders,0,88",  # one field short
    ],
)
def test_from_csv_ignores_a_torn_last_line(tmp_path: Path, torn: str) -> None:
    ledger = mixed_ledger()
    path = tmp_path / "ledger.csv"
    write_ledger(path, ledger)
    with path.open("a") as f:
        f.write(torn)  # the crash came before the line ended

    loaded = load_ledger(path)
    assert len(loaded) == len(ledger.rows)
    assert_same_arrays(loaded, LedgerArrays.from_rows(read_ledger(path)))


def test_from_csv_skips_lines_of_the_wrong_width_anywhere_like_read_ledger(tmp_path: Path) -> None:
    ledger = mixed_ledger()
    path = tmp_path / "ledger.csv"
    write_ledger(path, ledger)
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(10, "9,e-1,2,3,normal\r\n")  # too few fields
    lines.insert(20, "9,e-1,2,3,normal,orders,0,5,6.0,extra\r\n")  # too many
    path.write_text("".join(lines))

    loaded = load_ledger(path)
    assert len(loaded) == len(ledger.rows)
    assert_same_arrays(loaded, LedgerArrays.from_rows(read_ledger(path)))


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("9,e-1,two,3,normal,orders,0,5,6.0", "unreadable ledger row"),
        ("9,e-1,2,3,normal,orders,0,,6.0", "'offset' has 1 empty value"),
        ("9,e-1,2,3,weird,orders,0,5,6.0", r"unknown kind \['weird'\]"),
    ],
)
def test_from_csv_refuses_a_whole_row_it_cannot_read(tmp_path: Path, line: str, error: str) -> None:
    path = tmp_path / "ledger.csv"
    write_ledger(path, mixed_ledger())
    with path.open("a") as f:
        f.write(line + "\n")
    with pytest.raises(ValueError, match=error):
        load_ledger(path)


def test_from_csv_of_an_empty_or_header_only_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.touch()
    assert len(load_ledger(empty)) == 0
    header_only = tmp_path / "header.csv"
    write_ledger(header_only, Ledger())
    loaded = load_ledger(header_only)
    assert len(loaded) == 0
    assert_same_arrays(loaded, Ledger().arrays())


def test_from_csv_refuses_a_file_that_is_not_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(ValueError, match="is not a ledger"):
        load_ledger(path)


def test_a_ledger_of_several_topics_needs_a_topic(tmp_path: Path) -> None:
    ledger = mixed_ledger()
    other = LedgerRow(999, "e-x", 1, 1, Kind.NORMAL, "other", 0, 0, 1.0)
    path = tmp_path / "ledger.csv"
    write_ledger(path, ledger)
    with LedgerWriter(path) as writer:
        writer.append(other)

    with pytest.raises(ValueError, match=r"several topics \['orders', 'other'\]"):
        load_ledger(path)
    with pytest.raises(ValueError, match="several topics"):
        LedgerArrays.from_rows([*ledger.rows, other])
    assert len(load_ledger(path, topic="orders")) == len(ledger.rows)
    assert len(load_ledger(path, topic="other")) == 1
    assert len(LedgerArrays.from_rows([*ledger.rows, other], topic="other")) == 1


# --- bad input ------------------------------------------------------------------------------


def test_a_version_too_large_for_the_encoding_is_a_clear_error() -> None:
    ledger = Ledger()
    ledger.add(1, 1)
    ledger.add(7, MAX_VERSION + 1)
    with pytest.raises(ValueError, match=r"ledger.*order_id=7, version=16777216.*2\*\*24"):
        judge(ledger, perfect_sink(Ledger()))

    ok = Ledger()
    ok.add(1, MAX_VERSION)  # the largest version that fits
    assert judge(ok, perfect_sink(ok)).lost == 0
    with pytest.raises(ValueError, match=r"sink changes.*version=-1"):
        judge(ok, perfect_sink(ok, changes=[(1, -1, 0.0)]))


def test_a_poison_row_is_not_encoded_as_a_change() -> None:
    ledger = Ledger()
    ledger.add(1, -5, Kind.POISON)  # a poison row's version is meaningless
    assert judge(ledger, perfect_sink(ledger)).poison_missing == 0


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match=r"LedgerArrays: columns differ in length.*version=1"):
        LedgerArrays(
            order_id=[1, 2], version=[1], kind=[0, 0], partition=[0, 0], offset=[0, 1],
            acked_at=[0.0, 1.0],
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"SinkSnapshot.changes: columns differ"):
        SinkSnapshot(
            changes_order_id=[1], changes_version=[1, 2], changes_written_at=[0.0],
            projection_order_id=[], projection_version=[],
            dead_lettered_partition=[], dead_lettered_offset=[],
        )  # fmt: skip
    with pytest.raises(ValueError, match="must be one-dimensional"):
        LedgerArrays(
            order_id=[[1]], version=[[1]], kind=[[0]], partition=[[0]], offset=[[0]],
            acked_at=[[0.0]],
        )  # fmt: skip
    with pytest.raises(ValueError, match="kind code 7"):
        LedgerArrays(order_id=[1], version=[1], kind=[7], partition=[0], offset=[0], acked_at=[0.0])


def test_from_lists_names_a_malformed_tuple() -> None:
    with pytest.raises(ValueError, match=r"changes\[1\]: expected a tuple of 3"):
        SinkSnapshot.from_lists(changes=[(1, 1, 0.0), (1, 2)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="order 4 appears more than once"):
        SinkSnapshot.from_lists(projection=[(4, 1), (5, 1), (4, 2)])
    with pytest.raises(ValueError, match="stored_offsets"):
        SinkSnapshot.from_lists(stored_offsets={"zero": 1})  # type: ignore[dict-item]


def test_arrays_are_read_only_and_the_callers_are_not() -> None:
    mine = np.array([1, 2], dtype=np.int64)
    ledger = LedgerArrays(
        order_id=mine, version=[1, 1], kind=[0, 0], partition=[0, 0], offset=[0, 1],
        acked_at=[0.0, 1.0],
    )  # fmt: skip
    with pytest.raises(ValueError, match="read-only"):
        ledger.order_id[0] = 5
    mine[0] = 5  # still the caller's to change
    assert mine.flags.writeable


# --- against a plain reference, on random sinks ---------------------------------------------


def reference(
    rows: Sequence[LedgerRow],
    changes: Sequence[tuple[int, int, float]],
    projection: Sequence[tuple[int, int]],
    dead_lettered: Sequence[tuple[int, int]],
    stored_offsets: dict[int, int] | None,
    windows: Sequence[FaultWindow],
    produced: int,
    stored_twice: Sequence[tuple[int, int]],
) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """The verdict's definitions, written as plainly as possible."""
    first_acked: dict[tuple[int, int], float] = {}
    for r in rows:
        if r.kind is not Kind.POISON:
            key = (r.order_id, r.version)
            first_acked[key] = min(first_acked.get(key, r.acked_at), r.acked_at)
    copies = Counter((o, v) for o, v, _ in changes)
    # The topic's copies of a change: one per extra record of it, at most all but one copy.
    topic = {k: min(n - 1, Counter(stored_twice)[k]) for k, n in copies.items()}
    own = {k: n - topic[k] for k, n in copies.items()}
    written: dict[tuple[int, int], list[float]] = defaultdict(list)
    for o, v, at in changes:
        written[(o, v)].append(at)
    top: dict[int, int] = {}
    for o, v in first_acked:
        top[o] = max(top.get(o, v), v)
    projected = dict(projection)
    poison = {(r.partition, r.offset) for r in rows if r.kind is Kind.POISON}
    dlq = set(dead_lettered)
    last_offset: dict[int, int] = {}
    for r in rows:
        last_offset[r.partition] = max(last_offset.get(r.partition, r.offset), r.offset)

    def window(at: float) -> str | None:
        for w in windows:
            if w.start <= at <= w.end:
                return w.name
        return None

    anomalies = []
    for key, ats in written.items():
        for at in sorted(ats)[1 + topic[key] :]:
            anomalies.append(("duplicate", *key, at, window(at)))
    lost = [key for key in first_acked if key not in copies]
    for key in lost:
        anomalies.append(("lost", *key, first_acked[key], window(first_acked[key])))
    stale = [o for o, v in top.items() if projected.get(o, -1) < v or o not in projected]
    for o in stale:
        at = first_acked[(o, top[o])]
        anomalies.append(("stale", o, projected.get(o, 0), at, window(at)))
    verdict = {
        "produced": produced,
        "acked": len(rows),
        "expected": len(first_acked),
        "in_sink": len(changes),
        "unique_in_sink": len(copies),
        "duplicates": sum(n - 1 for n in own.values()),
        "duplicated_keys": sum(1 for n in own.values() if n > 1),
        "copies": {str(n): c for n, c in sorted(Counter(own.values()).items()) if n > 1},
        "lost": len(lost),
        "phantoms": sum(1 for key in copies if key not in first_acked),
        "stale": len(stale),
        "dead_lettered": len(poison & dlq),
        "poison_missing": len(poison - dlq),
        "offsets_consistent": None
        if stored_offsets is None
        else all(stored_offsets.get(p) == o for p, o in last_offset.items()),
        "anomalies_total": len(anomalies),
        "topic_duplicates": sum(topic.values()),
        "stopped": "",
        "poison_stored": 0,  # the sink's count, passed through
    }
    return verdict, anomalies


def random_case(rng: random.Random) -> dict[str, Any]:
    ledger = Ledger(partitions=rng.randint(1, 3))
    t = 0.0
    for _ in range(rng.randint(0, 60)):
        t += rng.choice((0.0, 0.5, 1.0))  # ties on purpose
        order_id = rng.randint(1, 8)
        roll = rng.random()
        if roll < 0.1:
            ledger.add(order_id, 0, Kind.POISON, acked_at=t)
        elif roll < 0.25:
            ledger.add(order_id, rng.randint(1, 5), Kind.RESEND, acked_at=t)
        else:
            ledger.add(order_id, rng.randint(1, 5), acked_at=t)
    changes = []
    for o, v in ledger.changes():
        for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
            changes.append((o, v, rng.choice((10.0, 20.0, 30.0, rng.uniform(0, 40)))))
    for _ in range(rng.choice((0, 0, 0, 1, 2))):  # phantoms
        changes.append((rng.randint(1, 10), rng.randint(1, 7), rng.uniform(0, 40)))
    rng.shuffle(changes)
    projection = [
        (o, max(0, v + rng.choice((-1, 0, 0, 0, 1))))
        for o, v in ledger.projection()
        if rng.random() < 0.9
    ] + [(o, 1) for o in range(9, 9 + rng.randint(0, 2))]
    dead_lettered = [p for p in ledger.poison() if rng.random() < 0.7] * rng.randint(1, 2)
    dead_lettered += [(rng.randint(0, 2), rng.randint(0, 30)) for _ in range(rng.randint(0, 2))]
    stored = rng.choice(
        (None, ledger.last_offsets(), {p: o + 1 for p, o in ledger.last_offsets().items()})
    )
    windows = []
    for i in range(rng.randint(0, 3)):
        start = rng.uniform(0, 40)
        windows.append(FaultWindow(f"w{i}", start, start + rng.choice((0.0, 5.0, 15.0))))
    return {
        "rows": ledger.rows,
        "changes": changes,
        "projection": projection,
        "dead_lettered": dead_lettered,
        "stored_offsets": stored,
        "windows": windows,
        "produced": len(ledger.rows) + rng.randint(0, 3),
        # Records the topic holds twice: changes of the ledger, some more than once, one maybe
        # of no change.
        "stored_twice": rng.sample(ledger.changes() * 2, rng.randint(0, len(ledger.changes())))
        + [(rng.randint(1, 10), rng.randint(1, 7))] * rng.randint(0, 1),
    }


def as_tuples(anomalies: Sequence[Anomaly]) -> list[tuple[Any, ...]]:
    return [(a.kind, a.order_id, a.version, a.at, a.window) for a in anomalies]


@pytest.mark.parametrize("seed", range(300))
def test_check_agrees_with_a_plain_reference(seed: int) -> None:
    rng = random.Random(seed)
    case = random_case(rng)
    ledger = LedgerArrays.from_rows(case["rows"])
    sink = SinkSnapshot.from_lists(
        case["changes"], case["projection"], case["dead_lettered"], case["stored_offsets"]
    )
    verdict = check(
        ledger,
        sink,
        produced=case["produced"],
        windows=case["windows"],
        stored_twice=case["stored_twice"],
    )
    expected, anomalies = reference(**case)

    assert counts(verdict) == expected
    assert sorted(as_tuples(verdict.anomalies)) == sorted(anomalies)

    # Truncated: a fair share of each kind's earliest, in time order, all counted.
    limit = rng.randint(0, 12)
    short = check(
        ledger,
        sink,
        produced=0,
        windows=case["windows"],
        max_anomalies=limit,
        stored_twice=case["stored_twice"],
    )
    assert short.anomalies_total == len(anomalies)
    assert len(short.anomalies) == min(limit, len(anomalies))
    assert [a.at for a in short.anomalies] == sorted(a.at for a in short.anomalies)
    by_kind = Counter(a[0] for a in anomalies)
    kept = Counter(a.kind for a in short.anomalies)
    for kind, n in by_kind.items():
        assert kept[kind] >= min(n, limit // len(by_kind))
        kept_at = sorted(a.at for a in short.anomalies if a.kind == kind)
        assert kept_at == sorted(a[3] for a in anomalies if a[0] == kind)[: kept[kind]]
    assert not Counter(as_tuples(short.anomalies)) - Counter(anomalies)


def test_rows_acked_without_an_offset_are_left_out_of_offset_checks() -> None:
    """The producer ledgers an ack that carried no offset as -1 (an idempotent retry the
    broker already had): such a row still counts as an acked change."""
    from harness.checker.check import check
    from harness.checker.model import LedgerArrays, SinkSnapshot

    ledger = LedgerArrays(
        order_id=np.array([1, 2, 3], dtype=np.int64),
        version=np.array([1, 1, 0], dtype=np.int64),
        kind=np.array([0, 0, 2], dtype=np.int8),
        partition=np.array([0, 0, 0], dtype=np.int32),
        offset=np.array([0, -1, -1], dtype=np.int64),
        acked_at=np.array([1.0, 2.0, 3.0]),
    )
    sink = SinkSnapshot.from_lists(
        changes=[(1, 1, 5.0), (2, 1, 6.0)], projection=[(1, 1), (2, 1)], stored_offsets={0: 0}
    )
    verdict = check(ledger, sink, produced=3)
    assert (verdict.expected, verdict.lost, verdict.duplicates) == (2, 0, 0)
    assert verdict.offsets_consistent is True
    assert (verdict.dead_lettered, verdict.poison_missing) == (0, 0)


def test_end_offsets_are_one_past_each_partitions_last_ack() -> None:
    ledger = LedgerArrays(
        order_id=[1, 2, 3, 4],
        version=[1, 1, 1, 1],
        kind=[0, 0, 0, 0],
        partition=[0, 1, 0, 2],
        offset=[7, 3, 2, -1],  # partition 2's ack carried no offset
        acked_at=[0.0, 0.0, 0.0, 0.0],
    )
    assert ledger.end_offsets() == {0: 8, 1: 4, 2: 0}
    assert LedgerArrays([], [], [], [], [], []).end_offsets() == {}


def test_poison_a_sink_stored_as_documents_is_counted_apart_from_the_changes() -> None:
    """Kafka Connect's sink writes any JSON it can read: an event missing its fields is a
    document, not a change - neither a copy nor a phantom."""
    ledger = mixed_ledger()
    sink = replace(perfect_sink(ledger), poison_stored=2)
    verdict = judge(ledger, sink, produced=90)
    assert (verdict.poison_stored, verdict.duplicates, verdict.phantoms) == (2, 0, 0)
    assert Verdict.from_dict(verdict.to_dict()).poison_stored == 2
