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
    return [s.demo_cut() for s in map(load_scenario, paths.library()) if s.demo is not None]


def test_the_demo_shows_every_seeds_incident_on_both_runtimes_and_connect() -> None:
    cut = demo()
    # Each library scenario's description opens with the write-up it reproduces.
    told = {m.group(1) for s in cut if (m := re.search(r"[Ss]eed (00\d)", s.description))}
    assert told == SEEDS, sorted(SEEDS - told)
    runtimes = {r for s in cut for r, _spec in s.lanes}
    assert {"listener", "spark"} <= runtimes, runtimes
    assert any(get_runtime(r).connect for r in runtimes), runtimes
    assert len(cut) < len(paths.library())


def test_a_cut_keeps_its_variants_and_events_and_says_so() -> None:
    for scenario in demo():
        whole = load_scenario(scenario.path)
        assert scenario.demo is not None
        labels = [v.label for v in scenario.variants]
        assert labels == (list(scenario.demo.variants) or [v.label for v in whole.variants])
        assert scenario.workload.events == (scenario.demo.events or whole.workload.events)
        # The description says what the cut leaves out (the whole scenario is the library's).
        assert "The demo" in scenario.description, scenario.name
        # Every lane the cut runs is judged, by the whole scenario's expectations of it.
        for runtime, spec in scenario.lanes:
            kept = scenario.expectations_for(spec, runtime)
            assert kept, (scenario.name, runtime, spec.label)
            assert kept == whole.expectations_for(spec, runtime), (scenario.name, spec.label)


def minimal(section: object) -> dict[str, object]:
    return {"name": "d", "runtimes": ["listener"], "variants": ["naive", "idempotent"],
            "demo": section}  # fmt: skip


@pytest.mark.parametrize(
    ("section", "where", "why"),
    [
        ({"events": 0}, "demo.events", "must be >= 1"),
        ({"variants": ["nave"]}, "demo.variants[0]", "no such variant"),
        ({"runtimes": ["spark"]}, "demo.runtimes[0]", "not one of its runtimes"),
        ({"speed": 2}, "demo.speed", "unknown field"),
    ],
)
def test_a_bad_demo_section_is_named(section: object, where: str, why: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(minimal(section))
    assert where in str(raised.value) and why in str(raised.value), str(raised.value)


def test_matrix_demo_of_files_without_a_cut_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    whole = parse_scenario(minimal({}))  # an empty cut: the scenario whole
    assert whole.demo is not None and whole.demo_cut() == whole
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in minimal({}).items() if k != "demo"}))
    done = chaoslab("matrix", "--demo", str(path), "--out", "out", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "none of the scenarios has a demo: section" in done.stderr
    assert not (tmp_path / "out").exists()
