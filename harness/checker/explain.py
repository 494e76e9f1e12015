"""Whether a lane's duplicates are explained by what happened (pure).

A copy of a change in the sink is explained by a record the history shows handed out or written
more than once (a redelivery after a crash, a failed commit, a rebalance, a zombie consumer
waking; a write that failed and was tried again; a Spark micro-batch replayed, a task rerun
after its executor was lost - by a crash point's kill or, as Spark itself says in the task's
attempt number, for any reason) or by the change sent again upstream (the ledger's resends, and
a CDC source's copies). (A record the topic itself holds twice makes copies that are the
topic's, not counted as the variant's duplicates at all: checker.check's ``stored_twice``.) A
run with more duplicates than that counted something nothing delivered twice - a defect of the sink
or of the lab - and fails, whatever the scenario expected: no single run passes with an
unexplained count.

Upper bounds, never guesses below: a batch that ended without its WRITTEN event (its consumer
was killed) is taken to span as many offsets per partition as it held records in all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.checker.model import KIND_CODES, LedgerArrays
from harness.history.events import EventKind, HistoryEvent
from harness.workload.events import Kind


@dataclass(frozen=True)
class Explanation:
    """What can account for copies in one lane's sink."""

    handed_out_again: int | None  # records handed out more than once (None: cannot be told)
    # Records on the topic that repeat a change: sent again upstream with a new event id, or
    # put there again by a CDC source (the ledger's resends and copies).
    resends: int

    def unexplained(self, duplicates: int) -> int:
        """Duplicates beyond what the history and the ledger account for (0 if none, or if the
        history cannot tell: a user's Spark job does not say what it wrote)."""
        if self.handed_out_again is None:
            return 0
        return max(0, duplicates - self.handed_out_again - self.resends)

    def failure(self, duplicates: int) -> str | None:
        extra = self.unexplained(duplicates)
        if not extra:
            return None
        return (
            f"{duplicates} duplicates, {extra} unexplained: the history shows "
            f"{self.handed_out_again} records handed out more than once and the ledger "
            f"{self.resends} resends and source copies"
        )


def explain(
    events: Sequence[HistoryEvent],
    ledger: LedgerArrays,
    *,
    black_box: bool = False,
) -> Explanation:
    """What can account for copies in the sink of the lane whose history is ``events`` (a
    black box's history holds no batch of its own: what it was handed cannot be told)."""
    again = np.array([KIND_CODES[Kind.RESEND], KIND_CODES[Kind.COPY]], dtype=np.int8)
    resends = int(np.count_nonzero(np.isin(ledger.kind, again)))
    handed = None if black_box else handed_out_again(events)
    return Explanation(handed, resends)


def handed_out_again(events: Sequence[HistoryEvent]) -> int | None:
    """Records the history shows handed out more than once, summed over their repeats."""
    batches = [e for e in events if e.kind is EventKind.BATCH]
    if not batches:
        return 0
    # A listener's batches say their first offsets (one of poison records alone says none);
    # a Spark micro-batch's handed-out records are known by its id only.
    if any(e.offsets for e in batches):
        return _ranges_again(events)
    return _batches_again(events)


def _ranges_again(events: Sequence[HistoryEvent]) -> int:
    """A consumer's batches (first offsets, then the last written): per partition, the offsets
    covered more than once, counted with their multiplicity."""
    ranges: dict[int, list[tuple[int, int]]] = defaultdict(list)
    open_batch: dict[str, HistoryEvent] = {}
    tries: dict[str, int] = defaultdict(int)  # writes of the open batch that failed

    def close(source: str, lasts: dict[int, int] | None) -> None:
        batch = open_batch.pop(source)
        for p, first in batch.offsets.items():
            last = lasts.get(p) if lasts else None
            end = last if last is not None else first + max(0, (batch.count or 1) - 1)
            ranges[p] += [(first, end)] * (1 + tries[source])
        tries[source] = 0

    for e in sorted(events, key=lambda e: e.t):
        if e.kind is EventKind.BATCH:
            if e.source in open_batch:  # the one before ended unwritten (killed, crashed)
                close(e.source, None)
            if e.offsets:
                open_batch[e.source] = e
        elif e.kind is EventKind.WRITE_FAILED and e.source in open_batch:
            tries[e.source] += 1  # part of it may be written, and it is written again
        elif e.kind is EventKind.WRITTEN and e.source in open_batch:
            close(e.source, e.offsets)
    for source in list(open_batch):
        close(source, None)
    return sum(_overlap(spans) for spans in ranges.values())


def _overlap(spans: Iterable[tuple[int, int]]) -> int:
    """Sum of the spans' lengths minus the length of their union."""
    total, union, reach = 0, 0, -1
    for start, end in sorted(spans):
        total += end - start + 1
        if end > reach:
            union += end - max(start, reach + 1) + 1
            reach = end
    return total - union


def _batches_again(events: Sequence[HistoryEvent]) -> int | None:
    """Spark's micro-batches (ids, records written): a batch id handed out again (replayed from
    the checkpoint) or with a lost executor counts its records once more per repeat; a batch
    whose write tasks Spark ran again, at least the records of those tasks."""
    written: dict[int, int] = {}
    rerun: dict[int, int] = defaultdict(int)
    for e in events:
        if e.kind is EventKind.WRITTEN and e.batch is not None:
            if e.count is None:
                return None  # a user's job: what it wrote is its own
            written[e.batch] = max(written.get(e.batch, 0), e.count)
        elif e.kind is EventKind.TASK_RETRIED and e.batch is not None:
            rerun[e.batch] += e.count or 0
    starts: dict[int, int] = defaultdict(int)
    for e in events:
        again = (EventKind.BATCH, EventKind.EXECUTOR_LOST, EventKind.WRITE_FAILED)
        if e.kind in again and e.batch is not None:
            starts[e.batch] += 1
    # A lost executor's task is both an EXECUTOR_LOST and its rerun: the larger, not the sum.
    return sum(
        max((starts.get(b, 1) - 1) * written.get(b, 0), rerun.get(b, 0))
        for b in set(starts) | set(rerun)
    )
