"""Benchmark (not a test): guided search against random, over bugs planted in the tests' own
variants (``tests/planted_variant.py``: a mark stored before the data, positions committed
before the write, a retry that mints new ids, a de-duplication window that expires), the same
budgets and seeds side by side on one local environment.

    make bench      # or: .venv/bin/python tests/benchmarks/bench_guided.py [SEEDS] [SEARCH_S]
                    #     [--shrink-s S] [--bugs mark-before-data,...]
                    #     [--strategies random,guided] [--cover-s S] [--reruns N] [--keep DIR]

For each bug, strategy and seed (1..SEEDS, 5 by default): ``explore`` of that variant alone on
the listener, every drawable fault kind, starting runs until its first finding or SEARCH_S (300
by default), then shrinking that finding with what is left of SEARCH_S and --shrink-s (300)
more: a finding is shrunk as well whenever it came. Prints, per bug and strategy: the runs to
the first finding (median and worst over the seeds; a search that found nothing counts as its
runs + 1, marked ``>``), the distinct coverage conditions its runs reached per hour of search,
how many of each written reproducer's replays failed (explore's own, which decide whether it is
a race), and how it did when run afresh as its user would (``chaoslab run``, --reruns times; a
race's scenario replays itself, so once: its verdict). Then, for each strategy and seed, a
window of --cover-s (180) over a lab variant with nothing planted: the conditions, pairs of
them and fault targets each reached in the same time. Hours: 4 bugs x 2 strategies x 5 seeds
of up to 10 minutes, each reproducer's fresh runs (about half a minute each), and 10 windows;
with --keep, a search (or fresh runs) the same lab (its harness and planted bugs) finished
there is not run again (a benchmark stopped part-way goes on where it was).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness.environment.local import LocalEnvironment
from harness.explore.explorer import explore
from harness.explore.guide import STRATEGIES, reached
from harness.explore.inputs import plan
from harness.explore.model import Exploration, Plan
from harness.paths import project_root
from harness.report.markdown import table as markdown_table
from harness.scenario import load_scenario

BUGS = {
    "mark-before-data": "tests.planted_variant:MarkBeforeData",
    "commit-before-write": "tests.planted_variant:CommitBeforeWrite",
    "retry-mints-id": "tests.planted_variant:RetryMintsId",
    "expiring-dedup": "tests.planted_variant:ExpiringDedup",
}
# What each bug breaks: a first finding that breaks none of it is not the planted bug (a
# fixture's second bug, or the lab's), printed and not counted as found.
LOSS = frozenset({"lost", "stale"})  # stale: an order's latest change lost with its projection
COPIES = frozenset({"duplicates", "duplicated_keys"})
BREAKS = {
    "mark-before-data": LOSS,
    "commit-before-write": LOSS,
    "retry-mints-id": COPIES,
    "expiring-dedup": COPIES,
}
REPLAYS = 5
SAVED = "search.json"  # a finished search's record, in its folder under --keep
RERUN = "rerun.json"  # its reproducer's fresh runs, beside it


@dataclass(frozen=True)
class Search:
    bug: str
    strategy: str
    seed: int
    runs: int  # the search's runs (shrinking's and the replays' not counted)
    first: int | None  # the run of its first finding, if it made one
    broke: tuple[str, ...]  # what that finding broke ("lost", "stale")
    said: str  # that finding, as explore said it
    conditions: int  # distinct coverage conditions its runs reached
    hours: float  # of search, shrinking and replays not counted
    reproduced: int | None  # replays of that finding's reproducer that broke the promise
    replays: int  # that ran (up to REPLAYS, as the budget left room)
    lab: str  # what decided the search (``lab()``)

    @property
    def found(self) -> bool:
        """Whether its first finding was its bug."""
        return self.first is not None and bool(BREAKS[self.bug] & set(self.broke))


def explored(env: LocalEnvironment, asked: Plan) -> tuple[Exploration, float]:
    """The exploration ``asked``, quietly, and its hours of search (shrinking's not counted)."""
    started = time.monotonic()
    state = explore(env, asked, progress=lambda _line: None, stop=threading.Event())
    return state, max(1.0, time.monotonic() - started - state.shrinking_s) / 3600


def search(
    env: LocalEnvironment, out: Path, bug: str, strategy: str, seed: int, budget: Budget
) -> Search:
    asked = plan(runtime="listener", variants=[BUGS[bug]], kinds=None, backend=env.abilities,
                 budget=f"{budget.search_s + budget.shrink_s}s", seed=seed, out=out, findings=1,
                 replays=REPLAYS, strategy=strategy)  # fmt: skip
    asked = replace(asked, search_s=budget.search_s)  # runs start in the search's share only
    state, searched = explored(env, asked)
    found = state.findings[0] if state.findings else None
    broke = sorted({b.split()[0] for v in found.violations for b in v.broken}) if found else []
    return Search(bug, strategy, seed, len(state.runs), found.run if found else None,
                  tuple(broke), "; ".join(map(str, found.violations)) if found else "",
                  len(reached(state.runs).conditions), searched,
                  found.reproduced if found else None, found.replays if found else 0,
                  lab())  # fmt: skip


@dataclass(frozen=True)
class Budget:
    search_s: int  # for starting runs, until the first finding
    shrink_s: int  # more, for shrinking it and replaying its reproducer


@dataclass(frozen=True)
class Rerun:
    """A written reproducer run afresh, as its user would: ``chaoslab run`` of its scenario.
    Not explore's replays, which decided what it is: a check of them."""

    race: bool  # explore saw it fail in some replays only: its scenario replays itself
    failed: int  # runs that failed (a race's: the one run's verdict over its own replays)
    runs: int
    lab: str

    def __str__(self) -> str:
        if self.race:
            return "race: " + ("fails" if self.failed else "passes")
        return f"{self.failed}/{self.runs}"


def rerun(env: LocalEnvironment, out: Path, times: int) -> Rerun | None:
    """``out``'s written reproducer (its first finding's), run ``times`` times on ``env`` (a
    race's once), or what this lab kept of that; None where the search wrote none."""
    scenario = out / "found-1" / "scenario.yaml"
    if not scenario.exists() or times <= 0:
        return None
    raw = saved_by_this_lab(out, RERUN)
    race = load_scenario(scenario).replays > 1  # its scenario replays itself
    if raw is not None and (race or raw["runs"] >= times):
        return Rerun(**raw)
    failed = 0
    for k in range(1 if race else times):
        folder = out / "rerun" / str(k + 1)
        shutil.rmtree(folder, ignore_errors=True)
        asked = [sys.executable, "-m", "harness.cli", "run", str(scenario), "--env",
                 str(env.directory), "--out", str(folder)]  # fmt: skip
        done = subprocess.run(asked, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 1):  # neither held nor broke its promise: no count
            raise SystemExit(f"{' '.join(asked)} exited {done.returncode}:\n{done.stderr[-2000:]}")
        failed += done.returncode == 1
    made = Rerun(race, failed, 1 if race else times, lab())
    (out / RERUN).write_text(json.dumps(asdict(made)))
    return made


# The coverage arm: a lab variant with nothing planted, so that no finding ends its window: what
# each strategy reaches in the same time (the bug searches stop at their first finding, and
# their conditions per hour say more of when it came than of how far the search went).
COVERED = "idempotent"


@dataclass(frozen=True)
class Cover:
    strategy: str
    seed: int
    window_s: int
    runs: int
    conditions: int  # distinct coverage conditions its runs reached
    pairs: int  # distinct pairs of conditions reached in one run
    targets: int  # fault kind x target fired
    hours: float  # of search, shrinking and replays (of a finding, a result) not counted
    findings: tuple[str, ...]  # a variant with nothing planted that broke its promise: a result
    lab: str


def cover(env: LocalEnvironment, out: Path, strategy: str, seed: int, cover_s: int) -> Cover:
    asked = plan(runtime="listener", variants=[COVERED], kinds=None, backend=env.abilities,
                 budget=f"{cover_s}s", seed=seed, out=out, replays=REPLAYS,
                 strategy=strategy)  # fmt: skip
    state, searched = explored(env, asked)
    so_far = reached(state.runs)
    findings = tuple("; ".join(map(str, f.violations)) for f in state.findings)
    return Cover(strategy, seed, cover_s, len(state.runs), len(so_far.conditions),
                 len(so_far.pairs), len(so_far.fired), searched, findings, lab())  # fmt: skip


COVER_HEADER = ("strategy", "runs", "conditions", "pairs of conditions", "fault targets fired",
                "conditions per hour")  # fmt: skip


def cover_table(covers: list[Cover]) -> list[str]:
    def spread(of: list[int]) -> str:
        return f"{statistics.median(of):g} ({min(of)}-{max(of)})"

    rows = []
    for strategy in dict.fromkeys(c.strategy for c in covers):
        mine = [c for c in covers if c.strategy == strategy]
        per_hour = statistics.median(c.conditions / c.hours for c in mine)
        rows.append([strategy, spread([c.runs for c in mine]),
                     spread([c.conditions for c in mine]), spread([c.pairs for c in mine]),
                     spread([c.targets for c in mine]), f"{per_hour:.0f}"])  # fmt: skip
    return markdown_table(COVER_HEADER, rows, numbers=COVER_HEADER[1:])


@functools.cache  # the code this process loaded: a checkout changed under it is not its lab
def lab() -> str:
    """What decides a search: the commit's lab and planted bugs (git's hashes of them), not
    this file's table."""
    asked = ["git", "rev-parse", "HEAD:harness", "HEAD:tests/planted_variant.py"]
    done = subprocess.run(asked, cwd=project_root(), capture_output=True, text=True, check=False)
    return ":".join(h[:12] for h in done.stdout.split()) or "unknown"


def resumed(out: Path) -> Search | None:
    """A search an earlier benchmark of the same lab finished into ``out`` (--keep)."""
    raw = saved_by_this_lab(out)
    return None if raw is None else Search(**{**raw, "broke": tuple(raw["broke"])})


def saved_by_this_lab(out: Path, name: str = SAVED) -> dict[str, Any] | None:
    saved = out / name
    if not saved.exists():
        return None
    raw: dict[str, Any] = json.loads(saved.read_text())
    return raw if raw.get("lab") == lab() else None


HEADER = ("bug", "strategy", "found", "runs to the first finding (median, worst)",
          "conditions per hour", "reproducers' replays that failed",
          "reproducers run afresh: failed")  # fmt: skip


def table(searches: list[Search], reruns: Mapping[Search, Rerun] | None = None) -> list[str]:
    """Per bug and strategy; ``reruns``: the written reproducers run afresh, of the searches
    that have them."""
    reruns = reruns or {}
    rows = []
    for bug in dict.fromkeys(s.bug for s in searches):
        for strategy in dict.fromkeys(s.strategy for s in searches):
            mine = [s for s in searches if s.bug == bug and s.strategy == strategy]
            if not mine:
                continue
            # A search that did not find it counts as one run more than it made (a lower bound).
            runs = [s.first if s.found and s.first else s.runs + 1 for s in mine]
            missed = not all(s.found for s in mine)
            worst = f"{'>' if missed else ''}{max(runs)}"
            per_hour = statistics.median(s.conditions / s.hours for s in mine)
            replays = ", ".join(f"{s.reproduced}/{s.replays}" for s in mine if s.found)
            afresh = ", ".join(str(reruns[s]) for s in mine if s.found and s in reruns)
            found = sum(s.found for s in mine)
            median = statistics.median(runs)
            rows.append([bug, strategy, f"{found}/{len(mine)}", f"{median:g}, {worst}",
                         f"{per_hour:.0f}", replays or "-", afresh or "-"])  # fmt: skip
    return markdown_table(HEADER, rows, numbers=HEADER[2:5])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("seeds", type=int, nargs="?", default=5)
    parser.add_argument("search_s", type=int, nargs="?", default=300)
    parser.add_argument("--shrink-s", type=int, default=300)
    parser.add_argument(
        "--first-seed",
        type=int,
        default=1,
        help="seeds FIRST_SEED..SEEDS only: another process, with the same --keep, may do the "
        "others side by side",
    )
    parser.add_argument("--bugs", default=",".join(BUGS), help="'' for none")
    parser.add_argument(
        "--cover-s",
        type=int,
        default=180,
        help=f"each strategy and seed's window over {COVERED} (nothing planted); 0: none",
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument(
        "--reruns",
        type=int,
        default=REPLAYS,
        help="runs of each written reproducer afresh (chaoslab run; a race's once); 0: none",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep each search's folder (its explore.md and reproducers) under this one, and "
        "take the searches of this commit found there as done; by default they are thrown away",
    )
    args = parser.parse_args()
    bugs = [b for b in args.bugs.split(",") if b]
    strategies = args.strategies.split(",")
    budget = Budget(args.search_s, args.shrink_s)
    keep = args.keep.resolve() if args.keep else None  # before the chdir: relative to the caller
    # The planted variants are the tests' module: importable from the project's folder, by this
    # process and by the consumers it starts there.
    os.chdir(project_root())
    sys.path.insert(0, str(project_root()))
    searches: list[Search] = []
    reruns: dict[Search, Rerun] = {}
    with tempfile.TemporaryDirectory() as tmp, LocalEnvironment(Path(tmp) / "env") as env:
        for bug in bugs:
            for seed in range(args.first_seed, args.seeds + 1):
                for strategy in strategies:  # side by side: each seed's pair one after the other
                    out = (keep or Path(tmp)) / f"{bug}-{strategy}-{seed}"
                    began = time.monotonic()
                    done = resumed(out)
                    if done is None:
                        shutil.rmtree(out, ignore_errors=True)
                        done = search(env, out, bug, strategy, seed, budget)
                        (out / SAVED).write_text(json.dumps(asdict(done)))
                    searches.append(done)
                    again = rerun(env, out, args.reruns) if done.found else None
                    if again is not None:
                        reruns[done] = again
                    found = f"found at run {done.first}" if done.found else "not found"
                    if done.said and not done.found:
                        found = f"not found: its first finding was another bug's: {done.said}"
                    print(f"  {bug} {strategy} seed {seed}: {found} of {done.runs}; "
                          f"{done.conditions} conditions; replays failed {done.reproduced} of "
                          f"{done.replays}"
                          f"{f'; run afresh: {again}' if again is not None else ''}; "
                          f"{time.monotonic() - began:.0f} s in all", flush=True)  # fmt: skip
        covers = [
            covered(env, keep or Path(tmp), strategy, seed, args.cover_s)
            for seed in range(args.first_seed, args.seeds + 1 if args.cover_s else 1)
            for strategy in strategies
        ]
    if searches:
        seeds = len({s.seed for s in searches})  # --first-seed: fewer than SEEDS
        print(f"\nguided against random, {seeds} seeds, {args.search_s} s of search each "
              f"(and {args.shrink_s} s more to shrink a finding), the listener, "
              "every drawable fault kind:")  # fmt: skip
        print("\n".join(table(searches, reruns)))
    if covers:
        print(f"\nwhat each reached over {COVERED} (nothing planted) in {args.cover_s} s, median "
              f"(fewest-most) of {len({c.seed for c in covers})} seeds:")  # fmt: skip
        print("\n".join(cover_table(covers)))
        for c in covers:
            for said in c.findings:
                print(f"  found over {COVERED}, {c.strategy} seed {c.seed}: {said}")


def covered(env: LocalEnvironment, keep: Path, strategy: str, seed: int, cover_s: int) -> Cover:
    """One strategy and seed's window over COVERED, or the one this lab kept (--keep)."""
    out = keep / f"cover-{strategy}-{seed}"
    began = time.monotonic()
    raw = saved_by_this_lab(out)
    if raw is not None and raw.get("window_s") == cover_s:
        done = Cover(**{**raw, "findings": tuple(raw["findings"])})
    else:
        shutil.rmtree(out, ignore_errors=True)
        done = cover(env, out, strategy, seed, cover_s)
        (out / SAVED).write_text(json.dumps(asdict(done)))
    print(f"  cover {strategy} seed {seed}: {done.runs} runs; {done.conditions} conditions, "
          f"{done.pairs} pairs, {done.targets} fault targets; {len(done.findings)} findings; "
          f"{time.monotonic() - began:.0f} s in all", flush=True)  # fmt: skip
    return done


if __name__ == "__main__":
    main()
