"""The local MongoDB's retryable-write records, pruned from the oldest end
(harness/environment/servers/secantus_server.py)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from bson import Int64
from bson.son import SON
from pymongo import MongoClient
from secantus import transactions
from secantus.transactions import TransactionRegistry

from harness.environment.local import LocalEnvironment
from harness.environment.servers.secantus_server import (
    BadParameter,
    prune_oldest,
    secantus_prune,
    take_set_parameters,
)
from tests.support import unique


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
