"""Benchmark (not a test): guided search against random, over bugs planted in the tests' own
variants (``tests/planted_variant.py``: a mark stored before the data, positions committed
before the write, a retry that mints new ids, a de-duplication window that expires), the same
budgets and seeds side by side on one local environment.

    make bench      # or: .venv/bin/python tests/benchmarks/bench_guided.py [SEEDS] [SEARCH_S]
                    #     [--shrink-s S] [--bugs mark-before-data,...]
                    #     [--strategies random,guided] [--keep DIR]

For each bug, strategy and seed (1..SEEDS, 5 by default): ``explore`` of that variant alone on
the listener, every drawable fault kind, starting runs until its first finding or SEARCH_S (300
by default), then shrinking that finding with what is left of SEARCH_S and --shrink-s (300)
more: a finding is shrunk as well whenever it came. Prints, per bug and strategy: the runs to
the first finding (median and worst over the seeds; a search that found nothing counts as its
runs + 1, marked ``>``), the distinct coverage conditions its runs reached per hour of search,
and how many of each written reproducer's replays failed. Hours: 4 bugs x 2 strategies x 5
seeds of up to 10 minutes; with --keep, a search this commit finished there is not run again
(a benchmark stopped part-way goes on where it was).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from harness.environment.local import LocalEnvironment
from harness.explore.explorer import explore
from harness.explore.guide import STRATEGIES, reached
from harness.explore.inputs import plan
from harness.paths import project_root

BUGS = {
    "mark-before-data": "tests.planted_variant:MarkBeforeData",
    "commit-before-write": "tests.planted_variant:CommitBeforeWrite",
    "retry-mints-id": "tests.planted_variant:RetryMintsId",
    "expiring-dedup": "tests.planted_variant:ExpiringDedup",
}
# What each bug breaks: a finding that breaks none of it is not the planted bug (a fixture's
# second bug, or the lab's), reported as such and not counted as found.
BREAKS = {
    "mark-before-data": "lost",
    "commit-before-write": "lost",
    "retry-mints-id": "duplicates",
    "expiring-dedup": "duplicates",
}
REPLAYS = 5
SAVED = "search.json"  # a finished search's record, in its folder under --keep


@dataclass(frozen=True)
class Search:
    bug: str
    strategy: str
    seed: int
    runs: int  # the search's runs (shrinking's and the replays' not counted)
    first: int | None  # the run that found the bug, if one did
    conditions: int  # distinct coverage conditions its runs reached
    hours: float  # of search, shrinking and replays not counted
    reproduced: int | None  # replays of its reproducer that broke the promise, where it found it
    replays: int  # that ran (up to REPLAYS, as the budget left room)
    other: str = ""  # a first finding that was not the planted bug's, as explore said it
    commit: str = ""  # of the lab that searched


def search(
    env: LocalEnvironment, out: Path, bug: str, strategy: str, seed: int, budget: Budget
) -> Search:
    asked = plan(runtime="listener", variants=[BUGS[bug]], kinds=None, backend=env.abilities,
                 budget=f"{budget.search_s + budget.shrink_s}s", seed=seed, out=out, findings=1,
                 replays=REPLAYS, strategy=strategy)  # fmt: skip
    asked = replace(asked, search_s=budget.search_s)  # runs start in the search's share only
    started = time.monotonic()
    state = explore(env, asked, progress=lambda _line: None, stop=threading.Event())
    searched = max(1.0, time.monotonic() - started - state.shrinking_s) / 3600
    found = state.findings[0] if state.findings else None
    other = ""
    if found and not any(b.startswith(f"{BREAKS[bug]} ") for v in found.violations
                         for b in v.broken):  # fmt: skip
        other, found = "; ".join(map(str, found.violations)), None
    return Search(bug, strategy, seed, len(state.runs), found.run if found else None,
                  len(reached(state.runs).conditions), searched,
                  found.reproduced if found else None, found.replays if found else 0, other,
                  commit())  # fmt: skip


@dataclass(frozen=True)
class Budget:
    search_s: int  # for starting runs, until the first finding
    shrink_s: int  # more, for shrinking it and replaying its reproducer


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=project_root(),
                          capture_output=True, text=True, check=False)  # fmt: skip
    return done.stdout.strip() or "unknown"


def resumed(out: Path) -> Search | None:
    """A search an earlier benchmark of this lab's commit finished into ``out`` (--keep)."""
    saved = out / SAVED
    if not saved.exists():
        return None
    found = Search(**json.loads(saved.read_text()))
    return found if found.commit == commit() else None


def table(searches: list[Search]) -> list[str]:
    lines = [
        "| bug | strategy | found | runs to the first finding (median, worst) | conditions "
        "per hour | reproducers' replays that failed |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for bug in dict.fromkeys(s.bug for s in searches):
        for strategy in dict.fromkeys(s.strategy for s in searches):
            mine = [s for s in searches if s.bug == bug and s.strategy == strategy]
            if not mine:
                continue
            # A search that did not find it counts as one run more than it made (a lower bound).
            runs = [s.first if s.first is not None else s.runs + 1 for s in mine]
            missed = any(s.first is None for s in mine)
            worst = f"{'>' if missed else ''}{max(runs)}"
            per_hour = statistics.median(s.conditions / s.hours for s in mine)
            replays = ", ".join(
                f"{s.reproduced}/{s.replays}" for s in mine if s.reproduced is not None
            )
            found = sum(s.first is not None for s in mine)
            median = statistics.median(runs)
            lines.append(f"| {bug} | {strategy} | {found}/{len(mine)} | {median:g}, {worst} | "
                         f"{per_hour:.0f} | {replays or '-'} |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("seeds", type=int, nargs="?", default=5)
    parser.add_argument("search_s", type=int, nargs="?", default=300)
    parser.add_argument("--shrink-s", type=int, default=300)
    parser.add_argument("--bugs", default=",".join(BUGS))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep each search's folder (its explore.md and reproducers) under this one, and "
        "take the searches of this commit found there as done; by default they are thrown away",
    )
    args = parser.parse_args()
    bugs, strategies = args.bugs.split(","), args.strategies.split(",")
    budget = Budget(args.search_s, args.shrink_s)
    keep = args.keep.resolve() if args.keep else None  # before the chdir: relative to the caller
    # The planted variants are the tests' module: importable from the project's folder, by this
    # process and by the consumers it starts there.
    os.chdir(project_root())
    sys.path.insert(0, str(project_root()))
    searches: list[Search] = []
    with tempfile.TemporaryDirectory() as tmp, LocalEnvironment(Path(tmp) / "env") as env:
        for bug in bugs:
            for seed in range(1, args.seeds + 1):
                for strategy in strategies:  # side by side: each seed's pair one after the other
                    out = (keep or Path(tmp)) / f"{bug}-{strategy}-{seed}"
                    began = time.monotonic()
                    done = resumed(out)
                    if done is None:
                        shutil.rmtree(out, ignore_errors=True)
                        done = search(env, out, bug, strategy, seed, budget)
                        (out / SAVED).write_text(json.dumps(asdict(done)))
                    searches.append(done)
                    found = f"found at run {done.first}" if done.first else "not found"
                    if done.other:
                        found = f"not found: its first finding was another bug's: {done.other}"
                    print(f"  {bug} {strategy} seed {seed}: {found} of {done.runs}; "
                          f"{done.conditions} conditions; replays failed {done.reproduced} of "
                          f"{done.replays}; "
                          f"{time.monotonic() - began:.0f} s in all", flush=True)  # fmt: skip
    print(f"\nguided against random, {args.seeds} seeds, {args.search_s} s of search each (and "
          f"{args.shrink_s} s more to shrink a finding), the listener, "
          "every drawable fault kind:")  # fmt: skip
    print("\n".join(table(searches)))


if __name__ == "__main__":
    main()
