"""The results of a run, one model for everyone: the runner makes them, ``results.json`` holds
them (``to_json`` / ``from_json``), and the report, the lab and the notebooks read them.

A variant's history and its ledger's ack times are not in ``results.json``: ``load`` attaches
them (``events``, ``acked_at``) for the report's timeline and plots.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.checker.load import read_ledger_columns
from harness.checker.model import RelayStage, Verdict
from harness.history.events import HistoryEvent, read_history
from harness.results.outcome import Outcome, UnfiredFault, reason_text
from harness.scenario import Expectation, Scenario

RESULTS = "results.json"


@dataclass(frozen=True)
class UntimedFault:
    """A fault the consumers apply themselves (a crash point): it has no window in the history,
    so results.json names it. Windows come from the history (``harness.history.events``)."""

    name: str
    kind: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "kind": self.kind}

    @classmethod
    def from_json(cls, raw: str | Mapping[str, Any]) -> UntimedFault:
        """Older results.json files also listed windows (``{"name", "kind", "start", "end"}``)
        or plain descriptions (``"crash at after_write_before_commit (batch 3, 1x)"``): read
        by name."""
        if isinstance(raw, str):
            return cls(name=raw, kind=fault_kind(raw))
        name = str(raw.get("name", ""))
        return cls(name=name, kind=str(raw.get("kind") or fault_kind(name)))


@dataclass(frozen=True)
class RateCheck:
    """One run's side of an expectation over seeds: whether it held in this run."""

    expectation: str
    held: bool

    def to_json(self) -> dict[str, Any]:
        return {"expectation": self.expectation, "held": self.held}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RateCheck:
        return cls(str(raw.get("expectation", "")), bool(raw.get("held")))


@dataclass(frozen=True)
class Judged:
    """A verdict against a lane's expectations: what they were, which failed, and the runs'
    side of those over seeds."""

    expectations: tuple[str, ...]
    failures: tuple[str, ...]
    rates: tuple[RateCheck, ...]

    @classmethod
    def of(
        cls, expectations: Sequence[Expectation], verdict: Verdict, relay: RelayStage | None = None
    ) -> Judged:
        return cls(
            expectations=tuple(str(e) for e in expectations),
            failures=tuple(f for e in expectations if (f := e.failure(verdict, relay)) is not None),
            rates=tuple(
                RateCheck(str(e), e.holds(e.actual(verdict, relay)))
                for e in expectations
                if e.rate is not None
            ),
        )


def fault_kind(name: str) -> str:
    """``broker-rolling-restart#1`` -> ``broker-rolling-restart``: the nemesis numbers each
    application of a fault kind after a ``#``."""
    return name.split("#", 1)[0]


@dataclass(frozen=True, eq=False)
class VariantResult:
    """One runtime x variant of a run: the checker's verdict and how the run went."""

    runtime: str
    variant: str  # the variant's label
    verdict: Verdict
    events_per_s: float = 0.0  # records consumed per second, first batch to last commit
    seconds: float = 0.0  # the whole variant run
    restarts: int = 0  # consumer processes started again after a crash
    crashes: int = 0  # crash points that fired
    faults: tuple[UntimedFault, ...] = ()
    expectations: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()  # the expectations that did not hold, with actual values
    unfired: tuple[UnfiredFault, ...] = ()  # planned faults that did not fire in this run
    rates: tuple[RateCheck, ...] = ()  # expectations over seeds: whether each held in this run
    # Duplicates that no record handed out or written twice, and no resend, accounts for.
    unexplained: int = 0
    directory: Path | None = None  # the variant's history, logs and runtime configuration
    ledger: Path | None = None  # the ledger of the topic it consumed (shared side by side)
    # An outbox relay's stage (seed 003); ``verdict`` is then end to end (written -> stored).
    relay: RelayStage | None = None
    # Attached by ``load``, never written: the variant's history and its ledger's ack times.
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
    def outcome(self) -> Outcome:
        return Outcome.of(self.failures, self.unfired)

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS

    @property
    def reason(self) -> str:
        return reason_text(self.failures, self.unfired)

    def to_json(self) -> dict[str, Any]:
        return {
            "runtime": self.runtime,
            "variant": self.variant,
            **self.verdict.to_dict(),
            "events_per_s": round(self.events_per_s, 1),
            "seconds": round(self.seconds, 2),
            "restarts": self.restarts,
            "crashes": self.crashes,
            "faults": [f.to_json() for f in self.faults],
            "expectations": list(self.expectations),
            "failures": list(self.failures),
            "unfired": [u.to_dict() for u in self.unfired],
            "rates": [r.to_json() for r in self.rates],
            "unexplained_duplicates": self.unexplained,
            "expectation": self.outcome.value,
            "reason": self.reason,
            "directory": None if self.directory is None else str(self.directory),
            "ledger": None if self.ledger is None else str(self.ledger),
            **({} if self.relay is None else {"relay": self.relay.to_dict()}),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], run_dir: Path | None = None) -> VariantResult:
        unfired = tuple(UnfiredFault.from_dict(u) for u in raw.get("unfired") or ())
        return cls(
            runtime=str(raw.get("runtime", "")),
            variant=str(raw.get("variant", "")),
            verdict=Verdict.from_dict(raw),
            events_per_s=float(raw.get("events_per_s") or 0.0),
            seconds=float(raw.get("seconds") or 0.0),
            restarts=int(raw.get("restarts") or 0),
            crashes=int(raw.get("crashes") or 0),
            faults=tuple(UntimedFault.from_json(f) for f in raw.get("faults") or ()),
            expectations=tuple(str(e) for e in raw.get("expectations") or ()),
            failures=_failures(raw, unfired),
            unfired=unfired,
            rates=tuple(RateCheck.from_json(r) for r in raw.get("rates") or ()),
            unexplained=int(raw.get("unexplained_duplicates") or 0),
            directory=_resolve(raw.get("directory"), run_dir),
            ledger=_resolve(raw.get("ledger"), run_dir),
            relay=RelayStage.from_dict(raw["relay"]) if raw.get("relay") else None,
        )


def _failures(raw: Mapping[str, Any], unfired: tuple[UnfiredFault, ...]) -> tuple[str, ...]:
    if "failures" in raw:
        return tuple(str(f) for f in raw["failures"] or ())
    # Older files: the failures are the parts of ``reason`` that are no unfired fault.
    if Outcome.parse(str(raw.get("expectation", "pass"))) is Outcome.PASS:
        return ()
    told = {str(u) for u in unfired}
    parts = (p.strip() for p in str(raw.get("reason", "")).split(";"))
    return tuple(p for p in parts if p and p not in told)


def _resolve(recorded: str | None, run_dir: Path | None) -> Path | None:
    """Where a path results.json recorded is now: as recorded (absolute, or relative to the
    directory the run was started from), else under the run directory by its name (the run
    directory was moved, e.g. downloaded as a CI artifact), else as recorded."""
    if not recorded:
        return None
    path = Path(recorded)
    if path.exists() or run_dir is None:
        return path
    if (run_dir / path.name).exists():
        return run_dir / path.name
    return None


@dataclass(frozen=True, eq=False)
class ScenarioResult:
    """One scenario's run: what results.json holds (``directory`` is where it was read)."""

    name: str
    description: str = ""
    file: str = ""
    seed: int | None = None
    backend: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    producer: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0  # unix seconds; the origin of every "+N s" in the report
    seconds: float = 0.0
    variants: tuple[VariantResult, ...] = ()
    directory: Path | None = None
    error: str = ""  # why there are no results (e.g. the run died before writing them)

    @classmethod
    def of(
        cls,
        scenario: Scenario,
        backend: str,
        versions: Mapping[str, str],
        started_at: float,
        seconds: float,
        variants: tuple[VariantResult, ...],
        directory: Path,
    ) -> ScenarioResult:
        """The result of running ``scenario`` so far, in ``directory``."""
        return cls(
            name=scenario.name,
            description=scenario.description,
            file=scenario.path,
            seed=scenario.seed,
            backend=backend,
            versions=dict(versions),
            # An outbox scenario's workload is its application's writes.
            workload={
                **asdict(scenario.outbox if scenario.outbox else scenario.workload),
                "partitions": scenario.partitions,
                "rate": scenario.outbox.rate if scenario.outbox else scenario.rate,
            },
            producer=asdict(scenario.producer),
            started_at=started_at,
            seconds=seconds,
            variants=variants,
            directory=directory,
        )

    @property
    def passed(self) -> bool:
        return not self.error and all(v.passed for v in self.variants)

    @property
    def failed(self) -> tuple[VariantResult, ...]:
        return tuple(v for v in self.variants if not v.passed)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": {"name": self.name, "file": self.file, "description": self.description},
            "seed": self.seed,
            "workload": self.workload,
            "producer": self.producer,
            "backend": self.backend,
            "versions": self.versions,
            "started_at": self.started_at,
            "seconds": round(self.seconds, 2),
            "passed": self.passed,
            **({"error": self.error} if self.error else {}),
            "results": [v.to_json() for v in self.variants],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], directory: Path | None = None) -> ScenarioResult:
        """The records of a results.json document (no other file is read)."""
        scenario = raw.get("scenario") or {}
        if isinstance(scenario, str):
            scenario = {"name": scenario}
        seed = raw.get("seed")
        return cls(
            name=str(scenario.get("name", "") or (directory.name if directory else "scenario")),
            description=str(scenario.get("description", "") or "").strip(),
            file=str(scenario.get("file", "") or ""),
            seed=None if seed is None else int(seed),
            backend=str(raw.get("backend", "")),
            versions={str(k): str(v) for k, v in (raw.get("versions") or {}).items()},
            workload=dict(raw.get("workload") or {}),
            producer=dict(raw.get("producer") or {}),
            started_at=float(raw.get("started_at") or 0.0),
            seconds=float(raw.get("seconds") or 0.0),
            variants=tuple(VariantResult.from_json(r, directory) for r in raw.get("results", [])),
            error=str(raw.get("error", "") or ""),
            directory=directory,
        )

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")


def missing(run_dir: Path, error: str) -> ScenarioResult:
    """A run that left no readable results: reported as an error, not skipped."""
    return ScenarioResult(name=run_dir.name, directory=run_dir, error=error)


def load(run_dir: Path) -> ScenarioResult:
    """``run_dir/results.json`` with every variant's history and ledger ack times attached."""
    path = run_dir / RESULTS
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no results.json in this run directory") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    result = ScenarioResult.from_json(raw, run_dir)
    ledgers: dict[Path, np.ndarray] = {}  # variants run side by side share one ledger
    variants = []
    for v in result.variants:
        events: tuple[HistoryEvent, ...] = ()
        if v.directory is not None and (v.directory / "history").is_dir():
            events = tuple(read_history(v.directory / "history"))
        acked_at = np.empty(0)
        if v.ledger is not None:
            if v.ledger not in ledgers:
                ledgers[v.ledger] = read_ack_times(v.ledger)
            acked_at = ledgers[v.ledger]
        variants.append(replace(v, events=events, acked_at=acked_at))
    return replace(result, variants=tuple(variants))


def read_ack_times(ledger: Path) -> np.ndarray:
    """The acked_at column of a ledger, sorted: all the report plots of it. A ledger the
    checker's loader refuses gives no times (the counts in results.json still stand)."""
    try:
        columns = read_ledger_columns(ledger, topic=None)
    except (OSError, ValueError):
        return np.empty(0)
    times: np.ndarray = np.sort(np.asarray(columns["acked_at"], dtype=np.float64))
    return times
