"""The local backend's MongoDB: the guarantees the consumer variants will lean on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from pymongo import ASCENDING, MongoClient, WriteConcern
from pymongo.errors import DuplicateKeyError, OperationFailure, PyMongoError

from harness.environment.local import LocalEnvironment
from harness.environment.servers.mongo import TRANSACTION_LIFETIME_S
from harness.faults.families.oplog import oplog_size_mb
from harness.readiness import wait_for
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


def test_a_write_with_the_default_write_concern_survives_kill_9(lab_env: LocalEnvironment) -> None:
    """A real mongod on a replica set journals a write before it acknowledges it (w: majority);
    the lab's SecantusDB syncs on commit so that a killed server keeps it too (without that,
    the writes of the last seconds were gone after a SIGKILL)."""
    name = unique("db")
    c: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri)
    with c:
        c[name].orders.insert_one({"_id": 1})
        c[name].orders.update_one({"_id": 1}, {"$set": {"v": 2}})
        c[name].orders.insert_many([{"_id": i} for i in range(2, 202)])
        for i in range(202, 252):
            c[name].orders.insert_one({"_id": i})
    lab_env.restart_mongo(hard=True)
    c = MongoClient(lab_env.mongo_uri, serverSelectionTimeoutMS=30_000)
    with c:
        assert c[name].orders.find_one({"_id": 1}) == {"_id": 1, "v": 2}
        assert c[name].orders.count_documents({}) == 251


def changes(stream: Any, n: int, deadline_s: float = 20.0) -> list[int]:
    """The documentKey ids of the next ``n`` changes (fewer if the deadline passes)."""
    found: list[int] = []
    deadline = time.monotonic() + deadline_s
    while len(found) < n and time.monotonic() < deadline:
        change = stream.try_next()
        if change is not None:
            found.append(change["documentKey"]["_id"])
    return found


@pytest.mark.parametrize("hard", [True, False], ids=["kill-9", "clean"])
def test_a_change_stream_resumes_across_a_restart_losing_nothing(
    lab_env: LocalEnvironment, hard: bool
) -> None:
    name = unique("db")
    c: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri, heartbeatFrequencyMS=500)
    with c:
        orders = c[name].create_collection("orders")
        with orders.watch(max_await_time_ms=250) as live:
            orders.insert_many([{"_id": i} for i in range(5)])
            assert changes(live, 2) == [0, 1]
            token = live.resume_token
            lab_env.restart_mongo(hard=hard)
            orders.insert_many([{"_id": i} for i in range(5, 8)])
            # The open stream, resumed by the driver from the last token it saw.
            assert changes(live, 6) == [2, 3, 4, 5, 6, 7]
        # A new stream from the token saved before the restart.
        with orders.watch(resume_after=token, max_await_time_ms=250) as resumed:
            assert changes(resumed, 6) == [2, 3, 4, 5, 6, 7]


def writes(c: MongoClient[dict[str, Any]], name: str, k: int, count: int) -> None:
    """``count`` writes of client ``k``: clients 0-3 write transactions of two inserts (into
    ``name``'s orders and outbox), the others single inserts."""
    for i in range(count):
        if k >= 4:
            c[name]["outbox"].insert_one({"_id": f"{k}-{i}"})
            continue
        with c.start_session() as s, s.start_transaction():
            c[name]["orders"].insert_one({"_id": f"{k}-{i}"}, session=s)
            c[name]["outbox"].insert_one({"_id": f"{k}-{i}"}, session=s)


def test_a_resume_point_pruned_from_the_oplog_is_history_lost(lab_env: LocalEnvironment) -> None:
    """replSetResizeOplog (emulated by the lab's server) prunes the oldest entries; a resume from
    one of them is SecantusDB's own ChangeStreamHistoryLost."""
    name = unique("db")
    c: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri)
    with c:
        before = oplog_size_mb(lab_env.mongo_uri)
        orders = c[name].create_collection("orders")
        behind = orders.watch(max_await_time_ms=250)  # open, and left behind
        with orders.watch(max_await_time_ms=250) as stream:
            orders.insert_one({"_id": 0})
            assert changes(stream, 1) == [0]
            token = stream.resume_token
        try:
            reply = c.admin.command({"replSetResizeOplog": 1, "size": 0.5})
            assert reply["maxEntries"] == 32
            assert reply["last"] - reply["first"] >= 0 and isinstance(reply["recounted"], int)
            oplog = c.local["oplog.rs"]

            def capped() -> None:
                assert oplog.count_documents({}) <= 32 + 32 // 10

            orders.insert_many([{"_id": i} for i in range(1, 100)])
            # Cut back in the background (as mongod truncates its oplog): waited for.
            wait_for(capped, what="the oplog cut back to its cap", timeout=10)
            with pytest.raises(OperationFailure) as lost:
                orders.watch(resume_after=token)
            assert lost.value.code == 286
            # A stream still open whose next changes were pruned ends so too (the lab's
            # server: SecantusDB's own read on past the gap) - not silently at change 68.
            with pytest.raises(OperationFailure) as lost_live:
                changes(behind, 100)
            assert lost_live.value.code == 286
            behind.close()
            # Pruned as it grows: every third entry (a tenth of the cap), the oplog is cut back
            # to its cap - the rows a write is still making are cut at the next prune.
            for i in range(100, 104):
                orders.insert_one({"_id": i})
            wait_for(capped, what="the oplog cut back to its cap", timeout=10)
            # ... and so under transactions and single writes from six clients at once (the
            # outbox's writer and relays), none of them failing: SecantusDB pruned inside the
            # commit of a transaction, and commits that pruned the same entries failed with
            # InternalError (docs/environment.md) - the lab's server prunes outside transactions,
            # in the background, as mongod does.
            c[name].create_collection("outbox")  # four transactions creating it conflict
            with ThreadPoolExecutor(6) as pool:
                list(pool.map(lambda k: writes(c, name, k, 100), range(6)))
            wait_for(capped, what="the oplog cut back to its cap", timeout=10)
        finally:
            c.admin.command({"replSetResizeOplog": 1, "size": before})
        assert oplog_size_mb(lab_env.mongo_uri) == before
        with pytest.raises(OperationFailure) as bad:
            c.admin.command({"replSetResizeOplog": 1, "size": 0})
        assert "size" in str(bad.value)


def test_a_transaction_left_open_is_aborted_after_the_lifetime(client: MongoClient) -> None:
    """A killed client's open transaction holds its documents until the server aborts it
    (``transactionLifetimeLimitSeconds``, 10 s in the lab): a retry of the same write in a
    transaction of its own (a lost executor's task, run again) conflicts until then, and gets
    through after; the open transaction is gone. (SecantusDB 0.7.0b3 blocks a write outside a
    transaction on such a document far past the lifetime - docs/environment.md - so none is
    made here.)"""
    orders = client[unique("db")]["orders"]
    orders.insert_one({"_id": "held", "v": 0})
    orphan = client.start_session()
    orphan.start_transaction()
    orders.update_one({"_id": "held"}, {"$set": {"v": 1}}, session=orphan)

    def retry() -> None:
        with client.start_session() as session, session.start_transaction():
            orders.update_one({"_id": "held"}, {"$set": {"v": 2}}, session=session)

    with pytest.raises(OperationFailure) as conflict:
        retry()
    assert conflict.value.code == 112  # WriteConflict
    wait_for(retry, what="the retried write", timeout=TRANSACTION_LIFETIME_S + 20)
    with pytest.raises(OperationFailure) as caught:
        orphan.commit_transaction()
    assert caught.value.code == 251  # NoSuchTransaction: the server aborted it
    assert orders.find_one({"_id": "held"}) == {"_id": "held", "v": 2}
    orphan.end_session()
