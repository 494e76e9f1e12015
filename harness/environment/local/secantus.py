"""MongoDB: SecantusDB, a MongoDB-wire server on WiredTiger, as a single-node replica set."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from harness.environment.local.server import LocalServer
from harness.environment.ports import LOOPBACK
from harness.readiness import NotReady, accepts_connections

REPLICA_SET = "secantus"


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
            "harness.environment.local.secantus_server",
            # An explicit (empty) config stops it picking up ./secantusd.toml or ~/.secantus.
            "--config",
            str(self.config),
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--storage-path",
            str(self.storage),
            # configureFailPoint, for the failCommand faults.
            "--enable-test-commands",
            "--cache-size",
            "512M",
        ]

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
