"""PostgreSQL as a server of the local environment: started when a run first asks for it (or at
``up --postgres``), on 127.0.0.1 with logical decoding, and stopped with every process it started
- by ``down``, and by the next ``up`` after its harness was SIGKILLed."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import psycopg
import pytest

from harness.environment.base import Link, LinkRule
from harness.environment.local import LocalEnvironment
from harness.environment.options import LocalOptions
from harness.environment.process import ProcessHandle
from harness.environment.servers import postgres
from tests.support import chaoslab, lacking, private_registry, server_handles

pytestmark = pytest.mark.servers


@pytest.fixture(autouse=True)
def installed() -> None:
    found, why = postgres.installed()
    if found is None:
        lacking(why)


def running(tree: list[psutil.Process]) -> list[int]:
    return [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def server_tree(pid: int) -> list[psutil.Process]:
    """The postmaster and its children: the checkpointer, the WAL writer, each backend (their
    titles name no folder and their environment is overwritten by the title, so they are found
    as the postmaster's children)."""
    main = psutil.Process(pid)
    return [main, *main.children(recursive=True)]


def test_postgres_starts_when_a_run_asks_on_loopback_and_is_stopped_with_all_it_started(
    child_harness: tuple[subprocess.Popen[str], dict[str, ProcessHandle]], tmp_path: Path
) -> None:
    child, handles = child_harness
    directory = tmp_path / "env"
    assert "postgres" not in handles  # up alone does not start it
    # Asked by another process than the environment's owner, as a run with --env asks; by two
    # runs at once, as the matrix's side-by-side runs ask (each its own attachment): one server
    # started, both handed its URI once it is ready.
    envs = [LocalEnvironment.attach(directory) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        uris = list(pool.map(lambda e: e.postgres_uri(), envs))
    env = envs[0]
    uri = uris[0]
    assert uris == [uri, uri]
    assert env.postgres_uri() == uri  # asked again: the same server, not a second
    pid = server_handles(directory)["postgres"].pid
    tree = server_tree(pid)
    assert len(tree) >= 4, [p.name() for p in tree]  # postmaster and its helpers

    # It listens on 127.0.0.1 alone, on the environment's port, and on no Unix socket.
    listening = {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {("127.0.0.1", int(uri.rsplit(":", 1)[1].split("/")[0]))}
    status = env.status()
    assert status.postgres_uri == uri
    assert [s.ready for s in status.servers if s.name == "postgres"] == [True]

    with psycopg.connect(uri, autocommit=True) as conn:
        assert conn.execute("SHOW unix_socket_directories").fetchone() == ("",)
        # A committed transaction, read back from the log through a pgoutput slot with its
        # own transaction id: what a Debezium source asks of it.
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, version int)")
        conn.execute("CREATE PUBLICATION lab FOR TABLE orders")
        conn.execute("SELECT pg_create_logical_replication_slot('lab', 'pgoutput')")
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES (1, 1), (2, 1)")
            row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
            assert row is not None
            xid = row[0]
        changes = conn.execute(
            "SELECT xid::text::bigint, data FROM pg_logical_slot_get_binary_changes("
            "'lab', NULL, NULL, 'proto_version', '1', 'publication_names', 'lab')"
        ).fetchall()
    kinds = [bytes(data)[:1] for _, data in changes]
    assert kinds == [b"B", b"R", b"I", b"I", b"C"], kinds  # begin, relation, 2 rows, commit
    assert {x for x, _ in changes} == {xid}

    # Its harness SIGKILLed: no cleanup ran; the next up stops PostgreSQL with the rest.
    tree = server_tree(pid)  # now: a connection's backend may have come and gone since
    child.kill()
    child.wait()
    assert tree[0].is_running() and len(running(tree)) >= 4
    other = tmp_path / "other"
    registry = private_registry(tmp_path)
    up = chaoslab("up", "--dir", str(other), "--postgres", **registry)
    try:
        assert up.returncode == 0, up.stderr
        assert "left by a harness that died" in up.stdout
        assert running(tree) == []
        # up --postgres started one at once, and says where.
        shown = chaoslab("status", "--dir", str(other), **registry).stdout
        assert "postgres uri     postgresql://postgres@127.0.0.1:" in shown, shown
        other_tree = server_tree(server_handles(other)["postgres"].pid)
    finally:
        chaoslab("down", "--dir", str(other), **registry)
    # down: each of its processes stopped, and its data gone with the environment.
    assert [
        p.pid for p in other_tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ] == []
    assert not (other / "postgres").exists()


def test_postgres_is_refused_where_the_lab_does_not_start_it(tmp_path: Path) -> None:
    extra = ["--kafka-bootstrap", "127.0.0.1:1", "--mongo-uri", "mongodb://127.0.0.1:1"]
    refused = chaoslab("up", "--dir", str(tmp_path / "external"), "--backend", "external",
                       "--postgres", *extra)  # fmt: skip
    said = "--postgres starts the lab's own database"
    assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    assert not (tmp_path / "external").exists()  # nothing started
    # A machine without PostgreSQL: what installs it, before anything starts.
    missing = chaoslab("up", "--dir", str(tmp_path / "local"), "--postgres",
                       CHAOSLAB_POSTGRES_BIN=str(tmp_path / "nowhere"))  # fmt: skip
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert f"PostgreSQL: no postgres in {tmp_path / 'nowhere'}" in missing.stderr
    assert not (tmp_path / "local").exists()
    assert LocalOptions.from_dict({"spark_standalone": False, "spark_cores": 2}).postgres is False


def test_a_cdc_sources_link_to_postgres_runs_through_the_fault_proxy(
    lab_env: LocalEnvironment,
) -> None:
    direct = lab_env.postgres_uri()
    proxied = lab_env.postgres_uri_for(Link.SOURCE_POSTGRES)
    assert proxied != direct and proxied.startswith("postgresql://postgres@127.0.0.1:")
    assert lab_env.postgres_uri_for(Link.CONSUMER_MONGO) == direct  # not a PostgreSQL link
    with psycopg.connect(proxied, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        rule = lab_env.add_link_rule(LinkRule(Link.SOURCE_POSTGRES, "reset"))
        try:
            # Its connections closed at once, new ones too; a client of the database on no
            # link of the proxy (the application, the truth's slot) untouched.
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
            with pytest.raises(psycopg.OperationalError):
                psycopg.connect(proxied, connect_timeout=5).close()
            with psycopg.connect(direct) as other:
                assert other.execute("SELECT 1").fetchone() == (1,)
        finally:
            lab_env.remove_link_rule(rule)
    with psycopg.connect(proxied) as again:
        assert again.execute("SELECT 1").fetchone() == (1,)
