"""The demo (``chaoslab demo``): the library's scenarios that have a demo cut, each cut to the
variants that show its difference - every seed's headline incident, both of the lab's runtimes
and a Kafka Connect lane - and the cut's section checked like the rest of a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness import paths
from harness.pipeline.runtimes import get_runtime
from harness.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from tests.support import chaoslab

SEEDS = {f"{n:03d}" for n in range(5)}  # the write-ups in ../shared/seeds


def demo() -> list[Scenario]:
    return [s.cut("demo") for s in map(load_scenario, paths.library()) if s.demo is not None]


def test_the_demo_shows_every_seeds_incident_on_both_runtimes_and_connect() -> None:
    cut = demo()
    # Each library scenario's description opens with the write-up it reproduces.
    told = {m.group(1) for s in cut if (m := re.search(r"[Ss]eed (00\d)", s.description))}
    assert told == SEEDS, sorted(SEEDS - told)
    runtimes = {r for s in cut for r, _spec in s.lanes}
    assert {"listener", "spark"} <= runtimes, runtimes
    assert any(get_runtime(r).connect for r in runtimes), runtimes
    assert len(cut) < len(paths.library())


def test_a_cut_keeps_its_whole_scenarios_expectations_and_the_demo_says_what_it_cut() -> None:
    for scenario in demo():
        whole = load_scenario(scenario.path)
        # The description says what the cut leaves out (the whole scenario is the library's).
        assert "The demo" in scenario.description, scenario.name
        # Every lane the cut runs is judged, by the whole scenario's expectations of it.
        for runtime, spec in scenario.lanes:
            kept = scenario.expectations_for(spec, runtime)
            assert kept, (scenario.name, runtime, spec.label)
            assert kept == whole.expectations_for(spec, runtime), (scenario.name, spec.label)


CUTS = """\
name: cuts
runtimes: [listener, spark]
workload: {events: 1000}
variants: [naive, idempotent, {name: dedup-log, expiry_s: 5}]
"""


def lanes(scenario: Scenario) -> list[str]:
    return [f"{runtime}/{spec.label}" for runtime, spec in scenario.lanes]


WHOLE = [f"{rt}/{v}" for rt in ("listener", "spark")
         for v in ("naive", "idempotent", "dedup-log[expiry_s=5]")]  # fmt: skip
NAIVE = ["listener/naive", "spark/naive"]


@pytest.mark.parametrize(
    ("sections", "demo_cut", "ci_cut"),
    [
        # No section: the scenario whole, for both.
        ("", (1000, WHOLE), (1000, WHOLE)),
        # The demo's cut only: the suite's is the demo's.
        ("demo: {variants: [naive], events: 300}", (300, NAIVE), (300, NAIVE)),
        # A suite's cut of its own; no demo: section is the scenario whole for the demo.
        ("ci: {runtimes: [listener], events: 200}", (1000, WHOLE), (200, WHOLE[:3])),
        (
            "demo: {variants: [idempotent]}\nci: {variants: ['dedup-log[expiry_s=5]']}",
            (1000, ["listener/idempotent", "spark/idempotent"]),
            (1000, ["listener/dedup-log[expiry_s=5]", "spark/dedup-log[expiry_s=5]"]),
        ),
        # An empty section is the scenario whole.
        ("demo: {variants: [naive]}\nci: {}", (1000, NAIVE), (1000, WHOLE)),
    ],
)
def test_each_cut_takes_its_own_section_and_the_suites_falls_back_to_the_demos(
    sections: str, demo_cut: tuple[int, list[str]], ci_cut: tuple[int, list[str]]
) -> None:
    whole = parse_scenario(yaml.safe_load(f"{CUTS}{sections}"))
    for which, expected in (("demo", demo_cut), ("ci", ci_cut)):
        cut = whole.cut(which)
        assert (cut.workload.events, lanes(cut)) == expected, which
        assert cut.expect == whole.expect and cut.faults == whole.faults, which


def test_every_library_scenario_has_a_cut_for_the_suite() -> None:
    """`make test` runs each library scenario at its cut (tests/test_library.py): a file
    without one would run whole there, or its section would be forgotten."""
    lacking = [p.stem for p in paths.library() if load_scenario(p).section("ci") is None]
    assert lacking == [], f"give these a ci: (or demo:) section: {lacking}"


FAULTS = [
    {"kind": "consumer-kill", "name": "first", "at": 1},
    {"kind": "consumer-kill", "name": "second", "after": "first", "at": 1},
    {"kind": "poison", "name": "burst", "start_event": 10, "events": 20, "fraction": 0.5},
]


def minimal(section: object, which: str = "demo") -> dict[str, object]:
    return {"name": "d", "runtimes": ["listener"], "variants": ["naive", "idempotent"],
            "faults": FAULTS, which: section}  # fmt: skip


@pytest.mark.parametrize("which", ["demo", "ci"])
@pytest.mark.parametrize(
    ("section", "where", "why"),
    [
        ({"events": 0}, "events", "must be >= 1"),
        ({"variants": ["nave"]}, "variants[0]", "no such variant"),
        ({"runtimes": ["spark"]}, "runtimes[0]", "not one of its runtimes"),
        ({"speed": 2}, "speed", "unknown field"),
        ({"faults": ["third"]}, "faults[0]", "no such fault (have: ['burst', 'first', 'second'])"),
        ({"faults": ["second"]}, "faults[0]", "starts after 'first', which the cut leaves out"),
    ],
)
def test_a_bad_cut_section_is_named(section: object, where: str, why: str, which: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(minimal(section, which))
    said = str(raised.value)
    assert f"{which}.{where}" in said and why in said, said


def test_a_cut_keeps_the_faults_it_names_and_their_bursts_of_the_workload() -> None:
    whole = parse_scenario(minimal({"faults": ["first", "second"]}, "ci"))
    assert len(whole.workload.bursts) == 1
    cut = whole.cut("ci")
    assert [f.name for f in cut.faults] == ["first", "second"] and cut.workload.bursts == ()
    kept = parse_scenario(minimal({"faults": ["burst"]}, "ci")).cut("ci")
    assert [f.name for f in kept.faults] == [
        "burst"
    ] and kept.workload.bursts == whole.workload.bursts


def test_matrix_demo_of_files_without_a_cut_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    whole = parse_scenario(minimal({}))  # an empty cut: the scenario whole
    assert whole.demo is not None and whole.cut("demo") == whole
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in minimal({}).items() if k != "demo"}))
    done = chaoslab("matrix", "--demo", str(path), "--out", "out", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "none of the scenarios has a demo: section" in done.stderr
    assert not (tmp_path / "out").exists()
