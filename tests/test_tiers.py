"""The suite's two tiers (tests/tiers.py, docs/ci.md): `make test` keeps a test of every library
scenario, every notebook and the containers backend; `make library` has every scenario at full
size and every notebook at its own parameters; its shards share it out, each test once."""

from __future__ import annotations

import json
import subprocess
import sys

from harness.paths import project_root
from harness.run.shards import Shard
from tests.tiers import TIMES, load_times, share

# Collects each selection in one process (the modules imported once), each test's id and
# whether it is of the library tier.
COLLECT = """
import json, sys, pytest

class Ids:
    def __init__(self):
        self.ids = []
    def pytest_collection_finish(self, session):
        self.ids = [[i.nodeid, i.get_closest_marker("library") is not None] for i in session.items]

found = {}
for name, args in json.loads(sys.argv[1]).items():
    ids = Ids()
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *args], plugins=[ids])
    assert code == 0, (name, code)
    found[name] = ids.ids
print("IDS " + json.dumps(found))
"""


def collected(**selections: list[str]) -> dict[str, list[tuple[str, bool]]]:
    done = subprocess.run(
        [sys.executable, "-c", COLLECT, json.dumps(selections)],
        cwd=project_root(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("IDS ")]
    return {k: [(i, lib) for i, lib in v] for k, v in json.loads(line[4:]).items()}


def test_each_tier_holds_what_it_must_and_the_shards_share_out_the_library() -> None:
    runs = collected(
        every=[], test=["-m", "not library"], library=["-m", "library"],
        first=["-m", "library", "--shard", "1/2"], second=["-m", "library", "--shard", "2/2"],
    )  # fmt: skip
    every = {i for i, _ in runs["every"]}
    test = {i for i, _ in runs["test"]}
    library = {i for i, _ in runs["library"]}
    # Between them the two tiers run every test, once: the marker is the boundary.
    assert test | library == every and not test & library
    assert library == {i for i, lib in runs["every"] if lib}
    # The shards share the library out, each test once, as the split by measured times says.
    first, second = {i for i, _ in runs["first"]}, {i for i, _ in runs["second"]}
    assert first | second == library and not first & second and first and second
    assert first == share(sorted(library), Shard(1, 2), load_times(TIMES))

    scenarios = sorted(p.stem for p in (project_root() / "scenarios").glob("*.yaml"))
    cut = "tests/test_library.py::test_a_library_scenario_holds_its_expectations[{}]"
    whole = "tests/test_library.py::test_a_library_scenario_at_full_size_holds_its_expectations[{}]"
    assert {cut.format(s) for s in scenarios} <= test, "a scenario without its cut in make test"
    assert {whole.format(s) for s in scenarios} <= library
    notebooks = sorted(p.stem for p in (project_root() / "notebooks").glob("[0-9]*.ipynb"))
    run = "tests/test_notebooks.py::test_a_notebook_runs_and_its_expectations_hold[{}]"
    own = (
        "tests/test_notebooks.py::test_a_notebook_at_its_own_parameters_runs_and_its_"
        "expectations_hold[{}]"
    )
    quickstart = (
        "tests/test_notebooks.py::test_quickstart_runs_in_the_jupyter_server_make_lab_starts"
    )
    assert {run.format(n) for n in notebooks[1:]} | {quickstart} <= test
    assert notebooks[0].startswith("01") and {own.format(n) for n in notebooks} <= library
    smoke = (
        "tests/test_containers.py::"
        "test_an_environment_in_containers_runs_a_cut_and_leaves_nothing_behind"
    )
    assert smoke in test
