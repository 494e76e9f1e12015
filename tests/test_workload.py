"""The workload generator (pure): seeded, Debezium-shaped, with the knobs it promises."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from harness.pipeline.batch import RawRecord, split
from harness.workload import Kind, Op, ParseError, WorkloadSpec, generate, parse
from harness.workload.events import ChangeEvent
from harness.workload.ledger import LedgerRow
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
