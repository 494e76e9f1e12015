"""A current-state sink judged against the database's final table (pure: no servers).

MongoDB's sink connector with a CDC handler keeps one document per row, replaced by the row's
primary key and deleted on a delete: it holds no record of each change, so it cannot be
asked for copies or lost changes, only whether its state is the table's. Each order the
database committed a change of is judged once:

* its row is in the final table: the sink's document must have the row's version. Absent, the
  row is **lost**; at an older version, **stale** (a replayed older update that no newer one
  followed); at a newer one, a **phantom** (a version the database does not have).
* its row was deleted by the end: the sink must hold no document of it. One still there is
  **stale** (behind the delete, the order's last change, as the producer's workload counts a
  delete: the next version).

A document of an order the database never committed a change of is a phantom too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.history.windows import FaultWindow
from harness.workload.events import Kind

from .check import Found, place_anomalies
from .model import KIND_CODES, LedgerArrays, Verdict


@dataclass(frozen=True)
class FinalState:
    """What the database holds at the end: each row's version, and the rows deleted by then
    (with the delete's version)."""

    rows: Mapping[int, int]  # order_id -> version
    deleted: Mapping[int, int]  # order_id -> the delete's version

    def __post_init__(self) -> None:
        if both := set(self.rows) & set(self.deleted):
            raise ValueError(f"orders both in the table and deleted: {sorted(both)[:5]}")


def check_state(
    final: FinalState,
    stored: Mapping[int, int],
    ledger: LedgerArrays,
    *,
    produced: int,
    in_sink: int,
    windows: Sequence[FaultWindow] = (),
    stopped: str = "",
    max_anomalies: int = 1000,
) -> Verdict:
    """Judge ``stored`` (order_id -> the version of its document) against ``final``. The
    ledger (the committed changes, as the sinks' ledger has them) dates each anomaly at the
    first record of the order's last change. ``in_sink`` counts the landing's documents (one
    without a row's key is not in ``stored``)."""
    last_at = _last_change_at(ledger)
    lost = [o for o in final.rows if o not in stored]
    behind = [o for o, v in final.rows.items() if o in stored and stored[o] < v]
    undeleted = [o for o in final.deleted if o in stored]
    ahead = [o for o, v in final.rows.items() if o in stored and stored[o] > v]
    unknown = [o for o in stored if o not in final.rows and o not in final.deleted]
    target = {**final.rows, **final.deleted}
    stale = behind + undeleted

    def found(orders: list[int], version: Mapping[int, int]) -> Found:
        return Found(
            np.array(orders, dtype=np.int64),
            np.array([version.get(o, 0) for o in orders], dtype=np.int64),
            np.array([last_at.get(o, np.nan) for o in orders], dtype=np.float64),
        )

    anomalies = {
        "lost": found(lost, target),
        "stale": found(stale, stored),
        "duplicate": found([], stored),
    }
    return Verdict(
        produced=int(produced),
        acked=ledger.acknowledged,
        expected=len(target),
        in_sink=in_sink,
        unique_in_sink=sum(1 for o, v in final.rows.items() if stored.get(o) == v),
        duplicates=0,  # a document per row's key: a copy replaces it
        duplicated_keys=0,
        copies={},
        lost=len(lost),
        phantoms=len(ahead) + len(unknown),
        stale=len(stale),
        dead_lettered=0,
        poison_missing=0,
        offsets_consistent=None,
        anomalies=place_anomalies(anomalies, windows, max_anomalies),
        anomalies_total=len(lost) + len(stale),
        stopped=stopped,
    )


def _last_change_at(ledger: LedgerArrays) -> dict[int, float]:
    """Each order's last change (its highest version): when its first record was acknowledged."""
    newest: dict[int, tuple[int, float]] = {}
    first = ledger.kind != KIND_CODES[Kind.COPY]
    for order_id, version, at in zip(
        ledger.order_id[first].tolist(),
        ledger.version[first].tolist(),
        ledger.acked_at[first].tolist(),
        strict=True,
    ):
        if order_id not in newest or version > newest[order_id][0]:
            newest[order_id] = (version, at)
    return {o: at for o, (_v, at) in newest.items()}
