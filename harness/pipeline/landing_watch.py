"""What a lane's landing collection goes through while a run goes on: MongoDB's change stream,
read by the lab beside the lanes (one stream for them all, ``LandingFeed``).

* **Every write, logged** (``log``: a JSON line per write - its time, operation, the document's
  key and the record its content came from, by the landing's event id or a bad record's
  ``lab_trace``): where each bad record went (``harness.checker.bad_records``). The final
  collection says what is there, not what was written over: records a sink keys alike replace
  one another, and only their writes show it.
* **A current-state sink's rows going back** (a ``row_key`` landing): a write that left an
  order at a version below one its document had already shown - a replayed older change
  applied over a newer one, as a CDC handler does with what a source re-emits or a sink's
  consumer is handed again. A final state that is right says nothing of these; the history
  keeps them (``WENT_BACK``: detail ``order 17 v3 after v5``).

``LandingFeed.stop`` reads on until a mark the lab writes in each lane's database after its last
write has come through (``complete``): the log then holds every write the stream had for it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from bson import json_util
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from harness.history.events import EventKind, HistoryWriter
from harness.pipeline.variants.base import Landing
from harness.workload.shapes import TRACE

log = logging.getLogger(__name__)
WAIT_MS = 500  # how long one look at the stream waits for a change: how soon ``stop`` is heard
STARTED_WITHIN_S = 30.0
DRAINED_WITHIN_S = 60.0  # the stream's reading of the writes before the mark
MARKS = "_lab_marks"  # the marks' collection, in each lane's database
WRITES = "writes.jsonl"  # a lane's write log, in its folder


def traced(doc: Mapping[str, Any], landing: Landing) -> str:
    """The record a document's content came from: its event id, or a bad record's trace."""
    found: Any = doc
    for part in (landing.event_id or "event_id").split("."):
        found = found.get(part) if isinstance(found, Mapping) else None
    if found is None:
        found = doc.get(TRACE)
    return "" if found is None else str(found)


class LandingWatch:
    """What the lab follows of one lane's ``landing`` collection in ``database`` (see the
    module's doc): each write logged to ``log`` if given, rows followed if the landing has a
    ``row_key``. A ``LandingFeed`` hands it its database's changes."""

    def __init__(
        self,
        database: str,
        landing: Landing,
        history: HistoryWriter,
        log_path: Path | None = None,
    ) -> None:
        self.database = database
        self.landing = landing
        self._history = history
        self._log_path = log_path
        self._log: IO[str] | None = None
        self.mark = ""  # the lab's mark, once written: the last change the log is to hold
        self.marked = threading.Event()
        self.highest: dict[int, int] = {}  # each order's highest version seen so far
        self.went_back = 0
        self.broke = ""  # why the stream ended before the mark came, if it did

    @property
    def logged(self) -> bool:
        """Whether it logs the writes."""
        return self._log_path is not None

    @property
    def complete(self) -> bool:
        """Whether the log holds every write up to the lab's mark (``LandingFeed.stop``)."""
        return self.marked.is_set() and not self.broke

    def open(self) -> None:
        if self._log_path is not None:
            self._log = self._log_path.open("a", buffering=1)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
        self._history.close()

    def saw(self, change: Mapping[str, Any]) -> None:
        """One change of its database, from the feed."""
        op = str(change.get("operationType"))
        if change.get("ns", {}).get("coll") == MARKS:
            if self.mark and (change.get("documentKey") or {}).get("_id") == self.mark:
                self.marked.set()
            return
        if change.get("ns", {}).get("coll") != self.landing.collection:
            return
        doc = change.get("fullDocument") or {}
        if self._log is not None and op in ("insert", "replace", "update", "delete"):
            key = json_util.dumps((change.get("documentKey") or {}).get("_id"))
            line = {"t": time.time(), "op": op, "doc": key, "trace": traced(doc, self.landing)}
            self._log.write(json.dumps(line) + "\n")
        if not self.landing.row_key or op not in ("insert", "replace", "update") or not doc:
            return
        if (row := self.landing.row(doc)) is None:
            return
        order_id, version = row
        highest = self.highest.get(order_id, 0)
        if version < highest:
            self.went_back += 1
            self._history.record(
                EventKind.WENT_BACK, detail=f"order {order_id} v{version} after v{highest}"
            )
        self.highest[order_id] = max(highest, version)


class LandingFeed:
    """One change stream for every watched lane of a run - the cluster's, matched to the lanes'
    databases and collections - handing each change to its database's watch. One stream, not
    one per lane: MongoDB reads every write once for each stream open (docs/performance.md)."""

    def __init__(self, mongo_uri: str, watches: Sequence[LandingWatch]) -> None:
        self._client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
        self._watches = {w.database: w for w in watches}
        if len(self._watches) != len(watches):
            raise ValueError("one watch per database: a lane's database is its own")
        self._stop = threading.Event()
        self._open = threading.Event()
        self._thread = threading.Thread(target=self._run, name="landing-feed", daemon=True)

    def start(self) -> None:
        """Once its stream is open: a change before that is not seen."""
        if not self._watches:
            return
        for watch in self._watches.values():
            watch.open()
        self._thread.start()
        if not self._open.wait(STARTED_WITHIN_S):
            log.warning("the landing feed of %s did not open its stream", sorted(self._watches))

    def _run(self) -> None:
        collections = sorted({w.landing.collection for w in self._watches.values()} | {MARKS})
        match = {"ns.db": {"$in": sorted(self._watches)}, "ns.coll": {"$in": collections}}
        try:
            with self._client.watch([{"$match": match}], max_await_time_ms=WAIT_MS) as stream:
                self._open.set()
                while not self._stop.is_set():
                    change = stream.try_next()
                    if change is not None:
                        watch = self._watches.get(change.get("ns", {}).get("db", ""))
                        if watch is not None:
                            watch.saw(change)
        except PyMongoError as exc:  # MongoDB restarted under it: what it saw stands
            self._open.set()
            for watch in self._watches.values():
                watch.broke = watch.broke or str(exc)
            log.warning("the landing feed stopped: %s", exc)

    def stop(self, timeout: float = 10.0) -> None:
        """Each logging watch's mark written and read (its log: every write before it read),
        then stopped."""
        # A stream that ended (MongoDB restarted under it) reads no mark: none is waited for.
        alive = self._thread.is_alive()
        waiting = [w for w in self._watches.values() if alive and w.logged and not w.broke]
        for watch in waiting:
            watch.mark = uuid.uuid4().hex
            try:
                self._client[watch.database][MARKS].insert_one({"_id": watch.mark})
            except PyMongoError as exc:
                watch.broke = f"its mark not written: {exc}"
        deadline = time.monotonic() + DRAINED_WITHIN_S
        for watch in waiting:
            while not watch.marked.wait(0.2) and not watch.broke and self._thread.is_alive():
                if time.monotonic() > deadline:
                    log.warning("the landing watch of %s did not read its mark", watch.database)
                    break
        self._stop.set()
        if self._thread.ident is not None:  # started (a run that failed before may stop it)
            self._thread.join(timeout)
        for watch in self._watches.values():
            watch.close()
        self._client.close()
