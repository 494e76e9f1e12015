"""What a lane's landing collection goes through while a run goes on: a change stream on the
lane's database, watched by the lab beside the lane.

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

``stop`` reads on until a mark the lab writes in the same database after the lane's last write
has come through (``complete``): the log then holds every write the stream had for the lane.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
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
MARKS = "_lab_marks"  # the mark's collection, in the lane's database
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
    """A thread following ``landing``'s collection in ``database`` (see the module's doc):
    logging each write to ``log`` if given, following rows if the landing has a ``row_key``."""

    def __init__(
        self,
        mongo_uri: str,
        database: str,
        landing: Landing,
        history: HistoryWriter,
        log_path: Path | None = None,
    ) -> None:
        self._client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
        self._db = self._client[database]
        self._landing = landing
        self._history = history
        self._log_path = log_path
        self._log: IO[str] | None = None
        self._mark = ""
        self._stop = threading.Event()
        self._open = threading.Event()
        self._marked = threading.Event()
        self.highest: dict[int, int] = {}  # each order's highest version seen so far
        self.went_back = 0
        self.broke = ""  # why the stream ended before ``stop``, if it did
        self._thread = threading.Thread(target=self._run, name="landing-watch", daemon=True)

    @property
    def logged(self) -> bool:
        """Whether it logs the writes."""
        return self._log_path is not None

    @property
    def complete(self) -> bool:
        """Whether the log holds every write up to the lab's mark (``stop`` writes it)."""
        return self._marked.is_set() and not self.broke

    def start(self) -> None:
        """Once its stream is open: a change before that is not seen."""
        if self._log_path is not None:
            self._log = self._log_path.open("a", buffering=1)
        self._thread.start()
        if not self._open.wait(STARTED_WITHIN_S):
            log.warning("the landing watch of %s did not open its stream", self._db.name)

    def _run(self) -> None:
        names = [self._landing.collection, MARKS]
        pipeline = [{"$match": {"ns.coll": {"$in": names}}}]
        try:
            with self._db.watch(pipeline, max_await_time_ms=WAIT_MS) as stream:
                self._open.set()
                while not self._stop.is_set():
                    change = stream.try_next()
                    if change is not None:
                        self._saw(change)
        except PyMongoError as exc:  # MongoDB restarted under it: what it saw stands
            self._open.set()
            self.broke = str(exc)
            log.warning("the landing watch of %s stopped: %s", self._db.name, exc)

    def _saw(self, change: Mapping[str, Any]) -> None:
        op = str(change.get("operationType"))
        if change.get("ns", {}).get("coll") == MARKS:
            if (change.get("documentKey") or {}).get("_id") == self._mark:
                self._marked.set()
            return
        doc = change.get("fullDocument") or {}
        if self._log is not None and op in ("insert", "replace", "update", "delete"):
            key = json_util.dumps((change.get("documentKey") or {}).get("_id"))
            line = {"t": time.time(), "op": op, "doc": key, "trace": traced(doc, self._landing)}
            self._log.write(json.dumps(line) + "\n")
        if not self._landing.row_key or op not in ("insert", "replace", "update") or not doc:
            return
        if (row := self._landing.row(doc)) is None:
            return
        order_id, version = row
        highest = self.highest.get(order_id, 0)
        if version < highest:
            self.went_back += 1
            self._history.record(
                EventKind.WENT_BACK, detail=f"order {order_id} v{version} after v{highest}"
            )
        self.highest[order_id] = max(highest, version)

    def stop(self, timeout: float = 10.0) -> None:
        """Its mark written and read (a log's: every write before it read), then stopped."""
        # A stream that ended (MongoDB restarted under it) reads no mark: not waited for.
        if self._thread.is_alive() and self._log is not None and not self.broke:
            self._mark = uuid.uuid4().hex
            try:
                self._db[MARKS].insert_one({"_id": self._mark})
                if not self._marked.wait(DRAINED_WITHIN_S):
                    log.warning("the landing watch of %s did not read its mark", self._db.name)
            except PyMongoError as exc:
                self.broke = f"its mark not written: {exc}"
        self._stop.set()
        if self._thread.ident is not None:  # started (a run that failed before may stop it)
            self._thread.join(timeout)
        if self._log is not None:
            self._log.close()
        self._client.close()
        self._history.close()
