"""PostgreSQL: the database a CDC source reads (Debezium's pgoutput slot), one cluster per
environment, on 127.0.0.1 with logical decoding on.

The server is the machine's own (Debian's ``postgresql``; ``CHAOSLAB_POSTGRES_BIN`` names
another install's ``bin`` folder). PostgreSQL refuses to run as root, and an environment's folder
may sit under folders only root can enter (pytest's): as root, initdb and the server run in a
user namespace of their own (``unshare --user``) where the lab's own uid maps to the
``postgres`` account's (or nobody's). The server sees a non-root owner of its files and runs; the
kernel still checks every access as root's, so no folder changes owner or mode, and the
environment's files stay root's to wipe.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import ClassVar

import psycopg

from harness.environment.ports import LOOPBACK
from harness.environment.servers.base import LocalServer
from harness.errors import BadInput
from harness.readiness import NotReady

BIN_VAR = "CHAOSLAB_POSTGRES_BIN"
DEBIAN_BINS = Path("/usr/lib/postgresql")
MIN_MAJOR = 13  # pgoutput's binary and streaming options Debezium asks for
SUPERUSER = "postgres"
INSTALL_HINT = "apt-get install postgresql (or set CHAOSLAB_POSTGRES_BIN to a bin folder)"
# Slots and WAL senders for the runs sharing the environment: each Debezium connector takes one
# of each, and the lab's own reader of a run's log another slot.
REPLICATION_SLOTS = 16
AUTO_CONF = "postgresql.auto.conf"  # where ALTER SYSTEM writes


def bin_dir() -> Path | None:
    """The folder holding ``postgres`` and ``initdb``: ``CHAOSLAB_POSTGRES_BIN``, else Debian's
    newest, else the one ``postgres`` on PATH is in; None when there is none."""
    if explicit := os.environ.get(BIN_VAR):
        return Path(explicit)
    debian = sorted(
        (p for p in DEBIAN_BINS.glob("*/bin") if p.parent.name.isdigit()),
        key=lambda p: int(p.parent.name),
        reverse=True,
    )
    on_path = shutil.which("postgres")
    for candidate in [*debian, *([Path(on_path).parent] if on_path else [])]:
        if (candidate / "postgres").exists() and (candidate / "initdb").exists():
            return candidate
    return None


def installed() -> tuple[Path | None, str]:
    """The install's ``bin`` folder and its version (``15.18``), or None and why not."""
    found = bin_dir()
    if found is None:
        return None, f"PostgreSQL is not installed: {INSTALL_HINT}"
    if not (found / "postgres").exists():
        return None, f"PostgreSQL: no postgres in {found} ({BIN_VAR})"
    try:
        out = subprocess.run([str(found / "postgres"), "--version"], capture_output=True,
                             text=True, timeout=30).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"PostgreSQL: {found / 'postgres'} --version: {exc}"
    match = re.search(r"(\d+)(?:\.(\d+))?", out)
    if not match:
        return None, f"PostgreSQL: {found / 'postgres'} --version said {out.strip()!r}"
    if int(match.group(1)) < MIN_MAJOR:
        return None, f"PostgreSQL {match.group(0)} in {found}: Debezium needs {MIN_MAJOR} or newer"
    return found, match.group(0)


def required_bin_dir() -> Path:
    found, why = installed()
    if found is None:
        raise BadInput(why)
    return found


def as_unprivileged(argv: list[str]) -> list[str]:
    """``argv`` as PostgreSQL accepts to run it: unchanged for a user, in a user namespace of
    its own for root (the module's docstring says why)."""
    if os.geteuid() != 0:
        return argv
    try:
        uid = pwd.getpwnam(SUPERUSER).pw_uid
    except KeyError:
        uid = pwd.getpwnam("nobody").pw_uid
    unshare = shutil.which("unshare") or "unshare"
    return [unshare, "--user", f"--map-user={uid}", f"--map-group={uid}", "--", *argv]


def settings(port: int, listen: str = LOOPBACK) -> list[str]:
    """The server's ``-c`` settings (both the first start and every restart); ``listen``: a
    container's own interfaces, in the containers backend."""
    values = {
        "listen_addresses": listen,
        "port": str(port),
        # No Unix socket: its path would be the environment's folder's, often past the 107
        # characters a socket path may have; every client connects over TCP.
        "unix_socket_directories": "",
        "wal_level": "logical",
        "max_wal_senders": str(REPLICATION_SLOTS),
        "max_replication_slots": str(REPLICATION_SLOTS),
        # fsync and synchronous_commit stay PostgreSQL's defaults (on): a hard restart must keep
        # what the database said it committed, the source's truth.
        "log_line_prefix": "%m [%p] %q%a ",
    }
    return [arg for key, value in values.items() for arg in ("-c", f"{key}={value}")]


def probe(uri: str, address: str) -> None:
    """Return if the server at ``uri`` answers with logical decoding on; raise NotReady."""
    try:
        with psycopg.connect(uri, connect_timeout=2) as conn:
            row = conn.execute("SHOW wal_level").fetchone()
    except psycopg.OperationalError as exc:
        raise NotReady(f"PostgreSQL on {address}: {exc}".strip()) from None
    if not row or row[0] != "logical":
        raise NotReady(f"PostgreSQL on {address}: wal_level is {row}, not logical")


class PostgresServer(LocalServer):
    name = "postgres"
    role = "PostgreSQL (logical decoding)"
    ready_timeout: ClassVar[float] = 60.0
    # Its fast shutdown (pg_ctl's default): SIGTERM is its smart one, which waits for every
    # client to leave - a CDC source's replication connection never does.
    stop_signal: ClassVar[signal.Signals] = signal.SIGINT

    @property
    def data(self) -> Path:
        return self.ctx.directory / "postgres"

    @property
    def uri(self) -> str:
        return f"postgresql://{SUPERUSER}@{self.address}/postgres"

    def argv(self) -> list[str]:
        postgres = str(required_bin_dir() / "postgres")
        return as_unprivileged([postgres, "-D", str(self.data), *settings(self.port)])

    def prepare(self) -> None:
        """A cluster kept from an earlier start of this environment starts with none of the
        settings a fault changed through ALTER SYSTEM (a run SIGKILLed inside the slot-behind
        fault's checkpoint leaves its cap in this file): the lab sets nothing else there."""
        auto = self.data / AUTO_CONF
        lines = auto.read_text().splitlines() if auto.exists() else []
        if any(not line.startswith("#") for line in lines):
            auto.write_text("".join(f"{line}\n" for line in lines if line.startswith("#")))

    def preparation(self) -> list[str]:
        if (self.data / "PG_VERSION").exists():
            return []  # made at an earlier start of this environment
        initdb = str(required_bin_dir() / "initdb")
        # --no-sync: a cluster made for this environment alone; a crash during it fails `up`.
        return as_unprivileged([initdb, "-D", str(self.data), "-A", "trust", "-U", SUPERUSER,
                                "-E", "UTF8", "--locale=C", "--no-sync"])  # fmt: skip

    def probe(self) -> None:
        probe(self.uri, self.address)
