"""Soak figures: every scenario run several times with different seeds, and per scenario x
runtime x variant how often its expectations held - the false alarms of a variant expected to
keep every change once, the detection rate of one expected to show an anomaly. Pure: it reads
the results the runs wrote."""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.results.model import ScenarioResult, VariantResult

# An expectation that an anomaly shows: "duplicates > 0", "published_lost > 0", or that it does
# in a share of the runs ("duplicates > 0 in 80% of runs").
_SHOWS = re.compile(r"^\w*(duplicates|lost)\s*>\s*0( in .*)?$")
Z_95 = 1.959964  # the normal quantile of a two-sided 95% interval
# One that the variant keeps every change once.
_KEEPS = {"duplicates == 0", "lost == 0"}


class Role(enum.Enum):
    """What a variant is in a scenario, from its expectations."""

    DETECTS = "detects"  # expected to show duplicates or losses: the lab must see them
    GUARDS = "guards"  # expected to keep every change exactly once: an anomaly is a false alarm
    OTHER = "other"

    @classmethod
    def of(cls, v: VariantResult) -> Role:
        if any(_SHOWS.match(e) for e in v.expectations):
            return cls.DETECTS
        if set(v.expectations) >= _KEEPS:
            return cls.GUARDS
        return cls.OTHER


def interval(held: int, runs: int) -> tuple[float, float]:
    """The 95% Wilson score interval of ``held`` in ``runs``: unlike the normal approximation,
    it stays inside [0, 1] and says something at 10/10 and 0/10."""
    if runs == 0:
        return 0.0, 1.0
    p, z2 = held / runs, Z_95**2
    centre = (p + z2 / (2 * runs)) / (1 + z2 / runs)
    half = Z_95 * math.sqrt(p * (1 - p) / runs + z2 / (4 * runs**2)) / (1 + z2 / runs)
    return max(0.0, centre - half), min(1.0, centre + half)


def share(held: int, runs: int) -> str:
    """``9/10 (95%: 60-98%)``."""
    low, high = interval(held, runs)
    return f"{held}/{runs} (95%: {low * 100:.0f}-{high * 100:.0f}%)"


@dataclass(frozen=True)
class RateFigure:
    """An expectation over seeds: in how many runs it held, against the share it asks for."""

    expectation: str  # "duplicates > 0 in 80% of runs"
    held: int
    runs: int

    @property
    def wanted(self) -> float:
        return float(self.expectation.rsplit(" in ", 1)[1].split("%")[0]) / 100

    @property
    def passed(self) -> bool:
        return self.held >= math.ceil(self.wanted * self.runs - 1e-9)

    def __str__(self) -> str:
        verdict = "holds" if self.passed else "DOES NOT HOLD"
        return f"{self.expectation}: {share(self.held, self.runs)}, {verdict}"


@dataclass(frozen=True)
class SoakCell:
    """One scenario x runtime x variant over ``runs`` seeds."""

    scenario: str
    runtime: str
    variant: str
    role: Role
    runs: int
    held: int  # runs in which every expectation held (and every planned fault fired)
    failed: tuple[int, ...]  # seeds of the runs in which an expectation did not hold
    unfired: tuple[int, ...]  # seeds of the runs in which a planned fault did not fire
    died: tuple[int, ...]  # seeds of the scenario's runs that wrote no results
    anomalous: int  # runs with duplicates or losses in the sink
    rates: tuple[RateFigure, ...] = ()

    @property
    def detected(self) -> int:
        """Runs that showed what a DETECTS variant is expected to show (of a rate's: the runs
        it held in)."""
        return min((r.held for r in self.rates), default=self.held)

    @property
    def figure(self) -> str:
        """``false alarms 0/10 (95%: 0-28%)``, ``detected 9/10 (...)`` or ``held 10/10 (...)``."""
        if self.role is Role.GUARDS:
            return f"false alarms {share(len(self.failed), self.runs)}"
        if self.role is Role.DETECTS:
            return f"detected {share(self.detected, self.runs)}"
        # An expectation over seeds counts its runs too: a race's reproducer, whose every run
        # passes on its own, held only where its rate's expectation did.
        return f"held {share(min(self.held, self.detected), self.runs)}"

    @property
    def passed(self) -> bool:
        """Every run held, and every expectation over seeds held in its share of them."""
        return self.held == self.runs and all(r.passed for r in self.rates)


def soak_cells(runs: Sequence[ScenarioResult]) -> list[SoakCell]:
    """The cells, in the order the scenarios and variants first appear. A run that wrote no
    results (it died) is a run of each of its scenario's cells, held by none."""
    order: list[tuple[str, str, str]] = []
    seen: dict[tuple[str, str, str], list[tuple[int, VariantResult]]] = {}
    dead: dict[str, list[int]] = {}
    for run in runs:
        seed = run.seed if run.seed is not None else -1
        if run.error:
            dead.setdefault(run.name, []).append(seed)
        for v in run.variants:
            key = (run.name, v.runtime, v.variant)
            if key not in seen:
                order.append(key)
                seen[key] = []
            seen[key].append((seed, v))
    cells = []
    for key in order:
        results = seen[key]
        died = tuple(dead.get(key[0], ()))
        cells.append(
            SoakCell(
                scenario=key[0],
                runtime=key[1],
                variant=key[2],
                role=Role.of(results[0][1]),
                runs=len(results) + len(died),
                held=sum(1 for _s, v in results if v.passed),
                failed=tuple(seed for seed, v in results if v.failures),
                unfired=tuple(seed for seed, v in results if v.unfired and not v.failures),
                died=died,
                anomalous=sum(
                    1 for _s, v in results if v.verdict.duplicates > 0 or v.verdict.lost > 0
                ),
                rates=_rates([v for _s, v in results], len(results) + len(died)),
            )
        )
    return cells


def _rates(results: Sequence[VariantResult], runs: int) -> tuple[RateFigure, ...]:
    """Each expectation over seeds of the cell: the runs it held in (a run that died held
    none)."""
    names = list(dict.fromkeys(r.expectation for v in results for r in v.rates))
    return tuple(
        RateFigure(
            name, sum(1 for v in results for r in v.rates if r.expectation == name and r.held), runs
        )
        for name in names
    )
