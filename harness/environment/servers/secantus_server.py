"""SecantusDB's server as the lab runs it: its retryable-write records pruned from the oldest
end, and a ``replSetResizeOplog`` command (emulated).

Why not ``secantusd-py`` as it is: SecantusDB 0.7.0b3 keeps a record of every retryable write
(mongod's ``config.transactions``, so a driver's retry gets the original reply) for 30 minutes,
at most 10,000, and prunes on every retryable write by scanning all of them - and, once at the
cap, by sorting all of them. Every write the lab's consumers make is retryable, so after
~10,000 writes each write pays a scan and a sort of 10,000 records: inserts slowed down run
after run, and a matrix's last scenarios took several times as long (docs/performance.md).
Records are stored in the order they are made, so the expired ones and the surplus are the
oldest: this drops them from the front, keeping the same lifetime, cap and eviction order (a
record re-stored under an existing key keeps its place and may outlive its lifetime by as
much; SecantusDB re-stores a key only when a client reuses a session's txnNumber for a
different write). There is no newer release to take it from.

A change stream that falls behind the oplog's oldest entry is ended with
``ChangeStreamHistoryLost`` (286), as mongod ends it: SecantusDB 0.7.0b3 checks that only when a
stream is opened or resumed from a token, and a stream already open read on from the oldest
entry left, silently past the pruned ones: a relay lagging behind a small cap lost entries at
publish with no error, where mongod would have ended its stream (docs/environment.md).

``replSetResizeOplog`` is not SecantusDB's: it caps its oplog by entries (``--oplog-max-entries``,
100,000 by default, 16 KiB an entry in its own ``collStats``) and has no command to change the
cap. The lab adds one taking mongod's ``size`` (megabytes) and setting the cap to
``size * 64`` entries, so that a fault can make a resume point fall out of the oplog - the
``ChangeStreamHistoryLost`` a relay then gets is SecantusDB's own. Unlike mongod (which refuses
a size under 990 MB), any positive size is taken: 0.5 keeps 32 entries.

Once its stop has begun, ``hello`` is answered ShutdownInProgress, as mongod answers it in its
quiesce period, not as by a standalone server (``hello_or_quiescing``).

In a stream of ``moreToCome`` replies (a streaming monitor's awaitable ``hello``, an exhaust
``getMore``) each reply answers the one before it, as mongod's do: SecantusDB 0.7.0b3 gives
every reply the request's id, which pymongo lets pass and the Java driver refuses ("The
responseTo (3) in the response does not match the requestId (2) in the request"), failing its
monitor's check at every stream (``chained_reply``).

    python -m harness.environment.servers.secantus_server [secantusd-py options]
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

import wiredtiger
from secantus import changestreams, cli, commands, server, storage, transactions
from secantus.commands import CommandContext
from secantus.server import SecantusDBServer
from secantus.storage import Storage
from secantus.transactions import TransactionRegistry

log = logging.getLogger(__name__)
# What SecantusDB asks WiredTiger for with --sync-on-commit, and what the lab asks instead.
FSYNC_EVERY_COMMIT = "transaction_sync=(enabled=true,method=fsync)"
WRITE_EVERY_COMMIT = "transaction_sync=(enabled=true,method=none)"
secantus_wiredtiger_open = wiredtiger.wiredtiger_open
secantus_prune = TransactionRegistry._prune_retryable_locked  # the original, for the tests
secantus_read_oplog_scan = Storage.read_oplog_scan
secantus_prune_oplog = Storage._prune_oplog_locked
ENTRIES_PER_MB = 1024 // 16  # SecantusDB's own size figure: 16 KiB an oplog entry
PRUNE_EVERY = storage._OPLOG_PRUNE_INTERVAL  # SecantusDB prunes its oplog every 1,000 entries


def prune_oldest(self: TransactionRegistry) -> None:
    """Drop retryable-write records past their lifetime, then the oldest above the cap."""
    records = self._retryable
    cutoff = self._time() - transactions._RETRYABLE_RECORD_LIFETIME_SECONDS
    while records:
        oldest = next(iter(records))
        if records[oldest][1] >= cutoff and len(records) <= transactions._RETRYABLE_RECORD_MAX:
            return
        del records[oldest]


def resize_oplog(doc: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
    """``{replSetResizeOplog: 1, size: MB}``: the oplog's cap becomes ``size * 64`` entries, the
    oldest above it are dropped at once, and (below 1,000 entries) pruning runs every tenth of
    the cap rather than every 1,000 entries, so that the cap holds as a capped oplog's does.
    The reply says how far SecantusDB's running count of entries was off (``recounted``) and
    which entries the oplog holds after the prune (``first``, ``last``)."""
    size = doc.get("size")
    if isinstance(size, bool) or not isinstance(size, int | float) or size <= 0:
        return {"ok": 0.0, "errmsg": f"size: a positive number of megabytes, got {size!r}",
                "code": 2, "codeName": "BadValue"}  # fmt: skip
    entries = max(1, int(size * ENTRIES_PER_MB))
    store = ctx.storage
    with store._lock:  # the drift of the running count: see prune_counted
        off = store._count_oplog_rows() - store._oplog_live_count
        store.oplog_max_entries = entries
        storage._OPLOG_PRUNE_INTERVAL = min(PRUNE_EVERY, max(1, entries // 10))
        pruned = store._prune_oplog_locked()
    return {
        "ok": 1.0,
        "maxEntries": entries,
        "pruned": int(pruned),
        "recounted": off,
        "first": store.oplog_floor_seq(),
        "last": store.oplog_visible_tail_seq(),
    }


def prune_counted(self: Storage, *, now: float | None = None) -> int:
    """SecantusDB's prune, outside any transaction, and from a count of the oplog's entries
    while its cap is under 1,000 (a resize made it small).

    Outside transactions: SecantusDB prunes inside the write that crosses the prune interval,
    and in a transaction's commit that is the transaction's own storage session - two commits
    pruning the same oldest entries conflict, and one fails with InternalError (seen with four
    clients' transactions at a small cap: docs/environment.md). mongod truncates
    its oplog in a background thread, never failing a write; here a prune asked inside a
    transaction is handed to such a thread (``CapMaintainer``), and a bare write's runs inline.

    From a count: SecantusDB prunes by a running count of entries, and over a long run the
    count drifts below the real number, so a small cap kept far more entries than it says and
    a relay away too long still resumed from its token (docs/environment.md). How it drifts is
    not found (shorter runs left it exact). The resize counts once;
    counting ~70 entries at every prune of the small cap (every sixth write) costs nothing, and
    the cap then holds whatever the drift."""
    if getattr(self._tls, "defer_minted", False):
        CapMaintainer.of(self).after(self.oplog_tail_seq_nolock())
        return 0
    if self.oplog_max_entries < PRUNE_EVERY:
        self._oplog_live_count = self._count_oplog_rows()
    return int(secantus_prune_oplog(self, now=now))


class CapMaintainer:
    """A storage's background pruner: woken by a transaction's commit, it prunes once the
    entries that commit wrote are visible (pruning at once found them not yet committed)."""

    _lock = threading.Lock()

    def __init__(self, store: Storage) -> None:
        self.store = store
        self.wake = threading.Event()
        self.through = 0  # the highest entry a waking commit wrote
        self._target = 0  # the entry the prune under way waits for
        threading.Thread(target=self._run, name="oplog-cap-maintainer", daemon=True).start()

    @classmethod
    def of(cls, store: Storage) -> CapMaintainer:
        with cls._lock:
            maintainer: CapMaintainer | None = getattr(store, "_chaoslab_cap_maintainer", None)
            if maintainer is None:
                maintainer = cls(store)
                store._chaoslab_cap_maintainer = maintainer
            return maintainer

    def after(self, seq: int) -> None:
        """Prune once the entries up to ``seq`` are committed (or rolled back)."""
        self.through = max(self.through, seq)
        self.wake.set()

    def _visible(self) -> bool:
        return bool(self.store.oplog_visible_tail_seq_nolock() >= self._target)

    def _run(self) -> None:
        store = self.store
        while True:
            self.wake.wait()
            self.wake.clear()
            self._target = self.through  # not a later waker's: that one wakes it again
            try:
                with store._oplog_cv:  # every commit and rollback notifies it
                    store._oplog_cv.wait_for(self._visible, timeout=5)
                store.prune_oplog()
            except Exception:  # the store closing, a storage error: the next wake tries again
                log.exception("pruning the oplog failed")


class PositionLost(changestreams.ChangeStreamFatalError):  # type: ignore[misc]  # untyped
    """An open change stream's next entries were pruned (mongod: 286, not resumable)."""

    code = changestreams.ChangeStreamHistoryLost.code
    codeName = changestreams.ChangeStreamHistoryLost.codeName
    error_labels: tuple[str, ...] = ()


def read_oplog_checked(
    self: Storage,
    *,
    start_seq: int,
    limit: int,
    ns_filter: Callable[[str], bool] | None = None,
) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """SecantusDB's scan, and for a change stream's (the one caller passing ``ns_filter``) an
    end if anything from ``start_seq`` on may have been pruned before the scan read it: the
    oldest entry left is checked after the scan (pruning only ever raises it)."""
    found: tuple[list[tuple[int, dict[str, Any]]], int] = secantus_read_oplog_scan(
        self, start_seq=start_seq, limit=limit, ns_filter=ns_filter
    )
    if ns_filter is not None and start_seq < self.oplog_floor_seq():
        raise PositionLost(
            "the change stream's position is no longer in the oplog: the entries after it were "
            "pruned before it read them"
        )
    return found


def open_writing_every_commit(home: str, config: str) -> Any:
    """WiredTiger opened so that every commit writes its log records to the operating system
    (write-no-sync), not fsyncs them: what the lab needs is that an acknowledged write survives
    the process being killed (SIGKILL, a container kill), which the OS's page cache gives; an
    fsync also survives the machine losing power, which the lab never does. SecantusDB's
    --sync-on-commit fsyncs every commit, and a bulk write commits each of its documents:
    without the fsync, single inserts and bulk upserts are much faster (docs/performance.md).
    A write acknowledged just before a kill -9 survives it either way (test_env_mongo); with
    neither, the last writes were lost."""
    return secantus_wiredtiger_open(home, config.replace(FSYNC_EVERY_COMMIT, WRITE_EVERY_COMMIT))


HELLO_COMMANDS = commands._HANDSHAKE_COMMANDS  # hello and its older names, as SecantusDB lists them
secantus_hello = commands._HANDLERS["hello"]
SHUTTING_DOWN = {
    "ok": 0.0,
    "code": 91,
    "codeName": "ShutdownInProgress",
    "errmsg": "The server is in quiesce mode and will shut down",
}


def hello_or_quiescing(doc: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
    """SecantusDB's ``hello``, or mongod's answer once shutdown has begun: ShutdownInProgress,
    as mongod answers it in its quiesce period.

    Why: SecantusDB's stop closes its listening socket and only then, up to seconds later on a
    busy machine, the connections it has; a ``hello`` on one of those meanwhile reads the
    server's address from the closed socket, finds none, and is answered as by a standalone
    server. A driver's monitor asks just then (its streamed ``hello`` ends at the stop and it
    asks again at once), takes the standalone for a member that left the replica set, drops it
    from the topology, and has no server left to select even once MongoDB is back. An error
    marks the server unknown for now, and the driver finds it again after the restart."""
    if ctx.replica_set_name and ctx.server_address is None:
        return dict(SHUTTING_DOWN)
    reply: dict[str, Any] = secantus_hello(doc, ctx)
    return reply


secantus_build_reply = server.build_op_msg_reply
secantus_stream_hello = SecantusDBServer._stream_awaitable_hello
secantus_stream_getmore = SecantusDBServer._stream_exhaust_getmore
# The stream a connection's thread is sending, if any: the id of its last reply.
_streaming = threading.local()


def chained_reply(**reply: Any) -> bytes:
    """SecantusDB's reply, whose ``responseTo`` - inside a stream - is the last reply's id."""
    if getattr(_streaming, "on", False):
        if _streaming.last is not None:
            reply["response_to"] = _streaming.last
        _streaming.last = reply["request_id"]
    built: bytes = secantus_build_reply(**reply)
    return built


def streamed(stream: Callable[..., bool]) -> Callable[..., bool]:
    """One of SecantusDB's streams, its replies chained (``chained_reply``)."""

    def chained(self: SecantusDBServer, *args: Any, **kwargs: Any) -> bool:
        _streaming.on, _streaming.last = True, None
        try:
            return stream(self, *args, **kwargs)
        finally:
            _streaming.on = False

    return chained


# mongod's server parameters the lab sets on the command line, as mongod takes them
# (``--setParameter NAME=VALUE``); SecantusDB's own command line has no such option.
SETTABLE = ("transactionLifetimeLimitSeconds",)
secantus_server_init = SecantusDBServer.__init__


class BadParameter(ValueError):
    pass


def take_set_parameters(argv: list[str]) -> tuple[list[str], dict[str, float]]:
    """``argv`` without its ``--setParameter NAME=VALUE`` pairs, and those pairs."""
    rest: list[str] = []
    taken: dict[str, float] = {}
    args = iter(argv)
    for arg in args:
        if arg != "--setParameter":
            rest.append(arg)
            continue
        name, _, value = next(args, "").partition("=")
        if name not in SETTABLE:
            raise BadParameter(f"--setParameter {name!r}: the lab's server sets only {SETTABLE}")
        taken[name] = _positive(name, value)
    return rest, taken


def _positive(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        if number > 0:  # not nan either
            return number
    raise BadParameter(f"--setParameter {name}={value!r}: a positive number")


def with_transaction_lifetime(seconds: float) -> Callable[..., None]:
    """SecantusDB's server built with ``transaction_lifetime_seconds`` (mongod's
    ``transactionLifetimeLimitSeconds``, 60 by default in both), which its own command line
    does not set."""

    def init(self: SecantusDBServer, *args: Any, **kwargs: Any) -> None:
        secantus_server_init(self, *args, **{**kwargs, "transaction_lifetime_seconds": seconds})

    return init


def install(parameters: dict[str, float] | None = None) -> None:
    lifetime = (parameters or {}).get("transactionLifetimeLimitSeconds")
    if lifetime is not None:
        SecantusDBServer.__init__ = with_transaction_lifetime(lifetime)
    TransactionRegistry._prune_retryable_locked = prune_oldest
    Storage.read_oplog_scan = read_oplog_checked
    Storage._prune_oplog_locked = prune_counted
    commands._HANDLERS["replSetResizeOplog"] = resize_oplog
    server.build_op_msg_reply = chained_reply
    SecantusDBServer._stream_awaitable_hello = streamed(secantus_stream_hello)
    SecantusDBServer._stream_exhaust_getmore = streamed(secantus_stream_getmore)
    for name in HELLO_COMMANDS:
        commands._HANDLERS[name] = hello_or_quiescing
    wiredtiger.wiredtiger_open = open_writing_every_commit


if __name__ == "__main__":
    try:
        argv, parameters = take_set_parameters(sys.argv[1:])
    except BadParameter as exc:
        print(f"secantus_server: {exc}", file=sys.stderr)
        sys.exit(2)
    install(parameters)
    sys.exit(cli.main(argv))
