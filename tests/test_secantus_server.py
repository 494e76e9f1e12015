"""The local MongoDB's retryable-write records, pruned from the oldest end
(harness/environment/servers/secantus_server.py)."""

from __future__ import annotations

import random
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import Any

import bson
import pytest
from bson import Int64
from bson.son import SON
from pymongo import MongoClient
from secantus import commands, transactions, wire
from secantus import server as server_module
from secantus.server import SecantusDBServer
from secantus.transactions import TransactionRegistry
from secantus.wire import OP_MSG

from harness.environment.local import LocalEnvironment
from harness.environment.servers.secantus_server import (
    HELLO_COMMANDS,
    BadParameter,
    chained_reply,
    hello_or_quiescing,
    prune_oldest,
    secantus_prune,
    secantus_stream_getmore,
    secantus_stream_hello,
    streamed,
    take_set_parameters,
)
from harness.readiness import NotReady, wait_for
from tests.support import unique

READ = wire._recv_exactly.__code__


def registry_with(records: list[tuple[int, float]], now: float) -> TransactionRegistry:
    registry = TransactionRegistry(time_func=lambda: now)
    for txn_number, at in records:
        registry._retryable[(b"lsid", txn_number)] = ({"ok": 1}, at, b"cmd")
    return registry


@pytest.mark.parametrize("seed", range(20))
def test_pruning_from_the_oldest_end_keeps_what_secantus_keeps(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transactions, "_RETRYABLE_RECORD_MAX", 50)
    monkeypatch.setattr(transactions, "_RETRYABLE_RECORD_LIFETIME_SECONDS", 100.0)
    rng = random.Random(seed)
    at, records = 0.0, []
    for n in range(rng.randrange(0, 200)):  # made in time order, as the server makes them
        at += rng.expovariate(1.0)
        records.append((n, at))
    now = at + rng.uniform(0, 150)
    theirs, ours = registry_with(records, now), registry_with(records, now)
    secantus_prune(theirs)
    prune_oldest(ours)
    assert list(ours._retryable) == sorted(theirs._retryable, key=lambda k: k[1])
    assert len(ours._retryable) <= 50


def increment(txn_number: int) -> SON:
    """A retryable ``$inc`` as a driver sends it: the session's lsid is added by pymongo."""
    return SON([
        ("update", "counters"),
        ("updates", [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}, "upsert": True}]),
        ("txnNumber", Int64(txn_number)),
    ])  # fmt: skip


@pytest.mark.servers
def test_a_retried_write_is_answered_from_its_record_not_applied_again(
    lab_env: LocalEnvironment,
) -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(lab_env.mongo_uri)
    with client:
        db = client[unique("db")]
        with client.start_session() as session:
            first = db.command(increment(1), session=session)
            for n in range(2, 300):  # other retryable writes, each of which prunes the records
                db.command(increment(n), session=session)
            retried = db.command(increment(1), session=session)  # a driver's retry: same number
        assert retried["n"] == first["n"] == 1
        assert db.counters.find_one({"_id": 1}) == {"_id": 1, "n": 299}


def test_set_parameter_is_taken_out_of_the_command_line() -> None:
    argv = ["--port", "1", "--setParameter", "transactionLifetimeLimitSeconds=10", "--x"]
    assert take_set_parameters(argv) == (
        ["--port", "1", "--x"],
        {"transactionLifetimeLimitSeconds": 10.0},
    )


@pytest.mark.parametrize(
    "pair",
    [
        "failpoint=1",
        "transactionLifetimeLimitSeconds=soon",
        "transactionLifetimeLimitSeconds",
        "transactionLifetimeLimitSeconds=0",
    ],
)
def test_a_parameter_the_lab_does_not_set_is_refused(pair: str) -> None:
    with pytest.raises(BadParameter):
        take_set_parameters(["--setParameter", pair])


def hello(conn: socket.socket) -> dict[str, Any]:
    """A ``hello`` as one OP_MSG on ``conn``, and the server's reply (the bytes a driver's
    monitor sends; a client library would open connections of its own)."""
    body = struct.pack("<IB", 0, 0) + bson.encode({"hello": 1, "$db": "admin"})
    conn.sendall(struct.pack("<iiii", 16 + len(body), 1, 0, OP_MSG) + body)
    header = conn.recv(16, socket.MSG_WAITALL)
    (length,) = struct.unpack("<i", header[:4])
    reply = conn.recv(length - 16, socket.MSG_WAITALL)
    return bson.decode(reply[5:])  # after the flags and the section's kind


def reading_a_request(server: SecantusDBServer) -> None:
    """Probe: raises unless a connection of ``server`` waits for its client's next request
    (its thread in SecantusDB's read of a message, past its check for a stop)."""
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or 0)
        if thread.name.startswith("secantus-conn-") and frame and frame.f_code is READ:
            return
    raise NotReady("no connection waiting for a request")


def test_a_member_shutting_down_answers_hello_as_mongod_in_quiesce_not_as_a_standalone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in HELLO_COMMANDS:  # as install() sets them in the lab's server
        monkeypatch.setitem(commands._HANDLERS, name, hello_or_quiescing)
    server = SecantusDBServer(port=0, storage_path=str(tmp_path / "db"), cache_size="64M")
    server.start()
    try:
        with socket.create_connection(server.address, timeout=10) as conn:
            assert hello(conn)["setName"] == "secantus"
            wait_for(lambda: reading_a_request(server), what="the connection idle", timeout=10)
            # Where SecantusDB's stop() is after its first steps, held open (on a busy machine
            # long enough for a driver's monitor to ask): the listening socket closed, the
            # connections it has still served.
            server._stop_event.set()
            server._socket.close()
            server._socket = None
            reply = hello(conn)
        # Not a standalone (no setName), which a driver drops from its replica set for good.
        assert (reply["ok"], reply.get("code"), reply.get("codeName")) == (
            0.0, 91, "ShutdownInProgress"
        ), reply  # fmt: skip
    finally:
        server.stop()


def streaming_hello(conn: socket.socket, replies: int) -> list[tuple[int, int]]:
    """An awaitable ``hello`` sent as a driver's streaming monitor sends it (exhaustAllowed,
    maxAwaitTimeMS, an out-of-date topologyVersion), and the (requestID, responseTo) of the
    first ``replies`` replies the server streams back."""
    doc = {
        "hello": 1, "maxAwaitTimeMS": 100, "$db": "admin",
        "topologyVersion": {"processId": bson.ObjectId(), "counter": Int64(0)},
    }  # fmt: skip
    body = struct.pack("<IB", wire.OP_MSG_FLAG_EXHAUST_ALLOWED, 0) + bson.encode(doc)
    conn.sendall(struct.pack("<iiii", 16 + len(body), 7, 0, OP_MSG) + body)
    ids = []
    for _ in range(replies):
        header = conn.recv(16, socket.MSG_WAITALL)
        length, request_id, response_to, _op = struct.unpack("<iiii", header)
        conn.recv(length - 16, socket.MSG_WAITALL)
        ids.append((request_id, response_to))
    return ids


@pytest.mark.parametrize("chained", [False, True])
def test_a_stream_of_replies_answers_each_reply_before_it_as_mongods_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chained: bool
) -> None:
    if chained:  # as install() sets them in the lab's server
        monkeypatch.setattr(server_module, "build_op_msg_reply", chained_reply)
        monkeypatch.setattr(SecantusDBServer, "_stream_awaitable_hello",
                            streamed(secantus_stream_hello))  # fmt: skip
        monkeypatch.setattr(SecantusDBServer, "_stream_exhaust_getmore",
                            streamed(secantus_stream_getmore))  # fmt: skip
    server = SecantusDBServer(port=0, storage_path=str(tmp_path / "db"), cache_size="64M")
    server.start()
    try:
        with socket.create_connection(server.address, timeout=10) as conn:
            ids = streaming_hello(conn, 3)
    finally:
        server.stop()
    assert ids[0][1] == 7  # the first answers the request
    answered = [response_to for _, response_to in ids[1:]]
    if chained:  # each later one, the reply before it: what the Java driver checks
        assert answered == [request_id for request_id, _ in ids[:-1]], ids
    else:  # SecantusDB's own: the request's id again, which the Java driver refuses
        assert answered == [7, 7], ids
