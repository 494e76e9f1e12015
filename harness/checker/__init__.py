"""The checker: ledger vs sink snapshot -> a verdict per variant (pure: no servers, no I/O).

Usage::

    from harness.checker.check import check
    from harness.checker.load import load_ledger

    ledger = load_ledger(run_dir / "ledger.csv")
    verdict = check(ledger, snapshot, produced=n, windows=fault_windows(history))
    verdict.to_dict()  # -> results.json

Its modules are imported by name, nothing from here: a consumer process, which needs only
``promise``, then starts without loading numpy and pyarrow (half of its start-up CPU).
"""
