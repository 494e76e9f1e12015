"""The suite's two tiers (docs/ci.md): ``make test`` runs every test not marked ``library`` - a
budget of 25 minutes on 2 cores -, ``make library`` the ones that are, split by ``--shard K/N``
into balanced shares by their measured times, as ``chaoslab matrix --shard`` splits the
scenarios (the same greedy split, ``harness.run.shards.split``).

Every whole run of a tier writes each test's seconds to ``.chaoslab/suite-times/TIER.json``
(``make bench`` prints the ten most expensive); ``--record-times FILE`` also keeps the passing
tests' seconds in FILE, the times the next split is made by (``make library`` writes
``tests/durations.json``)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.paths import project_root
from harness.run.shards import Shard, split

# The second tier: a test marked so runs in `make library`, not in `make test`.
LIBRARY = pytest.mark.library
MARKER = "library"
# The library tier's measured seconds per test (node id -> seconds), committed.
TIMES = Path(__file__).resolve().parent / "durations.json"
# A test no run has timed yet counts as this many seconds in the split.
UNTIMED_S = 60.0
# Where each tier's last whole run leaves every test's seconds.
LAST_DIR = ".chaoslab/suite-times"


def tier_of(markexpr: str) -> str | None:
    """The tier a ``-m`` expression selects (``test`` or ``library``), None for another."""
    return {f"not {MARKER}": "test", MARKER: "library"}.get(" ".join(markexpr.split()))


def load_times(path: Path) -> dict[str, float]:
    """Node id -> seconds, {} if the file is absent."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    if not isinstance(raw, dict):
        raise pytest.UsageError(f"{path}: not a JSON object of test ids and seconds")
    return {str(k): float(v) for k, v in raw.items()}


def plain_id(nodeid: str) -> str:
    """A test's id without the ``@group`` pytest-xdist adds under ``--dist loadgroup``."""
    return re.sub(r"@[\w-]+$", "", nodeid)


def share(ids: Sequence[str], shard: Shard, times: Mapping[str, float]) -> set[str]:
    """The tests (of ``ids``) shard ``shard`` runs: split by their ids without a group, so
    that a run with pytest-xdist's groups and one without split alike."""
    timed = {plain_id(i): times.get(plain_id(i), UNTIMED_S) for i in ids}
    mine = set(split(timed, shard.count)[shard.index - 1])
    return {i for i in ids if plain_id(i) in mine}


_RANK = ["passed", "skipped", "failed"]


@dataclass
class Timing:
    """Each test's seconds (its setup, call and teardown), as the reports arrive."""

    started: float = field(default_factory=time.time)
    seconds: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)

    def add(self, report: pytest.TestReport) -> None:
        nodeid = plain_id(report.nodeid)
        self.seconds[nodeid] = self.seconds.get(nodeid, 0.0) + report.duration
        # A test passed if its call did; a skip or a failure in any phase outranks that.
        if report.when == "call" or report.outcome != "passed":
            before = self.outcomes.get(nodeid, "passed")
            self.outcomes[nodeid] = max(before, report.outcome, key=_RANK.index)

    def write_last(self, tier: str, exitstatus: int) -> Path:
        folder = project_root() / LAST_DIR
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{tier}.json"
        tests = {
            n: {"s": round(s, 1), "outcome": self.outcomes.get(n, "?")}
            for n, s in sorted(self.seconds.items(), key=lambda kv: -kv[1])
        }
        path.write_text(
            json.dumps(
                {
                    "tier": tier,
                    "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
                    "wall_s": round(time.time() - self.started, 1),
                    "exitstatus": exitstatus,
                    "tests": tests,
                },
                indent=1,
            )
            + "\n"
        )
        return path

    def record(self, path: Path) -> None:
        """Keep the passing tests' seconds in ``path`` (the others keep theirs)."""
        known = load_times(path)
        known.update(
            {n: round(s, 1) for n, s in self.seconds.items() if self.outcomes.get(n) == "passed"}
        )
        path.write_text(json.dumps(dict(sorted(known.items())), indent=1) + "\n")
