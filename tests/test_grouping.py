"""The suite's own setting: tests marked SPARK (tests/support.py) run one after another on one
xdist worker. pytest-xdist's grouping broke silently once (pytest 9.2, pytest-xdist#1386):
the Spark tests ran side by side and starved each other; this catches it coming back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = """
import os, time, pytest
G = pytest.mark.xdist_group("spark")

@pytest.mark.parametrize("n", [pytest.param(n, marks=[G] if n % 2 else []) for n in range(6)])
def test_param(n):
    print("RAN", n, os.environ["PYTEST_XDIST_WORKER"])
    time.sleep(0.2)

@G
def test_function():
    print("RAN f", os.environ["PYTEST_XDIST_WORKER"])
"""


def test_tests_of_the_spark_group_share_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-rP",
         "-p", "no:cacheprovider", "test_grouped.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    ran = dict(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("RAN"))
    assert set(ran) == {"0", "1", "2", "3", "4", "5", "f"}, done.stdout[-2000:]
    grouped = {ran[k] for k in ("1", "3", "5", "f")}
    assert len(grouped) == 1, f"the spark group ran on {sorted(grouped)}: {ran}"
