"""chaoslab repair: delete the duplicates by key, keep the right copy, then the unique index."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from harness.environment.local import LocalEnvironment
from harness.errors import BadInput, LabError
from harness.repair import main, repair
from tests.support import unique

pytestmark = pytest.mark.servers

T0 = datetime(2024, 3, 1, 12, 0)


@pytest.fixture
def client(lab_env: LocalEnvironment) -> Iterator[MongoClient[dict[str, Any]]]:
    c: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri, heartbeatFrequencyMS=500)
    with c:
        yield c


@pytest.fixture
def db(client: MongoClient[dict[str, Any]]) -> Iterator[Database[dict[str, Any]]]:
    name = unique("repair").replace("-", "_")
    yield client[name]
    client.drop_database(name)


def seed_duplicates(coll: Collection[dict[str, Any]], keys: int = 50) -> dict[str, list[dict]]:
    """Keys with 1, 2 or 3 copies, distinct created_at, inserted in shuffled order (so the
    insertion order, hence the ObjectId order, says nothing about which copy is earliest)."""
    rnd = random.Random(2)
    minutes = rnd.sample(range(100_000), keys * 3)
    docs: list[dict[str, Any]] = []
    for i in range(keys):
        for _ in range(3 if i % 5 == 0 else 2 if i % 5 in (1, 2) else 1):
            docs.append(
                {"external_message_id": f"m-{i:02d}", "created_at": T0 + timedelta(minutes.pop())}
            )
    rnd.shuffle(docs)
    coll.insert_many(docs)
    by_key: dict[str, list[dict]] = {}
    for d in docs:
        by_key.setdefault(d["external_message_id"], []).append(d)
    return by_key


def run(uri: str, db: str, coll: str, *args: str) -> int:
    return main(["repair", "--uri", uri, "--db", db, "--collection", coll, *args])


def snapshot(coll: Collection[dict[str, Any]]) -> tuple[list[dict], list[str]]:
    return list(coll.find().sort("_id", 1)), sorted(ix["name"] for ix in coll.list_indexes())


def test_keeps_the_earliest_copy_and_builds_the_unique_index(
    lab_env: LocalEnvironment, db: Database[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    by_key = seed_duplicates(db.events)
    # 10 keys with 3 copies, 20 with 2, 20 with 1: 90 documents, 40 of them extra copies.
    assert db.events.count_documents({}) == 90
    earliest = {min(ds, key=lambda d: d["created_at"])["_id"] for ds in by_key.values()}

    rc = run(lab_env.mongo_uri, db.name, "events", "--key", "external_message_id")
    out = capsys.readouterr().out
    assert rc == 0, out

    assert {d["_id"] for d in db.events.find()} == earliest
    assert "duplicate groups: 30 (20 with 2 copies, 10 with 3 copies; 70 documents)" in out
    assert "removed: 40" in out
    assert "documents: 90 before, 50 after" in out
    first = min(k for k, ds in by_key.items() if len(ds) > 1)
    kept = min(by_key[first], key=lambda d: d["created_at"])["_id"]
    assert f"external_message_id={first!r}: kept {kept}" in out
    assert "index: created unique index external_message_id_1, verified" in out

    index = next(ix for ix in db.events.list_indexes() if ix["name"] == "external_message_id_1")
    assert index["unique"] is True
    assert dict(index["key"]) == {"external_message_id": 1}
    assert "partialFilterExpression" not in index  # every document has the key
    with pytest.raises(DuplicateKeyError) as caught:
        db.events.insert_one({"external_message_id": "m-07", "created_at": T0})
    assert caught.value.code == 11000


def test_keep_latest_keeps_the_latest_copy(db: Database[dict[str, Any]]) -> None:
    by_key = seed_duplicates(db.events, keys=20)
    latest = {max(ds, key=lambda d: d["created_at"])["_id"] for ds in by_key.values()}

    report = repair(db.events, "external_message_id", keep="latest", sample=3)

    assert {d["_id"] for d in db.events.find()} == latest
    assert report.duplicates_removed == 16  # 4 keys x 2 extra + 8 keys x 1
    assert (report.groups, report.copies) == (12, {2: 8, 3: 4})
    assert (report.documents_before, report.documents_after) == (36, 20)
    assert report.index_created and report.index_status == "created"
    # The sample: the first groups in key order, each with the latest copy kept.
    assert [g.key["external_message_id"] for g in report.kept] == ["m-00", "m-01", "m-02"]
    for g in report.kept:
        copies = by_key[g.key["external_message_id"]]
        assert g.kept_id == max(copies, key=lambda d: d["created_at"])["_id"]
        assert sorted(g.removed_ids) == sorted(d["_id"] for d in copies if d["_id"] != g.kept_id)


def test_ties_go_to_the_smaller_id_for_earliest_and_the_larger_for_latest(
    db: Database[dict[str, Any]],
) -> None:
    later = T0 + timedelta(minutes=1)
    cases = {
        "earliest": ({"m": T0, "a": T0, "z": later}, "a"),
        "latest": ({"m": later, "z": later, "a": T0}, "z"),
    }
    for keep, (created, expected) in cases.items():
        coll = db[f"ties_{keep}"]
        coll.insert_many([{"_id": i, "k": 1, "created_at": t} for i, t in created.items()])
        report = repair(coll, "k", keep=keep)
        assert [d["_id"] for d in coll.find()] == [expected], keep
        assert report.kept[0].kept_id == expected


def test_compound_key_dotted_by_and_documents_missing_a_key_field(
    lab_env: LocalEnvironment, db: Database[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    def doc(order: str, version: int | None, minute: int) -> dict[str, Any]:
        d: dict[str, Any] = {"_id": ObjectId(), "order_id": order, "status": "x"}
        if version is not None:
            d["version"] = version
        d["_lab"] = {"written_at": T0 + timedelta(minutes=minute)}
        return d

    docs = [
        doc("o1", 1, 5),
        doc("o1", 1, 3),  # earliest of (o1, 1)
        doc("o1", 1, 9),
        doc("o1", 2, 1),  # same order, another version: no duplicate of the above
        doc("o2", 1, 7),
        doc("o2", 1, 2),  # earliest of (o2, 1)
        doc("o3", None, 1),  # no version: not grouped, even though there are two
        doc("o3", None, 2),
    ]
    db.events.insert_many(docs)
    rc = run(
        lab_env.mongo_uri,
        db.name,
        "events",
        *("--key", "order_id, version", "--by", "_lab.written_at"),
    )
    out = capsys.readouterr().out
    assert rc == 0, out

    left = {d["_id"] for d in db.events.find()}
    assert left == {docs[i]["_id"] for i in (1, 3, 5, 6, 7)}
    assert "documents missing a key field: 2 (not grouped, left alone)" in out
    assert "duplicate groups: 2 (1 with 2 copies, 1 with 3 copies; 5 documents)" in out
    assert f"order_id='o1', version=1: kept {docs[1]['_id']} (_lab.written_at " in out
    assert "removed: 3" in out
    # Two documents lack version: a plain unique index would index both as null and refuse to
    # build, so it is partial over the documents that have both fields.
    index = next(ix for ix in db.events.list_indexes() if ix["name"] == "order_id_1_version_1")
    assert index["unique"] is True
    assert list(index["key"].items()) == [("order_id", 1), ("version", 1)]
    assert index["partialFilterExpression"] == {
        "order_id": {"$exists": True},
        "version": {"$exists": True},
    }
    assert "(partial: over documents that have every key field), verified" in out
    with pytest.raises(DuplicateKeyError):
        db.events.insert_one({"order_id": "o2", "version": 1})
    db.events.insert_one({"order_id": "o3"})  # still no key, still allowed


def test_clean_collection_loses_nothing_and_gets_the_index(db: Database[dict[str, Any]]) -> None:
    db.events.insert_many([{"k": i, "created_at": T0} for i in range(30)])
    report = repair(db.events, "k")
    assert (report.groups, report.duplicates_removed) == (0, 0)
    assert (report.documents_before, report.documents_after) == (30, 30)
    assert report.index_status == "created" and not report.index_partial
    assert db.events.count_documents({}) == 30
    assert any(ix["name"] == "k_1" and ix.get("unique") for ix in db.events.list_indexes())


def test_dry_run_changes_nothing_and_says_what_it_would_do(
    lab_env: LocalEnvironment, db: Database[dict[str, Any]]
) -> None:
    seed_duplicates(db.events, keys=10)  # 2 keys x 3, 4 x 2, 4 x 1: 6 extra copies
    before = snapshot(db.events)
    # As a user runs it: python -m harness.repair.
    result = subprocess.run(
        [
            *(sys.executable, "-m", "harness.repair", "repair", "--uri", lab_env.mongo_uri),
            *("--db", db.name, "--collection", "events", "--key", "external_message_id"),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert snapshot(db.events) == before
    assert before[1] == ["_id_"]
    out = result.stdout
    assert out.startswith("dry run: nothing is changed\n")
    assert "duplicate groups: 6 (4 with 2 copies, 2 with 3 copies; 14 documents)" in out
    assert "would remove: 8" in out
    assert "documents: 18 before, 10 after (if applied)" in out
    assert "external_message_id='m-00': would keep " in out
    assert "index: would create unique index external_message_id_1" in out


def test_second_run_removes_nothing_and_finds_the_index(
    lab_env: LocalEnvironment, db: Database[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    seed_duplicates(db.events, keys=10)
    first = repair(db.events, "external_message_id")
    assert first.duplicates_removed == 8 and first.index_created
    after_first = snapshot(db.events)

    rc = run(lab_env.mongo_uri, db.name, "events", "--key", "external_message_id")
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "duplicate groups: 0" in out
    assert "removed: 0" in out
    assert "index: unique index external_message_id_1 already exists" in out
    assert snapshot(db.events) == after_first
    second = repair(db.events, "external_message_id")
    assert (second.duplicates_removed, second.index_created) == (0, False)
    assert second.index_status == "exists"


@pytest.mark.parametrize(
    ("where", "key", "message"),
    [
        ("collection", "k", "collection 'nope' not found in database"),
        ("database", "k", "database '{db}' not found"),
        ("key", " , ", "--key is empty"),
        ("key", "k,,v", "--key has an empty field name"),
        ("key", "$k", "'$k' is not a field path"),
    ],
)
def test_bad_input_exits_2_and_creates_nothing(
    lab_env: LocalEnvironment,
    client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    where: str,
    key: str,
    message: str,
) -> None:
    if where != "database":
        db.events.insert_many([{"k": 1}, {"k": 1}])
    coll = "nope" if where == "collection" else "events"
    before = snapshot(db.events)

    rc = run(lab_env.mongo_uri, db.name, coll, "--key", key)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message.format(db=db.name) in err
    assert snapshot(db.events) == before
    assert "nope" not in db.list_collection_names()  # not created as a side effect
    if where == "database":
        assert db.name not in client.list_database_names()


def test_bad_keep_exits_2(lab_env: LocalEnvironment, db: Database[dict[str, Any]]) -> None:
    db.events.insert_one({"k": 1})
    assert run(lab_env.mongo_uri, db.name, "events", "--key", "k", "--keep", "middle") == 2
    with pytest.raises(BadInput, match="--keep must be one of earliest, latest"):
        repair(db.events, "k", keep="middle")


def test_copies_without_the_by_field_are_refused_naming_one(
    lab_env: LocalEnvironment, db: Database[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    db.events.insert_many(
        [
            {"_id": "a", "k": 1, "created_at": T0},
            {"_id": "b", "k": 1},  # which copy is earliest? cannot tell
            {"_id": "c", "k": 2, "created_at": T0},
            {"_id": "d", "k": 2, "created_at": T0 + timedelta(1)},
            {"_id": "e", "k": 3},  # no created_at but no copy either: fine
        ]
    )
    before = snapshot(db.events)
    rc = run(lab_env.mongo_uri, db.name, "events", "--key", "k")
    err = capsys.readouterr().err
    assert rc == 2
    assert "1 document(s) of duplicate groups have no created_at" in err
    assert "e.g. _id 'b'" in err
    assert snapshot(db.events) == before  # not even k=2 was deduplicated

    db.events.update_one({"_id": "b"}, {"$set": {"created_at": "2024-03-01"}})
    with pytest.raises(BadInput, match=r"created_at values of different types \(date, string\)"):
        repair(db.events, "k")
    db.events.update_one({"_id": "b"}, {"$set": {"created_at": {"day": 1}}})
    with pytest.raises(BadInput, match=r"created_at value that has no order .*_id 'b'"):
        repair(db.events, "k")
    assert db.events.count_documents({}) == 5


def test_non_unique_index_on_the_key_is_refused_unless_replaced(
    db: Database[dict[str, Any]],
) -> None:
    db.events.insert_many([{"k": i % 3, "created_at": T0 + timedelta(i)} for i in range(6)])
    db.events.create_index("k", name="k_1")
    before = snapshot(db.events)
    with pytest.raises(BadInput, match="index k_1 \\(not unique\\) is on the key"):
        repair(db.events, "k")
    assert snapshot(db.events) == before

    dry = repair(db.events, "k", dry_run=True, replace_index=True)
    assert (dry.index_status, dry.index_replaced, dry.duplicates_removed) == (
        "would replace",
        "k_1",
        3,
    )
    assert snapshot(db.events) == before

    report = repair(db.events, "k", replace_index=True)
    assert (report.index_status, report.duplicates_removed) == ("replaced", 3)
    indexes = {ix["name"]: ix for ix in db.events.list_indexes()}
    assert set(indexes) == {"_id_", "k_1"} and indexes["k_1"]["unique"] is True
    assert sorted(d["k"] for d in db.events.find()) == [0, 1, 2]


def _fail_next_create_index(client: MongoClient[dict[str, Any]], app: str) -> None:
    client.admin.command(
        "configureFailPoint",
        "failCommand",
        mode={"times": 1},
        data={"failCommands": ["createIndexes"], "errorCode": 8000, "appName": app},
    )


def test_index_that_cannot_be_built_exits_1(
    lab_env: LocalEnvironment,
    client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    db.events.insert_many([{"k": i % 2, "created_at": T0 + timedelta(i)} for i in range(4)])
    _fail_next_create_index(client, "chaoslab-repair")  # the CLI's client, only
    try:
        rc = run(lab_env.mongo_uri, db.name, "events", "--key", "k")
    finally:
        client.admin.command("configureFailPoint", "failCommand", mode="off")
    err = capsys.readouterr().err
    assert rc == 1
    assert "could not build the unique index k_1" in err and "2 duplicate(s) were removed" in err
    assert db.events.count_documents({}) == 2  # the dedup happened; a re-run finishes the job
    assert run(lab_env.mongo_uri, db.name, "events", "--key", "k") == 0
    assert any(ix["name"] == "k_1" and ix.get("unique") for ix in db.events.list_indexes())


def test_failed_replacement_rebuilds_the_old_index(
    lab_env: LocalEnvironment, client: MongoClient[dict[str, Any]], db: Database[dict[str, Any]]
) -> None:
    app = unique("repair-test")
    db.events.insert_many([{"k": i % 2, "created_at": T0 + timedelta(i)} for i in range(4)])
    db.events.create_index("k", name="by_k")
    own: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri, appname=app)
    with own:
        _fail_next_create_index(client, app)
        try:
            with pytest.raises(LabError, match="the index by_k it replaces was rebuilt"):
                repair(own[db.name].events, "k", replace_index=True)
        finally:
            client.admin.command("configureFailPoint", "failCommand", mode="off")
    indexes = {ix["name"]: ix for ix in db.events.list_indexes()}
    assert set(indexes) == {"_id_", "by_k"} and not indexes["by_k"].get("unique")
