"""The workload generator (pure): seeded, Debezium-shaped, with the knobs it promises."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import pytest

from harness.pipeline.batch import TOO_LARGE, RawRecord, split
from harness.workload import Kind, Op, ParseError, WorkloadSpec, generate, parse
from harness.workload.events import ChangeEvent
from harness.workload.generator import Burst
from harness.workload.ledger import LedgerRow
from harness.workload.shapes import DEFAULT, MONGO_DOCUMENT_LIMIT, TRACE, PoisonKind
from harness.workload.verify import stored_twice


def events(**knobs: object) -> list[ChangeEvent]:
    return list(generate(WorkloadSpec(**knobs)))  # type: ignore[arg-type]


def test_the_same_seed_gives_the_same_bytes_and_another_seed_does_not() -> None:
    spec = {"events": 500, "keys": 30, "poison_fraction": 0.05, "resend_fraction": 0.1}
    first = [(e.key, e.value()) for e in events(**spec, seed=11)]
    again = [(e.key, e.value()) for e in events(**spec, seed=11)]
    other = [(e.key, e.value()) for e in events(**spec, seed=12)]
    assert first == again
    assert first != other
    assert len(first) == 500


def test_events_are_debezium_envelopes_whose_versions_only_grow_per_order() -> None:
    last: dict[int, int] = {}
    deleted: set[int] = set()
    for e in events(events=2000, keys=50, delete_fraction=0.1, seed=3):
        doc = parse(e.value()).document
        payload = doc["payload"]
        assert set(payload) == {"op", "before", "after", "source"}
        assert payload["source"]["table"] == "orders" and payload["source"]["txId"]
        assert e.version == last.get(e.order_id, 0) + 1
        last[e.order_id] = e.version
        if e.op is Op.CREATE:
            assert payload["before"] is None and payload["after"]["version"] == e.version
        elif e.op is Op.UPDATE:
            assert payload["before"]["order_id"] == payload["after"]["order_id"] == e.order_id
        else:
            assert payload["after"] is None and payload["before"] is not None
            deleted.add(e.order_id)
    assert deleted, "a delete_fraction of 0.1 over 2000 changes produced no delete"


def test_resends_repeat_a_business_change_with_a_new_event_id() -> None:
    evs = events(events=3000, keys=100, resend_fraction=0.2, seed=5)
    originals = {(e.order_id, e.version): e for e in evs if e.kind is Kind.NORMAL}
    resends = [e for e in evs if e.kind is Kind.RESEND]
    assert 450 <= len(resends) <= 750  # 20% of 3000, give or take the draw
    for r in resends:
        original = originals[(r.order_id, r.version)]
        assert r.event_id != original.event_id
        assert r.seq > original.seq
        assert parse(r.value()).tx_id == original.tx_id
        assert r.envelope()["payload"] == original.envelope()["payload"]
    assert len({e.event_id for e in evs}) == len(evs), "event ids must be unique"


def test_poison_records_fail_to_parse_and_good_ones_parse() -> None:
    evs = events(events=2000, keys=100, poison_fraction=0.05, seed=9)
    poison = [e for e in evs if e.kind is Kind.POISON]
    assert 60 <= len(poison) <= 140
    assert {p.poison for p in poison} == {"malformed-json", "missing-fields"}
    for p in poison:
        with pytest.raises(ParseError):
            parse(p.value())
    good = [e for e in evs if e.kind is not Kind.POISON]
    assert all(parse(e.value()).event_id == e.event_id for e in good)


def test_key_skew_concentrates_changes_on_few_orders() -> None:
    def top_share(skew: float) -> float:
        counts = Counter(e.order_id for e in events(events=5000, keys=500, key_skew=skew))
        return sum(c for _, c in counts.most_common(10)) / 5000

    assert top_share(0.0) < 0.05
    assert top_share(1.2) > 0.3


@pytest.mark.parametrize(
    ("knobs", "field"),
    [
        ({"events": -1}, "events"),
        ({"keys": 0}, "keys"),
        ({"poison_fraction": 1.0}, "poison_fraction"),
        ({"resend_fraction": -0.1}, "resend_fraction"),
        ({"poison_fraction": 0.5, "resend_fraction": 0.5}, "resend_fraction"),
        ({"key_skew": -1}, "key_skew"),
    ],
)
def test_invalid_specs_name_the_field(knobs: dict, field: str) -> None:
    problems = WorkloadSpec(**knobs).problems()
    assert field in [f for f, _ in problems]
    with pytest.raises(ValueError, match=field):
        events(**knobs)


def test_the_records_a_topic_holds_twice_are_found_with_where_each_copy_is() -> None:
    # Seen in msk-rolling-upgrade-java: partition 1 held one event at offsets 1820 and 1821 (the
    # producer's retry stored again across a clean broker restart); naive stored both.
    rows = [
        LedgerRow(0, "e-07", 7, 1, Kind.NORMAL, "t", 1, 1820, 5.0),
        LedgerRow(1, "e-08", 8, 1, Kind.NORMAL, "t", 1, 1822, 6.0),
    ]
    stored = {(1, 1821): "e-07", (1, 1820): "e-07", (1, 1822): "e-08", (0, 5): ""}
    [twice] = stored_twice(rows, stored)
    assert (twice.row, twice.at, twice.extra) == (rows[0], ((1, 1820), (1, 1821)), 1)
    assert twice.describe() == "e-07 stored 2 times (p1@1820, p1@1821)"
    assert stored_twice(rows, {(1, 1820): "e-07", (1, 1822): "e-08"}) == []


def debezium_record(op: str, before: dict | None, after: dict | None, tx: int, lsn: int) -> bytes:
    """A record as Debezium's PostgreSQL connector writes it with JSON schemas on (the schema
    shortened: the lab reads none of it)."""
    source = {"connector": "postgresql", "txId": tx, "lsn": lsn, "table": "orders"}
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1}
    return json.dumps({"schema": {"type": "struct"}, "payload": payload}).encode()


def test_debezium_records_parse_to_the_change_they_carry_and_tombstones_are_skipped() -> None:
    row = {"order_id": 7, "version": 3, "status": "paid", "amount_cents": 100}
    update = parse(debezium_record("u", {**row, "version": 2}, row, tx=901, lsn=5000))
    assert (update.op, update.order_id, update.version, update.tx_id) == (Op.UPDATE, 7, 3, "901")
    # The sink stores the change with its identity at the top, as for the lab's records; not
    # the schema every record repeats.
    assert update.document["order_id"] == 7 and update.document["version"] == 3
    assert "schema" not in update.document and update.document["payload"]["op"] == "u"
    # A delete is the order's next change; a snapshot's read a create of the row as it was.
    delete = parse(debezium_record("d", row, None, tx=902, lsn=5100))
    assert (delete.op, delete.version) == (Op.DELETE, 4)
    assert parse(debezium_record("r", None, row, tx=1, lsn=10)).op is Op.CREATE
    # A COPY's rows share one LSN: the event id is the LSN with the row's key.
    a = parse(debezium_record("c", None, row, tx=903, lsn=6000))
    b = parse(debezium_record("c", None, {**row, "order_id": 8}, tx=903, lsn=6000))
    assert a.event_id != b.event_id
    with pytest.raises(ParseError, match="a Debezium record without a change"):
        parse(debezium_record("u", row, None, tx=904, lsn=6100))  # no after
    # A delete's tombstone (no value) is neither a change nor poison.
    batch, poison = split(1, "t", "g", [RawRecord(0, 0, debezium_record("d", row, None, 1, 1)),
                                        RawRecord(0, 1, None)])  # fmt: skip
    assert [r.offset for r in batch.records] == [0] and poison == []
    assert batch.last_offsets == {0: 1}


def test_the_default_mix_of_bad_records_is_byte_for_byte_what_it_was() -> None:
    # The digest of this workload before the other shapes existed: today's figures stand.
    spec = WorkloadSpec(events=3000, keys=100, poison_fraction=0.05, resend_fraction=0.05,
                        seed=9, bursts=(Burst(Kind.POISON, 100, 300, 0.3),))  # fmt: skip
    digest = hashlib.sha256()
    for e in generate(spec):
        digest.update(e.key)
        digest.update(e.value() or b"")
    assert digest.hexdigest() == (
        "9bf929908e6c4e37eb5fc3e080c3e120a86f95805ec077f63d3c7413eb91f57a"
    )


def bad_records(shape: PoisonKind) -> list[ChangeEvent]:
    evs = events(events=600, keys=50, poison_fraction=0.1, poison_shapes=(shape,), seed=4)
    # A derived shape's, but one drawn before any change was made: a recent change's.
    found = [e for e in evs if e.kind is Kind.POISON and (e.version > 0 or shape in DEFAULT)]
    assert len(found) >= 20, shape
    return found


def test_every_shape_of_bad_record_is_what_its_name_says() -> None:
    def doc(e: ChangeEvent) -> Any:
        value = e.value()
        assert value is not None
        return json.loads(value)

    for e in bad_records(PoisonKind.NOT_OBJECT):
        assert isinstance(doc(e), list) and doc(e)[0]["event_id"] == e.event_id
    fields = {
        PoisonKind.MISSING_ORDER_ID: {"order_id"}, PoisonKind.MISSING_VERSION: {"version"},
        PoisonKind.MISSING_EVENT_ID: {"event_id"}, PoisonKind.MISSING_TX_ID: {"txId"},
        PoisonKind.MISSING_AFTER: {"after"}, PoisonKind.MISSING_KEYS: {"order_id", "version"},
        PoisonKind.MISSING_ALL: {"order_id", "version", "event_id", "txId", "after"},
    }  # fmt: skip
    for shape, missing in fields.items():
        for e in bad_records(shape):
            found = doc(e)
            have = set(found) | set(found["payload"]) | set(found["payload"]["source"])
            assert not have & missing and have >= {"payload", "op", "ts_ms"} - missing, shape
            # Without its event id, its id where no sink keys: a document of it is traced.
            assert found.get("event_id", found.get(TRACE)) == e.event_id, shape
    for shape, kept in ((PoisonKind.KEY_AS_STRING, str), (PoisonKind.KEY_AS_FLOAT, float)):
        for e in bad_records(shape):
            assert doc(e)["order_id"] == kept(e.order_id) and type(doc(e)["order_id"]) is kept
    assert all(doc(e)["order_id"] is None for e in bad_records(PoisonKind.KEY_NULL))
    assert all(e.value() is None for e in bad_records(PoisonKind.TOMBSTONE))
    for e in bad_records(PoisonKind.OVERSIZE)[:2]:
        assert len(e.value() or b"") > MONGO_DOCUMENT_LIMIT
    assert all(doc(e)["discount_cents"] == 250 for e in bad_records(PoisonKind.NEW_FIELD))
    for e in bad_records(PoisonKind.RENAMED_FIELD):
        assert doc(e)["orderId"] == e.order_id and "order_id" not in doc(e)
    for e in bad_records(PoisonKind.DUPLICATE_KEYS):
        text = (e.value() or b"").decode()
        assert text.startswith(f'{{"event_id":"{e.event_id}","order_id":{e.order_id},')
        assert text.endswith(f',"order_id":{e.twin}}}') and e.twin != e.order_id
        assert doc(e)["order_id"] == e.twin  # a JSON parser keeps the last
    for e in bad_records(PoisonKind.NOT_UTF8):
        with pytest.raises(UnicodeDecodeError):
            (e.value() or b"").decode()
    for e in bad_records(PoisonKind.MALFORMED_JSON):
        with pytest.raises(json.JSONDecodeError):
            json.loads(e.value() or b"")


def test_a_derived_bad_record_is_a_recent_change_gone_wrong() -> None:
    evs = events(events=600, keys=50, poison_fraction=0.1, poison_shapes=tuple(PoisonKind),
                 seed=4)  # fmt: skip
    changes = {(e.order_id, e.version): e for e in evs if e.kind is Kind.NORMAL}
    derived = [e for e in evs if e.kind is Kind.POISON and e.poison not in DEFAULT]
    assert {e.poison for e in derived} == set(PoisonKind) - set(DEFAULT)
    for bad in derived:
        if bad.version == 0:  # drawn before any change was made: a record of no change
            continue
        change = changes[(bad.order_id, bad.version)]
        assert change.seq < bad.seq and bad.event_id != change.event_id
        assert (bad.after, bad.tx_id) == (change.after, change.tx_id)
    # The default mix keeps its records of no change (version 0).
    defaults = [e for e in evs if e.kind is Kind.POISON and e.poison in DEFAULT]
    assert all(e.version == 0 for e in defaults)


def test_a_poison_window_of_fraction_one_makes_each_of_its_records_bad_in_its_shapes() -> None:
    burst = Burst(Kind.POISON, 40, 41, 1.0, shapes=(PoisonKind.KEY_AS_STRING,))
    evs = events(events=100, keys=20, seed=3, bursts=(burst,))
    bad = [e for e in evs if e.kind is Kind.POISON]
    assert [(e.seq, e.poison) for e in bad] == [(40, PoisonKind.KEY_AS_STRING)]
    with pytest.raises(ValueError, match="poison_shapes: at least one shape"):
        events(events=10, poison_shapes=())


def test_a_record_no_document_can_hold_is_dead_lettered_and_a_tombstone_skipped() -> None:
    (big,) = bad_records(PoisonKind.OVERSIZE)[:1]
    (tombstone,) = bad_records(PoisonKind.TOMBSTONE)[:1]
    raw = [RawRecord(0, 1, big.value()), RawRecord(0, 2, tombstone.value())]
    batch, poison = split(1, "t", "g", raw)
    assert batch.records == () and batch.last_offsets == {0: 2}
    assert [(p.offset, p.reason) for p in poison] == [(1, TOO_LARGE)]
