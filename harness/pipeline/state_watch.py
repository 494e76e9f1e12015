"""What a current-state sink's rows do while a run goes on: a change stream on its collection,
watched by the lab beside the lane, recording each time a row went back - a write that left an
order at a version below one its document had already shown (a replayed older change applied
over a newer one, as a CDC handler does with what a source re-emits or a sink's consumer is
handed again). A final state that is right says nothing of these; the history keeps them
(``WENT_BACK``: detail ``order 17 v3 after v5``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from harness.history.events import EventKind, HistoryWriter
from harness.pipeline.variants.base import Landing

log = logging.getLogger(__name__)
WAIT_MS = 500  # how long one look at the stream waits for a change: how soon ``stop`` is heard
STARTED_WITHIN_S = 30.0


class StateWatch:
    """A thread following ``landing``'s collection in ``database`` (see the module's doc)."""

    def __init__(
        self, mongo_uri: str, database: str, landing: Landing, history: HistoryWriter
    ) -> None:
        assert landing.row_key, "not a current-state landing"
        self._client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
        self._collection = self._client[database][landing.collection]
        self._landing = landing
        self._history = history
        self._stop = threading.Event()
        self._open = threading.Event()
        self.highest: dict[int, int] = {}  # each order's highest version seen so far
        self.went_back = 0
        self._thread = threading.Thread(target=self._run, name="state-watch", daemon=True)

    def start(self) -> None:
        """Once its stream is open: a change before that is not seen."""
        self._thread.start()
        if not self._open.wait(STARTED_WITHIN_S):
            log.warning("the state watch of %s did not open its stream", self._collection.name)

    def _run(self) -> None:
        try:
            with self._collection.watch(max_await_time_ms=WAIT_MS) as stream:
                self._open.set()
                while not self._stop.is_set():
                    change = stream.try_next()
                    if change is not None:
                        self._saw(change)
        except PyMongoError as exc:  # MongoDB restarted under it: what it saw stands
            self._open.set()
            log.warning("the state watch of %s stopped: %s", self._collection.name, exc)

    def _saw(self, change: Mapping[str, Any]) -> None:
        doc = change.get("fullDocument")
        if change.get("operationType") not in ("insert", "replace", "update") or not doc:
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
        self._stop.set()
        if self._thread.ident is not None:  # started (a run that failed before may stop it)
            self._thread.join(timeout)
        self._client.close()
        self._history.close()
