"""The library across machines: ``chaoslab matrix --shard K/N`` runs a deterministic share of
the scenarios, balanced by their measured times; ``chaoslab report DIR...`` merges the shards'
directories, and refuses directories that do not belong together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import paths
from harness.environment.local import LocalEnvironment
from harness.errors import BadInput
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
from tests.support import chaoslab


def test_a_split_is_balanced_deterministic_and_runs_each_scenario_once() -> None:
    times = {"a": 300.0, "b": 200.0, "c": 100.0, "d": 100.0, "e": 90.0, "f": 10.0}
    shares = split(times, 2)
    assert sorted(n for s in shares for n in s) == sorted(times)
    loads = [sum(times[n] for n in s) for s in shares]
    assert abs(loads[0] - loads[1]) <= 100  # the greedy's bound: the smallest-but-one
    assert split(dict(reversed(times.items())), 2) == shares  # not the mapping's order
    assert split(times, 9)[6:] == [[], [], []]  # more shards than scenarios: some empty


def test_the_librarys_shards_together_run_every_scenario_exactly_once() -> None:
    names = [p.stem for p in paths.library()]
    times = load_durations()
    assert set(times) >= set(names), f"untimed: {sorted(set(names) - set(times))}"
    for count in (2, 3, 4):
        ran = [n for k in range(1, count + 1) for n in share_of(names, Shard(k, count), times)]
        assert sorted(ran) == sorted(names), count
        loads = [sum(times[n] for n in share_of(names, Shard(k, count), times))
                 for k in range(1, count + 1)]  # fmt: skip
        assert max(loads) - min(loads) <= max(times.values()), (count, loads)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_a_shard_that_is_not_k_of_n_is_refused(text: str) -> None:
    with pytest.raises(BadInput, match="K/N with 1 <= K <= N"):
        Shard.parse(text)


def test_the_cli_refuses_a_bad_shard_with_exit_2_and_starts_nothing(tmp_path: Path) -> None:
    done = chaoslab("matrix", "--shard", "3/2", "--out", "m", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--shard: K/N with 1 <= K <= N (e.g. 1/2), got '3/2'" in done.stderr
    assert not (tmp_path / "m").exists() and "starting" not in done.stdout


def test_durations_are_recorded_beside_the_ones_not_measured(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    record_durations(path, {"a": 12.34, "b": 5.0})
    record_durations(path, {"b": 7.0, "c": 0.0})  # 0: no results, not a time
    assert load_durations(path) == {"a": 12.3, "b": 7.0}


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


def test_two_shards_merged_equal_one_matrix_in_scenarios_and_verdicts(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    """Three scenarios, small, on the listener: one matrix of all three, and shards 1/2 and
    2/2 of them, merged."""
    chosen = ("baseline", "producer-resend", "poison-records")
    common = ("--runtime", "listener", "--events", "800", "--env", str(scenario_env.directory))

    def matrix(out: str, *more: str) -> dict[str, str]:
        done = chaoslab("matrix", *chosen, *common, *more, "--out", out, cwd=tmp_path, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return verdicts(tmp_path / out)

    whole = matrix("whole")
    one, two = matrix("shard-1", "--shard", "1/2"), matrix("shard-2", "--shard", "2/2")
    assert one and two and not set(one) & set(two)
    merged = chaoslab("report", "shard-1", "shard-2", "--out", "merged", cwd=tmp_path)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert {**one, **two} == whole
    page = (tmp_path / "merged" / REPORT_MD).read_text()
    assert "# Scenario matrix: pass" in page and "## Shards" in page
    for k, share in ((1, one), (2, two)):
        assert f"* shard {k}/2 ({tmp_path / f'shard-{k}'}): {', '.join(share)}" in page
    assert (tmp_path / "merged" / "junit.xml").read_text().count("<testsuite ") == 3
    # Each shard says what it ran, of which tree.
    assert json.loads((tmp_path / "shard-1" / MANIFEST).read_text())["tree"] == tree_id()


def verdicts(directory: Path) -> dict[str, str]:
    """Each scenario's verdict per runtime/variant, from its results.json."""
    found = {}
    for path in sorted(directory.glob(f"*/{RESULTS}")):
        raw = json.loads(path.read_text())
        cells = sorted(f"{r['runtime']}/{r['variant']}={r['expectation']}" for r in raw["results"])
        found[raw["scenario"]["name"]] = "; ".join(cells)
    return found
