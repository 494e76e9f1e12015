"""A write MongoDB applied whose reply the lab drops (mongo-ack-lost): the proxy's reading of
MongoDB's messages, its rule's counting (pure), and against the real server through the real
proxy - the driver's retryable write recognised, the same write without retries applied and
reported failed, a transaction's commit retried."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path
from typing import Any

import bson
import pytest
from pymongo import MongoClient
from pymongo.errors import AutoReconnect

from harness.environment.base import Link, LinkRule, LinkRuleRefused
from harness.environment.local import LocalEnvironment
from harness.environment.proxy import mongo_messages as mm
from harness.environment.proxy.rules import RuleError, RuleTable, parse_rule
from harness.errors import BadInput
from harness.faults.kinds import parse_fault
from harness.history.events import EventKind, HistoryWriter, read_history
from harness.pipeline.mongo_options import uri_with
from harness.pipeline.spark.driver_watch import driver_watch
from harness.pipeline.variants import make_variant
from harness.records import FieldErrors
from tests.support import unique

SESSION, OTHER = (bson.Binary.from_uuid(uuid.uuid4()) for _ in range(2))


def op_msg(command: dict[str, Any], *, request_id: int = 7, documents: int = 0) -> bytes:
    """An OP_MSG as a driver sends it: the command document, then (for an insert) its
    documents as a kind-1 sequence."""
    body = b"\x00" + bson.encode(command)
    if documents:
        docs = b"".join(bson.encode({"n": i}) for i in range(documents))
        ident = b"documents\x00"
        body += b"\x01" + struct.pack("<i", 4 + len(ident) + len(docs)) + ident + docs
    payload = struct.pack("<I", 0) + body
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, mm.OP_MSG) + payload


def insert(
    db: str = "lane1", txn: int | None = 1, session: bson.Binary = SESSION
) -> dict[str, Any]:
    command: dict[str, Any] = {"insert": "events", "ordered": True, "$db": db}
    if txn is not None:
        command |= {"lsid": {"id": session}, "txnNumber": bson.Int64(txn)}
    return command


def commit(session: bson.Binary, txn: int) -> dict[str, Any]:
    return {"commitTransaction": 1, "$db": "admin", "lsid": {"id": session},
            "txnNumber": bson.Int64(txn)}  # fmt: skip


def test_a_commands_name_database_and_which_write_it_is() -> None:
    found = mm.command(op_msg(insert("lane1", txn=3), documents=5))
    assert found == mm.Command("insert", "lane1", bytes(SESSION), 3)
    assert found.write == ("insert", bytes(SESSION), 3)
    # Without a session and transaction number a retry cannot be told from a new write.
    plain = mm.command(op_msg(insert("lane1", txn=None)))
    assert plain == mm.Command("insert", "lane1") and plain.write is None
    # A legacy OP_QUERY (an old driver's first handshake) is not a command the proxy reads.
    legacy = struct.pack("<iiii", 20, 1, 0, 2004) + b"\x00" * 4
    assert mm.command(legacy) is None
    assert mm.header(op_msg(insert("lane1"), request_id=42)).request_id == 42


def test_bytes_that_are_no_command_are_refused_by_name() -> None:
    frame = op_msg(insert("lane1"))
    with pytest.raises(mm.MalformedMessage, match="section"):
        mm.command(frame[:-3])  # a section longer than the message
    no_command = struct.pack("<iiiiI", 20, 1, 0, mm.OP_MSG, 0)
    with pytest.raises(mm.MalformedMessage, match="without its command"):
        mm.command(no_command)
    garbage = struct.pack("<iiii", 16, 1, 0, mm.OP_MSG)  # no room for its flags
    with pytest.raises(mm.MalformedMessage, match="cannot be read"):
        mm.command(garbage)
    not_bson = no_command + b"\x00" + struct.pack("<i", 9) + b"\x07" * 5
    with pytest.raises(mm.MalformedMessage, match="cannot be read"):
        mm.command(struct.pack("<i", len(not_bson)) + not_bson[4:])


MODES = {"mongo": "mongo", "kafka/1": "kafka", "plain": "tcp"}


def rule(**fields: Any) -> Any:
    return parse_rule({"listener": "mongo", "action": "ack-lost", **fields}, "r1", MODES)


def test_an_ack_lost_rule_is_for_mongodb_listeners_and_says_what_it_takes() -> None:
    assert rule(commands=["insert"], every=3, times=2).commands == ("insert",)
    with pytest.raises(RuleError, match="needs a MongoDB listener"):
        parse_rule({"listener": "plain", "action": "ack-lost", "commands": ["insert"]}, "r", MODES)
    with pytest.raises(RuleError, match="commands: name at least one"):
        rule()
    with pytest.raises(RuleError, match="every: must be >= 1"):
        rule(commands=["insert"], every=0)
    with pytest.raises(RuleError, match="only ack-lost has them"):
        parse_rule({"listener": "mongo", "action": "cut", "every": 2}, "r", MODES)
    with pytest.raises(LinkRuleRefused, match="Kafka"):
        LinkRule(Link.CONSUMER_KAFKA, "ack-lost", commands=("insert",))
    with pytest.raises(LinkRuleRefused, match="for ack-lost"):
        LinkRule(Link.CONSUMER_MONGO, "cut", commands=("insert",))


def taken(table: RuleTable, command: dict[str, Any]) -> bool:
    found = mm.command(op_msg(command))
    assert found is not None
    return table.ack_lost("mongo", found) is not None


def test_one_write_in_every_of_each_database_loses_its_reply_and_a_retry_gets_its_answer() -> None:
    table = RuleTable()
    table.add(rule(commands=["insert", "commitTransaction"], every=2, times=2))
    # Each database counts its own writes: the first of each is taken, whatever came between.
    assert taken(table, insert("lane1", 1))
    assert taken(table, insert("lane2", 1, OTHER))
    # The driver's retry of a write whose reply was dropped: same session and number, answered.
    assert not taken(table, insert("lane1", 1))
    assert not taken(table, insert("lane1", 2))  # lane1's second write
    assert taken(table, insert("lane1", 3))  # its third: one in every two
    assert not taken(table, insert("lane1", 4))
    assert not taken(table, insert("lane1", 5))  # times: lane1 had two taken already
    assert not taken(table, {"find": "events", "$db": "lane2"})  # not a command it names
    # A commit names admin, and counts for the database its session last wrote into: lane2's
    # second matching write (were it admin's first, it would be taken), then its third.
    assert not taken(table, commit(OTHER, 7))
    assert taken(table, commit(OTHER, 8))
    table.clear()
    assert not taken(table, insert("lane3", 1))  # no rule in force


def test_the_fault_is_checked_and_drawn_as_a_scenario_entry() -> None:
    fault = parse_fault({"kind": "mongo-ack-lost", "at": 2, "duration": 6, "every": 2}, "f")
    assert fault.aim().startswith("MongoDB's replies to insert")
    with pytest.raises(FieldErrors) as caught:
        parse_fault({"kind": "mongo-ack-lost", "at": 2, "duration": 0, "every": 0, "commands": []},
                    "f")  # fmt: skip
    assert {f for f, _ in caught.value.problems} == {"duration", "every", "commands"}


def test_a_variant_takes_its_own_mongodb_settings_over_the_runs() -> None:
    variant = make_variant("naive", {"mongo": {"retryWrites": False}})
    assert variant.label == "naive[retryWrites=false]"
    assert dict(variant.mongo) == {"retryWrites": False}
    assert make_variant("naive").label == "naive" and not make_variant("naive").mongo
    with pytest.raises(BadInput, match=r"mongo\.retryWrite: unknown"):
        make_variant("idempotent", {"mongo": {"retryWrite": False}})


# -- against the real server, through the real proxy --------------------------------------------


def through_ack_lost(env: LocalEnvironment, history: HistoryWriter, retry: bool) -> dict[str, Any]:
    """An insert_many, then a transaction, each with its reply dropped once; what the client
    heard, how often the proxy dropped a reply, and what the server stored."""
    uri = uri_with(env.mongo_uri_for(Link.CONSUMER_MONGO), {"retryWrites": retry})
    client: MongoClient[dict[str, Any]] = MongoClient(uri, event_listeners=driver_watch(history))
    name = unique("acklost")
    found: dict[str, Any] = {}
    with client:
        db = client[name]
        db.create_collection("events")
        db.create_collection("tx")
        rule_id = env.add_link_rule(LinkRule(Link.CONSUMER_MONGO, "ack-lost", commands=("insert",)))
        try:
            db.events.insert_many([{"n": i} for i in range(10)])
            found["insert"] = "answered"
        except AutoReconnect:
            found["insert"] = "reset"
        found["dropped"] = env.remove_link_rule(rule_id)
        commits = LinkRule(Link.CONSUMER_MONGO, "ack-lost", commands=("commitTransaction",))
        rule_id = env.add_link_rule(commits)
        with client.start_session() as session:
            session.with_transaction(lambda s: db.tx.insert_one({"x": 1}, session=s))
        found["commits dropped"] = env.remove_link_rule(rule_id)
    direct: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with direct:  # the server's own count
        found["stored"] = direct[name].events.count_documents({})
        found["committed"] = direct[name].tx.count_documents({})
    return found


@pytest.mark.servers
def test_a_dropped_reply_as_the_driver_and_the_server_see_it(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    history = HistoryWriter(tmp_path / "history", "listener-0")
    # Retryable writes: the driver sent it again, the server answered from its record; a
    # commit whose reply was lost is retried, not run again. Applied once.
    assert through_ack_lost(lab_env, history, retry=True) == {
        "insert": "answered", "dropped": 1, "stored": 10,
        "commits dropped": 1, "committed": 1,
    }  # fmt: skip
    # Without them, the application hears of a failure - of a write that was applied.
    assert through_ack_lost(lab_env, history, retry=False) == {
        "insert": "reset", "dropped": 1, "stored": 10,
        "commits dropped": 1, "committed": 1,
    }  # fmt: skip
    events = read_history(tmp_path / "history")
    errors = [e.detail.split(":")[0] for e in events if e.kind is EventKind.MONGO_ERROR]
    retried = [e.detail.split()[0] for e in events if e.kind is EventKind.MONGO_RETRIED]
    assert errors == ["insert", "commitTransaction", "insert", "commitTransaction"]
    assert retried == ["insert", "commitTransaction", "commitTransaction"]
