"""The library across machines: ``chaoslab matrix --shard K/N`` runs a deterministic share of
the scenarios, balanced by their measured times; ``chaoslab report DIR...`` merges the shards'
directories, and refuses directories that do not belong together."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from xml.etree import ElementTree

import pytest

from harness import paths
from harness.environment.local import LocalEnvironment
from harness.errors import BadInput
from harness.pipeline.runtimes import get_runtime
from harness.report.write import REPORT_MD
from harness.results.model import RESULTS
from harness.run.shards import (
    MANIFEST,
    Manifest,
    Shard,
    load_durations,
    merge_problems,
    record_durations,
    share_of,
    split,
    tree_id,
)
from harness.scenario import load_scenario
from tests.support import chaoslab


def test_a_split_is_balanced_deterministic_and_runs_each_scenario_once() -> None:
    """Longest first, each to the share with the least time so far. Taken as given (shortest
    first here) or by name, the same greedy makes 90/120 of these on two shares and 50/70/90 on
    three, where longest-first makes 110/100 and 70/70/70."""
    times = {"a": 10.0, "b": 20.0, "c": 30.0, "d": 40.0, "e": 50.0, "f": 60.0}
    assert split(times, 2) == [["f", "c", "b"], ["e", "d", "a"]]  # 110 / 100
    assert split(times, 3) == [["f", "a"], ["e", "b"], ["d", "c"]]  # 70 each
    for count in (2, 3, 4, 9):
        assert split(dict(reversed(times.items())), count) == split(times, count)
        assert longest_first_broken(times, split(times, count)) == []
    assert split(times, 9)[6:] == [[], [], []]  # more shards than scenarios: some empty
    tied = {"x": 5.0, "w": 5.0, "v": 5.0}  # ties: by name, to the lower share
    assert split(tied, 2) == [["v", "x"], ["w"]]


def test_the_librarys_shards_together_run_every_scenario_exactly_once() -> None:
    names = [p.stem for p in paths.library()]
    times = load_durations()
    assert set(times) >= set(names), f"untimed: {sorted(set(names) - set(times))}"
    timed = {n: times[n] for n in names}
    for count in (2, 3, 4):
        shares = [share_of(names, Shard(k, count), times) for k in range(1, count + 1)]
        assert sorted(n for share in shares for n in share) == sorted(names), count
        assert longest_first_broken(timed, shares) == [], count


def longest_first_broken(times: Mapping[str, float], shares: Sequence[Sequence[str]]) -> list[str]:
    """Where ``shares`` are not longest-first's split of ``times`` (name -> seconds): each
    scenario must be in the share that had the least time of the scenarios before it (longer,
    or as long and named before), the lower share of those tied."""
    order = sorted(times, key=lambda n: (-times[n], n))
    rank = {n: i for i, n in enumerate(order)}
    where = {n: k for k, share in enumerate(shares) for n in share}
    broken = []
    for name in order:
        # rounded: a share's names come in another order than the split added them in
        before = [round(sum(times[n] for n in s if rank[n] < rank[name]), 6) for s in shares]
        least = min(range(len(shares)), key=lambda k: (before[k], k))
        if where[name] != least:
            broken.append(f"{name} in share {where[name] + 1}, not {least + 1}: had {before}")
    return broken


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_a_shard_that_is_not_k_of_n_is_refused(text: str) -> None:
    with pytest.raises(BadInput, match="K/N with 1 <= K <= N"):
        Shard.parse(text)


def test_the_cli_refuses_a_bad_shard_with_exit_2_and_starts_nothing(tmp_path: Path) -> None:
    """The matrix's own options are refused before a scenario is checked against the backend:
    that check is a Kafka Connect JVM per connect scenario of the library."""
    library = [load_scenario(p) for p in paths.library()]
    assert any(get_runtime(r).connect for s in library for r, _v in s.lanes)  # what it would run
    done = chaoslab("matrix", "--shard", "3/2", "--together", "0", "--out", "m", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--shard: K/N with 1 <= K <= N (e.g. 1/2), got '3/2'" in done.stderr
    assert "--together must be >= 1, got 0" in done.stderr  # every problem, at once
    assert "Kafka Connect validating the connector configs" not in done.stdout
    assert done.stdout == "" and not (tmp_path / "m").exists()


def test_durations_are_recorded_beside_the_ones_not_measured(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    record_durations(path, {"a": 12.34, "b": 5.0})
    record_durations(path, {"b": 7.0, "c": 0.0})  # 0: no results, not a time
    assert load_durations(path) == {"a": 12.3, "b": 7.0}


def test_an_unreadable_durations_file_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """Not after the runs, when the matrix adds its times to it (a traceback, the runs' times
    lost)."""
    bad = tmp_path / "durations.json"
    for text, why in (('{"baseline": 114.2', "Expecting"), ('{"baseline": "2 min"}', "")):
        bad.write_text(text)
        done = chaoslab("matrix", "baseline", "--durations", str(bad), "--together", "0",
                        "--out", "m", cwd=tmp_path)  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"{bad}: not measured times (a JSON object of scenario names and seconds)" in (
            done.stderr
        )
        assert why in done.stderr and "Traceback" not in done.stderr
        assert "--together must be >= 1, got 0" in done.stderr  # every problem, at once
        assert done.stdout == "" and not (tmp_path / "m").exists()
        assert bad.read_text() == text  # left as it was


def manifest(shard: str, **changed: object) -> Manifest:
    fields: dict[str, object] = {
        "shard": shard,
        "scenarios": (f"s{shard[0]}",),
        "tree": "t1",
        "revision": "r1",
        "options": (("repeat", "1"), ("backend", "local")),
    }
    return Manifest(**{**fields, **changed})  # type: ignore[arg-type]


def test_a_merge_names_every_reason_it_is_refused() -> None:
    a, b, c = Path("a"), Path("b"), Path("c")
    assert merge_problems([(a, manifest("1/2")), (b, manifest("2/2"))]) == []
    said = merge_problems([
        (a, manifest("1/3")),
        (b, manifest("1/3", tree="t2", revision="r2", options=(("seed", "7"),))),
        (c, None),
    ])  # fmt: skip
    assert said == [
        f"{c}: not a matrix directory (no {MANIFEST})",
        f"{b}: another tree of the lab (r2, t2) than {a} (r1, t1)",
        f"{b}: run with seed 7, {a} with repeat 1, backend local",
        "shard 1/3 given twice",
        "shard 2/3, 3/3 missing: merge every shard's directory",
    ]
    assert merge_problems([(a, manifest("1/2")), (b, manifest("1/3"))]) == [
        "shards of different splits: 1/2, 1/3"
    ]
    # Two halves of different lists of scenarios: every shard is there, and still no matrix.
    assert merge_problems([
        (a, manifest("1/2", split_of=("s1", "s2"))),
        (b, manifest("2/2", split_of=("s3", "s2"))),
    ]) == [f"{b}: a shard of 2 scenarios (s3, s2), {a} of 2 scenarios (s1, s2)"]  # fmt: skip
    # Halves of one list split by different times (one shard after another on one machine,
    # each writing the times the next splits by): one scenario twice, one in none.
    why = (
        "the shards were split by different measured times (run each with the same durations.json)"
    )
    split = ("s1", "s2", "s3")
    assert merge_problems([
        (a, manifest("1/2", split_of=split, scenarios=("s1", "s2"))),
        (b, manifest("2/2", split_of=split, scenarios=("s2", "s3/seed-1", "s3/seed-2"))),
    ]) == [f"s2 ran in shards 1/2, 2/2: {why}"]  # fmt: skip
    assert merge_problems([
        (a, manifest("1/2", split_of=split, scenarios=("s1",))),
        (b, manifest("2/2", split_of=split, scenarios=("s3",))),
    ]) == [f"s2 in no shard: {why}"]  # fmt: skip


def test_the_cli_refuses_a_merge_of_other_trees_with_exit_2(tmp_path: Path) -> None:
    for k, tree in ((1, "t1"), (2, "t2")):
        (tmp_path / f"shard-{k}").mkdir()
        manifest(f"{k}/2", tree=tree).write(tmp_path / f"shard-{k}")
    done = chaoslab("report", "shard-1", "shard-2", "--out", "merged", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "another tree of the lab (r1, t2)" in done.stderr
    assert not (tmp_path / "merged").exists()


def test_a_merge_names_a_missing_directory_and_an_unreadable_manifest_once_each(
    tmp_path: Path,
) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / MANIFEST).write_text("{not json")
    done = chaoslab("report", "broken", "gone", "--out", "merged", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stderr
    assert f"broken/{MANIFEST}: not a matrix's {MANIFEST}" in said
    assert said.count("gone") == 1 and "gone: no such directory" in said
    assert "Traceback" not in said and not (tmp_path / "merged").exists()


# No fault, yet the naive consumer is expected to store duplicates: its expectation fails.
EXPECTS_DUPLICATES = """\
name: expects-duplicates
description: No fault, yet duplicates are expected of the naive consumer; it fails.
seed: 3
workload: {events: 300, keys: 50, partitions: 3}
runtimes: [listener]
variants: [naive]
expect:
  naive: {duplicates: ">0"}
"""
# Its consumers are given no time to get ready, as those that never catch up: the run errors
# (a RunTimeout, the matrix's result with its error), judged nothing.
NEVER_READY = """\
name: never-ready
description: Its consumers have no time to get ready; the run errors, with no verdict.
seed: 3
workload: {events: 300, keys: 50, partitions: 3}
runtimes: [listener]
pipeline: {timeout_s: 0}
variants: [naive]
expect:
  naive: {duplicates: 0}
"""


def test_shards_merged_equal_one_matrix_in_verdicts_failures_and_exit_code(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    """baseline, a scenario whose expectation fails and one whose run errors, small, on the
    listener: one matrix of all three, and splits of them in two shards, each merged. A merge
    carries every verdict, and exits 1 for a failed scenario, for an errored one and for one
    that left no results.json - each merged beside passing runs only, so each alone fails it."""
    (tmp_path / "expects-duplicates.yaml").write_text(EXPECTS_DUPLICATES)
    (tmp_path / "never-ready.yaml").write_text(NEVER_READY)
    common = ("--runtime", "listener", "--events", "300", "--env", str(scenario_env.directory))

    def matrix(out: str, *args: str, code: int) -> dict[str, str]:
        done = chaoslab("matrix", *args, *common, "--out", out, cwd=tmp_path, timeout=900)
        assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
        return verdicts(tmp_path / out)

    def shards(name: str, *args: str, failing: str = "") -> dict[str, str]:
        """Shards 1/2 and 2/2 of the scenarios ``args``, in ``name-1`` and ``name-2``; each
        exits 1 where it ran ``failing``."""
        found: dict[str, str] = {}
        for k in (1, 2):
            ran = share_of([Path(a).stem for a in args], Shard(k, 2), load_durations())
            share = matrix(f"{name}-{k}", *args, "--shard", f"{k}/2", code=int(failing in ran))
            assert list(share) == sorted(ran) and not set(share) & set(found)
            found |= share
        return found

    def merge(name: str, code: int, out: str = "") -> str:
        """``name-1`` and ``name-2`` merged into ``out`` (default: ``name``); its report."""
        out = out or name
        done = chaoslab("report", f"{name}-1", f"{name}-2", "--out", out, cwd=tmp_path)
        assert done.returncode == code, done.stdout + done.stderr
        return (tmp_path / out / REPORT_MD).read_text()

    whole = matrix("whole", "baseline", "expects-duplicates.yaml", "never-ready.yaml", code=1)
    assert whole["expects-duplicates"] == "listener/naive=fail", whole
    never = "error: the consumers of every lane not ready within 0s: listener/naive"
    assert whole["never-ready"] == never, whole

    # Every run passed: exit 0. Shard 2/2 of one scenario runs nothing.
    passed = shards("pass", "baseline")
    page = merge("pass", code=0)
    assert "# Scenario matrix: pass" in page and "## Shards" in page
    assert f"* shard 1/2 ({tmp_path / 'pass-1'}): baseline" in page
    assert f"* shard 2/2 ({tmp_path / 'pass-2'}): nothing" in page
    assert junit(tmp_path / "pass") == {"baseline": ("0", "0", "")}

    # A failed expectation: exit 1, its verdict carried.
    failed = shards("fail", "expects-duplicates.yaml", failing="expects-duplicates")
    page = merge("fail", code=1)
    assert "# Scenario matrix: FAIL" in page and "1 failed their expectations." in page
    assert "[expects-duplicates](" in page and "): FAIL: No fault" in page
    assert junit(tmp_path / "fail") == {"expects-duplicates": ("1", "0", "expectation")}

    # A run that errored, in one shard, and baseline passing in the other: exit 1.
    errored = shards("error", "baseline", "never-ready.yaml", failing="never-ready")
    assert passed == {"baseline": whole["baseline"]} and {**failed, **errored} == whole
    page = merge("error", code=1)
    assert "0 failed their expectations, 1 left no results." in page
    assert "[never-ready](" in page and "): NO RESULTS: Its consumers" in page
    assert junit(tmp_path / "error") == {
        "baseline": ("0", "0", ""),
        "never-ready": ("0", "1", "no-results"),
    }

    # A shard's machine died mid-run: the run's folder has no results.json. Exit 1, named.
    (run,) = tmp_path.glob("error-?/never-ready")
    (run / RESULTS).unlink()
    page = merge("error", code=1, out="error-again")
    assert f"no results: {run / RESULTS}: no results.json in this run directory" in page
    assert junit(tmp_path / "error-again")["never-ready"] == ("0", "1", "no-results")
    # Each shard says what it ran, of which tree.
    assert json.loads((tmp_path / "error-1" / MANIFEST).read_text())["tree"] == tree_id()


def junit(directory: Path) -> dict[str, tuple[str, str, str]]:
    """Each testsuite of ``directory``'s junit.xml: its failures, its errors, and the type of
    its failures and errors."""
    found = {}
    for suite in ElementTree.parse(directory / "junit.xml").getroot().iter("testsuite"):
        kinds = {e.get("type", "") for e in [*suite.iter("failure"), *suite.iter("error")]}
        found[suite.get("name", "")] = (
            suite.get("failures", ""),
            suite.get("errors", ""),
            ",".join(sorted(kinds)),
        )
    return found


def verdicts(directory: Path) -> dict[str, str]:
    """Each scenario's verdict per runtime/variant, or its error, from its results.json."""
    found = {}
    for path in sorted(directory.glob(f"*/{RESULTS}")):
        raw = json.loads(path.read_text())
        cells = sorted(f"{r['runtime']}/{r['variant']}={r['expectation']}" for r in raw["results"])
        error = raw.get("error", "").split(" (see ")[0]  # not where its logs are
        found[raw["scenario"]["name"]] = "; ".join(cells) or f"error: {error}"
    return found
