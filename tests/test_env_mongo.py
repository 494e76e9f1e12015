"""The local backend's MongoDB: the guarantees the consumer variants will lean on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import ASCENDING, MongoClient, WriteConcern
from pymongo.errors import DuplicateKeyError, PyMongoError

from harness.environment import LocalEnvironment
from tests.support import server_handles, unique

pytestmark = pytest.mark.servers


@pytest.fixture
def client(lab_env: LocalEnvironment) -> Iterator[MongoClient[dict[str, Any]]]:
    c: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri, heartbeatFrequencyMS=500)
    with c:
        yield c


def test_unique_index_rejects_a_duplicate(client: MongoClient) -> None:
    orders = client[unique("db")]["orders"]
    orders.create_index([("event_id", ASCENDING)], unique=True)
    orders.insert_one({"event_id": "e1", "order_id": 7})
    with pytest.raises(DuplicateKeyError) as caught:
        orders.insert_one({"event_id": "e1", "order_id": 7})
    assert caught.value.code == 11000
    assert orders.count_documents({}) == 1


def test_aborted_transaction_leaves_nothing(client: MongoClient) -> None:
    db = client[unique("db")]
    db.create_collection("orders")
    db.create_collection("consumer_offsets")
    with client.start_session() as session, session.start_transaction():
        db.orders.insert_one({"_id": "e1"}, session=session)
        db.consumer_offsets.insert_one({"_id": "g@t@0", "offset": 1}, session=session)
        # Visible inside the transaction, invisible outside it.
        assert db.orders.count_documents({}, session=session) == 1
        assert db.orders.count_documents({}) == 0
        session.abort_transaction()
    assert db.orders.count_documents({}) == 0
    assert db.consumer_offsets.count_documents({}) == 0


def test_committed_transaction_writes_both_collections(client: MongoClient) -> None:
    db = client[unique("db")]
    db.create_collection("orders")
    db.create_collection("consumer_offsets")
    with client.start_session() as session, session.start_transaction():
        db.orders.insert_many([{"_id": f"e{i}"} for i in range(5)], session=session)
        db.consumer_offsets.update_one(
            {"_id": "g@t@0"}, {"$set": {"offset": 4}}, upsert=True, session=session
        )
        assert db.consumer_offsets.count_documents({}) == 0  # not yet, from outside
    assert db.orders.count_documents({}) == 5
    assert db.consumer_offsets.find_one({"_id": "g@t@0"}) == {"_id": "g@t@0", "offset": 4}


@pytest.mark.parametrize("hard", [True, False], ids=["kill-9", "clean"])
def test_data_survives_a_restart(lab_env: LocalEnvironment, hard: bool) -> None:
    name = unique("db")
    c: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri)
    with c:
        orders = c[name].get_collection("orders", write_concern=WriteConcern(w=1, j=True))
        orders.insert_many([{"_id": i, "v": i * i} for i in range(2000)])
    before = server_handles(lab_env.directory)["mongo"]

    lab_env.restart_mongo(hard=hard)

    assert not before.alive() and server_handles(lab_env.directory)["mongo"] != before
    c = MongoClient(lab_env.mongo_uri, serverSelectionTimeoutMS=30_000)
    with c:
        docs = list(c[name].orders.find().sort("_id"))
    assert docs == [{"_id": i, "v": i * i} for i in range(2000)]


@pytest.mark.parametrize(
    ("code", "label"),
    [(91, "UnknownTransactionCommitResult"), (251, "TransientTransactionError")],
)
def test_failcommand_fails_the_next_commit_with_its_code_and_label(
    client: MongoClient, code: int, label: str
) -> None:
    db = client[unique("db")]
    db.create_collection("orders")
    # pymongo retries a failed commitTransaction once when the error is retryable (91 is), so
    # the failpoint fires for two commits to let the error reach the caller.
    client.admin.command(
        "configureFailPoint",
        "failCommand",
        mode={"times": 2},
        data={"failCommands": ["commitTransaction"], "errorCode": code, "errorLabels": [label]},
    )
    try:
        with client.start_session() as session:
            session.start_transaction()
            db.orders.insert_one({"_id": "e1"}, session=session)
            with pytest.raises(PyMongoError) as caught:
                session.commit_transaction()
    finally:
        client.admin.command("configureFailPoint", "failCommand", mode="off")
    # 91 (ShutdownInProgress) surfaces as NotPrimaryError, which carries the code in details.
    assert caught.value.details["code"] == code  # type: ignore[attr-defined]
    assert caught.value.has_error_label(label)
    # And once the failpoint is off, commits go through again.
    with client.start_session() as session, session.start_transaction():
        db.orders.insert_one({"_id": "e2"}, session=session)
    assert db.orders.find_one({"_id": "e2"}) == {"_id": "e2"}
