"""The notebooks as regression tests: papermill runs each, and the command judges them by the
expectations they recorded - not by having run to the end."""

from __future__ import annotations

import json
import re
import sys
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import papermill
import pytest

from harness.environment.local import LocalEnvironment
from tests.jupyter_server import (
    CHROMIUM,
    first_output_image,
    jupyter_server,
    mean_difference,
    quiet_lab_settings,
    run_notebook_cells,
)
from tests.support import SPARK, chaoslab, lacking, processes_started_in
from tests.tiers import LIBRARY

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9]*.ipynb"))
# Cheaper parameters where a notebook's own are a user's: exploring the crash points alone finds
# and shrinks the planted bug in fewer runs (the CLI's explore test draws from three kinds), and
# one replay of the finding says it reproduces (the CLI's test asks two of two; a budget of two
# minutes, tried, left two crashes of the three unshrunk).
SMALLER = {"07-explore": ["-p", "faults", "consumer-crash", "-p", "replays", "1"]}


def outputs(notebook: Path) -> str:
    """Every text the executed notebook printed or displayed."""
    nb = nbformat.read(notebook, as_version=4)
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", ""))
            texts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(texts)


def test_the_notebooks_are_committed_without_outputs() -> None:
    assert [p.stem[:2] for p in NOTEBOOKS] == [
        "01",
        "02",
        "03",
        "04",
        "05",
        "06",
        "07",
        "08",
        "09",
        "10",
    ]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code[0].metadata.get("tags") == ["parameters"], path
        assert all(not c.outputs and c.execution_count is None for c in code), path
        assert nb.metadata.kernelspec.name == "python3", path
        # papermill can read the parameters cell (a quote in a comment once made it give up)
        assert {"env_dir", "out_dir"} <= set(papermill.inspect_notebook(str(path))), path


@pytest.mark.servers
# One test per notebook, so the two workers share them (they are the suite's longest part); the
# one that runs a Spark job waits its turn in the Spark chain.
# (01-quickstart runs in tests of its own: papermill from an unrelated folder, JupyterLab's.)
@pytest.mark.parametrize(
    "notebook",
    [
        pytest.param(p, id=p.stem, marks=[SPARK] if p.stem.startswith("04") else [])
        for p in NOTEBOOKS
        if not p.stem.startswith("01")
    ],
)
def test_a_notebook_runs_and_its_expectations_hold(
    scenario_env: LocalEnvironment, tmp_path: Path, notebook: Path
) -> None:
    # A smaller workload where the notebook takes one (a parameter it does not take is refused).
    parameters = nbformat.read(notebook, as_version=4).cells[1].source
    small = ["-p", "events", "400"] if "\nevents = " in f"\n{parameters}" else []
    check_notebook(scenario_env, tmp_path, notebook, [*small, *SMALLER.get(notebook.stem, [])])


# Every notebook at its own parameters, as a user runs it: the library tier (make library).
@pytest.mark.servers
@LIBRARY
@pytest.mark.timeout(1800)  # explore's notebook: its 4-minute budget, then 5 replays a finding
@pytest.mark.parametrize(
    "notebook",
    [
        pytest.param(p, id=p.stem, marks=[SPARK] if p.stem.startswith("04") else [])
        for p in NOTEBOOKS
    ],
)
def test_a_notebook_at_its_own_parameters_runs_and_its_expectations_hold(
    scenario_env: LocalEnvironment, tmp_path: Path, notebook: Path
) -> None:
    check_notebook(scenario_env, tmp_path, notebook, [])


def check_notebook(
    scenario_env: LocalEnvironment, tmp_path: Path, notebook: Path, parameters: list[str]
) -> None:
    """``chaoslab notebooks`` of one notebook with ``parameters`` (``-p NAME VALUE``...), from
    an unrelated folder (its kernel runs in notebooks/, as JupyterLab starts it): it passes by
    the expectations it recorded, and what a notebook should show, shows."""
    out = tmp_path / "executed"
    result = chaoslab(
        "notebooks", str(notebook), "--env", str(scenario_env.directory), "--out", str(out),
        *parameters, timeout=1800, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 of 1 notebooks passed" in result.stdout
    recorded = json.loads((out / notebook.stem / "results.json").read_text())
    assert recorded["passed"] and len(recorded["expectations"]) >= 2, notebook.stem
    executed = out / notebook.name
    assert f"this notebook's runs go to {out / notebook.stem}" in outputs(executed)
    assert not (NOTEBOOKS_DIR / "runs").exists()  # nothing landed beside the notebooks

    if notebook.stem.startswith("03"):
        # The duplicate groups, the repair's counts, and the index afterwards.
        postmortem = outputs(executed)
        groups = re.search(r"duplicate groups by number of copies: \{(.*?)\}", postmortem)
        assert groups and "2:" in groups.group(1) and "3:" in groups.group(1), postmortem[-2000:]
        before_after = re.search(r"documents before: (\d+), after: (\d+)", postmortem)
        assert before_after and int(before_after.group(1)) > int(before_after.group(2))
        assert "pass: the unique index on (order_id, version) is in place" in postmortem
        assert "pass: MongoDB now refuses a duplicate with E11000" in postmortem
    if notebook.stem.startswith("07"):
        # It finds the planted bug and shrinks it to the one consumer crash.
        explored = outputs(executed)
        assert "pass: the planted bug was found" in explored, explored[-3000:]
        assert "pass: it shrank to the one fault that matters" in explored


def small_notebook(path: Path, code: str, declared: str = "") -> Path:
    """A notebook with a ``parameters`` cell (``out_dir``, and ``declared``) and one cell of
    ``code``."""
    nb = nbformat.v4.new_notebook()
    parameters = nbformat.v4.new_code_cell(f'out_dir = "x"\n{declared}')
    parameters.metadata["tags"] = ["parameters"]
    nb.cells = [parameters, nbformat.v4.new_code_cell(code)]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def test_a_notebook_whose_expectation_fails_fails_the_command(tmp_path: Path) -> None:
    path = small_notebook(
        tmp_path / "99-broken.ipynb",
        "import os\n"
        "from harness.notebooks.lab import Checks\n"
        "checks = Checks('broken', out_dir)\n"
        "checks.expect('the kernel runs in the notebook folder', "
        f"os.getcwd() == {str(tmp_path)!r})\n"
        "checks.expect('two and two make four', 2 + 2 == 4)\n"
        "checks.expect('two and two make five', 2 + 2 == 5, 'got 4')\n"
        "checks.save()",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = chaoslab(
        "notebooks", str(path), "--out", str(tmp_path / "out"), timeout=300, cwd=elsewhere
    )
    assert result.returncode == 1
    assert "FAIL: two and two make five: got 4" in result.stdout
    assert "the kernel runs in the notebook folder" not in result.stdout  # that one held
    assert "0 of 1 notebooks passed" in result.stdout
    # junit.xml: one test case per recorded expectation, named by notebook.
    (suite,) = ET.parse(tmp_path / "out" / "junit.xml").getroot().findall("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("99-broken", "3", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {
        "the kernel runs in the notebook folder",
        "two and two make four",
        "two and two make five",
    }
    assert {c.get("classname") for c in cases.values()} == {"99-broken"}
    assert cases["two and two make four"].find("failure") is None
    failure = cases["two and two make five"].find("failure")
    assert failure is not None and failure.get("message") == "two and two make five: got 4"


def test_each_notebook_gets_the_parameters_it_takes_and_one_none_takes_is_refused(
    tmp_path: Path,
) -> None:
    checked = "from harness.notebooks.lab import Checks\nchecks = Checks('nb', out_dir)\n"
    takes = small_notebook(
        tmp_path / "97-takes.ipynb",
        checked + "checks.expect('events is what -p said', events == 7)\nchecks.save()",
        declared="events = 0",
    )
    other = small_notebook(
        tmp_path / "96-other.ipynb",
        checked + "checks.expect('events is not set', 'events' not in globals())\nchecks.save()",
    )
    out = tmp_path / "out"
    refused = chaoslab("notebooks", str(takes), str(other), "--out", str(out),
                       "-p", "evnets", "7", "-p", "events", "7", "-p", "sed", "2")  # fmt: skip
    assert refused.returncode == 2
    assert (
        "no notebook takes evnets, sed (they take - 97-takes: out_dir, events; 96-other: out_dir)"
        in refused.stderr
    ), refused.stderr
    assert not out.exists()  # nothing ran

    ran = chaoslab("notebooks", str(takes), str(other), "--out", str(out), "-p", "events", "7",
                   timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "96-other does not take events: its own defaults apply" in ran.stdout
    assert "Passed unknown parameter" not in ran.stdout + ran.stderr
    assert "2 of 2 notebooks passed" in ran.stdout


def test_a_notebook_that_stops_is_an_error_in_junit(tmp_path: Path) -> None:
    path = small_notebook(tmp_path / "98-stops.ipynb", "raise RuntimeError('the lab broke')")
    result = chaoslab("notebooks", str(path), "--out", str(tmp_path / "out"), timeout=300)
    assert result.returncode == 1
    (suite,) = ET.parse(tmp_path / "out" / "junit.xml").getroot().findall("testsuite")
    (case,) = suite.findall("testcase")
    error = case.find("error")
    assert error is not None and "raised RuntimeError: the lab broke" in error.get("message", "")
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")


def test_jupyterlab_starts_with_the_notebooks_kernel(tmp_path: Path) -> None:
    with jupyter_server(NOTEBOOKS_DIR, tmp_path) as server:
        python3 = server.call("GET", "api/kernelspecs")["kernelspecs"]["python3"]["spec"]
        # The kernel runs the project's interpreter (registered by the Makefile), where the
        # harness is importable.
        assert Path(python3["argv"][0]).absolute() == Path(sys.executable).absolute()
        with urllib.request.urlopen(server.url("lab"), timeout=10) as r:
            assert r.status == 200


@pytest.mark.servers
def test_quickstart_runs_in_the_jupyter_server_make_lab_starts(tmp_path: Path) -> None:
    """01-quickstart opened and run as a user does in JupyterLab: through the server's REST
    API, its kernel started in notebooks/, the notebook starting its own environment."""
    out = tmp_path / "out"
    before = sorted(NOTEBOOKS_DIR.iterdir())
    with jupyter_server(NOTEBOOKS_DIR, tmp_path) as server:
        run = run_notebook_cells(
            server, "01-quickstart.ipynb", {"events": 400, "out_dir": str(out)}
        )
        assert run.notebook["content"]["metadata"]["kernelspec"]["name"] == "python3"
        assert all(not o.error for o in run.outputs), [o.error for o in run.outputs][-1]
        assert run.kernel, "no kernel process was seen"
    assert server.process.returncode is not None
    assert [p.pid for p in run.kernel if p.is_running()] == []
    assert processes_started_in(out / "env") == []  # the notebook's environment is down too
    assert sorted(NOTEBOOKS_DIR.iterdir()) == before  # no checkpoints, no runs beside them

    recorded = json.loads((out / "results.json").read_text())
    assert recorded["passed"], recorded
    assert "cdc-crash-before-ack: every planned fault fired" in [
        e["name"] for e in recorded["expectations"]
    ]
    assert f"this notebook's runs go to {out}" in run.text
    assert "pass: the crash duplicated naive's interrupted batches" in run.text
    assert "pass: transactional kept one copy of each change through the crashes" in run.text
    timeline_png = next(out.glob("cdc-crash-before-ack-*")) / "timeline.png"
    shown = [o.images for o in run.outputs if o.images]
    assert shown and timeline_png.read_bytes() in shown[0]  # the timeline, shown inline


@pytest.mark.servers
# The quickstart's second run (its first is the JupyterLab test above; every notebook of make
# test runs from an unrelated folder), with the browser's picture of it: the library tier's.
@LIBRARY
def test_a_notebook_runs_with_its_kernel_in_an_unrelated_folder(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    papermill.execute_notebook(
        str(NOTEBOOKS[0]),
        str(tmp_path / "01.ipynb"),
        parameters={"events": 400, "env_dir": str(scenario_env.directory), "out_dir": str(out)},
        kernel_name="python3",
        cwd=str(elsewhere),
        progress_bar=False,
    )
    recorded = json.loads((out / "results.json").read_text())
    assert recorded["passed"], recorded
    names = [e["name"] for e in recorded["expectations"]]
    assert "cdc-crash-before-ack: every planned fault fired" in names
    assert list(elsewhere.iterdir()) == []  # nothing landed where the kernel ran

    # The executed notebook, opened in JupyterLab in a browser, shows the run's timeline.
    if not CHROMIUM.exists():
        lacking(f"{CHROMIUM} is missing (make test installs Debian's chromium)")
    home = tmp_path / "jupyter"
    quiet_lab_settings(home / "config")
    with jupyter_server(tmp_path, home) as server:
        shown = first_output_image(server.url("lab/tree/01.ipynb"), home)
    timeline = next(out.glob("cdc-crash-before-ack-*")) / "timeline.png"
    anomalies = timeline.with_name("anomalies.png")
    (tmp_path / "shown.png").write_bytes(shown)  # to look at when this fails
    same, other = mean_difference(shown, timeline), mean_difference(shown, anomalies)
    assert same < 3.0, same  # the same picture (0.0 when shown at full size)
    assert other > 10.0, other  # and the check tells pictures apart


@pytest.mark.servers
def test_a_notebook_too_small_for_its_faults_says_so_before_it_runs(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = chaoslab(
        "notebooks", "01", "--env", str(lab_env.directory), "--out", str(out), "-p", "events", "1",
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        "cdc-crash-before-ack.yaml: faults[0]: consumer-crash#1 is planned at batch 2, and a "
        "consumer gets at most 1 of the 1 events" in result.stdout
    ), result.stdout[-3000:]
    # Refused before it started: no run directory for the crash scenario.
    assert not list((out / "01-quickstart").glob("cdc-crash-before-ack-*"))
    (suite,) = ET.parse(out / "junit.xml").getroot().findall("testsuite")
    assert suite.get("errors") == "1"
