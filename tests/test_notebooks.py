"""The notebooks as regression tests: papermill runs each, and the command judges them by the
expectations they recorded - not by having run to the end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import papermill
import pytest

from harness.environment import LocalEnvironment
from harness.environment.readiness import NotReady, wait_for
from tests.support import chaoslab

NOTEBOOKS = sorted(Path("notebooks").glob("[0-9]*.ipynb"))


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
    assert [p.stem[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05"]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code[0].metadata.get("tags") == ["parameters"], path
        assert all(not c.outputs and c.execution_count is None for c in code), path
        assert nb.metadata.kernelspec.name == "python3", path


@pytest.mark.servers
def test_every_notebook_runs_and_its_expectations_hold(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    # From an unrelated folder; each kernel runs in notebooks/, as JupyterLab starts it.
    out = tmp_path / "executed"
    result = chaoslab(
        "notebooks", "--env", str(scenario_env.directory), "--out", str(out), "-p", "events", "400",
        timeout=1800, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "5 of 5 notebooks passed" in result.stdout
    for path in NOTEBOOKS:
        recorded = json.loads((out / path.stem / "results.json").read_text())
        assert recorded["passed"] and len(recorded["expectations"]) >= 2, path.stem
        assert (out / path.name).exists()
        assert f"this notebook's runs go to {out / path.stem}" in outputs(out / path.name)
    assert not (NOTEBOOKS[0].parent / "runs").exists()  # nothing landed beside the notebooks

    # 03 shows the duplicate groups, the repair's counts, and the index afterwards.
    postmortem = outputs(out / "03-postmortem-msk-rolling-upgrade.ipynb")
    groups = re.search(r"duplicate groups by number of copies: \{(.*?)\}", postmortem)
    assert groups and "2:" in groups.group(1) and "3:" in groups.group(1), postmortem[-2000:]
    before_after = re.search(r"documents before: (\d+), after: (\d+)", postmortem)
    assert before_after and int(before_after.group(1)) > int(before_after.group(2))
    assert "pass: the unique index on (order_id, version) is in place" in postmortem
    assert "pass: MongoDB now refuses a duplicate with E11000" in postmortem


def test_a_notebook_whose_expectation_fails_fails_the_command(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    parameters = nbformat.v4.new_code_cell('out_dir = "x"')
    parameters.metadata["tags"] = ["parameters"]
    nb.cells = [
        parameters,
        nbformat.v4.new_code_cell(
            "import os\n"
            "from harness.lab import Checks\n"
            "checks = Checks('broken', out_dir)\n"
            "checks.expect('the kernel runs in the notebook folder', "
            f"os.getcwd() == {str(tmp_path)!r})\n"
            "checks.expect('two and two make four', 2 + 2 == 4)\n"
            "checks.expect('two and two make five', 2 + 2 == 5, 'got 4')\n"
            "checks.save()"
        ),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = tmp_path / "99-broken.ipynb"
    nbformat.write(nb, path)
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


def test_a_notebook_that_stops_is_an_error_in_junit(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    parameters = nbformat.v4.new_code_cell('out_dir = "x"')
    parameters.metadata["tags"] = ["parameters"]
    nb.cells = [parameters, nbformat.v4.new_code_cell("raise RuntimeError('the lab broke')")]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = tmp_path / "98-stops.ipynb"
    nbformat.write(nb, path)
    result = chaoslab("notebooks", str(path), "--out", str(tmp_path / "out"), timeout=300)
    assert result.returncode == 1
    (suite,) = ET.parse(tmp_path / "out" / "junit.xml").getroot().findall("testsuite")
    (case,) = suite.findall("testcase")
    error = case.find("error")
    assert error is not None and "raised RuntimeError: the lab broke" in error.get("message", "")
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")


def test_jupyterlab_starts_with_the_notebooks_kernel(tmp_path: Path) -> None:
    log = tmp_path / "lab.log"
    token = "chaoslab-test"
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1", "--port", "0",
            f"--IdentityProvider.token={token}", "--notebook-dir", "notebooks"]  # fmt: skip
    if os.geteuid() == 0:  # CI containers run as root, which JupyterLab refuses by default
        argv.append("--allow-root")
    with log.open("w") as sink:
        lab = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path)},
        )
    try:

        def url() -> str:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text())
            if not found:
                raise NotReady("JupyterLab has not printed its address yet")
            return f"http://127.0.0.1:{found.group(1)}"

        base = wait_for(url, what="JupyterLab", timeout=90)
        with urllib.request.urlopen(f"{base}/api/kernelspecs?token={token}", timeout=10) as r:
            specs = json.load(r)
        python3 = specs["kernelspecs"]["python3"]["spec"]
        # The kernel runs the project's interpreter (registered by the Makefile), where the
        # harness is importable.
        assert Path(python3["argv"][0]).absolute() == Path(sys.executable).absolute()
        with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=10) as r:
            assert r.status == 200
    finally:
        lab.terminate()
        lab.wait(timeout=30)


@pytest.mark.servers
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
