"""Soak figures: every scenario run several times with different seeds, and per scenario x
runtime x variant how often its expectations held - the false alarms of a variant expected to
keep every change once, the detection rate of one expected to show an anomaly. Pure: it reads
the results the runs wrote."""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.results.model import ScenarioResult, VariantResult

# An expectation that an anomaly shows: "duplicates > 0", "published_lost > 0", ...
_SHOWS = re.compile(r"^\w*(duplicates|lost)\s*>\s*0$")
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

    @property
    def figure(self) -> str:
        """``false alarms 0/10``, ``detected 9/10`` or ``held 10/10``."""
        if self.role is Role.GUARDS:
            return f"false alarms {len(self.failed)}/{self.runs}"
        if self.role is Role.DETECTS:
            return f"detected {self.held}/{self.runs}"
        return f"held {self.held}/{self.runs}"


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
            )
        )
    return cells
