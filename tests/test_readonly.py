"""A directory made unwritable for every process (root included) and back: how the Spark
runtime's checkpoint commit fails for real. No servers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.environment import readonly


def test_a_held_directory_refuses_every_write_until_released(tmp_path: Path) -> None:
    commits = readonly.commit_log(tmp_path / "query")
    readonly.hold(commits)
    # Another process - as Spark's JVM would be - cannot create a file in it either.
    out = subprocess.run(["touch", str(commits / "3")], capture_output=True, text=True)
    assert out.returncode != 0
    assert "Operation not permitted" in out.stderr or "Permission denied" in out.stderr
    with pytest.raises(OSError):
        (commits / "4").write_text("{}")
    readonly.release(commits)
    (commits / "4").write_text("{}")
    assert (commits / "4").exists()


def test_held_commit_logs_are_released_so_an_environment_can_be_wiped(tmp_path: Path) -> None:
    root = tmp_path / "spark" / "checkpoints"
    held = [readonly.commit_log(root / name) for name in ("run-a-naive", "run-a-idempotent")]
    for commits in held:
        readonly.hold(commits)
        (commits.parent / "offsets").mkdir()
    # What a harness killed in the middle of the fault leaves: nothing can delete it.
    shutil.rmtree(root, ignore_errors=True)
    assert all(commits.exists() for commits in held)
    readonly.release_under(root)
    shutil.rmtree(root)
    assert not root.exists()


def test_releasing_what_is_not_there_is_nothing(tmp_path: Path) -> None:
    readonly.release(tmp_path / "gone" / "commits")
    readonly.release_under(tmp_path / "no-checkpoints")
