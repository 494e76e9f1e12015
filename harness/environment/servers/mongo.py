"""MongoDB: SecantusDB, a MongoDB-wire server on WiredTiger, as a single-node replica set."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from harness.environment.ports import LOOPBACK
from harness.environment.servers.base import LocalServer
from harness.readiness import NotReady, accepts_connections

REPLICA_SET = "secantus"
# How long an idle transaction lives (mongod: 60 s); see options().
TRANSACTION_LIFETIME_S = 10


class SecantusMongo(LocalServer):
    name = "mongo"
    role = "MongoDB replica set (SecantusDB)"

    @property
    def storage(self) -> Path:
        return self.ctx.directory / "mongo"

    @property
    def config(self) -> Path:
        return self.ctx.directory / "secantusd.toml"

    @property
    def uri(self) -> str:
        return f"mongodb://{self.address}/?replicaSet={REPLICA_SET}"

    def argv(self) -> list[str]:
        return [
            # Not secantusd-py: see secantus_server for the slowdown it avoids.
            sys.executable,
            "-m",
            "harness.environment.servers.secantus_server",
            *options(config=str(self.config), host=LOOPBACK, port=self.port,
                     storage_path=str(self.storage)),
        ]  # fmt: skip

    def prepare(self) -> None:
        self.storage.mkdir(parents=True, exist_ok=True)
        self.config.write_text("# chaoslab: settings are given on the command line\n")

    def probe(self) -> None:
        accepts_connections(LOOPBACK, self.port)
        writable_primary(f"mongodb://{self.address}/?directConnection=true")


def writable_primary(uri: str) -> None:
    """Probe: raises unless the server at ``uri`` is the writable primary of ``REPLICA_SET``."""
    c: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=2000)
    with c:
        hello = c.admin.command("hello")
    if not hello.get("isWritablePrimary") or hello.get("setName") != REPLICA_SET:
        raise NotReady(f"not a writable primary of {REPLICA_SET}: {hello}")


def options(*, config: str, host: str, port: int, storage_path: str) -> list[str]:
    """The server's command line (both backends run it so)."""
    return [
        # An explicit (empty) config stops it picking up ./secantusd.toml or ~/.secantus.
        "--config", config, "--host", host, "--port", str(port), "--storage-path", storage_path,
        # configureFailPoint, for the failCommand faults.
        "--enable-test-commands",
        "--cache-size", "512M",
        # The lab kills MongoDB (mongo-restart, a container kill): an acknowledged write must
        # survive it, as a journaled majority write (mongod's default on a replica set) does.
        # Without it, SIGKILL lost the writes of the last seconds - data and oplog - and the
        # oplog's sequence started again below a relay's saved resume token, whose stream then
        # silently never delivered another change (measured here). The lab's server turns its
        # fsync at every commit into a write to the OS at every commit, which a kill survives
        # and which is much faster (secantus_server.open_writing_every_commit).
        "--sync-on-commit",
        # The oplog holds 20,000 entries, not SecantusDB's 100,000: shrinking it (oplog-shrink)
        # deletes what it holds one entry at a time, and at the default size that took long
        # enough for a killed relay to come back before its resume point was gone
        # (docs/faults.md). Pruning as it grows costs the same either way (every 1,000 entries,
        # the oldest 1,000); only the relays read it, each a few entries behind.
        "--oplog-max-entries", "20000",
        # A transaction left open by a killed client (a lost Spark executor's Python worker)
        # holds its documents until MongoDB aborts it, transactionLifetimeLimitSeconds after
        # its last statement; a retry of the same writes waits for that. mongod's default, 60 s,
        # was most of spark-executor-loss's run (docs/scenarios.md); the lab's server takes
        # mongod's option.
        "--setParameter", f"transactionLifetimeLimitSeconds={TRANSACTION_LIFETIME_S}",
    ]  # fmt: skip
