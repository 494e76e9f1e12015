"""Where each bad record went (pure: no servers): one test per outcome, each made by the writes a
lane's landing collection saw, so the checker's word for it is exact. The lanes that make them
for real are poison-shapes' (tests/test_library.py)."""

from __future__ import annotations

from harness.checker.bad_records import (
    BadRecord,
    DeadLetter,
    Fate,
    GoodDeadLettered,
    Outcome,
    Write,
    fates,
    good_dead_lettered,
    tally,
)
from harness.checker.model import Verdict
from harness.pipeline.sink import ORIGIN_HEADERS, REASON_CHARS, reason_of

GOOD = {"g-17-3": (17, 3), "g-18-1": (18, 1)}


def bad(event_id: str, shape: str = "key-as-string", offset: int = 9, order: int = 17) -> BadRecord:
    return BadRecord(event_id, shape, partition=0, offset=offset, order_id=order, version=3)


def one(record: BadRecord, writes: list[Write], *, dead: tuple[tuple[int, int], ...] = (),
        stopped: bool = False) -> Fate:  # fmt: skip
    letters = [DeadLetter(p, o) for p, o in dead]
    (fate,) = fates([record], writes, letters, stopped=stopped, changes=GOOD)
    return fate


def test_a_bad_record_in_the_dead_letter_topic_is_dead_lettered_whatever_was_written() -> None:
    r = bad("b-1")
    assert one(r, [], dead=((0, 9),)).outcome is Outcome.DEAD_LETTERED
    assert one(r, [Write(1.0, "insert", "d1", "b-1")], dead=((0, 9),)).outcome is (
        Outcome.DEAD_LETTERED
    )


def test_a_document_of_its_own_that_nothing_took_over_is_stored() -> None:
    writes = [Write(1.0, "insert", "d1", "g-17-3"), Write(2.0, "insert", "d2", "b-1"),
              Write(3.0, "replace", "d2", "b-1")]  # its own redelivery: still its own  # fmt: skip
    fate = one(bad("b-1"), writes)
    assert (fate.outcome, fate.document, fate.displaced, fate.by) == (Outcome.STORED, "d2", "", "")


def test_a_write_over_a_good_changes_document_merges_and_names_the_change_it_displaced() -> None:
    # An upsert keyed by the business key: the string key's record parsed as (17, 3).
    writes = [Write(1.0, "insert", "d1", "g-17-3"), Write(2.0, "replace", "d1", "b-1")]
    fate = one(bad("b-1"), writes)
    assert (fate.outcome, fate.document, fate.displaced) == (Outcome.MERGED, "d1", "g-17-3")
    assert fate.change == (17, 3)
    assert fate.describe() == (
        "key-as-string b-1 (partition 0, offset 9): merged into document d1, displacing change "
        "(17, 3) (g-17-3)"
    )


def test_records_projected_to_one_key_merge_into_one_document_not_dropped() -> None:
    # The 19 records keyed {version: 0}: each replaces the one before.
    records = [bad(f"b-{i}", "missing-order-id", offset=i) for i in range(19)]
    writes = [Write(float(i), "replace" if i else "insert", "{version: 0}", f"b-{i}")
              for i in range(19)]  # fmt: skip
    found = fates(records, writes, (), stopped=False, changes=GOOD)
    assert {f.outcome for f in found} == {Outcome.MERGED}
    assert (found[0].displaced, found[0].by) == ("", "b-1")  # the first: taken over
    assert (found[5].displaced, found[5].by) == ("b-4", "b-6")
    assert (found[18].displaced, found[18].by) == ("b-17", "")  # the last: holds the document
    assert all(f.change is None for f in found)  # no good change among them
    assert tally(found) == {"missing-order-id": {"merged": 19}}


def test_a_tombstones_delete_of_its_orders_document_is_a_merge_that_displaced_the_change() -> None:
    writes = [Write(1.0, "insert", "d1", "g-17-3"), Write(2.0, "insert", "d2", "g-18-1"),
              Write(3.0, "delete", "d1", "")]  # fmt: skip
    fate = one(bad("t-1", "tombstone", order=17), writes)
    assert (fate.outcome, fate.document, fate.change) == (Outcome.MERGED, "d1", (17, 3))
    # A delete of another order's document is not this tombstone's.
    assert one(bad("t-1", "tombstone", order=18), writes[:1] + writes[2:]).outcome is (
        Outcome.DROPPED
    )


def test_no_trace_is_dropped_or_the_lanes_stop() -> None:
    writes = [Write(1.0, "insert", "d1", "g-17-3")]
    assert one(bad("b-1"), writes).outcome is Outcome.DROPPED
    assert one(bad("b-1"), writes, stopped=True).outcome is Outcome.STOPPED


def test_a_fate_survives_the_results_file() -> None:
    writes = [Write(1.0, "insert", "d1", "g-17-3"), Write(2.0, "replace", "d1", "b-1")]
    fate = one(bad("b-1"), writes)
    assert Fate.from_dict(fate.to_dict()) == fate
    assert Write.from_json({"t": 1.0, "op": "insert", "doc": "d1", "trace": None}).trace == ""


# The MongoDB sink connector's reasons, as the lab reads them from Connect's DLQ headers.
CONVERTER = "DataException: Converting byte[] to Kafka Connect data failed"
REFUSED = "WriteException: v=1, code=10334, message=BSONObjectTooLarge"
SKIPPED = "WriteSkippedException: "


def test_a_dead_lettered_record_keeps_the_reason_the_sink_gave() -> None:
    (fate,) = fates([bad("b-1")], [], [DeadLetter(0, 9, CONVERTER)], stopped=False, changes=GOOD)
    assert (fate.outcome, fate.reason) == (Outcome.DEAD_LETTERED, CONVERTER)
    assert (
        fate.describe() == f"key-as-string b-1 (partition 0, offset 9): dead-lettered ({CONVERTER})"
    )
    assert Fate.from_dict(fate.to_dict()) == fate


def test_good_records_skipped_after_a_refused_write_reported_before_them_name_it() -> None:
    # The bulk: a bad record the converter refused first (not the bulk's), then the refused
    # write, then three records skipped - a bad one among them, which does not end the run.
    refused, other, skipped_bad = (
        bad("b-big", "oversize", 20),
        bad("b-0", offset=3),
        bad("b-s", offset=22),
    )
    dlq = [DeadLetter(0, 3, CONVERTER), DeadLetter(0, 20, REFUSED), DeadLetter(0, 21, SKIPPED),
           DeadLetter(0, 22, SKIPPED), DeadLetter(1, 7, SKIPPED)]  # fmt: skip
    found = fates([other, refused, skipped_bad], [], dlq, stopped=False, changes=GOOD)
    (run,) = good_dead_lettered([other, refused, skipped_bad], dlq, found)
    assert (run.count, run.first, run.culprits) == (2, (0, 21), (refused,))
    assert run.describe() == (
        f"2 good records ({SKIPPED}), from partition 0 offset 21: skipped after the refused "
        "write of oversize b-big (partition 0, offset 20)"
    )


def test_a_refused_record_the_dead_letter_topic_did_not_take_is_named_by_the_record_after_it() -> (
    None
):
    # The 16 MiB record: refused by MongoDB, and too large for the dead-letter producer; the
    # converter's dead letter before the run is not the culprit.
    big, malformed = bad("b-big", "oversize", 20), bad("b-m", "malformed-json", 5)
    dlq = [DeadLetter(0, 5, CONVERTER), DeadLetter(2, 40, SKIPPED), DeadLetter(0, 21, SKIPPED)]
    found = fates([big, malformed], [], dlq, stopped=False, changes=GOOD)
    assert [f.outcome for f in found] == [Outcome.DROPPED, Outcome.DEAD_LETTERED]
    (run,) = good_dead_lettered([big, malformed], dlq, found)
    assert (run.count, run.culprits) == (2, (big,))
    # Without a bad record before any of them, the run is counted and its culprit not named.
    (unnamed,) = good_dead_lettered([malformed], dlq[:2], found[1:])
    assert (unnamed.count, unnamed.culprits) == (1, ())
    assert unnamed.describe().endswith("skipped after a refused write the evidence does not name")


def test_good_records_dead_lettered_for_their_own_reason_are_counted_by_reason() -> None:
    dup = "WriteException: E11000 duplicate key"
    dlq = [
        DeadLetter(0, 1, dup),
        DeadLetter(0, 2, dup),
        DeadLetter(0, 3, CONVERTER),
        DeadLetter(0, 4, dup),
    ]
    runs = good_dead_lettered([bad("b-3", offset=3)], dlq, [])
    assert [(r.count, r.reason, r.culprits) for r in runs] == [(2, dup, ()), (1, dup, ())]
    assert good_dead_lettered([bad("b-3", offset=3)], dlq[2:3], []) == ()


def test_the_good_records_dead_lettered_survive_the_results_file() -> None:
    run = GoodDeadLettered(108, SKIPPED, (2, 470), (bad("b-big", "oversize", 20),))
    assert GoodDeadLettered.from_dict(run.to_dict()) == run
    verdict = Verdict(0, 0, 0, 0, 0, 0, 0, {}, 0, 0, 0, 0, 0, None, [], 0, followed=True,
                      dead_lettered_good=(run, run))  # fmt: skip
    again = Verdict.from_dict(verdict.to_dict())
    assert (again.dead_lettered_good, again.good_dead_lettered) == ((run, run), 216)


def test_a_dead_letters_reason_is_read_from_the_labs_or_connects_headers() -> None:
    lab, connect = ORIGIN_HEADERS[0][2], ORIGIN_HEADERS[1][2]
    assert reason_of({"error": b"malformed JSON: Expecting value"}, lab) == (
        "malformed JSON: Expecting value"
    )
    skipped = {connect[0]: b"com.mongodb.kafka.connect.sink.dlq.WriteSkippedException"}
    assert reason_of(skipped, connect) == "WriteSkippedException"  # no message: none said
    quoting = {connect[0]: b"org.apache.kafka.connect.errors.DataException",
               connect[1]: b"Could not convert value '" + b"x" * 1000}  # fmt: skip
    said = reason_of(quoting, connect)
    assert said.startswith("DataException: Could not convert value 'xxx") and said.endswith("...")
    assert len(said) == REASON_CHARS + 3
    assert DeadLetter(0, 1, "WriteSkippedException").skipped
    assert not DeadLetter(0, 1, said).refused and not DeadLetter(0, 1, said).skipped
