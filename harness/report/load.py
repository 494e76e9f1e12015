"""Reading a run directory into small typed records: the scenario's results (results.json, the
runner's schema), and per variant its history and the ack times of its ledger.

Everything after this module works on these records only, so the report's data preparation
can be tested on records built in memory, without files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.checker.load import read_ledger_columns
from harness.checker.model import Anomaly, Verdict
from harness.history import HistoryEvent, read_history
from harness.outcome import Outcome, UnfiredFault

RESULTS = "results.json"


@dataclass(frozen=True)
class Fault:
    """A fault results.json names: one the consumers apply themselves (a crash point), which has
    no window in the history. Windows come from the history only (``harness.history``).

    Older results.json files also listed windows (``{"name", "kind", "start", "end"}``) or plain
    descriptions such as ``"crash at after_write_before_commit (batch 3, 1x)"``: read by name.
    """

    name: str
    kind: str

    @classmethod
    def parse(cls, raw: str | Mapping[str, Any]) -> Fault:
        if isinstance(raw, str):
            return cls(name=raw, kind=fault_kind(raw))
        name = str(raw.get("name", ""))
        return cls(name=name, kind=str(raw.get("kind") or fault_kind(name)))


def fault_kind(name: str) -> str:
    """``broker-rolling-restart#1`` -> ``broker-rolling-restart``: the nemesis numbers each
    application of a fault kind after a ``#``."""
    return name.split("#", 1)[0]


@dataclass(frozen=True, eq=False)
class VariantRun:
    """One runtime x variant entry of results.json, with its history and ledger ack times.

    ``events`` is empty and ``acked_at`` has no elements when the files were not found (a
    report of a moved or partial run still shows the counts).
    """

    runtime: str
    variant: str
    verdict: Verdict
    events_per_s: float
    seconds: float
    restarts: int
    crashes: int
    faults: tuple[Fault, ...]
    expectations: tuple[str, ...]
    outcome: Outcome
    reason: str
    unfired: tuple[UnfiredFault, ...] = ()
    directory: Path | None = None
    ledger: Path | None = None
    events: tuple[HistoryEvent, ...] = ()
    acked_at: np.ndarray = field(default_factory=lambda: np.empty(0))  # unix seconds, sorted

    @property
    def label(self) -> str:
        return f"{self.runtime}/{self.variant}"

    @property
    def group(self) -> str:
        """Variants that shared a ledger consumed one topic side by side, at the same time."""
        return str(self.ledger) if self.ledger is not None else self.runtime

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS

    @property
    def failures(self) -> tuple[str, ...]:
        if self.passed:
            return ()
        return tuple(part.strip() for part in self.reason.split(";") if part.strip())


@dataclass(frozen=True)
class Run:
    """One scenario's run: what results.json says, plus each variant's files."""

    name: str
    description: str
    file: str
    seed: int | None
    backend: str
    versions: dict[str, str]
    workload: dict[str, Any]
    started_at: float  # unix seconds; the origin of every "+N s" in the report
    seconds: float
    passed: bool
    variants: tuple[VariantRun, ...]
    directory: Path | None = None
    error: str = ""  # why there are no results (e.g. the run died before writing them)

    @property
    def failed(self) -> tuple[VariantRun, ...]:
        return tuple(v for v in self.variants if not v.passed)


def parse_results(raw: Mapping[str, Any], directory: Path | None = None) -> Run:
    """The records of a results.json document (no files are read)."""
    scenario = raw.get("scenario") or {}
    if isinstance(scenario, str):
        scenario = {"name": scenario}
    variants = tuple(_variant(r, directory) for r in raw.get("results", []))
    passed = raw.get("passed")
    return Run(
        name=str(scenario.get("name", "") or (directory.name if directory else "scenario")),
        description=str(scenario.get("description", "") or "").strip(),
        file=str(scenario.get("file", "") or ""),
        seed=raw.get("seed"),
        backend=str(raw.get("backend", "")),
        versions={str(k): str(v) for k, v in (raw.get("versions") or {}).items()},
        workload=dict(raw.get("workload") or {}),
        started_at=float(raw.get("started_at") or 0.0),
        seconds=float(raw.get("seconds") or 0.0),
        passed=all(v.passed for v in variants) if passed is None else bool(passed),
        variants=variants,
        directory=directory,
    )


def missing_run(run_dir: Path, error: str) -> Run:
    """A run that left no readable results: reported as an error, not skipped."""
    return Run(
        name=run_dir.name, description="", file="", seed=None, backend="", versions={},
        workload={}, started_at=0.0, seconds=0.0, passed=False, variants=(),
        directory=run_dir, error=error,
    )  # fmt: skip


def load_run(run_dir: Path) -> Run:
    """``run_dir/results.json`` with every variant's history and ledger ack times."""
    results = run_dir / RESULTS
    try:
        raw = json.loads(results.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{results}: no results.json in this run directory") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{results}: not valid JSON ({exc})") from None
    run = parse_results(raw, run_dir)
    ledgers: dict[Path, np.ndarray] = {}  # variants run side by side share one ledger
    variants = []
    for v in run.variants:
        events: tuple[HistoryEvent, ...] = ()
        if v.directory is not None and (v.directory / "history").is_dir():
            events = tuple(read_history(v.directory / "history"))
        acked_at = np.empty(0)
        if v.ledger is not None:
            if v.ledger not in ledgers:
                ledgers[v.ledger] = read_ack_times(v.ledger)
            acked_at = ledgers[v.ledger]
        variants.append(replace(v, events=events, acked_at=acked_at))
    return replace(run, variants=tuple(variants))


def read_ack_times(ledger: Path) -> np.ndarray:
    """The acked_at column of a ledger, sorted: all the report plots of it. A ledger the
    checker's loader refuses gives no times (the counts in results.json still stand)."""
    try:
        columns = read_ledger_columns(ledger, topic=None)
    except (OSError, ValueError):
        return np.empty(0)
    return np.sort(np.asarray(columns["acked_at"], dtype=np.float64))


def _variant(raw: Mapping[str, Any], run_dir: Path | None) -> VariantRun:
    return VariantRun(
        runtime=str(raw.get("runtime", "")),
        variant=str(raw.get("variant", "")),
        verdict=verdict_from_dict(raw),
        events_per_s=float(raw.get("events_per_s") or 0.0),
        seconds=float(raw.get("seconds") or 0.0),
        restarts=int(raw.get("restarts") or 0),
        crashes=int(raw.get("crashes") or 0),
        faults=tuple(Fault.parse(f) for f in raw.get("faults") or ()),
        expectations=tuple(str(e) for e in raw.get("expectations") or ()),
        outcome=Outcome.parse(str(raw.get("expectation", "pass"))),
        reason=str(raw.get("reason", "")),
        unfired=tuple(UnfiredFault.from_dict(u) for u in raw.get("unfired") or ()),
        directory=_resolve(raw.get("directory"), run_dir),
        ledger=_resolve(raw.get("ledger"), run_dir),
    )


def verdict_from_dict(raw: Mapping[str, Any]) -> Verdict:
    """The checker's verdict from its ``to_dict`` form (missing counts read as 0)."""

    def count(name: str) -> int:
        return int(raw.get(name) or 0)

    anomalies = [
        Anomaly(
            kind=str(a["kind"]),
            order_id=int(a.get("order_id", 0)),
            version=int(a.get("version", 0)),
            at=float(a["at"]),
            window=a.get("window"),
        )
        for a in raw.get("anomalies") or ()
    ]
    offsets_consistent = raw.get("offsets_consistent")
    return Verdict(
        produced=count("produced"),
        acked=count("acked"),
        expected=count("expected"),
        in_sink=count("in_sink"),
        unique_in_sink=count("unique_in_sink"),
        duplicates=count("duplicates"),
        duplicated_keys=count("duplicated_keys"),
        copies={int(n): int(c) for n, c in (raw.get("copies") or {}).items()},
        lost=count("lost"),
        phantoms=count("phantoms"),
        stale=count("stale"),
        dead_lettered=count("dead_lettered"),
        poison_missing=count("poison_missing"),
        offsets_consistent=None if offsets_consistent is None else bool(offsets_consistent),
        anomalies=anomalies,
        anomalies_total=int(raw.get("anomalies_total", len(anomalies)) or 0),
    )


def _resolve(recorded: str | None, run_dir: Path | None) -> Path | None:
    """Where a path results.json recorded is now: as recorded (absolute, or relative to the
    directory the run was started from), else under the run directory by its name (the run
    directory was moved, e.g. downloaded as a CI artifact)."""
    if not recorded:
        return None
    path = Path(recorded)
    if path.exists():
        return path
    if run_dir is not None and (run_dir / path.name).exists():
        return run_dir / path.name
    return None


def as_run(results: Run | Mapping[str, Any] | Any) -> Run:
    """A `Run` from what a caller holds: a Run, a results.json dict, or the runner's
    ScenarioResult (anything with ``to_dict()`` giving that schema)."""
    if isinstance(results, Run):
        return results
    if isinstance(results, Mapping):
        return parse_results(results)
    to_dict = getattr(results, "to_dict", None)
    if callable(to_dict):
        return parse_results(to_dict())
    raise TypeError(f"expected a Run, a results.json mapping or a ScenarioResult, got {results!r}")


def as_runs(results: Sequence[Run | Mapping[str, Any] | Any]) -> list[Run]:
    return [as_run(r) for r in results]
