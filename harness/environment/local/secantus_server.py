"""SecantusDB's server, with its retryable-write records pruned from the oldest end.

Why not ``secantusd-py`` as it is: SecantusDB 0.7.0b3 keeps a record of every retryable write
(mongod's ``config.transactions``, so a driver's retry gets the original reply) for 30 minutes,
at most 10,000, and prunes on every retryable write by scanning all of them - and, once at the
cap, by sorting all of them. Every write the lab's consumers make is retryable, so after
~10,000 writes each write pays a scan and a sort of 10,000 records. Measured here: inserts fell
from ~1,000/s on a fresh server to 70/s after two producer-resend runs, and the last scenario
of a matrix took 180 s instead of 45 s. Records are stored in the order they are made, so the
expired ones and the surplus are the oldest: this drops them from the front, keeping the same
lifetime, cap and eviction order (a record re-stored under an existing key keeps its place and
may outlive its lifetime by as much; SecantusDB re-stores a key only when a client reuses a
session's txnNumber for a different write). There is no newer release to take it from.

    python -m harness.environment.local.secantus_server [secantusd-py options]
"""

from __future__ import annotations

import sys

from secantus import cli, transactions
from secantus.transactions import TransactionRegistry

secantus_prune = TransactionRegistry._prune_retryable_locked  # the original, for the tests


def prune_oldest(self: TransactionRegistry) -> None:
    """Drop retryable-write records past their lifetime, then the oldest above the cap."""
    records = self._retryable
    cutoff = self._time() - transactions._RETRYABLE_RECORD_LIFETIME_SECONDS
    while records:
        oldest = next(iter(records))
        if records[oldest][1] >= cutoff and len(records) <= transactions._RETRYABLE_RECORD_MAX:
            return
        del records[oldest]


def install() -> None:
    TransactionRegistry._prune_retryable_locked = prune_oldest


if __name__ == "__main__":
    install()
    sys.exit(cli.main())
