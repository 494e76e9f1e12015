"""The checker: ledger vs sink snapshot -> a verdict per variant (pure: no servers, no I/O).

Usage::

    ledger = load_ledger(run_dir / "ledger.csv")
    verdict = check(ledger, snapshot, produced=n, windows=fault_windows(history))
    verdict.to_dict()  # -> results.json
"""

from harness.checker.check import MAX_ORDER_ID, MAX_VERSION, VERSION_BITS, check
from harness.checker.load import load_ledger
from harness.checker.model import (
    KIND_CODES,
    KIND_NAMES,
    Anomaly,
    LedgerArrays,
    RelayStage,
    SinkSnapshot,
    Verdict,
)

__all__ = [
    "KIND_CODES",
    "KIND_NAMES",
    "MAX_ORDER_ID",
    "MAX_VERSION",
    "VERSION_BITS",
    "Anomaly",
    "LedgerArrays",
    "RelayStage",
    "SinkSnapshot",
    "Verdict",
    "check",
    "load_ledger",
]
