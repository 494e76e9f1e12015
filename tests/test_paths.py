"""The project's files are found wherever the lab runs: JupyterLab starts a notebook's kernel
in the notebook's folder, and people run the CLI from anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import paths
from harness.errors import BadInput
from harness.notebooks.lab import make_scenario

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "scenarios" / "baseline.yaml"


@pytest.fixture(params=["root", "notebooks", "elsewhere"])
def somewhere(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    where = {"root": ROOT, "notebooks": ROOT / "notebooks", "elsewhere": tmp_path}
    monkeypatch.chdir(where[request.param])
    return where[request.param]


@pytest.mark.parametrize("ref", ["baseline", "baseline.yaml", "scenarios/baseline.yaml"])
def test_a_scenario_is_found_by_name_or_path_from_any_folder(somewhere: Path, ref: str) -> None:
    assert paths.find_scenario(ref).resolve() == BASELINE
    scenario = make_scenario(ref, events=50)
    assert scenario.name == "baseline" and scenario.workload.events == 50


def test_a_file_in_the_current_folder_comes_before_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "baseline.yaml").write_text("name: mine\nvariants: [naive]\n")
    assert paths.find_scenario("baseline.yaml") == Path("baseline.yaml")
    assert make_scenario("baseline.yaml").name == "mine"
    assert make_scenario("baseline").name == "baseline"  # a bare name is the library's


def test_the_project_folders_do_not_depend_on_the_current_folder(somewhere: Path) -> None:
    assert paths.project_root() == ROOT
    assert paths.runs_dir() == ROOT / "runs"
    assert paths.library()[0] == BASELINE
    assert len(paths.library()) >= 8


def test_an_unknown_scenario_names_the_library(somewhere: Path) -> None:
    with pytest.raises(BadInput) as caught:
        paths.find_scenario("basline")
    message = str(caught.value)
    assert message.startswith("basline: no such scenario file")
    assert "library: baseline, cdc-crash-before-ack" in message


def test_chaoslab_home_names_another_project(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "own.yaml").write_text("name: own\nvariants: [naive]\n")
    monkeypatch.setenv(paths.HOME_VAR, str(tmp_path))
    assert paths.find_scenario("own") == tmp_path / "scenarios" / "own.yaml"
    assert paths.runs_dir() == tmp_path / "runs"
